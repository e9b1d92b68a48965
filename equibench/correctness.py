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
        diff = (out.detach().to(torch.float64).cpu() - ref.detach().cpu()).abs()
        abs_err = float(diff.max()) if diff.numel() else 0.0
        if not torch.isfinite(diff).all():
            abs_err = float("inf")
        scale = max(float(ref.abs().max()) if ref.numel() else 0.0, 1.0)
        if abs_err / scale >= max_scaled:
            worst, max_scaled = name, abs_err / scale
        max_abs = max(max_abs, abs_err)
    return GateResult(max_scaled <= tolerance, max_abs, max_scaled, tolerance, worst)
