"""The correctness gate: compare a case's outputs with the float64 reference."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch


class NonFiniteReference(ValueError):
    """The float64 reference holds NaN or infinity: nothing can be checked against it, and
    the case is recorded as an error instead of passing."""


@dataclass(frozen=True)
class GateResult:
    passed: bool
    max_abs_err: float
    max_scaled_err: float
    tolerance: float
    worst: str  # which output had the largest scaled error

    @property
    def message(self) -> str:
        verdict = "within" if self.passed else "exceeds"
        return (
            f"{self.worst}: scaled error {self.max_scaled_err:.3e} {verdict} tolerance "
            f"{self.tolerance:.1e} (max abs error {self.max_abs_err:.3e})"
        )


def compare(
    outputs: Mapping[str, torch.Tensor],
    reference: Mapping[str, torch.Tensor],
    tolerance: float,
) -> GateResult:
    """Largest error over all named outputs.

    The scaled error of one output is ``max|out - ref| / max(max|ref|, 1)``. A missing
    output, a shape mismatch or a non-finite value fails the gate; a non-finite reference
    raises :class:`NonFiniteReference`.
    """
    worst, max_abs, max_scaled = "", 0.0, 0.0
    for name, ref in reference.items():
        if not torch.isfinite(ref).all():
            raise NonFiniteReference(
                f"the float64 reference's {name!r} is not finite (NaN or infinity); the "
                "inputs or the reference implementation are broken, so the case cannot be "
                "checked")
        if name not in outputs:
            return GateResult(False, float("inf"), float("inf"), tolerance, f"{name} missing")
        out = outputs[name]
        if out is None or tuple(out.shape) != tuple(ref.shape):
            shape = None if out is None else tuple(out.shape)
            return GateResult(
                False, float("inf"), float("inf"), tolerance,
                f"{name} has shape {shape}, expected {tuple(ref.shape)}",
            )
        abs_err, scaled = errors(out, ref)
        if scaled >= max_scaled:
            worst, max_scaled = name, scaled
        max_abs = max(max_abs, abs_err)
    return GateResult(max_scaled <= tolerance, max_abs, max_scaled, tolerance, worst)


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """``max|out - ref|`` and the scaled error ``max|out - ref| / max(max|ref|, 1)``, in
    float64 on the CPU; both infinite where ``out`` is not finite."""
    diff = (out.detach().to(device="cpu", dtype=torch.float64)
            - ref.detach().to(device="cpu", dtype=torch.float64)).abs()
    if not diff.numel():
        return 0.0, 0.0
    abs_err = float(diff.max()) if torch.isfinite(diff).all() else float("inf")
    return abs_err, abs_err / max(float(ref.detach().abs().max()), 1.0)


def scaled_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """The gate's error measure, ``max|out - ref| / max(max|ref|, 1)`` (see :func:`errors`)."""
    return errors(out, ref)[1]


def random_rotation(seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """(3, 3) proper rotation drawn from the uniform (Haar) distribution by e3nn with a
    seeded generator, leaving torch's global random state as it was."""
    from e3nn import o3

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return o3.rand_matrix(dtype=dtype)
