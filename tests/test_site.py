"""The static dashboard site: pages, offline Plotly, CSV links, escaping, empty tables."""

import base64
import html
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from equibench.dashboards import figures, overview
from equibench.dashboards.figures import PALETTE, SeriesColors, series_key
from equibench.dashboards.headline import by_machine, headline
from equibench.dashboards.layout import PAGES, PLOTLY_JS
from equibench.dashboards.sample import A100, CPU, synthetic_history, synthetic_results
from equibench.dashboards.site import write_site
from plotly.offline import get_plotlyjs
from site_pages import page_figures

from equibench import history, results

PLOTLY_BUNDLE = re.compile(r"\* plotly\.js v\d")
SCRIPT_TAG = f'<script src="{PLOTLY_JS}" charset="utf-8"></script>'
# A quick run's site, Plotly's 4.8 MB included once: the bound the synthetic site must keep.
SITE_BYTES_MAX = 6_000_000


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "dashboard"
    index = write_site(synthetic_results(), out, history=synthetic_history())
    assert index == out / "index.html"
    return out


def _values(array: list | dict) -> np.ndarray:
    """A trace's array: Plotly writes numpy arrays as base64 typed arrays."""
    if isinstance(array, dict):
        return np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
    return np.asarray(array, dtype=float)


def test_every_page_is_written_with_a_nav_bar(site):
    for spec in PAGES:
        text = (site / spec.file).read_text()
        assert text.startswith("<!DOCTYPE html>")
        for other in PAGES:
            assert f'href="{other.file}"' in text
        assert 'class="current"' in text


def _table_rows(fragment: str) -> list[list[str]]:
    """The body rows of the first HTML table in ``fragment``, cells unescaped."""
    body = fragment[fragment.index("<tbody>"):fragment.index("</tbody>")]
    return [[html.unescape(cell) for cell in re.findall(r"<td>(.*?)</td>", row)]
            for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body)]


def _headline_section(index: Path) -> str:
    text = index.read_text()
    return text[text.index("<h2>Fastest implementation per case</h2>"):
                text.index("<h2>Claims</h2>")]


def _headline_tables(index: Path) -> dict[str, list[list[str]]]:
    """The Overview's headline: each machine's heading and the rows of its table."""
    section = _headline_section(index)
    parts = re.split(r'<h3 class="machine">(.*?)</h3>', section)[1:]
    return {html.unescape(heading): _table_rows(body)
            for heading, body in zip(parts[::2], parts[1::2], strict=True)}


def test_plotly_js_is_one_file_of_the_site_and_nothing_is_fetched(site):
    bundle = site / PLOTLY_JS
    assert bundle.read_text() == get_plotlyjs()  # the installed package's, not a CDN's
    assert [p.name for p in site.iterdir() if p.name.endswith(".js") or ".tmp" in p.name] \
        == [PLOTLY_JS]  # written once, atomically: no second copy, no temporary left
    for spec in PAGES:
        text = (site / spec.file).read_text()
        figures = text.count("Plotly.newPlot(")
        assert not PLOTLY_BUNDLE.search(text), spec.file  # no page embeds the bundle
        # Relative, in the head, before any figure's script calls Plotly.
        assert text.count(SCRIPT_TAG) == (1 if figures else 0), spec.file
        if figures:
            assert text.index(SCRIPT_TAG) < text.index("</head>") < text.index("Plotly.newPlot(")
        assert not re.search(r'<(script|link|img)[^>]+(src|href)="?https?:', text), spec.file
    expected = {"index.html": 2, "tp.html": 3, "conv.html": 3, "models.html": 8, "md.html": 1,
                "roofline.html": 1, "memory.html": 3, "history.html": 1}
    for page, count in expected.items():
        assert (site / page).read_text().count("Plotly.newPlot(") == count, page


def test_the_whole_site_stays_small(site):
    size = sum(p.stat().st_size for p in site.iterdir())
    assert size <= SITE_BYTES_MAX, f"site is {size} bytes"


