"""CPU backend against e3nn float64: every kind of tensor-product workload (reduced
multiplicities), a mixed configuration, forward / backward / double backward, TP and fused
convolution."""

from __future__ import annotations

import pytest
import torch
from equibench.kernels.cpu_build import cpu_kernels
from equibench.kernels.cpu_codegen import generate_cpu_source
from equibench.kernels.descriptor import TPDescriptor
from equibench.kernels.graph import ConvPlan
from kernel_testing import (
    assert_close,
    conv_reference,
    mixed_descriptor,
    random_graph,
    random_inputs,
    reference,
    tp_reference_grads,
)

from equibench.workloads import get_tp_workload

# (workload, multiplicity scale): each construction of the table once or more: sorted
# channel-wise outputs (MACE, NequIP with both parities, SevenNet's even-only parities),
# NequIP's path-ordered instructions, outputs in path order (-1parity), fully connected with
# unsorted outputs, both rooflines by their largest triple; channel counts stay
# odd/even/non-multiples of the vector width.
WORKLOADS = [
    ("mace-large", 1 / 16),
    ("mace-medium", 1 / 16),
    ("nequip-water", 1 / 8),
    ("nequip-revmd17-benzene", 1 / 16),
    ("nequip-oam-l-main-layers", 1 / 16),
    ("SevenNet_l3i5-main-layers", 1 / 16),
    ("nequip-water-1parity", 1 / 8),
    ("nequip-benzene-1parity", 1 / 16),
    ("DiffDock-L=1", 0.2),
    ("DiffDock-L=2", 0.2),
    ("tetris-poly-2", 0.2),
    ("roofline-333", 5 / 128),
    ("oeq-roofline-7e7e7e", 5 / 128),
]


def _descriptor(name: str) -> TPDescriptor:
    if name == "mixed":
        return mixed_descriptor()
    return get_tp_workload(name).scaled(dict(WORKLOADS)[name]).descriptor


CASES = [name for name, _ in WORKLOADS] + ["mixed"]


@pytest.mark.parametrize("name", CASES)
def test_tp_forward_backward_double_backward(name: str, dtype: torch.dtype) -> None:
    desc = _descriptor(name)
    k = cpu_kernels(desc)
    x, y, w, g = random_inputs(desc, rows=7)
    ggx, ggy, ggw, _ = random_inputs(desc, rows=7, seed=1)
    out, grads, dd = tp_reference_grads(desc, x, y, w, g, ggx, ggy, ggw)
    c = [t.to(dtype) for t in (x, y, w, g, ggx, ggy, ggw)]
    assert_close(k.tp_forward(*c[:3]), out, dtype, "forward")
    for got, ref, what in zip(k.tp_backward(c[3], *c[:3]), grads, "xyw", strict=True):
        assert_close(got, ref, dtype, f"grad {what}")
    got_dd = k.tp_double_backward(c[3], *c[:3], *c[4:])
    for got, ref, what in zip(got_dd, dd, ["g", "x", "y", "w"], strict=True):
        assert_close(got, ref, dtype, f"double backward d{what}")


