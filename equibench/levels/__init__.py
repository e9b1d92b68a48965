"""What one case runs at each level: its timed call, its reference and its cost."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

Outputs = dict[str, torch.Tensor]


@dataclass
class Bench:
    """Everything the runner needs to gate, measure and describe one case.

    ``call`` is the timed call; it returns the named outputs that the gate compares with
    ``reference()`` (computed in float64 with e3nn on the same inputs). Cases with the same
    ``reference_key`` have the same reference, which a job then computes once.

    ``amortized`` says what work the case does once, outside the timed call, that a step
    with a new batch would pay ('' when nothing: the default, and the rule); ``kept_bytes``
    is the memory that such work keeps between calls, which counts in the peak.

    ``gate_view`` maps the call's outputs to what the gate compares with ``reference()``
    (None: the outputs themselves). It runs outside the timed call, for outputs whose
    comparable form costs work a step would not do: a projection of every gradient, a
    native layout turned back into the reference's.

    ``floors`` (by output name; absent: 0) is the smallest scale an output is judged at
    (``correctness.errors``): where a quantity's reference can be small by cancellation
    alone, its floor says the magnitude its rounding is made at.

    ``summary`` (None: nothing) gives metrics of the case's whole run from the median
    seconds per call, after timing, for the row's ``extra``: an MD run's ns/day and its
    energy drift over every call.

    ``profile`` (None: nothing) profiles a call by category for the row's ``extra``
    (``breakdown``, ``breakdown_unit``). The runner calls it last, after timing and the
    memory measurements, and only where the run asks for it (``measure.breakdown``): the
    profiler's trace of a model's training step costs more than all its timed calls.
    """

    call: Callable[[], Outputs]
    reference: Callable[[], Outputs]
    items: int
    unit: str
    flops: float = float("nan")
    bytes: float = float("nan")
    equivariance: Callable[[], float] | None = None
    extra: dict = field(default_factory=dict)
    reference_key: str | None = None
    amortized: str = ""
    kept_bytes: int = 0
    gate_view: Callable[[Outputs], Outputs] | None = None
    summary: Callable[[float], dict] | None = None
    floors: dict[str, float] = field(default_factory=dict)
    profile: Callable[[], dict] | None = None

    def gated(self, outputs: Outputs) -> Outputs:
        """``outputs`` as the gate compares them (see ``gate_view``)."""
        return outputs if self.gate_view is None else self.gate_view(outputs)


def input_key(level: str, workload: str, direction: str, batch: int, seed: int,
              device: str) -> str:
    """``Bench.reference_key`` of a level whose inputs and float64 reference depend on these
    alone (not on the implementation or the precision under test)."""
    return f"{level}|{workload}|{direction}|{batch}|{seed}|{device}"