def test_every_figure_links_its_data(site):
    for spec in PAGES:
        text = (site / spec.file).read_text()
        for link in re.findall(r'href="([^"]+\.csv)"', text):
            data = pd.read_csv(site / link)
            assert len(data) > 0, link
    tp = pd.read_csv(site / "tp-heatmap.csv")
    assert {"workload", "implementation", "throughput", "git_commit", "machine"} <= set(tp)


def test_index_heads_with_the_claims_table(site):
    text = (site / "index.html").read_text()
    assert text.index("<h2>Claims</h2>") < text.index("<h2>Runs</h2>")
    # The sample's rows are synthetic: no claim counts them.
    assert 'class="verdict-reproduced"' not in text
    assert 'class="verdict-not-measured"' in text and "synthetic rows (not measured)" in text
    assert "oeq-tp-vs-cue" in text and "se3t-time-to-train" in text
    assert "claimed / 1.1" in text


def test_row_strings_are_escaped(site):
    for spec in PAGES:
        text = (site / spec.file).read_text()
        assert "<script>alert" not in text and "<b>evil</b>" not in text, spec.file
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in (site / "index.html").read_text()


def test_dropdown_hover_and_peaks(site):
    (heatmap, _, _) = page_figures((site / "tp.html").read_text())
    menu = heatmap["layout"]["updatemenus"][0]
    labels = [b["label"] for b in menu["buttons"]]
    assert f"{A100} · float32" in labels and "AMD EPYC 7763 · float64" in labels
    assert labels[0].endswith("float32")
    for button in menu["buttons"]:
        assert len(button["args"][0]["visible"]) == len(heatmap["data"])
    assert "commit %{customdata[0]}" in heatmap["data"][0]["hovertemplate"]
    assert "machine %{customdata[1]}" in heatmap["data"][0]["hovertemplate"]
    (roofline,) = page_figures((site / "roofline.html").read_text())
    assert any(trace["name"] == "peak" for trace in roofline["data"])


def test_models_page_has_breakdown_and_variant_speedup(site):
    text = (site / "models.html").read_text()
    assert 'id="model-se3t-breakdown"' in text and 'id="model-se3t-speedup-variant"' in text
    breakdown = pd.read_csv(site / "model-se3t-breakdown.csv")
    assert set(breakdown["category"]) == {"tensor product", "radial MLP", "other"}
    speedup = pd.read_csv(site / "model-se3t-speedup-variant.csv")
    assert (speedup["speedup"] > 15).all()  # the sample's optimized se3t is 20x the baseline


def test_models_page_has_a_section_per_family_with_its_own_legends(site):
    text = (site / "models.html").read_text()
    mace, se3t = text.index('id="family-mace"'), text.index('id="family-se3t"')
    assert mace < se3t
    assert text[mace:se3t].count("<h2>") == 1 and text[se3t:].count("<h2>") == 1
    sections = {"mace": text[mace:se3t], "se3t": text[se3t:]}
    expected = {"mace": {"e3nn", "openequivariance"},
                "se3t": {"basis [baseline]", "basis [nvidia-default]"}}
    for family, section in sections.items():
        found = page_figures(section)
        assert len(found) == 4, family
        # Legends name backend and variant; the breakdown's (stacked) names categories.
        named = [{t["name"] for t in f["data"]} for f in found
                 if f["layout"].get("barmode") != "stack"]
        assert all(names <= expected[family] for names in named), family
        assert set().union(*named) == expected[family], family
        for csv in re.findall(r'href="([^"]+\.csv)"', section):
            workloads = set(pd.read_csv(site / csv)["workload"])
            assert all(w.startswith(family + "-") for w in workloads), (family, csv)
    assert "Not drawn, no rows: speedup over e3nn" in sections["se3t"]


