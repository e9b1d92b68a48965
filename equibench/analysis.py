"""The shared analysis of result tables: which rows are one case, which row a case is
compared with, and its speedup over that row.

Regression checks (``equibench.compare``), claims, targets, history and the dashboards all
read speedups the same way:

- a case is its key columns (``KEY_COLUMNS``, the fields of ``equibench.cases.Case``) plus
  the torch thread count and the CPU allocator (``MATCH_COLUMNS``): a run with another
  allocator is another measurement, not a code change;
- the rows measured together (one run, one machine, same settings) form a comparison group
  (``GROUP_COLUMNS``); each row's speedup is over the group's reference row (the ``e3nn``
  row of the same variant, else e3nn's ``default`` row; in a group without e3nn, the
  group's first row by implementation and variant);
- rows timed in interleaved rounds give one paired ratio per round (``equibench.paired``),
  which cancels the machine's drift; other rows the ratio of their medians.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from equibench.cases import KEY_FIELDS
from equibench.paired import join_speedups, speedup_samples
from equibench.vocabulary import COMPARABLE_STATUSES, machine_label

KEY_COLUMNS: tuple[str, ...] = KEY_FIELDS
MATCH_COLUMNS: tuple[str, ...] = (*KEY_FIELDS, "threads", "cpu_allocator")
SAME_MACHINE = ("host", "cpu_model", "gpu_name")
# The implementations and variants of one group are compared with each other (runner's
# comparison_key, plus what else makes a measurement).
GROUP_COLUMNS = ("level", "workload", "direction", "precision", "batch", "device", "threads",
                 "cpu_allocator", "run_id", *SAME_MACHINE)
REFERENCE = "e3nn"  # the implementation that speedups are over, where a group has it


def machine_labels(frame: pd.DataFrame) -> pd.Series:
    """The hardware each row ran on: ``equibench.vocabulary.machine_label`` of its GPU name
    and CPU model (a missing value counts as none)."""
    gpu = frame["gpu_name"].fillna("").astype(str)
    cpu = frame["cpu_model"].fillna("").astype(str)
    return pd.Series([machine_label(g, c) for g, c in zip(gpu, cpu, strict=True)],
                     index=frame.index, dtype=object)


def latest(frame: pd.DataFrame, keys: Iterable[str]) -> pd.DataFrame:
    """One row per ``keys``: the most recent when a table holds several runs."""
    out = frame.copy()
    out["machine"] = machine_labels(out)
    out = out.sort_values("timestamp", kind="stable")
    return out.drop_duplicates(list(keys), keep="last")


def latest_ok(frame: pd.DataFrame) -> pd.DataFrame:
    """Timed rows that may be compared (ok or imported, never unverifiable), one per case
    and machine: the most recent when a table holds several runs."""
    return latest(frame[frame["status"].isin(COMPARABLE_STATUSES)],
                  [*MATCH_COLUMNS, *SAME_MACHINE])


def case_label(row: pd.Series) -> str:
    """A case's name on one line, as reports list it."""
    variant = "" if row["variant"] == "default" else f"[{row['variant']}]"
    return (f"{row['level']}/{row['workload']}{variant} {row['implementation']} "
            f"{row['direction']} {row['precision']} b={row['batch']} {row['device']}")


def _reference_index(group: pd.DataFrame, row: pd.Series, reference: str):
    """Index of the row that ``row`` is compared with in its group, or None for the
    reference itself: the ``reference`` implementation's row of the same variant, else its
    ``default`` row (a variant of one implementation, e.g. cuequivariance[ir_mul], is
    compared with the reference as it is by default), else the group's first row by
    implementation and variant."""
    ours = group[group["implementation"] == reference]
    for variant in (row["variant"], "default"):
        rows = ours[ours["variant"] == variant]
        if len(rows):
            index = rows.index[0]
            break
    else:
        index = group.sort_values(["implementation", "variant"]).index[0]
    return None if index == row.name else index


def relative(frame: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Each ok row with its speedup over its group's reference row (same run, machine,
    threads, allocator): columns ``reference`` (the reference's implementation[variant]),
    ``ref_implementation``, ``ref_time_s``, ``ref_peak_tensor_bytes``, ``speedup_samples``,
    ``speedup`` and ``paired``."""
    ok = latest_ok(frame)
    out = []
    for _, group in ok.groupby(list(GROUP_COLUMNS), dropna=False, sort=False):
        for _, row in group.iterrows():
            index = _reference_index(group, row, reference)
            if index is None:
                continue
            ref = group.loc[index]
            samples, paired = speedup_samples(row, ref)
            speedup = (float(np.median(samples)) if paired
                       else ref["time_median_s"] / row["time_median_s"])
            variant = "" if ref["variant"] == "default" else f"[{ref['variant']}]"
            out.append({**row.to_dict(), "reference": f"{ref['implementation']}{variant}",
                        "ref_implementation": ref["implementation"],
                        "ref_time_s": ref["time_median_s"],
                        "ref_peak_tensor_bytes": ref["peak_tensor_bytes"],
                        "speedup_samples": samples, "speedup": speedup, "paired": paired})
    columns = [*ok.columns, "reference", "ref_implementation", "ref_time_s",
               "ref_peak_tensor_bytes", "speedup_samples", "speedup", "paired"]
    return pd.DataFrame(out, columns=columns)


def speedups(frame: pd.DataFrame, reference: str = REFERENCE,
             column: str = "implementation") -> pd.DataFrame:
    """Each ok row joined with the row of the same case, run and machine whose ``column``
    is ``reference`` (by default: the reference implementation). A variant the reference
    implementation does not have (``cuequivariance[ir_mul]``) is compared with its
    ``default`` row, as :func:`relative` does.

    Adds ``ref_time_s``, ``speedup`` (paired per-round where the rows were interleaved,
    else the ratio of medians), ``speedup_q1``/``speedup_q3`` and ``paired``
    (``equibench.paired.join_speedups``).
    """
    ok = latest_ok(frame)
    match = [c for c in MATCH_COLUMNS if c != column] + ["run_id", *SAME_MACHINE]
    timing = ["time_median_s", "time_samples", "round_times_s", "rounds_id"]
    refs = ok[ok[column] == reference][[*match, *timing]]
    rows = ok[ok[column] != reference]
    exact = join_speedups(rows, refs, match)
    if column != "implementation":
        return exact
    # Rows left without a same-variant reference fall back to the reference's default.
    keys = [c for c in match if c != "variant"]
    found = exact[[*keys, "variant"]].drop_duplicates().assign(_found=True)
    left = rows.merge(found, on=[*keys, "variant"], how="left")
    left = left[left["_found"].isna()].drop(columns="_found")
    defaults = refs[refs["variant"] == "default"].drop(columns="variant")
    return pd.concat([exact, join_speedups(left, defaults, keys)], ignore_index=True)
