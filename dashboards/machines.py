"""The Machines page: what each machine of a site's tables was, the runs made on it, and the
speedups over e3nn each measured, side by side.

A machine is its hardware label (``equibench.analysis.machine_labels``); where a site holds
several configurations of one machine (hosts, CPU allocators, thread counts) each is its own
entry, labelled as the figures' menus label it (``controls.configurations``). Across machines
the page compares only ratios taken on each machine, never raw times.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from equibench.dashboards.controls import configurations
from equibench.dashboards.figures import MARGIN, Chart, esc, series_label
from equibench.dashboards.layout import Block, table
from plotly.colors import qualitative

from equibench.analysis import REFERENCE, speedups

COMPARISON_NOTE = (
    "Comparisons across machines use paired speedups and roofline fractions only: an "
    f"implementation's speedup over {REFERENCE} is the median of the per-round ratios of the "
    f"two timed in the same interleaved rounds of one run on one machine (its own {REFERENCE}, "
    "never another machine's), and the roofline places each machine's points under that "
    "machine's own measured peaks. Raw times from different runs are never compared: "
    "another machine, allocator, thread count, clock or load changes them all.")
CONFIGURATION_NOTE = (
    "One row per machine, or per configuration where one machine ran with several hosts, CPU "
    "allocators or thread counts: those time differently, so each is its own entry here and "
    "in every figure's menu. A value that varied between the rows of one entry is listed "
    "each way it was; 'not recorded' where no row says (older tables have no ISA flags).")
NOT_RECORDED = "not recorded"
# Row column -> the Machines table's heading, for what every machine has: its hardware,
HARDWARE_FIELDS = {"host": "host", "cpu_model": "CPU model", "cpu_flags": "ISA flags",
                   "cpu_march_native": "-march=native", "cpu_count": "cores"}
# its settings and software,
SETTING_FIELDS = {"cpu_allocator": "allocator", "threads": "threads",
                  "version_torch": "torch", "python": "Python"}
# and what only a GPU machine has, shown when a row ran on one.
GPU_FIELDS = {"gpu_name": "GPU", "cuda": "CUDA", "gpu_driver": "driver",
              "gpu_clock_sm_mhz": "SM clock (MHz)",
              "gpu_clock_max_sm_mhz": "max SM clock (MHz)",
              "gpu_power_limit_w": "power limit (W)", "gpu_mig_mode": "MIG mode"}
# A case measured on several machines: the speedup figure compares these.
CASE = ["level", "workload", "direction", "precision", "batch", "implementation", "variant"]


def labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its configuration columns (``controls.configurations``) in place of the
    recorded allocator and threads, and ``configuration``, its label."""
    found = configurations(frame)
    return frame.assign(cpu_allocator=found["cpu_allocator"], threads=found["threads"],
                        configuration=found["configuration"])


def _recorded(value: object) -> bool:
    """Whether a cell holds a value: '' (text), -1 (counts) and NaN are the schema's blanks."""
    if isinstance(value, float) and math.isnan(value):
        return False
    return value not in ("", -1)


def _cell(values: pd.Series) -> str:
    """The values of one column over an entry's rows: each distinct text once, in order;
    numbers as their range (a GPU's clock moves from row to row)."""
    found = [v for v in dict.fromkeys(values) if _recorded(v)]
    if not found:
        return NOT_RECORDED
    if isinstance(found[0], str):
        return ", ".join(found)
    low, high = min(found), max(found)
    return f"{low:g}" if low == high else f"{low:g}-{high:g}"