def test_md_page_has_ns_per_day_and_the_drift_table(site):
    text = (site / "md.html").read_text()
    (bars,) = page_figures(text)
    assert {t["name"] for t in bars["data"]} == {"e3nn", "cuequivariance", "openequivariance"}
    data = pd.read_csv(site / "md-ns-per-day.csv")
    assert set(data["precision"]) == {"float32", "float64"} and (data["ns_per_day"] > 0).all()
    start = text.index("<h2>Energy drift</h2>")
    head = re.findall(r"<th>(.*?)</th>", text[start:])
    assert head[:5] == ["machine", "structure", "atoms", "backend", "direction"]
    assert "drift (meV/atom/ps) float32" in head and "drift (meV/atom/ps) float64" in head
    rows = _table_rows(text[start:])
    assert len(rows) == 5  # e3nn, cuequivariance x 2 machines, openequivariance on the GPU
    drift32, drift64 = (head.index(f"drift (meV/atom/ps) {p}") for p in ("float32", "float64"))
    assert all((r[drift32], r[drift64]) == ("0.4", "0.01") for r in rows)


def test_headline_heads_the_overview(site):
    text = (site / "index.html").read_text()
    assert (text.index("<h2>Fastest implementation per case</h2>") < text.index("<h2>Claims</h2>")
            < text.index("<h2>Code paths</h2>"))
    tables = _headline_tables(site / "index.html")
    # A heading per machine names it (and its one device) once; its rows do not.
    assert list(tables) == [f"{CPU} (cpu)", f"{A100} (cuda:0)"]
    rows = {(r[0], r[1], r[2], heading.split(" (")[0]): r
            for heading, table in tables.items() for r in table}
    assert len(rows) == 16  # (4 tp + 1 conv + 2 model + 1 md cases) x 2 machines
    section = _headline_section(site / "index.html")
    assert section.count(A100) == section.count(CPU) == 1
    gpu = rows[("tp", "mace-large", "forward", A100)]
    assert gpu[3] == "float32, batch 256"
    assert gpu[4] == "openequivariance (of 3 ok)"
    assert 9 < float(gpu[5].removesuffix("×")) < 11  # the sample's oeq is 10x e3nn
    assert gpu[6].startswith("unpaired (ratio of medians)")  # the sample has no rounds
    assert gpu[7] == "1.6 MiB vs 16 MiB (e3nn): 0.1×"
    # On the CPU openequivariance did not run: the fastest of what did.
    assert rows[("tp", "mace-large", "forward", CPU)][4] == "cuequivariance (of 2 ok)"
    assert rows[("model", "mace-qm9", "inference", CPU)][5] == "e3nn itself is the fastest"
    se3t = rows[("model", "se3t-qm9", "train_step", A100)]
    assert se3t[4] == "basis [nvidia-default] (of 2 ok)"
    assert se3t[5].endswith("× over basis[baseline] (e3nn: not run)")
    lines = pd.read_csv(site / "headline.csv")
    assert set(lines["precision"]) == {"float32"} and len(lines) == 16


def _paired_case() -> pd.DataFrame:
    """The sample with the A100's tp/mace-large/forward float32 batch-256 rows of e3nn and
    openequivariance timed in 4 interleaved rounds: per-round speedups 10, 8, 4, 5."""
    frame = synthetic_results()
    case = ((frame["gpu_name"] == A100) & (frame["level"] == "tp")
            & (frame["workload"] == "mace-large") & (frame["direction"] == "forward")
            & (frame["precision"] == "float32") & (frame["batch"] == 256))
    rounds = {"e3nn": [1.0, 1.0, 1.0, 1.0], "openequivariance": [0.1, 0.125, 0.25, 0.2]}
    for impl, times in rounds.items():
        index = frame.index[case & (frame["implementation"] == impl)][0]
        frame.at[index, "round_times_s"] = times
        frame.at[index, "rounds_id"] = "r1"
    return frame


def _line(frame: pd.DataFrame, machine: str = A100) -> pd.Series:
    lines = headline(frame)
    return lines[(lines["level"] == "tp") & (lines["workload"] == "mace-large")
                 & (lines["direction"] == "forward") & (lines["machine"] == machine)].iloc[0]


