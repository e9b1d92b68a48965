"""e3nn, the reference implementation, eager and under ``torch.compile``."""

from __future__ import annotations

import functools

import torch

from equibench.cases import Case
from equibench.convolution import gather_tp_scatter
from equibench.registry import (
    DEFAULT_VARIANT,
    CodePath,
    ConvFunction,
    Implementation,
    TPFunction,
    Variant,
    register,
)
from equibench.workloads import TPProblem

# e3nn's own JIT (TorchScript), a variant at the tp and conv levels.
JIT = "jit"


def _conv_from_tp(tp: TPFunction) -> ConvFunction:
    """Gather source features, apply the product per edge, scatter-sum to destinations."""
    return functools.partial(gather_tp_scatter, tp)


@register
class E3nn(Implementation):
    name = "e3nn"
    levels = frozenset({"tp", "conv"})
    description = "e3nn o3.TensorProduct, eager PyTorch; conv = TP + index_add"
    precisions = frozenset({"float64", "float32", "tfloat32", "bfloat16", "float16"})
    variants = {JIT: Variant(
        "the product compiled by e3nn's own JIT, e3nn.util.jit.compile (TorchScript, "
        "deprecated as of PyTorch 2.11), when built")}

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT) -> TPFunction:
        module = problem.e3nn_module(dtype).to(device)
        if variant == JIT:
            from e3nn.util.jit import compile as e3nn_jit

            return e3nn_jit(module)
        return module

    def build_conv(self, problem: TPProblem, dtype: torch.dtype, device: str,
                   variant: str = DEFAULT_VARIANT) -> ConvFunction:
        return _conv_from_tp(self.build_tp(problem, dtype, device, variant))

    def code_path(self, built: object, device: str) -> CodePath:
        if isinstance(getattr(built, "args", (built,))[0], torch.jit.ScriptModule):
            return CodePath("e3nn o3.TensorProduct scripted by e3nn.util.jit.compile "
                            "(TorchScript)")
        return super().code_path(built, device)


@register
class E3nnCompiled(E3nn):
    name = "e3nn-compiled"
    description = ("e3nn o3.TensorProduct under torch.compile (inductor); compile time in "
                   "extra.first_call_s")
    variants = {}

    def supports(self, case: Case) -> str | None:
        if case.direction == "double_backward":
            return "torch.compile (aot_autograd) does not support double backward"
        return None

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT) -> TPFunction:
        # Donated buffers forbid create_graph=True, which double backward needs.
        torch._functorch.config.donated_buffer = False
        # Static shapes: every case runs in a process of its own at one batch size, and a
        # static graph compiles ~4x faster than a dynamic one (nequip-benzene-1parity forward and
        # backward from a cold cache: 11 s against 41 s), which dominated the quick run.
        return torch.compile(super().build_tp(problem, dtype, device), dynamic=False)

    def build_conv(self, problem: TPProblem, dtype: torch.dtype, device: str,
                   variant: str = DEFAULT_VARIANT) -> ConvFunction:
        return torch.compile(_conv_from_tp(super().build_tp(problem, dtype, device)),
                             dynamic=False)

    def code_path(self, built: object, device: str) -> CodePath:
        return CodePath("e3nn o3.TensorProduct compiled by torch.compile (inductor, static "
                        "shapes)")
