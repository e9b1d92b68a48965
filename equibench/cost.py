"""FLOPs and minimum bytes of a tensor product, counted from its CG sparsity.

The project's one cost model (rows, the roofline and ``benchmarks/targets.py`` read it; the
README states its conventions). The method follows the OpenEquivariance paper (Bharadwaj et
al., arXiv 2501.13986): a ``uvu`` path costs ``3 x nnz(CG) x mul`` FLOPs forward and
``9 x nnz x mul`` backward. A ``uvw`` path first forms
``mul1 x mul2`` products (``3 x nnz x mul1 x mul2``) and then contracts them with the
weights (``2 x mul1 x mul2 x mul_out x (2 l_out + 1)``); its backward counts three times that.
The count is that of the *timed call*: ``backward`` rows time forward + backward, and
``double_backward`` rows time forward + backward + the backward of the backward (counted as
two more backwards).

Bytes are the ideal minimum traffic: every tensor the call reads or writes, once.
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