def test_headline_speedup_is_paired_per_round_with_its_spread():
    frame = _paired_case()
    line = _line(frame)
    assert line["paired"] and line["speedup"] == 6.5
    assert (line["speedup_q1"], line["speedup_q3"]) == (4.75, 8.5)
    shown = dict(by_machine(headline(frame)))[f"{A100} (cuda:0)"]
    row = shown[(shown["workload"] == "mace-large") & (shown["direction"] == "forward")
                & (shown["level"] == "tp")].iloc[0]
    assert row["speedup over e3nn"] == "6.5×"
    assert row["spread of the speedup"] == "IQR 4.75–8.5× over 4 paired rounds"


def test_headline_counts_only_ok_rows_and_never_prints_unmeasured_memory():
    frame = _paired_case()
    oeq = (frame["implementation"] == "openequivariance") & (frame["status"] == "ok")
    frame.loc[frame["implementation"] == "cuequivariance", "peak_tensor_bytes"] = -1
    frame.loc[frame["implementation"] == "e3nn", "peak_tensor_bytes"] = 0
    for status in ("incorrect", "imported"):
        changed = frame.copy()
        changed.loc[oeq, "status"] = status
        line = _line(results.validate(changed))
        assert line["series"] == "cuequivariance" and line["candidates"] == 2, status
        shown = by_machine(pd.DataFrame([line]))[0][1]
        assert shown["peak memory: fastest vs reference"].iloc[0] \
            == "not measured vs not measured (e3nn)"


def test_headline_names_a_fallback_and_a_missing_reference():
    frame = synthetic_results()
    cue = frame["implementation"] == "cuequivariance"
    frame.loc[cue, "extra"] = json.dumps({"code_path": {"path": "naive", "fallback": "pure torch"}})
    frame.loc[frame["implementation"] == "e3nn", "status"] = "oom"
    line = _line(results.validate(frame), CPU)
    assert line["series"] == "cuequivariance (fallback)"
    assert line["reference"] == "" and line["reference_status"] == "oom"
    assert by_machine(pd.DataFrame([line]))[0][1]["speedup over e3nn"].iloc[0] \
        == "no ok e3nn row (e3nn: oom)"


def test_headline_takes_the_latest_run_of_each_case():
    older = synthetic_results(seed=1, run_id="older")
    older["timestamp"] = "2024-01-01T00:00:00+00:00"
    older.loc[older["implementation"] == "cuequivariance", "time_median_s"] /= 100
    older["throughput"] = older["batch"] / older["time_median_s"]
    frame = pd.concat([older, synthetic_results()], ignore_index=True)
    lines = headline(frame)
    assert len(lines) == 16 and set(lines["run_id"]) == {"sample"}
    assert _line(frame)["series"] == "openequivariance"


def test_a_single_batch_is_drawn_as_bars():
    frame = synthetic_results()
    models = frame[frame["level"] == "model"]
    one = models[models["batch"].isin([32, 100])]  # mace-qm9: 16, 32; se3t-qm9: 100, 240
    chart = figures.throughput_vs_batch(one, "model")
    assert {trace.type for trace in chart.figure.data} == {"bar"}
    assert "bars, not lines" in chart.note
    assert {trace.type for trace in figures.memory_vs_batch(one, "model").figure.data} \
        == {"bar"}
    # One series with two batches is a line to draw: lines for all.
    mixed = models[models["batch"].isin([32, 100]) | (models["implementation"] == "e3nn")]
    assert {trace.type for trace in figures.throughput_vs_batch(mixed, "model").figure.data} \
        == {"scatter"}


def test_empty_and_failed_tables_say_no_rows(tmp_path):
    failed = synthetic_results()
    failed = failed[failed["status"] != "ok"]
    for frame in (failed, results.to_frame([])):
        out = tmp_path / f"site{len(frame)}"
        write_site(frame, out, history=pd.DataFrame(),
                   gpu_kernel_table=tmp_path / "no-gpu-compile-table.parquet")
        # Plotly's file only where a page loads it: the index's status chart.
        assert (out / PLOTLY_JS).exists() == (len(frame) > 0)
        for spec in PAGES:
            text = (out / spec.file).read_text()
            assert ("Plotly.newPlot(" in text) == (spec.file == "index.html" and len(frame) > 0)
            if spec.file != "index.html":
                assert '<p class="empty">no rows</p>' in text


