"""Print the project's own performance targets, measured in one results table.

    python benchmarks/targets.py [RESULTS] [--machine MACHINE_JSON]

(defaults: ``results/quick/results.parquet`` and the ``machine.json`` beside it).

Every figure is a ratio of two rows of the same run (same machine, same load), so it can
be compared with its target; nothing here is timed. Rows timed in interleaved rounds give
the median of the per-round ratios with its interquartile range in brackets; others (timed
apart) the ratio of medians, marked ``unpaired``. Targets (float32, CPU):

- fused kernels: ``conv`` on ``mace-large`` forward and backward >= 10x faster than
  ``e3nn`` and ``cuequivariance`` and >= 5x faster than ``e3nn-compiled``; bare ``tp``
  forward on ``mace-large`` >= 5x faster than ``e3nn`` at every batch; ``conv`` peak
  memory <= 1/4 of ``e3nn``'s; the fraction of the roofline bound, min(peak FLOP/s,
  bandwidth x intensity) (aim: >= 50 %);
- SE(3)-Transformer (each model size in the table): at the largest batch where both ran,
  ``optimized`` trains >= 5x faster and with >= 5x less peak memory than ``baseline``;
- MACE, the OpenEquivariance-size model (variant ``oeq``) on QM9 and the oc20-like slabs:
  ``fused`` >= 5x faster than ``e3nn`` in inference and >= 4x in a training step, >= 5x
  faster than ``cuequivariance`` (its CPU path), at <= 1/2 of ``e3nn``'s peak memory.
  Other MACE models' ratios are printed without a target.

Ratios pair rows of one run, host and device only (a table of several prints each apart); a
peak memory that was not measured (-1) or fell below the method's resolution (0) meets no
target.

Exit status 0 whatever the verdicts: it reports, CI decides (``equibench compare``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from equibench import results
from equibench.paired import ratio as paired_ratio

CONV_WORKLOAD = "mace-large@qm9"
TP_WORKLOAD = "mace-large"
SE3T_WORKLOADS = ("se3t-qm9-small", "se3t-qm9-medium", "se3t-qm9")
MACE_WORKLOADS = ("mace-qm9", "mace-oc20-like")
MACE_TARGETS = {"inference": 5.0, "train_step": 4.0}  # fused over e3nn
MACE_TARGET_VARIANT = "oeq"  # the targets are the OpenEquivariance-size model's


def _ok(frame: pd.DataFrame, **where: object) -> pd.DataFrame:
    rows = frame[frame["status"] == "ok"]
    for key, value in where.items():
        rows = rows[rows[key] == value]
    return rows


def _one(frame: pd.DataFrame, **where: object) -> pd.Series | None:
    rows = _ok(frame, **where)
    return None if rows.empty else rows.iloc[0]


def _ratio(slower: pd.Series | None, faster: pd.Series | None
           ) -> tuple[float, float, float, bool] | None:
    """Time ratio of two rows (``paired.ratio``), None when one is missing."""
    return None if slower is None or faster is None else paired_ratio(slower, faster)


def _memory_ratio(a: pd.Series | None, b: pd.Series | None) -> float | str | None:
    """Peak memory of ``a`` over ``b``; 'not measured' where either peak is unknown (-1) or
    below the method's resolution (0): such a ratio can meet no target."""
    if a is None or b is None:
        return None
    if a["peak_mem_bytes"] <= 0 or b["peak_mem_bytes"] <= 0:
        return "not measured"
    return a["peak_mem_bytes"] / b["peak_mem_bytes"]


def _line(name: str, value: float | tuple[float, float, float, bool] | str | None,
          target: float | None, unit: str = "x", higher_is_better: bool = True) -> str:
    """One figure and its verdict against ``target`` (None: the figure alone)."""
    if value is None or isinstance(value, str):
        wanted = "" if target is None else f"  (target {target:g}{unit})"
        return f"  {name:58s} {value or 'missing':>12s}{wanted}"
    spread = ""
    if isinstance(value, tuple):
        value, q1, q3, paired = value
        spread = f" [{q1:.2f}-{q3:.2f}]" if paired else " unpaired"
    if target is None:
        return f"  {name:58s} {value:9.2f}{unit}{spread}"
    met = value >= target if higher_is_better else value <= target
    return (f"  {name:58s} {value:9.2f}{unit}{spread}  target "
            f"{'>=' if higher_is_better else '<='} {target:g}{unit}  "
            f"{'met' if met else 'MISSED'}")


