"""The CUDA branches of the harness, on a machine without a GPU: CUDA events and the L2
flush around each timed call, the warm-up until two calls agree, the caching allocator's
peak, the per-GPU lock, and the GPU's name, clocks, power limit and MIG mode in the
machine record.

Every CUDA call is replaced by a STUB (``Stub*`` below) that returns made-up values; what
is tested is the harness's use of them (order, arithmetic, parsing). None of these values
is, or is ever stored as, a GPU measurement.
"""

from __future__ import annotations

import subprocess
import threading
import time
from types import SimpleNamespace

import pytest
import torch

from equibench import devices, environment, measure
from equibench.measure import MeasureConfig


class StubEvent:
    """STUB of ``torch.cuda.Event``: a recorded event is a host time the test sets."""

    clock = [0.0]

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t: float | None = None

    def record(self) -> None:
        self.t = StubEvent.clock[0]

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: StubEvent) -> float:  # milliseconds, as CUDA's
        return (end.t - self.t) * 1e3


def test_cuda_timer_flushes_l2_and_times_between_events(monkeypatch) -> None:
    flushes = []
    monkeypatch.setattr(torch.cuda, "Event", StubEvent)
    monkeypatch.setattr(measure, "_L2Flusher", lambda device: lambda: flushes.append(
        StubEvent.clock[0]))
    durations = iter([0.050, 0.030, 0.020, 0.0101, 0.0100, 0.0099, 0.004])

    def call() -> None:  # the "kernel": advances the stub clock by its duration
        StubEvent.clock[0] += next(durations)

    one_call, _ = measure.call_timer(call, MeasureConfig(warmup=1), "cuda:0")
    # warm-up: 1 call, then until two consecutive calls agree within 10% (0.0101, 0.0100)
    assert len(flushes) == 5
    assert one_call() == pytest.approx(0.0099)  # seconds, from the events' milliseconds
    assert len(flushes) == 6  # the L2 is flushed before every timed call


def test_cuda_peak_memory_is_the_caching_allocators_peak_over_the_call(monkeypatch) -> None:
    calls = []
    state = {"allocated": 1000, "peak": 5000}

    def reset(device) -> None:
        calls.append("reset")
        state["peak"] = state["allocated"]

    def fn() -> None:  # allocates 700 bytes at its peak, then frees 200 of them
        calls.append("call")
        state["peak"] = state["allocated"] + 700
        state["allocated"] += 500

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: state["peak"])
    assert measure.peak_memory(fn, "cuda:0") == (700, "cuda_allocator")
    assert calls == ["sync", "reset", "call", "sync"]


def test_one_job_holds_a_gpu_at_a_time(tmp_path) -> None:
    """The lock is a real ``flock`` (no stub): a second holder waits for the first."""
    order = []
    first_in = threading.Event()

    def hold(name: str, wait: float) -> None:
        with devices.exclusive("cuda:0", tmp_path):
            order.append(f"{name} in")
            first_in.set()
            time.sleep(wait)
            order.append(f"{name} out")

    a = threading.Thread(target=hold, args=("a", 0.3))
    a.start()
    first_in.wait(5)
    b = threading.Thread(target=hold, args=("b", 0.0))
    b.start()
    a.join(5)
    b.join(5)
    assert order == ["a in", "a out", "b in", "b out"]
    with devices.exclusive("cpu", tmp_path):  # the CPU is never locked
        assert not list(tmp_path.glob("cpu*.lock"))


@pytest.mark.parametrize("answer,expected", [
    ("1980, 1980, 700.00, Disabled", (1980, 1980, 700.0, "Disabled")),
    ("345, 1410, 400.00, [N/A]", (345, 1410, 400.0, "")),
    ("[N/A], [N/A], [Not Supported], [N/A]", (-1, -1, None, "")),
])
def test_machine_record_names_the_gpu_its_clocks_and_power_limit(monkeypatch, answer,
                                                                 expected) -> None:
    queried = []

    def stub_run(args, **kwargs):  # STUB of nvidia-smi
        queried.append(args)
        out = answer if any("clocks.sm" in a for a in args) else "550.54.15"
        return subprocess.CompletedProcess(args, 0, stdout=out + "\n", stderr="")

    monkeypatch.setattr(environment.subprocess, "run", stub_run)
    # the compiler's answer is cached per process: the stub must not become it
    monkeypatch.setattr(environment, "_march_native", lambda: "")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "STUB GPU (not run)")
    env = environment.capture("cuda:1")
    assert env["gpu_name"] == "STUB GPU (not run)" and env["gpu_driver"] == "550.54.15"
    sm, max_sm, power, mig = expected
    assert (env["gpu_clock_sm_mhz"], env["gpu_clock_max_sm_mhz"], env["gpu_mig_mode"]) == (
        sm, max_sm, mig)
    assert (env["gpu_power_limit_w"] == power if power is not None
            else env["gpu_power_limit_w"] != env["gpu_power_limit_w"])  # NaN
    smi = [a for a in queried if any("clocks.sm" in x for x in a)][0]
    assert smi[-2:] == ["-i", "1"]  # the case's GPU, not GPU 0


def test_a_cpu_record_has_no_gpu_fields() -> None:
    env = environment.capture("cpu")
    assert (env["gpu_name"], env.get("gpu_clock_sm_mhz", -1)) == ("", -1)


def test_the_cuda_timer_needs_its_device_properties_for_the_flush(monkeypatch) -> None:
    """The L2 flush buffer is twice the L2 the device reports (STUB properties)."""
    made = []
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device: SimpleNamespace(L2_cache_size=50 * 2**20))
    monkeypatch.setattr(measure.torch, "empty",
                        lambda n, dtype, device: made.append((n, dtype, device)) or
                        torch.zeros(1))
    measure._L2Flusher(torch.device("cuda:0"))
    assert made == [(2 * 50 * 2**20 // 4, torch.float32, torch.device("cuda:0"))]
