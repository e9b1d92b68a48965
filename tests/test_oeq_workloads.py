"""OpenEquivariance's problems, exactly: our table against their definitions, transcribed by
hand from ``openequivariance/openequivariance/benchmark/problems.py`` (PASSIONLab/
OpenEquivariance at 723182d043735850978b5215e1c84cca71aad7b0) and the roofline list of
their ``tests/benchmark.py``; and the stand-ins for their convolution graphs."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from e3nn import o3

from equibench.levels import conv
from equibench.workloads import OEQ_BENCHMARK, OEQ_COMMIT, OEQ_PROBLEMS, TP_WORKLOADS


def _uvu(*triples: tuple[int, int, int]) -> tuple:
    return tuple((a, b, c, "uvu", True) for a, b, c in triples)


def _uvw(*triples: tuple[int, int, int]) -> tuple:
    return tuple((a, b, c, "uvw", True) for a, b, c in triples)


# Every problem of their suite (issue #16, section 1), under their names.
OEQ_NAMES = [
    "mace-large", "mace-medium",
    "nequip-lips", "nequip-revmd17-aspirin", "nequip-revmd17-toluene",
    "nequip-revmd17-benzene", "nequip-water",
    "nequip-oam-l-first-layer", "nequip-oam-l-main-layers", "nequip-oam-l-last-layer",
    "nequix-mp-1-first_layer", "nequix-mp-1-main_layers", "nequix-mp-1-last_layer",
    "SevenNet_l3i5-first-layer", "SevenNet_l3i5-main-layers", "SevenNet_l3i5-last-layer",
    "DiffDock-L=1", "DiffDock-L=2", "tetris-poly-1", "tetris-poly-2", "e3tools_conv",
    "oeq-roofline-1e1e1e", "oeq-roofline-2e1e2e", "oeq-roofline-3e3e3e",
    "oeq-roofline-5e5e3e", "oeq-roofline-5e3e5e", "oeq-roofline-6e3e6e",
    "oeq-roofline-7e4e7e", "oeq-roofline-7e7e7e",
]

# (in1, in2, out, instructions), each worked out by hand from their builders:
# ChannelwiseTPP enumerates paths in1-major, in2-minor, ir_out by degree; sorts the segments
# (degree, odd before even, ties in path order) and the instructions by output segment.
EXPECTED = {
    # in1 0o 0e 1o 1e, in2 0e 1o, filter {0o, 0e, 1o, 1e}: paths (0,0)->0o (0,1)->1e
    # (1,0)->0e (1,1)->1o (2,0)->1o (2,1)->0e,1e (3,0)->1e (3,1)->0o,1o.
    "nequip-water": (
        "32x0o+32x0e+32x1o+32x1e", "1x0e+1x1o",
        "32x0o+32x0o+32x0e+32x0e+32x1o+32x1o+32x1o+32x1e+32x1e+32x1e",
        _uvu((0, 0, 0), (3, 1, 1), (1, 0, 2), (2, 1, 3), (1, 1, 4), (2, 0, 5), (3, 1, 6),
             (0, 1, 7), (2, 1, 8), (3, 0, 9)),
    ),
    "mace-large": (
        "128x0e+128x1o+128x2e", "1x0e+1x1o+1x2e+1x3o",
        "+".join(["128x0e"] * 3 + ["128x1o"] * 5 + ["128x2e"] * 5 + ["128x3o"] * 4),
        _uvu((0, 0, 0), (1, 1, 1), (2, 2, 2), (0, 1, 3), (1, 0, 4), (1, 2, 5), (2, 1, 6),
             (2, 3, 7), (0, 2, 8), (1, 1, 9), (1, 3, 10), (2, 0, 11), (2, 2, 12), (0, 3, 13),
             (1, 2, 14), (2, 1, 15), (2, 3, 16)),
    ),
    # FullyConnectedTPProblem: loops in1, in2, out; the outputs stay in their order.
    "tetris-poly-1": (
        "1x0e+1x1o+1x2e+1x3o", "1x0e+1x1o+1x2e+1x3o", "64x0e+24x1e+24x1o+16x2e+16x2o",
        _uvw((0, 0, 0), (0, 1, 2), (0, 2, 3),
             (1, 0, 2), (1, 1, 0), (1, 1, 1), (1, 1, 3), (1, 2, 2), (1, 2, 4), (1, 3, 3),
             (2, 0, 3), (2, 1, 2), (2, 1, 4), (2, 2, 0), (2, 2, 1), (2, 2, 3), (2, 3, 2),
             (2, 3, 4),
             (3, 1, 3), (3, 2, 2), (3, 2, 4), (3, 3, 0), (3, 3, 1), (3, 3, 3)),
    ),
    "DiffDock-L=1": (
        "10x1o+10x1e+48x0e+48x0o", "1x0e+1x1o", "10x1o+10x1e+48x0e+48x0o",
        _uvw((0, 0, 0), (0, 1, 1), (0, 1, 2), (1, 0, 1), (1, 1, 0), (1, 1, 3),
             (2, 0, 2), (2, 1, 0), (3, 0, 3), (3, 1, 1)),
    ),
    # Their roofline_configs entry [4]: SingleInstruction("128x5e", "1x5e", "128x3e", "uvu").
    "oeq-roofline-5e5e3e": ("128x5e", "1x5e", "128x3e", _uvu((0, 0, 0))),
    # NequIPTPP: sorted segments, instructions in path order. in1 0e; in2 0e 1o 2e 3o.
    "nequip-oam-l-first-layer": (
        "32x0e", "1x0e+1x1o+1x2e+1x3o", "32x0e+32x1o+32x2e+32x3o",
        _uvu((0, 0, 0), (0, 1, 1), (0, 2, 2), (0, 3, 3)),
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_problem_is_openequivariances(name: str):
    problem = TP_WORKLOADS[name]
    in1, in2, out, instructions = EXPECTED[name]
    assert o3.Irreps(problem.irreps_in1) == o3.Irreps(in1)
    assert o3.Irreps(problem.irreps_in2) == o3.Irreps(in2)
    assert o3.Irreps(problem.irreps_out) == o3.Irreps(out)
    assert problem.instructions == instructions


def test_revmd17_benzene_has_both_parities_sorted():
    """64x of every irrep up to 3 in both parities, x the spherical harmonics up to 3: 34 paths
    per parity, each output irrep counted by hand; the first outputs are the four 0o paths
    (0o x 0e, 1e x 1o, 2o x 2e, 3e x 3o) and the four 0e ones, in path order."""
    problem = TP_WORKLOADS["nequip-revmd17-benzene"]
    parities = "64x0o+64x0e+64x1o+64x1e+64x2o+64x2e+64x3o+64x3e"
    assert o3.Irreps(problem.irreps_in1) == o3.Irreps(parities)
    counts = {"0": 4, "1": 9, "2": 11, "3": 10}
    out = "+".join(f"64x{deg}{p}" for deg in "0123" for p in "oe" for _ in range(counts[deg]))
    assert o3.Irreps(problem.irreps_out) == o3.Irreps(out)
    assert len(problem.instructions) == 68 and problem.weight_numel == 68 * 64
    assert problem.instructions[:8] == _uvu((0, 0, 0), (3, 1, 1), (4, 2, 2), (7, 3, 3),
                                            (1, 0, 4), (2, 1, 5), (5, 2, 6), (6, 3, 7))


def test_nequip_interaction_keeps_path_order():
    """NequIP-OAM's main layer and Nequix's: the same segments and paths; NequIP leaves the
    instructions in path order, ChannelwiseTPP orders them by output segment."""
    nequip, nequix = (TP_WORKLOADS[n] for n in ("nequip-oam-l-main-layers",
                                                "nequix-mp-1-main_layers"))
    assert nequip.irreps_out == nequix.irreps_out
    assert sorted(nequip.instructions, key=lambda ins: ins[2]) == list(nequix.instructions)
    assert [ins[:2] for ins in nequip.instructions] == sorted(ins[:2] for ins in
                                                              nequip.instructions)
    assert len(nequip.instructions) == 23  # their filter string lists these 23 segments


def test_every_problem_of_their_suite_is_in_the_table_with_its_source():
    assert OEQ_COMMIT in OEQ_PROBLEMS
    for name in OEQ_NAMES:
        source = TP_WORKLOADS[name].source
        assert OEQ_PROBLEMS in source or OEQ_BENCHMARK in source, name
    assert all(p.source for p in TP_WORKLOADS.values())


def test_tetris_poly_says_its_weights_differ():
    for name in ("tetris-poly-1", "tetris-poly-2"):
        assert "shared weight" in TP_WORKLOADS[name].note


@pytest.mark.parametrize("name", list(conv.OEQ_GRAPHS))
def test_synthetic_graph_has_the_stated_counts(name: str, tmp_path, monkeypatch):
    monkeypatch.setenv("EQUIBENCH_DATA_DIR", str(tmp_path))  # no graph files there
    spec = conv.OEQ_GRAPHS[name]
    graph = conv.GRAPHS[name](batch=8, seed=1)
    assert graph.synthetic and graph.description.startswith("synthetic stand-in")
    assert "not theirs" in graph.description and "batch ignored" in graph.description
    assert graph.num_nodes == spec.nodes and graph.edge_src.shape[0] == spec.edges
    assert conv.GRAPHS[name](batch=4096, seed=2).edge_src.shape == graph.edge_src.shape


def test_synthetic_radius_graph_is_a_symmetric_radius_graph():
    g, density, cutoff = conv.synthetic_radius_graph(500, 6_000, 3.0)
    assert g.n_edges == 6_000 and abs(cutoff - 3.0) < 0.3
    dist = np.linalg.norm(g.edge_vec, axis=1)
    assert dist.max() == pytest.approx(cutoff) and dist.min() > 0.3  # no overlapping atoms
    pairs = set(zip(g.edge_src.tolist(), g.edge_dst.tolist(), map(tuple, g.cell_shift.tolist()),
                    strict=True))
    assert all((d, s, tuple(-np.asarray(c))) in pairs for s, d, c in pairs)
    assert density == pytest.approx(6_000 / 500 / (4 / 3 * np.pi * 27))


def test_their_graph_file_is_read_when_present(tmp_path, monkeypatch):
    monkeypatch.setenv("EQUIBENCH_DATA_DIR", str(tmp_path))
    folder = conv.oeq_graph_dir()
    folder.mkdir(parents=True)
    coords = np.random.default_rng(0).normal(size=(5, 3))
    row, col = np.array([0, 1, 2, 3]), np.array([1, 0, 3, 2])
    with open(folder / conv.OEQ_GRAPHS["1drf"].file, "wb") as f:
        pickle.dump({"coords": coords, "row": row, "col": col}, f)
    graph = conv.GRAPHS["1drf"](batch=8, seed=0)
    assert not graph.synthetic and graph.num_nodes == 5
    assert graph.edge_src.tolist() == col.tolist() and graph.edge_dst.tolist() == row.tolist()
    assert torch.allclose(graph.edge_vec, torch.from_numpy(coords[row] - coords[col]))
