"""Level ``tp``: the bare tensor product on a batch of independent inputs."""

from __future__ import annotations

from collections.abc import Callable

import torch
from e3nn import o3

from equibench.cases import Case
from equibench.correctness import random_rotation, scaled_error
from equibench.cost import tp_bytes, tp_cost
from equibench.levels import Bench, Outputs, input_key
from equibench.levels.directions import directional_call
from equibench.registry import Implementation, OperandLayout, TPFunction
from equibench.workloads import TPProblem, get_tp_workload


def tp_inputs(problem: TPProblem, batch: int, seed: int) -> dict[str, torch.Tensor]:
    """Float64 inputs, output cotangent and double-backward probes (one per input, the
    weights' too), seeded."""
    g = torch.Generator().manual_seed(seed)
    d1, d2, dout = problem.dims

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    return {
        "x": randn(batch, d1), "y": randn(batch, d2), "w": randn(batch, problem.weight_numel),
        "grad_out": randn(batch, dout), "probe_x": randn(batch, d1), "probe_y": randn(batch, d2),
        "probe_w": randn(batch, problem.weight_numel),
    }


# The operand whose layout each input and output of a directional call has (its names in
# ``tp_inputs``, ``conv_inputs`` and ``directional_call``); ``w`` and its gradients have
# none. The output cotangent is laid out as the output; a gradient, or a probe that dots
# with one, as its operand (a change of layout is a permutation).
_INPUT_OPERANDS = {"x": "in1", "probe_x": "in1", "y": "in2", "probe_y": "in2",
                   "grad_out": "out"}
_OUTPUT_OPERANDS = {"out": "out", "grad_x": "in1", "grad2_x": "in1", "grad_y": "in2",
                    "grad2_y": "in2"}


def native_inputs(data: dict[str, torch.Tensor], layout: OperandLayout | None
                  ) -> dict[str, torch.Tensor]:
    """``data`` (inputs, cotangent and probes in e3nn's layout) in ``layout``: done once,
    outside the timed call, as a model that keeps its features in that layout would."""
    if layout is None:
        return data
    return {name: layout.native(_INPUT_OPERANDS[name], t) if name in _INPUT_OPERANDS else t
            for name, t in data.items()}


def e3nn_outputs(layout: OperandLayout | None) -> Callable[[Outputs], Outputs] | None:
    """The ``Bench.gate_view`` that turns a call's outputs in ``layout`` back into e3nn's
    layout (None: they are in it already)."""
    if layout is None:
        return None

    def view(outputs: Outputs) -> Outputs:
        return {name: layout.e3nn(_OUTPUT_OPERANDS[name], t) if name in _OUTPUT_OPERANDS
                else t for name, t in outputs.items()}

    return view


def _bench_fn(fn: TPFunction, data: dict[str, torch.Tensor], direction: str):
    return directional_call(
        direction, fn, [data["x"], data["y"], data["w"]], ["x", "y", "w"],
        data["grad_out"], [data["probe_x"], data["probe_y"], data["probe_w"]],
    )


def _cast(data: dict[str, torch.Tensor], dtype: torch.dtype, device: str):
    return {k: v.to(device=device, dtype=dtype) for k, v in data.items()}


def equivariance_error(fn: TPFunction, problem: TPProblem, x: torch.Tensor, y: torch.Tensor,
                       w: torch.Tensor, seed: int) -> float:
    """Scaled error of ``fn(x D1, y D2, w) - fn(x, y, w) D_out`` for a random rotation.

    ``fn`` maps (x, y, w) to outputs in ``problem.irreps_out``; the rows of x and y may be
    nodes and edges of a graph, which a rotation does not change.
    """
    rot = random_rotation(seed)
    # e3nn builds Wigner D matrices in the default dtype: float32 ones are only ~1e-7 exact.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        ds = [o3.Irreps(s).D_from_matrix(rot) for s in
              (problem.irreps_in1, problem.irreps_in2, problem.irreps_out)]
    finally:
        torch.set_default_dtype(previous)
    dtype, device = x.dtype, x.device
    d1, d2, dout = (d.to(dtype=dtype, device=device) for d in ds)
    # No torch.no_grad(): the inputs do not require gradients anyway, and torch.compile
    # guards on the grad mode, so a compiled ``fn`` would be compiled again for it.
    rotated_after = fn(x, y, w) @ dout.T
    rotated_before = fn(x @ d1.T, y @ d2.T, w)
    return scaled_error(rotated_before, rotated_after)


def equivariance_check(fn: TPFunction, problem: TPProblem, data: dict[str, torch.Tensor],
                       layout: OperandLayout | None, seed: int) -> Callable[[], float]:
    """``Bench.equivariance``: :func:`equivariance_error` of ``fn`` on the inputs of
    ``data``, both in ``layout``; the rotation acts in e3nn's layout, so inputs and outputs
    are converted around ``fn`` (outside the timed call)."""

    def e3nn_fn(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        if layout is None:
            return fn(x, y, w)
        return layout.e3nn("out", fn(layout.native("in1", x), layout.native("in2", y), w))

    def check() -> float:
        x, y = data["x"], data["y"]
        if layout is not None:
            x, y = layout.e3nn("in1", x), layout.e3nn("in2", y)
        return equivariance_error(e3nn_fn, problem, x, y, data["w"], seed)

    return check


def spec_extra(problem: TPProblem) -> dict[str, str]:
    """``extra.tp_spec``: a user-defined workload's definition, so that its rows say what
    they measured (a built-in workload's name says it already)."""
    return {"tp_spec": problem.spec} if problem.spec else {}


def reference_note(implementation: str) -> str:
    """What the row was gated against, saying so where that is its own code."""
    note = "e3nn o3.TensorProduct in float64"
    if implementation == "e3nn":
        note += " (the implementation under test itself, in float64)"
    return note


def build_bench(case: Case, impl: Implementation, dtype: torch.dtype, seed: int) -> Bench:
    problem = get_tp_workload(case.workload)
    master = tp_inputs(problem, case.batch, seed)
    fn = impl.build_tp(problem, dtype, case.device, case.variant)
    layout = impl.operand_layout(fn)
    data = _cast(native_inputs(master, layout), dtype, case.device)
    ref_data = _cast(master, torch.float64, case.device)

    def reference():
        reference_module = problem.e3nn_module(torch.float64).to(case.device)
        return _bench_fn(reference_module, ref_data, case.direction)()

    cost = tp_cost(problem)
    itemsize = torch.empty((), dtype=dtype).element_size()
    return Bench(
        call=_bench_fn(fn, data, case.direction),
        reference=reference,
        items=case.batch,
        unit="products/s",
        flops=cost.flops(case.direction) * case.batch,
        bytes=tp_bytes(problem, case.direction, case.batch, itemsize),
        equivariance=equivariance_check(fn, problem, data, layout, seed + 1)
        if case.direction == "forward" else None,
        extra={"paths": len(problem.instructions), "mode": problem.mode,
               "code_path": impl.code_path(fn, case.device).to_dict(),
               "reference": reference_note(impl.name), **spec_extra(problem)},
        reference_key=input_key(case.level, case.workload, case.direction, case.batch, seed,
                                case.device),
        gate_view=e3nn_outputs(layout),
    )
