"""The project's own performance targets (``targets.yaml``), judged by the claims engine.

A target is a ratio between two selected sets of rows with the least value it must reach.
:func:`evaluate` turns each into a :class:`equibench.claims.Claim` and lets
``claims.evaluate_claim`` select, exclude (rows not ok, synthetic, disturbed, fallback,
amortized), pair and bound it, so that a target and a published claim are judged by one
engine; it then judges every pair by its own 95% interval (:func:`judge`). A target is met
only where every pair's whole interval clears it: a row that cannot count never makes it
met, it makes it ``not measured`` when nothing else matched.

:func:`roofline` reports our kernels' achieved work against the roofline bound of the row's
own device probe, with two FLOP counts: *nominal* (the cost model, the papers' convention:
``flops`` of the row) and *executed* (twice the multiply-adds our generated CPU code
executes, :func:`equibench.cost.executed_multiply_adds`). The fraction of the bound is taken
from executed work; the nominal count would overstate the kernels.

No torch at import: ``benchmarks/targets.py`` and the tests import this.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from equibench import claims
from equibench.analysis import machine_labels

MET = "met"
MISSED = "MISSED"
UNSETTLED = "unsettled"
NOT_MEASURED = claims.NOT_MEASURED


@dataclass(frozen=True)
class Target:
    """One of the project's targets: ``numerator`` against ``denominator`` in ``quantity``
    (a ratio above 1 favours the numerator), at least ``target`` (None: reported alone)."""

    id: str
    statement: str
    quantity: str
    numerator: Mapping[str, object]
    denominator: Mapping[str, object]
    target: float | None = None
    largest_batch: bool = False

    def as_claim(self) -> claims.Claim:
        """The target as a claim (its selectors, pairing and exclusions checked there); its
        hardware is any machine's, so the claim's own verdict is not used."""
        return claims.Claim(
            id=self.id, source="equibench/targets.yaml", statement=self.statement,
            claimed=self.target or 1.0, hardware="any", quantity=self.quantity,
            numerator=dict(self.numerator), denominator=dict(self.denominator),
            largest_batch=self.largest_batch, tolerance=1.0)


@dataclass(frozen=True)
class Roofline:
    """Which rows the roofline reports (``cases``: selectors) and the fraction aimed at."""

    aim: float
    cases: tuple[Mapping[str, object], ...]


@dataclass(frozen=True)
class PairVerdict:
    pair: claims.PairResult
    verdict: str  # MET, MISSED, UNSETTLED; '' without a target


@dataclass(frozen=True)
class TargetResult:
    """A target on one machine (or on none, when not measured)."""

    target: Target
    verdict: str  # MET, MISSED, UNSETTLED, NOT_MEASURED; '' without a target
    machine: str = ""
    runs: int = 0
    note: str = ""
    pairs: tuple[PairVerdict, ...] = field(default_factory=tuple)


def load(path: str | Path | None = None) -> tuple[list[Target], Roofline]:
    """The targets and the roofline spec in ``path``, or the packaged ``targets.yaml``."""
    targets, data, where = claims.load_entries(path, "targets.yaml", "targets", Target)
    for target in targets:
        target.as_claim()  # the claims engine checks the selectors and quantity
    ids = [t.id for t in targets]
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise ValueError(f"{where}: duplicate target id(s) {duplicated}")
    spec = data.get("roofline") or {}
    return targets, Roofline(aim=float(spec.get("aim", 0.5)),
                             cases=tuple(spec.get("cases", ())))


def judge(low: float, high: float, target: float) -> str:
    """A 95% interval against a target: met when all of it is at or above the target,
    MISSED when all of it is below, unsettled when it straddles the target."""
    if low >= target:
        return MET
    return MISSED if high < target else UNSETTLED


def _overall(verdicts: Iterable[str]) -> str:
    found = set(verdicts)
    if MISSED in found:
        return MISSED
    return MET if found == {MET} else UNSETTLED


def evaluate(targets: Iterable[Target], frame: pd.DataFrame,
             resamples: int = claims.BOOTSTRAP_RESAMPLES, seed: int = 0,
             run_spread: float = claims.SINGLE_RUN_SPREAD) -> list[TargetResult]:
    """Every target on every machine whose rows it matched (one ``not measured`` result
    where none could count)."""
    found = []
    for target in targets:
        for result in claims.evaluate_claim(target.as_claim(), frame, resamples, seed,
                                            run_spread):
            if result.verdict == NOT_MEASURED:
                found.append(TargetResult(target, NOT_MEASURED, result.machine,
                                          note=result.note))
                continue
            pairs = tuple(
                PairVerdict(pair, "" if target.target is None
                            else judge(pair.ci_low, pair.ci_high, target.target))
                for pair in result.pair_list)
            verdict = "" if target.target is None else _overall(p.verdict for p in pairs)
            found.append(TargetResult(target, verdict, result.machine, result.runs,
                                      result.note, pairs))
    return found


@dataclass(frozen=True)
class RooflineFigure:
    """One row's place under the roofline of its own device's probe. ``note`` says why a
    figure is missing (a row that cannot count, no probe, work not counted)."""

    case: str
    machine: str
    run_id: str
    note: str = ""
    nominal_gflops_per_s: float = math.nan
    executed_gflops_per_s: float = math.nan
    bound_gflops_per_s: float = math.nan
    fraction: float = math.nan
    bound: str = ""  # compute or memory
    intensity: float = math.nan  # executed FLOP per byte of the cost model


def _products(row: pd.Series) -> int:
    """Tensor products in one call: one per item at the tp level, one per edge in conv."""
    if row["level"] == "tp":
        return int(row["batch"])
    return int(json.loads(row["extra"])["edges"])


def executed_flops(row: pd.Series) -> float | None:
    """FLOPs one call of a fused row executes (two per multiply-add, as the probe's
    matrix product counts them), None where not counted: other devices run other code
    (Triton), and ``executed_multiply_adds`` covers the CPU kernels' uvu forward and
    backward."""
    from equibench.cost import executed_multiply_adds  # torch, e3nn: on first use only
    from equibench.workloads import get_tp_workload

    if row["device"] != "cpu":
        return None
    problem = get_tp_workload(str(row["workload"]).partition("@")[0])
    counted = executed_multiply_adds(problem, str(row["direction"]))
    return None if counted is None else 2.0 * counted * _products(row)


def roofline(frame: pd.DataFrame, probe: Mapping[str, Mapping] | None,
             spec: Roofline) -> list[RooflineFigure]:
    """The roofline figure of every ok row ``spec.cases`` selects. ``probe``: ``equibench
    probe``'s JSON, one entry per device; each row is bounded by its own device's entry."""
    ok = frame[frame["status"] == "ok"]
    rows = pd.concat([claims.select(ok, case) for case in spec.cases]) if spec.cases else ok[:0]
    rows = rows[~rows.index.duplicated()].assign(machine=lambda f: machine_labels(f))
    figures = []
    for _, row in rows.sort_values(["machine", "run_id", "level", "direction",
                                    "batch"]).iterrows():
        figure = RooflineFigure(claims.side(row), str(row["machine"]), str(row["run_id"]))
        figures.append(_place(figure, row, probe))
    return figures


def _place(figure: RooflineFigure, row: pd.Series,
           probe: Mapping[str, Mapping] | None) -> RooflineFigure:
    why = claims.excluded(row)
    if why:
        return replace(figure, note=f"cannot count: {why}")
    nominal = row["flops"] / row["time_median_s"] / 1e9
    entry = (probe or {}).get(str(row["device"]))
    if entry is None:
        return replace(figure, nominal_gflops_per_s=nominal,
                       note=f"no machine probe of device {row['device']}")
    if entry.get("host", row["host"]) != row["host"]:
        return replace(figure, nominal_gflops_per_s=nominal,
                       note=f"the probe is of host {entry['host']}, not {row['host']}")
    executed = executed_flops(row)
    if executed is None:
        return replace(figure, nominal_gflops_per_s=nominal,
                       note=f"executed work not counted for {row['device']}'s kernels: no "
                            "fraction (the nominal count would overstate it)")
    peak = entry["peak_gflops"][row["precision"]] * 1e9
    compute_s, memory_s = executed / peak, row["bytes"] / (entry["bandwidth_gbps"] * 1e9)
    bound_s = max(compute_s, memory_s)
    return replace(figure, nominal_gflops_per_s=nominal,
                   executed_gflops_per_s=executed / row["time_median_s"] / 1e9,
                   bound_gflops_per_s=executed / bound_s / 1e9,
                   fraction=bound_s / row["time_median_s"],
                   bound="compute" if compute_s >= memory_s else "memory",
                   intensity=executed / row["bytes"])
