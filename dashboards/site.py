"""The static dashboard site: HTML pages that work offline, from a server or the file system.

``write_site(frame, out_dir)`` writes index.html (the speedup over e3nn per level and case,
the headline a machine at a time, claims, runs, environment),
tp.html, conv.html, models.html (a section per model family), md.html (molecular dynamics),
roofline.html, memory.html, compatibility.html (each implementation in eager, compile and
export mode), machines.html (each machine, its runs and its speedups beside the others'),
history.html and gpu-kernels.html, each figure's data as CSV beside its page,
results.csv, and Plotly's JavaScript once, as plotly.min.js from the installed ``plotly``
package (no CDN), which every page with a figure loads. Sections without rows say "no rows".
Only the Compatibility page, the Machines page's tables and results.csv count rows that
ran in a mode other than eager.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
from equibench.dashboards import (
    compatibility,
    figures,
    gpu_kernels,
    headline,
    machines,
    md,
    overview,
)
from equibench.dashboards.figures import Chart, SeriesColors
from equibench.dashboards.layout import (
    PAGES,
    PLOTLY_JS,
    Block,
    PageSpec,
    blocks_html,
    has_figures,
    page,
    table,
)
from plotly.offline import get_plotlyjs

from equibench import claims as claims_mod
from equibench import history as history_mod
from equibench.analysis import machine_labels
from equibench.files import atomic_write
from equibench.results import code_path

ENV_COLUMNS = ["run_id", "device", "host", "cpu_model", "cpu_count", "threads", "gpu_name",
               "gpu_driver", "cuda", "python", "version_torch", "version_e3nn",
               "version_cuequivariance_torch", "version_openequivariance", "version_mace_torch",
               "git_commit", "git_dirty"]
PROBLEM_COLUMNS = ["level", "workload", "implementation", "direction", "precision", "batch",
                   "device", "status", "reason"]
VERDICT_RULE = (
    "Measured: what the claim's wording supports over matched pairs of cases ('up to' claims: "
    "the upper quartile over pairs, so that one noisy pair cannot carry it; others: the "
    "geometric mean), each pair the median of its paired per-round ratios, with min / geomean "
    "/ max over the pairs beside it and every pair listed below. The 95% interval is a "
    "bootstrap over runs (each run its own id) and interleaved rounds; from one run it is "
    "widened for the run-to-run spread measured on the CI VM. Reproduced: measured on the "
    "claimed hardware and the interval's lower bound is at least claimed / 1.1 (the claim's "
    "tolerance). Different hardware: measured elsewhere, never 'reproduced'. Not measured: no "
    "matching rows that can count (synthetic, disturbed, fallback, amortized and not-ok rows "
    "never do; a max-batch claim needs the baseline's out-of-memory at the next batch it "
    "tried), or the claim cannot be measured by this tool.")
HEADLINE_RULE = (
    "Per level, workload and direction on each machine: the fastest implementation (for "
    "models, the tensor-product backend and the model's variant) by throughput, among the "
    "ok rows at one precision (float32 where the case has it) and the largest batch with "
    "ok rows; each line says which. The speedup is over e3nn at the same case in the same "
    "run: the median of per-round ratios where the two were timed in interleaved rounds, "
    "with its interquartile range over the rounds; 'unpaired' where they were not, the "
    "ratio of medians, whose spread then comes from the faster row's samples alone. Without "
    "an ok e3nn row the line names the row it is compared with instead. Peak memory is one "
    "call's extra live tensor bytes (CUDA's caching allocator on GPUs, torch's CPU allocator "
    "through the profiler on CPUs, neither depending on which malloc serves the process); "
    "'not measured' where the row has none. Only ok rows count.")
MD_INTRO = (
    "Velocity-Verlet NVE (<code>nve</code>) and Langevin NVT (<code>nvt</code>) runs of a "
    "structure with a model's forces on each backend "
    "(<code>equibench/levels/md.py</code>); the neighbour list is rebuilt with vesin at every "
    "step, inside the timed call. Every ok row first matched the e3nn float64 model's energy "
    "and forces on its first frame.")
MD_DRIFT_NOTE = (
    "Drift: the slope of the total energy over the whole run (every call, from the first "
    "frame), per atom (<code>nvt</code>, Langevin: of the total energy less the heat the "
    "thermostat put in); the run's length is in each row (<code>extra.simulated_ps</code>), and "
    "a short run measures the integrator's fluctuation as much as a drift. First step: the "
    "model's set-up on the backend (conversion, compilation, kernel build) and its first MD "
    "step.")
MD_SCALING_NOTE = (
    "Scaling runs (<code>equibench run --level md --scaling-limit S</code>, or a suite's "
    "<code>scaling_limit_s</code>): a structure in growing supercells, each backend until a "
    "size fails (out of memory, error, failed gate) or takes more than S seconds per step. "
    "The table gives the largest size each backend ran on each device, and what stopped "
    "the next.")


def _md_scaling(frame: pd.DataFrame, colors: SeriesColors) -> list[Block]:
    """The MD page's scaling section: a figure per structure and the largest sizes."""
    charts = md.scaling(frame, colors)
    if not charts:
        return ["<h2>Scaling</h2>" + _intro("No scaling run in these results. "
                                            + MD_SCALING_NOTE)]
    return ["<h2>Scaling</h2>" + _intro(MD_SCALING_NOTE), *charts,
            table(md.largest_table(frame))]