def machines_table(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per machine configuration: its hardware, software and GPU settings (the GPU
    columns where any row ran on a GPU) and how many runs and rows it holds."""
    data = labelled(frame)
    settings = {**SETTING_FIELDS, **(GPU_FIELDS if (data["gpu_name"] != "").any() else {})}
    rows = []
    for configuration, part in data.groupby("configuration", sort=True):
        row = {"machine": configuration}
        row.update({heading: _cell(part[column]) for column, heading in HARDWARE_FIELDS.items()})
        # Nothing records the machine's memory yet (neither the rows nor machine.json).
        row["memory"] = f"unknown ({NOT_RECORDED})"
        row.update({heading: _cell(part[column]) for column, heading in settings.items()})
        row.update({"runs": part["run_id"].nunique(), "rows": len(part)})
        rows.append(row)
    return pd.DataFrame(rows)


def runs_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Every run on each machine configuration: its configuration file, commit, time span
    and rows."""
    if frame.empty:
        return pd.DataFrame()
    data = labelled(frame).assign(ok=frame["status"] == "ok")
    runs = (data.groupby(["configuration", "run_id"], sort=True)
            .agg(config_name=("config_name", "first"), git_commit=("git_commit", "first"),
                 first=("timestamp", "min"), last=("timestamp", "max"),
                 rows=("status", "size"), ok=("ok", "sum"))
            .reset_index().rename(columns={"configuration": "machine"}))
    runs["git_commit"] = runs["git_commit"].str.slice(0, 10)
    return runs


def common_speedups(frame: pd.DataFrame) -> pd.DataFrame:
    """``analysis.speedups`` over e3nn of each machine configuration's ok rows, for the cases
    (``CASE``) measured on at least two configurations; with ``configuration``, ``series``
    and ``rounds`` (paired rounds; 0 where the two were not interleaved)."""
    data = labelled(frame)
    joined = speedups(data[data["status"] == "ok"], REFERENCE)
    if joined.empty:
        return joined
    spread = joined.groupby(CASE)["configuration"].transform("nunique")
    common = joined[spread > 1].copy()
    common["series"] = [series_label(i, v, e) for i, v, e in
                        zip(common["implementation"], common["variant"], common["extra"],
                            strict=True)]
    common["rounds"] = [len(s) if p else 0 for s, p in zip(common["speedup_samples"],
                                                           common["paired"], strict=True)]
    return common.sort_values([*CASE, "configuration"]).reset_index(drop=True)


def _case_names(data: pd.DataFrame) -> pd.Series:
    return (data["level"] + " " + data["workload"] + " " + data["direction"] + " "
            + data["precision"] + " b=" + data["batch"].astype(str))


def speedup_comparison(frame: pd.DataFrame) -> Chart:
    """Per case measured on several machines, each implementation's paired speedup over
    e3nn on each machine: a bar per machine configuration, whiskers over the rounds."""
    key, title = "machines-speedup", f"Speedup over {REFERENCE}, machine by machine"
    data = common_speedups(frame)
    if data.empty:
        return Chart(key, title, None)
    data["case"] = _case_names(data)
    fig = go.Figure()
    for i, (configuration, part) in enumerate(data.groupby("configuration", sort=True)):
        pairing = [f"paired over {n} rounds" if n else "unpaired: ratio of medians"
                   for n in part["rounds"]]
        custom = np.stack([part["git_commit"].str.slice(0, 10).map(esc),
                           part["run_id"].map(esc), pairing], axis=-1)
        fig.add_trace(go.Bar(
            x=[part["case"].map(esc).tolist(), part["series"].map(esc).tolist()],
            y=part["speedup"], name=esc(configuration),
            marker_color=qualitative.Bold[i % len(qualitative.Bold)],
            error_y=dict(type="data", symmetric=False,
                         array=part["speedup_q3"] - part["speedup"],
                         arrayminus=part["speedup"] - part["speedup_q1"]),
            customdata=custom,
            hovertemplate=f"{esc(configuration)}<br>%{{x}}: %{{y:.3g}}x "
                          "(%{customdata[2]})<br>run %{customdata[1]}<br>"
                          "commit %{customdata[0]}<extra></extra>"))
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_yaxes(type="log", title_text=f"speedup over {REFERENCE} (same machine, run "
                                            "and rounds)")
    fig.update_layout(barmode="group", height=560, margin=MARGIN,
                      legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0))
    cols = ["configuration", "machine", "host", "cpu_allocator", "threads", "device",
            "run_id", "git_commit", *CASE, "speedup", "speedup_q1", "speedup_q3", "paired",
            "rounds", "time_median_s", "ref_time_s"]
    return Chart(key, title, fig, data[cols], note=(
        f"A bar per machine: the median of the per-round ratios {REFERENCE} / implementation, "
        "both timed in the same interleaved rounds of one run there; whiskers: the "
        "interquartile range over the rounds. Only cases measured on two machines or more "
        "are drawn. Above 1 the implementation is faster than that machine's own "
        f"{REFERENCE}; the times in the CSV are each machine's own, never compared."))


def blocks(frame: pd.DataFrame, eager: pd.DataFrame) -> list[Block]:
    """The page: what to compare, the machines, their runs (every row of ``frame``) and the
    speedups measured on each (``eager``, the rows the other figures draw)."""
    if frame.empty:
        return ['<p class="empty">no rows</p>']
    return [f'<p class="note">{esc(COMPARISON_NOTE)}</p>',
            "<h2>Machines</h2>" + f'<p class="note">{esc(CONFIGURATION_NOTE)}</p>'
            + table(machines_table(frame)),
            "<h2>Runs</h2>" + table(runs_table(frame)),
            speedup_comparison(eager)]
