"""PyTorch custom ops (``torch.ops.equibench.*``) over the kernel backends.

Ops take the descriptor as its hash string ``key`` (registered with
:func:`register_descriptor`) and a ``backend`` name, so they are plain
``torch.library.custom_op`` s: opaque to ``torch.compile`` (fake implementations give
the output shapes) and differentiable twice:

* ``tp_fwd`` / ``conv_fwd`` have autograd formulas calling ``tp_bwd`` / ``conv_bwd``;
* ``tp_bwd`` / ``conv_bwd`` have autograd formulas calling the double-backward ops, so
  ``torch.autograd.grad(..., create_graph=True)`` (forces in training) works;
* the double-backward ops are not differentiable (third derivatives are not needed).

MACE's symmetric contraction has the same three ops (``sc_fwd``, ``sc_bwd``,
``sc_dbwd``) over its own description (:mod:`.symmetric_contraction`).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor

from .descriptor import TPDescriptor
from .errors import KernelUnavailable
from .graph import ConvPlan
from .symmetric_contraction import SymmetricContractionDescriptor

_DESCRIPTORS: dict[str, TPDescriptor] = {}
_SC_DESCRIPTORS: dict[str, SymmetricContractionDescriptor] = {}
BACKENDS = ("cpu", "triton")


OptTensor = Tensor | None
Grads3 = tuple[Tensor, Tensor, Tensor]
Grads4 = tuple[Tensor, Tensor, Tensor, Tensor]


class Kernels(Protocol):
    """What a backend provides (see :class:`.cpu_build.CpuKernels` for the semantics)."""

    def tp_forward(self, x: Tensor, y: Tensor, w: Tensor) -> Tensor: ...
    def tp_backward(self, g: Tensor, x: Tensor, y: Tensor, w: Tensor) -> Grads3: ...
    def tp_double_backward(
        self, g: Tensor, x: Tensor, y: Tensor, w: Tensor,
        ggx: OptTensor, ggy: OptTensor, ggw: OptTensor,
    ) -> Grads4: ...  # fmt: skip
    def conv_forward(self, x: Tensor, y: Tensor, w: Tensor, plan: ConvPlan) -> Tensor: ...
    def conv_backward(
        self, g: Tensor, x: Tensor, y: Tensor, w: Tensor, plan: ConvPlan
    ) -> Grads3: ...
    def conv_double_backward(
        self, g: Tensor, x: Tensor, y: Tensor, w: Tensor,
        ggx: OptTensor, ggy: OptTensor, ggw: OptTensor, plan: ConvPlan,
    ) -> Grads4: ...  # fmt: skip


def register_descriptor(desc: TPDescriptor) -> str:
    """Make ``desc`` reachable from the ops; returns its key (the descriptor hash)."""
    _DESCRIPTORS.setdefault(desc.hash, desc)
    return desc.hash


def descriptor(key: str) -> TPDescriptor:
    try:
        return _DESCRIPTORS[key]
    except KeyError:
        raise KeyError(f"descriptor {key[:12]} is not registered") from None


def kernels(key: str, backend: str) -> Kernels:
    """The compiled kernels of a registered descriptor on ``backend``."""
    desc = descriptor(key)
    if backend == "cpu":
        from .cpu_build import cpu_kernels

        return cpu_kernels(desc)
    if backend == "triton":
        from .tp_triton import triton_kernels

        return triton_kernels(desc)
    raise KernelUnavailable(f"unknown backend {backend!r}; choose one of {BACKENDS}")


def _c(t: OptTensor) -> OptTensor:
    return None if t is None else t.contiguous()


def _plan(
    src: Tensor, dst: Tensor, dptr: Tensor, dperm: Tensor, sptr: Tensor, sperm: Tensor
) -> ConvPlan:
    return ConvPlan(src, dst, dptr, dperm, sptr, sperm)


# ----------------------------------------------------------------------------- TP ops
@torch.library.custom_op("equibench::tp_fwd", mutates_args=())
def tp_fwd(x: Tensor, y: Tensor, w: Tensor, key: str, backend: str) -> Tensor:
    """``(B, out_dim)`` tensor product of ``x (B, in1)``, ``y (B, in2)``, ``w (B, W)``."""
    return kernels(key, backend).tp_forward(x.contiguous(), y.contiguous(), w.contiguous())


@tp_fwd.register_fake
def _(x: Tensor, y: Tensor, w: Tensor, key: str, backend: str) -> Tensor:
    return x.new_empty(x.shape[0], descriptor(key).out_dim)


@torch.library.custom_op("equibench::tp_bwd", mutates_args=())
def tp_bwd(
    g: Tensor, x: Tensor, y: Tensor, w: Tensor, key: str, backend: str
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients ``(gx, gy, gw)`` of ``sum(g * tp_fwd(x, y, w))``."""
    return kernels(key, backend).tp_backward(*map(_c, (g, x, y, w)))


