"""The DGL environment: build status, hand-over of a sweep, and the reason its cases give."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from equibench.implementations.se3_transformer import graph_ops

from equibench import config, dgl_env

DGL_IMPORTS = graph_ops.dgl_unavailable() is None


def _suite(variants):
    return {"name": "s", "level": "model", "workloads": ["se3t-qm9-small"],
            "implementations": ["basis"], "variants": variants, "directions": ["inference"],
            "precisions": ["float32"], "batches": [4]}


def test_dgl_suites_are_their_own_environment():
    cfg = config.resolve({"preset": "quick", "suites": [_suite(["optimized+dgl"])]})
    assert config.environment(cfg["suites"][0]) == "dgl"
    assert config.environment(_suite(["optimized"])) == "main"
    with pytest.raises(config.ConfigError, match="suite of their own"):
        config.resolve({"preset": "quick", "suites": [_suite(["optimized", "optimized+dgl"])]})


def test_a_failed_build_is_recorded_with_its_reason(tmp_path, monkeypatch):
    script = tmp_path / "make.sh"
    script.write_text("echo fetching torch\necho 'no route to the torch index' >&2\nexit 3\n")
    monkeypatch.setattr(dgl_env, "SCRIPT", script)
    status = dgl_env.build(tmp_path / "dgl.json", tmp_path / "dgl.log", str(tmp_path / "v"))
    assert not status["ok"] and "exit 3" in status["reason"]
    assert "no route to the torch index" in status["reason"]
    assert json.loads((tmp_path / "dgl.json").read_text()) == status
    assert "fetching torch" in (tmp_path / "dgl.log").read_text()


@pytest.mark.skipif(DGL_IMPORTS, reason="dgl imports here")
def test_a_built_environment_without_dgl_is_not_ok(tmp_path, monkeypatch):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    script = tmp_path / "make.sh"
    script.write_text("exit 0\n")
    monkeypatch.setattr(dgl_env, "SCRIPT", script)
    status = dgl_env.build(tmp_path / "dgl.json", tmp_path / "dgl.log", str(venv))
    assert not status["ok"] and "dgl does not import" in status["reason"]


@pytest.mark.skipif(DGL_IMPORTS, reason="dgl imports here")
def test_cases_quote_why_the_environment_is_missing(tmp_path, monkeypatch):
    monkeypatch.delenv(dgl_env.ERROR_VARIABLE, raising=False)
    path = tmp_path / "dgl.json"
    path.write_text(json.dumps({"ok": False, "python": "/nowhere/python",
                                "reason": "torch 2.2.1 not on the index", "log": "x.log"}))
    dgl_env.enter(path, ["sweep"])  # returns: nothing to hand over to
    assert "torch 2.2.1 not on the index" in os.environ[dgl_env.ERROR_VARIABLE]
    reason = graph_ops.dgl_unavailable()
    assert "could not be built: torch 2.2.1 not on the index" in reason


def test_status_problems_name_the_fix(tmp_path):
    with pytest.raises(SystemExit, match="equibench dgl-env"):
        dgl_env.read_status(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(SystemExit, match="delete it"):
        dgl_env.read_status(bad)


def test_an_ok_environment_that_is_this_one_runs_here(tmp_path):
    path = tmp_path / "dgl.json"
    path.write_text(json.dumps({"ok": True, "python": sys.executable, "reason": ""}))
    dgl_env.enter(path, ["sweep"])  # already inside: returns instead of exec


STATUS = Path(__file__).resolve().parent.parent / "results" / "envs" / "dgl.json"
BUILT = STATUS.exists() and json.loads(STATUS.read_text()).get("ok", False)


@pytest.mark.skipif(not BUILT, reason="no DGL environment: build it with `equibench dgl-env "
                    "--status results/envs/dgl.json --log results/envs/dgl.log` (.ci/run does)")
def test_a_dgl_case_runs_in_its_environment_and_passes_the_gate(tmp_path):
    """As the workflow runs a +dgl suite: `equibench sweep --environment` from this (main)
    environment hands the sweep over to the DGL one, whose row passes the gate."""
    suite = {**_suite(["optimized+dgl"]), "directions": ["train_step"]}
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"preset": "quick", "name": "dgl", "device": "cpu",
                                   "suites": [suite],
                                   "measure": {"rounds": 1, "budget_s": 0.2,
                                               "min_repeats": 1, "warmup": 0}}))
    out = tmp_path / "dgl.parquet"
    subprocess.run([sys.executable, "-m", "equibench.cli", "sweep", "--config", str(cfg),
                    "--suite", "s", "--implementation", "all", "--device", "cpu",
                    "--environment", str(STATUS), "--out", str(out), "--quiet"],
                   check=True, timeout=600)
    row = pd.read_parquet(out).iloc[0]
    assert row["status"] == "ok", row["reason"]
    assert row["max_scaled_err"] <= row["tolerance"]
    assert json.loads(row["extra"])["switches"]["graph_ops"] == "dgl"
    assert row["version_torch"].startswith("2.2.")


def test_another_environment_is_not_taken_for_this_one(tmp_path):
    """Both environments' pythons may link to one interpreter: the hand-over compares the
    environments, so an ok status of another one never counts as 'already inside'."""
    other = tmp_path / "venv-dgl" / "bin"
    other.mkdir(parents=True)
    (other / "python").symlink_to(Path(sys.executable).resolve())
    path = tmp_path / "dgl.json"
    path.write_text(json.dumps({"ok": True, "python": str(other / "python"), "reason": ""}))
    # enter() would replace this process: run it in a child that reports instead of exec.
    code = (f"import os, sys; from equibench import dgl_env\n"
            f"os.execv = lambda exe, argv: (print('EXEC', exe), sys.exit(0))\n"
            f"dgl_env.enter({str(path)!r}, ['sweep'])\nprint('STAYED')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == f"EXEC {other / 'python'}"
