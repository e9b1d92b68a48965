"""``equibench publish``: one site from the tables of several machines, on real tables.

The two machines are the committed CI baseline (tcmalloc, one thread) and a run made here
with the system allocator: on the CI host they are one machine in two configurations, which
the site must tell apart; on another host two machines. Either way both are real runs.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from equibench.dashboards.controls import SEPARATOR, configurations
from equibench.dashboards.machines import COMPARISON_NOTE
from site_pages import page_figures

from equibench import results
from equibench.cli import main
from equibench.cli_publish import PROBES, _once

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "results" / "baselines" / "ci-cpu.parquet"
# One case of the baseline's (tp nequip-water-1parity forward float32, batch 64), timed
# again: about 10 s with the imports and the fused kernel's first build.
RUN = ["run", "--level", "tp", "--workload", "nequip-water-1parity", "--implementation",
       "e3nn,fused", "--batch", "64", "--threads", "1", "--budget", "0.05", "--rounds", "2",
       "--cpu-allocator", "system", "--quiet"]


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A run folder holding the table of a real run made here."""
    folder = tmp_path_factory.mktemp("run-b")
    subprocess.run([sys.executable, "-m", "equibench.cli", *RUN, "--out",
                    str(folder / "results.parquet")], check=True, capture_output=True,
                   text=True, timeout=300)
    return folder


