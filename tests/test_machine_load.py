"""What the machine did while a case was timed (equibench.machine_load)."""

import os
import time

import pytest
import torch

from equibench import machine_load
from equibench.machine_load import CpuTicks, Load

needs_proc = pytest.mark.skipif(machine_load.machine_ticks() is None,
                                reason="needs /proc/stat (Linux)")


def test_quiet_and_disturbed_slots():
    quiet = Load()
    # 100 ticks over the slot: the timed process used 90, the machine idled 10.
    quiet.add(CpuTicks(total=100, idle=10, steal=0), own=90)
    short = Load()
    short.add(CpuTicks(total=10, idle=0, steal=5), own=2)
    assert short.steal_fraction == 0.5 and short.disturbed() == ""  # too few ticks to judge
    assert quiet.disturbed() == "" and quiet.other_busy_fraction == 0
    busy = Load()
    busy.add(CpuTicks(total=100, idle=0, steal=20), own=40)
    assert busy.steal_fraction == pytest.approx(0.2)
    assert busy.other_busy_fraction == pytest.approx(0.4)
    # Rounding between slots cancels in the sums: one tick over, one tick under.
    rounded = Load()
    rounded.add(CpuTicks(total=4, idle=0, steal=0), own=3)
    rounded.add(CpuTicks(total=4, idle=0, steal=0), own=5)
    assert rounded.other_busy_fraction == 0
    assert busy.disturbed() == ("steal 20% of CPU time; other processes used 40% of CPU "
                                "time")
    assert set(busy.summary()) == {"steal_fraction", "other_busy_fraction", "ticks",
                                   "load_1min"}


@needs_proc
def test_a_slot_counts_the_timed_process_as_its_own():
    load = Load()
    with machine_load.Slot(os.getpid(), load):
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:  # this process is the timed one: busy, not other
            pass
    assert load.total > 0
    own = machine_load.process_ticks(os.getpid())
    assert own is not None and own > 0
    assert machine_load.process_ticks(2**22 + 12345) is None  # no such process


def test_slow_parallel_rounds_flag_the_group_whatever_its_ticks():
    usual, slow = 0.96, 1.9
    quarter = Load()
    quarter.parallel += [usual] * 6 + [slow, 1.6]
    assert quarter.disturbed() == ("parallel regions ran up to 1.9x slower than on one "
                                   "thread in 2 of 8 probes (one per case per round)")
    assert quarter.summary()["parallel_slowdown_max"] == 1.9
    assert quarter.summary()["parallel_probes"] == 8
    one = Load()
    one.parallel += [usual] * 7 + [slow]  # one round of eight: below the share
    assert one.disturbed() == ""
    assert Load().disturbed() == "" and "parallel_slowdown_max" not in Load().summary()


def test_the_parallel_probe_runs_on_two_threads_only():
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert machine_load.parallel_probe() is None  # nothing to compare on one thread
        torch.set_num_threads(4)
        assert machine_load.parallel_probe() is None  # the limit is not calibrated for 4
        torch.set_num_threads(2)
        probe = machine_load.parallel_probe()
        assert probe is not None and probe.threads == 2
        assert torch.get_num_threads() == 2  # the one-thread reference switched back
    finally:
        torch.set_num_threads(threads)


def test_the_probe_switches_threads_only_when_it_must_and_always_switches_back(monkeypatch):
    """torch.set_num_threads clears oneDNN's caches: the per-round probe on the process's
    own threads must not call it, and a failing probe must still restore the count."""
    calls: list[int] = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (calls.append(n), real(n)))
    threads = torch.get_num_threads()
    try:
        real(2)
        machine_load.probe_seconds(2)
        assert calls == []
        machine_load.probe_seconds(1)
        assert calls == [1, 2]

        def failing(*args):
            raise RuntimeError("probe failed")
        monkeypatch.setattr(torch, "mm", failing)
        with pytest.raises(RuntimeError, match="probe failed"):
            machine_load.probe_seconds(1)
        assert torch.get_num_threads() == 2 and calls == [1, 2, 1, 2]
    finally:
        real(threads)
