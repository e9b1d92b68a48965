"""Our symmetric contraction (generated kernels, CPU C++ and Triton in its interpreter)
is mace-torch's, in float64 to round-off: outputs, gradients in the features (forces)
and the second derivatives in the weights (training with forces), for the
OpenEquivariance-size MACE's product blocks (correlation 3, outputs up to 2e) and the
small model's; it shares the module's weights."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mace.modules", exc_type=ImportError)

from equibench.implementations.mace.models import VARIANTS, build_model  # noqa: E402
from equibench.implementations.mace.symmetric_contraction import (  # noqa: E402
    FusedSymmetricContraction,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("variant", ["oeq", "small"])
def test_matches_mace_torch_to_round_off(variant: str) -> None:
    check_against_mace_torch(variant, "cpu", nodes=1300)


def check_against_mace_torch(variant: str, backend: str, nodes: int) -> None:
    """Outputs and derivatives of ``variant``'s product blocks on ``backend`` against
    mace-torch's, float64, ``nodes`` nodes' columns."""
    model = build_model(VARIANTS[variant], (1, 6, 7, 8, 9), avg_num_neighbors=9.0, seed=3)
    generator = torch.Generator().manual_seed(0)
    for block in model.products:
        mace = block.symmetric_contractions
        ours = FusedSymmetricContraction(mace, backend)
        assert {id(p) for p in ours.parameters()} == {id(p) for p in mace.parameters()}
        n_ell = sum(ir.dim for _, ir in mace.irreps_in)
        # more columns than one thread's share of the CPU kernel
        x = torch.randn(nodes // mace.irreps_in[0].mul + 3, mace.irreps_in[0].mul, n_ell,
                        dtype=torch.float64, generator=generator)
        y = torch.nn.functional.one_hot(torch.randint(0, 5, (x.shape[0],),
                                                      generator=generator), 5).double()

        weights = [p for p in mace.parameters() if p.requires_grad]
        ours_d, mace_d = (_derivatives(module, x, y, weights) for module in (ours, mace))
        for got, want in zip(ours_d, mace_d, strict=True):
            assert got.shape == want.shape
            scale = want.abs().max().clamp_min(1.0)
            assert (got - want).abs().max() <= 1e-11 * scale


def _derivatives(module: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                 weights: list[torch.Tensor]) -> list[torch.Tensor]:
    """The output, its gradient in the features, and that gradient's in the weights."""
    features = x.clone().requires_grad_(True)
    out = module(features, y)
    (grad,) = torch.autograd.grad(out.square().sum(), features, create_graph=True)
    return [out, grad, *torch.autograd.grad(grad.square().sum(), weights)]
