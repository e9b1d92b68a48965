"""The Compatibility page: implementation × mode × direction, a cell per case coloured by
status with its cold start, its speedup over eager and the reason it failed; and a site
whose other pages never show a compile or export row."""

import html
import math
import re

import pandas as pd
import pytest
from equibench.dashboards import compatibility
from equibench.dashboards.layout import blocks_html
from equibench.dashboards.sample import CPU, synthetic_results
from equibench.dashboards.site import write_site

from equibench import results

BASE = dict(run_id="run-1", level="tp", workload="mace-large", variant="default",
            precision="float32", batch=64, device="cpu", host="cpu-host", cpu_model=CPU,
            threads=1, git_commit="abc", timestamp="2025-01-01T00:00:00+00:00")
SCRIPT_REASON = ("compile: RuntimeError: <script>alert(1)</script> " + "x" * 200
                 + "\nTraceback (most recent call last)")
# Per-round eager over compile: 2, 3, 4, 5, so the median is 3.5 and the IQR 2.75-4.25.
EAGER_ROUNDS = [1.0, 1.0, 1.0, 1.0]
COMPILE_ROUNDS = [0.5, 1 / 3, 0.25, 0.2]


def _row(implementation: str, mode: str, direction: str, status: str = "ok",
         **fields: object) -> dict:
    timed = {"time_median_s": 1.0} if status == "ok" else {}
    return {**BASE, "implementation": implementation, "mode": mode, "direction": direction,
            "status": status, **timed, **fields}


def _frame() -> pd.DataFrame:
    return results.to_frame([
        _row("e3nn", "eager", "forward", round_times_s=EAGER_ROUNDS, rounds_id="r1",
             cold_start_s=0.5),
        _row("e3nn", "compile", "forward", round_times_s=COMPILE_ROUNDS, rounds_id="r1",
             time_median_s=0.29, cold_start_s=20.0,
             extra={"mode_detail": "torch.compile(step), Inductor"}),
        _row("e3nn", "export", "forward", time_median_s=0.25),  # timed apart: unpaired
        _row("e3nn", "eager", "backward"),
        _row("e3nn", "compile", "backward", "unavailable", reason=SCRIPT_REASON),
        _row("fused", "eager", "forward"),
        _row("fused", "compile", "forward", "incorrect",
             reason="max_scaled_err 0.3 > tolerance 0.0001"),
        _row("eager-only", "eager", "forward"),  # never compiled: not on the page
    ])


def _cells(page: str) -> dict[tuple[str, str], list[tuple[str, str, str]]]:
    """Each table row's cells, by implementation and mode: (class, title, text) in the
    order of the directions, title and text unescaped, line breaks as newlines."""
    found, implementation = {}, ""
    table = page[page.index("<tbody>", page.index("<h3>")):]
    for row in re.findall(r"<tr>(.*?)</tr>", table, re.S):
        headers = re.findall(r"<th[^>]*>(.*?)</th>", row)
        if len(headers) == 2:
            implementation = html.unescape(headers[0])
        cells = re.findall(r'<td class="([^"]*)"(?: title="([^"]*)")?>(.*?)</td>', row, re.S)
        found[(implementation, headers[-1])] = [
            (css, html.unescape(title),
             html.unescape(re.sub(r"<[^>]+>", "", text.replace("<br>", "\n"))))
            for css, title, text in cells]
    return found


@pytest.fixture
def page() -> str:
    return blocks_html(compatibility.blocks(compatibility.matrix(_frame())))


def test_the_matrix_holds_the_implementations_run_in_another_mode():
    cells = compatibility.matrix(_frame())
    assert set(cells["implementation"]) == {"e3nn", "fused"}
    compiled = cells[(cells["implementation"] == "e3nn") & (cells["mode"] == "compile")
                     & (cells["direction"] == "forward")].iloc[0]
    assert compiled["paired"]
    assert (compiled["speedup"], compiled["speedup_q1"], compiled["speedup_q3"]) \
        == pytest.approx((3.5, 2.75, 4.25))
    exported = cells[(cells["implementation"] == "e3nn") & (cells["mode"] == "export")].iloc[0]
    assert not exported["paired"] and exported["speedup"] == pytest.approx(4.0)
    assert list(cells["mode"].drop_duplicates()) == ["eager", "compile", "export"]


