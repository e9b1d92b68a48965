"""Custom ops and modules: autograd (incl. create_graph), gradcheck, equivariance,
torch.compile, plan caching."""

from __future__ import annotations

import pytest
import torch
from e3nn import o3
from equibench.kernels import FusedConvolution, FusedTensorProduct, KernelUnavailable
from kernel_testing import (
    assert_close,
    conv_reference,
    mixed_descriptor,
    random_graph,
    random_inputs,
    reference,
)

from equibench.workloads import get_tp_workload

GRAPH = random_graph(6, 14, seed=7)


def test_gradcheck_tensor_product() -> None:
    tp = FusedTensorProduct(mixed_descriptor())
    x, y, w, _ = (t.requires_grad_(True) for t in random_inputs(tp.desc, rows=3))
    assert torch.autograd.gradcheck(tp, (x, y, w))
    assert torch.autograd.gradgradcheck(tp, (x, y, w))


def test_gradcheck_convolution() -> None:
    conv = FusedConvolution(mixed_descriptor())
    src, dst = GRAPH
    x, _, _, _ = random_inputs(conv.desc, rows=6)
    _, y, w, _ = random_inputs(conv.desc, rows=14, seed=1)
    args = tuple(t.requires_grad_(True) for t in (x, y, w))

    def f(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return conv(x, y, w, src, dst, 6)

    assert torch.autograd.gradcheck(f, args)
    assert torch.autograd.gradgradcheck(f, args)


def test_module_batch_shape() -> None:
    tp = FusedTensorProduct(mixed_descriptor())
    x, y, w, _ = random_inputs(tp.desc, rows=6)
    out = tp(x.reshape(2, 3, -1), y.reshape(2, 3, -1), w.reshape(2, 3, -1))
    assert out.shape == (2, 3, tp.desc.out_dim)
    assert_close(out.reshape(6, -1), reference(tp.desc)(x, y, w), torch.float64, "batched")


def test_force_style_double_backward_matches_e3nn() -> None:
    """energy = sum(conv(x, Y(r), R(|r|))); forces = -dE/dr with create_graph=True; a loss
    on the forces backpropagates into x and the radial weights (MACE training)."""
    desc = get_tp_workload("mace-large").scaled(1 / 16).descriptor
    conv = FusedConvolution(desc)
    src, dst = random_graph(8, 24, seed=3)
    gen = torch.Generator().manual_seed(0)
    pos = torch.randn(8, 3, generator=gen, dtype=torch.float64)
    x0 = torch.randn(8, desc.in1_dim, generator=gen, dtype=torch.float64)
    radial = torch.randn(1, desc.weight_numel, generator=gen, dtype=torch.float64)
    sh = o3.Irreps(desc.irreps_in2)

    def loss_and_grads(use_fused: bool) -> list[torch.Tensor]:
        p = pos.clone().requires_grad_(True)
        x = x0.clone().requires_grad_(True)
        r = radial.clone().requires_grad_(True)
        vec = p[dst] - p[src]
        y = o3.spherical_harmonics(sh, vec, normalize=True)
        w = torch.cos(vec.norm(dim=1, keepdim=True)) * r
        if use_fused:
            out = conv(x, y, w, src, dst, 8)
        else:
            out = conv_reference(desc, x, y, w, src, dst, 8)
        energy = (out**2).sum()
        (forces,) = torch.autograd.grad(-energy, p, create_graph=True)
        loss = (forces**2).sum()
        return [forces.detach(), *torch.autograd.grad(loss, (x, r))]

    for got, ref in zip(loss_and_grads(True), loss_and_grads(False), strict=True):
        assert_close(got, ref, torch.float64, "force training gradients")


def test_equivariance() -> None:
    """Rotated inputs (D_from_matrix) give rotated outputs, TP and convolution."""
    desc = mixed_descriptor()
    # e3nn builds Wigner D matrices in the default dtype: float64 for a 1e-10 comparison
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        rot = o3.rand_matrix()
        d1, d2, d3 = (o3.Irreps(s).D_from_matrix(rot) for s in
                      (desc.irreps_in1, desc.irreps_in2, desc.irreps_out))  # fmt: skip
    finally:
        torch.set_default_dtype(previous)
    x, y, w, _ = random_inputs(desc, rows=5)
    tp = FusedTensorProduct(desc)
    assert_close(tp(x @ d1.T, y @ d2.T, w), tp(x, y, w) @ d3.T, torch.float64, "TP")
    conv = FusedConvolution(desc)
    src, dst = GRAPH
    xn, _, _, _ = random_inputs(desc, rows=6)
    _, ye, we, _ = random_inputs(desc, rows=14, seed=1)
    rotated = conv(xn @ d1.T, ye @ d2.T, we, src, dst, 6)
    assert_close(rotated, conv(xn, ye, we, src, dst, 6) @ d3.T, torch.float64, "conv")


def test_plan_is_built_every_call_unless_reused(monkeypatch) -> None:
    from equibench.kernels import graph

    built = []
    real = graph.ConvPlan.build.__func__
    monkeypatch.setattr(graph.ConvPlan, "build",
                        classmethod(lambda cls, *a: built.append(1) or real(cls, *a)))
    src, dst = GRAPH
    desc = mixed_descriptor()
    xn, _, _, _ = random_inputs(desc, rows=6)
    _, ye, we, _ = random_inputs(desc, rows=14, seed=1)
    for reuse, builds in ((False, 3), (True, 1)):
        built.clear()
        conv = FusedConvolution(desc, reuse_plan=reuse)
        outs = [conv(xn, ye, we, src, dst, 6) for _ in range(3)]
        assert len(built) == builds
        assert all(torch.equal(o, outs[0]) for o in outs)


def test_plan_is_cached_and_rebuilt() -> None:
    conv = FusedConvolution(mixed_descriptor(), reuse_plan=True)
    src, dst = GRAPH
    first = conv.plan(src, dst, 6, 6)
    assert conv.plan(src.clone(), dst.clone(), 6, 6) is first  # same graph by value
    edited = src.clone()
    assert conv.plan(edited, dst, 6, 6) is first
    edited[0] = (edited[0] + 1) % 6  # in-place edit of the caller's edge list
    assert conv.plan(edited, dst, 6, 6) is not first
    other = conv.plan(dst, src, 6, 6)
    assert other is not first
    assert torch.equal(other.dst_ptr[1:] - other.dst_ptr[:-1], torch.bincount(src, minlength=6))


class _Block(torch.nn.Module):
    """A tiny interaction block: linear -> fused conv -> fused TP."""

    def __init__(self) -> None:
        super().__init__()
        desc = mixed_descriptor()
        self.lin = torch.nn.Linear(desc.in1_dim, desc.in1_dim, dtype=torch.float64)
        self.conv = FusedConvolution(desc)
        self.tp = FusedTensorProduct(desc)

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor,
        src: torch.Tensor, dst: torch.Tensor,
    ) -> torch.Tensor:  # fmt: skip
        h = self.conv(self.lin(x), y, w, src, dst, x.shape[0])
        return self.tp(x, y[: x.shape[0]], w[: x.shape[0]]).sum() + h.sum()


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile(backend: str) -> None:
    torch.manual_seed(0)
    block = _Block()
    src, dst = GRAPH
    x, _, _, _ = random_inputs(block.conv.desc, rows=6)
    _, y, w, _ = random_inputs(block.conv.desc, rows=14, seed=1)
    args = [t.clone().requires_grad_(True) for t in (x, y, w)]
    eager = block(*args, src, dst)
    eager_grads = torch.autograd.grad(eager, args)
    compiled = torch.compile(block, backend=backend)
    args = [t.clone().requires_grad_(True) for t in (x, y, w)]
    out = compiled(*args, src, dst)
    assert_close(out, eager, torch.float64, "compiled output")
    for got, ref in zip(torch.autograd.grad(out, args), eager_grads, strict=True):
        assert_close(got, ref, torch.float64, "compiled gradient")


def test_unknown_backend() -> None:
    tp = FusedTensorProduct(mixed_descriptor(), backend="nope")
    x, y, w, _ = random_inputs(tp.desc, rows=1)
    with pytest.raises(KernelUnavailable):
        tp(x, y, w)
