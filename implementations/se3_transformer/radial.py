"""Radial profiles: per-edge weights ``R[e, c_out, c_in, J]`` of every degree pair.

A pair's MLP (NVIDIA's ``RadialProfile``) maps the invariant edge features (bond type
one-hot + distance) through ``Linear -> LayerNorm -> ReLU -> Linear -> LayerNorm -> ReLU``
to ``mid`` features, then through a bias-free output layer to ``c_out * c_in * F`` weights.

Canonical row order (the parameter layout): pairs in the convolution's order, each pair
``(c_out, c_in, F)`` row-major. Consumers ask for their own column order (an index into
the canonical rows, one per contraction group): with a shared profile that is a gather of
the output layer's rows, so the per-edge result comes out of one matmul already in place.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F  # noqa: N812


def hidden_mlp(edge_dim: int, mid: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(edge_dim, mid), nn.LayerNorm(mid), nn.ReLU(),
                         nn.Linear(mid, mid), nn.LayerNorm(mid), nn.ReLU())


def _output_layer(rows: int, mid: int) -> nn.Parameter:
    # nn.Linear's default initialization, as the NVIDIA recipe uses.
    bound = 1.0 / mid**0.5
    return nn.Parameter(torch.empty(rows, mid).uniform_(-bound, bound))


class RadialBank(nn.Module):
    """Radial weights of one convolution for every contraction group.

    ``sizes``: canonical rows per pair; ``group_pairs``: for each group the indices of
    its pairs; ``group_rows``: for each group the canonical (convolution-wide) row of each
    column it wants. ``shared``: one hidden MLP and one output layer for all pairs
    (``hidden``, ``final``) instead of one MLP per pair (``hidden[p]``, ``final[p]``).
    """

    def __init__(self, sizes: list[int], group_pairs: list[list[int]],
                 group_rows: list[Tensor], edge_dim: int, mid: int, shared: bool) -> None:
        super().__init__()
        self.shared = shared
        self.sizes = sizes
        self.offsets = [sum(sizes[:k]) for k in range(len(sizes))]
        self.group_pairs = group_pairs
        if shared:
            self.hidden = hidden_mlp(edge_dim, mid)
            self.final = _output_layer(sum(sizes), mid)
        else:
            self.hidden = nn.ModuleList(hidden_mlp(edge_dim, mid) for _ in sizes)
            self.final = nn.ParameterList(_output_layer(s, mid) for s in sizes)
        self.identity: list[bool] = []
        for g, (pairs, rows) in enumerate(zip(group_pairs, group_rows, strict=True)):
            if not shared:
                # Rows relative to the concatenated outputs of the group's own pairs.
                local = torch.cat([torch.arange(self.offsets[p], self.offsets[p] + sizes[p])
                                   for p in pairs])
                lookup = torch.full((sum(sizes),), -1, dtype=torch.long)
                lookup[local] = torch.arange(local.shape[0])
                rows = lookup[rows]
            self.identity.append(bool(torch.equal(rows, torch.arange(rows.shape[0]))))
            self.register_buffer(f"rows{g}", rows, persistent=False)

    def forward(self, edge_feats: Tensor) -> list[Tensor]:
        """(E, edge_dim) -> per group (E, columns of the group), in the group's order."""
        out = []
        if self.shared:
            h = self.hidden(edge_feats)
            for g, same in enumerate(self.identity):
                rows = getattr(self, f"rows{g}")
                w = self.final[: rows.shape[0]] if same else self.final[rows]
                out.append(F.linear(h, w))
            return out
        per_pair: dict[int, Tensor] = {}
        for g, pairs in enumerate(self.group_pairs):
            for p in pairs:
                if p not in per_pair:
                    per_pair[p] = F.linear(self.hidden[p](edge_feats), self.final[p])
            r = per_pair[pairs[0]] if len(pairs) == 1 else torch.cat([per_pair[p] for p in pairs],
                                                                     dim=1)
            out.append(r if self.identity[g] else r[:, getattr(self, f"rows{g}")])
        return out

    # Weight mapping between parameterizations (model.transfer_weights).
    def pair_params(self, p: int) -> tuple[nn.Sequential, Tensor]:
        """Hidden MLP and output rows (canonical, (rows, mid)) of pair ``p``."""
        if self.shared:
            return self.hidden, self.final[self.offsets[p] : self.offsets[p] + self.sizes[p]]
        return self.hidden[p], self.final[p]

    @torch.no_grad()
    def set_pair_params(self, p: int, hidden: nn.Sequential, rows: Tensor) -> None:
        mine, final = self.pair_params(p)
        mine.load_state_dict(hidden.state_dict())
        final.copy_(rows)
