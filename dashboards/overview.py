"""The Overview's opening chart: every implementation's speedup over e3nn, per level and case.

A case is the headline's (``equibench.dashboards.headline``): a level, workload and
direction on one machine and device, at the precision and batch of its headline line
(float32 where the case has it, the largest batch with ok rows), so that the chart draws
the pairs behind the table below it. A bar is one implementation (and variant) of the case
against e3nn, as ``equibench.analysis.speedups`` pairs them: the same case, run and machine,
the median of per-round ratios where the two were timed in interleaved rounds (whiskers:
their interquartile range), else the ratio of medians, which the hover calls unpaired.

Only ``ok`` rows count, as in the headline. A pair that a claim could never count
(``equibench.claims.excluded`` of either row: synthetic, measured on a disturbed machine, a
fallback code path, amortized) is drawn hollow and its hover says why; a fallback is named
``(fallback)`` in its series, as in every figure. Cases without such a pair
(e3nn alone, or no ok e3nn row) are not drawn, and the note names them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from equibench.dashboards.controls import add_selector
from equibench.dashboards.figures import (
    CASE_COLUMNS,
    HOVER_TAIL,
    MARGIN,
    Chart,
    SeriesColors,
    _directions,
    _palette,
    esc,
    prepared,
)
from equibench.dashboards.headline import CASE
from plotly.subplots import make_subplots

from equibench.analysis import MATCH_COLUMNS, REFERENCE, SAME_MACHINE, latest_ok, speedups
from equibench.claims import excluded
from equibench.vocabulary import LEVELS

KEY = "overview-speedup"
TITLE = f"Speedup over {REFERENCE} per level and case (log scale)"
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "triangle-down", "star", "hexagon")
# What identifies a reference row for a compared row, besides its variant (the columns
# analysis.speedups joins on).
REF_KEY = [c for c in MATCH_COLUMNS if c not in ("implementation", "variant")] + [
    "run_id", *SAME_MACHINE]


def _reference_reasons(ok: pd.DataFrame, pairs: pd.DataFrame) -> list[str]:
    """Why each pair's e3nn row cannot count ('' when it can): the row of the pair's
    variant, else e3nn's default, as ``analysis.speedups`` picks it."""
    refs = latest_ok(ok)
    refs = refs[refs["implementation"] == REFERENCE]
    why = {(tuple(r[REF_KEY]), r["variant"]): excluded(r) for _, r in refs.iterrows()}
    found = []
    for _, row in pairs.iterrows():
        key = tuple(row[REF_KEY])
        found.append(why.get((key, row["variant"]), why.get((key, "default"), "")))
    return found


def pairs(frame: pd.DataFrame, lines: pd.DataFrame) -> pd.DataFrame:
    """The pairs the chart draws: ``analysis.speedups`` of the ok rows over e3nn, at each
    headline line's precision and batch (``prepared``'s columns, ``speedup``,
    ``speedup_q1``/``speedup_q3``, ``paired``, ``rounds`` and ``cannot_count``: why a claim
    could not count the pair, '' when it could)."""
    ok = frame[frame["status"] == "ok"]
    if ok.empty or lines.empty:
        return pd.DataFrame()
    joined = speedups(ok, REFERENCE)
    if joined.empty:
        return pd.DataFrame()
    data = prepared(joined.drop(columns=["machine"]))
    at = lines[[*CASE, "precision", "batch"]].drop_duplicates()
    data = data.merge(at, on=[*CASE, "precision", "batch"]).reset_index(drop=True)
    if data.empty:
        return data
    own = [excluded(r) for _, r in data.iterrows()]
    ref = _reference_reasons(ok, data)
    data["cannot_count"] = ["; ".join([o] * bool(o) + [f"{REFERENCE}: {r}"] * bool(r))
                            for o, r in zip(own, ref, strict=True)]
    data["rounds"] = [len(s) if p else 0 for s, p in zip(data["speedup_samples"],
                                                           data["paired"], strict=True)]
    return data


def _level_key(level: str) -> tuple[int, str]:
    return (LEVELS.index(level) if level in LEVELS else len(LEVELS), level)


def _unpaired_cases(lines: pd.DataFrame, data: pd.DataFrame) -> str:
    """The headline's cases with nothing drawn (no other implementation paired with an ok
    e3nn row there), per machine: '' when every case has a point."""
    drawn = set(map(tuple, data[CASE].to_numpy())) if not data.empty else set()
    left = lines[[tuple(r) not in drawn for r in lines[CASE].to_numpy()]]
    return "; ".join(
        f"on {machine}: " + ", ".join(dict.fromkeys(
            f"{r.level} {r.workload} {r.direction}" for r in part.itertuples()))
        for machine, part in left.groupby("machine", sort=True))


def _ticks(data: pd.DataFrame) -> list[float]:
    """1, 2, 5 per decade over the points and their whiskers, 1 always among them."""
    values = pd.concat([data["speedup"], data["speedup_q1"], data["speedup_q3"]]).dropna()
    values = values[values > 0]
    low = math.floor(math.log10(min(values.min(), 1.0)))
    high = math.ceil(math.log10(max(values.max(), 1.0)))
    return [m * 10.0**e for e in range(low, high + 1) for m in (1, 2, 5)]


