"""OpenEquivariance (Bharadwaj et al., arXiv 2501.13986): JIT-generated CUDA/HIP kernels.

Untested beyond ``available``: OpenEquivariance has no CPU backend and does not even import
without a GPU (``AssertionError: Only CUDA and HIP backends are supported``), so this adapter is
written to its documented API (README, docstrings of ``TensorProduct`` and
``TensorProductConv``, openequivariance >= 0.4) and kept small:

- ``oeq.TPProblem`` takes e3nn's irreps and instructions, with ``irrep_dtype``/``weight_dtype``
  as numpy float32 or float64 (its only precisions);
- ``oeq.TensorProduct(problem)(x, y, w)`` is e3nn's forward, ``(B, d1), (B, d2),
  (B, weight_numel) -> (B, d_out)``, with backward and double backward registered;
- ``oeq.TensorProductConv(problem, deterministic=False)(x, y, w, rows, cols)`` computes
  ``z_i = sum_{(i, j, e)} W_e (x_j (x) y_e)`` with ``rows`` the receivers (``edge_dst``) and
  ``cols`` the senders (``edge_src``); ``deterministic=False`` uses atomics and takes edges in any
  order, as the benchmark's graphs come;
- weights equal e3nn's for ``uvu`` with multiplicity 1 in the second input, and are "a
  well-defined reordering" otherwise (``uvw``): ``reorder_weights_from_e3nn`` applied once to
  an ``arange`` probe gives that permutation, and the call gathers ``w[:, perm]`` (part of the
  timed call; autograd returns the weight gradient in e3nn's order) when it is not the identity.
"""

from __future__ import annotations

import torch

from equibench.registry import (
    DEFAULT_VARIANT,
    ConvFunction,
    Implementation,
    TPFunction,
    Unsupported,
    register,
)
from equibench.workloads import TPProblem

NO_CPU = "OpenEquivariance ships GPU-only JIT kernels (CUDA/HIP); no CPU backend"


def oeq_problem(problem: TPProblem, dtype: torch.dtype):
    """``problem`` as an ``oeq.TPProblem`` with per-sample weights in ``dtype``."""
    import numpy as np
    import openequivariance as oeq

    np_dtype = {torch.float32: np.float32, torch.float64: np.float64}.get(dtype)
    if np_dtype is None:
        raise Unsupported(f"OpenEquivariance computes in float32 or float64, not {dtype}")
    return oeq.TPProblem(
        problem.irreps_in1, problem.irreps_in2, problem.irreps_out, list(problem.instructions),
        shared_weights=False, internal_weights=False, irrep_dtype=np_dtype, weight_dtype=np_dtype,
    )


def weight_permutation(module, weight_numel: int, device: str) -> torch.Tensor | None:
    """Indices ``perm`` with ``w_oeq = w_e3nn[:, perm]``, or None if the orders agree."""
    probe = torch.arange(weight_numel, dtype=torch.float64)[None]
    perm = module.reorder_weights_from_e3nn(probe, has_batch_dim=True)[0].round().long()
    if torch.equal(perm, torch.arange(weight_numel)):
        return None
    return perm.to(device)


def _reorder(w: torch.Tensor, perm: torch.Tensor | None) -> torch.Tensor:
    return w if perm is None else w[:, perm]


@register
class OpenEquivariance(Implementation):
    name = "openequivariance"
    levels = frozenset({"tp", "conv"})
    description = (
        "OpenEquivariance JIT CUDA/HIP kernels; conv = fused TensorProductConv (atomic scatter)"
    )
    precisions = frozenset({"float64", "float32"})

    def available(self, device: str) -> str | None:
        if not device.startswith("cuda"):
            return NO_CPU
        try:
            import openequivariance  # noqa: F401
        except Exception as err:  # noqa: BLE001 - it raises AssertionError without a GPU
            return f"openequivariance does not import: {type(err).__name__}: {err}"
        return None

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT) -> TPFunction:
        import openequivariance as oeq

        tp = oeq.TensorProduct(oeq_problem(problem, dtype))
        perm = weight_permutation(tp, problem.weight_numel, device)

        def fn(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            return tp(x, y, _reorder(w, perm))

        return fn

    def build_conv(self, problem: TPProblem, dtype: torch.dtype, device: str,
                   variant: str = DEFAULT_VARIANT) -> ConvFunction:
        import openequivariance as oeq

        conv = oeq.TensorProductConv(oeq_problem(problem, dtype), deterministic=False)
        perm = weight_permutation(conv, problem.weight_numel, device)

        def fn(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, edge_src: torch.Tensor,
               edge_dst: torch.Tensor, num_nodes: int) -> torch.Tensor:
            # Its output has one row per row of x, so x must hold all num_nodes nodes.
            return conv(x, y, _reorder(w, perm), edge_dst, edge_src)

        return fn