def test_each_cell_shows_its_status_cold_start_and_paired_speedup(page):
    cells = _cells(page)
    assert [c[0] for c in cells[("e3nn", "compile")]] == ["compat-ok", "compat-unavailable"]
    forward = cells[("e3nn", "compile")][0]
    assert forward[2] == "ok\ncold start 20 s\n×3.50 over eager (2.75–4.25)"
    assert forward[1] == "torch.compile(step), Inductor"
    assert cells[("e3nn", "eager")][0][2] == "ok\ncold start 0.5 s"  # no speedup over itself
    # No cold start measured: none shown; timed apart: the ratio of medians, said so.
    assert cells[("e3nn", "export")][0][2] == "ok\n×4.00 over eager (unpaired)"
    assert cells[("e3nn", "export")][1] == ("compat-none", "", "not run")
    incorrect = cells[("fused", "compile")][0]
    assert incorrect[0] == "compat-incorrect"
    assert incorrect[2] == "incorrect\nmax_scaled_err 0.3 > tolerance 0.0001"
    assert "eager-only" not in page


def test_a_reason_is_escaped_cut_to_its_first_line_and_whole_in_the_title(page):
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    _, title, text = _cells(page)[("e3nn", "compile")][1]
    status, shown = text.split("\n")
    assert status == "unavailable"
    assert len(shown) == compatibility.REASON_CHARS and shown.endswith("…")
    assert SCRIPT_REASON.startswith(shown[:-1])
    assert title == SCRIPT_REASON


def test_a_run_without_compile_or_export_says_so():
    eager = _frame()
    eager = eager[eager["mode"] == "eager"]
    for frame in (eager, results.to_frame([])):
        cells = compatibility.matrix(frame)
        assert cells.empty and list(cells.columns) == compatibility.COLUMNS
        text = blocks_html(compatibility.blocks(cells))
        assert "No compile or export cases in this run" in text and "compile-modes" in text
        assert '<p class="empty">no rows</p>' in text and "<table" not in text


def test_the_site_shows_compile_rows_on_the_compatibility_page_alone(tmp_path):
    """Compile rows 1000 times faster than their eager rows would top every figure and the
    headline: no page but Compatibility (and results.csv) has them."""
    sample = synthetic_results()
    compiled = sample[(sample["level"] == "tp") & (sample["status"] == "ok")
                      & (sample["device"] == "cuda:0")].copy()
    compiled["mode"] = "compile"
    compiled["time_median_s"] /= 1000
    compiled["time_samples"] = compiled["time_samples"].map(lambda s: [t / 1000 for t in s])
    compiled["throughput"] *= 1000
    compiled["cold_start_s"] = 30.0
    frame = results.validate(pd.concat([sample, compiled], ignore_index=True))
    out = tmp_path / "site"
    write_site(frame, out, history=pd.DataFrame())
    fastest_eager = sample["throughput"].max()
    for data in ("tp-heatmap.csv", "tp-throughput.csv", "headline.csv"):
        assert pd.read_csv(out / data)["throughput"].max() <= fastest_eager * (1 + 1e-9), data
    assert 'href="compatibility.html">Compatibility</a>' in (out / "tp.html").read_text()
    text = (out / "compatibility.html").read_text()
    assert "×1000 over eager (unpaired)" in text and "cold start 30 s" in text
    cells = pd.read_csv(out / compatibility.CSV)
    assert len(cells) == 2 * len(compiled)  # each compile row and its eager row
    assert math.isclose(cells["speedup"].dropna().median(), 1000)
    assert (pd.read_csv(out / "results.csv")["mode"] == "compile").sum() == len(compiled)
