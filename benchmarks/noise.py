"""How noisy are equibench's ratios on this machine, and what can `compare` see through it?

    python benchmarks/noise.py [--config workflows/config/quick.yaml] [--suites S,...]
                               [--delay-ms 20] [--threshold 1.5] [--out-dir results/noise]

Runs the tensor-product and convolution suites of a configuration (by default the quick
preset's, without the compiled peer, whose compilation would dominate) three times back to
back, each suite as the workflow runs it (``equibench sweep``: implementations interleaved
round by round), plus a planted case: ``e3nn``, ``fused`` and ``e3nn-slowed``
(``benchmarks/slowed_e3nn.py``) on a ~10 ms product.

- runs ``a`` and ``b`` are the same code: per case, the change of each paired speedup over
  e3nn between them (target: within +/-15% for at least 90% of the cases), beside the change
  of e3nn's raw time (the drift that pairing cancels), and what ``equibench compare a b``
  flags (target: nothing);
- run ``slowed`` is run ``b`` again with ``e3nn-slowed`` sleeping ``--delay-ms`` in every
  call: ``equibench compare b slowed`` must flag it and only it, and the measured slow-down
  (its paired per-round difference to e3nn, slowed run minus run b) should be the planted
  delay +/-10%.

Prints the figures and writes them to ``<out-dir>/noise.json``; the result tables stay in
``<out-dir>/<run>/``. Exit status 0: it reports, it does not gate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from equibench import analysis, compare, config, results
from equibench.files import atomic_write
from equibench.paired import speedup_samples

PLANTED = {"name": "planted", "level": "tp", "workloads": ["nequip-benzene-1parity"],
           "implementations": ["e3nn", "fused", "e3nn-slowed"], "directions": ["forward"],
           "precisions": ["float32"], "batches": [160]}
RUNS = ("a", "b", "slowed")
WITHIN = 0.15


def _noise_config(path: str, suites: list[str] | None, with_compiled: bool) -> dict:
    cfg = config.load(path)
    chosen = [s for s in cfg["suites"] if s["level"] in ("tp", "conv")
              and (suites is None or s["name"] in suites)]
    if not with_compiled:
        chosen = [{**s, "implementations": [i for i in s["implementations"]
                                            if i != "e3nn-compiled"]} for s in chosen]
        chosen = [s for s in chosen if s["implementations"]]
    if not chosen:
        raise SystemExit(f"no tp or conv suite of {path} matches --suites {suites}")
    return {**cfg, "device": "cpu", "suites": [*chosen, PLANTED],
            "plugins": [*cfg.get("plugins", []), "slowed_e3nn"]}


def _run(cfg: dict, name: str, out: Path, delay_ms: float) -> pd.DataFrame:
    """One run: every suite as one ``equibench sweep`` job; returns the merged table."""
    run_dir = out / name
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = run_dir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump({**cfg, "name": f"noise-{name}"}))
    env = {**os.environ, "EQUIBENCH_SLOWED_MS": str(delay_ms),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                          os.environ.get("PYTHONPATH", "")])}
    equibench = Path(sys.executable).with_name("equibench")
    tables = []
    for suite in cfg["suites"]:
        start = time.perf_counter()
        table = run_dir / f"{suite['name']}.parquet"
        tables.append(table)
        subprocess.run([str(equibench), "sweep", "--config", str(cfg_path), "--suite",
                        suite["name"], "--implementation", "all", "--device", "cpu",
                        "--out", str(table), "--quiet"], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        print(f"  run {name}: {suite['name']} in {time.perf_counter() - start:.0f} s",
              flush=True)
    # Only this call's tables: the folder may hold others from runs with other --suites.
    return results.read(tables)


def _speedups(frame: pd.DataFrame) -> pd.DataFrame:
    rel = analysis.relative(frame)
    return rel[rel["reference"] == analysis.REFERENCE].set_index(
        [*analysis.MATCH_COLUMNS])


def stability(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per case ok in both runs: paired speedup over e3nn in each, and its change."""
    sa, sb = _speedups(a), _speedups(b)
    both = sa.merge(sb, left_index=True, right_index=True, suffixes=("_a", "_b"))
    table = pd.DataFrame({
        "case": [analysis.case_label(row) for _, row in both.reset_index().iterrows()],
        "speedup_a": both["speedup_a"].to_numpy(), "speedup_b": both["speedup_b"].to_numpy(),
        "paired": (both["paired_a"] & both["paired_b"]).to_numpy(),
        "e3nn_time_change": (both["ref_time_s_b"] / both["ref_time_s_a"]).to_numpy(),
    })
    table["change"] = table["speedup_b"] / table["speedup_a"] - 1
    return table.sort_values("change", key=abs, ascending=False, ignore_index=True)


