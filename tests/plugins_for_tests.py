"""Deliberately broken or instrumented implementations, imported as a plugin by the tests."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path

import torch

from equibench.registry import DEFAULT_VARIANT, Implementation, register
from equibench.workloads import TPProblem


@register
class Wrong(Implementation):
    """The e3nn product, one percent off: the gate must catch it."""

    name = "test-wrong"
    levels = frozenset({"tp"})

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT):
        module = problem.e3nn_module(dtype).to(device)
        return lambda x, y, w: module(x, y, w) * 1.01


@register
class Crash(Implementation):
    """Kills its own process with SIGSEGV, as a faulty native kernel would."""

    name = "test-crash"
    levels = frozenset({"tp"})

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT):
        os.kill(os.getpid(), signal.SIGSEGV)


@register
class OutOfMemory(Implementation):
    """Asks for far more memory than any machine has."""

    name = "test-oom"
    levels = frozenset({"tp"})

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT):
        def huge(x, y, w):
            return torch.empty(2**62, dtype=torch.uint8)

        return huge


@register
class Missing(Implementation):
    name = "test-missing"
    levels = frozenset({"tp"})

    def available(self, device: str) -> str | None:
        return "the test-missing library is not installed"


# Where the logged implementations append the time of each call, one file each.
CALL_LOG_DIR = Path(tempfile.gettempdir()) / "equibench-test-calls"


class _Logged(Implementation):
    """The e3nn product, logging the monotonic time of each call (and sleeping
    ``delay_s`` in it), so that a test can see the order in which cases were timed."""

    levels = frozenset({"tp"})
    delay_s = 0.0

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT):
        module = problem.e3nn_module(dtype).to(device)
        log = CALL_LOG_DIR / f"{self.name}.log"

        def logged(x, y, w):
            with open(log, "a") as f:
                f.write(f"{time.monotonic()}\n")
            time.sleep(self.delay_s)
            return module(x, y, w)

        return logged


@register
class LoggedA(_Logged):
    name = "test-log-a"


@register
class LoggedB(_Logged):
    name = "test-log-b"


@register
class LoggedSlow(_Logged):
    name = "test-log-slow"
    delay_s = 0.005


@register
class WrongForwardOnly(Implementation):
    """The e3nn product plus a constant: every gradient is right, the output is not."""

    name = "test-offset"
    levels = frozenset({"tp"})

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT):
        module = problem.e3nn_module(dtype).to(device)
        return lambda x, y, w: module(x, y, w) + 0.01


@register
class Drifting(Implementation):
    """Right for its first three calls (the gate and the equivariance check), then 1% off:
    state that drifts over repeated calls."""

    name = "test-drift"
    levels = frozenset({"tp"})

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT):
        module = problem.e3nn_module(dtype).to(device)
        calls = []

        def drifting(x, y, w):
            calls.append(1)
            return module(x, y, w) * (1.01 if len(calls) > 3 else 1.0)

        return drifting


# A kernel registered as a custom operator without a fake (meta) implementation, as many
# native kernels are: eager runs it, torch.compile and torch.export cannot trace it.
@torch.library.custom_op("equibench_tests::untraceable_scale", mutates_args=())
def _untraceable_scale(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@register
class Untraceable(Implementation):
    """The e3nn product through an operator that has no fake implementation: correct in
    eager mode, unusable under torch.compile and torch.export."""

    name = "test-untraceable"
    levels = frozenset({"tp"})

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT):
        module = problem.e3nn_module(dtype).to(device)
        return lambda x, y, w: _untraceable_scale(module(x, y, w))
