"""Equivariant edge bases of the TFN convolution (the NVIDIA formulation).

For an edge with unit direction r and a pair of degrees (l_in -> l_out), the kernel is
``sum_J R_J(|r|) B_J(r)`` over ``J = |l_in - l_out| .. l_in + l_out`` with

    B[e, m_in, J, m_out] = sqrt(2 l_out + 1) sum_mJ C(l_in, J, l_out)[m_in, mJ, m_out] Y_J(r_e)[mJ]

``C`` is e3nn's ``wigner_3j`` (float64) and ``Y_J`` e3nn's real spherical harmonics
(component normalization), so every backend (e3nn, cuEquivariance, fused kernels) can
compute the same product; ``sqrt(2 l_out + 1)`` is e3nn's ``component`` irrep
normalization, which keeps the coefficient of a path independent of how paths are grouped.

A *group* is an ordered tuple of degree pairs contracted together. Its fused basis is the
block matrix ``(E, D_in, F, D_out)`` (``D`` = summed ``2l+1`` of the group's distinct
degrees, ``F`` = summed ``2 min(l_in, l_out) + 1``), zero outside each pair's block:
NVIDIA's per-output-degree, per-input-degree and fully fused bases.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable

import torch
from e3nn import o3

Pair = tuple[int, int]  # (degree in, degree out)
Group = tuple[Pair, ...]


def dim(degree: int) -> int:
    return 2 * degree + 1


def n_freq(pair: Pair) -> int:
    """Number of J values (radial functions) of a degree pair."""
    return dim(min(pair))


def j_values(pair: Pair) -> range:
    d_in, d_out = pair
    return range(abs(d_in - d_out), d_in + d_out + 1)


@functools.cache
def coefficient(d_in: int, j: int, d_out: int) -> torch.Tensor:
    """(2 d_in + 1, 2 J + 1, 2 d_out + 1) float64: ``sqrt(2 d_out + 1) * wigner_3j``."""
    return o3.wigner_3j(d_in, j, d_out, dtype=torch.float64) * math.sqrt(dim(d_out))


def spherical_harmonics(edge_vec: torch.Tensor, max_j: int) -> torch.Tensor:
    """(E, 3) -> (E, (max_j + 1)^2): Y_0 .. Y_max_j of the edge directions."""
    return o3.spherical_harmonics(list(range(max_j + 1)), edge_vec, normalize=True,
                                  normalization="component")


def pair_basis(sh: torch.Tensor, pair: Pair) -> torch.Tensor:
    """(E, (max_j+1)^2) spherical harmonics -> (E, 2 d_in + 1, F, 2 d_out + 1)."""
    d_in, d_out = pair
    blocks = []
    for j in j_values(pair):
        c = coefficient(d_in, j, d_out).to(device=sh.device, dtype=sh.dtype)
        blocks.append(torch.einsum("imk,em->eik", c, sh[:, j * j : (j + 1) ** 2]))
    return torch.stack(blocks, dim=2)


def group_degrees(group: Group) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Distinct input and output degrees of a group, in order of first appearance."""
    ins = tuple(dict.fromkeys(p[0] for p in group))
    outs = tuple(dict.fromkeys(p[1] for p in group))
    return ins, outs


def fused_basis(pair_bases: dict[Pair, torch.Tensor], group: Group) -> torch.Tensor:
    """Zero-padded block basis (E, D_in, F, D_out) of a group (see module docstring)."""
    if len(group) == 1:
        return pair_bases[group[0]]
    ins, outs = group_degrees(group)
    off_in = dict(zip(ins, _offsets(dim(d) for d in ins), strict=True))
    off_out = dict(zip(outs, _offsets(dim(d) for d in outs), strict=True))
    first = pair_bases[group[0]]
    out = first.new_zeros(first.shape[0], sum(map(dim, ins)), sum(map(n_freq, group)),
                          sum(map(dim, outs)))
    f = 0
    for pair in group:
        d_in, d_out = pair
        out[:, off_in[d_in] : off_in[d_in] + dim(d_in), f : f + n_freq(pair),
            off_out[d_out] : off_out[d_out] + dim(d_out)] = pair_bases[pair]
        f += n_freq(pair)
    return out


def _offsets(sizes: Iterable[int]) -> list[int]:
    out, total = [], 0
    for s in sizes:
        out.append(total)
        total += s
    return out


def compute_bases(edge_vec: torch.Tensor, groups: Iterable[Group], max_j: int,
                  fuse: bool = True) -> dict[object, torch.Tensor]:
    """Everything the convolutions read: ``"sh"`` (E, (max_j+1)^2) and, for the ``basis``
    backend, one basis per group (keyed by the group). Shared by all layers.

    ``fuse=False`` keeps the pair bases instead (keyed by the pair), from which each
    contraction assembles its group's basis (:func:`group_basis`): low-memory mode, where
    that happens a chunk of edges at a time inside the checkpoint, so the zero-padded fused
    bases (degrees 0-2 fully fused: 1539 numbers an edge against the pairs' 259) are never
    held for the whole batch."""
    sh = spherical_harmonics(edge_vec, max_j)
    bases: dict[object, torch.Tensor] = {"sh": sh}
    groups = list(dict.fromkeys(groups))
    pairs = {p: pair_basis(sh, p) for g in groups for p in g}
    if not fuse:
        return bases | pairs
    for g in groups:
        bases[g] = fused_basis(pairs, g)
    return bases


def group_basis(bases: dict, group: Group) -> torch.Tensor:
    """The group's basis from :func:`compute_bases`'s output: kept, or assembled from the
    pair bases when they were kept instead (``fuse=False``)."""
    return bases[group] if group in bases else fused_basis(bases, group)