def test_defaults_find_history_and_machine_json(tmp_path):
    frame = synthetic_results()
    frame = frame[frame["gpu_name"] == ""].reset_index(drop=True)  # CPU rows carry no peaks
    run = tmp_path / "results" / "quick"
    history.add(frame, tmp_path / "results" / "history.parquet")
    run.mkdir(parents=True)
    (run / "machine.json").write_text(json.dumps({"cpu": {
        "device": "cpu", "machine": "AMD EPYC 7763", "host": "cpu-host", "threads": 2,
        "peak_gflops": {"float32": 100.0, "float64": 50.0}, "bandwidth_gbps": 20.0}}))
    index = write_site(frame, run / "dashboard")  # the two-argument call of `equibench dashboard`
    assert index == run / "dashboard" / "index.html"
    assert "Plotly.newPlot(" in (run / "dashboard" / "history.html").read_text()
    (roofline,) = page_figures((run / "dashboard" / "roofline.html").read_text())
    peaks = [t for t in roofline["data"] if t["name"] == "peak"]
    assert len(peaks) == 2  # float32 and float64 ceilings of the probed machine
    assert math.isclose(max(_values(t["y"]).max() for t in peaks), 100.0)


@pytest.mark.slow
def test_synthetic_rows_label_every_page(tmp_path):
    index = write_site(synthetic_results(), tmp_path / "site", history=pd.DataFrame())
    pages = [index.parent / spec.file for spec in PAGES]
    assert all("Synthetic data:" in p.read_text() for p in pages)
    real = synthetic_results()
    # Measured on generated structures (mace-oc20-like): real rows, no banner.
    real["extra"] = '{"synthetic_dataset": true}'
    index = write_site(results.validate(real), tmp_path / "real", history=pd.DataFrame())
    assert "Synthetic data:" not in index.read_text()


def test_a_fallback_is_named_next_to_its_numbers(tmp_path):
    """Rows whose code was a fallback carry '(fallback)' in every figure's series name, and
    the index page lists each implementation's code path, fallbacks first; the claims'
    pairs are listed beside the claims table."""
    frame = synthetic_results()
    cue = frame["implementation"] == "cuequivariance"
    frame.loc[cue, "extra"] = json.dumps(
        {"code_path": {"path": "method=naive", "fallback": "naive: pure PyTorch"}})
    index = write_site(results.validate(frame), tmp_path / "site", history=pd.DataFrame())
    names = {trace.get("name") for f in page_figures((index.parent / "tp.html").read_text())
             for trace in f["data"]}
    xs = {x for f in page_figures((index.parent / "tp.html").read_text()) for trace in f["data"]
          for x in (trace.get("x") or []) if isinstance(x, str)}
    assert "cuequivariance (fallback)" in names | xs
    assert "cuequivariance" not in names | xs
    text = index.read_text()
    assert "<h2>Code paths</h2>" in text and "naive: pure PyTorch" in text
    assert "Every matched pair of each claim" in text


def test_history_joins_every_runs_own_file_and_the_hand_kept_one(tmp_path):
    """The workflow writes each run's history as its own declared output; the History page
    reads them all, with results/history.parquet, a run added twice counted once."""
    root = tmp_path / "results"
    first = synthetic_results(run_id="first")
    second = synthetic_results(seed=1, run_id="second")
    _, by_hand = history.add(first, root / "history.parquet")
    _, own = history.add(second, root / "second" / "history.parquet")
    history.add(second, root / "again" / "history.parquet")
    joined = history.read_all(root)
    assert len(joined) == by_hand + own > 0
    assert set(joined["run_id"]) == {"first", "second"}
    assert history.read_all(tmp_path / "nothing").empty


