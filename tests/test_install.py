"""A regular (non-editable) install runs from any directory: the configuration schema and
presets travel with the package (``equibench.workflow_config``), not the source tree."""

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

REPO = Path(__file__).resolve().parent.parent

RUN = """
import sys
import equibench
from equibench import config
from equibench.cli import entry

assert equibench.__file__.startswith(sys.argv[1]), equibench.__file__
assert config.resolve({"preset": "quick"})["name"] == "quick"
sys.argv = ["equibench", "run", "--level", "tp", "--workload", "nequip-benzene-1parity",
            "--implementation", "e3nn", "--direction", "forward", "--batch", "16",
            "--rounds", "1", "--threads", "1", "--quiet", "--out", "out.parquet"]
entry()
"""


@pytest.mark.slow
def test_a_regular_install_runs_from_another_directory(tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(site), str(REPO)],
                   check=True, capture_output=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    done = subprocess.run([sys.executable, "-c", RUN, str(site)], cwd=work,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin",
                               "HOME": str(Path.home())},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = pd.read_parquet(work / "out.parquet").to_dict("records")
    assert row["status"] == "ok"
