"""Timing and peak memory of a callable, on CPU and on CUDA devices.

A case is timed in ``rounds``: the runner interleaves the rounds of every implementation of
one comparison (``equibench.interleave``), so that a slow minute of a shared machine hits
all of them alike. Within a round a case makes at least ``calls_min`` and at most
``calls_max`` calls, and stops once the round's share of ``budget_s`` is spent; the round's
median is its sample for paired ratios.

CPU: ``time.perf_counter`` around each call with a fixed torch thread count. Peak memory is
measured two ways, each on calls made after timing:

- live tensor bytes (:func:`peak_tensor_memory`): the highest sum of the bytes torch's CPU
  allocator handed out during one call less those it took back, from the profiler's memory
  events. It counts what the call asks for, whichever ``malloc`` serves it, so it is the
  figure memory ratios compare. It misses memory that bypasses torch's allocator (BLAS
  buffers, a C++ kernel's own scratch: our convolution kernels take theirs from torch, see
  ``kernels.cpu_build.conv_workspace``) and allocations made on intra-op worker threads,
  which the profiler does not follow.
- resident-set growth (:func:`peak_memory`): the process's resident set over its baseline
  (``VmHWM`` after resetting it through ``/proc/self/clear_refs``), which sees everything
  but also how the allocator maps and reuses pages, so it moves with the allocator and
  between runs. Only meaningful in a process of its own: the runner gives every case one.
  Which allocator serves a case process (tcmalloc by default) is the runner's choice: see
  ``allocator``.

CUDA: CUDA events around each call, warm-up until two consecutive calls agree (compilation
and autotuning done), and an L2 flush (writing a buffer twice the L2 size) before each call,
outside the timed region. Peak memory from the caching allocator after
``reset_peak_memory_stats``, which is live tensor bytes already.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import MEMORY_EVENT_NAME

from equibench.allocator import release_free_memory
from equibench.schema import defaults

_DEFAULTS = defaults()["measure"]  # workflows/config/schema.yaml holds every default


@dataclass(frozen=True)
class MeasureConfig:
    """How much to time each case.

    ``min_repeats``/``max_repeats`` bound the timed calls of a case over all its rounds and
    ``budget_s`` is the time it may spend on them; ``warmup`` untimed calls follow the
    first (gated) call.
    """

    min_repeats: int = _DEFAULTS["min_repeats"]
    max_repeats: int = _DEFAULTS["max_repeats"]
    budget_s: float = _DEFAULTS["budget_s"]
    warmup: int = _DEFAULTS["warmup"]
    rounds: int = _DEFAULTS["rounds"]
    # Profile a model's call by category after timing (Bench.profile).
    breakdown: bool = _DEFAULTS["breakdown"]

    def __post_init__(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"measure.rounds must be >= 1, got {self.rounds}")
        if self.max_repeats < self.min_repeats:
            raise ValueError(f"measure.max_repeats ({self.max_repeats}) is below min_repeats "
                             f"({self.min_repeats})")

    @property
    def round_plan(self) -> RoundPlan:
        """The calls of one round: the repeat bounds and the budget shared among rounds."""
        return RoundPlan(
            calls_min=max(1, math.ceil(self.min_repeats / self.rounds)),
            calls_max=max(1, self.max_repeats // self.rounds),
            budget_s=self.budget_s / self.rounds,
        )


@dataclass(frozen=True)
class RoundPlan:
    calls_min: int
    calls_max: int
    budget_s: float


@dataclass
class Timing:
    """Every timed call of a case, grouped by round."""

    rounds: list[list[float]] = field(default_factory=list)
    warmup_s: float = 0.0

    @property
    def samples(self) -> list[float]:
        return [s for r in self.rounds for s in r]

    @property
    def round_medians(self) -> list[float]:
        return [float(np.median(r)) for r in self.rounds]

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def iqr(self) -> float:
        q1, q3 = np.percentile(self.samples, [25, 75])
        return float(q3 - q1)

    @property
    def repeats(self) -> int:
        return len(self.samples)


def time_round(one_call: Callable[[], float], plan: RoundPlan) -> list[float]:
    """One round: at least ``calls_min`` calls, then more until the round's budget is spent
    or ``calls_max`` calls were made."""
    samples: list[float] = []
    deadline = time.perf_counter() + plan.budget_s
    while len(samples) < plan.calls_max:
        samples.append(one_call())
        if len(samples) >= plan.calls_min and time.perf_counter() >= deadline:
            break
    return samples


class _L2Flusher:
    def __init__(self, device: torch.device) -> None:
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 64 * 2**20) or 64 * 2**20
        self.buffer = torch.empty(2 * l2 // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def _cpu_timer(fn: Callable[[], object]) -> Callable[[], float]:
    def one_call() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return one_call


def _cuda_timer(fn: Callable[[], object], device: torch.device) -> Callable[[], float]:
    flush = _L2Flusher(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def one_call() -> float:
        flush()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    return one_call


def call_timer(fn: Callable[[], object], cfg: MeasureConfig, device: str
               ) -> tuple[Callable[[], float], float]:
    """A function that times one call of ``fn``, and the seconds its warm-up took.

    Warm-up: ``cfg.warmup`` calls; on CUDA, then more until two consecutive calls agree
    within 10% (compilation and autotuning have settled).
    """
    if device.startswith("cuda"):
        one_call = _cuda_timer(fn, torch.device(device))
    else:
        one_call = _cpu_timer(fn)
    start = time.perf_counter()
    for _ in range(cfg.warmup):
        one_call()
    if device.startswith("cuda"):
        previous = one_call()
        for _ in range(50):
            current = one_call()
            if abs(current - previous) <= 0.1 * previous:
                break
            previous = current
    return one_call, time.perf_counter() - start


def _status_kib(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field_name} missing from /proc/self/status")


def rss_available() -> bool:
    try:
        _status_kib("VmHWM")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def peak_memory(fn: Callable[[], object], device: str) -> tuple[int, str]:
    """Peak extra memory of one call of ``fn`` in bytes, and how it was measured: on CPU
    the resident set's growth, on CUDA the caching allocator's peak.

    On CPU, call it after timing, in a case's own process: it changes how glibc allocates
    from then on (see :func:`allocator.release_free_memory`).
    """
    if device.startswith("cuda"):
        dev = torch.device(device)
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        fn()
        torch.cuda.synchronize(dev)
        return int(torch.cuda.max_memory_allocated(dev) - base), "cuda_allocator"
    if not rss_available():
        return -1, "unavailable"
    release_free_memory()
    base = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current RSS
    fn()
    return max(0, _status_kib("VmHWM") - base) * 1024, "rss_growth"


# The devices whose memory events come from torch's CPU allocator (MKLDNN/IDEEP tensors are
# CPU memory under another name), as the profiler itself counts them.
_CPU_MEMORY = (DeviceType.CPU, DeviceType.MKLDNN, DeviceType.IDEEP)


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """File descriptor 2 points at /dev/null in the block (C++ code writes there directly)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _allocations(fn: Callable[[], object]) -> list[int]:
    """The bytes torch's CPU allocator handed out (+) and took back (-) during one call of
    ``fn``, in order. A block allocated before any profiling is never in the list: the
    allocator learns a block's size only while profiling."""
    profiler = torch.autograd.profiler.profile(use_cpu=True, profile_memory=True)
    # Kineto prints a line to stderr at each start and stop (its level is fixed at its first
    # use, often a model's breakdown), and the allocator warns once of freeing a block
    # allocated before profiling: two lines of noise per case. The call itself ran many
    # times before, so nothing it prints is new, and its errors still raise.
    with _stderr_silenced(), profiler:
        fn()
    events = [e for e in profiler.kineto_results.events()
              if e.name() == MEMORY_EVENT_NAME and e.device_type() in _CPU_MEMORY]
    return [e.nbytes() for e in sorted(events, key=_start)]


def _start(event: object) -> float:
    """A profiler event's start: in ns; the DGL environment's torch 2.2 has only µs, and
    sorting is stable, so events of one microsecond keep the profiler's order."""
    return event.start_ns() if hasattr(event, "start_ns") else event.start_us() * 1e3


def peak_tensor_memory(fn: Callable[[], object], device: str) -> tuple[int, str]:
    """Peak of the live tensor bytes one call of ``fn`` adds, and how it was measured.

    On CPU: two calls under the profiler, the first unmeasured. The allocator reports a free
    only for blocks allocated while profiling, so the first call registers what the second
    frees (a training step's previous gradients, the previous call's outputs); the second's
    running sum of allocations and frees then starts from what is live at its start, as
    CUDA's ``max_memory_allocated`` less ``memory_allocated`` does. On CUDA: the caching
    allocator's figure (:func:`peak_memory`).
    """
    if device.startswith("cuda"):
        return peak_memory(fn, device)
    _allocations(fn)
    live = peak = 0
    for nbytes in _allocations(fn):
        live += nbytes
        peak = max(peak, live)
    return peak, "torch_profiler"
