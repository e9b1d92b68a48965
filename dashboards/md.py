"""The MD page: ns/day per backend and precision, the energy drift of each run, and how
time per step and peak memory grow with the size of a structure (scaling runs).

Read from the ok rows of the ``md`` level (``equibench.levels.md``): each row's ``extra``
holds its ``ns_per_day``, ``drift_mev_per_atom_ps``, ``first_step_s``, ``atoms`` and
``timestep_fs``. Failed md cases are listed on the Overview with their reasons; the
largest-size table also names what stopped each backend's growth
(``equibench.scaling``).
"""

from __future__ import annotations

import json

import pandas as pd
import plotly.graph_objects as go
from equibench.dashboards.controls import add_selector
from equibench.dashboards.figures import (
    CASE_COLUMNS,
    DASHES,
    HOVER_TAIL,
    MARGIN,
    Chart,
    SeriesColors,
    _hover,
    _palette,
    esc,
    prepared,
)
from plotly.subplots import make_subplots

# extra key -> column of the page's tables
METRICS = {"ns_per_day": "ns/day", "steps_per_s": "steps/s", "atom_steps_per_s": "atom-steps/s",
           "first_step_s": "first step (s)", "drift_mev_per_atom_ps": "drift (meV/atom/ps)",
           "simulated_ps": "simulated (ps)", "atoms": "atoms", "timestep_fs": "timestep (fs)",
           "temperature_mean_k": "mean T (K)"}
PRECISIONS = ("float32", "float64")


def md_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The ok md rows (``figures.prepared``) with the metrics of :data:`METRICS` as columns
    named by their keys (NaN where a row lacks one)."""
    data = prepared(frame[frame["level"] == "md"])
    extras = [json.loads(e) if e else {} for e in data["extra"]]
    for key in METRICS:
        data[key] = [float(x.get(key, float("nan"))) for x in extras]
    return data


def ns_per_day(frame: pd.DataFrame, colors: SeriesColors | None = None) -> Chart:
    """Bars of ns/day: per structure, ensemble (nve, nvt) and precision, a bar per backend
    (and model); a machine menu."""
    key, title = "md-ns-per-day", "md: ns/day per backend and precision"
    data = md_rows(frame)
    if data.empty:
        return Chart(key, title, None)
    data = data.sort_values(["workload", "direction", "precision", "series"])
    data["run"] = data["workload"] + " " + data["direction"]
    colors = _palette(colors, data["series"])
    fig = go.Figure()
    tags, legend_seen = [], set()
    for (machine, name), part in data.groupby(["machine", "series"]):
        fig.add_trace(go.Bar(
            x=[part["run"].map(esc).tolist(), part["precision"].map(esc).tolist()],
            y=part["ns_per_day"], name=esc(name), legendgroup=esc(name),
            showlegend=name not in legend_seen, marker_color=colors(name),
            customdata=_hover(part),
            hovertemplate=f"{esc(name)}: %{{y:.4g}} ns/day<br>%{{x}}<br>" + HOVER_TAIL))
        legend_seen.add(name)
        tags.append(machine)
    fig.update_layout(barmode="group", yaxis_title="ns/day", height=480, margin=MARGIN)
    add_selector(fig, tags, label="device")
    return Chart(key, title, fig, data[[*CASE_COLUMNS, *METRICS]],
                 note="Simulated time per day of wall time at the row's timestep, from the "
                      "median seconds per timed call (batch = MD steps per call); higher is "
                      "better.")


def drift_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per machine, structure, backend and ensemble (nve, nvt): drift, the run's length,
    ns/day and first-step time, float32 beside float64 ('' where a precision did not run
    ok)."""
    data = md_rows(frame)
    if data.empty:
        return pd.DataFrame()
    shown = {"drift_mev_per_atom_ps": "drift (meV/atom/ps)", "simulated_ps": "simulated (ps)",
             "ns_per_day": "ns/day", "first_step_s": "first step (s)"}
    wide = data.pivot_table(index=["machine", "workload", "atoms", "series", "direction"],
                            columns="precision", values=list(shown), aggfunc="last")
    present = [p for p in (*PRECISIONS, *sorted(set(data["precision"]) - set(PRECISIONS)))
               if p in set(data["precision"])]
    wide = wide.reindex(columns=[(m, p) for m in shown for p in present])
    wide.columns = [f"{shown[m]} {p}" for m, p in wide.columns]
    return (wide.reset_index().rename(columns={"workload": "structure", "series": "backend"})
            .map(lambda v: ("" if v != v else f"{v:.4g}") if isinstance(v, float) else v))


