"""The cuEquivariance adapter: its equivariance, its polynomial against cuEquivariance's own,
its convolution on isolated nodes; the OpenEquivariance adapter's CPU answer. Its outputs
against the float64 reference, at every level and direction: tests/test_conformance.py."""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from e3nn import o3
from equibench.implementations import cuequivariance as cue_adapter
from equibench.implementations import openequivariance as oeq_adapter
from settings_for_tests import ONE_REPEAT

from equibench.cases import Case
from equibench.convolution import gather_tp_scatter
from equibench.correctness import check_outputs
from equibench.levels.directions import directional_call
from equibench.precision import get_precision
from equibench.registry import get
from equibench.runner import run_case
from equibench.vocabulary import TP_CONV_DIRECTIONS as DIRECTIONS
from equibench.workloads import TP_WORKLOADS

SETTINGS = ONE_REPEAT
pytestmark = pytest.mark.usefixtures("one_thread")



def _random(problem, rows: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    d1, d2, _ = problem.dims
    return [torch.randn(rows, d, generator=g, dtype=torch.float64)
            for d in (d1, d2, problem.weight_numel)]


@pytest.fixture
def float64_default():
    # e3nn builds its rotation generators in the default dtype: float32 ones make D_from_matrix
    # only ~1e-7 accurate, which would hide the product's own float64 accuracy.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.mark.parametrize("workload", ["nequip-benzene-1parity", "DiffDock-L=2"])
def test_cue_tp_is_equivariant(workload: str, float64_default):
    """``f(x D1, y D2, w) = f(x, y, w) D_out`` to float64 rounding (cue's CG tables are exact)."""
    problem = TP_WORKLOADS[workload]
    fn = cue_adapter.CueProduct(problem, torch.float64, "cpu")
    x, y, w = _random(problem, 4)
    torch.manual_seed(1)
    rot = o3.rand_matrix()
    d1, d2, dout = (o3.Irreps(s).D_from_matrix(rot) for s in
                    (problem.irreps_in1, problem.irreps_in2, problem.irreps_out))
    with torch.no_grad():
        after, before = fn(x, y, w) @ dout.T, fn(x @ d1.T, y @ d2.T, w)
    assert (after - before).abs().max() <= 1e-12 * after.abs().max()


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_cue_conv_leaves_nodes_without_edges_zero(direction: str):
    """The indexed gather/scatter against the definition, on a graph with an isolated node."""
    problem = TP_WORKLOADS["nequip-toluene-1parity"]
    num_nodes, num_edges = 7, 20
    g = torch.Generator().manual_seed(2)
    # Node 6 receives no edge: its output row must be zero.
    edge_src = torch.randint(0, num_nodes, (num_edges,), generator=g)
    edge_dst = torch.randint(0, num_nodes - 1, (num_edges,), generator=g)
    x, _, _ = _random(problem, num_nodes, seed=3)
    _, y, w = _random(problem, num_edges, seed=4)
    grad_out = torch.randn(num_nodes, problem.dims[2], generator=g, dtype=torch.float64)
    probes = [torch.randn_like(x), torch.randn_like(y)]

    def call(conv):
        fn = functools.partial(_bound, conv, edge_src, edge_dst, num_nodes)
        return directional_call(direction, fn, [x, y, w], ["x", "y", "w"], grad_out, probes)()

    out = call(get("cuequivariance").build_conv(problem, torch.float64, "cpu"))
    reference = functools.partial(gather_tp_scatter, problem.e3nn_module(torch.float64))
    gate = check_outputs(out, call(reference), get_precision("float64").tolerance)
    assert gate.passed, gate.message
    if direction == "forward":
        assert not out["out"][num_nodes - 1].any()


def _bound(conv, edge_src, edge_dst, num_nodes, x, y, w):
    return conv(x, y, w, edge_src, edge_dst, num_nodes)


@pytest.mark.parametrize("workload", ["mace-large", "nequip-water", "DiffDock-L=2"])
def test_cue_polynomial_is_cues_own_up_to_order(workload: str):
    """Same paths and nonzero Clebsch-Gordan entries as cuEquivariance's own descriptor."""
    import cuequivariance as cue

    problem = TP_WORKLOADS[workload]
    irreps = [cue.Irreps("O3", s)
              for s in (problem.irreps_in1, problem.irreps_in2, problem.irreps_out)]
    own = (cue.descriptors.channelwise_tensor_product if problem.mode == "uvu"
           else cue.descriptors.fully_connected_tensor_product)(*irreps).polynomial
    ours = cue_adapter.polynomial(problem)
    [(_, ours_stp)], [(_, own_stp)] = (p.flatten_coefficient_modes().squeeze_modes().operations
                                       for p in (ours, own))
    assert ours_stp.subscripts == own_stp.subscripts
    assert ours_stp.num_paths == own_stp.num_paths
    assert [o.size for o in ours.operands] == [o.size for o in own.operands]
    expected = "uniform_1d" if problem.mode == "uvu" else "fused_tp"
    assert cue_adapter.cuda_method(ours) == expected


def test_cue_runs_naive_on_cpu_without_warnings():
    problem = TP_WORKLOADS["nequip-water"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn = get("cuequivariance").build_tp(problem, torch.float32, "cpu")
        fn(*(t.float() for t in _random(problem, 2)))
    assert fn.method == "naive"


@pytest.mark.parametrize("level", ["tp", "conv"])
def test_oeq_is_unavailable_on_cpu(level: str):
    workload = {"tp": "nequip-water", "conv": "nequip-water@carbon"}[level]
    row = run_case(Case(level, workload, "openequivariance", "default", "forward", "float32", 8,
                        "cpu"), SETTINGS)
    assert row["status"] == "unavailable"
    assert row["reason"] == oeq_adapter.NO_CPU


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the answer without a GPU")
def test_oeq_reports_its_import_failure_on_cuda():
    reason = get("openequivariance").available("cuda")
    assert reason is not None and reason.startswith("openequivariance does not import")