def _trace_color(trace: dict) -> str | None:
    """A trace's one colour: its marker's, else its line's (None: per point, or none)."""
    for part in ("marker", "line"):
        color = (trace.get(part) or {}).get("color")
        if isinstance(color, str):
            return color
    return None


def test_a_series_has_one_colour_on_every_page_and_series_differ(site):
    """Each implementation and variant (a fallback or unverifiable mark aside) keeps its
    colour from panel to panel and page to page, the History's lines included; two series
    never share one while the palette has colours left."""
    frame = synthetic_results()
    keys = {series_key(s) for s in figures.prepared(frame, ok_only=False)["series"]}
    assert len(keys) <= len(PALETTE)
    seen: dict[str, set[str]] = {}
    for spec in PAGES:
        for figure in page_figures((site / spec.file).read_text()):
            for trace in figure["data"]:
                name = html.unescape(trace.get("name") or "")
                if spec.file == "history.html":  # "series level/workload direction b=N"
                    name = name.rsplit(" ", 3)[0]
                if series_key(name) in keys:
                    seen.setdefault(series_key(name), set()).add(_trace_color(trace))
    assert set(seen) == keys - {"<b>evil</b>"}  # every series drawn (that one never ran)
    assert all(len(colors) == 1 and None not in colors for colors in seen.values()), seen
    assert len({next(iter(c)) for c in seen.values()}) == len(seen), seen
    # The Models page's panels (throughput, memory, speedup) draw openequivariance alike.
    models = [t for f in page_figures((site / "models.html").read_text()) for t in f["data"]
              if t.get("name") == "openequivariance"]
    assert len(models) >= 3 and len({_trace_color(t) for t in models}) == 1
    # A breakdown category keeps its colour from family to family, none a series' colour.
    stacks = [f for f in page_figures((site / "models.html").read_text())
              if f["layout"].get("barmode") == "stack"]
    categories: dict[str, set[str | None]] = {}
    for trace in (t for f in stacks for t in f["data"]):
        categories.setdefault(trace["name"], set()).add(_trace_color(trace))
    assert len(stacks) == 2 and set(categories) == {"tensor product", "radial MLP", "other"}
    assert all(len(c) == 1 for c in categories.values())
    assert not set().union(*categories.values()) & set().union(*seen.values())


def test_series_colors_are_deterministic_and_share_a_mark_s_base():
    names = ["fused", "e3nn [small]", "cuequivariance (fallback)", "e3nn", "basis [plain]"]
    colors = SeriesColors.of_names(names)
    assert colors == SeriesColors.of_names(reversed(names + ["cuequivariance"]))
    assert colors("e3nn") == PALETTE[0]  # the reference first, whatever else is there
    assert colors("cuequivariance") == colors("cuequivariance (fallback)")
    assert colors("basis [plain] (unverifiable)") == colors("basis [plain]")
    many = SeriesColors.of_names(f"impl{i}" for i in range(len(PALETTE)))
    assert len(set(many.colors.values())) == len(PALETTE)


def _measured(frame: pd.DataFrame) -> pd.DataFrame:
    """The sample as if measured: no row says it is synthetic."""
    frame = frame.copy()
    frame["extra"] = [json.dumps({k: v for k, v in json.loads(e).items() if k != "synthetic"})
                      if e else e for e in frame["extra"]]
    return frame


