"""The workflow on a real Slurm cluster: the one-node cluster of scripts/local_slurm.sh
(Debian's slurm-wlm) and workflows/profiles/slurm-local, whose every job is an sbatch job.

One tiny configuration (a tp, a conv and a model suite: three benchmark jobs) runs twice,
locally and on Slurm, and both tables must hold the same cases with the same statuses.
During the Slurm run one benchmark job is cancelled with `scancel` while its sweep runs:
the profile's `retries` must rerun it, and the table must still have every case.

Skipped when `scripts/local_slurm.sh status` says the cluster is not running; CI starts it
first (sudo bash scripts/local_slurm.sh start)."""

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from equibench import results, run_ids
from equibench.cases import KEY_FIELDS

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "local_slurm.sh"
NAME = "slurm-tiny"
TABLE = f"results/{NAME}/results.parquet"
# Three suites across levels, each one job (per-suite); openequivariance is GPU-only, so
# the table has `unavailable` rows beside the `ok` ones.
CONFIG = {
    "preset": "quick",
    "name": NAME,
    "device": "cpu",
    "threads": 1,
    "timeout_s": 300,
    "measure": {"rounds": 1, "min_repeats": 2, "max_repeats": 3, "budget_s": 0.05,
                "warmup": 0, "breakdown": False},
    "suites": [
        {"name": "tp", "level": "tp", "workloads": ["nequip-water-1parity"],
         "implementations": ["e3nn", "fused", "openequivariance"],
         "directions": ["forward"], "precisions": ["float32"], "batches": [8]},
        {"name": "conv", "level": "conv", "workloads": ["nequip-water-1parity@carbon"],
         "implementations": ["e3nn", "fused"],
         "directions": ["forward"], "precisions": ["float32"], "batches": [8]},
        {"name": "mace", "level": "model", "workloads": ["mace-qm9"],
         "implementations": ["e3nn"], "variants": ["small"],
         "directions": ["inference"], "precisions": ["float32"], "batches": [1]},
    ],
}
CANCELLED_SUITE = "mace"  # the longest job: its sweep builds a model


def _skip(why: str) -> None:
    """Skip, saying why; fail instead where the run requires the cluster
    (``EQUIBENCH_REQUIRE_SLURM=1``: CI, which starts it first)."""
    if os.environ.get("EQUIBENCH_REQUIRE_SLURM") == "1":
        pytest.fail(f"EQUIBENCH_REQUIRE_SLURM=1 but {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def slurm_env():
    """The environment for Slurm's client commands, or a skip when no cluster runs."""
    if shutil.which("bash") is None or shutil.which("sbatch") is None:
        _skip("Slurm is not installed (sudo bash scripts/local_slurm.sh start)")
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        _skip("snakemake-executor-plugin-slurm is not installed")
    status = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True,
                            text=True, timeout=60)
    if status.returncode != 0:
        lines = (status.stdout + status.stderr).replace("local_slurm: ", "").splitlines()
        why = "; ".join(line for line in lines[:-1] if "not" in line or "error" in line)
        _skip(f"the local Slurm cluster is not running ({why}): start it with "
              "`sudo bash scripts/local_slurm.sh start`")
    # SLURM_CONF: the script's config even where /etc/slurm/slurm.conf is someone else's.
    line = subprocess.run(["bash", str(SCRIPT), "env"], capture_output=True, text=True,
                          check=True).stdout.strip()
    return {**_environment(), "SLURM_CONF": line.split("=", 1)[1]}


def _environment() -> dict:
    # Each run makes its own run id (the Slurm jobs inherit the invocation's).
    return {k: v for k, v in os.environ.items() if k != run_ids.ENV}


def _command(workdir: Path, profile: str) -> list[str]:
    exe = Path(sys.executable).with_name("snakemake")
    # The target first: --configfile takes every word after it.
    return [str(exe), TABLE, "--snakefile", str(REPO / "Snakefile"),
            "--directory", str(workdir),
            "--profile", str(REPO / "workflows" / "profiles" / profile),
            "--configfile", str(workdir / "tiny.yaml")]


