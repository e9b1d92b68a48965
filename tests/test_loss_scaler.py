"""float16 AMP training steps scale their loss as PyTorch's recipe does, starting at the
scale its dynamic rule settles at; other precisions do not scale."""

from __future__ import annotations

import torch

from equibench.precision import get_precision, loss_scaler


def test_the_scale_halves_until_float16_gradients_are_finite() -> None:
    model = torch.nn.Linear(4, 4)
    x = torch.full((1, 4), 1000.0)
    # d loss / d weight = x = 1000 per unit of scale: finite in float16 (max 65504) from
    # scale 64 down, so the rule halves 2^16 ten times.
    scaler = loss_scaler(get_precision("amp-float16"), "cpu", lambda: model(x).sum(),
                         model.parameters())
    assert scaler is not None and scaler.get_scale() == 64.0
    assert all(p.grad is None for p in model.parameters())  # nothing left behind
    for name in ("float32", "amp-bfloat16"):
        assert loss_scaler(get_precision(name), "cpu", lambda: model(x).sum(),
                           model.parameters()) is None
