import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from equibench.dashboards.sample import synthetic_results

from equibench import compare, results
from equibench.cli import build_parser, main

SUBCOMMANDS = ["run", "sweep", "show", "env", "list", "merge", "dashboard", "config", "probe",
               "claims", "compare", "import", "history", "datasets"]


@pytest.mark.parametrize("command", [None, *SUBCOMMANDS])
def test_help(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args([command, "--help"] if command else ["--help"])
    assert exit_info.value.code == 0
    assert "usage" in capsys.readouterr().out


def test_bad_config_is_a_clear_error(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("preset: quick\nthreads: -3\n")
    assert main(["config", str(bad)]) == 2
    assert "threads" in capsys.readouterr().err


def test_an_unknown_column_is_bad_input(tmp_path, capsys):
    table = tmp_path / "t.parquet"
    results.write_atomic(synthetic_results(seed=0), table)
    assert main(["show", str(table), "--where", "colour=red"]) == 2
    assert "no column 'colour'" in capsys.readouterr().err
    assert main(["show", str(table), "--columns", "workload,colour"]) == 2
    assert "['colour']" in capsys.readouterr().err


def test_an_internal_error_exits_3_not_1_which_means_a_regression(monkeypatch, tmp_path,
                                                                  capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")
    monkeypatch.setattr(compare, "compare", broken)
    table = tmp_path / "t.parquet"
    results.write_atomic(synthetic_results(seed=0), table)
    assert main(["compare", str(table), str(table)]) == 3
    err = capsys.readouterr().err
    assert "RuntimeError: a bug" in err and "internal error" in err


def test_run_show_roundtrip(tmp_path):
    out = tmp_path / "r.parquet"
    cmd = [sys.executable, "-m", "equibench.cli", "run", "--workload", "nequip-water",
           "--implementation", "e3nn", "--precision", "float32,float64", "--batch", "8",
           "--budget", "0.1", "--threads", "1", "--quiet", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    shown = subprocess.run([sys.executable, "-m", "equibench.cli", "show", str(out)],
                           check=True, capture_output=True, text=True, timeout=120)
    assert "2 rows: ok 2" in shown.stdout


def test_a_terminated_run_keeps_the_groups_that_finished(tmp_path):
    """SIGTERM to the whole process group, as `timeout` sends it, after the first of two
    groups: that group's row is written, whole, and the run exits 143. A data cache that
    holds a part of a dataset is named in every row."""
    from equibench.datasets.prepared import PreparedData

    part = PreparedData(metadata={"subset": {"note": "random 3 of 9 structures, seed 0"}},
                        numbers=np.ones(1, np.uint8), pos=np.zeros((1, 3)),
                        atom_ptr=np.array([0, 1]), n_edges=np.zeros(1, np.int32))
    part.save(tmp_path / "data" / "prepared" / "qm9.npz", compressed=True)
    out = tmp_path / "r.parquet"
    cmd = [sys.executable, "-m", "equibench.cli", "run", "--workload", "nequip-water",
           "--implementation", "e3nn", "--precision", "float32,float64", "--batch", "8",
           "--budget", "0.1", "--threads", "1", "--quiet", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,
                            env={**os.environ, "EQUIBENCH_DATA_DIR": str(tmp_path / "data")})
    try:
        for line in proc.stdout:
            if line.startswith("[ok]"):
                os.killpg(proc.pid, signal.SIGTERM)
                break
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM) after 1 of 2 cases" in err
    table = results.read(out)
    assert len(table) == 1 and table["status"].tolist() == ["ok"]
    assert results.extra(table.iloc[0])["data_subsets"] == {
        "qm9": "random 3 of 9 structures, seed 0"}


def test_list_names_model_families_and_md_structures(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "file:PATH (a saved mace-torch model)" in out
    assert "md directions nve, nvt" in out
    assert "md structures: water-box, diamond, argon, or any file ASE reads" in out