def _workdir(tmp_path_factory, name: str) -> Path:
    workdir = tmp_path_factory.mktemp(name)
    (workdir / "tiny.yaml").write_text(yaml.safe_dump(CONFIG))
    return workdir


def _squeue(env: dict, *args: str) -> list[list[str]]:
    out = subprocess.run(["squeue", "-h", *args], capture_output=True, text=True, env=env,
                         timeout=30).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    workdir = _workdir(tmp_path_factory, "local")
    start = time.monotonic()
    proc = subprocess.run(_command(workdir, "local"), capture_output=True, text=True,
                          timeout=600, env=_environment())
    assert proc.returncode == 0, proc.stderr[-4000:]
    print(f"local run: {time.monotonic() - start:.0f} s")
    return results.read(workdir / TABLE)


@pytest.fixture(scope="module")
def slurm_run(slurm_env, tmp_path_factory):
    """The Slurm run, with one benchmark job cancelled once its sweep has started."""
    workdir = _workdir(tmp_path_factory, "slurm")
    sweep_log = workdir / f"results/{NAME}/logs/{CANCELLED_SUITE}/all/cpu.log"
    log = workdir / "snakemake.log"  # a file, not a pipe nobody reads while we poll
    start = time.monotonic()
    with log.open("w") as out:
        proc = subprocess.Popen(_command(workdir, "slurm-local"), stdout=out,
                                stderr=subprocess.STDOUT, env=slurm_env)
    cancelled = None
    try:
        # The job's rule writes its log as soon as `equibench sweep` starts: cancel then,
        # while it runs its cases (seconds: it imports torch and builds a model).
        while cancelled is None and proc.poll() is None and time.monotonic() - start < 300:
            if sweep_log.exists():
                for job_id, state, comment in _squeue(slurm_env, "--me", "-o", "%i|%T|%k"):
                    if (state == "RUNNING" and comment.startswith("rule_bench")
                            and CANCELLED_SUITE in comment):
                        subprocess.run(["scancel", job_id], env=slurm_env, check=True)
                        cancelled = job_id
            time.sleep(0.2)
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"Slurm run: {time.monotonic() - start:.0f} s")
    output = log.read_text()
    # The plugin keeps the Slurm logs of failed jobs; the last lines say what went wrong.
    assert proc.returncode == 0, output[-6000:]
    # Asked now: squeue lists a finished job for MinJobAge (300 s) only.
    state = _squeue(slurm_env, "--states=all", "-j", cancelled, "-o", "%T") if cancelled else []
    return {"output": output, "cancelled": cancelled, "cancelled_state": state,
            "table": results.read(workdir / TABLE)}


def _cases(frame) -> list[tuple]:
    columns = [*KEY_FIELDS, "status"]
    return sorted(map(tuple, frame[columns].astype(str).itertuples(index=False)))


@pytest.mark.slow
def test_slurm_table_matches_a_local_run(slurm_run, local_run):
    table = slurm_run["table"]
    assert _cases(table) == _cases(local_run)
    assert len(table) == 3 + 2 + 1
    assert set(table["status"]) == {"ok", "unavailable"}
    assert (table[table["implementation"] == "openequivariance"]["status"]
            == "unavailable").all()
    # Every sbatch job inherits the invocation's run id through the environment.
    (run,) = set(table["run_id"])
    assert run.startswith(f"{NAME}-")


@pytest.mark.slow
def test_a_cancelled_job_is_retried_and_nothing_is_lost(slurm_run):
    job_id = slurm_run["cancelled"]
    assert job_id is not None, "no running benchmark job was seen to cancel"
    # Slurm recorded the cancellation ...
    assert slurm_run["cancelled_state"] == [["CANCELLED"]]
    # ... Snakemake saw the job fail and submitted it again ...
    output = slurm_run["output"]
    assert f"SLURM-job '{job_id}' failed" in output
    assert "Trying to restart job" in output
    # ... and the rerun's cases are in the table, none twice.
    table = slurm_run["table"]
    suite_rows = table[table["level"] == "model"]
    assert len(suite_rows) == 1 and (suite_rows["status"] == "ok").all()
    assert not table.duplicated(list(KEY_FIELDS)).any()