def test_overview_opens_with_the_speedup_over_e3nn_per_level_and_case(site):
    text = (site / "index.html").read_text()
    start = text.index('id="overview-speedup"')
    assert start < text.index("<h2>Fastest implementation per case</h2>") \
        < text.index("<h2>Claims</h2>")
    chart, _ = page_figures(text)
    assert chart["layout"]["yaxis"]["type"] == "log"
    titles = [a["text"] for a in chart["layout"]["annotations"]]
    assert titles[:4] == ["tp", "conv", "model", "md"]
    # A machine is named once: in the menu, not per point.
    labels = [b["label"] for b in chart["layout"]["updatemenus"][0]["buttons"]]
    assert labels == [CPU, A100]
    data = pd.read_csv(site / "overview-speedup.csv")
    assert set(data["implementation"]) == {"cuequivariance", "openequivariance"}
    assert set(data["precision"]) == {"float32"}
    gpu = data[(data["machine"] == A100) & (data["workload"] == "mace-large")
               & (data["direction"] == "forward")]
    assert set(gpu["batch"]) == {256}  # the headline's batch, the pair behind its line
    oeq = gpu[gpu["implementation"] == "openequivariance"]["speedup"].iloc[0]
    assert 9 < oeq < 11
    # The sample's rows are synthetic: no pair could count, every point is hollow.
    assert (data["cannot_count"].str.contains("synthetic")).all()
    note = text[start:text.index("</section>", start)]
    assert (f"Not drawn, no pair of an ok row with an ok e3nn row: on {CPU}: model mace-qm9 "
            f"inference, model se3t-qm9 train_step; on {A100}: model se3t-qm9 train_step."
            in note)


def test_overview_leaves_out_failed_rows_and_marks_pairs_that_cannot_count():
    frame = _measured(synthetic_results())
    at = ((frame["gpu_name"] == A100) & (frame["level"] == "tp")
          & (frame["precision"] == "float32") & (frame["batch"] == 256)
          & (frame["workload"] == "mace-large"))
    cue = at & (frame["implementation"] == "cuequivariance")
    e3nn = at & (frame["implementation"] == "e3nn")
    frame.loc[cue & (frame["direction"] == "forward"), "status"] = "incorrect"
    frame.loc[cue & (frame["direction"] == "backward"), "extra"] = json.dumps(
        {"code_path": {"path": "naive", "fallback": "pure torch"}})
    frame.loc[e3nn & (frame["direction"] == "backward"), "disturbed"] = "other processes"
    lines = headline(results.validate(frame))
    chart = overview.speedup_chart(frame, lines)
    data = chart.data.set_index(["machine", "workload", "direction", "implementation"]
                                ).sort_index()
    gpu = data.loc[(A100, "mace-large")]
    assert ("forward", "cuequivariance") not in gpu.index  # incorrect: not drawn
    assert gpu.loc[("forward", "openequivariance"), "cannot_count"] == ""
    assert gpu.loc[("backward", "cuequivariance"), "cannot_count"] \
        == "fallback: pure torch; e3nn: measured on a disturbed machine"
    assert gpu.loc[("backward", "openequivariance"), "cannot_count"] \
        == "e3nn: measured on a disturbed machine"
    # Hollow symbols mark exactly those, in the series' colour; the legend keys them.
    points = [t for t in chart.figure.data if t.x and t.x[0] is not None]
    hollow = {(t.name, s.endswith("-open")) for t in points for s in t.marker.symbol}
    assert ("openequivariance", False) in hollow and ("cuequivariance (fallback)", True) in hollow
    assert "hollow: cannot count" in {t.name for t in chart.figure.data}
    colors = SeriesColors.of_names(t.name for t in points)
    assert all(t.marker.color == colors(t.name) for t in points)
    assert "Only ok rows" in chart.note


def test_the_gpu_kernels_page_shows_the_committed_compile_table(tmp_path):
    """Without a table of the run's own, the page renders the committed one: a row per
    kernel, architecture and dtype, and the occupancy figure, labelled compiled, not run."""
    from equibench.dashboards.gpu_kernels import COMMITTED

    write_site(synthetic_results(), tmp_path / "site", history=pd.DataFrame())
    text = (tmp_path / "site" / "gpu-kernels.html").read_text()
    assert "Compiled, not run" in text and "Plotly.newPlot(" in text
    committed = pd.read_parquet(COMMITTED)
    for kernel in committed["kernel"].unique():
        assert kernel in text
    csv = pd.read_csv(tmp_path / "site" / "gpu-kernels.csv")
    assert len(csv) == len(committed) and set(csv["arch"]) >= {"sm_80", "sm_90"}
