"""OC20 S2EF from small fixture tarballs served on 127.0.0.1, and the oc20-like generator."""

from __future__ import annotations

import hashlib
import io
import lzma
import socket
import tarfile

import ase.io
import numpy as np
import pytest
from ase.calculators.singlepoint import SinglePointCalculator
from ase.constraints import FixAtoms
from equibench.datasets.download import OfflineError
from equibench.datasets.graphs import radius_graph
from equibench.datasets.oc20 import OC20Config, parse_frame_line, prepare_oc20
from equibench.datasets.oc20_like import (
    MAX_ATOMS,
    MIN_ATOMS,
    OC20LikeConfig,
    generate_system,
    morse_energy_forces,
    prepare_oc20_like,
)


def _frames(seed: int, count: int) -> list:
    """Labelled slab systems as OC20 stores them: tags, fixed subsurface, energy, forces."""
    rng = np.random.default_rng(seed)
    frames = []
    for _ in range(count):
        atoms, _ = generate_system(rng)
        atoms.set_constraint(FixAtoms(mask=atoms.get_tags() == 0))
        forces = rng.normal(size=(len(atoms), 3))
        atoms.calc = SinglePointCalculator(atoms, energy=float(rng.normal(-300, 50)), forces=forces)
        frames.append(atoms)
    return frames


def _xz(text: str) -> bytes:
    return lzma.compress(text.encode())


