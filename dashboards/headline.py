"""The Overview's headline: per case, the fastest implementation and what it gains over e3nn.

A case is a level, workload and direction on one machine and device (for models the
workload is the model and the implementation its tensor-product backend). Each line is
taken at one precision, float32 where the case has it, and at the largest batch with ok
rows at that precision, and says which. Only ``ok`` rows count: imported rows were never
checked against the reference, and failed rows have no time. The speedup is
``equibench.analysis.relative``'s: the median of per-round ratios where the two rows were
timed in interleaved rounds, with their interquartile range, else the ratio of medians,
labelled unpaired.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from equibench.dashboards.figures import prepared

from equibench.analysis import (
    MATCH_COLUMNS,
    REFERENCE,
    SAME_MACHINE,
    latest_ok,
    relative,
)
from equibench.paired import summary
from equibench.vocabulary import DIRECTIONS, LEVELS

CASE = ["level", "workload", "direction", "machine", "device"]
PREFERRED_PRECISION = "float32"
# The columns that identify one row among the latest ok rows (analysis.latest_ok's key).
ROW_KEY = [*MATCH_COLUMNS, *SAME_MACHINE, "run_id"]
COLUMNS = [*CASE, "precision", "batch", "series", "implementation", "variant", "candidates",
           "throughput", "throughput_unit", "reference", "reference_status", "speedup",
           "speedup_q1", "speedup_q3", "speedup_count", "paired", "peak_tensor_bytes",
           "ref_peak_tensor_bytes", "peak_tensor_method", "run_id", "git_commit"]


def _precision(present: set[str]) -> str:
    """float32 where the case has it (the usual first look), else the first by name."""
    return PREFERRED_PRECISION if PREFERRED_PRECISION in present else sorted(present)[0]


def _order(lines: pd.DataFrame) -> pd.DataFrame:
    level = lines["level"].map(lambda v: (LEVELS.index(v) if v in LEVELS
                                          else len(LEVELS), v))
    direction = lines["direction"].map(lambda v: (DIRECTIONS.index(v) if v in DIRECTIONS
                                                  else len(DIRECTIONS), v))
    order = sorted(range(len(lines)), key=lambda i: (level.iloc[i], lines["workload"].iloc[i],
                                                     direction.iloc[i],
                                                     lines["machine"].iloc[i],
                                                     lines["device"].iloc[i]))
    return lines.iloc[order].reset_index(drop=True)


def _reference_status(rows: pd.DataFrame, line: dict) -> str:
    """Why e3nn has no ok row at a line's case, from every row (``prepared``, all
    statuses): its statuses there, or 'not run'."""
    mask = rows["implementation"] == REFERENCE
    for column in [*CASE, "precision", "batch"]:
        mask &= rows[column] == line[column]
    statuses = sorted(set(rows.loc[mask, "status"]) - {"ok"})
    return ", ".join(statuses) if statuses else "not run"


def headline(frame: pd.DataFrame) -> pd.DataFrame:
    """One line per case (``CASE``): its fastest ok row by throughput at the chosen
    precision and batch, ``candidates`` (how many rows ran ok there), the speedup over its
    reference row in ``analysis.relative`` (``reference``: that row's name, '' when the
    fastest row is the reference itself), ``reference_status`` (e3nn's status at the case
    when no ok e3nn row is the reference), the interquartile range of the speedup's samples
    and their count, and both rows' ``peak_tensor_bytes`` (live tensor bytes, which do not
    depend on the allocator; -1 or 0: not measured)."""
    ok = frame[frame["status"] == "ok"]
    if ok.empty:
        return pd.DataFrame(columns=COLUMNS)
    # The rows relative() compares: the latest of each case when the table holds several runs.
    rows = prepared(latest_ok(ok)).reset_index(drop=True)
    everything = prepared(frame, ok_only=False)
    rel = relative(ok)
    rel_by_key = {tuple(r[ROW_KEY]): r for _, r in rel.iterrows()}
    lines = []
    for _, case in rows.groupby(CASE, sort=False):
        case = case[case["precision"] == _precision(set(case["precision"]))]
        at = case[case["batch"] == case["batch"].max()]
        best = at.loc[at["throughput"].idxmax()]
        line = {**{c: best[c] for c in [*CASE, "precision", "batch", "series",
                                          "implementation", "variant", "throughput",
                                          "throughput_unit", "peak_tensor_bytes",
                                          "peak_tensor_method", "run_id", "git_commit"]},
                "candidates": len(at), "reference": "", "reference_status": "",
                "speedup": math.nan, "speedup_q1": math.nan, "speedup_q3": math.nan,
                "speedup_count": 0, "paired": False, "ref_peak_tensor_bytes": -1}
        reference_is_e3nn = best["implementation"] == REFERENCE
        found = rel_by_key.get(tuple(best[ROW_KEY]))
        if found is not None:
            samples = np.asarray(found["speedup_samples"], dtype=float)
            _, q1, q3 = summary(samples)
            line.update(reference=found["reference"], speedup=float(found["speedup"]),
                        speedup_q1=q1, speedup_q3=q3, speedup_count=int(samples.size),
                        paired=bool(found["paired"]),
                        ref_peak_tensor_bytes=int(found["ref_peak_tensor_bytes"]))
            reference_is_e3nn = found["ref_implementation"] == REFERENCE
        if not reference_is_e3nn:
            line["reference_status"] = _reference_status(everything, line)
        lines.append(line)
    return _order(pd.DataFrame(lines, columns=COLUMNS))


def _memory(value: float) -> str:
    """Bytes in binary units; -1 or 0 is how rows say 'not measured', never a number."""
    if not value > 0:
        return "not measured"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.3g} {unit}"
        value /= 1024
    raise AssertionError("unreachable: the loop returns at GiB")


def _speedup(line: pd.Series) -> str:
    if not line["reference"]:
        if line["implementation"] == REFERENCE:
            return f"{REFERENCE} itself is the fastest"
        return f"no ok {REFERENCE} row ({REFERENCE}: {line['reference_status']})"
    text = f"{line['speedup']:.3g}×"
    if line["reference"] != REFERENCE:
        text += f" over {line['reference']}"
    if line["reference_status"]:
        text += f" ({REFERENCE}: {line['reference_status']})"
    return text


def _spread(line: pd.Series) -> str:
    if not line["reference"]:
        return ""
    iqr = f"IQR {line['speedup_q1']:.3g}–{line['speedup_q3']:.3g}×"
    if line["paired"]:
        return f"{iqr} over {line['speedup_count']} paired rounds"
    return f"unpaired (ratio of medians); its own {line['speedup_count']} samples' {iqr}"


def _memories(line: pd.Series) -> str:
    ours = _memory(line["peak_tensor_bytes"])
    if not line["reference"]:
        return ours
    text = f"{ours} vs {_memory(line['ref_peak_tensor_bytes'])} ({line['reference']})"
    if line["peak_tensor_bytes"] > 0 and line["ref_peak_tensor_bytes"] > 0:
        text += f": {line['peak_tensor_bytes'] / line['ref_peak_tensor_bytes']:.2g}×"
    return text


def display(lines: pd.DataFrame, device: bool = True) -> pd.DataFrame:
    """The headline as the Overview shows it under one machine's heading (``by_machine``),
    which names the machine: one string per cell (escaped by the page). ``device``: say
    the device in each row (a machine whose lines ran on several)."""
    if lines.empty:
        return pd.DataFrame()
    return pd.DataFrame({
        "level": lines["level"],
        "workload": lines["workload"],
        "direction": lines["direction"],
        "measured at": [(f"{r.device}, " if device else "") + f"{r.precision}, batch {r.batch}"
                        for r in lines.itertuples()],
        "fastest": [f"{r.series} (of {r.candidates} ok)" for r in lines.itertuples()],
        f"speedup over {REFERENCE}": [_speedup(r) for _, r in lines.iterrows()],
        "spread of the speedup": [_spread(r) for _, r in lines.iterrows()],
        "peak memory: fastest vs reference": [_memories(r) for _, r in lines.iterrows()],
    })


def by_machine(lines: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The headline a machine at a time, as the Overview shows it: its heading (the machine,
    and its device where all its lines ran on one) and its ``display`` table, which names
    the device per row only where the machine's lines ran on several."""
    found = []
    for machine, part in lines.groupby("machine", sort=True):
        devices = sorted(set(part["device"]))
        heading = f"{machine} ({devices[0]})" if len(devices) == 1 else str(machine)
        found.append((heading, display(part.reset_index(drop=True), len(devices) > 1)))
    return found
