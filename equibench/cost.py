"""FLOPs and minimum bytes of a tensor product, counted from its CG sparsity.

The project's one cost model (rows, the roofline and ``benchmarks/targets.py`` read it;
docs/measurement.md states its conventions). The method follows the OpenEquivariance paper
(Bharadwaj et al., arXiv 2501.13986): a ``uvu`` path costs ``3 x nnz(CG) x mul`` FLOPs
forward and ``9 x nnz x mul`` backward. A ``uvw`` path first forms ``mul1 x mul2``
products (``3 x nnz x mul1 x mul2``) and then contracts them with the weights
(``2 x mul1 x mul2 x mul_out x (2 l_out + 1)``); its backward counts three times that.
The count is that of the *timed call*: ``backward`` rows time forward + backward, and
``double_backward`` rows time forward + backward + the backward of the backward (counted as
two more backwards).

Bytes are the ideal minimum traffic: every tensor the call reads or writes, once.

That FLOP count is *nominal*: the papers' convention, what a roofline of other
implementations is drawn with. Our generated CPU kernels (``equibench.kernels.cpu_codegen``)
execute less: a ``uvu`` path contracts the second input with the CG coefficients once per
row (``M = alpha C . y``) and then does per channel only what is left.
:func:`executed_multiply_adds` counts the multiplications that code executes (each fused
with its add where there is one): 234 per channel and edge on ``mace-large`` forward,
against the nominal 645 FLOPs. A fraction of peak is taken from the executed count.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch
from e3nn import o3

from equibench.workloads import TPProblem


@cache
def _cg_nnz(l1: int, l2: int, l3: int) -> int:
    return int((o3.wigner_3j(l1, l2, l3, dtype=torch.float64).abs() > 1e-12).sum())


@dataclass(frozen=True)
class TPCost:
    forward_flops: float
    backward_flops: float

    def flops(self, direction: str) -> float:
        fwd, bwd = self.forward_flops, self.backward_flops
        return {
            "forward": fwd,
            "backward": fwd + bwd,
            "double_backward": fwd + 3 * bwd,
        }[direction]


def tp_cost(problem: TPProblem) -> TPCost:
    """FLOPs per single product (multiply by the batch)."""
    ir1, ir2, ir_out = (o3.Irreps(s) for s in (problem.irreps_in1, problem.irreps_in2,
                                               problem.irreps_out))
    fwd = bwd = 0.0
    for i1, i2, i_out, mode, _ in problem.instructions:
        (m1, a), (m2, b), (mo, c) = ir1[i1], ir2[i2], ir_out[i_out]
        nnz = _cg_nnz(a.l, b.l, c.l)
        if mode == "uvu":
            fwd += 3 * nnz * m1
            bwd += 9 * nnz * m1
        elif mode == "uvw":
            path = 3 * nnz * m1 * m2 + 2 * m1 * m2 * mo * c.dim
            fwd += path
            bwd += 3 * path
        else:
            raise ValueError(f"cost model has no rule for mode {mode!r}")
    return TPCost(fwd, bwd)


def executed_multiply_adds(problem: TPProblem, direction: str) -> int | None:
    """Multiply-adds one product executes in our generated CPU kernels (a multiplication
    with no add counts as one too: it takes the same arithmetic slot), for the timed call of
    ``forward`` or ``backward`` (forward + backward); None where not counted (double
    backward, ``uvw`` paths, whose code differs).

    Per path and channel ``v`` of the second input, with ``P`` the distinct ``(i, k)`` of the
    path's nonzero CG entries, ``I``/``J``/``K`` its distinct ``i``/``j``/``k`` and ``nnz``
    the entries, as ``cpu_codegen`` writes them (``tests/test_cost.py`` counts the
    generated source): once per row ``M = alpha C . y`` (``nnz``); per channel, forward
    ``|P|`` plus the weight scaling of the smaller side (``|I|`` or ``|K|``); backward
    ``|P| + |I|`` (grad x), ``2 nnz + |J|`` (grad y), ``|P| + |K|`` (grad w) and ``M`` again.
    """
    desc = problem.descriptor
    if direction not in ("forward", "backward") or any(p.mode != "uvu" for p in desc.paths):
        return None
    fwd = bwd = 0
    for path in desc.paths:
        pairs = {(i, k) for i, _, k, _ in path.cg}
        n_i, n_k = len({i for i, _ in pairs}), len({k for _, k in pairs})
        n_j, nnz = len({j for _, j, _, _ in path.cg}), len(path.cg)
        in1, out = desc.in1[path.i_in1], desc.out[path.i_out]
        weighted = int(path.has_weight)  # an unweighted path's factor 1 is folded away
        forward = len(pairs) + weighted * (n_i if in1.dim <= out.dim else n_k)
        backward = len(pairs) + weighted * n_i + 2 * nnz + weighted * n_j + weighted * (
            len(pairs) + n_k)
        copies = desc.in2[path.i_in2].mul  # one code path per channel of the second input
        fwd += copies * (nnz + out.mul * forward)
        bwd += copies * (nnz + out.mul * backward)
    return fwd if direction == "forward" else fwd + bwd


# Backward also reads grad_out and writes the three input gradients; double backward
# traverses the tensors twice more.
_TRAFFIC_FACTOR = {"forward": 1, "backward": 2, "double_backward": 4}


def tp_bytes(problem: TPProblem, direction: str, batch: int, itemsize: int) -> float:
    """Minimum bytes moved by one timed call over ``batch`` products."""
    d1, d2, dout = problem.dims
    per_item = d1 + d2 + problem.weight_numel + dout  # inputs read, output written
    return float(_TRAFFIC_FACTOR[direction] * per_item * batch * itemsize)


def conv_bytes(problem: TPProblem, direction: str, nodes: int, edges: int,
               itemsize: int) -> float:
    """Minimum bytes of a fused convolution: node features and outputs once per node, edge
    inputs once per edge, plus the two int64 edge indices."""
    d1, d2, dout = problem.dims
    values = nodes * (d1 + dout) + edges * (d2 + problem.weight_numel)
    return float(_TRAFFIC_FACTOR[direction] * values * itemsize + 2 * 8 * edges)
