"""The device and precision dropdown every figure carries.

Each trace is tagged with the device (machine) and precision of its rows. One Plotly
``updatemenus`` dropdown lists the combinations and shows the traces of the chosen one; a
single menu rather than two, because two independent menus cannot combine their choices
(each button sets the visibility of every trace).
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

SEPARATOR = " · "


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
