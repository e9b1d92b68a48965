"""The static dashboard site: self-contained HTML pages with Plotly embedded (no CDN)."""

from __future__ import annotations

import html
import os
import tempfile
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.offline
from equibench.dashboards import figures

ENV_COLUMNS = ["run_id", "device", "host", "cpu_model", "cpu_count", "threads", "gpu_name",
               "gpu_driver", "cuda", "python", "version_torch", "version_e3nn",
               "version_cuequivariance_torch", "version_openequivariance", "version_mace_torch",
               "git_commit", "git_dirty"]

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1400px; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0 1.5rem; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; }
th { background: #f3f3f3; }
.note { color: #555; }
"""


def _table(frame: pd.DataFrame) -> str:
    """An HTML table; every cell escaped (result strings come from arbitrary programs)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure_html(fig: go.Figure, first: bool) -> str:
    # Plotly's JS is embedded once per page, so pages open with no network.
    return plotly.offline.plot(
        fig, output_type="div", include_plotlyjs=True if first else False,
        config={"displaylogo": False},
    )


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _status_summary(frame: pd.DataFrame) -> pd.DataFrame:
    return (frame.groupby(["level", "implementation", "status"]).size()
            .rename("cases").reset_index())


def _problems(frame: pd.DataFrame) -> pd.DataFrame:
    bad = frame[frame["status"] != "ok"]
    cols = ["level", "workload", "implementation", "direction", "precision", "batch", "device",
            "status", "reason"]
    return bad[cols].drop_duplicates(subset=["level", "workload", "implementation", "status",
                                             "reason"])


def render_index(frame: pd.DataFrame) -> str:
    sections: list[str] = []
    figs: list[tuple[str, go.Figure | None]] = []
    for level in ("tp", "conv", "model"):
        if (frame["level"] == level).any():
            figs += [
                (f"{level}-throughput", figures.throughput_vs_batch(frame, level)),
                (f"{level}-speedup", figures.speedup_over_reference(frame, level)),
                (f"{level}-memory", figures.peak_memory(frame, level)),
            ]
    first = True
    for anchor, fig in figs:
        if fig is None:
            continue
        sections.append(f'<section id="{anchor}">{_figure_html(fig, first)}</section>')
        first = False
    env = frame[[c for c in ENV_COLUMNS if c in frame.columns]].drop_duplicates()
    problems = _problems(frame)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>equibench results</title>
<style>{STYLE}</style></head><body>
<h1>equibench results</h1>
<p class="note">Every timed case first matched the float64 e3nn reference within its
precision's tolerance. Throughput is work items per second (median over repeats); speedups
compare implementations measured in the same run.</p>
<h2>Cases by status</h2>{_table(_status_summary(frame))}
{''.join(sections) or '<p>No case finished with status ok.</p>'}
<h2>Cases that did not run or did not pass</h2>
{_table(problems) if len(problems) else '<p>None.</p>'}
<h2>Environment</h2>{_table(env)}
</body></html>
"""


def write_site(frame: pd.DataFrame, out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    _write_atomic(index, render_index(frame))
    frame.drop(columns=["time_samples"]).to_csv(out / "results.csv", index=False)
    return index
