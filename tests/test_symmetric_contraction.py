"""Our sparse symmetric contraction is mace-torch's, in float64 to round-off: outputs,
gradients in the features (forces) and the second derivatives in the weights (training
with forces), for the OpenEquivariance-size MACE's product blocks (correlation 3, outputs
up to 2e) and the small model's; it shares the module's weights."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mace.modules", exc_type=ImportError)

from equibench.implementations.mace.models import VARIANTS, build_model  # noqa: E402
from equibench.implementations.mace.symmetric_contraction import (  # noqa: E402
    SparseSymmetricContraction,
)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("variant", ["oeq", "small"])
def test_matches_mace_torch_to_round_off(variant: str) -> None:
    model = build_model(VARIANTS[variant], (1, 6, 7, 8, 9), avg_num_neighbors=9.0, seed=3)
    generator = torch.Generator().manual_seed(0)
    for block in model.products:
        mace = block.symmetric_contractions
        ours = SparseSymmetricContraction(mace)
        assert {id(p) for p in ours.parameters()} == {id(p) for p in mace.parameters()}
        n_ell = sum(ir.dim for _, ir in mace.irreps_in)
        # 1,300 nodes: more columns than one block of the sparse evaluation
        x = torch.randn(1300 // mace.irreps_in[0].mul + 3, mace.irreps_in[0].mul, n_ell,
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


def test_a_used_module_deep_copies() -> None:
    """After a call its cache holds sparse CSR matrices, which cannot be deep-copied: the
    copy (the MACE profile copies the model) starts without them and still computes."""
    import copy

    model = build_model(VARIANTS["small"], (1, 8), avg_num_neighbors=9.0, seed=3)
    mace = model.products[0].symmetric_contractions
    ours = SparseSymmetricContraction(mace)
    n_ell = sum(ir.dim for _, ir in mace.irreps_in)
    x = torch.randn(7, mace.irreps_in[0].mul, n_ell, dtype=torch.float64)
    y = torch.nn.functional.one_hot(torch.arange(7) % 2, 2).double()
    before = ours(x, y)
    clone = copy.deepcopy(ours)
    assert clone._sparse == {} and ours._sparse
    torch.testing.assert_close(clone(x, y), before, rtol=0, atol=0)