@dataclass(frozen=True)
class Family:
    """Models that share a page section: their workloads start with ``prefix``."""

    key: str  # element id and CSV file stem part
    name: str
    prefix: str


FAMILIES: tuple[Family, ...] = (Family("mace", "MACE", "mace-"),
                                Family("se3t", "SE(3)-Transformer", "se3t-"))
OTHER_MODELS = Family("other", "Other models", "")


def _write_atomic(path: Path, text: str) -> None:
    with atomic_write(path, "w") as handle:
        handle.write(text)


def _runs(frame: pd.DataFrame) -> pd.DataFrame:
    if frame.empty:
        return pd.DataFrame()
    data = frame.assign(machine=machine_labels(frame), ok=frame["status"] == "ok")
    return (data.groupby(["run_id", "host", "machine", "git_commit"], sort=False)
            .agg(cases=("status", "size"), ok=("ok", "sum"), first=("timestamp", "min"),
                 last=("timestamp", "max"), config_hash=("config_hash", "first"))
            .reset_index())


def _problems(frame: pd.DataFrame) -> pd.DataFrame:
    bad = frame[frame["status"] != "ok"][PROBLEM_COLUMNS]
    return bad.drop_duplicates(subset=["level", "workload", "implementation", "status",
                                       "reason"])


def _banner(frame: pd.DataFrame) -> str:
    """A warning for every page when any row is synthetic (``extra.synthetic``)."""
    synthetic = frame["extra"].map(lambda e: bool(e) and bool(json.loads(e).get("synthetic")))
    if not synthetic.any():
        return ""
    return (f"Synthetic data: {int(synthetic.sum())} of {len(frame)} rows were made up by "
            "equibench.dashboards.sample to preview the site, not measured; no claim counts "
            "them.")


def _code_paths(frame: pd.DataFrame) -> pd.DataFrame:
    """What each implementation's rows ran (``extra.code_path``), fallbacks first."""
    rows = []
    for (level, impl, variant), group in frame[frame["status"] == "ok"].groupby(
            ["level", "implementation", "variant"], sort=True):
        for extra in group["extra"].unique():
            path = code_path(extra)
            if path.get("path"):
                rows.append({"level": level, "implementation": impl, "variant": variant,
                             "fallback": path["fallback"], "code path": path["path"]})
    table_rows = pd.DataFrame(rows, columns=["level", "implementation", "variant", "fallback",
                                             "code path"]).drop_duplicates()
    return table_rows.sort_values("fallback", ascending=False, kind="stable")


def _headline_tables(lines: pd.DataFrame) -> str:
    """The headline under a heading per machine, which names it once."""
    if lines.empty:
        return table(pd.DataFrame())
    return "".join(f'<h3 class="machine">{html.escape(heading)}</h3>'
                   f'<div class="headline">{table(rows)}</div>'
                   for heading, rows in headline.by_machine(lines))