@pytest.fixture(scope="module")
def published(run_folder, tmp_path_factory) -> tuple[Path, pd.DataFrame, str]:
    """The site of the baseline (a table) and the run (a folder), the rows it read, and
    what the command printed."""
    out = tmp_path_factory.mktemp("site")
    command = [sys.executable, "-m", "equibench.cli", "publish", str(BASELINE),
               str(run_folder), "--out", str(out)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    rows = results.read([BASELINE, run_folder])
    return out, rows, done.stdout


def _labels(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The rows of each machine configuration, by its label."""
    found = configurations(rows)["configuration"]
    return {label: rows[found == label] for label in found.unique()}


def _table_rows(page: str, heading: str) -> list[dict[str, str]]:
    """The rows of the first table after ``<h2>heading</h2>``, by column, unescaped."""
    section = page[page.index(f"<h2>{heading}</h2>"):]
    section = section[:section.index("</table>")]
    head = [html.unescape(c) for c in re.findall(r"<th>(.*?)</th>", section)]
    return [dict(zip(head, [html.unescape(c) for c in re.findall(r"<td>(.*?)</td>", row)],
                     strict=True))
            for row in re.findall(r"<tr>(.*?)</tr>", section.split("<tbody>")[1])]


def test_a_missing_path_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "laptop" / "results.parquet"
    assert main(["publish", str(BASELINE), str(missing), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: no such file or directory" in err
    assert "run folders that hold results.parquet" in err  # the fix
    assert not (tmp_path / "site").exists()  # nothing written


def test_a_table_failing_the_schema_names_the_file(tmp_path, capsys):
    broken = tmp_path / "broken.parquet"
    pd.read_parquet(BASELINE).drop(columns=["status"]).to_parquet(broken)
    assert main(["publish", str(broken), "--out", str(tmp_path / "site")]) == 2
    err = capsys.readouterr().err
    assert f"{broken}: result table is missing column(s) ['status']" in err
    assert "not a result table of this equibench" in err


def test_a_table_given_twice_counts_once():
    rows = results.read(BASELINE)
    assert len(_once(pd.concat([rows, rows], ignore_index=True))) == len(rows)


@pytest.mark.slow
def test_the_two_runs_are_two_labelled_configurations(published):
    _, rows, _ = published
    # The system allocator is recorded as what it is (glibc's malloc here).
    allocators = set(rows["cpu_allocator"]) - {""}
    assert len(allocators) == 2 and "tcmalloc" in allocators
    labels = _labels(rows)
    assert len(labels) == 2
    if rows["host"].nunique() == 1 and rows["cpu_model"].nunique() == 1:
        # One machine, two configurations: each label names its allocator and threads.
        assert sorted(labels) == sorted(
            f"{rows['cpu_model'].iloc[0]} (host {rows['host'].iloc[0]}, {allocator} "
            "allocator, 1 thread)" for allocator in allocators)


@pytest.mark.slow
def test_the_command_says_what_it_read(published, run_folder):
    out, rows, stdout = published
    assert f"read {BASELINE}: {len(results.read(BASELINE))} rows, 1 run(s)" in stdout
    assert f"read {run_folder}: 2 rows, 1 run(s)" in stdout
    assert "2 machine configuration(s):" in stdout and f"site: {out / 'index.html'}" in stdout
    # The baseline's probe (ci-cpu.machine.json) is the site's, for the roofline.
    assert [p["cpu"]["machine"] for p in json.loads((out / PROBES).read_text())] == [
        "Intel(R) Xeon(R) Processor"]


@pytest.mark.slow
def test_the_machines_page_lists_each_machine_with_its_cpu_and_flags(published):
    out, rows, _ = published
    page = (out / "machines.html").read_text()
    assert html.escape(COMPARISON_NOTE) in page
    assert "paired speedups and roofline fractions only" in COMPARISON_NOTE
    assert "Raw times from different runs are never compared" in COMPARISON_NOTE
    machines = {r["machine"]: r for r in _table_rows(page, "Machines")}
    assert machines.keys() == _labels(rows).keys()
    for label, part in _labels(rows).items():
        shown = machines[label]
        assert shown["CPU model"] == part["cpu_model"].iloc[0]
        assert shown["allocator"] == part["cpu_allocator"].max()
        assert shown["threads"] == "1"
        assert shown["torch"] == part["version_torch"].iloc[0]
        assert shown["memory"] == "unknown (not recorded)"
        flags = part["cpu_flags"].iloc[0]
        # The baseline predates the cpu_flags column; the run here records them.
        assert shown["ISA flags"] == (flags or "not recorded")
        assert shown["-march=native"] == (part["cpu_march_native"].iloc[0] or "not recorded")
    assert any(r["ISA flags"] != "not recorded" for r in machines.values())
    assert "GPU" not in next(iter(machines.values()))  # no GPU row: no GPU columns
    runs = _table_rows(page, "Runs")
    assert {(r["machine"], r["run_id"]) for r in runs} == {
        (label, part["run_id"].iloc[0]) for label, part in _labels(rows).items()}
    assert {r["config_name"] for r in runs} == set(rows["config_name"])


@pytest.mark.slow
def test_figures_data_hold_both_machines(published):
    out, rows, _ = published
    labels = set(_labels(rows))
    for csv in ("tp-speedup.csv", "tp-throughput.csv", "tp-heatmap.csv",
                "machines-speedup.csv"):
        assert set(pd.read_csv(out / csv)["configuration"]) == labels, csv
    compared = pd.read_csv(out / "machines-speedup.csv")
    # The one case both measured: fused over each machine's own e3nn, paired per round.
    assert set(compared["workload"]) == {"nequip-water-1parity"}
    assert set(compared["implementation"]) == {"fused"}
    assert compared["paired"].all() and (compared["speedup"] > 0).all()
    assert sorted(compared["rounds"]) == sorted([2, 7])


@pytest.mark.slow
def test_every_tp_figure_has_the_machine_menu(published):
    out, rows, _ = published
    labels = set(_labels(rows))
    figures = page_figures((out / "tp.html").read_text())
    assert len(figures) == 3
    for figure in figures:
        [menu] = figure["layout"]["updatemenus"]
        shown = {b["label"].split(SEPARATOR)[0] for b in menu["buttons"]}
        assert shown == labels
    [comparison] = page_figures((out / "machines.html").read_text())
    assert {html.unescape(t["name"]) for t in comparison["data"]} == labels
