"""Batching: dynamic, padded and packed batches, GraphBatch tensors, stored-graph reuse."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ase.build import molecule
from equibench.datasets import Dataset
from equibench.datasets.batching import (
    dynamic_batches,
    pack_first_fit_decreasing,
    plan_batches,
)
from equibench.datasets.graphs import radius_graph
from equibench.datasets.oc20_like import OC20LikeConfig, prepare_oc20_like
from equibench.datasets.prepared import PreparedData, base_metadata, build_radius_graphs

NAMES = ["H2O", "CH4", "C6H6", "CH3CH2OH", "C2H4", "HCN", "NH3", "CH3CHO", "C3H8", "CO2"]


@pytest.fixture(scope="module")
def molecules() -> Dataset:
    """A tiny molecular dataset with its 5 Å graph stored, like QM9."""
    mols = [molecule(name) for name in NAMES]
    pos = np.concatenate([m.positions for m in mols])
    atom_ptr = np.concatenate([[0], np.cumsum([len(m) for m in mols])])
    n_edges, graph = build_radius_graphs(pos, atom_ptr, cutoff=5.0)
    meta = base_metadata("mols", source="ase", synthetic=True, periodic=False, units={},
                         graph_cutoff=5.0, graph_max_neighbors=None)  # fmt: skip
    data = PreparedData(
        metadata=meta,
        numbers=np.concatenate([m.numbers for m in mols]).astype(np.uint8),
        pos=pos,
        atom_ptr=atom_ptr,
        n_edges=n_edges,
        targets={"size": np.array([len(m) for m in mols], dtype=np.float64)},
        graph=graph,
    )
    return Dataset(data)


@pytest.fixture(scope="module")
def slabs() -> Dataset:
    return Dataset(prepare_oc20_like(config=OC20LikeConfig(n_structures=12, seed=1)))


def _first_fit_reference(nodes, edges, max_nodes, max_edges, max_graphs):
    """Plain O(items x packs) first-fit-decreasing, to check the segment-tree version."""
    packs, room = [], []
    for item in np.lexsort((-edges, -nodes)):
        for k, (rn, re, rg) in enumerate(room):
            if rn >= nodes[item] and re >= edges[item] and rg >= 1:
                packs[k].append(item)
                room[k] = (rn - nodes[item], re - edges[item], rg - 1)
                break
        else:
            packs.append([item])
            room.append((max_nodes - nodes[item], max_edges - edges[item], max_graphs - 1))
    return packs


def test_dynamic_batches():
    batches = dynamic_batches(10, 4)
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert len(dynamic_batches(10, 4, drop_last=True)) == 2
    shuffled = dynamic_batches(10, 4, shuffle=True, seed=1)
    assert sorted(np.concatenate(shuffled).tolist()) == list(range(10))
    assert [b.tolist() for b in shuffled] == [
        b.tolist() for b in dynamic_batches(10, 4, shuffle=True, seed=1)
    ]


def test_first_fit_decreasing_matches_reference_and_limits():
    rng = np.random.default_rng(0)
    nodes = rng.integers(3, 30, size=300)
    edges = nodes * rng.integers(5, 20, size=300)
    packs = pack_first_fit_decreasing(nodes, edges, max_nodes=100, max_edges=1200, max_graphs=6)
    reference = _first_fit_reference(nodes, edges, 100, 1200, 6)
    assert sorted(map(sorted, (p.tolist() for p in packs))) == sorted(map(sorted, reference))
    assert sorted(np.concatenate(packs).tolist()) == list(range(300))
    for pack in packs:
        assert nodes[pack].sum() <= 100 and edges[pack].sum() <= 1200 and len(pack) <= 6
    with pytest.raises(ValueError, match="exceed"):
        pack_first_fit_decreasing(np.array([5, 200]), max_nodes=100)


def test_packing_beats_padding_efficiency():
    rng = np.random.default_rng(2)
    nodes = rng.integers(3, 30, size=500)
    edges = nodes * 10
    padded = plan_batches(nodes, edges, "padded", batch_size=16)
    packed = plan_batches(nodes, edges, "packed", max_nodes=padded.max_nodes)
    assert packed.padding_efficiency > padded.padding_efficiency
    assert packed.padding_efficiency > 0.95
    assert plan_batches(nodes, edges, "dynamic", batch_size=16).padding_efficiency == 1.0


def test_batch_from_stored_graph_equals_per_structure_graphs(molecules):
    batch = molecules.batch([2, 0, 5])
    offset = 0
    src, dst = [], []
    for i in (2, 0, 5):
        g = radius_graph(molecules.structure(i).pos, 5.0)
        src.append(g.edge_src + offset)
        dst.append(g.edge_dst + offset)
        offset += len(molecules.structure(i).numbers)
    assert batch.edge_src.tolist() == np.concatenate(src).tolist()
    assert batch.edge_dst.tolist() == np.concatenate(dst).tolist()
    expected = batch.pos[batch.edge_dst] - batch.pos[batch.edge_src] + batch.edge_shift
    torch.testing.assert_close(batch.edge_vec, expected)
    assert batch.n_graphs == 3 and batch.node_graph.tolist()[:12] == [0] * 12
    assert batch.targets["size"].tolist() == [12.0, 3.0, 3.0]
    assert batch.padding_efficiency == 1.0


def test_smaller_cutoff_and_neighbour_limit_from_stored_graph(molecules, slabs):
    for ds, cutoff, limit in ((molecules, 2.0, None), (molecules, 4.0, 3), (slabs, 5.0, 20)):
        for i in range(len(ds)):
            s = ds.structure(i)
            stored = ds.graph(i, cutoff=cutoff, max_neighbors=limit)
            fresh = radius_graph(s.pos, cutoff, cell=s.cell, pbc=s.pbc, max_neighbors=limit)
            assert np.array_equal(stored.edge_src, fresh.edge_src)
            assert np.array_equal(stored.edge_dst, fresh.edge_dst)
            assert np.array_equal(stored.cell_shift, fresh.cell_shift)
            np.testing.assert_allclose(stored.edge_vec, fresh.edge_vec, atol=1e-10)


def test_padded_batch_layout(slabs):
    real = slabs.batch([0, 1, 2], cutoff=6.0, max_neighbors=50)
    n, e = real.pos.shape[0], real.edge_src.shape[0]
    padded = slabs.batch([0, 1, 2], cutoff=6.0, max_neighbors=50,
                         max_nodes=n + 10, max_edges=e + 7, max_graphs=5)  # fmt: skip
    assert padded.pos.shape == (n + 10, 3) and padded.edge_src.shape == (e + 7,)
    assert padded.n_graphs == 5 and padded.graph_mask.tolist() == [True] * 3 + [False] * 2
    assert padded.node_mask.sum() == n and padded.edge_mask.sum() == e
    assert padded.node_graph[n:].tolist() == [4] * 10  # padding nodes: last graph slot
    assert padded.edge_src[e:].tolist() == [n] * 7 == padded.edge_dst[e:].tolist()
    assert padded.padding_efficiency == pytest.approx(n / (n + 10))
    # Sums over real nodes are unchanged by padding.
    energy = torch.zeros(5).index_add_(0, padded.node_graph, padded.pos[:, 2])
    expected = torch.zeros(3).index_add_(0, real.node_graph, real.pos[:, 2])
    torch.testing.assert_close(energy[:3], expected)
    assert padded.node_targets["forces"].shape == (n + 10, 3)
    assert padded.cell.shape == (5, 3, 3)
    with pytest.raises(ValueError, match="does not fit"):
        slabs.batch([0, 1, 2], cutoff=6.0, max_neighbors=50, max_nodes=n - 1)
    with pytest.raises(ValueError, match="spare node"):
        slabs.batch([0, 1, 2], cutoff=6.0, max_neighbors=50, max_nodes=n, max_edges=e + 1)


def test_packed_plan_batches_have_static_shapes(slabs):
    plan = slabs.plan("packed", max_nodes=400, cutoff=6.0, max_neighbors=50)
    shapes = {
        (b.pos.shape[0], b.edge_src.shape[0], b.n_graphs)
        for b in slabs.batches(plan, cutoff=6.0, max_neighbors=50)
    }
    assert shapes == {(400, plan.max_edges, plan.max_graphs)}
    assert sorted(np.concatenate(plan.batches).tolist()) == list(range(len(slabs)))


def test_graph_batch_to_casts_floats_only(molecules):
    batch = molecules.batch([0, 1]).to("cpu", torch.float64)
    assert batch.pos.dtype == batch.edge_vec.dtype == batch.targets["size"].dtype == torch.float64
    assert batch.edge_src.dtype == batch.numbers.dtype == torch.int64
    assert batch.node_mask.dtype == torch.bool


def test_bond_and_full_graph_batches(molecules):
    bonds = molecules.batch([2, 3], graph="bonds")
    assert bonds.edge_attr.shape == (bonds.edge_src.shape[0], 4)
    assert bonds.edge_attr[:, 3].sum() == 12  # benzene's aromatic ring, both directions
    full = molecules.batch([0, 1], graph="full")
    assert full.edge_src.shape[0] == 3 * 2 + 5 * 4


def test_bonds_refused_for_periodic_structures(slabs):
    with pytest.raises(ValueError, match="periodic"):
        slabs.graph(0, "bonds")
