"""The gate's mutation matrix: errors planted at every level, in every precision the quick
preset runs there, are never ``ok``.

Each case is built once, its first call made once, then every mutation of those outputs is
judged by the runner's own gate (:func:`equibench.runner.gate_outputs`: dtypes, then each
output at its own scale). The mutations (issue 35):

(a) one output tensor zeroed;
(b) one output scaled by 1 + the precision's planted error (1.01, or 1.10 in half precision
    and under autocast);
(c) one parameter's gradient zeroed (every parameter of the model), and one weight moved a
    learning rate past its optimizer step;
(d) a double backward that drops the weights' cotangent (first-order gradients right);
(e) an output emptied, or returned in another dtype;
(f) at md, a small non-conservative force term (0.1% of the largest force: a rotation
    about the centre of the cell).

``incorrect`` is required wherever the error is one no precision's rounding makes (a zeroed
tensor, an emptied one, another dtype); elsewhere ``unverifiable`` is allowed in the low
precisions, where rounding reaches the planted error's size. The matrix is printed (``-s``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import pytest
import torch

from equibench import runner
from equibench.cases import Case
from equibench.levels import Bench, Outputs
from equibench.precision import get_precision
from equibench.registry import DEFAULT_VARIANT, Implementation, register
from equibench.workloads import TPProblem

torch.set_num_threads(1)

# (level, workload, implementation, variant, direction, precision, batch): the precisions the
# quick preset runs at each level (tp: float32 and float64; model: float32 and
# amp-bfloat16; md: float32), on small inputs.
CASES = [
    ("tp", "nequip-benzene-1parity", "fused", "default", "double_backward", "float32", 16),
    ("tp", "nequip-benzene-1parity", "fused", "default", "double_backward", "float64", 16),
    ("conv", "nequip-benzene-1parity@carbon", "fused", "default", "double_backward",
     "float32", 2),
    ("model", "mace-qm9", "fused", "small", "train_step", "float32", 2),
    ("model", "mace-qm9", "fused", "small", "train_step", "amp-bfloat16", 2),
    ("model", "se3t-qm9-small", "basis", "optimized", "train_step", "float32", 4),
    ("model", "se3t-qm9-small", "basis", "nvidia-default", "train_step", "amp-bfloat16", 4),
    ("model", "se3t-qm9-small", "basis", "nvidia-default", "inference", "amp-bfloat16", 4),
    ("md", "water-box", "fused", "small", "nve", "float32", 2),
]
NEVER_ROUNDING = {"incorrect"}
MATRIX: list[tuple[str, str, str]] = []


@functools.cache
def built(spec: tuple) -> tuple[Case, Bench, Outputs]:
    case = Case(*spec, "cpu")
    precision = get_precision(case.precision)
    bench = runner._build(case, precision, seed=0)
    with precision.autocast_context("cpu"):
        first = bench.call()
    verdict = runner.gate_outputs(bench, first, precision)
    # The real outputs pass (or, in a low precision, may be unverifiable): the mutations
    # below are what fails.
    assert verdict.status in ("ok", "unverifiable"), verdict.message
    MATRIX.append((case.key, "none (the real call)", verdict.status))
    return case, bench, first


def mutations(case: Case, outputs: Outputs) -> Iterator[tuple[str, Outputs, set[str]]]:
    """(what, mutated outputs, the statuses it may get)."""
    precision = get_precision(case.precision)
    planted = {"incorrect"} | ({"unverifiable"} if precision.low else set())
    values = {k: v for k, v in outputs.items()
              if isinstance(v, torch.Tensor) and not k.startswith(("grad:", "param:"))}
    for name, value in values.items():
        yield f"(a) {name} zeroed", {**outputs, name: torch.zeros_like(value)}, NEVER_ROUNDING
        yield (f"(b) {name} x {1 + precision.planted:g}",
               {**outputs, name: value * (1 + precision.planted)}, planted)
        yield (f"(e) {name} empty", {**outputs, name: value.new_zeros((0,))}, NEVER_ROUNDING)
        other = torch.float64 if value.dtype != torch.float64 else torch.float32
        yield (f"(e) {name} as {str(other).removeprefix('torch.')}",
               {**outputs, name: value.to(other)}, NEVER_ROUNDING)
    for name, grad in outputs.items():
        if name.startswith("grad:") and grad is not None:
            yield f"(c) {name} zeroed", {**outputs, name: torch.zeros_like(grad)}, NEVER_ROUNDING
        if name.startswith("param:"):
            # One learning rate (both model families use 1e-3) past the step.
            yield (f"(c) {name} a learning rate past its step", {**outputs, name: grad + 1e-3},
                   NEVER_ROUNDING)


# The fused convolution's double backward against e3nn's in float64: ~40 s on two cores.
SLOW = {CASES[2]}


@pytest.mark.parametrize("spec", [pytest.param(s, marks=pytest.mark.slow) if s in SLOW else s
                                  for s in CASES], ids=lambda s: "/".join(map(str, s)))
def test_every_mutation_fails_the_gate(spec):
    case, bench, first = built(spec)
    precision = get_precision(case.precision)
    checked = 0
    for what, mutated, allowed in mutations(case, first):
        status = runner.gate_outputs(bench, mutated, precision).status
        MATRIX.append((case.key, what, status))
        assert status in allowed, f"{case.key}: {what} gave {status}"
        checked += 1
    assert checked >= 4


def test_model_mutations_cover_every_parameter():
    """(c) zeroes each parameter's gradient in turn: every one of them is compared."""
    for spec in CASES:
        if spec[4] != "train_step":
            continue
        case, bench, first = built(spec)
        params = [k for k in first if k.startswith("param:")]
        grads = [k for k in first if k.startswith("grad:") and first[k] is not None]
        assert len(params) > 10 and len(grads) == len(params), case.key


