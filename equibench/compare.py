"""Regression checks between two result tables (a baseline and a new run).

Cases are matched on their key columns; three metrics are compared per case:

- ``speedup vs <reference>``: each implementation's speedup over the reference
  implementation measured in the same run (``t_ref / t_impl``). Machine-independent, so a
  baseline from one machine can check a run on another. Its samples are the
  implementation's samples normalised by the same run's reference median.
- ``time``: the raw median, only where both rows ran on the same machine (same host, CPU
  model and GPU name): raw times from different machines say nothing about the code.
- ``peak memory``: same machine only.

A change counts only when it passes the ratio threshold *and* a one-sided Mann-Whitney U
test on the raw samples gives p < alpha (asv's rule). With alpha 0.05 the test needs 3
samples on one side and 4 on the other (3 against 3 cannot get below p = 1/20), so cases
with fewer repeats are never flagged. A row without samples (imported without
``--benchmark-save-data``) is decided by the threshold alone, as is peak memory, which is
one number per case: there an absolute floor stands in for the test, because resident-set
growth moves by whole pages.

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


def samples_of(row: pd.Series, suffix: str = "") -> np.ndarray:
    """A row's timing samples; its median alone when the samples were not kept.

    ``suffix`` picks one side of a merged row (``time_samples_b``, ...).
    """
    samples = np.asarray(row[f"time_samples{suffix}"], dtype=float)
    if samples.size:
        return samples
    return np.array([row[f"time_median_s{suffix}"]], dtype=float)


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


def _judge(worse_by: float, a: np.ndarray, b: np.ndarray, threshold: float,
           alpha: float) -> tuple[str, float]:
    """Verdict and p-value of a change; ``a`` stochastically greater than ``b`` means worse.

    The rank test runs only when the ratio passes the threshold (the one-sided test in the
    ratio's direction). Without two samples a side it cannot speak, and the threshold alone
    decides, as asv does for benchmarks without samples.
    """
    if worse_by >= threshold:
        side, verdict = "greater", "regression"
    elif worse_by <= 1 / threshold:
        side, verdict = "less", "improvement"
    else:
        return "unchanged", math.nan
    if a.size < 2 or b.size < 2:
        return verdict, math.nan
    p = float(mannwhitneyu(a, b, alternative=side).pvalue)
    return (verdict if p < alpha else "unchanged"), p


def speedups(frame: pd.DataFrame, reference: str = REFERENCE,
             column: str = "implementation") -> pd.DataFrame:
    """Each ok row joined with the row of the same case, run and machine whose ``column``
    is ``reference`` (by default: the reference implementation).

    Adds ``ref_time_s`` and ``speedup`` (reference median / the row's median).
    """
    ok = latest_ok(frame)
    match = [c for c in KEY_COLUMNS if c != column] + ["run_id", *SAME_MACHINE]
    ref = ok[ok[column] == reference][match + ["time_median_s"]]
    ref = ref.rename(columns={"time_median_s": "ref_time_s"})
    joined = ok[ok[column] != reference].merge(ref, on=match)
    joined["speedup"] = joined["ref_time_s"] / joined["time_median_s"]
    return joined


def _relative_changes(base: pd.DataFrame, new: pd.DataFrame, reference: str, threshold: float,
                      alpha: float) -> list[Change]:
    b, n = speedups(base, reference), speedups(new, reference)
    # The same machine when both tables have it; otherwise a case measured on exactly one
    # machine in each table is matched across machines (the ratio does not depend on it).
    same = b.merge(n, on=[*KEY_COLUMNS, *SAME_MACHINE], suffixes=("_b", "_n"))
    keys = list(KEY_COLUMNS)
    single_b = b[b.groupby(keys)["machine"].transform("size") == 1]
    single_n = n[n.groupby(keys)["machine"].transform("size") == 1]
    cross = single_b.merge(single_n, on=keys, suffixes=("_b", "_n"))
    differs = np.zeros(len(cross), dtype=bool)
    for col in SAME_MACHINE:
        differs |= (cross[f"{col}_b"] != cross[f"{col}_n"]).to_numpy()
    cross = cross[differs]
    changes = []
    for pairs in (same, cross):
        for _, row in pairs.iterrows():
            sb = row["ref_time_s_b"] / samples_of(row, "_b")
            sn = row["ref_time_s_n"] / samples_of(row, "_n")
            # A speedup that shrinks is worse: the base's samples are then the greater.
            verdict, p = _judge(row["speedup_b"] / row["speedup_n"], sb, sn, threshold, alpha)
            changes.append(Change(
                case=_case_label(row), metric=f"speedup vs {reference}", higher_is_better=True,
                base=row["speedup_b"], new=row["speedup_n"], p_value=p, verdict=verdict))
    return changes


def _same_machine_changes(base: pd.DataFrame, new: pd.DataFrame, threshold: float,
                          alpha: float, mem_floor: float) -> list[Change]:
    joined = latest_ok(base).merge(latest_ok(new), on=[*KEY_COLUMNS, *SAME_MACHINE],
                                   suffixes=("_b", "_n"))
    changes = []
    for _, row in joined.iterrows():
        label = _case_label(row)
        tb, tn = samples_of(row, "_b"), samples_of(row, "_n")
        verdict, p = _judge(row["time_median_s_n"] / row["time_median_s_b"], tn, tb, threshold,
                            alpha)
        changes.append(Change(
            case=label, metric="time", higher_is_better=False, base=row["time_median_s_b"],
            new=row["time_median_s_n"], p_value=p, verdict=verdict))
        mb, mn = row["peak_mem_bytes_b"], row["peak_mem_bytes_n"]
        if mb > 0 and mn > 0:
            # One number, no samples: the absolute floor stands in for the rank test.
            verdict = "unchanged"
            if abs(mn - mb) >= mem_floor:
                verdict, _ = _judge(mn / mb, np.empty(0), np.empty(0), threshold, alpha)
            changes.append(Change(
                case=label, metric="peak memory", higher_is_better=False, base=float(mb),
                new=float(mn), p_value=math.nan, verdict=verdict))
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
        case = c.case.replace("|", "\\|")  # a pipe would split the markdown cell
        lines.append(f"| {case} | {c.metric} ({better} is better) | {_fmt(c.base)} | "
                     f"{_fmt(c.new)} | {_fmt(c.worse_by)}x | {_fmt(c.p_value)} | "
                     f"{c.verdict} |")
    counts = {v: sum(c.verdict == v for c in changes) for v in order}
    summary = (f"{len(changes)} comparisons: {counts['regression']} regression(s), "
               f"{counts['improvement']} improvement(s), {counts['unchanged']} unchanged")
    if len(shown) == 0:
        return summary
    return "\n".join(lines) + "\n\n" + summary
