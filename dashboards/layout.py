"""HTML of the site's pages: the shell with its nav bar, tables, and figure sections.

Every string that comes from a result row goes through ``html.escape`` here; figures are
escaped where they are built. Plotly's JavaScript is one file of the site
(``PLOTLY_JS``), which every page with a figure loads by a relative ``<script src>``: that
works from a web server and from the file system (``file://``) alike, fetches nothing
from the network, and keeps 4.8 MB out of every page.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd
import plotly.io as pio
from equibench.dashboards.figures import Chart

PLOTLY_JS = "plotly.min.js"  # beside the pages; written once per site by site.write_site
STYLE = """
body { font-family: system-ui, sans-serif; margin: 0 auto 2rem; max-width: 1500px;
       padding: 0 1rem; }
nav { position: sticky; top: 0; background: #1f2933; padding: 0.5rem 1rem; margin: 0 -1rem 1rem;
      z-index: 10; }
nav a { color: #e4e7eb; margin-right: 1.2rem; text-decoration: none; }
nav a.current { color: #fff; font-weight: 600; border-bottom: 2px solid #7cc4fa; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0 1.5rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
.note, .empty { color: #555; }
.banner { background: #fff3bf; border: 1px solid #f08c00; padding: .5em; font-weight: bold; }
.chart { margin-bottom: 2rem; }
.family { border-top: 3px solid #1f2933; margin-top: 2rem; }
.headline td:nth-child(5) { font-weight: 600; }
.verdict-reproduced { background: #d3f9d8; }
.verdict-not-reproduced { background: #ffe3e3; }
.verdict-different-hardware, .verdict-different-size { background: #fff3bf; }
.verdict-not-measured { color: #777; }
table.compat td { min-width: 8rem; max-width: 24rem; }
table.compat.legend td { min-width: 0; }
table.compat th[rowspan] { vertical-align: middle; }
table.compat .reason { font-size: 0.8rem; color: #333; }
.compat-ok { background: #d3f9d8; }
.compat-unverifiable { background: #fff3bf; }
.compat-imported { background: #d0ebff; }
.compat-incorrect { background: #ffa8a8; }
.compat-error { background: #ffc9c9; }
.compat-oom { background: #ffd8a8; }
.compat-unavailable { background: #dee2e6; }
.compat-none { color: #999; }
"""


@dataclass(frozen=True)
class PageSpec:
    """A page of the site: its file, its title in the nav bar and its heading."""

    file: str
    nav: str
    heading: str


PAGES: tuple[PageSpec, ...] = (
    PageSpec("index.html", "Overview", "equibench results"),
    PageSpec("tp.html", "Tensor products", "Tensor products"),
    PageSpec("conv.html", "Convolutions", "Convolutions (TP fused with gather/scatter)"),
    PageSpec("models.html", "Models", "Models (MACE, SE(3)-Transformer)"),
    PageSpec("md.html", "MD", "Molecular dynamics"),
    PageSpec("roofline.html", "Roofline", "Roofline"),
    PageSpec("memory.html", "Memory", "Peak memory"),
    PageSpec("compatibility.html", "Compatibility", "Compatibility: eager, compile, export"),
    PageSpec("machines.html", "Machines", "Machines: hardware, settings, runs"),
    PageSpec("history.html", "History", "History across commits"),
    PageSpec("gpu-kernels.html", "GPU kernels", "GPU kernels (compiled, not run)"),
)


def table(frame: pd.DataFrame, row_class: Sequence[str] | None = None) -> str:
    """An HTML table with every cell escaped; ``row_class`` adds a CSS class per row."""
    if frame.empty:
        return '<p class="empty">no rows</p>'
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    for i, row in enumerate(frame.itertuples(index=False)):
        css = f' class="{html.escape(row_class[i])}"' if row_class else ""
        cells = "".join(f"<td>{html.escape(str(v))}</td>" for v in row)
        body.append(f"<tr{css}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def chart_section(chart: Chart) -> str:
    """A chart's heading, figure (or 'no rows'), note and CSV link."""
    title = f"<h3>{html.escape(chart.title)}</h3>"
    if chart.figure is None:
        return f'<section class="chart" id="{chart.key}">{title}' \
               '<p class="empty">no rows</p></section>'
    # No JS here: the page loads PLOTLY_JS once, in its head, before any figure's script.
    div = pio.to_html(chart.figure, full_html=False, include_plotlyjs=False,
                      div_id=f"{chart.key}-figure",
                      config={"displaylogo": False, "responsive": True})
    note = f'<p class="note">{html.escape(chart.note)}</p>' if chart.note else ""
    link = f'<p><a href="{chart.key}.csv">data (CSV)</a></p>'
    return f'<section class="chart" id="{chart.key}">{title}{div}{note}{link}</section>'


Block = str | Chart  # raw HTML (already escaped) or a chart


def has_figures(blocks: Sequence[Block]) -> bool:
    """Whether any block draws a figure (and so the page needs ``PLOTLY_JS``)."""
    return any(isinstance(b, Chart) and b.figure is not None for b in blocks)


def blocks_html(blocks: Sequence[Block]) -> str:
    """A page body from its blocks, in order."""
    return "".join(b if isinstance(b, str) else chart_section(b) for b in blocks)


def page(spec: PageSpec, body: str, banner: str = "", plotly: bool = False) -> str:
    """One page of the site; ``banner``, when given, heads it (e.g. synthetic data);
    ``plotly``: load ``PLOTLY_JS`` (the page has figures)."""
    current = ' class="current"'
    nav = "".join(f'<a href="{p.file}"{current if p.file == spec.file else ""}>'
                  f"{html.escape(p.nav)}</a>" for p in PAGES)
    # A plain (not deferred) script in the head: each figure's inline script calls Plotly
    # as the page is parsed.
    script = f'<script src="{PLOTLY_JS}" charset="utf-8"></script>\n' if plotly else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(spec.heading)} - equibench</title>
{script}<style>{STYLE}</style></head><body>
<nav>{nav}</nav>
{f'<p class="banner">{html.escape(banner)}</p>' if banner else ""}
<h1>{html.escape(spec.heading)}</h1>
{body}
</body></html>
"""
