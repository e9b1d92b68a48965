"""Does this machine run code on several threads at a steady speed? One thread against all.

    python benchmarks/thread_modes.py [--seconds 300] [--workload mace-large] [--batch 256]
                                      [--out results/noise/thread_modes.json]

In one process, over and over for ``--seconds``: e3nn's and our fused tensor product
(forward, float32) and the machine-load module's parallel probe (50 in-cache 64 x 64 matrix
products), each timed on one thread and on all of them, in alternating order from sample to
sample (median of 6 and of 20 calls; the probe's best of 3 runs).
A sample whose probe ran more than ``machine_load.PARALLEL_LIMIT`` times slower on all
threads than on one counts as the slow mode. Prints, per measure, p10 / median / p90 of
each mode, and the e3nn / fused ratio in each mode on one thread and on all of them: where
the all-thread ratio moves with the mode and the one-thread ratio does not, timing on one
thread is what gives run-to-run stable speedups (docs/design-decisions.md, "One thread per
CPU case").
Exit status 0: it reports, it does not gate. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from equibench import registry
from equibench.cases import Case
from equibench.files import atomic_write
from equibench.machine_load import PARALLEL_LIMIT, probe_seconds

MEASURES = ("e3nn", "fused", "probe")


def _median_ms(fn: Callable[[], object], calls: int) -> float:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _call(implementation: str, workload: str, batch: int) -> Callable[[], object]:
    case = Case("tp", workload, implementation, "default", "forward", "float32", batch, "cpu")
    return registry.plugin(case).build(case, torch.float32, 0).call


def sample(calls: dict[str, Callable[[], object]], threads: int, one_first: bool
           ) -> dict[str, float]:
    """One sample: every measure on one thread and on ``threads``, one thread first or
    last (alternated by the caller, so that a drift within a sample falls on both)."""
    out = {}
    for n in ((1, threads) if one_first else (threads, 1)):
        torch.set_num_threads(n)
        out[f"e3nn_{n}t"] = _median_ms(calls["e3nn"], 6)
        out[f"fused_{n}t"] = _median_ms(calls["fused"], 20)
        out[f"probe_{n}t"] = 1e3 * probe_seconds(n)
    return out


def summarize(samples: list[dict[str, float]], threads: int) -> dict:
    """Per mode (usual, slow): p10 / median / p90 of every measure, and the e3nn / fused
    ratio on one thread and on ``threads``."""
    modes: dict[str, list[dict[str, float]]] = {"usual": [], "slow": []}
    for s in samples:
        slow = s[f"probe_{threads}t"] / s["probe_1t"] > PARALLEL_LIMIT
        modes["slow" if slow else "usual"].append(s)
    summary: dict = {"threads": threads, "samples": len(samples)}
    for mode, chosen in modes.items():
        if not chosen:
            summary[mode] = {"samples": 0}
            continue
        table = {key: [s[key] for s in chosen] for key in chosen[0]}
        for n in (1, threads):
            table[f"ratio_{n}t"] = [s[f"e3nn_{n}t"] / s[f"fused_{n}t"] for s in chosen]
        summary[mode] = {"samples": len(chosen), **{
            key: [round(float(v), 4) for v in np.percentile(values, [10, 50, 90])]
            for key, values in table.items()}}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--workload", default="mace-large")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--out", default="results/noise/thread_modes.json")
    args = parser.parse_args()
    threads = torch.get_num_threads()
    if threads < 2:
        raise SystemExit("one core only: there are no threads to compare with one")
    calls = {name: _call(name, args.workload, args.batch) for name in ("e3nn", "fused")}
    for fn in calls.values():  # first calls: allocation, kernel builds
        for _ in range(3):
            fn()
    samples = []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        samples.append(sample(calls, threads, one_first=len(samples) % 2 == 0))
        if len(samples) % 100 == 0:
            print(f"  {len(samples)} samples", flush=True)
    torch.set_num_threads(threads)
    summary = {"workload": args.workload, "batch": args.batch, "seconds": args.seconds,
               **summarize(samples, threads)}
    print(f"{args.workload} forward float32 b={args.batch}, {summary['samples']} samples "
          f"in {args.seconds:.0f} s; p10 / median / p90 (ms; ratio e3nn/fused)")
    for mode in ("usual", "slow"):
        part = summary[mode]
        print(f"{mode} mode: {part['samples']} samples")
        for key, values in part.items():
            if key != "samples":
                print(f"  {key:>10}: " + " / ".join(f"{v:.3f}" for v in values))
    with atomic_write(Path(args.out), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
