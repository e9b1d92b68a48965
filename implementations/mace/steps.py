"""What one MACE case times: an inference step or a training step.

* ``inference``: energy and forces, forces by autograd with ``create_graph=False`` (the
  first backward of every operation is on the path, the double backward is not).
* ``train_step``: energy and forces with ``create_graph=True``, mace-torch's
  ``WeightedEnergyForcesLoss``, ``loss.backward()`` (through the double backward of the
  convolution) and one optimizer step (under ``amp-float16`` with the loss scaled,
  :func:`equibench.precision.loss_scaler`). The outputs are the energy, forces and loss
  before the step, every parameter's gradient and every parameter after the step, as
  autograd and the optimizer left them (no work added); the gate compares them through
  :mod:`.gradients`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from equibench.levels import Outputs
from equibench.modes import Step
from equibench.precision import backward_and_step
from equibench.vocabulary import MODEL_DIRECTIONS as DIRECTIONS

# mace-torch's run_train defaults for the weighted energy/forces loss.
ENERGY_WEIGHT, FORCES_WEIGHT = 1.0, 100.0
LEARNING_RATE = 1e-3


def inference(model: torch.nn.Module, data: dict[str, Tensor]) -> Step:
    """``energy (G,)`` and ``forces (N, 3)`` of ``data``, a function of ``data`` (which an
    exported program takes as its input, ``equibench.modes``)."""

    def step(data: dict[str, Tensor]) -> Outputs:
        out = model(_forces_leaf(data), training=False, compute_force=True)
        return {"energy": out["energy"].detach(), "forces": out["forces"].detach()}

    return Step(step, (data,))


def _forces_leaf(data: dict[str, Tensor]) -> dict[str, Tensor]:
    """``data`` with its positions a new leaf that requires gradients: made in the step
    rather than left to the model's in-place ``requires_grad_`` on its input, which a
    compiled or traced step does not see (mace-torch's calculator does the same under
    torch.compile)."""
    return {**data, "positions": data["positions"].detach().requires_grad_(True)}


def make_optimizer(params: Iterable[Tensor]) -> torch.optim.Optimizer:
    """The training step's optimizer over ``params``."""
    return torch.optim.Adam(params, lr=LEARNING_RATE, amsgrad=True)


@dataclass
class TrainStep:
    """One training step on fixed zero targets: the cost is benchmarked, not the fit.

    Returns ``energy (G,)``, ``forces (N, 3)``, ``loss ()``, and for every parameter
    ``grad:<name>`` (its gradient, None where it got none) and ``param:<name>`` (the
    parameter after the step), by the model's own parameter names.
    """

    model: torch.nn.Module
    data: dict[str, Tensor]
    # Loss scaling (PyTorch's float16 AMP recipe, equibench.precision.loss_scaler): scaled
    # backward, gradients unscaled before the step; None for every other precision.
    scaler: torch.amp.GradScaler | None = None
    optimizer: torch.optim.Optimizer = field(init=False)

    def __post_init__(self) -> None:
        from mace.modules.loss import WeightedEnergyForcesLoss
        from mace.tools.torch_geometric import Batch

        self.optimizer = make_optimizer(self.model.parameters())
        positions, ptr = self.data["positions"], self.data["ptr"]
        n_graphs = ptr.shape[0] - 1
        ones = torch.ones(n_graphs, dtype=positions.dtype, device=positions.device)
        self.targets = Batch(
            ptr=ptr, weight=ones, energy_weight=ones, forces_weight=ones,
            energy=torch.zeros_like(ones), forces=torch.zeros_like(positions),
        )  # fmt: skip
        self.loss_fn = WeightedEnergyForcesLoss(ENERGY_WEIGHT, FORCES_WEIGHT).to(
            device=positions.device, dtype=positions.dtype
        )
        self.params = dict(self.model.named_parameters())

    def forward(self) -> tuple[dict[str, Tensor], Tensor]:
        """The model's outputs and the loss (the forward half of a step)."""
        out = self.model(_forces_leaf(self.data), training=True, compute_force=True)
        return out, self.loss_fn(self.targets, out)

    def __call__(self) -> Outputs:
        self.optimizer.zero_grad(set_to_none=True)
        out, loss = self.forward()
        # The step leaves the gradients as they are: read after it.
        backward_and_step(loss, self.optimizer, self.scaler)
        return {
            "energy": out["energy"].detach(),
            "forces": out["forces"].detach(),
            "loss": loss.detach(),
            **{f"grad:{n}": p.grad for n, p in self.params.items()},
            **{f"param:{n}": p.detach() for n, p in self.params.items()},
        }


def make_step(
    direction: str, model: torch.nn.Module, data: dict[str, Tensor]
) -> Callable[[], Outputs]:
    """The timed call of ``direction`` on ``model`` and ``data`` (see the module doc)."""
    if direction == "inference":
        return inference(model, data)
    if direction == "train_step":
        return TrainStep(model, data)
    raise ValueError(f"MACE has no direction {direction!r}; choose one of {DIRECTIONS}")
