"""Timing and peak memory of a callable, on CPU and on CUDA devices.

CPU: ``time.perf_counter`` around each call with a fixed torch thread count; adaptive
repeats stop once the interquartile range is under ``target_iqr`` of the median (after at
least ``min_repeats``) or when ``budget_s`` runs out. Peak memory is the growth of the
process's resident set over its baseline (``VmHWM`` after resetting it through
``/proc/self/clear_refs``) during one call made after timing, which is only meaningful in a
process of its own: the runner gives every case one. Which allocator serves a case
process (tcmalloc by default) is the runner's choice: see ``allocator``.

CUDA: CUDA events around each call, warm-up until two consecutive calls agree (compilation
and autotuning done), and an L2 flush (writing a buffer twice the L2 size) before each call,
outside the timed region. Peak memory from the caching allocator after
``reset_peak_memory_stats``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from equibench.allocator import release_free_memory


@dataclass(frozen=True)
class MeasureConfig:
    min_repeats: int = 5
    max_repeats: int = 200
    target_iqr: float = 0.05
    budget_s: float = 10.0
    warmup: int = 2


@dataclass
class Timing:
    samples: list[float] = field(default_factory=list)
    warmup_s: float = 0.0

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

    def converged(self, target: float) -> bool:
        return self.median > 0 and self.iqr / self.median < target


def _adaptive(one_call: Callable[[], float], cfg: MeasureConfig) -> Timing:
    timing = Timing()
    start = time.perf_counter()
    for _ in range(cfg.warmup):
        one_call()
    timing.warmup_s = time.perf_counter() - start
    deadline = time.perf_counter() + cfg.budget_s
    while len(timing.samples) < cfg.max_repeats:
        timing.samples.append(one_call())
        enough = len(timing.samples) >= cfg.min_repeats
        if enough and (timing.converged(cfg.target_iqr) or time.perf_counter() > deadline):
            break
        # Always take the minimum repeats, but never run far past the budget for them.
        if len(timing.samples) >= 3 and time.perf_counter() > deadline + cfg.budget_s:
            break
    return timing


def time_cpu(fn: Callable[[], object], cfg: MeasureConfig) -> Timing:
    def one_call() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return _adaptive(one_call, cfg)


class _L2Flusher:
    def __init__(self, device: torch.device) -> None:
        props = torch.cuda.get_device_properties(device)
        l2 = getattr(props, "L2_cache_size", 64 * 2**20) or 64 * 2**20
        self.buffer = torch.empty(2 * l2 // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        self.buffer.zero_()


def time_cuda(fn: Callable[[], object], cfg: MeasureConfig, device: torch.device) -> Timing:
    flush = _L2Flusher(device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def one_call() -> float:
        flush()
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    # Warm up until compilation/autotuning has settled: two calls within 10% of each other.
    previous = one_call()
    for _ in range(50):
        current = one_call()
        if abs(current - previous) <= 0.1 * previous:
            break
        previous = current
    return _adaptive(one_call, cfg)


def time_call(fn: Callable[[], object], cfg: MeasureConfig, device: str) -> Timing:
    if device.startswith("cuda"):
        return time_cuda(fn, cfg, torch.device(device))
    return time_cpu(fn, cfg)


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
    """Peak extra memory of one call of ``fn`` in bytes, and how it was measured.

    On CPU, call it last in a case's process (see :func:`allocator.release_free_memory`).
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
