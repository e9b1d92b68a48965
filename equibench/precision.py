"""Precision names, their dtypes and the correctness tolerance each one is held to.

Tolerances apply to each output's error relative to its own scale,
``max|out - ref| / max(max|ref|, floor)`` against the float64 reference
(:mod:`equibench.correctness`), so they mean the same for outputs of size 0.01 and of size
1000. Each lies below the precision's planted error (``planted``): an output scaled by
``1 + planted`` can never pass.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Precision:
    """``dtype``: of parameters and inputs; ``autocast``: the dtype of ``torch.autocast``
    around every call (automatic mixed precision), None for plain precisions.

    ``planted``: the relative error (an output scaled by ``1 + planted``) that the gate must
    never pass; ``tolerance`` lies below it. 1% for the full precisions; 10% for the half
    precisions and autocast, whose rounding (8 to 11 mantissa bits) already reaches 1%.
    Those are the ``low`` precisions, where an error above the tolerance but below
    ``correctness.INCORRECT_FROM`` is ``unverifiable`` rather than ``incorrect``.
    """

    name: str
    dtype: torch.dtype
    tolerance: float
    gpu_only: bool = False
    autocast: torch.dtype | None = None
    planted: float = 0.01

    @property
    def low(self) -> bool:
        """Whether this precision's rounding can reach the size of its planted error."""
        return self.planted > 0.01

    @property
    def output_dtypes(self) -> tuple[torch.dtype, ...]:
        """The dtypes a call's floating-point outputs may have: the precision's own, and
        under autocast also the autocast dtype (autocast decides per operation)."""
        return (self.dtype,) if self.autocast is None else (self.dtype, self.autocast)

    def autocast_context(self, device: str) -> contextlib.AbstractContextManager:
        """The autocast region of a call on ``device`` (a no-op for plain precisions)."""
        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(device.split(":")[0], dtype=self.autocast)

    def check_device(self, device: str) -> str | None:
        """Reason this precision cannot run on ``device``, or None."""
        if self.gpu_only and not device.startswith("cuda"):
            return f"{self.name} is a GPU tensor-core mode (TF32 matmuls); it has no CPU meaning"
        return None


# Why these numbers: float32 accumulates ~1e-7 relative rounding per term over sums of
# up to a few thousand terms (128 channels x CG nonzeros); TF32 keeps a 10-bit mantissa,
# bfloat16 8 bits, float16 11 bits (with a narrow range). The amp- precisions keep float32
# parameters and run the call under torch.autocast (NVIDIA's AMP training recipe): matmuls
# round to the autocast dtype, reductions stay float32. Every tolerance lies below its
# planted error (1%, or 10% for the low precisions), so that a planted error of that size
# is never ``ok``: amp-bfloat16's bound, 1e-1 when errors were scaled by max(|ref|, 1), is
# 5e-2 (13 units of roundoff, u = 2^-8) since each output is judged at its own scale, and
# amp-float16's 5e-2 is 102 units (u = 2^-11). An output beyond them is ``unverifiable``
# (correctness.py): no tolerance is widened to make a case pass.
PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("float64", torch.float64, 1e-9),
        Precision("float32", torch.float32, 1e-4),
        Precision("tfloat32", torch.float32, 5e-3, gpu_only=True),
        Precision("bfloat16", torch.bfloat16, 5e-2, planted=0.1),
        Precision("float16", torch.float16, 1e-2, planted=0.1),
        Precision("amp-bfloat16", torch.float32, 5e-2, autocast=torch.bfloat16, planted=0.1),
        Precision("amp-float16", torch.float32, 5e-2, autocast=torch.float16, planted=0.1),
    )
}


# GradScaler's default initial scale.
INITIAL_LOSS_SCALE = 2.0**16


def loss_scaler(precision: Precision, device: str, loss: Callable[[], torch.Tensor],
                params: Iterable[torch.nn.Parameter]) -> torch.amp.GradScaler | None:
    """PyTorch's float16 AMP recipe scales the loss (``GradScaler``: a scaled backward,
    gradients unscaled and checked before the step), else float16 gradients underflow; None
    for every other precision.

    The scaler starts at the scale its dynamic rule settles at (halved from 2^16 after each
    step whose gradients overflow, steps that are skipped and leave the weights alone):
    found here by backward passes of ``loss`` (``() -> loss``, run under autocast) before the
    first timed and gated call, which then makes a real step.
    """
    if precision.autocast != torch.float16:
        return None
    params = [p for p in params if p.requires_grad]
    scale = INITIAL_LOSS_SCALE
    while scale > 1:
        for p in params:
            p.grad = None
        with precision.autocast_context(device):
            value = loss()
        (value * scale).backward()
        if all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in params):
            break
        scale /= 2
    for p in params:
        p.grad = None
    return torch.amp.GradScaler(device.split(":")[0], init_scale=scale)


def backward_and_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer,
                      scaler: torch.amp.GradScaler | None) -> None:
    """``loss.backward()`` and ``optimizer.step()``; with a ``scaler`` (see
    :func:`loss_scaler`) the backward is scaled, the gradients are unscaled (the
    parameters' ``.grad`` hold the true gradients afterwards) and the scale is updated."""
    if scaler is None:
        loss.backward()
        optimizer.step()
        return
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()


def get_precision(name: str) -> Precision:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise ValueError(
            f"unknown precision {name!r}; choose one of {', '.join(PRECISIONS)}"
        ) from None


@contextlib.contextmanager
def precision_mode(precision: Precision) -> Iterator[None]:
    """Enable TF32 matmuls for ``tfloat32`` (and make sure they are off otherwise)."""
    tf32 = precision.name == "tfloat32"
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old
