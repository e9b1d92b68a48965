"""What the machine did while a case was timed: steal time, other processes' CPU use, and
whether parallel regions ran at their usual speed.

A virtual machine's timings move with its neighbours: the hypervisor steals CPU time
(``steal`` in ``/proc/stat``) and other processes compete for the cores. Hardware counters
are not available on such VMs, so the runner reads the kernel's CPU accounting around each
timed slot instead and flags a case measured while the machine was disturbed (pyperf warns
the same way about unstable results).

Some VMs also switch, for tens of seconds to minutes, into a mode in which code on several
threads runs slower than on one, with no steal time and every vCPU fully busy (measured on
the 2-core CI VM, docs/measurement.md, "A disturbed machine"). A case process on two threads
therefore times a small in-cache matrix product on them after each round and compares it
with the same product on one thread, timed once before the case was warmed up
(:class:`ParallelProbe`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import ClassVar

import torch

# A group whose timed slots lost more than this share of the machine's CPU time to steal, or
# saw other processes use more than this share, was measured on a disturbed machine.
# Measured on the quiet 2-core VM: other processes' share 4-9% (median 7%) under `equibench
# run`, up to 17% (90th percentile) under Snakemake, whose own polling counts as other; one
# core kept busy by another program: 38%.
STEAL_LIMIT = 0.05
OTHER_BUSY_LIMIT = 0.20
# Ticks are 10 ms of one core: below this many in all (half a second of a 2-core machine)
# the count is too coarse to judge, and nothing is flagged.
MIN_TICKS = 100
# A round whose probe ran this much slower on two threads than on one was timed in the
# slow mode. Measured on the 2-core VM over 1,796 probes in 5 minutes: median 0.96x
# (p10-p90 0.95-0.98, at most 1.10x) in its usual mode, 1.84x (1.81-1.91, at least 1.49x)
# in the slow one, which 38% of the probes hit.
PARALLEL_LIMIT = 1.3
# The only thread count the limit was calibrated for. On more threads a product this small
# may be slower than on one in any mode (a 64 x 64 product split 16 ways is mostly
# synchronization), and every round would be flagged; such processes are not probed.
PROBE_THREADS = 2
# The group is flagged when at least this share of its probes (one per case per round)
# were slow.
PARALLEL_SHARE = 0.25


def probe_seconds(threads: int, repeats: int = 3) -> float:
    """Best of ``repeats`` runs of 50 products of 64 x 64 float32 matrices (in cache: about
    0.35 ms on one core of the CI VM) on ``threads`` threads."""
    a = torch.ones(64, 64)
    before = torch.get_num_threads()
    # torch.set_num_threads also resets MKL's dynamic threading and clears oneDNN's
    # primitive cache: called only when the count must change.
    if threads != before:
        torch.set_num_threads(threads)
    try:
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(50):
                torch.mm(a, a)
            best = min(best, time.perf_counter() - start)
    finally:
        if threads != before:
            torch.set_num_threads(before)
    return best


@dataclass
class ParallelProbe:
    """The probe of one case process: its one-thread time once, made before the case is
    warmed up (switching threads clears caches that warm-up then refills), then one ratio
    a round on the process's own threads, which switches nothing."""

    threads: ClassVar[int] = PROBE_THREADS
    single_s: float = field(init=False)

    def __post_init__(self) -> None:
        # One thread is the reference: it runs at the same speed in both modes. Best of 3,
        # as in the measurement that set PARALLEL_LIMIT (benchmarks/thread_modes.py).
        self.single_s = probe_seconds(1)

    def slowdown(self) -> float:
        """The probe's time on the process's threads over its time on one thread."""
        return probe_seconds(self.threads) / self.single_s


def parallel_probe() -> ParallelProbe | None:
    """A probe for this process, or None where it does not run on ``PROBE_THREADS``
    threads (one thread has nothing to see; more are not calibrated)."""
    return ParallelProbe() if torch.get_num_threads() == PROBE_THREADS else None


