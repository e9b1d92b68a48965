"""``e3nn-slowed``: the e3nn implementation plus a set delay per call, a planted regression.

``benchmarks/noise.py`` loads it as a plugin (``benchmarks/`` on ``PYTHONPATH``, plugin
module ``slowed_e3nn``) to check that ``equibench compare`` flags a known slow-down, and
only it, and how close the measured slow-down comes to the planted one. The delay, in
milliseconds, is read from ``EQUIBENCH_SLOWED_MS`` when a case is built (0 when unset: an
unslowed twin of e3nn).
"""

from __future__ import annotations

import os
import time

import torch

from equibench import registry
from equibench.registry import (
    DEFAULT_VARIANT,
    ConvFunction,
    Implementation,
    TPFunction,
    register,
)
from equibench.workloads import TPProblem

DELAY_VARIABLE = "EQUIBENCH_SLOWED_MS"


def _delay_s() -> float:
    return float(os.environ.get(DELAY_VARIABLE, "0")) / 1e3


@register
class SlowedE3nn(Implementation):
    name = "e3nn-slowed"
    levels = frozenset({"tp", "conv"})
    description = f"e3nn, sleeping ${DELAY_VARIABLE} ms in every call (a planted regression)"

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT) -> TPFunction:
        inner, delay = registry.get("e3nn").build_tp(problem, dtype, device), _delay_s()

        def slowed(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            if delay:  # sleep(0) is still a syscall that may yield the CPU
                time.sleep(delay)
            return inner(x, y, w)

        return slowed

    def build_conv(self, problem: TPProblem, dtype: torch.dtype, device: str,
                   variant: str = DEFAULT_VARIANT) -> ConvFunction:
        inner, delay = registry.get("e3nn").build_conv(problem, dtype, device), _delay_s()

        def slowed(*args):
            if delay:  # sleep(0) is still a syscall that may yield the CPU
                time.sleep(delay)
            return inner(*args)

        return slowed