def _index(frame: pd.DataFrame, headline_rows: pd.DataFrame, claim_rows: pd.DataFrame,
           claim_details: pd.DataFrame, claim_pairs: pd.DataFrame,
           claim_versions: pd.DataFrame, colors: SeriesColors) -> list[Block]:
    verdict_classes = ["verdict-" + v.replace(" ", "-") for v in claim_rows.get("verdict", [])]
    env = frame[[c for c in ENV_COLUMNS if c in frame.columns]].drop_duplicates()
    claims_link = '<p><a href="claims.csv">claims (CSV)</a></p>' if not claim_rows.empty else ""
    headline_link = ('<p><a href="headline.csv">headline (CSV)</a></p>'
                     if not headline_rows.empty else "")
    return [overview.speedup_chart(frame, headline_rows, colors), f"""
<h2>Fastest implementation per case</h2>
<p class="note">{HEADLINE_RULE}</p>
{_headline_tables(headline_rows)}{headline_link}
<p class="note">Every ok case first matched its float64 reference within its precision's
tolerance: e3nn in float64 for tensor products and convolutions, which for e3nn's own rows
is the same code (each row's <code>extra.reference</code> says what it was checked against).
Imported rows were timed elsewhere and never checked. Throughput is work items per second
(median over repeats); speedups compare implementations measured in the same run, as the
median of per-round ratios where they were timed in interleaved rounds.</p>
<h2>Claims</h2>
<p class="note">{VERDICT_RULE}</p>
{table(claim_rows, verdict_classes)}{claims_link}
<h3>Claims revised between versions</h3>
<p class="note">A claim the authors revised is checked in every published version; this says
how it moved and which version the measurements reproduce.</p>
{table(claim_versions)}
<details><summary>Every matched pair of each claim</summary>
{table(claim_pairs)}</details>
<details><summary>What each claim says and how it is measured</summary>
{table(claim_details)}</details>
<h2>Code paths</h2>
<p class="note">What each implementation's rows actually ran. A row marked
<em>(fallback)</em> in the figures ran a path that is not the implementation's product (e.g.
cuEquivariance's pure-PyTorch path without its CUDA kernels); claims never count it.</p>
{table(_code_paths(frame))}
<h2>Runs</h2>{table(_runs(frame))}
""", figures.status_counts(frame), f"""
<h2>Cases that did not run or did not pass</h2>{table(_problems(frame))}
<h2>Environment</h2>{table(env)}
<p><a href="results.csv">all rows (CSV)</a></p>
"""]


def _level_charts(frame: pd.DataFrame, level: str, colors: SeriesColors) -> list[Chart]:
    return [figures.throughput_heatmap(frame, level),
            figures.speedup_bars(frame, level, colors=colors),
            figures.throughput_vs_batch(frame, level, colors)]


def _family(workload: str) -> Family:
    return next((f for f in FAMILIES if workload.startswith(f.prefix)), OTHER_MODELS)


def _in_family(chart: Chart, family: Family) -> Chart:
    """A model-level chart made for one family: its own element id and CSV, its title
    naming the family instead of the level."""
    return replace(chart, key=f"model-{family.key}-{chart.key.removeprefix('model-')}",
                   title=family.name + chart.title.removeprefix("model"))


def _models(frame: pd.DataFrame, colors: SeriesColors) -> list[Block]:
    """A section per model family, each with its own figures, so that a legend lists one
    family's backends and variants. Figures without rows for a family are named, not
    drawn (e.g. a family without e3nn has no speedup over it)."""
    models = frame[frame["level"] == "model"]
    if models.empty:
        return ['<p class="empty">no rows</p>']
    of_row = models["workload"].map(_family)
    blocks: list[Block] = []
    for family in (f for f in (*FAMILIES, OTHER_MODELS) if (of_row == f).any()):
        rows = models[of_row == family]
        charts = [_in_family(c, family) for c in (
            figures.throughput_vs_batch(rows, "model", colors),
            figures.memory_vs_batch(rows, "model", colors),
            figures.speedup_bars(rows, "model", colors=colors),
            figures.speedup_bars(rows, "model", "baseline", column="variant", colors=colors),
            figures.time_breakdown(rows, "model", figures.category_colors(models)))]
        drawn = [c for c in charts if c.figure is not None]
        workloads = ", ".join(sorted(set(rows["workload"])))
        skipped = "; ".join(c.title.removeprefix(family.name + ": ")
                            for c in charts if c.figure is None)
        blocks.append(
            f'<section class="family" id="family-{family.key}">'
            f"<h2>{html.escape(family.name)}</h2>"
            f'<p class="note">Workloads: {html.escape(workloads)}.'
            + (f" Not drawn, no rows: {html.escape(skipped)}." if skipped else "") + "</p>")
        blocks.extend(drawn or ['<p class="empty">no rows</p>'])
        blocks.append("</section>")
    return blocks


def _peaks(frame: pd.DataFrame, probe_file: Path | None) -> figures.Peaks:
    """Peak lines: the rows' own, else those of the run's machine.json."""
    peaks = figures.peaks_from_rows(frame)
    if not peaks and probe_file is not None and probe_file.exists():
        peaks = figures.peaks_from_probe(json.loads(probe_file.read_text()))
    return peaks


def _history(history: pd.DataFrame | str | Path | None, out: Path) -> pd.DataFrame:
    if isinstance(history, pd.DataFrame):
        return history
    if history is None:
        # results/<run>/dashboard -> results: every run's history.parquet and the one that
        # `equibench history add` appends to by hand
        return history_mod.read_all(out.parent.parent)
    return history_mod.read(history)