@dataclass(frozen=True)
class CpuTicks:
    """Machine-wide CPU time in clock ticks, all cores together (``/proc/stat``)."""

    total: int
    idle: int  # idle + iowait
    steal: int

    def __sub__(self, other: CpuTicks) -> CpuTicks:
        return CpuTicks(self.total - other.total, self.idle - other.idle,
                        self.steal - other.steal)


def machine_ticks() -> CpuTicks | None:
    """The ``cpu`` line of ``/proc/stat``; None where there is none (not Linux)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    # user nice system idle iowait irq softirq steal [guest guest_nice: inside user/nice]
    fields += [0] * (8 - len(fields))
    return CpuTicks(total=sum(fields[:8]), idle=fields[3] + fields[4], steal=fields[7])


def process_ticks(pid: int) -> int | None:
    """User + system CPU ticks of a process, all its threads together."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    # The command name may hold spaces: fields are counted after its closing parenthesis.
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])


@dataclass
class Load:
    """Accumulated CPU accounting over the timed slots of one case.

    Sums, not per-slot differences: ticks are sampled at the timer interrupt, so over a
    slot of a few milliseconds the machine's count and the process's count round apart by a
    tick either way, and clipping each slot's difference at zero would add up to a phantom
    load (measured: 8% median on a quiet VM).
    """

    total: int = 0
    steal: int = 0
    busy: int = 0
    own: int = 0
    # The parallel probe's ratio after each round of each case (none unless on two threads).
    parallel: list[float] = field(default_factory=list)

    def add(self, machine: CpuTicks, own: int) -> None:
        """One slot: the machine's ticks over it and the ticks of the timed process and of
        the process driving it."""
        self.total += machine.total
        self.steal += machine.steal
        self.busy += machine.total - machine.idle - machine.steal
        self.own += own

    @property
    def steal_fraction(self) -> float:
        return self.steal / self.total if self.total else 0.0

    @property
    def other_busy_fraction(self) -> float:
        return max(0, self.busy - self.own) / self.total if self.total else 0.0

    def disturbed(self) -> str:
        """Why the machine counts as disturbed during these slots; '' when it was quiet or
        the slots were too short to judge."""
        reasons = []
        if self.total >= MIN_TICKS:
            if self.steal_fraction > STEAL_LIMIT:
                reasons.append(f"steal {self.steal_fraction:.0%} of CPU time")
            if self.other_busy_fraction > OTHER_BUSY_LIMIT:
                reasons.append(
                    f"other processes used {self.other_busy_fraction:.0%} of CPU time")
        slow = [r for r in self.parallel if r > PARALLEL_LIMIT]
        if self.parallel and len(slow) >= PARALLEL_SHARE * len(self.parallel):
            reasons.append(f"parallel regions ran up to {max(slow):.1f}x slower than on one "
                           f"thread in {len(slow)} of {len(self.parallel)} probes (one per "
                           "case per round)")
        return "; ".join(reasons)

    def summary(self) -> dict[str, float]:
        summary = {"steal_fraction": round(self.steal_fraction, 4),
                   "other_busy_fraction": round(self.other_busy_fraction, 4),
                   "ticks": self.total, "load_1min": os.getloadavg()[0]}
        if self.parallel:
            summary["parallel_slowdown_max"] = round(max(self.parallel), 3)
            summary["parallel_probes"] = len(self.parallel)
        return summary


class Slot:
    """Measures one timed slot of the process ``pid``: ``with Slot(pid, load): ...``.
    The calling process (the runner, sending and waiting) counts as the slot's own too."""

    def __init__(self, pid: int, load: Load) -> None:
        self.pid, self.load = pid, load

    def _own(self) -> int | None:
        worker, harness = process_ticks(self.pid), process_ticks(os.getpid())
        return None if worker is None or harness is None else worker + harness

    def __enter__(self) -> Slot:
        self.machine, self.own = machine_ticks(), self._own()
        return self

    def __exit__(self, *exc: object) -> None:
        machine, own = machine_ticks(), self._own()
        if None not in (machine, own, self.machine, self.own):
            self.load.add(machine - self.machine, own - self.own)
