"""Print the project's own performance targets, measured in one results table.

    python benchmarks/targets.py [RESULTS] [--machine MACHINE_JSON] [--targets FILE]
                                 [--resamples 2000]

(defaults: ``results/quick/results.parquet``, the ``machine.json`` beside it and the
packaged ``equibench/targets.yaml``, which lists the targets and says how each is judged).

Nothing here is timed. The targets are data, judged by the claims engine
(``equibench.targets``, ``equibench.claims``): its selectors, its pairing (rows of one run,
host and machine; per round where the rows were interleaved), its 95% intervals (widened
for run-to-run spread where one run measured a timing) and its exclusions (rows that are
not ok, synthetic, measured on a disturbed machine, a fallback code path or amortized never
count). Each pair is ``met`` when its whole interval clears the target, ``MISSED`` when the
whole interval falls short, ``unsettled`` otherwise.

The roofline of our kernels uses the probe of each row's own device and two FLOP counts:
nominal (the cost model, the papers' convention) and executed (the multiply-adds of our
generated code, two FLOPs each); the fraction of the bound is taken from executed work.

Exit status 0 whatever the verdicts: it reports, CI decides (``equibench compare``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from equibench import claims, results, targets


def _against(pair: claims.PairResult) -> str:
    """A pair as ``numerator / denominator``, the denominator cut to what differs."""
    shared = set(pair.numerator.split())
    differs = [token for token in pair.denominator.split() if token not in shared]
    return f"{pair.numerator} / {' '.join(differs) or pair.denominator}"


def _interval(low: float, high: float) -> str:
    return f"[{low:.2f}-{high:.2f}]"


def target_lines(found: list[targets.TargetResult]) -> list[str]:
    lines: list[str] = []
    for target_id in dict.fromkeys(r.target.id for r in found):
        of_target = [r for r in found if r.target.id == target_id]
        target = of_target[0].target
        wanted = ("" if target.target is None
                  else f"; target >= {target.target:g}x on every pair")
        lines.append(f"{target.id}: {target.statement}{wanted}")
        for result in of_target:
            where = result.machine or "any machine"
            runs = f", {result.runs} run{'s' if result.runs != 1 else ''}" if result.runs else ""
            verdict = result.verdict or "reported"
            lines.append(f"  {where}{runs}: {verdict}"
                         + (f" ({result.note})" if result.note else ""))
            for judged in result.pairs:
                pair = judged.pair
                lines.append(f"    {_against(pair):90s} {pair.ratio:8.2f}x "
                             f"{_interval(pair.ci_low, pair.ci_high)}  {judged.verdict}")
    return lines


def roofline_lines(figures: list[targets.RooflineFigure], aim: float) -> list[str]:
    lines = [f"roofline (aim: >= {100 * aim:g} % of the bound min(peak, bandwidth x intensity) "
             "of the row's own device probe). FLOPs: nominal = the cost model's count (the "
             "papers' convention); executed = 2 x the multiply-adds our generated code "
             "executes. The fraction and the intensity are from executed work."]
    for f in figures:
        head = f"  {f.case} on {f.machine} (run {f.run_id})"
        if math.isnan(f.fraction):
            nominal = ("" if math.isnan(f.nominal_gflops_per_s)
                       else f"; nominal {f.nominal_gflops_per_s:.1f} GFLOP/s")
            lines.append(f"{head}: {f.note}{nominal}")
            continue
        lines.append(f"{head}: {100 * f.fraction:.1f} % of {f.bound_gflops_per_s:.0f} GFLOP/s "
                     f"({f.bound}-bound at {f.intensity:.2f} executed FLOP/B); executed "
                     f"{f.executed_gflops_per_s:.1f} GFLOP/s, nominal "
                     f"{f.nominal_gflops_per_s:.1f} GFLOP/s; "
                     f"{'meets' if f.fraction >= aim else 'below'} the aim")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="?", default="results/quick/results.parquet")
    parser.add_argument("--machine", help="machine probe JSON (default: next to the table)")
    parser.add_argument("--targets", help="targets file (default: equibench/targets.yaml)")
    parser.add_argument("--resamples", type=int, default=2000,
                        help="bootstrap resamples of each interval")
    args = parser.parse_args(argv)
    frame = results.read(args.results)
    found = Path(args.results)
    machine = Path(args.machine) if args.machine else (
        found / "machine.json" if found.is_dir() else found.with_name("machine.json"))
    # {"cpu": {"peak_gflops": {...}, "bandwidth_gbps": ...}, "cuda:0": {...}} (equibench
    # probe): one entry per device, each row bounded by its own device's.
    probe = json.loads(machine.read_text()) if machine.exists() else None
    wanted, spec = targets.load(args.targets)
    print(f"targets measured in {args.results} ({args.targets or 'equibench/targets.yaml'})")
    print("\n".join(target_lines(targets.evaluate(wanted, frame, args.resamples))))
    if probe is None:
        print(f"roofline: no machine probe at {machine} (equibench probe --out FILE)")
    else:
        print("\n".join(roofline_lines(targets.roofline(frame, probe, spec), spec.aim)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
