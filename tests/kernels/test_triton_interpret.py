"""Triton backend against e3nn float64, on tiny sizes (on CPU it runs in the slow
interpreter, ``TRITON_INTERPRET=1``, set in conftest.py)."""

from __future__ import annotations

import os

import pytest
import torch
from equibench.kernels import FusedConvolution, FusedTensorProduct
from equibench.kernels.graph import ConvPlan
from kernel_testing import (
    assert_close,
    conv_reference,
    mixed_descriptor,
    random_graph,
    random_inputs,
    tp_reference_grads,
)

from equibench.workloads import get_tp_workload

pytest.importorskip("triton")
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
if not torch.cuda.is_available() and not INTERPRET:
    pytest.skip("no GPU and the Triton interpreter is off", allow_module_level=True)

from equibench.kernels.tp_triton import triton_kernels  # noqa: E402

DEVICE = "cpu" if INTERPRET else "cuda"


@pytest.mark.parametrize("name", ["mixed", "nequip-water"])
def test_tp(name: str, dtype: torch.dtype) -> None:
    desc = (mixed_descriptor() if name == "mixed"
            else get_tp_workload(name).scaled(1 / 16).descriptor)
    k = triton_kernels(desc)
    x, y, w, g = random_inputs(desc, rows=3)
    ggx, ggy, ggw, _ = random_inputs(desc, rows=3, seed=1)
    out, grads, dd = tp_reference_grads(desc, x, y, w, g, ggx, ggy, ggw)
    c = [t.to(DEVICE, dtype) for t in (x, y, w, g, ggx, ggy, ggw)]
    assert_close(k.tp_forward(*c[:3]).cpu(), out, dtype, "forward")
    for got, ref, what in zip(k.tp_backward(c[3], *c[:3]), grads, "xyw", strict=True):
        assert_close(got.cpu(), ref, dtype, f"grad {what}")
    got_dd = k.tp_double_backward(c[3], *c[:3], *c[4:])
    for got, ref, what in zip(got_dd, dd, ["g", "x", "y", "w"], strict=True):
        assert_close(got.cpu(), ref, dtype, f"double backward d{what}")


def test_conv() -> None:
    _check_conv()


@pytest.mark.slow
def test_autotuning_trials_leave_the_outputs_as_one_launch_would(monkeypatch) -> None:
    """On a GPU the autotuner runs each configuration on the real buffers, and the
    convolutions add into theirs atomically: every trial must be undone (restore_value).
    Here the interpreter stands in for the GPU and a stand-in timer makes each trial run
    twice and ranks the configurations in the order tried (the first, 1 row per program,
    not the default 16, wins)."""
    from equibench.kernels import tp_triton

    trials = []

    def bench(kernel_call, quantiles):
        kernel_call()
        kernel_call()
        trials.append(kernel_call)
        return [float(len(trials))] * 3

    def fitting(configs, named_args, **kwargs):
        return [c for c in configs if c.kwargs["BZ"] * kwargs["BU"] <= 4096][:3]

    for kernel in (tp_triton._fwd, tp_triton._bwd_x, tp_triton._bwd_y, tp_triton._bwd_w):
        monkeypatch.setattr(kernel, "early_config_prune", fitting)
        monkeypatch.setitem(kernel.__dict__, "do_bench", bench)
        monkeypatch.setattr(kernel, "cache", {})
    _check_conv()
    assert len(trials) >= 3 * 4  # three configurations of each kernel were tried
    assert all(config.kwargs["BZ"] == 1 for kernel in (tp_triton._fwd, tp_triton._bwd_w)
               for config in kernel.cache.values())


def _check_conv() -> None:
    """The Triton convolution, forward, backward and double backward, against e3nn's."""
    desc = mixed_descriptor()
    k = triton_kernels(desc)
    src, dst = random_graph(5, 9, seed=2)
    plan = ConvPlan.build(src, dst, 5, 5)
    x, _, _, g = random_inputs(desc, rows=5)
    _, y, w, _ = random_inputs(desc, rows=9, seed=1)
    ggx, _, _, _ = random_inputs(desc, rows=5, seed=3)
    _, ggy, ggw, _ = random_inputs(desc, rows=9, seed=4)
    xr, yr, wr, gr = (t.clone().requires_grad_(True) for t in (x, y, w, g))
    ref = conv_reference(desc, xr, yr, wr, src, dst, 5)
    grads = torch.autograd.grad(ref, (xr, yr, wr), gr, create_graph=True)
    inner = sum((a * b).sum() for a, b in zip(grads, (ggx, ggy, ggw), strict=True))
    dd = torch.autograd.grad(inner, (gr, xr, yr, wr))
    f64 = torch.float64
    assert_close(k.conv_forward(x, y, w, plan), ref, f64, "conv forward")
    for got, r, what in zip(k.conv_backward(g, x, y, w, plan), grads, "xyw", strict=True):
        assert_close(got, r, f64, f"conv grad {what}")
    got_dd = k.conv_double_backward(g, x, y, w, ggx, ggy, ggw, plan)
    for got, r, what in zip(got_dd, dd, ["g", "x", "y", "w"], strict=True):
        assert_close(got, r, f64, f"conv double backward d{what}")


@pytest.mark.slow
def test_modules_create_graph() -> None:
    """Forces-style double differentiation through the ops with backend='triton'."""
    desc = mixed_descriptor()
    src, dst = random_graph(4, 6, seed=4)
    x, _, _, _ = random_inputs(desc, rows=4)
    _, y, w, _ = random_inputs(desc, rows=6, seed=1)

    def grads(backend: str) -> list[torch.Tensor]:
        conv, tp = FusedConvolution(desc, backend), FusedTensorProduct(desc, backend)
        xs, ys, ws = (t.clone().requires_grad_(True) for t in (x, y, w))
        energy = conv(xs, ys, ws, src, dst, 4).pow(2).sum() + tp(xs, ys[:4], ws[:4]).sum()
        (gy,) = torch.autograd.grad(energy, ys, create_graph=True)
        return [gy.detach(), *torch.autograd.grad(gy.pow(2).sum(), (xs, ws))]

    for got, ref in zip(grads("triton"), grads("cpu"), strict=True):
        assert_close(got, ref, torch.float64, "triton vs cpu")
