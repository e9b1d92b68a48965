"""Regression checks between two result tables (a baseline and a new run).

Two comparisons per matched case, both decided by asv's rule: a change counts only when it
passes a ratio threshold *and* a one-sided Mann-Whitney U test on the raw samples says it
is not noise.

- ``speedup vs <reference>``: each implementation's speedup over the reference
  implementation measured in the same run (``t_ref / t_impl``). Machine-independent, so a
  baseline from one machine can check a run on another. Its samples are the
  implementation's samples normalised by the same run's reference median.
- ``time``: the raw median, only where both rows ran on the same machine (same host, CPU
  model and GPU name): raw times from different machines say nothing about the code.
- ``peak memory``: same machine only. It is one number per case (no samples), so it is
  decided by the threshold plus an absolute floor (resident-set growth moves by pages).

This module also holds the helpers that claims and history share: the case key, a row's
machine label and its timing samples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import mannwhitneyu

from equibench.cases import KEY_FIELDS

KEY_COLUMNS: tuple[str, ...] = KEY_FIELDS
SAME_MACHINE = ("host", "cpu_model", "gpu_name")
REFERENCE = "e3nn"
MIN_MEM_DELTA_BYTES = 4 * 2**20


def machine_labels(frame: pd.DataFrame) -> pd.Series:
    """The hardware each row ran on: its GPU name, else its CPU model.

    Same rule as ``equibench.environment.machine_label``, kept here so that reports do not
    import torch.
    """
    gpu = frame["gpu_name"].fillna("").astype(str)
    cpu = frame["cpu_model"].fillna("").astype(str).replace("", "unknown")
    return gpu.where(gpu != "", cpu)


def samples_of(row: pd.Series) -> np.ndarray:
    """A row's timing samples; its median alone when the samples were not kept."""
    samples = np.asarray(row["time_samples"], dtype=float)
    if samples.size:
        return samples
    return np.array([row["time_median_s"]], dtype=float)


def latest_ok(frame: pd.DataFrame) -> pd.DataFrame:
    """Ok rows, one per case and machine: the most recent when a table holds several runs."""
    ok = frame[frame["status"] == "ok"].copy()
    ok["machine"] = machine_labels(ok)
    ok = ok.sort_values("timestamp", kind="stable")
    return ok.drop_duplicates([*KEY_COLUMNS, *SAME_MACHINE], keep="last")


@dataclass(frozen=True)
class Change:
    """One metric of one case, baseline against new."""

    case: str
    metric: str
    higher_is_better: bool
    base: float
    new: float
    p_value: float  # NaN when the metric has no samples to test
    verdict: str  # regression, improvement, unchanged

    @property
    def ratio(self) -> float:
        return self.new / self.base if self.base else math.nan

    @property
    def worse_by(self) -> float:
        """Factor by which the metric got worse (> 1 worse, < 1 better)."""
        return 1 / self.ratio if self.higher_is_better else self.ratio


def _case_label(row: pd.Series) -> str:
    variant = "" if row["variant"] == "default" else f"[{row['variant']}]"
    return (f"{row['level']}/{row['workload']}{variant} {row['implementation']} "
            f"{row['direction']} {row['precision']} b={row['batch']} {row['device']}")


def _decide(worse_by: float, p_worse: float, p_better: float, threshold: float,
            alpha: float) -> str:
    if worse_by >= threshold and p_worse <= alpha:
        return "regression"
    if worse_by <= 1 / threshold and p_better <= alpha:
        return "improvement"
    return "unchanged"


