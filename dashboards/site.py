"""The static dashboard site: self-contained HTML pages with Plotly embedded (no CDN).

``write_site(frame, out_dir)`` writes index.html (claims, runs, environment), tp.html,
conv.html, models.html, roofline.html, memory.html and history.html, each figure's data as
CSV beside its page, and results.csv. Sections without rows say "no rows".
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from equibench.dashboards import figures
from equibench.dashboards.figures import Chart
from equibench.dashboards.layout import PAGES, Block, PageSpec, blocks_html, page, table

from equibench import claims as claims_mod
from equibench import history as history_mod
from equibench.compare import machine_labels
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
    "the max; others: the geometric mean), with min / geomean / max over the pairs beside it "
    "and every pair listed below. The 95% interval is a bootstrap over runs and interleaved "
    "rounds; from one run it is widened for the run-to-run spread measured on the CI VM. "
    "Reproduced: measured on the claimed hardware and the interval's lower bound is at least "
    "claimed / 1.1 (the claim's tolerance). Different hardware: measured elsewhere, never "
    "'reproduced'. Not measured: no matching ok rows that can count (fallback and synthetic "
    "rows never do), or the claim cannot be measured by this tool.")


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


def _index(frame: pd.DataFrame, claim_rows: pd.DataFrame, claim_details: pd.DataFrame,
           claim_pairs: pd.DataFrame) -> list[Block]:
    verdict_classes = ["verdict-" + v.replace(" ", "-") for v in claim_rows.get("verdict", [])]
    env = frame[[c for c in ENV_COLUMNS if c in frame.columns]].drop_duplicates()
    claims_link = '<p><a href="claims.csv">claims (CSV)</a></p>' if not claim_rows.empty else ""
    return [f"""
<p class="note">Every ok case first matched its float64 reference within its precision's
tolerance: e3nn in float64 for tensor products and convolutions, which for e3nn's own rows
is the same code (each row's <code>extra.reference</code> says what it was checked against).
Imported rows were timed elsewhere and never checked. Throughput is work items per second
(median over repeats); speedups compare implementations measured in the same run, as the
median of per-round ratios where they were timed in interleaved rounds.</p>
<h2>Claims</h2>
<p class="note">{VERDICT_RULE}</p>
{table(claim_rows, verdict_classes)}{claims_link}
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


def _level_charts(frame: pd.DataFrame, level: str) -> list[Chart]:
    return [figures.throughput_heatmap(frame, level), figures.speedup_bars(frame, level),
            figures.throughput_vs_batch(frame, level)]


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
        # results/<run>/dashboard -> results/history.parquet, where `history add` writes
        history = out.parent.parent / history_mod.DEFAULT_PATH.name
    return history_mod.read(history)


def _intro(text: str) -> str:
    return f'<p class="note">{text}</p>'


def write_site(frame: pd.DataFrame, out_dir: str | Path,
               history: pd.DataFrame | str | Path | None = None,
               claims: Sequence[claims_mod.Claim] | None = None,
               machine_json: str | Path | None = None) -> Path:
    """Write the site into ``out_dir``; return the path of index.html.

    ``history``: a history table or its file (default: ``results/history.parquet``, two
    levels above ``out_dir``). ``claims``: the claims to check (default: the packaged
    claims.yaml). ``machine_json``: the machine probe for the roofline's peak lines
    (default: ``machine.json`` beside ``out_dir``).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    claim_list = claims_mod.load() if claims is None else list(claims)
    evaluated = claims_mod.evaluate(claim_list, frame)
    claim_rows = claims_mod.table(evaluated)
    claim_pairs = claims_mod.pairs_table(evaluated)
    probe = Path(machine_json) if machine_json else out.parent / "machine.json"
    pages: dict[str, list[Block]] = {
        "index.html": _index(frame, claim_rows, claims_mod.details(claim_list), claim_pairs),
        "tp.html": [_intro("Bare tensor products on batches of independent inputs."),
                    *_level_charts(frame, "tp")],
        "conv.html": [_intro("Tensor products fused with the gather of source-node features "
                             "and the scatter-sum to destination nodes, on real graphs."),
                      *_level_charts(frame, "conv")],
        "models.html": [_intro("Whole models; the implementation is the tensor-product "
                               "backend, the variant the model's option set."),
                        figures.throughput_vs_batch(frame, "model"),
                        figures.memory_vs_batch(frame, "model"),
                        figures.speedup_bars(frame, "model"),
                        figures.speedup_bars(frame, "model", "baseline", column="variant"),
                        figures.time_breakdown(frame, "model")],
        "roofline.html": [_intro("FLOPs and bytes come from the cost model (ideal minimum "
                                 "traffic), so intensity is a property of the workload."),
                          figures.roofline(frame, _peaks(frame, probe))],
        "memory.html": [_intro("Peak extra memory of one call, per level."),
                        *[figures.memory_vs_batch(frame, level)
                          for level in ("tp", "conv", "model")]],
        "history.html": [_intro("Added by <code>equibench history add RESULTS</code>."),
                         figures.history_lines(_history(history, out))],
    }
    specs: dict[str, PageSpec] = {p.file: p for p in PAGES}
    for name, blocks in pages.items():
        for chart in blocks:
            if isinstance(chart, Chart) and chart.figure is not None:
                chart.data.to_csv(out / f"{chart.key}.csv", index=False)
        _write_atomic(out / name, page(specs[name], blocks_html(blocks), _banner(frame)))
    if not claim_rows.empty:
        claim_rows.to_csv(out / "claims.csv", index=False)
        claim_pairs.to_csv(out / "claim-pairs.csv", index=False)
    frame.drop(columns=["time_samples"]).to_csv(out / "results.csv", index=False)
    return out / "index.html"
