"""Plotly figures built from a result table (one function, one figure)."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

HOVER = ["git_commit", "host", "cpu_model", "gpu_name", "time_median_s", "time_iqr_s",
         "peak_mem_bytes", "max_scaled_err"]


def _ok(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["status"] == "ok"].copy()


def _series(frame: pd.DataFrame) -> pd.Series:
    return frame["implementation"] + " / " + frame["precision"]


def throughput_vs_batch(frame: pd.DataFrame, level: str) -> go.Figure | None:
    """Throughput against batch size, a line per implementation and precision."""
    data = _ok(frame[frame["level"] == level])
    if data.empty:
        return None
    data["series"] = _series(data)
    data = data.sort_values("batch")
    unit = data["throughput_unit"].iloc[0]
    fig = px.line(
        data, x="batch", y="throughput", color="series", markers=True,
        facet_row="direction", facet_col="workload", log_x=True, log_y=True,
        hover_data=[c for c in HOVER if c in data.columns],
        labels={"throughput": unit, "batch": "batch", "series": "implementation / precision"},
        title=f"{level}: throughput against batch size (higher is better)",
    )
    fig.update_yaxes(matches=None)
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=")[-1]))
    fig.update_layout(height=320 * data["direction"].nunique() + 120)
    return fig


def speedup_over_reference(frame: pd.DataFrame, level: str, reference: str = "e3nn"
                           ) -> go.Figure | None:
    """Throughput of each implementation divided by the reference's, same case otherwise."""
    data = _ok(frame[frame["level"] == level])
    keys = ["workload", "variant", "direction", "precision", "batch", "device", "run_id"]
    ref = data[data["implementation"] == reference][keys + ["throughput"]]
    if ref.empty:
        return None
    merged = data.merge(ref, on=keys, suffixes=("", "_ref"))
    merged = merged[merged["implementation"] != reference]
    if merged.empty:
        return None
    merged["speedup"] = merged["throughput"] / merged["throughput_ref"]
    merged["case"] = (merged["workload"] + " " + merged["direction"] + " b="
                      + merged["batch"].astype(str))
    merged["series"] = _series(merged)
    fig = px.bar(
        merged.sort_values(["workload", "direction", "batch"]), x="case", y="speedup",
        color="series", barmode="group", facet_row="device",
        hover_data=[c for c in HOVER if c in merged.columns],
        title=f"{level}: speedup over {reference} (same case, same run; 1 = parity)",
    )
    fig.add_hline(y=1.0, line_dash="dot")
    return fig


def peak_memory(frame: pd.DataFrame, level: str) -> go.Figure | None:
    data = _ok(frame[(frame["level"] == level) & (frame["peak_mem_bytes"] >= 0)])
    if data.empty:
        return None
    data["series"] = _series(data)
    data["peak_mem_MiB"] = data["peak_mem_bytes"] / 2**20
    fig = px.line(
        data.sort_values("batch"), x="batch", y="peak_mem_MiB", color="series", markers=True,
        facet_row="direction", facet_col="workload", log_x=True,
        hover_data=["peak_mem_method"] + [c for c in HOVER if c in data.columns],
        title=f"{level}: peak extra memory of one call (MiB, lower is better)",
    )
    fig.update_yaxes(matches=None)
    fig.for_each_annotation(lambda a: a.update(text=a.text.split("=")[-1]))
    return fig
