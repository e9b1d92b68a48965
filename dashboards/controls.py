"""The device and precision dropdown every figure carries.

Each trace is tagged with the device (machine) and precision of its rows. One Plotly
``updatemenus`` dropdown lists the combinations and shows the traces of the chosen one; a
single menu rather than two, because two independent menus cannot combine their choices
(each button sets the visibility of every trace).

A machine is its hardware (``equibench.analysis.machine_labels``) where the rows hold one
configuration of it; where they hold several (two hosts with one CPU model, one host run
with two allocators or thread counts) each configuration is its own entry
(:func:`configurations`), since their times differ for reasons other than the code.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from equibench.analysis import machine_labels

SEPARATOR = " · "
# What sets a machine's times apart besides the code: the hardware, the host, the CPU
# allocator and the torch thread count.
CONFIGURATION = ("machine", "host", "cpu_allocator", "threads")
# How a row says it did not record a setting (a case that never started a process).
UNRECORDED = {"cpu_allocator": "", "threads": -1}


def _run_filled(frame: pd.DataFrame, column: str) -> pd.Series:
    """``column`` with its unrecorded values taken from the other rows of the same run and
    host where those agree on one: an unavailable case started no process and records no
    allocator, yet belongs to its run's configuration."""
    blank = UNRECORDED[column]
    values = frame[column]
    known = frame[values != blank].groupby(["run_id", "host"])[column].unique()
    only = {key: found[0] for key, found in known.items() if len(found) == 1}
    runs = zip(frame["run_id"], frame["host"], strict=True)
    filled = [v if v != blank else only.get(run, blank) for v, run in zip(values, runs,
                                                                           strict=True)]
    return pd.Series(filled, index=frame.index, dtype=values.dtype)


def _describe(host: str, allocator: str, threads: int) -> str:
    parts = [f"host {host}"]
    if allocator:
        parts.append(f"{allocator} allocator")
    if threads >= 0:
        parts.append(f"{threads} thread{'' if threads == 1 else 's'}")
    return ", ".join(parts)


def configurations(frame: pd.DataFrame) -> pd.DataFrame:
    """Each row's machine configuration: the ``CONFIGURATION`` columns (the allocator and
    thread count filled from its run where unrecorded) and ``configuration``, its label: the
    hardware alone where the rows hold one configuration of it, else the hardware with the
    host, allocator and threads, e.g. ``Intel Xeon (host vm, system allocator, 1 thread)``."""
    out = pd.DataFrame({"machine": machine_labels(frame), "host": frame["host"],
                        "cpu_allocator": _run_filled(frame, "cpu_allocator"),
                        "threads": _run_filled(frame, "threads")}, index=frame.index)
    several = out.drop_duplicates().groupby("machine").size() > 1
    out["configuration"] = [
        f"{machine} ({_describe(host, allocator, threads)})" if several[machine] else machine
        for machine, host, allocator, threads in out[list(CONFIGURATION)].itertuples(
            index=False)]
    return out


def tag(machine: str, precision: str) -> str:
    return f"{machine}{SEPARATOR}{precision}"


def _order(tags: Sequence[str]) -> list[str]:
    """float32 first (the usual first look), then by name."""
    return sorted(set(tags), key=lambda t: (not t.endswith(SEPARATOR + "float32"), t))


def add_selector(fig: go.Figure, tags: Sequence[str | None],
                 label: str = "device · precision") -> go.Figure:
    """Show one device/precision at a time; ``tags[i]`` belongs to trace i (None: always
    shown). With a single combination there is nothing to choose and no menu, and a note
    names it as ``label: tag``. ``label`` says what a tag is: ``device`` where a figure
    puts the precisions on its x axis and tags its traces by machine alone."""
    if len(tags) != len(fig.data):
        raise ValueError(f"{len(tags)} tags for {len(fig.data)} traces")
    choices = _order([t for t in tags if t is not None])
    if not choices:
        return fig

    def visible(choice: str) -> list[bool]:
        return [t is None or t == choice for t in tags]

    for trace, shown in zip(fig.data, visible(choices[0]), strict=True):
        trace.visible = shown
    if len(choices) == 1:
        fig.add_annotation(text=f"{label}: {choices[0]}", showarrow=False,
                           xref="paper", yref="paper", x=0, y=1.0, yshift=30,
                           xanchor="left", yanchor="bottom")
        return fig
    fig.update_layout(updatemenus=[dict(
        type="dropdown", direction="down", active=0, showactive=True,
        x=0, xanchor="left", y=1.0, yanchor="bottom", pad={"b": 20},
        buttons=[dict(label=c, method="restyle", args=[{"visible": visible(c)}])
                 for c in choices],
    )])
    return fig
