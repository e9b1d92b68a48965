"""Fused Clebsch-Gordan tensor-product kernels (CPU C++ and Triton) for equibench.

Public API: :class:`TPDescriptor` (what to compute), :class:`FusedTensorProduct` and
:class:`FusedConvolution` (modules over ``torch.ops.equibench`` custom ops),
:class:`KernelUnavailable` (raised when a backend cannot run here).
"""

from .descriptor import TPDescriptor
from .errors import KernelUnavailable
from .modules import FusedConvolution, FusedTensorProduct

__all__ = ["FusedConvolution", "FusedTensorProduct", "KernelUnavailable", "TPDescriptor"]
