"""Regression checks between two result tables (a baseline and a new run).

Cases are matched on their key columns plus the torch thread count and the CPU allocator
(``equibench.analysis.MATCH_COLUMNS``): a run with another allocator is another
measurement, not a code change. Per case:

- ``status``: a case that was ``ok`` and is not any more (``incorrect``, ``error``, ``oom``,
  ``unavailable``), or any change to a worse status, is a regression, and so is a case of
  the baseline that the new run lacks. These need no statistics.
- ``speedup vs <reference>``: the case's speedup over the reference row of its comparison
  group measured in the same run (``equibench.analysis.relative``: paired per round where
  the rows were interleaved); the test then compares the baseline's per-round ratios with
  the new run's. Machine-independent, so a baseline from
  one machine can check a run on another: such a comparison is labelled ``across
  machines`` and uses nothing else.
- ``time``: the raw median, only where both rows ran on the same machine.
- ``peak memory``: same machine only; live tensor bytes (``peak_tensor_bytes``) where both
  rows have them, else the resident-set figure (``peak_mem_bytes``) of older tables.

Which metrics fail the check is the caller's choice (``gate``): on a shared machine whose
speed drifts between runs more than a threshold worth having, a metric can be reported
without failing, or fail only from a larger factor than the threshold that reports it.

A change counts only when it passes the ratio threshold *and* a one-sided test gives
p < alpha (asv's rule): a Mann-Whitney U test on the samples where the sample counts can
reach alpha at all (3 against 3 cannot get below p = 1/20), else Welch's t-test on their
logarithms, so that a large change between rows of 3 samples is still seen. A row without
samples is decided by the threshold alone, as is peak memory, which is one number per
case: there an absolute floor stands in for the test, because resident-set growth moves by
whole pages. Every change reports ``detectable``: the smallest factor that its samples,
with their spread and their count, would have flagged (the noise floor).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu, ttest_ind

from equibench.analysis import (
    MATCH_COLUMNS,
    REFERENCE,
    SAME_MACHINE,
    case_label,
    latest,
    latest_ok,
    relative,
)
from equibench.paired import samples_of
from equibench.results import blank_row
from equibench.vocabulary import METRICS, TIMED_STATUSES

MIN_MEM_DELTA_BYTES = 4 * 2**20
# Worse statuses rank higher: a change to a higher rank is a regression.
# An ok case that became unverifiable lost its verification: a regression like incorrect.
STATUS_RANK = {"ok": 0, "imported": 0, "unavailable": 1, "unverifiable": 2, "incorrect": 2,
               "oom": 2, "error": 2}


@dataclass(frozen=True)
class Change:
    """One metric of one case, baseline against new."""

    case: str
    metric: str
    higher_is_better: bool
    base: float
    new: float
    p_value: float  # NaN when the metric has no samples to test
    verdict: str  # regression, improvement, unchanged, not compared
    detectable: float = math.nan  # smallest worse_by its samples could flag
    note: str = ""
    gates: bool = True  # whether this change, if a regression, fails the check (see _gates)

    @property
    def ratio(self) -> float:
        return self.new / self.base if self.base else math.nan

    @property
    def worse_by(self) -> float:
        """Factor by which the metric got worse (> 1 worse, < 1 better)."""
        return 1 / self.ratio if self.higher_is_better else self.ratio

    @property
    def fails(self) -> bool:
        return self.verdict == "regression" and self.gates


def _p_value(worse: np.ndarray, better: np.ndarray, side: str, alpha: float) -> float:
    """One-sided p-value that ``worse`` is stochastically greater (``side`` "greater") or
    smaller ("less") than ``better``; NaN without two samples a side."""
    n, m = worse.size, better.size
    if n < 2 or m < 2:
        return math.nan
    if 1 / math.comb(n + m, n) < alpha:
        return float(mannwhitneyu(worse, better, alternative=side).pvalue)
    # Too few samples for any rank order to reach alpha: Welch's t-test on the logarithms
    # (times and ratios are log-normal-ish) can still see a change far beyond the spread.
    lw, lb = np.log(worse), np.log(better)
    if np.ptp(lw) == 0 and np.ptp(lb) == 0:
        differs = lw[0] > lb[0] if side == "greater" else lw[0] < lb[0]
        return 0.0 if differs else 1.0
    return float(ttest_ind(lw, lb, equal_var=False, alternative=side).pvalue)


def _judge(base: np.ndarray, new: np.ndarray, threshold: float, alpha: float
           ) -> tuple[str, float, float]:
    """Verdict, p-value and detectable factor of a change between samples of a cost (higher
    is worse: times, or inverse speedups).

    The test runs only when the ratio of medians passes the threshold (one-sided, in the
    ratio's direction). Without two samples a side it cannot speak, and the threshold alone
    decides, as asv does for benchmarks without samples.
    """
    # Costs are positive: a zero, infinite or NaN sample is a broken measurement, left out.
    base, new = base[np.isfinite(base) & (base > 0)], new[np.isfinite(new) & (new > 0)]
    if not base.size or not new.size:
        return "unchanged", math.nan, math.inf
    worse_by = float(np.median(new) / np.median(base))
    detectable = _detectable(base, new, threshold, alpha)
    if worse_by >= threshold:
        side, verdict = "greater", "regression"
    elif worse_by <= 1 / threshold:
        side, verdict = "less", "improvement"
    else:
        return "unchanged", math.nan, detectable
    p = _p_value(new, base, side, alpha)
    if math.isnan(p) and (base.size < 2 or new.size < 2):
        return verdict, p, detectable
    return (verdict if p < alpha else "unchanged"), p, detectable


def _detectable(base: np.ndarray, new: np.ndarray, threshold: float, alpha: float) -> float:
    """The smallest slow-down factor this comparison would flag: the new samples, moved to
    the base's median and then slowed by the factor, must pass the threshold and the test.
    ``inf`` when no factor up to 1000 would."""
    if base.size < 2 or new.size < 2:
        return threshold
    centred = new * (np.median(base) / np.median(new))

    def flagged(factor: float) -> bool:
        return _p_value(centred * factor, base, "greater", alpha) < alpha

    low, high = threshold, 1000.0
    if flagged(low):
        return low
    if not flagged(high):
        return math.inf
    for _ in range(30):  # bisection in log space: 2^-30 of the range
        mid = math.sqrt(low * high)
        low, high = (low, mid) if flagged(mid) else (mid, high)
    return high


def _notes(row: pd.Series) -> str:
    disturbed = [row.get(f"disturbed{s}", "") for s in ("_b", "_n")]
    notes = [f"{side} disturbed: {text}" for side, text in zip(("base", "new"), disturbed,
                                                                strict=True) if text]
    if not (row.get("paired_b", True) and row.get("paired_n", True)):
        notes.append("unpaired (rows not interleaved)")
    return "; ".join(notes)


def _relative_changes(ok_b: pd.DataFrame, ok_n: pd.DataFrame, reference: str,
                      threshold: float, alpha: float) -> list[Change]:
    """Speedup changes between the timed rows of the two runs (``latest_ok`` of each)."""
    b, n = relative(ok_b, reference), relative(ok_n, reference)
    keys = list(MATCH_COLUMNS)
    # The same machine when both tables have it; otherwise a case measured on exactly one
    # machine in each table is matched across machines (the ratio does not depend on it).
    same = b.merge(n, on=[*keys, *SAME_MACHINE], suffixes=("_b", "_n"))
    single_b = b[b.groupby(keys)["machine"].transform("size") == 1]
    single_n = n[n.groupby(keys)["machine"].transform("size") == 1]
    cross = single_b.merge(single_n, on=keys, suffixes=("_b", "_n"))
    differs = np.zeros(len(cross), dtype=bool)
    for col in SAME_MACHINE:
        differs |= (cross[f"{col}_b"] != cross[f"{col}_n"]).to_numpy()
    # Across machines only paired speedups: a ratio of medians timed apart carries each
    # machine's drift.
    cross = cross[differs & (cross["paired_b"] & cross["paired_n"]).to_numpy(dtype=bool)]
    changes = []
    for pairs, where in ((same, ""), (cross, " (across machines)")):
        for _, row in pairs.iterrows():
            if row["reference_b"] != row["reference_n"]:
                # A group that gained or lost its reference (e3nn unavailable -> ok): the
                # two speedups are over different rows, so they are told, not tested.
                changes.append(Change(
                    case=case_label(row),
                    metric=f"speedup vs {row['reference_b']} -> {row['reference_n']}{where}",
                    higher_is_better=True, base=row["speedup_b"], new=row["speedup_n"],
                    p_value=math.nan, verdict="not compared",
                    note="the group's reference changed between the runs (see its status)"))
                continue
            # Costs: the inverse speedups (a speedup that shrinks is worse).
            verdict, p, detectable = _judge(1 / np.asarray(row["speedup_samples_b"]),
                                            1 / np.asarray(row["speedup_samples_n"]),
                                            threshold, alpha)
            changes.append(Change(
                case=case_label(row), metric=f"speedup vs {row['reference_b']}{where}",
                higher_is_better=True, base=row["speedup_b"], new=row["speedup_n"],
                p_value=p, verdict=verdict, detectable=detectable, note=_notes(row)))
    return changes + _reference_swaps(b, n, ok_b, ok_n)


def _reference_swaps(b: pd.DataFrame, n: pd.DataFrame, ok_b: pd.DataFrame,
                     ok_n: pd.DataFrame) -> list[Change]:
    """Cases timed on one machine in both runs whose speedup exists in one run only: there
    the case was its group's reference in the other run (the group gained or lost e3nn).
    Listed as ``not compared``, with the speedup the one run has."""
    on = [*MATCH_COLUMNS, *SAME_MACHINE]
    changes = []
    for rel, other_rel, other_ok, in_base in ((b, n, ok_n, True), (n, b, ok_b, False)):
        lone = rel.merge(other_rel[on], on=on, how="left", indicator=True)
        lone = lone[lone["_merge"] == "left_only"].drop(columns="_merge")
        for _, row in lone.merge(other_ok[on], on=on).iterrows():
            changes.append(Change(
                case=case_label(row), metric=f"speedup vs {row['reference']}",
                higher_is_better=True, base=row["speedup"] if in_base else math.nan,
                new=math.nan if in_base else row["speedup"], p_value=math.nan,
                verdict="not compared",
                note=f"its group's reference in the {'new' if in_base else 'base'} run"))
    return changes


def _same_machine_changes(ok_b: pd.DataFrame, ok_n: pd.DataFrame, threshold: float,
                          alpha: float, mem_floor: float) -> list[Change]:
    joined = ok_b.merge(ok_n, on=[*MATCH_COLUMNS, *SAME_MACHINE], suffixes=("_b", "_n"))
    changes = []
    for _, row in joined.iterrows():
        label = case_label(row)
        verdict, p, detectable = _judge(samples_of(row, "_b"), samples_of(row, "_n"),
                                        threshold, alpha)
        changes.append(Change(
            case=label, metric="time", higher_is_better=False, base=row["time_median_s_b"],
            new=row["time_median_s_n"], p_value=p, verdict=verdict, detectable=detectable,
            note=_notes(row)))
        # Live tensor bytes, which do not move with the allocator, where both rows have them;
        # rows of tables written before that column hold the resident-set figure alone.
        column = ("peak_tensor_bytes" if row["peak_tensor_bytes_b"] > 0
                  and row["peak_tensor_bytes_n"] > 0 else "peak_mem_bytes")
        mb, mn = row[f"{column}_b"], row[f"{column}_n"]
        if mb > 0 and mn > 0:
            # One number, no samples: the absolute floor stands in for the rank test.
            verdict = "unchanged"
            if abs(mn - mb) >= mem_floor:
                verdict, _, _ = _judge(np.array([mb]), np.array([mn]), threshold, alpha)
            changes.append(Change(
                case=label, metric="peak memory", higher_is_better=False, base=float(mb),
                new=float(mn), p_value=math.nan, verdict=verdict,
                detectable=max(threshold, 1 + mem_floor / mb)))
    return changes


SETTING_COLUMNS = ("threads", "cpu_allocator")
# What a row holds where its process never set them: the schema's defaults.
_UNSET = {c: blank_row()[c] for c in SETTING_COLUMNS}


def _settings_match(b: pd.Series, n: pd.Series) -> bool:
    """Whether two rows of one case count as the same measurement setting for their
    statuses: equal threads and allocator, or either row never timed (its status is a
    fact about the case, not a measurement) or lacking the setting (rows of cases that
    ended before their process set it: -1 threads, no allocator)."""
    if b["status"] not in TIMED_STATUSES or n["status"] not in TIMED_STATUSES:
        return True
    for column in SETTING_COLUMNS:
        vb, vn = b[column], n[column]
        if vb != vn and _UNSET[column] not in (vb, vn):
            return False
    return True


def _status_changes(base: pd.DataFrame, new: pd.DataFrame) -> list[Change]:
    """Cases whose status got worse or better, and cases of the base missing from new."""
    keys = list(MATCH_COLUMNS)
    b, n = latest(base, keys), latest(new, keys)
    case_keys = [c for c in keys if c not in SETTING_COLUMNS]
    new_by_case: dict[tuple, list[pd.Series]] = {}
    for _, r in n.iterrows():
        new_by_case.setdefault(tuple(r[case_keys]), []).append(r)
    changes = []
    for _, old in b.iterrows():
        others = new_by_case.get(tuple(old[case_keys]), [])
        same = [r for r in others if all(r[c] == old[c] for c in SETTING_COLUMNS)]
        match = (same or [r for r in others if _settings_match(old, r)] or [None])[0]
        if match is None:
            note = "missing from the new run"
            if others:
                other = others[0]
                note += (f" (it ran with threads={other['threads']}, cpu_allocator="
                         f"{other['cpu_allocator'] or '-'} instead of threads="
                         f"{old['threads']}, cpu_allocator={old['cpu_allocator'] or '-'})")
            verdict = "regression"
        else:
            was, now = old["status"], match["status"]
            rank_b, rank_n = STATUS_RANK[was], STATUS_RANK[now]
            if rank_n == rank_b:
                continue
            verdict = "regression" if rank_n > rank_b else "improvement"
            note = f"{was} -> {now}" + (f": {match['reason'][:200]}" if match["reason"] else "")
        changes.append(Change(case=case_label(old), metric="status", higher_is_better=True,
                              base=math.nan, new=math.nan, p_value=math.nan, verdict=verdict,
                              note=note))
    return changes


def metric_kind(metric: str) -> str:
    """The ``METRICS`` entry of a change's metric name."""
    return "memory" if metric == "peak memory" else metric.split()[0]


def compare(base: pd.DataFrame, new: pd.DataFrame, threshold: float = 1.10, alpha: float = 0.05,
            reference: str = REFERENCE, mem_floor: float = MIN_MEM_DELTA_BYTES,
            gate: Iterable[str] | Mapping[str, float | None] = METRICS) -> list[Change]:
    """Every status change and every comparable metric of every case present (ok) in both
    tables. A regression of a metric kind not in ``gate`` is reported, not failing. ``gate``
    may map a kind to the factor from which its regressions fail (None: ``threshold``);
    smaller ones, from ``threshold`` up, are reported."""
    factors = dict(gate) if isinstance(gate, Mapping) else dict.fromkeys(gate)
    if threshold <= 1:
        raise ValueError(f"threshold must be > 1 (a ratio such as 1.10), got {threshold}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if factors.keys() - set(METRICS):
        raise ValueError(f"gate: unknown metric(s) {sorted(factors.keys() - set(METRICS))}; "
                         f"choose from {', '.join(METRICS)}")
    if factors.get("status") is not None:
        raise ValueError("gate: status changes have no factor; write 'status'")
    bad = {k: f for k, f in factors.items() if f is not None and f < threshold}
    if bad:
        raise ValueError(f"gate: factors {bad} are below the threshold {threshold}, which "
                         "already decides what counts as a change")
    ok_b, ok_n = latest_ok(base), latest_ok(new)
    changes = (_status_changes(base, new)
               + _relative_changes(ok_b, ok_n, reference, threshold, alpha)
               + _same_machine_changes(ok_b, ok_n, threshold, alpha, mem_floor))
    return [replace(c, gates=_gates(c, factors)) for c in changes]


def _gates(change: Change, factors: Mapping[str, float | None]) -> bool:
    """Whether a regression of this change fails the check: its metric kind is gated and,
    where the gate names a factor, it got worse by that much."""
    kind = metric_kind(change.metric)
    if kind not in factors:
        return False
    factor = factors[kind]
    return factor is None or change.verdict != "regression" or change.worse_by >= factor


def _fmt(value: float) -> str:
    if value is None or math.isnan(value):
        return "-"
    return "never" if math.isinf(value) else f"{value:.4g}"


def markdown(changes: Iterable[Change], show_all: bool = False) -> str:
    """A markdown table of the changes (only regressions and improvements unless show_all),
    with each change's noise floor, then a summary of the floors."""
    changes = list(changes)
    shown = [c for c in changes if show_all or c.verdict != "unchanged"]
    order = {"regression": 0, "improvement": 1, "not compared": 2, "unchanged": 3}
    shown.sort(key=lambda c: (order[c.verdict], not c.gates, -_sortable(c.worse_by)))
    lines = ["| case | metric | base | new | worse by | p | detectable | result | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for c in shown:
        better = "" if c.metric == "status" else (
            " (higher is better)" if c.higher_is_better else " (lower is better)")
        told = c.gates or c.verdict in ("unchanged", "not compared")
        result = c.verdict if told else f"{c.verdict} (report)"
        cells = [c.case, f"{c.metric}{better}", _fmt(c.base), _fmt(c.new),
                 f"{_fmt(c.worse_by)}x", _fmt(c.p_value), f"{_fmt(c.detectable)}x", result,
                 c.note]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in cells) + " |")
    counts = {v: sum(c.verdict == v for c in changes) for v in order}
    reported = sum(c.verdict == "regression" and not c.gates for c in changes)
    summary = (f"{len(changes)} comparisons: {counts['regression'] - reported} regression(s), "
               f"{reported} reported only, {counts['improvement']} improvement(s), "
               f"{counts['unchanged']} unchanged")
    if counts["not compared"]:
        summary += f", {counts['not compared']} not compared (reference changed)"
    floors = _floor_summary(changes)
    if len(shown) == 0:
        return summary + floors
    return "\n".join(lines) + "\n\n" + summary + floors


def _sortable(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _floor_summary(changes: list[Change]) -> str:
    """Median and worst noise floor per metric kind."""
    lines = []
    for kind in ("speedup", "time", "peak memory"):
        floors = np.array([c.detectable for c in changes if c.metric.startswith(kind)
                           and not math.isnan(c.detectable)])
        if floors.size:
            finite = floors[np.isfinite(floors)]
            worst = "never" if finite.size < floors.size else f"{finite.max():.3g}x"
            lines.append(f"{kind}: {floors.size} cases, detectable change median "
                         f"{np.median(floors):.3g}x, worst {worst}")
    return ("\nnoise floor: " + "; ".join(lines)) if lines else ""
