"""The graph convolution that the ``conv`` level measures, written as its definition."""

from __future__ import annotations

from collections.abc import Callable

import torch


def gather_tp_scatter(
    tp: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    w: torch.Tensor,
    edge_src: torch.Tensor,
    edge_dst: torch.Tensor,
    num_nodes: int,
) -> torch.Tensor:
    """``out[i] = sum over edges e with dst(e) = i of tp(x[src(e)], y[e], w[e])``.

    Shapes: x (N, d1), y (E, d2), w (E, weight_numel), edge_src/edge_dst (E,) -> (N, d_out).
    Messages flow src -> dst. This materializes the (E, d_out) messages, which is exactly
    what fused kernels avoid.
    """
    messages = tp(x[edge_src], y, w)
    out = messages.new_zeros((num_nodes, messages.shape[1]))
    return out.index_add(0, edge_dst, messages)
