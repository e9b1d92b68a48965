"""equibench's own fused kernels (``equibench.kernels``): generated C++ on CPU, Triton on GPU."""

from __future__ import annotations

import shutil

import torch

from equibench.registry import (
    CodePath,
    ConvFunction,
    Implementation,
    TPFunction,
    Unsupported,
    register,
)
from equibench.workloads import TPProblem


def _backend(device: str) -> str:
    return "triton" if device.startswith("cuda") else "cpu"


@register
class Fused(Implementation):
    name = "fused"
    levels = frozenset({"tp", "conv"})
    description = ("equibench kernels: CG sparsity unrolled at generation time, TP fused with "
                   "gather and segment-sum; C++/OpenMP on CPU, Triton on GPU")
    precisions = frozenset({"float64", "float32"})

    def available(self, device: str) -> str | None:
        try:
            import equibench.kernels  # noqa: F401
        except Exception as err:  # noqa: BLE001 - any import failure is a reason, not a crash
            return f"equibench.kernels cannot be imported: {type(err).__name__}: {err}"
        if device.startswith("cuda"):
            try:
                import triton  # noqa: F401
            except Exception as err:  # noqa: BLE001
                return f"the GPU backend needs triton: {err}"
        elif shutil.which("c++") is None and shutil.which("g++") is None:
            return "the CPU backend compiles generated C++ and no C++ compiler is on PATH"
        return None

    def _descriptor(self, problem: TPProblem):
        from equibench.kernels import TPDescriptor

        return TPDescriptor.from_e3nn(problem.irreps_in1, problem.irreps_in2,
                                      problem.irreps_out, list(problem.instructions))

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str) -> TPFunction:
        from equibench.kernels import FusedTensorProduct, KernelUnavailable

        try:
            return FusedTensorProduct(self._descriptor(problem), _backend(device))
        except KernelUnavailable as err:
            raise Unsupported(str(err)) from err

    def build_conv(self, problem: TPProblem, dtype: torch.dtype, device: str) -> ConvFunction:
        from equibench.kernels import FusedConvolution, KernelUnavailable

        try:
            return FusedConvolution(self._descriptor(problem), _backend(device))
        except KernelUnavailable as err:
            raise Unsupported(str(err)) from err

    def code_path(self, built: object, device: str) -> CodePath:
        backend = ("Triton kernels" if _backend(device) == "triton"
                   else "generated C++ kernels (OpenMP)")
        plan = ("; graph plan (CSR sort) built every call"
                if getattr(built, "reuse_plan", None) is False else "")
        return CodePath(f"equibench {backend}, torch.library custom ops{plan}")
