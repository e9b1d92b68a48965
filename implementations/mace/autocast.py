"""Automatic mixed precision for mace-torch's e3nn modules on a CPU.

``torch.autocast`` casts only the ops on its lists, and those lists differ by device. e3nn's
``o3.Linear`` (MACE's linear layers, its product basis's linear and its readouts)
contracts with ``aten::tensordot``. CUDA autocast has ``tensordot`` on its "promote" list
(the op runs in the widest dtype of its inputs); CPU autocast has it on no list, so there
it meets a lower-precision activation (the output of a matmul autocast did cast) and
float32 weights, and raises "both inputs should have same dtype". :func:`extend` gives CPU
autocast CUDA's policy for ``tensordot``: inside an autocast region its floating-point
inputs are cast to the widest of their dtypes; outside one nothing changes.
"""

from __future__ import annotations

import functools

import torch

_OPS = ("tensordot",)


def describe(backend: str) -> str:
    """What a row of ``backend`` under autocast ran in lower precision (``extra.autocast``)."""
    text = ("torch.autocast; aten::tensordot (e3nn o3.Linear) promoted to its widest input "
            "dtype, as CUDA autocast does (float32 here)")
    if backend == "fused":
        from equibench.kernels import ops

        text += f"; {ops.AUTOCAST}; the sparse symmetric contraction in float32 too"
    return text


def _promote(op: torch._ops.OpOverload):
    """A CPU autocast kernel for ``op``: floating-point tensors to their widest dtype, then
    ``op`` below the autocast dispatch key."""
    below = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def kernel(*args, **kwargs):
        floats = [v for v in (*args, *kwargs.values())
                  if isinstance(v, torch.Tensor) and v.is_floating_point()]
        widest = functools.reduce(torch.promote_types, (t.dtype for t in floats))

        def cast(value):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                return value.to(widest)
            return value

        with torch._C._ExcludeDispatchKeyGuard(below):
            return op(*map(cast, args), **{k: cast(v) for k, v in kwargs.items()})

    return kernel


@functools.cache
def extend() -> torch.library.Library:
    """Register the CPU autocast kernels (once per process; the library is kept alive)."""
    library = torch.library.Library("aten", "IMPL")
    for name in _OPS:
        library.impl(name, _promote(getattr(torch.ops.aten, name).default), "AutocastCPU")
    return library
