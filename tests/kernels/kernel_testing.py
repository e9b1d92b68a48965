"""Shared helpers for the kernel tests: e3nn float64 references and tolerances.

Tolerances (relative to ``max |reference|`` of each compared tensor): float64 1e-10,
float32 1e-4.
"""

from __future__ import annotations

import functools

import torch
from equibench.kernels.descriptor import TPDescriptor

TOL = {torch.float64: 1e-10, torch.float32: 1e-4}

# Mixed multiplicities, both parities, uvu with mul2 > 1, uvw, an unweighted path and an
# output block no path writes.
MIXED = (
    "3x0e+2x1o+2x2e+2x0o",
    "2x0e+1x1o+2x1e",
    "3x0e+2x1o+2x1e+3x1o+2x2o+1x3e",
    [
        (0, 0, 0, "uvu", True),
        (1, 1, 0, "uvw", True),
        (1, 2, 1, "uvu", True),
        (0, 1, 3, "uvw", True),
        (2, 1, 1, "uvu", False),
        (1, 0, 1, "uvu", True),
        (3, 1, 2, "uvu", True),
        (2, 1, 4, "uvu", True),
    ],
)


@functools.cache
def mixed_descriptor() -> TPDescriptor:
    return TPDescriptor.from_e3nn(*MIXED)


@functools.cache
def reference(desc: TPDescriptor) -> torch.nn.Module:
    """e3nn's TensorProduct for ``desc`` in float64.

    Built with float64 as default dtype: e3nn computes its Clebsch-Gordan buffers in the
    default dtype, and a float32 module cast to float64 is only float32-accurate.
    """
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return desc.to_e3nn()
    finally:
        torch.set_default_dtype(previous)


def rel_err(got: torch.Tensor, ref: torch.Tensor) -> float:
    """``max |got - ref| / max |ref|`` computed in float64."""
    scale = ref.detach().abs().max().clamp_min(1e-300)
    return float((got.detach().double() - ref.detach()).abs().max() / scale)


def assert_close(got: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str) -> None:
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    err = rel_err(got, ref)
    assert err < TOL[dtype], f"{what}: relative error {err:.2e} >= {TOL[dtype]:.0e}"


def random_inputs(desc: TPDescriptor, rows: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """float64 ``x (rows, in1)``, ``y (rows, in2)``, ``w (rows, W)``, ``g (rows, out)``."""
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float64)

    return (
        rnd(rows, desc.in1_dim),
        rnd(rows, desc.in2_dim),
        rnd(rows, desc.weight_numel),
        rnd(rows, desc.out_dim),
    )


Tensors = tuple[torch.Tensor, ...]


def tp_reference_grads(
    desc: TPDescriptor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, g: torch.Tensor,
    ggx: torch.Tensor, ggy: torch.Tensor, ggw: torch.Tensor,
) -> tuple[torch.Tensor, Tensors, Tensors]:  # fmt: skip
    """e3nn float64 forward, backward ``(gx, gy, gw)`` and double backward
    ``(dg, dx, dy, dw)`` of the plain tensor product."""
    tp = reference(desc)
    x, y, w, g = (t.detach().clone().requires_grad_(True) for t in (x, y, w, g))
    out = tp(x, y, w)
    grads = torch.autograd.grad(out, (x, y, w), g, create_graph=True)
    inner = sum((a * b).sum() for a, b in zip(grads, (ggx, ggy, ggw), strict=True))
    dd = torch.autograd.grad(inner, (g, x, y, w))
    return out.detach(), tuple(t.detach() for t in grads), dd


def conv_reference(
    desc: TPDescriptor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor,
    src: torch.Tensor, dst: torch.Tensor, num_nodes: int,
) -> torch.Tensor:  # fmt: skip
    """``zeros(num_nodes, out).index_add_(0, dst, tp(x[src], y, w))`` with e3nn."""
    out = torch.zeros(num_nodes, desc.out_dim, dtype=x.dtype)
    return out.index_add(0, dst, reference(desc)(x[src], y, w))


def random_graph(num_nodes: int, num_edges: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Unsorted random edges; the last quarter of the nodes receive no edges."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    dst = torch.randint(0, max(1, (3 * num_nodes) // 4), (num_edges,), generator=gen)
    return src, dst
