"""The correctness gate: compare a case's outputs with the float64 reference, each output at
its own scale.

The error of one output tensor is relative to that tensor's own size::

    error = max|out - ref| / max(max|ref|, floor)

where ``floor`` is the smallest magnitude the quantity is judged at (0 unless the level
states one, :attr:`equibench.levels.Bench.floors`: a scale below which the reference is
cancellation, not signal). Never the constant 1: an output of size 0.05 is judged at 0.05,
so zeroing it is an error of 1 and scaling it by 1.01 an error of 0.01, whatever its units.

A precision's ``tolerance`` lies below the planted error its gate must reject
(:attr:`equibench.precision.Precision.planted`). An output above the tolerance makes the
case ``incorrect``, except in the low precisions (half precision, autocast), whose real
rounding errors can reach the size of their planted error: there an output above the
tolerance but below :data:`INCORRECT_FROM` makes the case ``unverifiable`` (timed and shown,
never evidence), since the gate cannot tell its rounding from a planted error of that size.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

# An error of half the output's own size is no rounding in any precision: a zeroed output
# (error 1) or one with its sign flipped (2) is ``incorrect`` in every precision.
INCORRECT_FROM = 0.5

OK, UNVERIFIABLE, INCORRECT = "ok", "unverifiable", "incorrect"


class NonFiniteReference(ValueError):
    """The float64 reference holds NaN or infinity: nothing can be checked against it, and
    the case is recorded as an error instead of passing."""


@dataclass(frozen=True)
class GateResult:
    """The gate's verdict over every output: ``status`` is ``ok``, ``unverifiable`` or
    ``incorrect``; ``worst`` names the output with the largest error (or what is wrong with
    an output that could not be compared at all)."""

    status: str
    max_abs_err: float
    max_scaled_err: float
    tolerance: float
    worst: str

    @property
    def passed(self) -> bool:
        return self.status == OK

    @property
    def message(self) -> str:
        if self.status == OK:
            verdict = "within"
        elif self.status == UNVERIFIABLE:
            verdict = (f"exceeds (below {INCORRECT_FROM}, as large as this precision's "
                       "rounding: unverifiable)")
        else:
            verdict = "exceeds"
        return (f"{self.worst}: error {self.max_scaled_err:.3e} of its own scale {verdict} "
                f"tolerance {self.tolerance:.1e} (max abs error {self.max_abs_err:.3e})")


def _invalid(tolerance: float, why: str) -> GateResult:
    return GateResult(INCORRECT, float("inf"), float("inf"), tolerance, why)


def check_outputs(
    outputs: Mapping[str, torch.Tensor],
    reference: Mapping[str, torch.Tensor],
    tolerance: float,
    *,
    floors: Mapping[str, float] | None = None,
    low_precision: bool = False,
) -> GateResult:
    """The verdict on ``outputs`` against ``reference`` (both by name).

    Each output's error is :func:`errors`, at the floor ``floors.get(name, 0)``. A missing,
    empty or misshapen output, or a non-finite value, is ``incorrect``; so is an error of
    :data:`INCORRECT_FROM` or more, or any error above ``tolerance`` unless
    ``low_precision``, where it is ``unverifiable``. A non-finite or empty reference raises
    (the case is broken, not wrong).
    """
    if not reference:
        raise ValueError("the reference has no outputs: the case compares nothing")
    floors = floors or {}
    worst, max_abs, max_scaled = "", 0.0, 0.0
    for name, ref in reference.items():
        if not torch.isfinite(ref).all():
            raise NonFiniteReference(
                f"the float64 reference's {name!r} is not finite (NaN or infinity); the "
                "inputs or the reference implementation are broken, so the case cannot be "
                "checked")
        if not ref.numel():
            raise ValueError(f"the float64 reference's {name!r} is empty: nothing to compare")
        if name not in outputs:
            return _invalid(tolerance, f"{name} missing")
        out = outputs[name]
        if out is None or tuple(out.shape) != tuple(ref.shape):
            shape = None if out is None else tuple(out.shape)
            return _invalid(tolerance, f"{name} has shape {shape}, expected {tuple(ref.shape)}")
        abs_err, scaled = errors(out, ref, floors.get(name, 0.0))
        if scaled >= max_scaled:
            worst, max_scaled = name, scaled
        max_abs = max(max_abs, abs_err)
    if max_scaled <= tolerance:
        status = OK
    elif low_precision and max_scaled < INCORRECT_FROM:
        status = UNVERIFIABLE
    else:
        status = INCORRECT
    return GateResult(status, max_abs, max_scaled, tolerance, worst)


def check_dtypes(outputs: Mapping[str, torch.Tensor],
                 allowed: Iterable[torch.dtype]) -> str | None:
    """Why ``outputs`` (a call's own, before any gate view) are not of the case's
    precision, or None: every floating-point output must have a dtype of ``allowed`` (an
    output computed in another precision than the one the case names is not its result)."""
    allowed = tuple(allowed)
    for name, out in outputs.items():
        if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dtype not in allowed:
            names = ", ".join(str(d).removeprefix("torch.") for d in allowed)
            return (f"{name} is {str(out.dtype).removeprefix('torch.')}, expected {names} "
                    "for this precision")
    return None


def errors(out: torch.Tensor, ref: torch.Tensor, floor: float = 0.0) -> tuple[float, float]:
    """``max|out - ref|`` and the error relative to the output's own scale,
    ``max|out - ref| / max(max|ref|, floor)``, in float64 on the CPU; both infinite where
    ``out`` is not finite. A zero scale (a zero reference without a floor) gives 0 for an
    exact zero output and infinity otherwise."""
    diff = (out.detach().to(device="cpu", dtype=torch.float64)
            - ref.detach().to(device="cpu", dtype=torch.float64)).abs()
    if not torch.isfinite(diff).all():
        return float("inf"), float("inf")
    abs_err = float(diff.max())
    scale = max(float(ref.detach().abs().max()), floor)
    if scale == 0.0:
        return abs_err, 0.0 if abs_err == 0.0 else float("inf")
    return abs_err, abs_err / scale


def scaled_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """The gate's error measure of one tensor without a floor (see :func:`errors`)."""
    return errors(out, ref)[1]


def random_rotation(seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """(3, 3) proper rotation drawn from the uniform (Haar) distribution by e3nn with a
    seeded generator, leaving torch's global random state as it was."""
    from e3nn import o3

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return o3.rand_matrix(dtype=dtype)
