"""MACE's symmetric contraction (its product basis) on our generated kernels: the
function and the weights of mace-torch's ``SymmetricContraction``, described once
(:class:`kernels.symmetric_contraction.SymmetricContractionDescriptor`) and run by the
CPU C++ or Triton kernels generated from that description.

For each output irrep (components ``m``), mace-torch contracts node features
``x (b, c, i)`` (channels ``c``; ``i`` the components of the coupled irreps, 16 for
0e+1o+2e+3o) with generalized Clebsch-Gordan tensors ``U_nu (m, i_1 .. i_nu, k)`` and
per-element weights ``W_nu (e, k, c)``, for correlations ``nu = 1 .. N``::

    out[b, c, m] = sum_nu sum_{i_1..i_nu, k} U_nu[m, i_1..i_nu, k] W_nu[elem(b), k, c]
                   x[b, c, i_1] ... x[b, c, i_nu]

mace-torch evaluates it with dense einsums over all 16^nu index tuples, nearly all of them
zero in ``U``. The product of the ``x`` is symmetric in the ``i``, so each ``U_nu`` is
summed onto sorted index tuples and only its nonzero entries are kept (1,069 at correlation
3 for MACE's 128x0e+128x1o+128x2e outputs): one weight row (a kernel "path") per
``(output irrep, nu, k)``, its weights ``y @ W_nu[:, k, :]`` per node (one small matrix
product in PyTorch, so the weights' gradients flow through autograd), and the kernels do
the rest per channel. Their backward and double backward (forces in training) are
derived from the same description.
"""

from __future__ import annotations

import torch
from equibench.kernels.ops import register_sc_descriptor, sc_fwd
from equibench.kernels.symmetric_contraction import SCPath, SymmetricContractionDescriptor
from torch import Tensor


def _entries(U: Tensor, has_m: bool) -> dict[tuple[int, tuple[int, ...], int], float]:
    """The nonzero ``(m, sorted index tuple, k) -> coefficient`` of one ``U_nu``, summed in
    float64 over the orderings of each tuple."""
    dense = (U if has_m else U.unsqueeze(0)).to(torch.float64)
    found: dict[tuple[int, tuple[int, ...], int], float] = {}
    for index in torch.nonzero(dense).tolist():
        m, *ells, k = index
        key = (m, tuple(sorted(ells)), k)
        found[key] = found.get(key, 0.0) + float(dense[tuple(index)])
    return {key: c for key, c in found.items() if c != 0.0}


def _weight(contraction: torch.nn.Module, nu: int) -> Tensor:
    """mace-torch's ``W_nu (elements, k, c)`` of one output irrep's contraction."""
    if nu == contraction.correlation:
        return contraction.weights_max
    return contraction.weights[contraction.correlation - 1 - nu]


def describe(module: torch.nn.Module) -> SymmetricContractionDescriptor:
    """The description of a mace-torch ``SymmetricContraction``: one path per output irrep
    ``j``, correlation ``nu`` and weight row ``k``, in that order."""
    dims = [ir.dim for _, ir in module.irreps_out]
    paths = []
    for j, (contraction, dim) in enumerate(zip(module.contractions, dims, strict=True)):
        for nu in range(1, contraction.correlation + 1):
            entries = _entries(contraction.U_tensors(nu), dim > 1)
            for k in range(_weight(contraction, nu).shape[1]):
                paths.append(SCPath(nu, j, tuple(sorted(
                    (m, t, coef) for (m, t, kk), coef in entries.items() if kk == k))))
    return SymmetricContractionDescriptor(sum(ir.dim for _, ir in module.irreps_in),
                                          tuple(dims), tuple(paths))


class FusedSymmetricContraction(torch.nn.Module):
    """Drop-in for mace-torch's ``SymmetricContraction`` ``module`` that shares its weights
    (the same ``Parameter`` objects, under the same state-dict keys) and runs on kernel
    ``backend`` (``cpu`` or ``triton``): ``forward(x (b, c, i), y (b, elements))`` returns
    ``(b, c * dim)`` per output irrep, concatenated, as mace-torch's does."""

    def __init__(self, module: torch.nn.Module, backend: str) -> None:
        super().__init__()
        self.contractions = module.contractions  # their weights, shared
        self.irreps_in, self.irreps_out = module.irreps_in, module.irreps_out
        self.description = describe(module)
        self.key = register_sc_descriptor(self.description)
        self.backend = backend

    def _weights(self, y: Tensor) -> Tensor:
        """``(b, paths, c)``: each path's weights for each node's element, as one matrix
        product (an einsum per weight tensor ran as batched products, ~3x slower)."""
        weights = torch.cat([_weight(contraction, nu).flatten(1)
                             for contraction in self.contractions
                             for nu in range(1, contraction.correlation + 1)], dim=1)
        return (y @ weights).view(y.shape[0], self.description.num_paths, -1)

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        if torch.is_autocast_enabled(x.device.type):
            # Under autocast, in the weights' dtype (float32), as the other fused kernels.
            dtype = self.contractions[0].weights_max.dtype
            with torch.autocast(x.device.type, enabled=False):
                return self.forward(x.to(dtype), y.to(dtype))
        b = x.shape[0]
        out = sc_fwd(x.transpose(1, 2).contiguous(), self._weights(y), self.key,
                     self.backend)  # (b, components, c)
        d = self.description
        return torch.cat([out[:, o:o + dim].transpose(1, 2).reshape(b, -1)
                          for o, dim in zip(d.out_offsets, d.out_dims, strict=True)], dim=-1)
