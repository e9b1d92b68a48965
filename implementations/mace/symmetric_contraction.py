"""MACE's symmetric contraction (its product basis) from the nonzero entries of its U
tensors: the function and the weights of mace-torch's ``SymmetricContraction``, computed
sparsely.

For each output irrep (components ``m``), mace-torch contracts node features
``x (b, c, i)`` (channels ``c``; ``i`` the components of the coupled irreps, 16 for
0e+1o+2e+3o) with generalized Clebsch-Gordan tensors ``U_nu (m, i_1 .. i_nu, k)`` and
per-element weights ``W_nu (e, k, c)``, for correlations ``nu = 1 .. N``::

    out[b, c, m] = sum_nu sum_{i_1..i_nu, k} U_nu[m, i_1..i_nu, k] W_nu[elem(b), k, c]
                   x[b, c, i_1] ... x[b, c, i_nu]

mace-torch evaluates it with dense einsums over all 16^nu index tuples, nearly all of them
zero in ``U``. The product of the ``x`` is symmetric in the ``i``, so here each ``U_nu`` is
summed onto sorted index tuples and only its nonzero entries are kept (1,069 at correlation
3 for MACE's 128x0e+128x1o+128x2e outputs, against 16^3 x k). With the features laid out
as rows of ``b * c`` columns:

1. the monomials ``x_{i_1} .. x_{i_nu}`` of the tuples in use, degree by degree, each row a
   row of the degree below times a feature row;
2. ``Q_nu = C_nu @ P_nu``, ``C_nu`` the sparse matrix of coefficients from monomials to
   rows ``(output irrep, k, m)``;
3. each row of ``Q_nu`` times its weight row ``W_nu[k]`` (the node's element's), and a
   small 0/1 matrix sums the rows into the output components.

Columns are processed in blocks of :data:`BLOCK` so that the monomials stay in cache. All
in torch operations whose derivatives are torch operations (the sparse product's backward
is the transposed sparse product), so autograd gives the backward and the double backward
(forces in training) of the same function.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import Tensor

# Columns (node x channel) per block: 630 degree-3 monomials x 8 KiB in float32. Measured
# on the OpenEquivariance-size MACE (both product blocks, 290 atoms, forward and backward,
# 2-core VM): 256 columns 480 ms, 1024 178 ms, 2048 165 ms, 4096 183 ms, one block 321 ms.
BLOCK = 2048


class _SparseMatmul(torch.autograd.Function):
    """``matrix @ dense`` for a constant sparse ``matrix`` (``transposed`` its transpose),
    differentiable any number of times in ``dense``."""

    @staticmethod
    def forward(ctx, matrix: Tensor, transposed: Tensor, dense: Tensor) -> Tensor:
        ctx.matrices = (matrix, transposed)
        # Never under autocast (a backward may run in its region): matmul is on its list,
        # and sparse products have no bfloat16 path on CPUs.
        with torch.autocast(dense.device.type, enabled=False):
            return matrix @ dense.to(matrix.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        matrix, transposed = ctx.matrices
        return None, None, _SparseMatmul.apply(transposed, matrix, grad)


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


class SparseSymmetricContraction(torch.nn.Module):
    """Drop-in for mace-torch's ``SymmetricContraction`` ``module`` that shares its weights
    (the same ``Parameter`` objects, under the same state-dict keys): ``forward(x (b, c,
    i), y (b, elements))`` returns ``(b, c * dim)`` per output irrep, concatenated, as
    mace-torch's does."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.contractions = module.contractions  # their weights, shared
        self.irreps_in, self.irreps_out = module.irreps_in, module.irreps_out
        self.dims = [ir.dim for _, ir in module.irreps_out]
        self.offsets = [sum(self.dims[:j]) for j in range(len(self.dims))]
        correlation = max(c.correlation for c in module.contractions)
        found = {nu: {} for nu in range(1, correlation + 1)}
        for j, (contraction, dim) in enumerate(zip(module.contractions, self.dims,
                                                   strict=True)):
            for nu in range(1, contraction.correlation + 1):
                for (m, t, k), coef in _entries(contraction.U_tensors(nu), dim > 1).items():
                    found[nu][(j, k, m), t] = coef
        # Every tuple in use and its prefixes, numbered within their degree.
        tuples = {t for entries in found.values() for _, t in entries}
        tuples |= {t[:n] for t in tuples for n in range(1, len(t))}
        by_degree = {d: sorted(t for t in tuples if len(t) == d)
                     for d in range(1, correlation + 1)}
        position = {t: n for ts in by_degree.values() for n, t in enumerate(ts)}
        for degree, ts in by_degree.items():
            self.register_buffer(f"last_{degree}", torch.tensor([t[-1] for t in ts],
                                                                dtype=torch.long),
                                 persistent=False)
            if degree > 1:
                self.register_buffer(f"prefix_{degree}", torch.tensor(
                    [position[t[:-1]] for t in ts], dtype=torch.long), persistent=False)
        # Per correlation: the rows (output irrep j, path k, component m) it feeds, the
        # sparse coefficients from monomials to rows, each row's weight row (j, k) and
        # output row (j, m).
        self.correlations: list[int] = []
        self._coefficients: dict[int, tuple[Tensor, Tensor, Tensor]] = {}
        self._weight_paths: dict[int, list[tuple[int, int]]] = {}  # nu -> its (j, k) rows
        for nu, entries in found.items():
            if not entries:
                continue
            rows = sorted({row for row, _ in entries})
            number = {row: n for n, row in enumerate(rows)}
            index = torch.tensor([[number[row], position[t]] for row, t in entries]).T
            values = torch.tensor(list(entries.values()), dtype=torch.float64)
            self._coefficients[nu] = (index, values,
                                      torch.tensor([len(rows), len(by_degree[nu])]))
            weight_rows = {(j, k): n for n, (j, k) in enumerate(sorted({(j, k)
                                                                         for j, k, _ in rows}))}
            self.register_buffer(f"weight_row_{nu}", torch.tensor(
                [weight_rows[j, k] for j, k, _ in rows]), persistent=False)
            # (output components, rows): sums each row into its output component
            gather = torch.zeros(sum(self.dims), len(rows), dtype=torch.float64)
            for n, (j, _, m) in enumerate(rows):
                gather[self.offsets[j] + m, n] = 1.0
            self.register_buffer(f"sum_rows_{nu}", gather, persistent=False)
            self._weight_paths[nu] = sorted(weight_rows, key=weight_rows.get)
            self.correlations.append(nu)
        self._sparse: dict[tuple, tuple[Tensor, Tensor]] = {}

    def __deepcopy__(self, memo: dict) -> SparseSymmetricContraction:
        # Sparse CSR tensors have no storage to deep-copy: the copy starts with an empty
        # cache of matrices and builds its own on its first call.
        clone = self.__class__.__new__(self.__class__)
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            clone.__dict__[key] = {} if key == "_sparse" else copy.deepcopy(value, memo)
        return clone

    def _matrices(self, nu: int, dtype: torch.dtype, device: torch.device
                  ) -> tuple[Tensor, Tensor]:
        """``C_nu`` and its transpose, sparse CSR in ``dtype`` on ``device`` (cached)."""
        key = (nu, dtype, device)
        if key not in self._sparse:
            index, values, shape = self._coefficients[nu]
            coo = torch.sparse_coo_tensor(index, values, tuple(shape.tolist()),
                                          check_invariants=True).coalesce()
            coo = coo.to(device=device, dtype=dtype)
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
                self._sparse[key] = (coo.to_sparse_csr(),
                                     coo.t().coalesce().to_sparse_csr())
        return self._sparse[key]

    def _weights(self, nu: int, y: Tensor) -> Tensor:
        """``(rows, b * c)``: the weight of each row of correlation ``nu``, ``(j, k)``, for
        each node's element, per channel."""
        rows = []
        for j, k in self._weight_paths[nu]:
            contraction = self.contractions[j]
            weight = (contraction.weights_max if nu == contraction.correlation
                      else contraction.weights[contraction.correlation - 1 - nu])
            rows.append(y @ weight[:, k, :])  # (b, c)
        return torch.stack(rows).reshape(len(rows), -1).index_select(
            0, self.get_buffer(f"weight_row_{nu}"))

    def forward(self, x: Tensor, y: Tensor) -> Tensor:
        if torch.is_autocast_enabled(x.device.type):
            # Under autocast, in the weights' dtype (float32), as the fused kernels: sparse
            # products have no bfloat16 path on CPUs.
            dtype = self.contractions[0].weights_max.dtype
            with torch.autocast(x.device.type, enabled=False):
                return self.forward(x.to(dtype), y.to(dtype))
        b, c, n_ell = x.shape
        features = x.reshape(b * c, n_ell).t().contiguous()  # (i, b * c)
        # Split once: the backward of a split is one concatenation, that of a slice a
        # zero-filled tensor of the whole per slice.
        weights = {nu: self._weights(nu, y).split(BLOCK, dim=1) for nu in self.correlations}
        matrices = {nu: self._matrices(nu, x.dtype, x.device) for nu in self.correlations}
        blocks = []
        for n, block in enumerate(features.split(BLOCK, dim=1)):
            monomials = [block.index_select(0, self.get_buffer("last_1"))]
            for degree in range(2, max(self.correlations, default=0) + 1):
                monomials.append(
                    monomials[-1].index_select(0, self.get_buffer(f"prefix_{degree}"))
                    * block.index_select(0, self.get_buffer(f"last_{degree}")))
            parts = [self.get_buffer(f"sum_rows_{nu}").to(x.dtype)
                     @ (_SparseMatmul.apply(*matrices[nu], monomials[nu - 1]) * weights[nu][n])
                     for nu in self.correlations]
            blocks.append(torch.stack(parts).sum(0) if len(parts) > 1 else parts[0])
        out = torch.cat(blocks, dim=1)  # (sum of dims, b * c)
        return torch.cat([out[o:o + d].reshape(d, b, c).permute(1, 2, 0).reshape(b, c * d)
                          for o, d in zip(self.offsets, self.dims, strict=True)], dim=-1)