def fused_kernels(frame: pd.DataFrame, machine: dict | None) -> Iterator[str]:
    yield "fused kernels (float32)"
    # Targets are about the rule's timed call: amortized and native-layout variants
    # (reuse-plan, ir_mul) are reported by `equibench compare` and the dashboard instead.
    conv = _ok(frame, level="conv", workload=CONV_WORKLOAD, precision="float32",
               variant="default")
    for direction in ("forward", "backward"):
        for batch in sorted(conv["batch"].unique()):
            fused = _one(conv, implementation="fused", direction=direction, batch=batch)
            for peer, target in (("e3nn", 10), ("cuequivariance", 10), ("e3nn-compiled", 5)):
                other = _one(conv, implementation=peer, direction=direction, batch=batch)
                yield _line(f"conv {CONV_WORKLOAD} {direction} b={batch}: {peer} / fused",
                            _ratio(other, fused), target)
                if other is not None and peer == "e3nn-compiled":
                    first = results.extra(other).get("first_call_s")
                    if first is not None:  # excluded from the ratio, reported beside it
                        yield f"    (its first call, compilation included: {first:.1f} s)"
            e3nn = _one(conv, implementation="e3nn", direction=direction, batch=batch)
            memory = _memory_ratio(fused, e3nn)
            yield _line(f"conv {CONV_WORKLOAD} {direction} b={batch}: peak memory fused / e3nn",
                        memory, 0.25, "", higher_is_better=False)
            if machine and fused is not None:
                yield _roofline(f"conv {CONV_WORKLOAD} {direction} b={batch}: roofline", fused,
                                machine)
    tp = _ok(frame, level="tp", workload=TP_WORKLOAD, precision="float32", direction="forward",
             variant="default")
    for batch in sorted(tp["batch"].unique()):
        fused = _one(tp, implementation="fused", batch=batch)
        e3nn = _one(tp, implementation="e3nn", batch=batch)
        yield _line(f"tp {TP_WORKLOAD} forward b={batch}: e3nn / fused", _ratio(e3nn, fused),
                    5)
        if machine and fused is not None:
            yield _roofline(f"tp {TP_WORKLOAD} forward b={batch}: roofline", fused, machine)


def _roofline(name: str, row: pd.Series, machine: dict) -> str:
    """Achieved GFLOP/s as a fraction of the roofline bound: the measured float32 peak or,
    where the cost model's arithmetic intensity is lower, bandwidth x intensity."""
    peak = machine["peak_gflops"]["float32"]
    intensity = row["flops"] / row["bytes"]
    memory_bound = machine["bandwidth_gbps"] * intensity
    bound = min(peak, memory_bound)
    kind = "compute" if peak <= memory_bound else "memory"
    return (f"  {name:58s} {100 * row['gflops_per_s'] / bound:8.1f} %  "
            f"({row['gflops_per_s']:.1f} of {bound:.0f} GFLOP/s, {kind}-bound at "
            f"{intensity:.1f} FLOP/B; aim >= 50 %)")


def se3_transformer(frame: pd.DataFrame) -> Iterator[str]:
    for workload in SE3T_WORKLOADS:
        rows = _ok(frame, level="model", workload=workload, implementation="basis",
                   precision="float32")
        if not rows.empty:
            yield f"SE(3)-Transformer {workload}, basis backend (float32)"
            yield from _se3t_ratios(rows)


def _se3t_ratios(rows: pd.DataFrame) -> Iterator[str]:
    for direction in ("train_step", "inference"):
        both = set(_ok(rows, variant="baseline", direction=direction)["batch"]) & set(
            _ok(rows, variant="optimized", direction=direction)["batch"])
        if not both:
            yield f"  {direction}: no batch with both baseline and optimized rows"
            continue
        batch = max(both)
        base = _one(rows, variant="baseline", direction=direction, batch=batch)
        opt = _one(rows, variant="optimized", direction=direction, batch=batch)
        speed = _ratio(base, opt)
        memory = _memory_ratio(base, opt)
        if direction == "train_step":
            yield _line(f"{direction} b={batch}: time baseline / optimized", speed, 5)
            yield _line(f"{direction} b={batch}: peak memory baseline / optimized", memory, 5)
        else:  # no target: reported for the picture
            shown = memory if isinstance(memory, str) else f"{memory:.2f}x"
            yield (f"  {direction + f' b={batch}: time, memory baseline / optimized':58s} "
                   f"{speed[0]:9.2f}x {shown}")


def mace(frame: pd.DataFrame) -> Iterator[str]:
    for workload in MACE_WORKLOADS:
        rows = _ok(frame, level="model", workload=workload, precision="float32")
        for variant in sorted(set(rows["variant"])):
            targeted = variant == MACE_TARGET_VARIANT
            yield (f"MACE {workload} [{variant}] (float32)"
                   + ("" if targeted else f": no targets (they are the {MACE_TARGET_VARIANT} "
                                          "model's)"))
            for direction, target in MACE_TARGETS.items():
                at = _ok(rows, variant=variant, direction=direction)
                for batch in sorted(set(at["batch"])):
                    fused = _one(at, implementation="fused", batch=batch)
                    e3nn = _one(at, implementation="e3nn", batch=batch)
                    for peer, wanted in ((e3nn, target),
                                         (_one(at, implementation="cuequivariance",
                                               batch=batch), 5.0)):
                        if peer is not None:
                            yield _line(f"{direction} b={batch}: {peer['implementation']} / "
                                        "fused", _ratio(peer, fused),
                                        wanted if targeted else None)
                    yield _line(f"{direction} b={batch}: peak memory fused / e3nn",
                                _memory_ratio(fused, e3nn), 0.5 if targeted else None, "",
                                higher_is_better=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", nargs="?", default="results/quick/results.parquet")
    parser.add_argument("--machine", help="machine probe JSON (default: next to the table)")
    args = parser.parse_args(argv)
    frame = results.read(args.results)
    machine = Path(args.machine) if args.machine else Path(args.results).with_name(
        "machine.json")
    # {"cpu": {"peak_gflops": {"float32": ...}, "bandwidth_gbps": ...}} (equibench probe)
    probe = json.loads(machine.read_text()).get("cpu") if machine.exists() else None
    print(f"targets measured in {args.results}")
    # Ratios are taken between rows of one run on one machine and device only.
    for (run_id, host, device), rows in frame.groupby(["run_id", "host", "device"]):
        print(f"run {run_id} on {host}, {device}")
        for line in (*fused_kernels(rows, probe), *se3_transformer(rows), *mace(rows)):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
