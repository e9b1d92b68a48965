"""What one MACE case times: an inference step or a training step.

* ``inference``: energy and forces, forces by autograd with ``create_graph=False`` (the
  first backward of every operation is on the path, the double backward is not).
* ``train_step``: energy and forces with ``create_graph=True``, mace-torch's
  ``WeightedEnergyForcesLoss``, ``loss.backward()`` (through the double backward of the
  convolution) and one optimizer step (under ``amp-float16`` with the loss scaled,
  :func:`equibench.precision.loss_scaler`). The outputs compared by the gate are the
  energy, forces and loss before the step, and the gradient of the radial MLPs, which
  reaches them only through the double backward of the tensor products.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from equibench.levels import Outputs
from equibench.precision import backward_and_step

DIRECTIONS = ("inference", "train_step")
# mace-torch's run_train defaults for the weighted energy/forces loss.
ENERGY_WEIGHT, FORCES_WEIGHT = 1.0, 100.0
LEARNING_RATE = 1e-3


def inference(model: torch.nn.Module, data: dict[str, Tensor]) -> Callable[[], Outputs]:
    """``energy (G,)`` and ``forces (N, 3)`` of ``data``."""

    def step() -> Outputs:
        out = model(data, training=False, compute_force=True)
        return {"energy": out["energy"].detach(), "forces": out["forces"].detach()}

    return step


@dataclass
class TrainStep:
    """One training step on fixed zero targets: the cost is benchmarked, not the fit.

    Returns ``energy (G,)``, ``forces (N, 3)``, ``loss ()`` and ``radial_mlp_grad (P,)``
    (the gradients of every interaction's radial MLP, concatenated; their layout is the
    same on every backend, as mace-torch's converters copy these weights unchanged).
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

        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=LEARNING_RATE, amsgrad=True)
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
        self.radial = [
            p for block in self.model.interactions for p in block.conv_tp_weights.parameters()
        ]

    def forward(self) -> tuple[dict[str, Tensor], Tensor]:
        """The model's outputs and the loss (the forward half of a step)."""
        out = self.model(self.data, training=True, compute_force=True)
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
            "radial_mlp_grad": torch.cat([p.grad.reshape(-1) for p in self.radial]),
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
