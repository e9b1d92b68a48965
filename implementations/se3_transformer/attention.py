"""Equivariant layers around the convolution: linear maps, norm nonlinearity, attention."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .basis import dim
from .switches import Switches
from .tfn import ConvSE3, EdgeInputs, Features, Fiber


class LinearSE3(nn.Module):
    """Per degree ``W_l (c_out, c_in) @ x[l]``; degrees of ``fiber_out`` must be in ``fiber_in``."""

    def __init__(self, fiber_in: Fiber, fiber_out: Fiber) -> None:
        super().__init__()
        self.weights = nn.ParameterDict({
            str(d): nn.Parameter(torch.randn(c, fiber_in[d]) / math.sqrt(fiber_in[d]))
            for d, c in fiber_out.items()
        })

    def forward(self, x: Features) -> Features:
        return {int(d): w @ x[int(d)] for d, w in self.weights.items()}


class NormSE3(nn.Module):
    """Norm nonlinearity: each feature's norm goes through LayerNorm (over channels) and
    ReLU and rescales the feature; directions are kept."""

    # The smallest positive float16 subnormal (NVIDIA's clamp): keeps 1/norm finite.
    NORM_CLAMP = 2**-24

    def __init__(self, fiber: Fiber) -> None:
        super().__init__()
        self.norms = nn.ModuleDict({str(d): nn.LayerNorm(c) for d, c in fiber.items()})

    def forward(self, x: Features) -> Features:
        out = {}
        for d, layer_norm in self.norms.items():
            feat = x[int(d)]
            norm = feat.norm(dim=-1, keepdim=True).clamp(min=self.NORM_CLAMP)
            out[int(d)] = torch.relu(layer_norm(norm.squeeze(-1))).unsqueeze(-1) * feat / norm
        return out


def to_heads(x: Features, degrees: list[int], heads: int) -> Tensor:
    """``{l: (M, c, 2l+1)}`` -> (M, heads, sum_l c/heads (2l+1)): NVIDIA's head layout."""
    return torch.cat([x[d].reshape(x[d].shape[0], heads, -1) for d in degrees], dim=-1)


class AttentionBlockSE3(nn.Module):
    """Keys and values by TFN convolution of the source nodes, queries by a linear map of
    the destination, dot-product attention per head, softmax over incoming edges,
    attention-weighted sum of values, then ``project`` of [values, input] (NVIDIA's
    ``AttentionBlockSE3``). Value channels = ``fiber_out`` / ``channels_div``; keys and
    queries have the value channels of the degrees present in ``fiber_in``.
    """

    def __init__(self, fiber_in: Fiber, fiber_out: Fiber, edge_dim: int, mid: int, heads: int,
                 channels_div: int, switches: Switches, backend: str, device: str) -> None:
        super().__init__()
        self.heads = heads
        self.value_fiber = {d: c // channels_div for d, c in fiber_out.items()}
        self.key_fiber = {d: c for d, c in self.value_fiber.items() if d in fiber_in}
        self.fused_kv = switches.fuse_kv
        conv = dict(edge_dim=edge_dim, mid=mid, switches=switches, backend=backend,
                    device=device)
        if self.fused_kv:
            # Per degree: value channels first, then key channels.
            kv_fiber = {d: c + self.key_fiber.get(d, 0) for d, c in self.value_fiber.items()}
            self.kv = ConvSE3(fiber_in, kv_fiber, **conv)
        else:
            self.v = ConvSE3(fiber_in, self.value_fiber, **conv)
            self.k = ConvSE3(fiber_in, self.key_fiber, **conv)
        self.to_query = LinearSE3(fiber_in, self.key_fiber)
        cat_fiber = {d: c + fiber_in.get(d, 0) for d, c in self.value_fiber.items()}
        self.project = LinearSE3(cat_fiber, fiber_out)
        self.scale = 1.0 / math.sqrt(sum(c * dim(d) for d, c in self.key_fiber.items()))

    def forward(self, x: Features, g: EdgeInputs) -> Features:
        if self.fused_kv:
            kv = self.kv(x, g)
            value = {d: t[:, : self.value_fiber[d]] for d, t in kv.items()}
            key = {d: kv[d][:, self.value_fiber[d]:] for d in self.key_fiber}
        else:
            value, key = self.v(x, g), self.k(x, g)
        degrees = list(self.key_fiber)
        query = to_heads(self.to_query(x), degrees, self.heads)  # (N, H, K)
        k = to_heads(key, degrees, self.heads)  # (E, H, K)
        scores = (k * query[g.edge_dst]).sum(-1) * self.scale  # (E, H)
        weights = g.ops.softmax_in(scores)[..., None, None]  # (E, H, 1, 1)
        z = {}
        for d, v in value.items():
            e, c, m = v.shape
            weighted = weights * v.view(e, self.heads, c // self.heads, m)
            z[d] = g.ops.sum_in(weighted.view(e, c, m))
        cat = {d: torch.cat([z[d], x[d]], dim=1) if d in x else z[d] for d in z}
        return self.project(cat)