def _intro(text: str) -> str:
    return f'<p class="note">{text}</p>'


def write_site(frame: pd.DataFrame, out_dir: str | Path,
               history: pd.DataFrame | str | Path | None = None,
               claims: Sequence[claims_mod.Claim] | None = None,
               machine_json: str | Path | None = None,
               gpu_kernel_table: str | Path | None = None) -> Path:
    """Write the site into ``out_dir``; return the path of index.html.

    ``history``: a history table or its file (default: ``results/history.parquet``, two
    levels above ``out_dir``). ``claims``: the claims to check (default: the packaged
    claims.yaml). ``machine_json``: the machine probe for the roofline's peak lines
    (default: ``machine.json`` beside ``out_dir``). ``gpu_kernel_table``: the table of
    ``equibench gpu-compile`` (default: ``gpu-kernels.parquet`` beside ``out_dir``, else the
    committed one).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Compile and export rows would read as more implementations: only Compatibility has them.
    eager = frame[frame["mode"] == "eager"]
    compat = compatibility.matrix(frame)
    claim_list = claims_mod.load() if claims is None else list(claims)
    evaluated = claims_mod.evaluate(claim_list, eager)
    claim_rows = claims_mod.table(evaluated)
    claim_pairs = claims_mod.pairs_table(evaluated)
    claim_versions = claims_mod.versions_table(evaluated)
    headline_rows = headline.headline(eager)
    probe = Path(machine_json) if machine_json else out.parent / "machine.json"
    tracked = _history(history, out)
    # One colour per implementation and variant, on every page.
    colors = SeriesColors.of_frame(eager, tracked)
    pages: dict[str, list[Block]] = {
        "index.html": _index(eager, headline_rows, claim_rows, claims_mod.details(claim_list),
                             claim_pairs, claim_versions, colors),
        "tp.html": [_intro("Bare tensor products on batches of independent inputs."),
                    *_level_charts(eager, "tp", colors)],
        "conv.html": [_intro("Tensor products fused with the gather of source-node features "
                             "and the scatter-sum to destination nodes, on real graphs."),
                      *_level_charts(eager, "conv", colors)],
        "models.html": [_intro("Whole models, a section per model family; the "
                               "implementation is the tensor-product backend, the variant "
                               "the model's option set."), *_models(eager, colors)],
        "md.html": [_intro(MD_INTRO), md.ns_per_day(eager, colors),
                    "<h2>Energy drift</h2>" + _intro(MD_DRIFT_NOTE)
                    + table(md.drift_table(eager)),
                    *_md_scaling(eager, colors)],
        "roofline.html": [_intro("FLOPs and bytes come from the cost model (ideal minimum "
                                 "traffic), so intensity is a property of the workload."),
                          figures.roofline(eager, _peaks(eager, probe), colors)],
        "memory.html": [_intro("Peak extra live tensor bytes of one call, per level."),
                        *[figures.memory_vs_batch(eager, level, colors)
                          for level in ("tp", "conv", "model")]],
        "compatibility.html": compatibility.blocks(compat),
        "machines.html": machines.blocks(frame, eager),
        "history.html": [_intro("Added by <code>equibench history add RESULTS</code>."),
                         figures.history_lines(tracked, colors)],
        "gpu-kernels.html": gpu_kernels.blocks(*gpu_kernels.load(gpu_kernel_table,
                                                                 out.parent)),
    }
    specs: dict[str, PageSpec] = {p.file: p for p in PAGES}
    if any(has_figures(blocks) for blocks in pages.values()):
        # Once per site, before the pages that load it.
        _write_atomic(out / PLOTLY_JS, get_plotlyjs())
    for name, blocks in pages.items():
        for chart in blocks:
            if isinstance(chart, Chart) and chart.figure is not None:
                chart.data.to_csv(out / f"{chart.key}.csv", index=False)
        _write_atomic(out / name, page(specs[name], blocks_html(blocks), _banner(frame),
                                       plotly=has_figures(blocks)))
    if not compat.empty:
        compat.to_csv(out / compatibility.CSV, index=False)
    if not headline_rows.empty:
        headline_rows.to_csv(out / "headline.csv", index=False)
    if not claim_rows.empty:
        claim_rows.to_csv(out / "claims.csv", index=False)
        claim_pairs.to_csv(out / "claim-pairs.csv", index=False)
    frame.drop(columns=["time_samples"]).to_csv(out / "results.csv", index=False)
    return out / "index.html"
