"""Public API, cache layout and the ``datasets`` command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from equibench.datasets import cli
from equibench.datasets.cache import atomic_write

from equibench import datasets

REPO = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).with_name("snakemake")


def test_cache_layout_follows_environment(data_dir):
    assert datasets.data_dir() == data_dir
    assert datasets.prepared_path("qm9") == data_dir / "prepared" / "qm9.npz"


def test_atomic_write_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "out.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_write(target) as handle:
        handle.write(b"half")
        raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]


def test_prepare_load_and_info(data_dir):
    prepared = datasets.prepare("oc20-like", n_structures=15, seed=2)
    path = data_dir / "prepared" / "oc20-like.npz"
    assert path.exists() and len(list(path.parent.iterdir())) == 1
    ds = datasets.load("oc20-like")
    assert isinstance(ds, datasets.Dataset)
    assert (ds.name, ds.synthetic, ds.periodic, len(ds)) == ("oc20-like", True, True, 15)
    assert np.array_equal(ds.data.pos, prepared.data.pos)
    s = ds.structure(0)
    assert isinstance(s, datasets.Structure)
    assert s.pos.shape == (len(s.numbers), 3) and s.cell.shape == (3, 3) and s.pbc.all()
    assert s.targets["forces"].shape == s.pos.shape and "energy" in s.targets
    assert s.node_target_keys == ("forces",)
    assert len(s.to_ase()) == len(s.numbers)
    graph = ds.graph(0, kind="radius", cutoff=5.0)
    assert isinstance(graph, datasets.Graph) and graph.edge_vec.shape == (graph.n_edges, 3)
    batch = ds.batch([0, 1], graph="radius", cutoff=5.0)
    assert isinstance(batch, datasets.GraphBatch) and batch.n_graphs == 2
    summary = datasets.info("oc20-like")
    assert summary["n_structures"] == 15 and summary["synthetic"] and summary["periodic"]
    assert summary["edges_per_structure"]["cutoff"] == 6.0
    assert summary["edges_per_structure"]["total"] == int(ds.data.n_edges.sum())
    assert summary["units"]["forces"] == "eV/Å"


def test_a_subset_keeps_its_structures_whole_and_says_it_is_one(data_dir, tmp_path, capsys,
                                                                monkeypatch):
    full = datasets.prepare("oc20-like", n_structures=12, seed=1)
    out = tmp_path / "carried" / "prepared" / "oc20-like.npz"
    assert cli.main(["datasets", "subset", "oc20-like", "--structures", "5", "--seed", "3",
                     "--out", str(out)]) == 0
    assert "random 5 of 12 structures, seed 3" in capsys.readouterr().err
    monkeypatch.setenv("EQUIBENCH_DATA_DIR", str(out.parents[1]))
    part = datasets.load("oc20-like")  # read where the subset was placed, never re-prepared
    assert len(part) == 5 and part.metadata["subset"]["of"] == 12
    picked = part.data.structure_attrs["sid"]
    rows = [int(np.flatnonzero(full.data.structure_attrs["sid"] == sid)[0]) for sid in picked]
    assert rows == sorted(rows)
    for i, j in enumerate(rows):
        a, b = part.structure(i), full.structure(j)
        assert np.array_equal(a.pos, b.pos) and np.array_equal(a.numbers, b.numbers)
        assert np.array_equal(a.targets["forces"], b.targets["forces"])
        assert np.array_equal(a.cell, b.cell)
        assert part.data.n_edges[i] == full.data.n_edges[j]
        # The stored radius graph travels with its structure.
        ga, gb = part.graph(i, kind="radius", cutoff=6.0), full.graph(j, kind="radius",
                                                                      cutoff=6.0)
        for field in ("edge_src", "edge_dst", "cell_shift"):
            assert np.array_equal(getattr(ga, field), getattr(gb, field))
    assert cli.main(["datasets", "info", "oc20-like"]) == 0
    assert "SUBSET          random 5 of 12" in capsys.readouterr().out
    assert datasets.registry.cached_subsets() == {
        "oc20-like": "random 5 of 12 structures, seed 3"}
    assert cli.main(["datasets", "subset", "oc20-like", "--structures", "13",
                     "--out", str(tmp_path / "x.npz")]) == 2
    assert "1..5" in capsys.readouterr().err
    # Never over the cache's own file, where a part would pass for the whole dataset.
    assert cli.main(["datasets", "subset", "oc20-like", "--structures", "2",
                     "--out", str(out)]) == 2
    assert "write it elsewhere" in capsys.readouterr().err
    with pytest.raises(ValueError, match="0..11"):
        full.data.subset(np.array([-1]), "x")


def test_unknown_names_and_sources_are_refused(data_dir):
    with pytest.raises(ValueError, match="known"):
        datasets.load("md17")
    with pytest.raises(ValueError, match="source"):
        datasets.prepare("qm9", source="zenodo")


def test_cli_prepare_and_info_json(data_dir, capsys):
    assert cli.main(["datasets", "prepare", "oc20-like", "--n-structures", "10", "--quiet"]) == 0
    assert "10 structures" in capsys.readouterr().err
    assert cli.main(["datasets", "info", "oc20-like", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    for key in ("n_structures", "periodic", "synthetic", "source", "units"):
        assert key in summary
    assert summary["n_structures"] == 10
    assert set(summary["atoms_per_structure"]) >= {"min", "mean", "max"}
    assert set(summary["edges_per_structure"]) >= {"min", "mean", "max", "cutoff"}
    assert cli.main(["datasets", "info", "oc20-like"]) == 0
    assert "SYNTHETIC" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["datasets"], ["datasets", "prepare"], ["datasets", "info"]])
def test_cli_help(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*argv, "--help"])
    assert exit_info.value.code == 0
    assert "qm9" in capsys.readouterr().out


def test_cli_reports_offline_download_errors(data_dir, capsys, monkeypatch):
    from equibench.datasets import download as download_module

    def offline(remote, *args, **kwargs):
        raise download_module.OfflineError(f"cannot reach {remote.url}. Offline alternative: x")

    monkeypatch.setattr("equibench.datasets.qm9.download", offline)
    assert cli.main(["datasets", "prepare", "qm9", "--source", "figshare", "--quiet"]) == 1
    assert "Offline alternative" in capsys.readouterr().err
    # A source that does not exist is bad input: exit 2, as for every equibench command.
    assert cli.main(["datasets", "prepare", "qm9", "--source", "nowhere", "--quiet"]) == 2
    assert "nowhere" in capsys.readouterr().err


@pytest.mark.skipif(not SNAKEMAKE.exists(), reason="snakemake not installed beside python")
def test_snakemake_rule_prepares_configured_datasets(tmp_path, data_dir):
    (tmp_path / "config.yaml").write_text(
        "preset: quick\ndevice: cpu\n"
        "datasets:\n  - {name: qm9, source: figshare}\n  - oc20-like\n"
    )
    result = subprocess.run(
        [str(SNAKEMAKE), "-n", "-p", "--snakefile", str(REPO / "Snakefile"),
         "--configfile", "config.yaml", "--", "datasets"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "equibench datasets prepare qm9 --source figshare --force" in result.stdout
    assert "equibench datasets prepare oc20-like" in result.stdout
    assert str(data_dir / "prepared" / "oc20-like.npz") in result.stdout
