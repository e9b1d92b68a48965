"""The gate's check of a training step's optimizer step.

The float64 reference cannot judge a float32 step: Adam's first step moves each weight by
about one learning rate whatever the gradient's size, and storing a weight of size 4 in
float32 rounds it by more than 1e-4 of that. So the step is checked against the model's own
gradients instead, which the gate compares with the reference's: ``step:<name>`` is the
weight after the step less what a fresh optimizer of the same kind makes of the step's own
gradient from the weight before, in the model's dtype. It is exactly zero when the step is
applied as the optimizer says; a skipped, doubled or misapplied step is off by a learning
rate, the floor it is judged at (``Bench.floors``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from equibench.levels import Outputs

STEP, PARAM, GRAD = "step:", "param:", "grad:"


@dataclass
class StepCheck:
    """``before``: the model's weights (by name) before its first step; ``optimizer``: a
    fresh optimizer like the model's over the given tensors; ``learning_rate``: its rate.
    The model's step returns ``grad:<name>`` (None: no gradient) and ``param:<name>`` (the
    weight after the step) for every parameter."""

    before: dict[str, Tensor]
    optimizer: Callable[[Iterable[Tensor]], torch.optim.Optimizer]
    learning_rate: float

    @classmethod
    def of(cls, model: torch.nn.Module,
           optimizer: Callable[[Iterable[Tensor]], torch.optim.Optimizer],
           learning_rate: float) -> StepCheck:
        """Taken before the model's first step."""
        return cls({n: p.detach().clone() for n, p in model.named_parameters()}, optimizer,
                   learning_rate)

    @property
    def floors(self) -> dict[str, float]:
        return {STEP + name: self.learning_rate for name in self.before}

    def reference(self) -> Outputs:
        """What each ``step:`` output must be: zero."""
        return {STEP + n: torch.zeros(w.shape, dtype=torch.float64)
                for n, w in self.before.items()}

    def residuals(self, outputs: Outputs) -> Outputs:
        """``step:<name>`` of a first step's ``outputs`` (see the module docstring); a
        step whose gradients are not all finite is one a loss scaler skips (the weights
        must be unchanged)."""
        shadow = {n: w.clone().requires_grad_(True) for n, w in self.before.items()}
        for name, w in shadow.items():
            grad = outputs.get(GRAD + name)
            w.grad = (torch.zeros_like(w) if grad is None
                      else grad.detach().reshape(w.shape).to(w.dtype).clone())
        if all(bool(torch.isfinite(w.grad).all()) for w in shadow.values()):
            self.optimizer(list(shadow.values())).step()
        return {STEP + n: (outputs[PARAM + n].detach().double() - w.detach().double()).cpu()
                for n, w in shadow.items()}


def without_params(outputs: Outputs) -> Outputs:
    """``outputs`` less the ``param:`` entries (the gate compares ``step:`` instead)."""
    return {k: v for k, v in outputs.items() if not k.startswith(PARAM)}
