import argparse
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from equibench.dashboards.sample import synthetic_results

from equibench import compare, results
from equibench.cli import PRECISION_NAMES, build_parser, main
from equibench.precision import PRECISIONS

SUBCOMMANDS = ["run", "sweep", "dgl-env", "show", "env", "list", "merge", "dashboard", "config",
               "probe", "claims", "compare", "import", "history", "datasets", "gpu-compile",
               "publish"]


def test_every_subcommand_is_listed_here():
    """So that test_help covers each one."""
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(sub.choices) == sorted(SUBCOMMANDS)


def test_version_names_the_commit(capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["--version"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("equibench 0.") and "commit " in out
    assert f"torch {torch.__version__}" in out


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


def test_where_without_a_value_is_bad_input(tmp_path, capsys):
    table = tmp_path / "t.parquet"
    results.write_atomic(synthetic_results(seed=0), table)
    assert main(["show", str(table), "--where", "implementation"]) == 2
    assert "expected COLUMN=VALUE" in capsys.readouterr().err


def test_invalid_yaml_and_missing_files_name_the_file(tmp_path, capsys):
    bad = tmp_path / "broken.yaml"
    bad.write_text("preset: [\n")
    table = tmp_path / "t.parquet"
    results.write_atomic(synthetic_results(seed=0), table)
    for argv in (["config", str(bad)], ["claims", str(table), "--claims", str(bad)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{bad} is not valid YAML" in err and "internal error" not in err
    missing = tmp_path / "nowhere.yaml"
    assert main(["config", str(missing)]) == 2
    assert f"no such file or directory: {missing}; check the path" in capsys.readouterr().err


def test_config_names_every_unknown_name_its_suites_use(tmp_path, capsys):
    suite = {"name": "x", "level": "tp", "workloads": ["nosuch-wl"],
             "implementations": ["e3nn", "nosuch-impl"], "directions": ["forward"],
             "precisions": ["float32"], "batches": [8]}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"suites": [suite]}))
    assert main(["config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown tp workload 'nosuch-wl'" in err
    assert "unknown tp implementation 'nosuch-impl'" in err


@pytest.mark.parametrize("argv", [["run", "--workload", "mace-large", "--implementation", "e3nn"],
                                  ["probe", "--out", "p.json"], ["env"], ["list"]])
def test_a_device_this_machine_lacks_is_bad_input(argv, capsys):
    assert main([*argv, "--device", "gpu0"]) == 2
    assert "device 'gpu0': expected" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main([*argv, "--device", "cuda:0"]) == 2
        assert "torch sees no GPU here" in capsys.readouterr().err


def test_a_reader_that_goes_away_is_not_an_error(tmp_path):
    """`equibench show ... | head`: the closed pipe ends the command quietly, with the
    status of a command killed by SIGPIPE, not as an internal error."""
    table = tmp_path / "t.parquet"
    results.write_atomic(synthetic_results(seed=0), table)
    proc = subprocess.Popen([sys.executable, "-m", "equibench.cli", "show", str(table)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # before it writes: its first write meets a closed pipe
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 141
    assert b"Traceback" not in err and b"internal error" not in err


def test_run_help_lists_every_precision():
    assert set(PRECISION_NAMES) == set(PRECISIONS)


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


@pytest.mark.slow
def test_run_show_roundtrip(tmp_path):
    out = tmp_path / "r.parquet"
    cmd = [sys.executable, "-m", "equibench.cli", "run", "--workload", "nequip-water",
           "--implementation", "e3nn", "--precision", "float32,float64", "--batch", "8",
           "--budget", "0.1", "--threads", "1", "--quiet", "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    shown = subprocess.run([sys.executable, "-m", "equibench.cli", "show", str(out)],
                           check=True, capture_output=True, text=True, timeout=120)
    assert "2 rows: ok 2" in shown.stdout


@pytest.mark.slow
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
