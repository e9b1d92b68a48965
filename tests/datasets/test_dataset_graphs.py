"""Graph builders: convention, radius (periodic, neighbour limit), full, RDKit bonds."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from ase.build import fcc111, molecule
from equibench.datasets import graphs
from equibench.datasets.graphs import BondOrderWarning, bond_graph, full_graph, radius_graph


def _brute_force_pairs(pos, cutoff, cell=None, pbc=None, reach=3):
    """All (src, dst, shift) within cutoff by enumerating lattice translations."""
    ranges = [range(-reach, reach + 1) if pbc is not None and p else range(1) for p in
              (pbc if pbc is not None else [False] * 3)]  # fmt: skip
    found = set()
    for shift in itertools.product(*ranges):
        offset = np.array(shift) @ cell if cell is not None else np.zeros(3)
        for i, j in itertools.product(range(len(pos)), repeat=2):
            if i == j and not any(shift):
                continue
            if np.linalg.norm(pos[j] - pos[i] + offset) < cutoff:
                found.add((i, j, shift))
    return found


def test_radius_graph_molecule_matches_brute_force_and_convention():
    atoms = molecule("CH3CH2OH")
    g = radius_graph(atoms.positions, 2.0)
    pairs = set(zip(g.edge_src.tolist(), g.edge_dst.tolist(), map(tuple, g.cell_shift.tolist()),
                    strict=True))  # fmt: skip
    assert pairs == _brute_force_pairs(atoms.positions, 2.0)
    assert g.edge_src.dtype == np.int64 and g.edge_vec.shape == (g.n_edges, 3)
    np.testing.assert_allclose(
        g.edge_vec, atoms.positions[g.edge_dst] - atoms.positions[g.edge_src]
    )
    # Symmetric: every edge also runs the other way.
    assert pairs == {(j, i, s) for i, j, s in pairs}


def test_radius_graph_periodic_shifts():
    slab = fcc111("Cu", size=(2, 2, 2), vacuum=8.0)
    slab.pbc = True
    cell = slab.cell.array
    g = radius_graph(slab.positions, 4.0, cell=cell, pbc=slab.pbc)
    pairs = set(zip(g.edge_src.tolist(), g.edge_dst.tolist(), map(tuple, g.cell_shift.tolist()),
                    strict=True))  # fmt: skip
    assert pairs == _brute_force_pairs(slab.positions, 4.0, cell, slab.pbc)
    assert (g.cell_shift != 0).any()
    expected = slab.positions[g.edge_dst] - slab.positions[g.edge_src] + g.cell_shift @ cell
    np.testing.assert_allclose(g.edge_vec, expected)
    np.testing.assert_allclose(g.edge_shift, g.cell_shift @ cell)


def test_max_neighbors_keeps_nearest_incoming_edges():
    rng = np.random.default_rng(0)
    pos = rng.uniform(0, 4, size=(30, 3))
    full = radius_graph(pos, 3.0)
    limited = radius_graph(pos, 3.0, max_neighbors=5)
    assert np.bincount(limited.edge_dst, minlength=30).max() <= 5
    dist_full = np.linalg.norm(full.edge_vec, axis=1)
    dist_lim = np.linalg.norm(limited.edge_vec, axis=1)
    for node in range(30):
        kept = np.sort(dist_lim[limited.edge_dst == node])
        nearest = np.sort(dist_full[full.edge_dst == node])[:5]
        np.testing.assert_allclose(kept, nearest)


def test_full_graph_has_all_ordered_pairs():
    pos = np.random.default_rng(1).normal(size=(6, 3))
    g = full_graph(pos)
    assert g.n_edges == 30
    assert set(zip(g.edge_src.tolist(), g.edge_dst.tolist(), strict=True)) == {
        (i, j) for i in range(6) for j in range(6) if i != j
    }


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        ("C6H6", [12, 0, 0, 12]),  # 6 C-H single, 6 aromatic C-C, both directions
        ("C2H4", [8, 2, 0, 0]),
        ("HCN", [2, 0, 2, 0]),
    ],
)
def test_bond_types_one_hot(name, counts):
    atoms = molecule(name)
    g = bond_graph(atoms.numbers, atoms.positions)
    assert g.edge_attr.shape == (g.n_edges, 4)
    assert g.edge_attr.sum(axis=1).tolist() == [1.0] * g.n_edges
    assert g.edge_attr.sum(axis=0).astype(int).tolist() == counts
    np.testing.assert_allclose(
        g.edge_vec, atoms.positions[g.edge_dst] - atoms.positions[g.edge_src]
    )


def test_bonds_fall_back_to_connectivity_with_warning(monkeypatch):
    from rdkit.Chem import rdDetermineBonds

    def fail(*args, **kwargs):
        raise ValueError("cannot assign bond orders")

    monkeypatch.setattr(rdDetermineBonds, "DetermineBonds", fail)
    atoms = molecule("C2H4")
    with pytest.warns(BondOrderWarning, match="connectivity only"):
        g = bond_graph(atoms.numbers, atoms.positions)
    assert g.n_edges == 10
    assert g.edge_attr[:, 0].all()  # typed single


def test_graph_kinds_listed():
    assert graphs.GRAPH_KINDS == ("radius", "bonds", "full")
