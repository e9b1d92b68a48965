"""The MD page: ns/day per backend and precision, and the energy drift of each NVE run.

Read from the ok rows of the ``md`` level (``equibench.levels.md``): each row's ``extra``
holds its ``ns_per_day``, ``drift_mev_per_atom_ps``, ``first_step_s``, ``atoms`` and
``timestep_fs``. Failed md cases are listed on the Overview with their reasons.
"""

from __future__ import annotations

import json

import pandas as pd
import plotly.graph_objects as go
from equibench.dashboards.controls import add_selector
from equibench.dashboards.figures import (
    CASE_COLUMNS,
    HOVER_TAIL,
    MARGIN,
    Chart,
    _colors,
    _hover,
    esc,
    prepared,
)

# extra key -> column of the page's tables
METRICS = {"ns_per_day": "ns/day", "steps_per_s": "steps/s", "atom_steps_per_s": "atom-steps/s",
           "first_step_s": "first step (s)", "drift_mev_per_atom_ps": "drift (meV/atom/ps)",
           "simulated_ps": "simulated (ps)", "atoms": "atoms", "timestep_fs": "timestep (fs)"}
PRECISIONS = ("float32", "float64")


def md_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The ok md rows (``figures.prepared``) with the metrics of :data:`METRICS` as columns
    named by their keys (NaN where a row lacks one)."""
    data = prepared(frame[frame["level"] == "md"])
    extras = [json.loads(e) if e else {} for e in data["extra"]]
    for key in METRICS:
        data[key] = [float(x.get(key, float("nan"))) for x in extras]
    return data


def ns_per_day(frame: pd.DataFrame) -> Chart:
    """Bars of ns/day: per structure and precision, a bar per backend (and model); a
    machine menu."""
    key, title = "md-ns-per-day", "md: ns/day per backend and precision"
    data = md_rows(frame)
    if data.empty:
        return Chart(key, title, None)
    data = data.sort_values(["workload", "precision", "series"])
    colors = _colors(list(data["series"]))
    fig = go.Figure()
    tags, legend_seen = [], set()
    for (machine, name), part in data.groupby(["machine", "series"]):
        fig.add_trace(go.Bar(
            x=[part["workload"].map(esc).tolist(), part["precision"].map(esc).tolist()],
            y=part["ns_per_day"], name=esc(name), legendgroup=esc(name),
            showlegend=name not in legend_seen, marker_color=colors[name],
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
    """Per machine, structure and backend: drift, the run's length, ns/day and first-step
    time, float32 beside float64 ('' where a precision did not run ok)."""
    data = md_rows(frame)
    if data.empty:
        return pd.DataFrame()
    shown = {"drift_mev_per_atom_ps": "drift (meV/atom/ps)", "simulated_ps": "simulated (ps)",
             "ns_per_day": "ns/day", "first_step_s": "first step (s)"}
    wide = data.pivot_table(index=["machine", "workload", "atoms", "series"],
                            columns="precision", values=list(shown), aggfunc="last")
    present = [p for p in (*PRECISIONS, *sorted(set(data["precision"]) - set(PRECISIONS)))
               if p in set(data["precision"])]
    wide = wide.reindex(columns=[(m, p) for m in shown for p in present])
    wide.columns = [f"{shown[m]} {p}" for m, p in wide.columns]
    return (wide.reset_index().rename(columns={"workload": "structure", "series": "backend"})
            .map(lambda v: ("" if v != v else f"{v:.4g}") if isinstance(v, float) else v))