def speedup_chart(frame: pd.DataFrame, lines: pd.DataFrame,
                  colors: SeriesColors | None = None) -> Chart:
    """A panel per level (its width by its workloads), a point per case and implementation
    (and variant): x the workload, y the speedup, the colour the series, the symbol the
    direction, each series and direction in its own slot beside the workload; hollow where
    a claim could not count the pair; a machine menu. ``lines``: the headline's
    (``headline.headline(frame)``)."""
    data = pairs(frame, lines)
    skipped = _unpaired_cases(lines, data) if not lines.empty else ""
    if data.empty:
        return Chart(KEY, TITLE, None)
    levels = sorted(set(data["level"]), key=_level_key)
    # Workloads in the table's order (headline._order), each once, whichever machine drew it.
    workloads = {lv: list(dict.fromkeys(data.loc[data["level"] == lv, "workload"]))
                 for lv in levels}
    for lv in levels:
        order = list(dict.fromkeys(lines.loc[lines["level"] == lv, "workload"]))
        workloads[lv].sort(key=order.index)
    widths = [len(workloads[lv]) + 0.5 for lv in levels]
    fig = make_subplots(rows=1, cols=len(levels), shared_yaxes=True,
                        column_widths=[w / sum(widths) for w in widths],
                        subplot_titles=[esc(lv) for lv in levels], horizontal_spacing=0.015)
    palette = _palette(colors, data["series"])
    directions = _directions(data)
    symbols = dict(zip(directions, SYMBOLS, strict=False))
    tags: list[str | None] = []
    for (machine, series), by_series in data.groupby(["machine", "series"]):
        # The legend's entry of the series: a plain square, whichever directions it has.
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=esc(series),
                                 legendgroup=esc(series), marker=dict(
                                     color=palette(series), symbol="square", size=10)),
                      row=1, col=1)
        tags.append(machine)
        for (level, direction), part in by_series.groupby(["level", "direction"]):
            speedup = part["speedup"].to_numpy(dtype=float)
            above = np.nan_to_num(part["speedup_q3"].to_numpy(dtype=float) - speedup)
            below = np.nan_to_num(speedup - part["speedup_q1"].to_numpy(dtype=float))
            how = [f"paired, {n} rounds" if n else "unpaired (ratio of medians)"
                   for n in part["rounds"]]
            text = [esc(f"{direction}, {p}, batch {b}; {h}")
                    + (f"<br>cannot count: {esc(w)}" if w else "")
                    for p, b, h, w in zip(part["precision"], part["batch"], how,
                                          part["cannot_count"], strict=True)]
            symbol = symbols[direction]
            fig.add_trace(go.Scatter(
                x=part["workload"].map(esc).tolist(), y=speedup, mode="markers",
                name=esc(series), legendgroup=esc(series), showlegend=False,
                offsetgroup=esc(f"{series} {direction}"),
                marker=dict(color=palette(series), size=10, line=dict(width=2,
                                                                      color=palette(series)),
                            symbol=[f"{symbol}-open" if w else symbol
                                    for w in part["cannot_count"]]),
                error_y=dict(type="data", array=above, arrayminus=below, thickness=1.5,
                             width=3, color=palette(series)),
                customdata=np.stack([part["commit"].map(esc), part["machine"].map(esc)],
                                    axis=-1),
                text=text,
                hovertemplate=f"{esc(series)}: %{{y:.3g}}× over {REFERENCE}<br>%{{x}} "
                              "%{text}<br>" + HOVER_TAIL,
            ), row=1, col=levels.index(level) + 1)
            tags.append(machine)
    # The legend's key to the symbols, on every machine.
    keys = [(esc(d), s, "#555") for d, s in symbols.items()]
    if (data["cannot_count"] != "").any():
        keys.append(("hollow: cannot count", "circle-open", "#555"))
    for name, symbol, color in keys:
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 legendgroup="key",
                                 marker=dict(color=color, symbol=symbol, size=10)),
                      row=1, col=1)
        tags.append(None)
    fig.add_hline(y=1.0, line_dash="dot", row="all", col="all")
    ticks = _ticks(data)
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}×" for t in ticks])
    fig.update_yaxes(title_text=f"speedup over {REFERENCE}", col=1)
    fig.update_xaxes(type="category", tickangle=-30, automargin=True)
    for col, level in enumerate(levels, start=1):
        fig.update_xaxes(categoryorder="array", categoryarray=[esc(w) for w in workloads[level]],
                         row=1, col=col)
    fig.update_layout(scattermode="group", scattergap=0.3, height=520, margin=MARGIN,
                      legend=dict(tracegroupgap=0))
    add_selector(fig, tags, label="machine")
    note = ("A point per case and implementation: its speedup over e3nn at the case's "
            "precision and batch in the table below (float32 where the case has it, the "
            "largest batch with ok rows), the same run and machine; the median of per-round "
            "ratios where the two were timed in interleaved rounds (whiskers: their "
            "interquartile range), else the ratio of medians (unpaired; whiskers from the "
            "row's own samples). Above 1: faster than e3nn. Colour: the implementation and "
            "variant, as on every page; symbol: the direction. Only ok rows. Hollow: a pair "
            "that claims never count (fallback, disturbed machine, amortized, synthetic); "
            "the hover says why.")
    if skipped:
        note += f" Not drawn, no pair of an ok row with an ok {REFERENCE} row: {skipped}."
    cols = [*CASE_COLUMNS, "speedup", "speedup_q1", "speedup_q3", "paired", "rounds",
            "time_median_s", "ref_time_s", "cannot_count"]
    return Chart(KEY, TITLE, fig, data[cols], note=note)