def _structure(workload: str) -> str:
    from equibench.structures import StructureName

    return StructureName.parse(workload).source


def _scaling_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The ok md rows of structures that ran at two sizes or more, with ``structure`` (the
    replicated source), ``per_step_s`` and ``peak_tensor_mib``."""
    data = md_rows(frame)
    if data.empty:
        return data
    data["structure"] = data["workload"].map(_structure)
    data["per_step_s"] = data["time_median_s"] / data["batch"]
    live = data["peak_tensor_bytes"]
    data["peak_tensor_mib"] = live.where(live >= 0) / 2**20
    sizes = data.groupby("structure")["atoms"].transform("nunique")
    return data[sizes >= 2]


def scaling(frame: pd.DataFrame, colors: SeriesColors | None = None) -> list[Chart]:
    """Per structure run at two sizes or more: seconds per MD step and peak memory against
    atoms, a line per backend, precision and direction (the backend's colour, dashed apart
    by precision and direction); a machine menu."""
    data = _scaling_rows(frame)
    if data.empty:
        return []
    palette = _palette(colors, data["series"])
    charts: list[Chart] = []
    for structure, part in data.groupby("structure"):
        key = f"md-scaling-{len(charts)}"
        fig = make_subplots(rows=1, cols=2, subplot_titles=("seconds per MD step",
                                                            "peak tensor memory (MiB)"))
        part = part.sort_values("atoms")
        part["line"] = part["series"] + " " + part["precision"] + " " + part["direction"]
        settings = sorted(set(zip(part["precision"], part["direction"], strict=True)))
        dash = {s: DASHES[i % len(DASHES)] for i, s in enumerate(settings)}
        tags, legend_seen = [], set()
        for (machine, line, series, precision, direction), rows in part.groupby(
                ["machine", "line", "series", "precision", "direction"]):
            for col, metric, unit in ((1, "per_step_s", "s/step"), (2, "peak_tensor_mib", "MiB")):
                fig.add_trace(go.Scatter(
                    x=rows["atoms"], y=rows[metric], mode="lines+markers", name=esc(line),
                    legendgroup=esc(line), showlegend=col == 1 and line not in legend_seen,
                    line=dict(color=palette(series), dash=dash[(precision, direction)]),
                    customdata=_hover(rows),
                    hovertemplate=f"{esc(line)}: %{{y:.4g}} {unit} at %{{x}} atoms<br>"
                                  + HOVER_TAIL), row=1, col=col)
                tags.append(machine)
            legend_seen.add(line)
        fig.update_xaxes(type="log", title_text="atoms")
        fig.update_yaxes(type="log")
        fig.update_layout(height=460, margin=MARGIN)
        add_selector(fig, tags, label="device")
        charts.append(Chart(
            key, f"md scaling: {structure}", fig,
            part[[*CASE_COLUMNS, "atoms", "per_step_s", "peak_tensor_bytes"]],
            note="The structure in growing supercells, each backend until a size failed or "
                 "took longer per step than the run's limit (the table below says which)."))
    return charts


def largest_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per machine, structure, backend, precision and direction of the scaling runs: the
    largest size that ran ok, its seconds per step and peak memory, and what stopped the
    next size ('' if nothing did)."""
    data = _scaling_rows(frame)
    if data.empty:
        return pd.DataFrame()
    keys = ["machine", "structure", "series", "precision", "direction"]
    largest = data.sort_values("atoms").groupby(keys, as_index=False).tail(1)
    every = prepared(frame[frame["level"] == "md"], ok_only=False)
    every["structure"] = every["workload"].map(_structure)
    stops = every[every["status"] != "ok"]
    table = []
    for _, row in largest.iterrows():
        match = stops[(stops["structure"] == row["structure"])
                      & (stops["implementation"] == row["implementation"])
                      & (stops["variant"] == row["variant"])
                      & (stops["precision"] == row["precision"])
                      & (stops["direction"] == row["direction"])
                      & (stops["machine"] == row["machine"])]
        stopped = next((r for r in match["reason"] if str(r).startswith("not run (scaling)")),
                       next(iter(match["reason"]), ""))
        table.append({"machine": row["machine"], "structure": row["structure"],
                      "backend": row["series"], "precision": row["precision"],
                      "direction": row["direction"], "largest": row["workload"],
                      "atoms": int(row["atoms"]), "s/step": f"{row['per_step_s']:.3g}",
                      "peak MiB": f"{row['peak_tensor_mib']:.4g}",
                      "next size": str(stopped).removeprefix("not run (scaling): ")})
    return pd.DataFrame(table)
