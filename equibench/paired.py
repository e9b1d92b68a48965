"""Ratios between two rows, paired round by round where the rows were interleaved.

Two rows with the same non-empty ``rounds_id`` were timed in the same interleaved rounds
(``equibench.runner``): round ``i`` of one ran within a second or two of round ``i`` of the
other, so the ratio of their round medians cancels what the machine did in that round. Their
speedup is the median of the per-round ratios, and its spread the spread of those ratios.
Rows timed apart (another job, an older table, an import) fall back to the ratio of their
medians, with samples built from one side's raw samples, and say so (``paired`` False).

No torch here: reports import this.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def is_paired(a: pd.Series, b: pd.Series, suffix_a: str = "", suffix_b: str = "") -> bool:
    """Whether rows ``a`` and ``b`` (columns with the given suffixes) were interleaved."""
    rid_a, rid_b = a[f"rounds_id{suffix_a}"], b[f"rounds_id{suffix_b}"]
    ta, tb = a[f"round_times_s{suffix_a}"], b[f"round_times_s{suffix_b}"]
    return bool(rid_a) and rid_a == rid_b and len(ta) == len(tb) > 0


def samples_of(row: pd.Series, suffix: str = "") -> np.ndarray:
    """A row's timing samples; its median alone when the samples were not kept.

    ``suffix`` picks one side of a merged row (``time_samples_b``, ...).
    """
    samples = np.asarray(row[f"time_samples{suffix}"], dtype=float)
    if samples.size:
        return samples
    return np.array([row[f"time_median_s{suffix}"]], dtype=float)


def speedup_samples(row: pd.Series, ref: pd.Series, suffix_row: str = "",
                    suffix_ref: str = "") -> tuple[np.ndarray, bool]:
    """Samples of ``t_ref / t_row`` (above 1: ``row`` is faster), and whether they are
    paired per-round ratios (else the reference's median over ``row``'s raw samples)."""
    if is_paired(row, ref, suffix_row, suffix_ref):
        return (np.asarray(ref[f"round_times_s{suffix_ref}"], dtype=float)
                / np.asarray(row[f"round_times_s{suffix_row}"], dtype=float)), True
    return ref[f"time_median_s{suffix_ref}"] / samples_of(row, suffix_row), False


def ratio(slower: pd.Series, faster: pd.Series) -> tuple[float, float, float, bool]:
    """``t_slower / t_faster``: the median of the paired per-round ratios and their
    interquartile bounds, and True; or, for rows not interleaved, the ratio of medians with
    NaN bounds, and False."""
    samples, paired = speedup_samples(faster, slower)
    if not paired:
        return slower["time_median_s"] / faster["time_median_s"], np.nan, np.nan, False
    return (*summary(samples), True)


def summary(samples: np.ndarray) -> tuple[float, float, float]:
    """Median and interquartile bounds of ratio samples."""
    q1, median, q3 = np.percentile(samples, [25, 50, 75])
    return float(median), float(q1), float(q3)


def join_speedups(rows: pd.DataFrame, refs: pd.DataFrame, on: list[str]) -> pd.DataFrame:
    """``rows`` joined with their reference rows on ``on``, with the speedup over the
    reference: ``speedup`` (median of the paired per-round ratios, or the ratio of medians
    when the two were not interleaved), ``speedup_q1``/``speedup_q3``, ``speedup_samples``,
    ``paired`` and ``ref_time_s``. ``refs`` columns other than ``on`` get the suffix
    ``_ref``."""
    refs = refs.rename(columns={c: f"{c}_ref" for c in refs.columns if c not in on})
    joined = rows.merge(refs, on=on)
    if joined.empty:
        return joined.assign(speedup=[], speedup_q1=[], speedup_q3=[], speedup_samples=[],
                             paired=[], ref_time_s=[])
    computed = [speedup_samples(r, r, "", "_ref") for _, r in joined.iterrows()]
    stats = [summary(s) for s, _ in computed]
    unpaired = [r["time_median_s_ref"] / r["time_median_s"] for _, r in joined.iterrows()]
    joined["speedup_samples"] = [list(map(float, s)) for s, _ in computed]
    joined["paired"] = [p for _, p in computed]
    joined["speedup"] = [st[0] if p else u
                         for st, (_, p), u in zip(stats, computed, unpaired, strict=True)]
    joined["speedup_q1"] = [st[1] for st in stats]
    joined["speedup_q3"] = [st[2] for st in stats]
    joined["ref_time_s"] = joined["time_median_s_ref"]
    return joined
