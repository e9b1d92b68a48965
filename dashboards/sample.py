"""A synthetic result table that exercises every page of the site.

Every row says it is synthetic (``extra.synthetic``): the site labels every page, and claims
never count such rows.

Used by the tests and for previewing the site without running a benchmark
(``python -m equibench.dashboards.sample OUT_DIR``). Times follow a simple model (work x
implementation factor / machine speed) with log-normal noise, so ratios are known.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import numpy as np
import pandas as pd

from equibench import history, results

A100 = "NVIDIA A100-SXM4-80GB"
CPU = "AMD EPYC 7763"
# seconds per work item of e3nn, forward, float32, on the CPU
WORK = {"mace-large": 2e-4, "nequip-water": 4e-6, "mace-large@qm9": 1e-3, "se3t-qm9": 5e-3,
        "mace-qm9": 2e-3, "water-box": 2e-2}
# implementation -> time factor against e3nn
FACTOR = {"e3nn": 1.0, "cuequivariance": 0.5, "openequivariance": 0.1, "basis": 1.0}
DIRECTION_FACTOR = {"forward": 1.0, "backward": 2.5, "train_step": 3.0, "inference": 1.0,
                    "nve": 1.0}
UNITS = {"tp": "products/s", "md": "steps/s"}  # else structures/s
# (host, GPU name, speed over the CPU)
MACHINES = (("cpu-host", "", 1.0), ("gpu-host", A100, 200.0))


def _samples(rng: np.random.Generator, median: float, n: int) -> list[float]:
    return list(median * rng.lognormal(0.0, 0.05, size=n))


def _rows(rng: np.random.Generator, commit: str, run_id: str) -> Iterator[dict]:
    for host, gpu, speed in MACHINES:
        device = "cuda:0" if gpu else "cpu"
        env = dict(run_id=run_id, host=host, cpu_model=CPU, gpu_name=gpu, device=device,
                   git_commit=commit, timestamp="2025-01-01T00:00:00+00:00",
                   threads=2, cpu_count=2, version_torch="2.5.0")
        peaks = {"peak_gflops": 19500.0, "peak_gbps": 2039.0} if gpu else {}
        cases = [("tp", w, i, "default", d, p, b)
                 for w in ("mace-large", "nequip-water")
                 for i in ("e3nn", "cuequivariance", "openequivariance")
                 for d in ("forward", "backward") for p in ("float32", "float64")
                 for b in (64, 256)]
        cases += [("conv", "mace-large@qm9", i, "default", "forward", "float32", b)
                  for i in ("e3nn", "cuequivariance") for b in (8, 32)]
        cases += [("model", "se3t-qm9", "basis", v, "train_step", "float32", b)
                  for v in ("baseline", "nvidia-default") for b in (100, 240)]
        cases += [("model", "mace-qm9", i, "default", "inference", "float32", b)
                  for i in ("e3nn", "openequivariance") for b in (16, 32)]
        cases += [("md", "water-box", i, "default", "nve", p, 20)
                  for i in ("e3nn", "cuequivariance", "openequivariance")
                  for p in ("float32", "float64")]
        for level, workload, impl, variant, direction, precision, batch in cases:
            key = dict(level=level, workload=workload, implementation=impl, variant=variant,
                       direction=direction, precision=precision, batch=batch, **env)
            if impl == "openequivariance" and not gpu:
                yield {**key, "status": "unavailable", "reason": "openequivariance needs a GPU"}
                continue
            factor = FACTOR[impl] * (0.05 if variant == "nvidia-default" else 1.0)
            median = (WORK[workload] * batch * factor * DIRECTION_FACTOR[direction]
                      * (2.0 if precision == "float64" else 1.0) / speed)
            samples = _samples(rng, median, 20)
            # md rows have no cost model, as measured ones: they stay off the roofline.
            flops = {"tp": 3e4 * batch, "md": float("nan")}.get(level, 1e7 * batch)
            extra = {**peaks, "synthetic": True}
            if level == "md":
                extra.update(_md_extra(batch / float(np.median(samples)), precision))
            if level == "model":
                extra["breakdown"] = {"tensor product": 0.6 * median, "radial MLP": 0.25 * median,
                                      "other": 0.15 * median}
            yield {**key, "status": "ok", "time_median_s": float(np.median(samples)),
                   "time_iqr_s": float(np.subtract(*np.percentile(samples, [75, 25]))),
                   "time_samples": samples, "repeats": len(samples),
                   "throughput": batch / float(np.median(samples)),
                   "throughput_unit": UNITS.get(level, "structures/s"),
                   "peak_mem_bytes": int(batch * 2**16 * factor),
                   "peak_mem_method": "cuda_allocator" if gpu else "rss_growth",
                   # Resident-set growth also holds what the allocator keeps around.
                   "peak_tensor_bytes": int(batch * 2**16 * factor * (1.0 if gpu else 0.8)),
                   "peak_tensor_method": "cuda_allocator" if gpu else "torch_profiler",
                   "flops": flops, "bytes": flops / 4,
                   "gflops_per_s": flops / float(np.median(samples)) / 1e9,
                   "gbytes_per_s": flops / 4 / float(np.median(samples)) / 1e9,
                   "extra": json.dumps(extra)}
    yield dict(run_id=run_id, level="tp", workload="mace-large", implementation="<b>evil</b>",
               variant="default", direction="forward", precision="float32", batch=64,
               device="cpu", status="error", reason="<script>alert('x')</script>",
               host="cpu-host", cpu_model=CPU, git_commit=commit)


def _md_extra(steps_per_s: float, precision: str) -> dict:
    """What an md row records (``equibench.levels.md``) for a 24-atom run of 0.5 fs steps."""
    return {"ns_per_day": steps_per_s * 0.5e-6 * 86_400, "steps_per_s": steps_per_s,
            "atom_steps_per_s": 24 * steps_per_s, "atoms": 24, "timestep_fs": 0.5,
            "first_step_s": 2.5, "simulated_ps": 0.1,
            "drift_mev_per_atom_ps": 0.4 if precision == "float32" else 0.01}


def synthetic_results(seed: int = 0, commit: str = "c0ffee0000", run_id: str = "sample"
                      ) -> pd.DataFrame:
    """A validated result table: tp, conv and model rows on a CPU and an A100."""
    return results.to_frame(_rows(np.random.default_rng(seed), commit, run_id))


def synthetic_history(commits: int = 3) -> pd.DataFrame:
    """A history of ``commits`` runs of the synthetic table, one commit each."""
    frames = []
    for i in range(commits):
        frame = synthetic_results(seed=i, commit=f"{i:07d}abc", run_id=f"run{i}")
        frame["timestamp"] = f"2025-01-0{i + 1}T00:00:00+00:00"
        frames.append(history.tracked(frame))
    return pd.concat(frames, ignore_index=True)


if __name__ == "__main__":
    from equibench.dashboards.site import write_site

    out = sys.argv[1] if len(sys.argv) > 1 else "results/sample/dashboard"
    print(write_site(synthetic_results(), out, history=synthetic_history()))