class _DropWeightCotangent(torch.autograd.Function):
    """A product whose backward returns the weights' gradient without a graph: its first
    derivatives are right, its double backward misses everything the weights' cotangent
    contributes (a bug class of hand-written double backwards)."""

    @staticmethod
    def forward(ctx, fn, x, y, w):  # noqa: ANN001
        ctx.fn = fn
        ctx.save_for_backward(x, y, w)
        with torch.no_grad():
            return fn(x, y, w)

    @staticmethod
    def backward(ctx, grad_out):  # noqa: ANN001
        x, y, w = ctx.saved_tensors
        with torch.enable_grad():
            out = ctx.fn(x, y, w)
            grad_x, grad_y = torch.autograd.grad(out, (x, y), grad_out, create_graph=True)
            grad_w = torch.autograd.grad(ctx.fn(x.detach(), y.detach(), w), w,
                                         grad_out.detach())[0]
        return None, grad_x, grad_y, grad_w


@register
class DropWeightCotangent(Implementation):
    """e3nn's product with :class:`_DropWeightCotangent`'s double backward (mutation d)."""

    name = "test-drop-w-cotangent"
    levels = frozenset({"tp", "conv"})

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT) -> Callable:
        module = problem.e3nn_module(dtype).to(device)
        return lambda x, y, w: _DropWeightCotangent.apply(module, x, y, w)

    def build_conv(self, problem: TPProblem, dtype: torch.dtype, device: str,
                   variant: str = DEFAULT_VARIANT) -> Callable:
        module = problem.e3nn_module(dtype).to(device)

        def conv(x, y, w, src, dst, n):  # noqa: ANN001
            messages = _DropWeightCotangent.apply(module, x[src], y, w)
            return torch.zeros(n, messages.shape[1], dtype=messages.dtype,
                               device=messages.device).index_add(0, dst, messages)

        return conv


@pytest.mark.parametrize("level,workload,precision", [
    ("tp", "nequip-benzene-1parity", "float32"),
    ("tp", "nequip-benzene-1parity", "float64"),
    pytest.param("conv", "nequip-benzene-1parity@carbon", "float32", marks=pytest.mark.slow),
])
def test_a_double_backward_that_drops_the_weight_cotangent_is_incorrect(level, workload,
                                                                         precision):
    """(d): only the probe of the weights' cotangent can see this bug, since the first-order
    outputs are right; it must show in the second-order ones."""
    case = Case(level, workload, DropWeightCotangent.name, "default", "double_backward",
                precision, 2, "cpu")
    p = get_precision(precision)
    bench = runner._build(case, p, seed=0)
    first = bench.call()
    verdict = runner.gate_outputs(bench, first, p)
    MATRIX.append((case.key, "(d) weight cotangent dropped in the double backward",
                   verdict.status))
    assert verdict.status == "incorrect", verdict.message
    assert verdict.worst.startswith("grad2_")
    first_order = {k: v for k, v in first.items() if not k.startswith("grad2_")}
    reference = {k: v for k, v in bench.reference().items() if not k.startswith("grad2_")}
    from equibench.correctness import check_outputs

    assert check_outputs(bench.gated(first_order), reference, p.tolerance).passed


def test_a_small_non_conservative_force_is_incorrect():
    """(f): forces with a rotational term of 0.1% of the largest force (which no energy
    has: its curl is not zero) fail the md gate."""
    from equibench import structures

    case, bench, first = built(CASES[-1])
    forces = first["forces"]
    # The first call returns the forces of the structure's first frame.
    positions = torch.as_tensor(structures.load(case.workload).positions, dtype=forces.dtype)
    offsets = positions - positions.mean(0)
    axis = torch.tensor([0.0, 0.0, 1.0], dtype=forces.dtype)
    swirl = torch.linalg.cross(offsets, axis.expand_as(offsets))  # circulates about z
    swirl = swirl / swirl.abs().max() * 1e-3 * forces.abs().max()
    mutated = {**first, "forces": forces + swirl}
    status = runner.gate_outputs(bench, mutated, get_precision(case.precision)).status
    MATRIX.append((case.key, "(f) 0.1% non-conservative force term", status))
    assert status == "incorrect"


def test_print_the_matrix():
    """Prints every (case, mutation, status) collected above (run with ``-s``)."""
    for spec in CASES:
        built(spec)
    width = max(len(key) for key, _, _ in MATRIX)
    for key, what, status in MATRIX:
        print(f"{key:<{width}}  {status:<12}  {what}")
    assert MATRIX
