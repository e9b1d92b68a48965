"""The "GPU kernels (compiled, not run)" page: our Triton kernels compiled for NVIDIA
architectures on a machine without a GPU (``equibench gpu-compile``), with the registers,
spills, shared memory and occupancy of every autotune configuration.

Read from the table that command writes (:data:`equibench.gpu_kernels.COLUMNS`): the run's
own ``gpu-kernels.parquet`` beside its results, else the committed
``results/baselines/gpu-kernels.parquet``. Nothing here ran on a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
from equibench.dashboards.figures import MARGIN, Chart, esc
from equibench.dashboards.layout import Block, table

COMMITTED = Path(__file__).resolve().parents[1] / "results" / "baselines" / "gpu-kernels.parquet"
INTRO = (
    "Every Triton kernel our fused cases would launch on a GPU (the quick and full presets), "
    "compiled here, without a GPU, for each architecture by <code>equibench gpu-compile</code> "
    "with the ptxas that Triton ships, one row per autotune configuration the kernel may "
    "pick. <b>Compiled, not run</b>: registers, spills and shared memory are the compiler's, "
    "occupancy follows NVIDIA's occupancy-calculator rules (resident warps over the SM's "
    "64 slots); none of it is a GPU measurement. CI fails on a compile error, and on a "
    "spill or shared memory or grid over the limit in a kernel of the quick preset.")


def load(path: str | Path | None, beside: Path) -> tuple[pd.DataFrame | None, str]:
    """The table to show and where it came from: ``path``, else ``gpu-kernels.parquet``
    beside the run's results (``beside``), else the committed one."""
    for candidate in ([Path(path)] if path else [beside / "gpu-kernels.parquet", COMMITTED]):
        if candidate.exists():
            return pd.read_parquet(candidate), str(candidate)
    return None, ""


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per kernel, architecture and dtype: configurations, registers, spills, compile
    errors, shared memory, occupancy."""
    g = frame.groupby(["kernel", "arch", "gpus", "dtype"])
    return pd.DataFrame({
        "configurations": g.size(),
        "registers": g["registers"].agg(lambda r: f"{r.min()}-{r.max()}"),
        "spilling": g["spill_stores"].agg(lambda r: int((r > 0).sum())),
        "compile errors": g["error"].agg(lambda r: int((r != "").sum())),
        "shared bytes": g["shared_bytes"].agg(lambda r: f"{r.min()}-{r.max()}"),
        "occupancy": g["occupancy"].agg(lambda r: f"{r.min():.0%}-{r.max():.0%}"),
    }).reset_index()


def occupancy_chart(frame: pd.DataFrame) -> Chart:
    """Occupancy against registers per thread, a trace per kernel and architecture."""
    key, title = "gpu-kernels", "Occupancy against registers per thread (compiled, not run)"
    fig = go.Figure()
    for (kernel, arch), part in frame.groupby(["kernel", "arch"]):
        label = esc(f"{kernel} {arch}")
        text = (part["dtype"] + " " + part["specialization"] + " " + part["block"] + " warps="
                + part["num_warps"].astype(str) + " spills=" + part["spill_stores"].astype(str)
                ).map(esc)
        fig.add_trace(go.Scatter(x=part["registers"], y=part["occupancy"], mode="markers",
                                 name=label, text=text,
                                 hovertemplate=f"{label}<br>%{{text}}<br>%{{x}} registers, "
                                               "occupancy %{y:.0%}<extra></extra>"))
    fig.update_xaxes(title_text="registers per thread")
    fig.update_yaxes(title_text="occupancy (resident warps / 64)", tickformat=".0%",
                     range=[0, 1.05])
    fig.update_layout(height=480, margin=MARGIN)
    return Chart(key, title, fig, frame.drop(columns=["job", "suites"]))


def blocks(frame: pd.DataFrame | None, source: str) -> list[Block]:
    intro = f'<p class="note">{INTRO}</p>'
    if frame is None or frame.empty:
        return [intro, '<p class="empty">no rows</p>',
                '<p class="note">No table: run <code>equibench gpu-compile</code>.</p>']
    meta = (f'<p class="note">Table <code>{esc(source)}</code>: Triton '
            f'{esc(", ".join(sorted(set(frame["triton"]))))}, commit '
            f'{esc(", ".join(sorted(set(frame["git_commit"]))))}, '
            f'{esc(", ".join(sorted(set(frame["created"]))))} UTC.</p>')
    failing = frame[frame["problem"] != ""]
    cols = ["kernel", "arch", "dtype", "specialization", "block", "num_warps", "num_stages",
            "registers", "spill_stores", "spill_loads", "stack_bytes", "shared_bytes",
            "blocks_per_sm", "occupancy", "limiter", "problem", "error", "workloads"]
    return [intro, meta, "<h2>Per kernel</h2>" + table(summary(frame)),
            occupancy_chart(frame),
            "<h2>Problems</h2>" + table(failing[cols]),
            '<p class="note">Every compilation is in the figure\'s CSV, '
            '<a href="gpu-kernels.csv">gpu-kernels.csv</a>.</p>']
