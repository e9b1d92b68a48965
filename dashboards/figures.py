"""Plotly figures built from a result table (one function, one chart).

Every builder returns a :class:`Chart`: the figure (None when there is nothing to plot)
and the tidy rows it plots, which the site writes next to the page as CSV. Traces carry a
device/precision tag for the dropdown (``controls``), the device being the machine's
configuration where the rows hold several of one machine; hovers show the commit and the
machine (configuration).
Strings from result rows are HTML-escaped before they reach Plotly, which renders a subset
of HTML in labels and decodes entities back to the literal text.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from equibench.dashboards.controls import add_selector, configurations, tag
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from equibench.analysis import REFERENCE, machine_labels, speedups
from equibench.results import code_path
from equibench.vocabulary import DIRECTIONS, TIMED_STATUSES

# The series colours: 43 distinct ones (Dark24's near-black is left to the roofline's peak
# lines). Breakdown categories take their own, paler palette, so that no category looks
# like an implementation.
PALETTE = [c for c in qualitative.Plotly + qualitative.D3 + qualitative.Dark24
           if c != "#222A2A"]
CATEGORY_PALETTE = qualitative.Set3
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
MARKS = (" (unverifiable)", " (fallback)")  # what series_label appends, last first
MARGIN = dict(t=110, l=70, r=30, b=60)
HOVER_TAIL = "commit %{customdata[0]}<br>machine %{customdata[1]}<extra></extra>"
CASE_COLUMNS = ["level", "workload", "implementation", "variant", "direction", "precision",
                "batch", "device", "machine", "configuration", "git_commit", "run_id"]


@dataclass
class Chart:
    """One figure of a page and the rows behind it."""

    key: str  # element id and CSV file stem, e.g. "tp-heatmap"
    title: str
    figure: go.Figure | None
    data: pd.DataFrame = field(default_factory=pd.DataFrame)
    note: str = ""


def esc(value: object) -> str:
    return html.escape(str(value))


def series_label(implementation: str, variant: str, extra: str, status: str = "ok") -> str:
    """The name a row's numbers carry in every figure: ``implementation [variant]``, marked
    ``(fallback)`` when its code was not the product's own (e.g. cuEquivariance's pure-PyTorch
    path on a CPU), so that a fallback's number never stands for the product, and
    ``(unverifiable)`` when the gate could not tell its rounding from a planted error."""
    label = implementation if variant == "default" else f"{implementation} [{variant}]"
    if code_path(extra).get("fallback"):
        label = f"{label} (fallback)"
    return f"{label} (unverifiable)" if status == "unverifiable" else label


def series_key(series: str) -> str:
    """The implementation and variant of a series name, without the marks
    (``(fallback)``, ``(unverifiable)``) that ``series_label`` adds: what its colour is
    keyed by."""
    for mark in MARKS:
        series = series.removesuffix(mark)
    return series


@dataclass(frozen=True)
class SeriesColors:
    """One colour per implementation and variant (``series_key``), for every figure of a
    site: a series keeps its colour from panel to panel and page to page, and its marked
    rows (fallback, unverifiable) are drawn in it too. Built once from every series name
    of the table (``of_names``): the reference's first, then by name, so the map is the
    same whatever order the rows come in, and names differ in colour while there are
    colours left in ``PALETTE``."""

    colors: Mapping[str, str]

    @classmethod
    def of_names(cls, names: Iterable[str]) -> SeriesColors:
        keys = sorted({series_key(n) for n in names},
                      key=lambda k: (k.split(" [")[0] != REFERENCE, k))
        return cls({k: PALETTE[i % len(PALETTE)] for i, k in enumerate(keys)})

    @classmethod
    def of_frame(cls, frame: pd.DataFrame, history: pd.DataFrame | None = None
                 ) -> SeriesColors:
        """The colours of every series in a result table (all rows, any status) and, when
        given, of the implementations a history table tracks."""
        names = list(prepared(frame, ok_only=False)["series"]) if len(frame) else []
        if history is not None and len(history):
            names += [series_label(i, v, "") for i, v in
                      zip(history["implementation"], history["variant"], strict=True)]
        return cls.of_names(names)

    def __call__(self, series: str) -> str:
        return self.colors[series_key(series)]


def _palette(colors: SeriesColors | None, names: Iterable[str]) -> SeriesColors:
    """``colors`` (the site's), or a figure's own when drawn alone."""
    return colors if colors is not None else SeriesColors.of_names(names)


def prepared(frame: pd.DataFrame, ok_only: bool = True) -> pd.DataFrame:
    """Ok rows (or all) with the derived columns the figures use (machine, configuration,
    tag, series, commit)."""
    ok = (frame[frame["status"].isin(TIMED_STATUSES)] if ok_only else frame).copy()
    ok["machine"] = machine_labels(ok)
    ok["configuration"] = configurations(ok)["configuration"]
    ok["tag"] = [tag(c, p) for c, p in zip(ok["configuration"], ok["precision"], strict=True)]
    ok["series"] = [series_label(i, v, e, st) for i, v, e, st in
                    zip(ok["implementation"], ok["variant"], ok["extra"], ok["status"],
                        strict=True)]
    ok["commit"] = ok["git_commit"].astype(str).str.slice(0, 10)
    return ok


def _directions(data: pd.DataFrame) -> list[str]:
    present = set(data["direction"])
    return [d for d in DIRECTIONS if d in present] + sorted(present - set(DIRECTIONS))


def category_colors(frame: pd.DataFrame) -> dict[str, str]:
    """One colour per time-breakdown category (``extra.breakdown``) of a table's rows, from
    its own palette, so that a category keeps its colour from one model family's breakdown
    to the next and never looks like an implementation."""
    names = sorted({c for extra in frame["extra"] for c in _breakdown(extra)}) if len(
        frame) else []
    return {n: CATEGORY_PALETTE[i % len(CATEGORY_PALETTE)] for i, n in enumerate(names)}


def _hover(data: pd.DataFrame, machine: str = "configuration") -> np.ndarray:
    """The commit and machine of each point; ``machine``: the column that names it (a
    history row records its machine alone)."""
    return np.stack([data["commit"].map(esc), data[machine].map(esc)], axis=-1)


def _largest_batch(data: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return data.sort_values("batch").groupby(keys, as_index=False).tail(1)


STATUS_COLORS = {"ok": "#2f9e44", "unverifiable": "#94d82d", "incorrect": "#e03131",
                 "oom": "#f08c00",
                 "error": "#862e9c", "unavailable": "#adb5bd", "imported": "#1971c2"}


def status_counts(frame: pd.DataFrame) -> Chart:
    """Cases by status, per level and implementation: the run's coverage at a glance."""
    key, title = "status", "Cases by status"
    if frame.empty:
        return Chart(key, title, None)
    counts = (frame.groupby(["level", "implementation", "status"]).size().rename("cases")
              .reset_index())
    fig = go.Figure()
    for status, part in counts.groupby("status", sort=False):
        fig.add_trace(go.Bar(
            x=[part["level"].map(esc).tolist(), part["implementation"].map(esc).tolist()],
            y=part["cases"], name=esc(status),
            marker_color=STATUS_COLORS.get(status, "#495057"),
            hovertemplate=f"{esc(status)}: %{{y}} case(s)<br>%{{x}}<extra></extra>"))
    fig.update_layout(barmode="stack", yaxis_title="cases", height=420, margin=MARGIN)
    return Chart(key, title, fig, counts, note="Only ok and unverifiable cases were timed "
                 "(unverifiable: a low precision whose rounding the gate cannot tell from a "
                 "planted error; never a verdict's evidence); every other status is listed "
                 "with its reason below.")


def throughput_heatmap(frame: pd.DataFrame, level: str) -> Chart:
    """log10 throughput, workload x implementation, one panel per direction (largest batch)."""
    key, title = f"{level}-heatmap", f"{level}: throughput at the largest batch measured"
    rows = prepared(frame[frame["level"] == level], ok_only=False)
    data = rows[rows["status"].isin(TIMED_STATUSES)]
    if data.empty:
        return Chart(key, title, None)
    data = _largest_batch(data, ["workload", "series", "direction", "tag"])
    # A cell without an ok row says why: unavailable, incorrect, oom, error.
    why = rows[~rows["status"].isin(TIMED_STATUSES)].drop_duplicates(
        ["tag", "direction", "workload", "series"])
    directions = _directions(data)
    workloads = sorted(rows["workload"].unique())
    series = sorted(rows["series"].unique(), key=lambda s: (s != REFERENCE, s))
    unit = esc(data["throughput_unit"].iloc[0])
    fig = make_subplots(rows=1, cols=len(directions), shared_yaxes=True,
                        subplot_titles=[esc(d) for d in directions],
                        horizontal_spacing=0.04)
    cells = pd.MultiIndex.from_product([workloads, series], names=["workload", "series"])
    shape = (len(workloads), len(series))
    tags = []
    for t, by_tag in data.groupby("tag"):
        for col, direction in enumerate(directions, start=1):
            grid = (by_tag[by_tag["direction"] == direction]
                    .set_index(["workload", "series"]).reindex(cells))
            throughput = grid["throughput"].to_numpy(dtype=float)
            status = (why[(why["tag"] == t) & (why["direction"] == direction)]
                      .set_index(["workload", "series"])["status"].reindex(cells).fillna(""))
            text = [f"{v:.3g}" if v == v else esc(st)  # v != v: NaN, no ok row
                    for v, st in zip(throughput, status, strict=True)]
            custom = np.stack([grid["commit"].fillna("").map(esc),
                               grid["configuration"].fillna("").map(esc),
                               grid["batch"].fillna(-1).astype(int)], axis=-1)
            fig.add_trace(go.Heatmap(
                z=np.log10(throughput).reshape(shape), x=[esc(s) for s in series],
                y=[esc(w) for w in workloads], text=np.reshape(text, shape),
                texttemplate="%{text}", customdata=custom.reshape(*shape, 3),
                coloraxis="coloraxis",
                hovertemplate=f"%{{y}} / %{{x}}<br>%{{text}} {unit} at batch "
                              "%{customdata[2]}<br>" + HOVER_TAIL,
            ), row=1, col=col)
            tags.append(t)
    fig.update_layout(coloraxis=dict(colorscale="Viridis",
                                     colorbar=dict(title=f"log10 {unit}")),
                      height=max(320, 40 * len(workloads) + 200), margin=MARGIN)
    add_selector(fig, tags)
    cols = [*CASE_COLUMNS, "throughput", "throughput_unit", "time_median_s"]
    return Chart(key, title, fig, data[cols], note="Cells show work items per second; colour "
                 "is log10 of it. Higher is better.")


def speedup_bars(frame: pd.DataFrame, level: str, reference: str = REFERENCE,
                 column: str = "implementation", colors: SeriesColors | None = None) -> Chart:
    """Speedup over the rows whose ``column`` is ``reference`` (the reference implementation,
    or e.g. the ``baseline`` variant), same case otherwise, same run and machine."""
    what = reference if column == "implementation" else f"the {reference} {column}"
    key = f"{level}-speedup" + ("" if column == "implementation" else f"-{column}")
    title = f"{level}: speedup over {what} (same case, same run)"
    level_rows = frame[frame["level"] == level]
    joined = speedups(level_rows, reference, column) if not level_rows.empty else pd.DataFrame()
    if joined.empty:
        return Chart(key, title, None)
    data = prepared(joined.drop(columns=["machine"]))
    data = data.sort_values(["workload", "batch"])
    directions = _directions(data)
    colors = _palette(colors, data["series"])
    fig = make_subplots(rows=len(directions), cols=1, subplot_titles=[esc(d) for d in directions],
                        vertical_spacing=0.12 if len(directions) > 1 else 0.1)
    tags, legend_seen = [], set()
    for t, by_tag in data.groupby("tag"):
        for row, direction in enumerate(directions, start=1):
            for name, part in by_tag[by_tag["direction"] == direction].groupby("series"):
                first = (t, name) not in legend_seen
                legend_seen.add((t, name))
                fig.add_trace(go.Bar(
                    x=[part["workload"].map(esc).tolist(),
                       [f"b={b}" for b in part["batch"]]],
                    y=part["speedup"], name=esc(name), legendgroup=esc(name),
                    showlegend=first, marker_color=colors(name), customdata=_hover(part),
                    hovertemplate=f"{esc(name)}: %{{y:.3g}}x<br>%{{x}}<br>" + HOVER_TAIL,
                ), row=row, col=1)
                tags.append(t)
    fig.add_hline(y=1.0, line_dash="dot", row="all", col="all")
    fig.update_yaxes(title_text=f"speedup over {esc(what)}")
    fig.update_layout(barmode="group", height=300 * len(directions) + 160, margin=MARGIN)
    add_selector(fig, tags)
    cols = [*CASE_COLUMNS, "speedup", "time_median_s", "ref_time_s"]
    return Chart(key, title, fig, data[cols], note="1 = parity; above 1 the case is faster "
                 f"than {what} on the same machine in the same run.")


def _against_batch(data: pd.DataFrame, y: str, key: str, title: str, y_title: str,
                log_y: bool, note: str, columns: list[str],
                colors: SeriesColors | None = None) -> Chart:
    """Lines against batch size: a panel per (workload, direction) present, a line per
    series; panels wrap three to a row. When every series has a single batch there is no
    line to draw, and each panel shows a bar per series instead."""
    panels = sorted({(w, d) for w, d in zip(data["workload"], data["direction"], strict=True)},
                    key=lambda p: (p[0], _directions(data).index(p[1])))
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    colors = _palette(colors, data["series"])
    keys = ["tag", "series", "workload", "direction"]
    bars = bool(data.groupby(keys)["batch"].nunique().max() == 1)
    fig = make_subplots(rows=nrows, cols=ncols,
                        subplot_titles=[esc(f"{w} · {d}") for w, d in panels],
                        horizontal_spacing=0.08, vertical_spacing=0.3 / nrows + 0.05)
    tags, legend_seen = [], set()
    for (t, name, workload, direction), part in data.sort_values("batch").groupby(keys):
        first = (t, name) not in legend_seen
        legend_seen.add((t, name))
        index = panels.index((workload, direction))
        common = dict(name=esc(name), legendgroup=esc(name), showlegend=first,
                      customdata=_hover(part),
                      hovertemplate=f"{esc(name)}<br>batch %{{x}}: %{{y:.4g}}<br>" + HOVER_TAIL)
        # Bars sit on a category axis (one category per batch), lines on a log axis.
        trace = (go.Bar(x=part["batch"].astype(str), y=part[y], marker_color=colors(name),
                        **common) if bars else
                 go.Scatter(x=part["batch"], y=part[y], mode="lines+markers",
                            line_color=colors(name), **common))
        fig.add_trace(trace, row=index // ncols + 1, col=index % ncols + 1)
        tags.append(t)
    fig.update_xaxes(type="category" if bars else "log", title_text="batch")
    fig.update_yaxes(type="log" if log_y else "linear", title_text=y_title, col=1)
    fig.update_layout(height=300 * nrows + 160, margin=MARGIN, barmode="group")
    add_selector(fig, tags)
    if bars:
        note += " Each series was measured at one batch size only: bars, not lines."
    return Chart(key, title, fig, data[columns], note=note)


def throughput_vs_batch(frame: pd.DataFrame, level: str,
                        colors: SeriesColors | None = None) -> Chart:
    key, title = f"{level}-throughput", f"{level}: throughput against batch size"
    data = prepared(frame[frame["level"] == level])
    if data.empty:
        return Chart(key, title, None)
    unit = esc(data["throughput_unit"].iloc[0])
    return _against_batch(data, "throughput", key, title, unit, True,
                       "Median over repeats; higher is better.",
                       [*CASE_COLUMNS, "throughput", "throughput_unit", "time_median_s",
                        "time_iqr_s"], colors)


def memory_vs_batch(frame: pd.DataFrame, level: str,
                    colors: SeriesColors | None = None) -> Chart:
    key, title = f"{level}-memory", f"{level}: peak extra memory of one call"
    data = prepared(frame[frame["level"] == level])
    data = data[data["peak_tensor_bytes"] >= 0]
    if data.empty:
        return Chart(key, title, None)
    data["peak_tensor_mib"] = data["peak_tensor_bytes"] / 2**20
    methods = ", ".join(sorted(set(data["peak_tensor_method"]) - {""})) or "unknown"
    return _against_batch(data, "peak_tensor_mib", key, title, "MiB", False,
                       f"Live tensor bytes; lower is better. Measured as: {methods} "
                       "(cuda_allocator: the caching allocator's peak; torch_profiler: torch's "
                       "CPU allocator, from the profiler's memory events). The table also "
                       "gives the CPU process's resident-set growth (peak_mem_bytes), which "
                       "moves with the allocator.",
                       [*CASE_COLUMNS, "peak_tensor_bytes", "peak_tensor_method",
                        "peak_mem_bytes", "peak_mem_method"], colors)


def _breakdown(extra: str) -> dict[str, float]:
    try:
        parsed = json.loads(extra) if extra else {}
    except json.JSONDecodeError:
        return {}
    found = parsed.get("breakdown") if isinstance(parsed, dict) else None
    if not isinstance(found, dict):
        return {}
    return {str(k): float(v) for k, v in found.items() if isinstance(v, (int, float))}


def time_breakdown(frame: pd.DataFrame, level: str = "model",
                   categories: Mapping[str, str] | None = None) -> Chart:
    """Stacked bars of the seconds per category that rows report in ``extra.breakdown``;
    ``categories``: their colours (the site's ``category_colors``; default: the rows')."""
    key, title = f"{level}-breakdown", f"{level}: where the time of one call goes"
    data = prepared(frame[frame["level"] == level])
    long = [
        {**{c: row[c] for c in [*CASE_COLUMNS, "series", "tag", "commit"]},
         "category": cat, "seconds": sec}
        for _, row in data.iterrows() for cat, sec in _breakdown(row["extra"]).items()
    ]
    if not long:
        return Chart(key, title, None)
    parts = pd.DataFrame(long)
    parts["case"] = (parts["workload"] + " " + parts["direction"] + " b="
                     + parts["batch"].astype(str))
    colors = categories if categories is not None else category_colors(data)
    fig = go.Figure()
    tags = []
    for (t, category), part in parts.groupby(["tag", "category"]):
        fig.add_trace(go.Bar(
            x=[part["case"].map(esc).tolist(), part["series"].map(esc).tolist()],
            y=part["seconds"], name=esc(category), legendgroup=esc(category),
            marker_color=colors[category], customdata=_hover(part),
            hovertemplate=f"{esc(category)}: %{{y:.4g}} s<br>%{{x}}<br>" + HOVER_TAIL,
        ))
        tags.append(t)
    fig.update_layout(barmode="stack", yaxis_title="seconds per call", height=520,
                      margin=MARGIN)
    add_selector(fig, tags)
    return Chart(key, title, fig, parts[[*CASE_COLUMNS, "category", "seconds"]],
                 note="From the breakdown the model records per call (extra.breakdown).")


Peaks = Mapping[tuple[str, str], tuple[float, float]]  # (machine, precision) -> GFLOP/s, GB/s


def peaks_from_rows(frame: pd.DataFrame) -> dict[tuple[str, str], tuple[float, float]]:
    """Peak lines that rows carry in ``extra`` (``peak_gflops``, ``peak_gbps``)."""
    found: dict[tuple[str, str], tuple[float, float]] = {}
    data = prepared(frame)
    for _, row in data.iterrows():
        try:
            extra = json.loads(row["extra"]) if row["extra"] else {}
        except json.JSONDecodeError:
            continue
        if isinstance(extra, dict) and {"peak_gflops", "peak_gbps"} <= set(extra):
            found[(row["machine"], row["precision"])] = (float(extra["peak_gflops"]),
                                                         float(extra["peak_gbps"]))
    return found


def peaks_from_probe(probe: Mapping | Sequence[Mapping]) -> dict[tuple[str, str], tuple[float,
                                                                                    float]]:
    """Peak lines from ``machine.json`` as ``equibench probe`` writes it: per device,
    ``machine``, ``peak_gflops`` per precision and ``bandwidth_gbps``. A list of such
    objects (several machines' probes, e.g. ``jq -s . a.json b.json``) is read too."""
    found = {}
    for one in ([probe] if isinstance(probe, Mapping) else probe):
        for entry in one.values():
            if not isinstance(entry, Mapping):
                continue
            for precision, gflops in (entry.get("peak_gflops") or {}).items():
                found[(str(entry.get("machine", "")), precision)] = (
                    float(gflops), float(entry["bandwidth_gbps"]))
    return found


def roofline(frame: pd.DataFrame, peaks: Peaks, colors: SeriesColors | None = None) -> Chart:
    """Achieved GFLOP/s against arithmetic intensity (FLOPs per byte), with the machine's
    compute and bandwidth ceilings where known."""
    key, title = "roofline", "Roofline: achieved GFLOP/s against arithmetic intensity"
    data = prepared(frame)
    data = data[(data["flops"] > 0) & (data["bytes"] > 0) & (data["gflops_per_s"] > 0)].copy()
    if data.empty:
        return Chart(key, title, None)
    data["intensity"] = data["flops"] / data["bytes"]
    colors = _palette(colors, data["series"])
    symbols = {d: s for d, s in zip(_directions(data), ["circle", "square", "diamond",
                                                       "triangle-up", "x"], strict=False)}
    fig = go.Figure()
    tags: list[str | None] = []
    for (t, name), part in data.groupby(["tag", "series"]):
        fig.add_trace(go.Scatter(
            x=part["intensity"], y=part["gflops_per_s"], mode="markers", name=esc(name),
            legendgroup=esc(name), marker=dict(color=colors(name), size=9,
                                               symbol=part["direction"].map(symbols).tolist()),
            text=(part["level"] + " " + part["workload"] + " " + part["direction"] + " b="
                  + part["batch"].astype(str)).map(esc),
            customdata=_hover(part),
            hovertemplate=f"{esc(name)} %{{text}}<br>%{{x:.3g}} flop/byte, %{{y:.3g}} GFLOP/s"
                          "<br>" + HOVER_TAIL,
        ))
        tags.append(t)
    span = np.logspace(math.log10(data["intensity"].min() / 4),
                       math.log10(data["intensity"].max() * 4), 64)
    for (machine, precision), (gflops, gbps) in sorted(peaks.items()):
        # The peaks are the hardware's: each configuration of it draws them.
        for configuration in sorted(set(data.loc[data["machine"] == machine,
                                                 "configuration"])):
            t = tag(configuration, precision)
            if t not in tags:
                continue
            fig.add_trace(go.Scatter(
                x=span, y=np.minimum(gflops, span * gbps), mode="lines", name="peak",
                line=dict(color="black", dash="dash"),
                hovertemplate=f"peak {gflops:.4g} GFLOP/s, {gbps:.4g} GB/s<extra>"
                              f"{esc(configuration)}</extra>",
            ))
            tags.append(t)
    fig.update_xaxes(type="log", title_text="arithmetic intensity (FLOPs / byte, cost model)")
    fig.update_yaxes(type="log", title_text="achieved GFLOP/s")
    fig.update_layout(height=560, margin=MARGIN)
    add_selector(fig, tags)
    note = ("Symbols: " + ", ".join(f"{s} = {d}" for d, s in symbols.items()) + ". "
            + ("Dashed: the measured compute and bandwidth ceilings."
               if peaks else "No peak figures (no machine.json, no peaks in the rows)."))
    return Chart(key, title, fig, data[[*CASE_COLUMNS, "flops", "bytes", "intensity",
                                        "gflops_per_s", "gbytes_per_s"]], note=note)


def history_lines(history: pd.DataFrame, colors: SeriesColors | None = None) -> Chart:
    """Tracked speedups over commits, a line per case: in its implementation's colour,
    dashed apart from the other cases of the same implementation."""
    key, title = "history", "Speedup over the reference, commit by commit"
    if history is None or history.empty:
        return Chart(key, title, None)
    data = history.copy()
    data["tag"] = [tag(m, p) for m, p in zip(data["machine"], data["precision"], strict=True)]
    data["commit"] = data["git_commit"].astype(str).str.slice(0, 10)
    order = data.groupby("commit")["timestamp"].min().sort_values()
    position = {c: i for i, c in enumerate(order.index)}
    data["point"] = data["commit"].map(position)
    data = data.sort_values("point")
    data["series"] = [series_label(i, v, "") for i, v in
                      zip(data["implementation"], data["variant"], strict=True)]
    data["case"] = (data["series"] + " " + data["level"] + "/" + data["workload"] + " "
                    + data["direction"] + " b=" + data["batch"].astype(str))
    colors = _palette(colors, data["series"])
    cases = data.drop_duplicates("case").sort_values("case")
    dash = {case: DASHES[i % len(DASHES)]
            for _, part in cases.groupby("series") for i, case in enumerate(part["case"])}
    fig = go.Figure()
    tags = []
    for (t, series, case), part in data.groupby(["tag", "series", "case"]):
        fig.add_trace(go.Scatter(
            x=part["point"], y=part["speedup"], mode="lines+markers", name=esc(case),
            line=dict(color=colors(series), dash=dash[case]),
            customdata=_hover(part, "machine"),
            text=part["timestamp"].astype(str).map(esc),
            hovertemplate=f"{esc(case)}: %{{y:.3g}}x<br>%{{text}}<br>" + HOVER_TAIL,
        ))
        tags.append(t)
    fig.add_hline(y=1.0, line_dash="dot")
    fig.update_xaxes(tickmode="array", tickvals=list(position.values()),
                     ticktext=[esc(c) for c in position], title_text="commit (oldest first)")
    fig.update_yaxes(title_text="speedup over the reference")
    fig.update_layout(height=560, margin=MARGIN)
    add_selector(fig, tags)
    cols = [c for c in ["timestamp", "git_commit", "run_id", "machine", "host", "level",
                        "workload", "implementation", "variant", "direction", "precision",
                        "batch", "device", "speedup", "time_median_s", "ref_time_s"]
            if c in data.columns]
    return Chart(key, title, fig, data[cols], note="Each point is one run; the ratio is "
                 "measured within the run, so machines stay comparable.")
