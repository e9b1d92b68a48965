"""Level ``tp``: the bare tensor product on a batch of independent inputs."""

from __future__ import annotations

import torch
from e3nn import o3

from equibench.cases import Case
from equibench.cost import tp_bytes, tp_cost
from equibench.levels import Bench, input_key
from equibench.levels.directions import directional_call
from equibench.registry import Implementation, TPFunction
from equibench.workloads import TPProblem, get_tp_workload


def tp_inputs(problem: TPProblem, batch: int, seed: int) -> dict[str, torch.Tensor]:
    """Float64 inputs, output cotangent and double-backward probes, seeded."""
    g = torch.Generator().manual_seed(seed)
    d1, d2, dout = problem.dims

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    return {
        "x": randn(batch, d1), "y": randn(batch, d2), "w": randn(batch, problem.weight_numel),
        "grad_out": randn(batch, dout), "probe_x": randn(batch, d1), "probe_y": randn(batch, d2),
    }


def _bench_fn(fn: TPFunction, data: dict[str, torch.Tensor], direction: str):
    return directional_call(
        direction, fn, [data["x"], data["y"], data["w"]], ["x", "y", "w"],
        data["grad_out"], [data["probe_x"], data["probe_y"]],
    )


def _cast(data: dict[str, torch.Tensor], dtype: torch.dtype, device: str):
    return {k: v.to(device=device, dtype=dtype) for k, v in data.items()}


def equivariance_error(fn: TPFunction, problem: TPProblem, x: torch.Tensor, y: torch.Tensor,
                       w: torch.Tensor, seed: int) -> float:
    """Scaled error of ``fn(x D1, y D2, w) - fn(x, y, w) D_out`` for a random rotation.

    ``fn`` maps (x, y, w) to outputs in ``problem.irreps_out``; the rows of x and y may be
    nodes and edges of a graph, which a rotation does not change.
    """
    quaternion = torch.randn(4, generator=torch.Generator().manual_seed(seed),
                             dtype=torch.float64)
    rot = o3.quaternion_to_matrix(quaternion / quaternion.norm())
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
    diff = (rotated_after - rotated_before).abs().max().double()
    scale = max(float(rotated_after.abs().max()), 1.0)
    return float(diff) / scale


def reference_note(implementation: str) -> str:
    """What the row was gated against, saying so where that is its own code."""
    note = "e3nn o3.TensorProduct in float64"
    if implementation == "e3nn":
        note += " (the implementation under test itself, in float64)"
    return note


def build_bench(case: Case, impl: Implementation, dtype: torch.dtype, seed: int) -> Bench:
    problem = get_tp_workload(case.workload)
    master = tp_inputs(problem, case.batch, seed)
    data = _cast(master, dtype, case.device)
    fn = impl.build_tp(problem, dtype, case.device)
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
        equivariance=(lambda: equivariance_error(fn, problem, data["x"], data["y"], data["w"],
                                                 seed + 1))
        if case.direction == "forward" else None,
        extra={"paths": len(problem.instructions), "mode": problem.mode,
               "code_path": impl.code_path(fn, case.device).to_dict(),
               "reference": reference_note(impl.name)},
        reference_key=input_key(case.level, case.workload, case.direction, case.batch, seed,
                                case.device),
    )
