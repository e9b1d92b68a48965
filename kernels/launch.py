"""A Triton kernel launch described instead of run: what the compile check records.

The Triton wrappers (:mod:`.tp_triton`, :mod:`.sc_triton`) take a ``record`` callable; with
it they hand each launch here instead of running it, so their argument and grid logic runs
unchanged on a machine without a GPU (on ``meta`` tensors: shapes and dtypes, no data).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Grid = Callable[[dict[str, Any]], tuple[int, ...]]


@dataclass(frozen=True)
class Launch:
    """One launch: ``kernel`` (a ``triton.autotune`` d ``triton.jit`` function), the
    ``grid`` of a configuration's meta-parameters (``{"BZ": 16}`` -> ``(programs, slots)``),
    the positional ``args`` (tensors, ints, ``None``) and the ``constexprs`` passed by name
    (those the autotuner does not choose)."""

    kernel: Any
    grid: Grid
    args: tuple[Any, ...]
    constexprs: dict[str, Any] = field(default_factory=dict)


Record = Callable[[Launch], None]
