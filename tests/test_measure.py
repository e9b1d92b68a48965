import time

import pytest
import torch

from equibench.cases import Case
from equibench.levels import Bench
from equibench.measure import (
    MeasureConfig,
    RoundPlan,
    Timing,
    call_timer,
    peak_memory,
    peak_tensor_memory,
    rss_available,
    time_round,
)
from equibench.precision import get_precision
from equibench.runner import _Session

MIB = 2**20


def test_timing_statistics():
    t = Timing(rounds=[[1.0, 2.0], [3.0], [4.0, 5.0]])
    assert t.median == 3.0 and t.samples == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert t.iqr == pytest.approx(2.0)
    assert t.repeats == 5
    assert t.round_medians == [1.5, 3.0, 4.5]


def test_round_plan_shares_repeats_and_budget_among_rounds():
    plan = MeasureConfig(min_repeats=7, max_repeats=70, budget_s=1.4, rounds=7).round_plan
    assert (plan.calls_min, plan.calls_max) == (1, 10)
    assert plan.budget_s == pytest.approx(0.2)
    # Fewer repeats than rounds: one call a round all the same.
    assert MeasureConfig(min_repeats=3, max_repeats=3, rounds=7).round_plan.calls_max == 1
    with pytest.raises(ValueError, match="rounds"):
        MeasureConfig(rounds=0)
    with pytest.raises(ValueError, match="max_repeats"):
        MeasureConfig(min_repeats=10, max_repeats=5)


def test_round_stops_at_its_budget_after_the_minimum_calls():
    start = time.perf_counter()
    samples = time_round(lambda: time.sleep(0.01) or 0.01,
                         RoundPlan(calls_min=2, calls_max=1000, budget_s=0.05))
    assert 2 <= len(samples) <= 10
    assert time.perf_counter() - start < 1.0
    # The minimum is taken even past the budget, and the maximum caps it.
    assert len(time_round(lambda: 0.0, RoundPlan(3, 1000, 0.0))) == 3
    assert len(time_round(lambda: 0.0, RoundPlan(1, 4, 10.0))) == 4


def test_call_timer_warms_up_then_times_one_call():
    calls = []
    one_call, warmup_s = call_timer(lambda: calls.append(time.sleep(0.002)),
                                    MeasureConfig(warmup=3), "cpu")
    assert len(calls) == 3 and warmup_s >= 0.006
    assert 0.0015 < one_call() < 0.05 and len(calls) == 4


@pytest.mark.skipif(not rss_available(), reason="needs /proc/self/clear_refs (Linux)")
def test_rss_peak_sees_a_large_temporary():
    size = 256 * 2**20

    def allocate():
        buf = torch.ones(size, dtype=torch.uint8)
        return int(buf[::4096].sum())

    peak, method = peak_memory(allocate, "cpu")
    assert method == "rss_growth"
    assert 0.9 * size < peak < 1.5 * size


def _temporary(nbytes: int):
    """A call that allocates ``nbytes`` and frees them before it returns."""
    def call() -> dict:
        buf = torch.ones(nbytes, dtype=torch.uint8)
        return {"y": buf[:1].float()}

    return call


def test_tensor_peak_counts_a_known_allocation():
    peak, method = peak_tensor_memory(_temporary(64 * MIB), "cpu")
    assert method == "torch_profiler"
    assert 64 * MIB <= peak < 65 * MIB  # the temporary, and a few scalars


def test_tensor_peak_starts_from_what_is_live_at_the_call():
    """A call that replaces the state it keeps (as a training step replaces its gradients)
    frees the previous state, allocated before profiling began: the unmeasured first call
    makes that free known, or the new state would count in full (96 MiB here)."""
    state = {"kept": torch.zeros(32 * MIB, dtype=torch.uint8)}

    def step() -> dict:
        state["kept"] = torch.zeros(32 * MIB, dtype=torch.uint8)
        return _temporary(64 * MIB)()

    peak, _ = peak_tensor_memory(step, "cpu")
    assert 64 * MIB <= peak < 65 * MIB


def test_kept_bytes_count_in_both_peaks():
    """Memory that amortized work keeps between calls (``Bench.kept_bytes``) belongs to
    every call's peak, live tensor bytes as resident ones."""
    kept = 5 * MIB
    bench = Bench(call=_temporary(64 * MIB), reference=dict, items=1, unit="calls",
                  kept_bytes=kept)
    # A training step: the after-timing gate, which needs a reference, is skipped.
    case = Case("model", "none", "none", "default", "train_step", "float32", 1, "cpu")
    session = _Session(case, get_precision("float32"), bench, lambda: 0.01,
                       Timing(rounds=[[0.01]]), 0.01, {}, "")
    row = session.finish("", "", {})
    assert row["peak_tensor_method"] == "torch_profiler"
    assert kept + 64 * MIB <= row["peak_tensor_bytes"] < kept + 65 * MIB
    assert row["peak_mem_bytes"] >= kept or row["peak_mem_method"] == "unavailable"