def _mwu(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """One-sided p-values that ``a`` is stochastically greater, and that it is smaller.

    Without at least two samples a side the test cannot speak: p = 0 lets the threshold
    alone decide, as asv does for benchmarks without samples.
    """
    if a.size < 2 or b.size < 2:
        return 0.0, 0.0
    greater = mannwhitneyu(a, b, alternative="greater").pvalue
    less = mannwhitneyu(a, b, alternative="less").pvalue
    return float(greater), float(less)


def speedups(frame: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Each non-reference ok row joined with its reference row from the same run and machine.

    Adds ``ref_time_s`` and ``speedup`` (reference median / implementation median).
    """
    ok = latest_ok(frame)
    match = [c for c in KEY_COLUMNS if c != "implementation"] + ["run_id", *SAME_MACHINE]
    ref = ok[ok["implementation"] == reference][match + ["time_median_s"]]
    ref = ref.rename(columns={"time_median_s": "ref_time_s"})
    joined = ok[ok["implementation"] != reference].merge(ref, on=match)
    joined["speedup"] = joined["ref_time_s"] / joined["time_median_s"]
    return joined


def _relative_changes(base: pd.DataFrame, new: pd.DataFrame, reference: str, threshold: float,
                      alpha: float) -> list[Change]:
    b, n = speedups(base, reference), speedups(new, reference)
    # The same machine when both tables have it; otherwise a case measured on exactly one
    # machine in each table is matched across machines (the ratio does not depend on it).
    same = b.merge(n, on=[*KEY_COLUMNS, "machine"], suffixes=("_b", "_n"))
    rest_b = b[b.groupby(list(KEY_COLUMNS))["machine"].transform("size") == 1]
    rest_n = n[n.groupby(list(KEY_COLUMNS))["machine"].transform("size") == 1]
    cross = rest_b.merge(rest_n, on=list(KEY_COLUMNS), suffixes=("_b", "_n"))
    cross = cross[cross["machine_b"] != cross["machine_n"]]
    changes = []
    for pairs in (same, cross):
        for _, row in pairs.iterrows():
            sb = row["ref_time_s_b"] / samples_of(_side(row, "_b"))
            sn = row["ref_time_s_n"] / samples_of(_side(row, "_n"))
            worse_by = row["speedup_b"] / row["speedup_n"]
            p_worse, p_better = _mwu(sb, sn)
            changes.append(Change(
                case=_case_label(row), metric=f"speedup vs {reference}", higher_is_better=True,
                base=row["speedup_b"], new=row["speedup_n"],
                p_value=min(p_worse, p_better) if sb.size > 1 and sn.size > 1 else math.nan,
                verdict=_decide(worse_by, p_worse, p_better, threshold, alpha)))
    return changes


def _side(row: pd.Series, suffix: str) -> pd.Series:
    return pd.Series({"time_samples": row[f"time_samples{suffix}"],
                      "time_median_s": row[f"time_median_s{suffix}"]})


def _same_machine_changes(base: pd.DataFrame, new: pd.DataFrame, threshold: float,
                          alpha: float, mem_floor: float) -> list[Change]:
    joined = latest_ok(base).merge(latest_ok(new), on=[*KEY_COLUMNS, *SAME_MACHINE],
                                   suffixes=("_b", "_n"))
    changes = []
    for _, row in joined.iterrows():
        label = _case_label(row)
        tb, tn = samples_of(_side(row, "_b")), samples_of(_side(row, "_n"))
        p_worse, p_better = _mwu(tn, tb)
        changes.append(Change(
            case=label, metric="time", higher_is_better=False,
            base=row["time_median_s_b"], new=row["time_median_s_n"],
            p_value=min(p_worse, p_better) if tb.size > 1 and tn.size > 1 else math.nan,
            verdict=_decide(row["time_median_s_n"] / row["time_median_s_b"], p_worse, p_better,
                            threshold, alpha)))
        mb, mn = row["peak_mem_bytes_b"], row["peak_mem_bytes_n"]
        if mb > 0 and mn > 0:
            # No samples: the absolute floor plays the part of the significance test.
            big = abs(mn - mb) >= mem_floor
            changes.append(Change(
                case=label, metric="peak memory", higher_is_better=False, base=float(mb),
                new=float(mn), p_value=math.nan,
                verdict=_decide(mn / mb, 0.0 if big else 1.0, 0.0 if big else 1.0, threshold,
                                alpha)))
    return changes


def compare(base: pd.DataFrame, new: pd.DataFrame, threshold: float = 1.10, alpha: float = 0.05,
            reference: str = REFERENCE, mem_floor: float = MIN_MEM_DELTA_BYTES) -> list[Change]:
    """Every comparable metric of every case present (ok) in both tables."""
    if threshold <= 1:
        raise ValueError(f"threshold must be > 1 (a ratio such as 1.10), got {threshold}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    return (_relative_changes(base, new, reference, threshold, alpha)
            + _same_machine_changes(base, new, threshold, alpha, mem_floor))


def _fmt(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.4g}"


def markdown(changes: Iterable[Change], show_all: bool = False) -> str:
    """A markdown table of the changes (only regressions and improvements unless show_all)."""
    changes = list(changes)
    shown = [c for c in changes if show_all or c.verdict != "unchanged"]
    order = {"regression": 0, "improvement": 1, "unchanged": 2}
    shown.sort(key=lambda c: (order[c.verdict], -c.worse_by))
    lines = ["| case | metric | base | new | worse by | p | result |",
             "|---|---|---|---|---|---|---|"]
    for c in shown:
        better = "higher" if c.higher_is_better else "lower"
        lines.append(f"| {c.case} | {c.metric} ({better} is better) | {_fmt(c.base)} | "
                     f"{_fmt(c.new)} | {_fmt(c.worse_by)}x | {_fmt(c.p_value)} | "
                     f"{c.verdict} |")
    counts = {v: sum(c.verdict == v for c in changes) for v in order}
    summary = (f"{len(changes)} comparisons: {counts['regression']} regression(s), "
               f"{counts['improvement']} improvement(s), {counts['unchanged']} unchanged")
    if len(shown) == 0:
        return summary
    return "\n".join(lines) + "\n\n" + summary
