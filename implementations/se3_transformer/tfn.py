"""The TFN convolution of the SE(3)-Transformer and its tensor-product backends.

For each edge ``e = (src -> dst)`` and output degree ``l_out``:

    out[e, o, :] = sum_{l_in, i, J} R[e, o, i, J] (B_{l_in, l_out}[e] contracted with x[src, i, :])

(``basis.py`` defines B, ``radial.py`` R). Degree pairs are contracted in *groups*
(``Switches.fuse_level``): one per pair, one per output (or input) degree, or one for
all. Each group is computed by a backend (the case's ``implementation``):

- ``basis``: NVIDIA's formulation, ``R @ (x @ B)`` with batched matmuls over
  precomputed bases (or, with the ``materialize_kernels`` habit, ``K = sum_J R B`` per
  edge then ``K @ x``);
- ``e3nn``: ``o3.TensorProduct`` (``uvw`` paths ``(l_in, J, l_out)``, per-edge weights)
  of the node features with the spherical harmonics;
- ``cuequivariance``: the same product as a ``cue`` segmented polynomial (``naive`` on
  CPU);
- ``fused``: the same product through ``equibench.kernels.FusedTensorProduct``.

Features are dicts ``degree -> (N or E, channels, 2 degree + 1)``. Irreps are all
declared even (``"e"``): the model is SE(3)-, not O(3)-equivariant, and with even
parities e3nn allows every ``(l_in, J, l_out)`` triangle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from .basis import Group, Pair, dim, group_basis, group_degrees, j_values, n_freq
from .graph_ops import GraphOps
from .radial import RadialBank
from .switches import Switches

Fiber = dict[int, int]  # degree -> channels
Features = dict[int, Tensor]
BACKENDS = ("basis", "e3nn", "cuequivariance", "fused")
# Edges per checkpointed chunk in low-memory mode. Per-edge work is independent, so the
# chunks give the same messages; smaller chunks lower the peak little and cost time (QM9
# small model, optimized, batch 512, 19k edges, tcmalloc, two runs each, timed against
# nvidia-default in the same run: 4096 -> 48-56 MiB, 2048 -> 47-48 MiB and 12 % more time).
CHECKPOINT_EDGES = 4096


def checkpointing(switches: Switches) -> bool:
    """Whether the convolutions run under activation checkpointing now: low-memory mode,
    when autograd records (a training step; inference has nothing to keep)."""
    return switches.low_memory and torch.is_grad_enabled()


@dataclass
class EdgeInputs:
    """What every convolution of one batch reads. ``edge_feats`` (E, edge_dim) invariant
    edge features; ``bases`` from ``basis.compute_bases``; ``ops`` the graph operations."""

    edge_src: Tensor
    edge_dst: Tensor
    edge_feats: Tensor
    bases: dict
    ops: GraphOps


def make_groups(fiber_in: Fiber, fiber_out: Fiber, fuse_level: str) -> tuple[list[Group], str]:
    """Contraction groups and the fusion level actually used.

    full needs equal channels over all input and over all output degrees; partial fuses
    per output degree when input channels are equal, else per input degree when output
    channels are equal (NVIDIA's rules); otherwise one group per pair.
    """
    ins, outs = list(fiber_in), list(fiber_out)
    uniform_in, uniform_out = len(set(fiber_in.values())) == 1, len(set(fiber_out.values())) == 1
    if fuse_level == "full" and uniform_in and uniform_out:
        return [tuple((i, o) for o in outs for i in ins)], "full"
    if fuse_level in ("full", "partial") and uniform_in and len(ins) > 1:
        return [tuple((i, o) for i in ins) for o in outs], "partial-out"
    if fuse_level in ("full", "partial") and uniform_out and len(outs) > 1:
        return [tuple((i, o) for o in outs) for i in ins], "partial-in"
    return [((i, o),) for o in outs for i in ins], "none"


def _split(out: Tensor, degrees: tuple[int, ...], axis_sizes: list[int]) -> Features:
    if len(degrees) == 1:
        return {degrees[0]: out}
    return dict(zip(degrees, torch.split(out, axis_sizes, dim=-1), strict=True))


class BasisProduct(nn.Module):
    """NVIDIA's contraction on precomputed bases. Radial columns ``(c_out, c_in, F)``."""

    layout = "basis"

    def __init__(self, group: Group, fiber_in: Fiber, fiber_out: Fiber, materialize: bool):
        super().__init__()
        self.group, self.materialize = group, materialize
        self.ins, self.outs = group_degrees(group)
        self.c_in, self.c_out = fiber_in[self.ins[0]], fiber_out[self.outs[0]]
        self.freq = sum(n_freq(p) for p in group)

    def forward(self, x: Features, bases: dict, r: Tensor) -> Features:
        """``x[l] (E, c_in, 2l+1)``, ``r (E, c_out c_in F)`` -> ``{l_out: (E, c_out, 2l+1)}``."""
        xg = x[self.ins[0]] if len(self.ins) == 1 else torch.cat([x[d] for d in self.ins], -1)
        b = group_basis(bases, self.group)  # (E, D_in, F, D_out)
        e, d_in, f, d_out = b.shape
        if self.materialize:
            # The official baseline: the per-edge kernel (E, c_out, D_out, c_in, D_in) is built
            # as a broadcast product summed over J, then applied to the features.
            k = (r.view(e, self.c_out, 1, self.c_in, 1, f)
                 * b.permute(0, 3, 1, 2).reshape(e, 1, d_out, 1, d_in, f)).sum(-1)
            out = (k.view(e, self.c_out * d_out, self.c_in * d_in)
                   @ xg.reshape(e, self.c_in * d_in, 1)).view(e, self.c_out, d_out)
        else:
            tmp = (xg @ b.view(e, d_in, f * d_out)).view(e, self.c_in * f, d_out)
            out = r.view(e, self.c_out, self.c_in * f) @ tmp
        return _split(out, self.outs, [dim(d) for d in self.outs])

    def rows(self, offsets: dict[Pair, int]) -> Tensor:
        """Canonical radial row of each column, in this layout ``(o, i, pair, J)``."""
        idx = []
        for o in range(self.c_out):
            for i in range(self.c_in):
                for p in self.group:
                    base = offsets[p] + (o * self.c_in + i) * n_freq(p)
                    idx.extend(range(base, base + n_freq(p)))
        return torch.tensor(idx, dtype=torch.long)


def e3nn_product(group: Group, fiber_in: Fiber, fiber_out: Fiber):
    """The group as a float64 ``o3.TensorProduct`` (component irreps, no path normalization:
    path coefficient ``sqrt(2 l_out + 1) * wigner_3j``, as in ``basis.coefficient``)."""
    from e3nn import o3

    ins, outs = group_degrees(group)
    max_j = max(i + o for i, o in group)
    instructions = [(ins.index(i), j, outs.index(o), "uvw", True)
                    for i, o in group for j in j_values((i, o))]
    return o3.TensorProduct(
        o3.Irreps([(fiber_in[d], (d, 1)) for d in ins]),
        o3.Irreps([(1, (j, 1)) for j in range(max_j + 1)]),
        o3.Irreps([(fiber_out[d], (d, 1)) for d in outs]),
        instructions, irrep_normalization="component", path_normalization="none",
        shared_weights=False, internal_weights=False,
    ).to(torch.float64)


class IrrepsProduct(nn.Module):
    """Base of the e3nn-style backends: flat ``mul_ir`` operands, radial columns in e3nn's
    weight layout (per path ``(l_in, J, l_out)``: ``(c_in, 1, c_out)`` row-major)."""

    layout = "irreps"

    def __init__(self, group: Group, fiber_in: Fiber, fiber_out: Fiber) -> None:
        super().__init__()
        self.group = group
        self.ins, self.outs = group_degrees(group)
        self.fiber_in, self.fiber_out = fiber_in, fiber_out
        self.sh_dim = (max(i + o for i, o in group) + 1) ** 2

    def product(self, x: Tensor, y: Tensor, w: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, x: Features, bases: dict, r: Tensor) -> Features:
        e = r.shape[0]
        xf = torch.cat([x[d].reshape(e, -1) for d in self.ins], -1)
        out = self.product(xf, bases["sh"][:, : self.sh_dim], r)
        sizes = [self.fiber_out[d] * dim(d) for d in self.outs]
        return {d: o.reshape(e, self.fiber_out[d], dim(d))
                for d, o in zip(self.outs, torch.split(out, sizes, dim=-1), strict=True)}

    def rows(self, offsets: dict[Pair, int]) -> Tensor:
        idx = []
        for p in self.group:
            c_in, c_out, f = self.fiber_in[p[0]], self.fiber_out[p[1]], n_freq(p)
            for jj in range(f):
                for i in range(c_in):
                    idx.extend(offsets[p] + (o * c_in + i) * f + jj for o in range(c_out))
        return torch.tensor(idx, dtype=torch.long)


class E3nnProduct(IrrepsProduct):
    def __init__(self, group: Group, fiber_in: Fiber, fiber_out: Fiber) -> None:
        super().__init__(group, fiber_in, fiber_out)
        self.tp = e3nn_product(group, fiber_in, fiber_out)

    def product(self, x: Tensor, y: Tensor, w: Tensor) -> Tensor:
        return self.tp(x, y, w)


def cue_method(device: str) -> str:
    """cuEquivariance's method for the TFN contraction: its CUDA kernel where the ops load on
    a GPU, else the pure-PyTorch ``naive`` path."""
    from equibench.implementations.cuequivariance import has_cuda_ops

    return "fused_tp" if device.startswith("cuda") and has_cuda_ops() else "naive"


class CueProduct(IrrepsProduct):
    """cuEquivariance segmented polynomial ``uvw,ui,vj,wk+ijk``: operands in ``mul_ir``
    layout directly (segments ``(mul, 2l+1)``), so no layout transposes are needed."""

    def __init__(self, group: Group, fiber_in: Fiber, fiber_out: Fiber, device: str) -> None:
        super().__init__(group, fiber_in, fiber_out)
        import cuequivariance as cue
        import cuequivariance_torch as cuet

        from .basis import coefficient

        stp = cue.SegmentedTensorProduct.from_subscripts("uvw,ui,vj,wk+ijk")
        for d in self.ins:
            stp.add_segment(1, (fiber_in[d], dim(d)))
        for j in range(math.isqrt(self.sh_dim)):
            stp.add_segment(2, (1, dim(j)))
        for d in self.outs:
            stp.add_segment(3, (fiber_out[d], dim(d)))
        for i, o in group:
            for j in j_values((i, o)):
                stp.add_path(None, self.ins.index(i), j, self.outs.index(o),
                             c=coefficient(i, j, o).numpy())
        poly = cue.SegmentedPolynomial.eval_last_operand(stp)
        self.poly = cuet.SegmentedPolynomial(poly, method=cue_method(device))

    def product(self, x: Tensor, y: Tensor, w: Tensor) -> Tensor:
        [out] = self.poly([w, x, y])
        return out


class FusedProduct(IrrepsProduct):
    def __init__(self, group: Group, fiber_in: Fiber, fiber_out: Fiber, device: str) -> None:
        super().__init__(group, fiber_in, fiber_out)
        from equibench.kernels import FusedTensorProduct, TPDescriptor

        desc = TPDescriptor.from_tensor_product(e3nn_product(group, fiber_in, fiber_out))
        self.tp = FusedTensorProduct(desc, backend="triton" if device.startswith("cuda")
                                     else "cpu")

    def product(self, x: Tensor, y: Tensor, w: Tensor) -> Tensor:
        return self.tp(x, y, w)


def make_product(backend: str, group: Group, fiber_in: Fiber, fiber_out: Fiber,
                 switches: Switches, device: str) -> nn.Module:
    if backend == "basis":
        return BasisProduct(group, fiber_in, fiber_out, switches.materialize_kernels)
    if backend == "e3nn":
        return E3nnProduct(group, fiber_in, fiber_out)
    if backend == "cuequivariance":
        return CueProduct(group, fiber_in, fiber_out, device)
    if backend == "fused":
        return FusedProduct(group, fiber_in, fiber_out, device)
    raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")


class ConvSE3(nn.Module):
    """TFN convolution ``fiber_in -> fiber_out`` (NVIDIA's ``ConvSE3``).

    ``pool``: messages are summed (or, with ``mean_aggregation``, averaged) into the
    destination nodes, else per-edge outputs are returned. ``self_interaction``: each
    message also gets ``W_l @ x[dst]`` for the degrees present in both fibers.
    """

    def __init__(self, fiber_in: Fiber, fiber_out: Fiber, edge_dim: int, mid: int,
                 switches: Switches, backend: str, device: str = "cpu", pool: bool = False,
                 self_interaction: bool = False) -> None:
        super().__init__()
        self.fiber_in, self.fiber_out = fiber_in, fiber_out
        self.pool, self.switches = pool, switches
        self.pairs: list[Pair] = [(i, o) for o in fiber_out for i in fiber_in]
        self.groups, self.fuse_used = make_groups(fiber_in, fiber_out, switches.fuse_level)
        sizes = [fiber_out[o] * fiber_in[i] * n_freq((i, o)) for i, o in self.pairs]
        offsets = {p: sum(sizes[:k]) for k, p in enumerate(self.pairs)}
        self.products = nn.ModuleList(make_product(backend, g, fiber_in, fiber_out, switches,
                                                   device) for g in self.groups)
        self.radial = RadialBank(
            sizes, [[self.pairs.index(p) for p in g] for g in self.groups],
            [prod.rows(offsets) for prod in self.products], edge_dim, mid, switches.shared_radial)
        self.self_weights = nn.ParameterDict({
            str(d): nn.Parameter(torch.randn(c, fiber_in[d]) / math.sqrt(fiber_in[d]))
            for d, c in fiber_out.items() if self_interaction and d in fiber_in
        })

    def _edges(self, edge_feats: Tensor, bases: dict, src: Tensor, *x: Tensor) -> list[Tensor]:
        """Per-edge messages (before self-interaction), as a list for checkpointing."""
        x_src = {d: t[src] for d, t in zip(self.fiber_in, x, strict=True)}
        out: Features = {}
        for product, r in zip(self.products, self.radial(edge_feats), strict=True):
            for d, t in product(x_src, bases, r).items():
                out[d] = out[d] + t if d in out else t
        return [out[d] for d in self.fiber_out]

    def _checkpointed(self, edge_feats: Tensor, bases: dict, src: Tensor,
                      *x: Tensor) -> list[Tensor]:
        """``_edges`` under activation checkpointing, in chunks of ``CHECKPOINT_EDGES`` edges:
        only the inputs are kept, and backward recomputes one chunk's intermediates at a
        time, so its peak is a chunk's rather than the batch's (QM9 small model, 512
        molecules, optimized: 149 MiB peak unchunked, 48-56 MiB in chunks)."""
        parts = []
        for start in range(0, src.shape[0], CHECKPOINT_EDGES):
            edges = slice(start, start + CHECKPOINT_EDGES)
            parts.append(checkpoint(self._edges, edge_feats[edges],
                                    {k: v[edges] for k, v in bases.items()}, src[edges], *x,
                                    use_reentrant=False))
        return parts[0] if len(parts) == 1 else [torch.cat(p) for p in zip(*parts, strict=True)]

    def forward(self, x: Features, g: EdgeInputs) -> Features:
        args = (g.edge_feats, g.bases, g.edge_src, *(x[d] for d in self.fiber_in))
        if checkpointing(self.switches):
            messages = self._checkpointed(*args)
        else:
            messages = self._edges(*args)
        out = dict(zip(self.fiber_out, messages, strict=True))
        for d, w in self.self_weights.items():
            out[int(d)] = out[int(d)] + w @ x[int(d)][g.edge_dst]
        if not self.pool:
            return out
        pooled = {d: g.ops.sum_in(t) for d, t in out.items()}
        if self.switches.mean_aggregation:
            count = g.ops.in_degree(next(iter(pooled.values())).dtype).clamp(min=1)
            pooled = {d: t / count[:, None, None] for d, t in pooled.items()}
        return pooled