def planted_slowdown(frame: pd.DataFrame) -> float:
    """Median over rounds of t(e3nn-slowed) - t(e3nn) in the planted case, seconds."""
    rows = frame[(frame["workload"] == PLANTED["workloads"][0])
                 & (frame["batch"] == PLANTED["batches"][0]) & (frame["status"] == "ok")]
    rows = rows.set_index("implementation")
    if not {"e3nn-slowed", "e3nn"} <= set(rows.index):
        raise SystemExit(f"the planted case ({PLANTED['workloads'][0]} b="
                         f"{PLANTED['batches'][0]}) has no ok rows of e3nn and e3nn-slowed: "
                         "see the run's table for their status and reason")
    slowed, e3nn = rows.loc["e3nn-slowed"], rows.loc["e3nn"]
    _, paired = speedup_samples(slowed, e3nn)
    if not paired:
        raise SystemExit("the planted case's rows were not interleaved")
    diff = np.asarray(slowed["round_times_s"]) - np.asarray(e3nn["round_times_s"])
    return float(np.median(diff))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", default="workflows/config/quick.yaml")
    parser.add_argument("--suites", help="comma-separated tp/conv suites (default: all)")
    parser.add_argument("--with-compiled", action="store_true",
                        help="keep e3nn-compiled in the suites (minutes of compilation a run)")
    parser.add_argument("--delay-ms", type=float, default=20.0, help="planted slow-down")
    parser.add_argument("--threshold", type=float, default=1.5,
                        help="compare's threshold (as CI calls it)")
    parser.add_argument("--out-dir", default="results/noise")
    args = parser.parse_args(argv)
    suites = args.suites.split(",") if args.suites else None
    cfg = _noise_config(args.config, suites, args.with_compiled)
    out = Path(args.out_dir)
    print(f"noise benchmark: suites {', '.join(s['name'] for s in cfg['suites'])}; "
          f"runs {', '.join(RUNS)}", flush=True)
    frames = {name: _run(cfg, name, out, args.delay_ms if name == "slowed" else 0.0)
              for name in RUNS}

    table = stability(frames["a"], frames["b"])
    within = float((table["change"].abs() <= WITHIN).mean())
    with pd.option_context("display.max_rows", 500, "display.width", 200,
                           "display.float_format", "{:.3f}".format):
        print("\npaired speedups over e3nn, run a against run b (largest changes first)")
        print(table.to_string(index=False))
    # Paired speedups gate; raw times are what pairing exists to avoid.
    gate = ("status", "speedup")
    same = compare.compare(frames["a"], frames["b"], threshold=args.threshold, gate=gate)
    planted = compare.compare(frames["b"], frames["slowed"], threshold=args.threshold,
                              gate=gate)
    flagged_same = [c for c in same if c.fails]
    flagged_planted = [c for c in planted if c.fails]
    only_planted = bool(flagged_planted) and all(" e3nn-slowed " in c.case
                                                 for c in flagged_planted)
    slow_a = planted_slowdown(frames["b"])
    slow_b = planted_slowdown(frames["slowed"])
    measured_ms = (slow_b - slow_a) * 1e3
    floors = np.array([c.detectable for c in same if c.metric.startswith("speedup")])
    drift = table["e3nn_time_change"]
    summary = {
        "cases": len(table),
        "within_15_percent": within,
        "median_abs_change": float(table["change"].abs().median()),
        "worst_change": float(table["change"].abs().max()),
        "e3nn_raw_time_change_range": [float(drift.min()), float(drift.max())],
        "unpaired_cases": int((~table["paired"]).sum()),
        "compare_same_code_flagged": [f"{c.case}: {c.metric}" for c in flagged_same],
        "compare_planted_flagged": [f"{c.case}: {c.metric}" for c in flagged_planted],
        "planted_only": only_planted,
        "planted_ms": args.delay_ms,
        "measured_slowdown_ms": measured_ms,
        "detectable_speedup_change_median": float(np.median(floors)) if floors.size else None,
        "detectable_speedup_change_p90": float(np.percentile(floors, 90)) if floors.size
        else None,
        "threshold": args.threshold,
    }
    with atomic_write(out / "noise.json", "w") as handle:
        json.dump(summary, handle, indent=2)
    print(f"\nrun a vs b: {within:.0%} of {len(table)} paired speedups within +/-15% "
          f"(target >= 90%); median |change| {summary['median_abs_change']:.1%}, worst "
          f"{summary['worst_change']:.1%}; e3nn's raw time moved "
          f"{drift.min():.2f}x..{drift.max():.2f}x")
    print(f"compare a b (threshold {args.threshold}): {len(flagged_same)} flagged "
          f"(target 0)" + "".join(f"\n  {c.case}: {c.metric} {c.worse_by:.2f}x"
                                  for c in flagged_same))
    print(f"compare b slowed: {len(flagged_planted)} flagged, only the planted case: "
          f"{'yes' if only_planted else 'NO'}" + "".join(
              f"\n  {c.case}: {c.metric} {c.worse_by:.2f}x" for c in flagged_planted))
    print(f"planted {args.delay_ms:g} ms, measured {measured_ms:.2f} ms "
          f"(target {0.9 * args.delay_ms:.1f}-{1.1 * args.delay_ms:.1f})")
    if floors.size:
        print(f"noise floor of the paired speedups: median detectable change "
              f"{np.median(floors):.3f}x, 90th percentile {np.percentile(floors, 90):.3f}x")
    print(f"figures written to {out / 'noise.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
