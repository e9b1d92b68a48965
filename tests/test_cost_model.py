"""The cost model (equibench.cost) against FLOP counts worked out by hand.

docs/measurement.md ("Cost model") states the rules: a ``uvu`` path costs
``3 x nnz(CG) x mul1`` FLOPs forward and ``9 x nnz x mul1`` backward; a ``backward`` row
times forward + backward, a ``double_backward`` row forward + three backwards. These tests
pin the numbers those rules give on small products, counted here without the code.
"""

from __future__ import annotations

import torch

from equibench.cases import Case
from equibench.cost import tp_bytes, tp_cost
from equibench.custom_workloads import TPSpec
from equibench.levels import tp as tp_level
from equibench.registry import get
from equibench.workloads import get_tp_workload

# The nonzero entries of the real Clebsch-Gordan (Wigner 3j) tensor of each (l1, l2, l3)
# used below, counted by hand:
#   0 x 0 -> 0: one scalar, 1 entry;
#   0 x 1 -> 1 and 1 x 0 -> 1: a scalar times a vector, the identity on 3 components,
#     3 entries each;
#   1 x 1 -> 0: the dot product, delta_ij, 3 entries;
#   1 x 1 -> 1: the cross product, epsilon_ijk, 6 entries (i, j, k all different).


def test_a_tiny_uvu_product_costs_what_the_rules_give_by_hand():
    """``2x0e+2x1o x 0e+1o -> 0e+1o+1e uvu``.

    Channel-wise (uvu), each of the 2 channels of the first input meets the one channel of
    the second. The allowed paths, by parity and ``|l1 - l2| <= l3 <= l1 + l2``, that the
    output keeps (2e is not in it):

    ======================  ====  =====================
    path                    nnz   FLOPs: 3 x nnz x mul1
    ======================  ====  =====================
    0e x 0e -> 0e            1     3 x 1 x 2 =  6
    0e x 1o -> 1o            3     3 x 3 x 2 = 18
    1o x 0e -> 1o            3     3 x 3 x 2 = 18
    1o x 1o -> 0e            3     3 x 3 x 2 = 18
    1o x 1o -> 1e            6     3 x 6 x 2 = 36
    ======================  ====  =====================

    nnz in all: 16. Forward: 3 x 16 x 2 = 96 FLOPs per product. Backward alone:
    9 x 16 x 2 = 288. A ``backward`` row times forward + backward, 96 + 288 = 384; a
    ``double_backward`` row forward + three backwards, 96 + 3 x 288 = 960.

    Bytes (forward, float64, per product): x has 2 + 2 x 3 = 8 values, y 1 + 3 = 4, the
    weights one per path and channel, 5 x 2 = 10, the output one ``2 x ir`` segment per
    path, 2 + 2 x 3 + 2 x 3 + 2 + 2 x 3 = 22: (8 + 4 + 10 + 22) x 8 bytes = 352.
    """
    problem = TPSpec.parse("2x0e+2x1o x 0e+1o -> 0e+1o+1e uvu").problem("tiny")
    assert len(problem.instructions) == 5
    assert problem.dims == (8, 4, 22) and problem.weight_numel == 10
    cost = tp_cost(problem)
    assert (cost.forward_flops, cost.backward_flops) == (96, 288)
    assert [cost.flops(d) for d in ("forward", "backward", "double_backward")] == [96, 384,
                                                                                   960]
    assert tp_bytes(problem, "forward", batch=1, itemsize=8) == 352


def test_a_built_in_workload_and_its_row_carry_the_hand_count():
    """``nequip-water-1parity``: ``32x0e+32x1o x 1x0e+1x1o``, uvu, four paths (its output,
    32x0e+32x1o, keeps no 1e): 0e x 0e -> 0e (nnz 1), 0e x 1o -> 1o (3), 1o x 0e -> 1o (3),
    1o x 1o -> 0e (3); nnz 10, so forward 3 x 10 x 32 = 960 FLOPs per product and backward
    9 x 10 x 32 = 2,880. A tp row of batch 8 in the backward direction counts
    8 x (960 + 2,880) = 30,720 FLOPs: the ``flops`` column, from which ``gflops_per_s``
    is computed."""
    problem = get_tp_workload("nequip-water-1parity")
    cost = tp_cost(problem)
    assert (cost.forward_flops, cost.backward_flops) == (960, 2880)
    case = Case("tp", "nequip-water-1parity", "e3nn", "default", "backward", "float64", 8,
                "cpu")
    bench = tp_level.build_bench(case, get("e3nn"), torch.float64, seed=0)
    assert bench.flops == 30_720


def test_a_tiny_uvw_product_costs_what_the_rules_give_by_hand():
    """``2x0e x 0e -> 3x0e uvw``: one path, nnz 1, mul1 = 2, mul2 = 1, mul_out = 3,
    l_out = 0. The rule ``3 x nnz x mul1 x mul2 + 2 x mul1 x mul2 x mul_out x (2 l_out + 1)``
    gives 3 x 1 x 2 x 1 + 2 x 2 x 1 x 3 x 1 = 6 + 12 = 18 FLOPs forward, three times that,
    54, backward."""
    problem = TPSpec.parse("2x0e x 0e -> 3x0e uvw").problem("tiny-uvw")
    cost = tp_cost(problem)
    assert (cost.forward_flops, cost.backward_flops) == (18, 54)

