"""IrrepsLinear: e3nn's o3.Linear as one matrix product per output irrep, same function."""

from __future__ import annotations

import pytest
import torch
from e3nn import o3
from equibench.implementations.mace.linear import IrrepsLinear

# MACE's interaction linear after a channel-wise product (several inputs per output irrep,
# in mixed order), an output irrep no input reaches, multiplicities that differ, and
# explicit instructions whose outputs read overlapping runs of inputs (one output's run
# cut in two by another's edge).
CASES = [
    ("16x0e+16x1o+16x0e+16x2e+16x1o", "8x0e+8x1o+8x2e", None),
    ("16x0e+16x1o", "8x0e+8x1o+4x2e", None),
    ("5x0e+3x1o", "7x0e+2x1o", None),
    ("4x0e+3x0e+4x0e", "4x0e+5x0e", [(0, 0), (1, 0), (1, 1), (2, 1)]),
]


@pytest.mark.parametrize(("irreps_in", "irreps_out", "instructions"), CASES)
def test_same_function_and_derivatives_as_e3nn(
        irreps_in: str, irreps_out: str, instructions: list[tuple[int, int]] | None) -> None:
    torch.manual_seed(0)
    lin = o3.Linear(irreps_in, irreps_out, instructions=instructions).to(torch.float64)
    ours = IrrepsLinear(lin)
    assert ours.weight is lin.weight
    assert ours.state_dict().keys() == lin.state_dict().keys()
    x = torch.randn(5, 3, lin.irreps_in.dim, dtype=torch.float64, requires_grad=True)
    results = []
    for module in (lin, ours):
        out = module(x)
        gx, gw = torch.autograd.grad(out.sin().sum(), (x, lin.weight), create_graph=True)
        ggx, ggw = torch.autograd.grad((gx.square().sum() + gw.square().sum()),
                                       (x, lin.weight))
        results.append((out, gx, gw, ggx, ggw))
    assert results[1][0].shape == results[0][0].shape == (5, 3, lin.irreps_out.dim)
    for got, want in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_runs_in_the_weights_dtype_under_autocast() -> None:
    lin = o3.Linear("8x0e+8x1o", "8x0e+8x1o")
    x = torch.randn(4, lin.irreps_in.dim)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = IrrepsLinear(lin)(x.bfloat16())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, lin(x.bfloat16().float()))


def test_refuses_what_it_does_not_compute() -> None:
    with pytest.raises(TypeError, match="biases"):
        IrrepsLinear(o3.Linear("4x0e", "4x0e", biases=True))
    with pytest.raises(TypeError, match="shared internal weights"):
        IrrepsLinear(o3.Linear("4x0e", "4x0e", shared_weights=False))