@pytest.mark.parametrize("name", CASES)
def test_conv_forward_backward_double_backward(name: str, dtype: torch.dtype) -> None:
    """Unsorted random graph; a quarter of the nodes have no incoming edge."""
    desc = _descriptor(name)
    k = cpu_kernels(desc)
    num_nodes, num_edges = 9, 31
    src, dst = random_graph(num_nodes, num_edges)
    plan = ConvPlan.build(src, dst, num_nodes, num_nodes)
    x, _, _, g = random_inputs(desc, rows=num_nodes)
    _, y, w, _ = random_inputs(desc, rows=num_edges, seed=2)
    ggx, _, _, _ = random_inputs(desc, rows=num_nodes, seed=3)
    _, ggy, ggw, _ = random_inputs(desc, rows=num_edges, seed=4)

    xr, yr, wr, gr = (t.clone().requires_grad_(True) for t in (x, y, w, g))
    ref = conv_reference(desc, xr, yr, wr, src, dst, num_nodes)
    grads = torch.autograd.grad(ref, (xr, yr, wr), gr, create_graph=True)
    inner = sum((a * b).sum() for a, b in zip(grads, (ggx, ggy, ggw), strict=True))
    dd = torch.autograd.grad(inner, (gr, xr, yr, wr))

    c = [t.to(dtype) for t in (x, y, w, g, ggx, ggy, ggw)]
    out = k.conv_forward(*c[:3], plan)
    assert_close(out, ref, dtype, "conv forward")
    assert out[(3 * num_nodes) // 4 :].abs().max() == 0  # nodes without incoming edges
    for got, r, what in zip(k.conv_backward(c[3], *c[:3], plan), grads, "xyw", strict=True):
        assert_close(got, r, dtype, f"conv grad {what}")
    got_dd = k.conv_double_backward(c[3], *c[:3], *c[4:], plan)
    for got, r, what in zip(got_dd, dd, ["g", "x", "y", "w"], strict=True):
        assert_close(got, r, dtype, f"conv double backward d{what}")


def test_double_backward_with_missing_cotangents() -> None:
    """Autograd passes None for outputs it does not need: they count as zero. (All three
    given take the one-pass kernel, which sums in another order: equal to rounding.)"""
    desc = mixed_descriptor()
    k = cpu_kernels(desc)
    x, y, w, g = random_inputs(desc, rows=5)
    ggx, ggy, ggw, _ = random_inputs(desc, rows=5, seed=1)
    full = k.tp_double_backward(g, x, y, w, None, ggy, None)
    ref = k.tp_double_backward(g, x, y, w, torch.zeros_like(ggx), ggy, torch.zeros_like(ggw))
    for a, b in zip(full, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_full_size_mace_large_forward() -> None:
    """The production size (128 channels, AVX-512 width multiples) once."""
    desc = get_tp_workload("mace-large").descriptor
    x, y, w, _ = random_inputs(desc, rows=3)
    assert_close(cpu_kernels(desc).tp_forward(x, y, w), reference(desc)(x, y, w), torch.float64,
                 "forward")  # fmt: skip


def test_full_size_mace_large_conv_in_parts() -> None:
    """At 128 channels the forward sums its output in several parts (accumulators that fit
    L1) and the backward runs its one-pass row: both against e3nn, with nodes of several
    edges so that a part's sum runs over more than one edge before the next part."""
    desc = get_tp_workload("mace-large").descriptor
    assert "constexpr int FWD_PARTS = 1;" not in generate_cpu_source(desc, "f64")
    k = cpu_kernels(desc)
    src, dst = random_graph(6, 20, seed=7)
    plan = ConvPlan.build(src, dst, 6, 6)
    x, _, _, g = random_inputs(desc, rows=6)
    _, y, w, _ = random_inputs(desc, rows=20, seed=8)
    xr, yr, wr = (t.clone().requires_grad_(True) for t in (x, y, w))
    ref = conv_reference(desc, xr, yr, wr, src, dst, 6)
    grads = torch.autograd.grad(ref, (xr, yr, wr), g)
    assert_close(k.conv_forward(x, y, w, plan), ref, torch.float64, "conv forward")
    for got, r, what in zip(k.conv_backward(g, x, y, w, plan), grads, "xyw", strict=True):
        assert_close(got, r, torch.float64, f"conv grad {what}")


def test_conv_is_deterministic_across_threads() -> None:
    desc = get_tp_workload("mace-large").scaled(1 / 16).descriptor
    k = cpu_kernels(desc)
    src, dst = random_graph(50, 400, seed=5)
    plan = ConvPlan.build(src, dst, 50, 50)
    x, _, _, g = (t.float() for t in random_inputs(desc, rows=50))
    _, y, w, _ = (t.float() for t in random_inputs(desc, rows=400))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = (k.conv_forward(x, y, w, plan), *k.conv_backward(g, x, y, w, plan))
        torch.set_num_threads(2)
        two = (k.conv_forward(x, y, w, plan), *k.conv_backward(g, x, y, w, plan))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, two, strict=True):
        assert torch.equal(a, b)


def test_empty_batch_and_graph() -> None:
    desc = mixed_descriptor()
    k = cpu_kernels(desc)
    x, y, w, _ = random_inputs(desc, rows=0)
    assert k.tp_forward(x, y, w).shape == (0, desc.out_dim)
    plan = ConvPlan.build(torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long), 4, 3)
    xs, _, _, _ = random_inputs(desc, rows=3)
    out = k.conv_forward(xs, y, w, plan)
    assert out.shape == (4, desc.out_dim) and out.abs().max() == 0


def test_rejects_bad_inputs() -> None:
    desc = mixed_descriptor()
    k = cpu_kernels(desc)
    x, y, w, _ = random_inputs(desc, rows=2)
    with pytest.raises(TypeError):
        k.tp_forward(x.half(), y.half(), w.half())
    with pytest.raises(ValueError):
        k.tp_forward(x.float(), y, w)
    with pytest.raises(ValueError):
        k.tp_forward(x[:, :-1].contiguous(), y, w)
    with pytest.raises(IndexError):
        ConvPlan.build(torch.tensor([0, 5]), torch.tensor([0, 1]), 3, 3)


def test_conv_workspace_is_a_torch_allocation_counted_in_live_tensor_bytes() -> None:
    """The channel-major copies of node tensors are workspace allocated through torch, so
    the live-tensor peak of a call (measure.peak_tensor_memory) includes them."""
    from equibench.kernels.cpu_build import conv_workspace

    from equibench.measure import peak_tensor_memory

    desc = _descriptor("mace-large")
    k = cpu_kernels(desc)
    num_nodes, num_edges = 400, 401
    src, dst = random_graph(num_nodes, num_edges)
    plan = ConvPlan.build(src, dst, num_nodes, num_nodes)
    x, _, _, _ = random_inputs(desc, rows=num_nodes)
    _, y, w, _ = random_inputs(desc, rows=num_edges, seed=2)
    x, y, w = (t.float() for t in (x, y, w))
    peak, method = peak_tensor_memory(lambda: k.conv_forward(x, y, w, plan), "cpu")
    output = num_nodes * desc.out_dim * 4
    workspace = conv_workspace("conv_fwd", desc, plan.num_nodes, plan.num_src) * 4
    assert peak >= output + workspace, (peak, output, workspace, method)
