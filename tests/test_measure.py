import time

import numpy as np
import pytest
import torch

from equibench.measure import MeasureConfig, Timing, peak_memory, rss_available, time_cpu


def test_timing_statistics():
    t = Timing(samples=[1.0, 2.0, 3.0, 4.0, 5.0])
    assert t.median == 3.0
    assert t.iqr == pytest.approx(2.0)
    assert t.repeats == 5
    assert not t.converged(0.05)


def test_adaptive_repeats_stop_when_stable():
    cfg = MeasureConfig(min_repeats=5, max_repeats=500, target_iqr=0.5, budget_s=5.0, warmup=1)
    timing = time_cpu(lambda: time.sleep(0.002), cfg)
    assert 5 <= timing.repeats < 500
    assert timing.converged(0.5)
    assert 0.0015 < timing.median < 0.05


def test_adaptive_repeats_respect_budget():
    rng = np.random.default_rng(0)
    # Wildly noisy: never converges, so only the budget stops it.
    cfg = MeasureConfig(min_repeats=3, max_repeats=10_000, target_iqr=1e-9, budget_s=0.3)
    start = time.perf_counter()
    timing = time_cpu(lambda: time.sleep(float(rng.uniform(0, 0.01))), cfg)
    assert time.perf_counter() - start < 2.0
    assert timing.repeats >= 3


@pytest.mark.skipif(not rss_available(), reason="needs /proc/self/clear_refs (Linux)")
def test_rss_peak_sees_a_large_temporary():
    size = 256 * 2**20

    def allocate():
        buf = torch.ones(size, dtype=torch.uint8)
        return int(buf[::4096].sum())

    peak, method = peak_memory(allocate, "cpu")
    assert method == "rss_growth"
    assert 0.9 * size < peak < 1.5 * size
