"""The whole workflow on a tiny configuration: Snakemake -> results table -> dashboard."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from equibench import results

REPO = Path(__file__).resolve().parent.parent
TINY = {
    "preset": "quick",
    "name": "tiny",
    "device": "cpu",
    "threads": 1,
    "measure": {"min_repeats": 2, "max_repeats": 4, "budget_s": 0.1, "warmup": 0},
    "suites": [{
        "name": "tp", "level": "tp", "workloads": ["nequip-water"],
        "implementations": ["e3nn", "openequivariance"],
        "directions": ["forward", "backward"], "precisions": ["float32", "float64"],
        "batches": [8, 32],
    }],
}


def _snakemake(workdir: Path, *extra: str, env: dict | None = None
               ) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("snakemake")
    return subprocess.run(
        [str(exe), "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
         "--cores", "2", "--configfile", str(workdir / "tiny.yaml"), *extra],
        capture_output=True, text=True, timeout=900, env=env,
    )


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("e2e")
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    proc = _snakemake(workdir)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return workdir


@pytest.mark.slow
def test_table_has_every_case(tiny_run):
    frame = results.read(tiny_run / "results/tiny/results.parquet")
    e3nn = frame[frame["implementation"] == "e3nn"]
    assert len(e3nn) == 2 * 2 * 2
    assert (e3nn["status"] == "ok").all()
    assert (e3nn["max_abs_err"] >= 0).all() and (e3nn["peak_mem_bytes"] >= 0).all()
    assert set(e3nn["batch"]) == {8, 32}
    # An implementation that cannot run here (GPU-only) is recorded, not silently dropped.
    gpu_only = frame[frame["implementation"] == "openequivariance"]
    assert len(gpu_only) == 8 and (gpu_only["status"] == "unavailable").all()
    assert gpu_only["reason"].str.contains("GPU").all()
    # One id for the invocation, unique to it, under the folder named after the
    # configuration; the name has its own column.
    (run,) = set(frame["run_id"])
    assert run.startswith("tiny-") and set(frame["config_name"]) == {"tiny"}


@pytest.mark.slow
def test_dashboard_is_self_contained(tiny_run):
    index = tiny_run / "results/tiny/dashboard/index.html"
    text = index.read_text()
    assert "Plotly.newPlot" in text or "Plotly.react" in text
    # no script loaded from the network: plotly.js is a file of the site
    assert not re.search(r"<script[^>]+src=[\"']https?://", text)
    assert "nequip-water" in text


@pytest.mark.slow
def test_a_misspelt_name_stops_the_job_before_any_case(tmp_path):
    config = {**TINY, "suites": [{**TINY["suites"][0],
                                  "implementations": ["e3nn", "openequivariance-missing"]}]}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(config))
    proc = _snakemake(tmp_path)
    assert proc.returncode != 0
    log = (tmp_path / "results/tiny/logs/tp/all/cpu.log").read_text()
    assert "unknown tp implementation 'openequivariance-missing'" in log
    assert "did you mean 'openequivariance'" in log
    assert not (tmp_path / "results/tiny/cases").exists() or not any(
        (tmp_path / "results/tiny/cases").rglob("*.parquet"))


@pytest.mark.slow
def test_rerun_is_a_no_op(tiny_run):
    proc = _snakemake(tiny_run, "-n")
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_dgl_suite_records_why_its_environment_is_missing(tmp_path):
    """The dgl_env rule runs the real build script; with the torch index and PyPI, its
    fallback, both unreachable (port 9 of this machine, pip's cache off) it fails in
    seconds, and the suite's cases quote that failure."""
    suite = {"name": "dgl", "level": "model", "workloads": ["se3t-qm9-small"],
             "implementations": ["basis"], "variants": ["optimized+dgl"],
             "directions": ["inference"], "precisions": ["float32"], "batches": [2]}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY, "suites": [suite]}))
    env = {**os.environ, "EQUIBENCH_TORCH_INDEX": "http://127.0.0.1:9/simple",
           "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_CACHE_DIR": "1"}
    proc = _snakemake(tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    status = json.loads((tmp_path / "results/envs/dgl.json").read_text())
    assert not status["ok"] and "make_dgl_env.sh failed" in status["reason"]
    assert (tmp_path / ".venv-dgl").is_dir()  # built where the workflow runs, not in the repo
    [row] = results.read(tmp_path / "results/tiny/results.parquet").to_dict("records")
    assert row["status"] == "unavailable"
    assert "the DGL environment could not be built: make_dgl_env.sh failed" in row["reason"]


def test_bad_config_fails_before_any_job(tmp_path):
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY, "treads": 1}))
    proc = _snakemake(tmp_path)
    assert proc.returncode != 0
    assert "treads" in proc.stdout + proc.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_lint_is_clean():
    exe = Path(sys.executable).with_name("snakemake")
    proc = subprocess.run([str(exe), "--lint", "--snakefile", str(REPO / "Snakefile")],
                          capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0
    assert "Lints for" not in proc.stdout + proc.stderr
