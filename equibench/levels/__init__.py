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
    ``reference()`` (computed in float64 with e3nn on the same inputs).
    """

    call: Callable[[], Outputs]
    reference: Callable[[], Outputs]
    items: int
    unit: str
    flops: float = float("nan")
    bytes: float = float("nan")
    equivariance: Callable[[], float] | None = None
    extra: dict = field(default_factory=dict)
