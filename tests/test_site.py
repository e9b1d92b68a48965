"""The static dashboard site: pages, offline Plotly, CSV links, escaping, empty tables."""

import base64
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from equibench.dashboards.layout import PAGES
from equibench.dashboards.sample import A100, synthetic_history, synthetic_results
from equibench.dashboards.site import write_site

from equibench import history, results

PLOTLY_BUNDLE = re.compile(r"\* plotly\.js v\d")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "dashboard"
    index = write_site(synthetic_results(), out, history=synthetic_history())
    assert index == out / "index.html"
    return out


def _figures(text: str) -> list[dict]:
    """The data and layout of every Plotly figure on a page."""
    decoder, found = json.JSONDecoder(), []
    for match in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*', text):
        data, end = decoder.raw_decode(text, match.end())
        layout, _ = decoder.raw_decode(text, text.index("{", end))
        found.append({"data": data, "layout": layout})
    return found


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


def test_plotly_is_embedded_once_per_page_and_nothing_is_fetched(site):
    for spec in PAGES:
        text = (site / spec.file).read_text()
        figures = text.count("Plotly.newPlot(")
        assert len(PLOTLY_BUNDLE.findall(text)) == (1 if figures else 0), spec.file
        # Nothing loaded from elsewhere (the bundle itself only names a topojson URL for
        # geo charts, which the site has none of).
        assert not re.search(r'<(script|link|img)[^>]+(src|href)="?https?:', text), spec.file
    expected = {"index.html": 1, "tp.html": 3, "conv.html": 3, "models.html": 5, "roofline.html": 1,
                "memory.html": 3, "history.html": 1}
    for page, count in expected.items():
        assert (site / page).read_text().count("Plotly.newPlot(") == count, page


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
    (heatmap, _, _) = _figures((site / "tp.html").read_text())
    menu = heatmap["layout"]["updatemenus"][0]
    labels = [b["label"] for b in menu["buttons"]]
    assert f"{A100} · float32" in labels and "AMD EPYC 7763 · float64" in labels
    assert labels[0].endswith("float32")
    for button in menu["buttons"]:
        assert len(button["args"][0]["visible"]) == len(heatmap["data"])
    assert "commit %{customdata[0]}" in heatmap["data"][0]["hovertemplate"]
    assert "machine %{customdata[1]}" in heatmap["data"][0]["hovertemplate"]
    (roofline,) = _figures((site / "roofline.html").read_text())
    assert any(trace["name"] == "peak" for trace in roofline["data"])


def test_models_page_has_breakdown_and_variant_speedup(site):
    text = (site / "models.html").read_text()
    assert 'id="model-breakdown"' in text and 'id="model-speedup-variant"' in text
    breakdown = pd.read_csv(site / "model-breakdown.csv")
    assert set(breakdown["category"]) == {"tensor product", "radial MLP", "other"}
    speedup = pd.read_csv(site / "model-speedup-variant.csv")
    assert (speedup["speedup"] > 15).all()  # the sample's optimized se3t is 20x the baseline


def test_empty_and_failed_tables_say_no_rows(tmp_path):
    failed = synthetic_results()
    failed = failed[failed["status"] != "ok"]
    for frame in (failed, results.to_frame([])):
        out = tmp_path / f"site{len(frame)}"
        write_site(frame, out, history=pd.DataFrame())
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
    (roofline,) = _figures((run / "dashboard" / "roofline.html").read_text())
    peaks = [t for t in roofline["data"] if t["name"] == "peak"]
    assert len(peaks) == 2  # float32 and float64 ceilings of the probed machine
    assert math.isclose(max(_values(t["y"]).max() for t in peaks), 100.0)


def test_synthetic_rows_label_every_page(tmp_path):
    index = write_site(synthetic_results(), tmp_path / "site", history=pd.DataFrame())
    pages = [index.parent / spec.file for spec in PAGES]
    assert all("Synthetic data:" in p.read_text() for p in pages)
    real = synthetic_results()
    real["extra"] = "{}"
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
    names = {trace.get("name") for f in _figures((index.parent / "tp.html").read_text())
             for trace in f["data"]}
    xs = {x for f in _figures((index.parent / "tp.html").read_text()) for trace in f["data"]
          for x in (trace.get("x") or []) if isinstance(x, str)}
    assert "cuequivariance (fallback)" in names | xs
    assert "cuequivariance" not in names | xs
    text = index.read_text()
    assert "<h2>Code paths</h2>" in text and "naive: pure PyTorch" in text
    assert "Every matched pair of each claim" in text