def _subset_tar(name: str, files: dict[str, list]) -> bytes:
    """``<name>/<name>/<k>.extxyz.xz`` + ``<k>.txt.xz``, like the published tarballs."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for stem, frames in files.items():
            buffer = io.StringIO()
            ase.io.write(buffer, frames, format="extxyz")
            lines = [f"random{1000 + k},frame{k * 3},{-0.1 * k:.6f}" for k, _ in enumerate(frames)]
            for suffix, data in (
                ("extxyz.xz", _xz(buffer.getvalue())),
                ("txt.xz", _xz("\n".join(lines) + "\n")),
            ):
                info = tarfile.TarInfo(f"{name}/{name}/{stem}.{suffix}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.fixture
def oc20_server(file_server):
    """Two subsets; the first split into files 0, 2, 10 to check numeric file order."""
    subsets = {
        "s2ef_tiny": {"0": _frames(0, 2), "2": _frames(1, 1), "10": _frames(2, 2)},
        "s2ef_val_tiny": {"0": _frames(3, 2)},
    }
    md5 = {}
    for name, files in subsets.items():
        data = _subset_tar(name, files)
        file_server.files[f"/{name}.tar"] = data
        md5[name] = hashlib.md5(data, usedforsecurity=False).hexdigest()
    config = OC20Config(subsets=tuple(subsets), md5=md5, base_url=file_server.url + "/")
    expected = [
        a for files in subsets.values() for stem in ("0", "2", "10") for a in files.get(stem, [])
    ]
    return config, expected


def test_parse_frame_line():
    ref = parse_frame_line("random1331004,frame46,-0.2839231\n")
    assert (ref.sid, ref.fid, ref.reference_energy) == (1331004, 46, -0.2839231)


def test_prepare_oc20_reads_frames_tags_cells_energy_forces(oc20_server, data_dir):
    config, expected = oc20_server
    data = prepare_oc20(config=config)
    assert data.n_structures == len(expected) == 7
    assert data.metadata["periodic"] and not data.metadata["synthetic"]
    assert (data_dir / "raw" / "oc20" / "s2ef_tiny.extracted" / ".extracted").exists()
    for i, atoms in enumerate(expected):
        atoms_slice = slice(data.atom_ptr[i], data.atom_ptr[i + 1])
        assert np.array_equal(data.numbers[atoms_slice], atoms.numbers)
        np.testing.assert_allclose(data.pos[atoms_slice], atoms.positions, atol=1e-5)
        np.testing.assert_allclose(
            data.node_targets["forces"][atoms_slice], atoms.get_forces(), atol=1e-6
        )
        assert np.array_equal(data.node_attrs["tags"][atoms_slice], atoms.get_tags())
        assert np.array_equal(data.node_attrs["fixed"][atoms_slice], atoms.get_tags() == 0)
        np.testing.assert_allclose(data.cell[i], atoms.cell.array, atol=1e-8)
        assert data.pbc[i].all()
        assert data.targets["energy"][i] == pytest.approx(atoms.get_potential_energy())
    # Files 0, 2, 10 of the first subset, then the second subset (split 1).
    assert data.structure_attrs["split"].tolist() == [0, 0, 0, 0, 0, 1, 1]
    assert data.structure_attrs["sid"].tolist() == [1000, 1001, 1000, 1000, 1001, 1000, 1001]
    assert data.structure_attrs["fid"].tolist() == [0, 3, 0, 0, 3, 0, 3]
    np.testing.assert_allclose(
        data.targets["adsorption_energy"], data.targets["energy"] - data.targets["reference_energy"]
    )
    # Edge counts of the reference graph: 6 Å, at most 50 neighbours, periodic.
    first = expected[0]
    graph = radius_graph(data.pos[: data.atom_ptr[1]], 6.0, cell=first.cell.array, pbc=first.pbc,
                         max_neighbors=50)  # fmt: skip
    assert data.n_edges[0] == graph.n_edges


def test_max_frames_limits_each_subset(oc20_server, data_dir):
    config, _ = oc20_server
    config.max_frames = 1
    data = prepare_oc20(config=config)
    assert data.structure_attrs["split"].tolist() == [0, 1]


def test_oc20_offline_error_names_oc20_like(data_dir):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = OC20Config(subsets=("s2ef_val_id",), base_url=f"http://127.0.0.1:{port}/")
    with pytest.raises(OfflineError, match="oc20-like"):
        prepare_oc20(config=config)


def test_subset_without_checksum_is_refused():
    with pytest.raises(ValueError, match="md5"):
        OC20Config().remote("s2ef_train_2M")


def test_oc20_like_is_deterministic_periodic_and_synthetic(data_dir):
    a = prepare_oc20_like(config=OC20LikeConfig(n_structures=40, seed=3))
    b = prepare_oc20_like(config=OC20LikeConfig(n_structures=40, seed=3))
    c = prepare_oc20_like(config=OC20LikeConfig(n_structures=40, seed=4))
    assert np.array_equal(a.pos, b.pos) and np.array_equal(a.targets["energy"], b.targets["energy"])
    assert not np.array_equal(a.atom_ptr, c.atom_ptr)
    assert a.metadata["synthetic"] is True and a.metadata["name"] == "oc20-like"
    assert a.metadata["periodic"] and a.pbc.all()
    sizes = np.diff(a.atom_ptr)
    assert sizes.min() >= MIN_ATOMS and sizes.max() <= MAX_ATOMS
    assert set(np.unique(a.node_attrs["tags"]).tolist()) == {0, 1, 2}
    assert a.graph is not None and a.graph.cell_shift is not None


def test_oc20_like_size_distribution():
    rng = np.random.default_rng(0)
    sizes = np.array([len(generate_system(rng)[0]) for _ in range(400)])
    assert MIN_ATOMS <= sizes.min() and sizes.max() <= MAX_ATOMS
    assert 60 <= sizes.mean() <= 85


def test_morse_forces_are_minus_the_energy_gradient():
    atoms, _ = generate_system(np.random.default_rng(5))
    _, forces = morse_energy_forces(atoms)
    h = 1e-5
    for atom in (0, len(atoms) - 1):
        atoms.positions[atom, 2] += h
        up, _ = morse_energy_forces(atoms)
        atoms.positions[atom, 2] -= 2 * h
        down, _ = morse_energy_forces(atoms)
        atoms.positions[atom, 2] += h
        assert forces[atom, 2] == pytest.approx(-(up - down) / (2 * h), rel=1e-4, abs=1e-6)