@tp_bwd.register_fake
def _(g: Tensor, x: Tensor, y: Tensor, w: Tensor, key: str, backend: str) -> Grads3:
    return torch.empty_like(x), torch.empty_like(y), torch.empty_like(w)


@torch.library.custom_op("equibench::tp_dbwd", mutates_args=())
def tp_dbwd(
    g: Tensor,
    x: Tensor,
    y: Tensor,
    w: Tensor,
    ggx: Tensor | None,
    ggy: Tensor | None,
    ggw: Tensor | None,
    key: str,
    backend: str,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients ``(dg, dx, dy, dw)`` of ``<ggx, gx> + <ggy, gy> + <ggw, gw>``."""
    return kernels(key, backend).tp_double_backward(*map(_c, (g, x, y, w, ggx, ggy, ggw)))


@tp_dbwd.register_fake
def _(
    g: Tensor, x: Tensor, y: Tensor, w: Tensor,
    ggx: OptTensor, ggy: OptTensor, ggw: OptTensor, key: str, backend: str,
) -> Grads4:  # fmt: skip
    return torch.empty_like(g), torch.empty_like(x), torch.empty_like(y), torch.empty_like(w)


def _tp_fwd_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    x, y, w, ctx.key, ctx.backend = inputs
    ctx.save_for_backward(x, y, w)


def _tp_fwd_backward(ctx: Any, grad: Tensor) -> tuple:
    x, y, w = ctx.saved_tensors
    gx, gy, gw = tp_bwd(grad, x, y, w, ctx.key, ctx.backend)
    return gx, gy, gw, None, None


def _tp_bwd_setup(ctx: Any, inputs: tuple, output: Grads3) -> None:
    g, x, y, w, ctx.key, ctx.backend = inputs
    ctx.save_for_backward(g, x, y, w)


def _tp_bwd_backward(ctx: Any, ggx: OptTensor, ggy: OptTensor, ggw: OptTensor) -> tuple:
    g, x, y, w = ctx.saved_tensors
    dg, dx, dy, dw = tp_dbwd(g, x, y, w, ggx, ggy, ggw, ctx.key, ctx.backend)
    return dg, dx, dy, dw, None, None


tp_fwd.register_autograd(_tp_fwd_backward, setup_context=_tp_fwd_setup)
tp_bwd.register_autograd(_tp_bwd_backward, setup_context=_tp_bwd_setup)


# --------------------------------------------------------------------------- conv ops
# Graph arguments, in order: edge_src, edge_dst, dst_ptr, dst_perm, src_ptr, src_perm
# (a ConvPlan, flattened because custom ops take tensors, not dataclasses).
@torch.library.custom_op("equibench::conv_fwd", mutates_args=())
def conv_fwd(
    x: Tensor,
    y: Tensor,
    w: Tensor,
    edge_src: Tensor,
    edge_dst: Tensor,
    dst_ptr: Tensor,
    dst_perm: Tensor,
    src_ptr: Tensor,
    src_perm: Tensor,
    key: str,
    backend: str,
) -> Tensor:
    """``(num_nodes, out_dim)``: ``out[n] = sum_{e: dst(e)=n} TP(x[src(e)], y[e], w[e])``."""
    plan = _plan(edge_src, edge_dst, dst_ptr, dst_perm, src_ptr, src_perm)
    return kernels(key, backend).conv_forward(*map(_c, (x, y, w)), plan)


@conv_fwd.register_fake
def _(
    x: Tensor, y: Tensor, w: Tensor, edge_src: Tensor, edge_dst: Tensor, dst_ptr: Tensor,
    dst_perm: Tensor, src_ptr: Tensor, src_perm: Tensor, key: str, backend: str,
) -> Tensor:  # fmt: skip
    return x.new_empty(dst_ptr.shape[0] - 1, descriptor(key).out_dim)


@torch.library.custom_op("equibench::conv_bwd", mutates_args=())
def conv_bwd(
    g: Tensor,
    x: Tensor,
    y: Tensor,
    w: Tensor,
    edge_src: Tensor,
    edge_dst: Tensor,
    dst_ptr: Tensor,
    dst_perm: Tensor,
    src_ptr: Tensor,
    src_perm: Tensor,
    key: str,
    backend: str,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients ``(gx, gy, gw)`` of ``sum(g * conv_fwd(x, y, w))``."""
    plan = _plan(edge_src, edge_dst, dst_ptr, dst_perm, src_ptr, src_perm)
    return kernels(key, backend).conv_backward(*map(_c, (g, x, y, w)), plan)


@conv_bwd.register_fake
def _(
    g: Tensor, x: Tensor, y: Tensor, w: Tensor, edge_src: Tensor, edge_dst: Tensor,
    dst_ptr: Tensor, dst_perm: Tensor, src_ptr: Tensor, src_perm: Tensor, key: str, backend: str,
) -> Grads3:  # fmt: skip
    return torch.empty_like(x), torch.empty_like(y), torch.empty_like(w)


@torch.library.custom_op("equibench::conv_dbwd", mutates_args=())
def conv_dbwd(
    g: Tensor,
    x: Tensor,
    y: Tensor,
    w: Tensor,
    ggx: Tensor | None,
    ggy: Tensor | None,
    ggw: Tensor | None,
    edge_src: Tensor,
    edge_dst: Tensor,
    dst_ptr: Tensor,
    dst_perm: Tensor,
    src_ptr: Tensor,
    src_perm: Tensor,
    key: str,
    backend: str,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients ``(dg, dx, dy, dw)`` of ``<ggx, gx> + <ggy, gy> + <ggw, gw>``."""
    plan = _plan(edge_src, edge_dst, dst_ptr, dst_perm, src_ptr, src_perm)
    k = kernels(key, backend)
    return k.conv_double_backward(*map(_c, (g, x, y, w, ggx, ggy, ggw)), plan)


@conv_dbwd.register_fake
def _(
    g: Tensor, x: Tensor, y: Tensor, w: Tensor, ggx: OptTensor, ggy: OptTensor, ggw: OptTensor,
    edge_src: Tensor, edge_dst: Tensor, dst_ptr: Tensor, dst_perm: Tensor, src_ptr: Tensor,
    src_perm: Tensor, key: str, backend: str,
) -> Grads4:  # fmt: skip
    return torch.empty_like(g), torch.empty_like(x), torch.empty_like(y), torch.empty_like(w)


def _conv_fwd_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    x, y, w, *graph, ctx.key, ctx.backend = inputs
    ctx.save_for_backward(x, y, w, *graph)


def _conv_fwd_backward(ctx: Any, grad: Tensor) -> tuple:
    x, y, w, *graph = ctx.saved_tensors
    gx, gy, gw = conv_bwd(grad, x, y, w, *graph, ctx.key, ctx.backend)
    return (gx, gy, gw) + (None,) * 8


def _conv_bwd_setup(ctx: Any, inputs: tuple, output: Grads3) -> None:
    g, x, y, w, *graph, ctx.key, ctx.backend = inputs
    ctx.save_for_backward(g, x, y, w, *graph)


def _conv_bwd_backward(ctx: Any, ggx: OptTensor, ggy: OptTensor, ggw: OptTensor) -> tuple:
    g, x, y, w, *graph = ctx.saved_tensors
    dg, dx, dy, dw = conv_dbwd(g, x, y, w, ggx, ggy, ggw, *graph, ctx.key, ctx.backend)
    return (dg, dx, dy, dw) + (None,) * 8


conv_fwd.register_autograd(_conv_fwd_backward, setup_context=_conv_fwd_setup)
conv_bwd.register_autograd(_conv_bwd_backward, setup_context=_conv_bwd_setup)


# ---------------------------------------------------------- symmetric contraction ops
class ScKernels(Protocol):
    """What a backend provides for a symmetric contraction (see :class:`.sc_cpu.ScCpuKernels`)."""

    def run(self, name: str, **given: OptTensor) -> dict[str, Tensor]: ...


def register_sc_descriptor(desc: SymmetricContractionDescriptor) -> str:
    """Make ``desc`` reachable from the ``sc_*`` ops; returns its key (its hash)."""
    _SC_DESCRIPTORS.setdefault(desc.hash, desc)
    return desc.hash


def sc_descriptor(key: str) -> SymmetricContractionDescriptor:
    try:
        return _SC_DESCRIPTORS[key]
    except KeyError:
        raise KeyError(f"symmetric contraction {key[:12]} is not registered") from None


def sc_kernels(key: str, backend: str, channels: int) -> ScKernels:
    """The compiled symmetric-contraction kernels of a registered description for
    ``channels`` channels."""
    desc = sc_descriptor(key)
    if backend == "cpu":
        from .sc_cpu import sc_cpu_kernels

        return sc_cpu_kernels(desc, channels)
    if backend == "triton":
        from .sc_triton import sc_triton_kernels

        return sc_triton_kernels(desc)
    raise KernelUnavailable(f"unknown backend {backend!r}; choose one of {BACKENDS}")


def _rows(t: Tensor, rows: int) -> Tensor:
    return t.new_empty(t.shape[0], rows, t.shape[2])


@torch.library.custom_op("equibench::sc_fwd", mutates_args=())
def sc_fwd(x: Tensor, w: Tensor, key: str, backend: str) -> Tensor:
    """``(n, o, c)`` symmetric contraction of features ``x (n, i, c)`` with per-node
    weights ``w (n, p, c)``."""
    return sc_kernels(key, backend, x.shape[2]).run("sc_fwd", x=x, w=w)["out"]


@sc_fwd.register_fake
def _(x: Tensor, w: Tensor, key: str, backend: str) -> Tensor:
    return _rows(x, sc_descriptor(key).out_dim)


@torch.library.custom_op("equibench::sc_bwd", mutates_args=())
def sc_bwd(g: Tensor, x: Tensor, w: Tensor, key: str, backend: str) -> tuple[Tensor, Tensor]:
    """Gradients ``(gx, gw)`` of ``sum(g * sc_fwd(x, w))``."""
    out = sc_kernels(key, backend, x.shape[2]).run("sc_bwd", g=g, x=x, w=w)
    return out["gx"], out["gw"]


@sc_bwd.register_fake
def _(g: Tensor, x: Tensor, w: Tensor, key: str, backend: str) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(w)


@torch.library.custom_op("equibench::sc_dbwd", mutates_args=())
def sc_dbwd(
    g: Tensor, x: Tensor, w: Tensor, ggx: Tensor | None, ggw: Tensor | None, key: str,
    backend: str,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """Gradients ``(dg, dx, dw)`` of ``<ggx, gx> + <ggw, gw>``."""
    out = sc_kernels(key, backend, x.shape[2]).run("sc_dbwd", g=g, x=x, w=w, ggx=ggx, ggw=ggw)
    return out["dg"], out["dx"], out["dw"]


@sc_dbwd.register_fake
def _(
    g: Tensor, x: Tensor, w: Tensor, ggx: OptTensor, ggw: OptTensor, key: str, backend: str,
) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    return torch.empty_like(g), torch.empty_like(x), torch.empty_like(w)


def _sc_fwd_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    x, w, ctx.key, ctx.backend = inputs
    ctx.save_for_backward(x, w)


def _sc_fwd_backward(ctx: Any, grad: Tensor) -> tuple:
    x, w = ctx.saved_tensors
    gx, gw = sc_bwd(grad.contiguous(), x, w, ctx.key, ctx.backend)
    return gx, gw, None, None


def _sc_bwd_setup(ctx: Any, inputs: tuple, output: tuple[Tensor, Tensor]) -> None:
    g, x, w, ctx.key, ctx.backend = inputs
    ctx.save_for_backward(g, x, w)


def _sc_bwd_backward(ctx: Any, ggx: OptTensor, ggw: OptTensor) -> tuple:
    g, x, w = ctx.saved_tensors
    dg, dx, dw = sc_dbwd(g, x, w, _c(ggx), _c(ggw), ctx.key, ctx.backend)
    return dg, dx, dw, None, None


sc_fwd.register_autograd(_sc_fwd_backward, setup_context=_sc_fwd_setup)
sc_bwd.register_autograd(_sc_bwd_backward, setup_context=_sc_bwd_setup)


# Under torch.autocast every op runs in float32, its inputs cast (as autocast does for the
# ops on its float32 list): the CPU kernels have no bfloat16 or float16 path, and a model's
# inputs come mixed there (a linear layer's lower-precision output beside float32 edge
# features). A model's rows say so (``extra.autocast``).
AUTOCAST = "fused kernels in float32 (inputs cast to float32 under autocast)"
for _op in (tp_fwd, tp_bwd, tp_dbwd, conv_fwd, conv_bwd, conv_dbwd, sc_fwd, sc_bwd,
            sc_dbwd):
    for _device in ("cpu", "cuda"):
        torch.library.register_autocast(_op, _device, torch.float32)
