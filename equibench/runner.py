"""Run cases: each in a process of its own, gated before it is timed, and the cases that
are compared with each other timed in interleaved rounds.

A crash, an out-of-memory kill or a hang costs the case alone: the parent records it and
goes on with the next case. Processes fork from a fork server (``fork_server``) that has
already imported torch and e3nn and preloads the CPU allocator of the settings.

Interleaving (after asv's ``rounds`` and pyperf's worker processes): the cases of one
comparison group (:func:`comparison_key`: the implementations and variants of one
workload, direction, precision, batch and device) are all prepared in processes of their
own and kept alive; the parent then drives them round by round, in a fresh random order
each round, so that a slow minute of a shared machine falls on all of them. Each row keeps
its per-round medians (``round_times_s``) and the group's ``rounds_id``, from which
``equibench.paired`` takes ratios round by round. The parent reads the kernel's CPU
accounting around each timed slot and the case process's parallel probe after each round
(``machine_load``) and records a disturbed machine in the row.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime as dt
import hashlib
import importlib
import math
import multiprocessing
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from tqdm import tqdm

from equibench import (
    allocator,
    custom_workloads,
    fork_server,
    machine_load,
    modes,
    registry,
    results,
    scaling,
)
from equibench.cases import Case
from equibench.correctness import (
    INCORRECT,
    INCORRECT_FROM,
    UNVERIFIABLE,
    GateResult,
    check_dtypes,
    check_outputs,
)
from equibench.environment import capture
from equibench.files import atomic_write
from equibench.levels import Bench
from equibench.measure import (
    MeasureConfig,
    RoundPlan,
    Timing,
    call_timer,
    peak_memory,
    peak_tensor_memory,
    time_round,
)
from equibench.modes import Step
from equibench.precision import Precision, get_precision, precision_mode
from equibench.schema import defaults

_DEFAULTS = defaults()


@dataclass(frozen=True)
class RunSettings:
    """How a run's cases run; the defaults are the schema's (``equibench.schema``)."""

    run_id: str = "adhoc"
    threads: int = _DEFAULTS["threads"]  # 0: all cores
    seed: int = _DEFAULTS["seed"]
    timeout_s: float = _DEFAULTS["timeout_s"]
    config_hash: str = ""
    # Modules imported in each case process before it runs: implementations kept outside
    # this tree register themselves this way.
    plugins: tuple[str, ...] = ()
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    # CPU allocator of the case processes (allocator.CHOICES): tcmalloc reuses freed memory
    # instead of page-faulting large tensors afresh on every call, as glibc does.
    cpu_allocator: str = _DEFAULTS["cpu_allocator"]
    # Directory where case processes share float64 references by ``Bench.reference_key``
    # ("" = none); run_cases makes one per call, removed when it returns.
    reference_dir: str = ""
    # User-defined tensor-product workloads, as ``NAME=SPEC`` (equibench.custom_workloads):
    # the fork server may have started before they were read, so each case registers them.
    workloads: tuple[str, ...] = ()
    # Each case process starts from empty caches and records ``cold_start_s``.
    cold_start: bool = False
    # md level, > 0: a scaling run (equibench.scaling): each structure's supercells from the
    # smallest up, a backend's larger sizes not run once one fails or takes longer than
    # this many seconds per MD step.
    scaling_limit_s: float = 0.0


def _is_oom(err: BaseException) -> bool:
    # torch.OutOfMemoryError is torch >= 2.5's name; the DGL environment's torch 2.2 has
    # only torch.cuda's.
    if isinstance(err, (MemoryError, getattr(torch, "OutOfMemoryError",
                                             torch.cuda.OutOfMemoryError))):
        return True
    text = str(err)
    return "out of memory" in text.lower() or "can't allocate memory" in text.lower()


def _build(case: Case, precision: Precision, seed: int) -> Bench:
    """The case's Bench; under automatic mixed precision its call and its equivariance
    check run in the autocast region (built outside it: constants such as Clebsch-Gordan
    tables stay exact)."""
    bench = registry.plugin(case).build(case, precision.dtype, seed)
    if precision.autocast is None:
        return bench

    def in_region(fn: Callable[[], Any]) -> Callable[[], Any]:
        def run(*args: Any) -> Any:
            with precision.autocast_context(case.device):
                return fn(*args)

        return run

    call = bench.call
    return replace(bench, call=Step(in_region(call.fn), call.args) if isinstance(call, Step)
                   else in_region(call),
                   equivariance=bench.equivariance and in_region(bench.equivariance))


def _implementation_unavailable(case: Case) -> str | None:
    """Why the case's implementation (or model family backend) cannot run on its device at
    all, or None: the same answer for every case sharing its ``registry.plugin_key``."""
    return registry.plugin(case).unavailable(case.device)


def _case_unavailable(case: Case, precision) -> str | None:
    """Why this case in particular cannot run (direction, variant, precision), or None."""
    plugin = registry.plugin(case)
    return (
        plugin.supports(case)
        or precision.check_device(case.device)
        or (None if precision.name in plugin.precisions
            else f"{plugin.name} does not support {precision.name}")
    )


# The phases of a case, as the progress bar shows them: ``start`` (its process starting:
# fork, plugins, the load probe), ``build`` (the implementation's set-up: conversion,
# compilation, a kernel build), ``gate`` (the first call and its comparison with the
# float64 reference, then the equivariance check), ``warm-up``, then ``round k/n`` of the
# timing and ``finish`` (peak memory and the gate on the last call).
Phase = Callable[[str], None]


def _no_phase(phase: str) -> None:
    pass


def round_phase(index: int, rounds: int) -> str:
    """The phase of the ``index``-th (from 0) of ``rounds`` timing rounds."""
    return f"round {index + 1}/{rounds}"


def run_case(case: Case, settings: RunSettings, phase: Phase = _no_phase) -> dict:
    """Run one case in this process, its rounds back to back, and return its result fields
    (no provenance); ``phase`` is told each phase as it starts."""
    row, _, session = _prepare(case, settings, phase)
    if session is None:
        return row
    for index in range(settings.measure.rounds):
        phase(round_phase(index, settings.measure.rounds))
        if (failed := session.round(settings.measure.round_plan)) is not None:
            return failed
    phase("finish")
    return session.finish(rounds_id="", disturbed="", load={})


def _prepare(case: Case, settings: RunSettings, phase: Phase = _no_phase
             ) -> tuple[dict, bool, _Session | None]:
    """Build, gate and warm up a case, telling ``phase`` each as it starts. Returns its row
    so far, whether that row holds for every case of the implementation, and the session
    that times it (None when the case ended here: unavailable, incorrect, an error)."""
    custom_workloads.register(map(custom_workloads.CustomWorkload.parse, settings.workloads))
    reason = _implementation_unavailable(case)
    if reason:
        return {**case.to_dict(), "threads": torch.get_num_threads(), "status": "unavailable",
                "reason": reason}, True, None
    row: dict = {**case.to_dict(), "threads": torch.get_num_threads()}
    if case.device == "cpu":
        row["cpu_allocator"] = allocator.active()
    precision = get_precision(case.precision)
    reason = _case_unavailable(case, precision)
    if reason:
        return {**row, "status": "unavailable", "reason": reason}, False, None
    # An exported package and a cold start's caches need a directory of the case's own.
    scratch = _scratch(settings) if case.mode != "eager" or settings.cold_start else None
    cold = modes.empty_caches(scratch / "cold") if scratch and settings.cold_start else {}
    try:
        with precision_mode(precision):
            phase("build")
            cold_start = time.perf_counter()
            bench = _build(case, precision, settings.seed)
            row.update(throughput_unit=bench.unit, flops=bench.flops, bytes=bench.bytes,
                       tolerance=precision.tolerance, extra=bench.extra)
            bench.extra["mode_detail"] = modes.MODE_DETAIL[case.mode]
            if cold:
                bench.extra["cold_start_caches"] = cold
            try:
                if case.mode != "eager":
                    phase(case.mode)
                bench.call = modes.apply(case.mode, bench.call,
                                         scratch / "mode" if scratch else None)
                # The gate: the first call of the implementation is compared with the
                # float64 reference; a case that fails it is never timed.
                phase("gate")
                start = time.perf_counter()
                first = bench.call()
                # The first call pays compilation, JIT and first-touch costs, which the
                # timed calls exclude; it is reported (``extra.first_call_s``), never timed
                # again.
                first_call_s = time.perf_counter() - start
            except Exception as err:
                if case.mode == "eager" or _is_oom(err):
                    raise
                return {**row, "status": "unavailable",
                        "reason": modes.failure(case.mode, err)}, False, None
            if cold:
                row["cold_start_s"] = time.perf_counter() - cold_start
            gate = gate_outputs(bench, first, precision, settings.reference_dir)
            row.update(max_abs_err=gate.max_abs_err, max_scaled_err=gate.max_scaled_err)
            if gate.status == INCORRECT:
                return {**row, "status": "incorrect", "reason": gate.message}, False, None
            if gate.status == UNVERIFIABLE:
                row["reason"] = gate.message
            if bench.equivariance is not None:
                eq_err = bench.equivariance()
                row["equivariance_err"] = eq_err
                message = (f"equivariance error {eq_err:.3e} exceeds "
                           f"{precision.tolerance:.1e}")
                if not eq_err < (INCORRECT_FROM if precision.low else precision.tolerance):
                    return {**row, "status": "incorrect", "reason": message}, False, None
                if eq_err > precision.tolerance and not row.get("reason"):
                    row["reason"] = f"{message} (as large as this precision's rounding)"
            phase("warm-up")
            one_call, warmup_s = call_timer(bench.call, settings.measure, case.device)
    except Exception as err:  # noqa: BLE001 - every failure becomes a recorded row
        return _failed(row, err), False, None
    timing = Timing(warmup_s=warmup_s)
    return row, False, _Session(case, precision, bench, one_call, timing, first_call_s, row,
                                settings.reference_dir, settings.measure.breakdown)


def _scratch(settings: RunSettings) -> Path:
    """A directory of this case process's own (an exported package, empty caches), inside
    the run's shared directory where there is one (removed with it), else a temporary one
    removed when the process exits."""
    if settings.reference_dir:
        path = Path(settings.reference_dir) / f"case-{uuid.uuid4().hex[:12]}"
        path.mkdir(parents=True)
        return path
    path = Path(tempfile.mkdtemp(prefix="equibench-case-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def _failed(row: dict, err: BaseException) -> dict:
    if isinstance(err, registry.Unsupported):
        return {**row, "status": "unavailable", "reason": str(err)}
    status = "oom" if _is_oom(err) else "error"
    return {**row, "status": status, "reason": f"{type(err).__name__}: {err}"[:2000]}


@dataclass
class _Session:
    """A gated, warmed-up case in its process, timed one round at a time."""

    case: Case
    precision: Precision
    bench: Bench
    one_call: Callable[[], float]
    timing: Timing
    first_call_s: float
    row: dict
    reference_dir: str
    # Profile a call by category once timing is over (``measure.breakdown``).
    breakdown: bool = False

    def round(self, plan: RoundPlan) -> dict | None:
        """Time one round; a failed call ends the case with the returned row."""
        try:
            with precision_mode(self.precision):
                self.timing.rounds.append(time_round(self.one_call, plan))
        except Exception as err:  # noqa: BLE001 - recorded, the other cases go on
            return _failed(self.row, err)
        return None

    def finish(self, rounds_id: str, disturbed: str, load: dict) -> dict:
        """Peak memory (last: on CPU it makes the allocator give memory back, see
        measure.py), resident and live tensor bytes, the gate again on the last call's
        outputs, the profile by category where asked for (after all the rest: the
        profiler's own state would weigh on the memory), then the complete row.

        The second gate catches what only shows after many calls (GPU atomics, state that
        drifts); a training step is exempt, since its weights move by design.
        """
        row, bench, timing = self.row, self.bench, self.timing
        last: dict = {}
        try:
            with precision_mode(self.precision):
                peak, row["peak_mem_method"] = peak_memory(lambda: last.update(bench.call()),
                                                           self.case.device)
                live, row["peak_tensor_method"] = peak_tensor_memory(
                    lambda: last.update(bench.call()), self.case.device)
            # Memory that amortized work keeps between calls belongs to every call.
            row["peak_mem_bytes"] = peak + bench.kept_bytes if peak >= 0 else peak
            row["peak_tensor_bytes"] = live + bench.kept_bytes if live >= 0 else live
            if self.case.direction != "train_step":
                gate = gate_outputs(bench, last, self.precision, self.reference_dir)
                if gate.status == INCORRECT:
                    return {**row, "status": "incorrect",
                            "reason": f"after timing, the last call: {gate.message}"}
                if gate.status == UNVERIFIABLE and not row.get("reason"):
                    row["reason"] = f"after timing, the last call: {gate.message}"
            with precision_mode(self.precision):
                profile = (bench.profile() if self.breakdown and bench.profile is not None
                           else {})
        except Exception as err:  # noqa: BLE001
            return _failed(row, err)
        median = timing.median
        # Rates of whatever a call processes, e.g. atoms_per_call -> atoms_per_s.
        rates = {f"{key[:-len('_per_call')]}_per_s": value / median
                 for key, value in bench.extra.items()
                 if key.endswith("_per_call") and isinstance(value, (int, float))}
        summary = bench.summary(median) if bench.summary is not None else {}
        row["extra"] = {**bench.extra, **rates, **summary, **profile, "latency_s": median,
                        "first_call_s": self.first_call_s, "amortized": bench.amortized,
                        "kept_bytes": bench.kept_bytes,
                        **({"machine_load": load} if load else {})}
        return {
            # A reason on a timed row is the gate's: a low precision it could not verify.
            **row, "status": "unverifiable" if row.get("reason") else "ok",
            "time_median_s": median, "time_iqr_s": timing.iqr,
            "time_samples": timing.samples, "repeats": timing.repeats,
            "round_times_s": timing.round_medians, "rounds_id": rounds_id,
            "disturbed": disturbed, "warmup_s": timing.warmup_s,
            "throughput": bench.items / median,
            "gflops_per_s": bench.flops / median / 1e9 if not math.isnan(bench.flops)
            else math.nan,
            "gbytes_per_s": bench.bytes / median / 1e9 if not math.isnan(bench.bytes)
            else math.nan,
        }


def gate_outputs(bench: Bench, outputs: dict, precision: Precision,
                 directory: str = "") -> GateResult:
    """The gate's verdict on a call's own ``outputs``: their dtypes, then each compared
    with the reference at its own scale (see :mod:`equibench.correctness`)."""
    if wrong := check_dtypes(outputs, precision.output_dtypes):
        return GateResult(INCORRECT, math.inf, math.inf, precision.tolerance, wrong)
    return check_outputs(bench.gated(outputs), _reference(bench, directory),
                         precision.tolerance, floors=bench.floors, low_precision=precision.low)


def _reference(bench: Bench, directory: str) -> dict:
    """``bench.reference()``, computed once per key among the cases sharing ``directory``
    (every implementation and precision of a job compares with the same float64 result)."""
    if not directory or bench.reference_key is None:
        return bench.reference()
    digest = hashlib.sha256(bench.reference_key.encode()).hexdigest()[:32]
    path = Path(directory) / f"{digest}.pt"
    if path.exists():
        return torch.load(path, weights_only=True)  # tensors only, as written below
    reference = bench.reference()
    with atomic_write(path) as handle:  # another case never reads half a file
        torch.save({name: t.detach() for name, t in reference.items()}, handle)
    return reference


def _probe(probe: machine_load.ParallelProbe | None) -> float | None:
    """The round's parallel-probe ratio; None without a probe or when it failed (a
    diagnostic never costs the case its timings)."""
    if probe is None:
        return None
    try:
        return probe.slowdown()
    except RuntimeError:
        return None


def _worker(conn, case_dict: dict, settings_dict: dict) -> None:
    """A case process: prepare the case, then time the rounds the parent asks for.

    Messages from the parent: ``("round", plan)`` and ``("finish", rounds_id, disturbed,
    load)``. Replies: ``("phase", name)`` as each phase of the preparation starts (build,
    gate, warm-up: for the progress bar), ``("ready",)`` once gated and warmed up,
    ``("round", slowdown)`` after each round (the parallel probe's ratio, None where the
    case is not probed), and ``("done", row, whole)`` when the case is over.
    """
    measure = MeasureConfig(**settings_dict["measure"])
    settings = RunSettings(**{**settings_dict, "measure": measure})
    # Always set, even to the default count: torch.set_num_threads also fixes MKL's
    # dynamic threading, so every case starts from the same state (and the probe's own
    # switching changes nothing that the first call would not already have seen).
    torch.set_num_threads(settings.threads if settings.threads > 0 else torch.get_num_threads())
    case = Case.from_dict(case_dict)
    try:
        for module in settings.plugins:
            importlib.import_module(module)
        # Before the warm-up, which refills what its thread switching cleared.
        probe = machine_load.parallel_probe() if case.device == "cpu" else None
        row, whole, session = _prepare(case, settings,
                                       lambda name: conn.send(("phase", name)))
        reply: tuple = ("ready",)
        while session is not None:
            conn.send(reply)
            message = conn.recv()
            if message[0] == "finish":
                row, session = session.finish(*message[1:]), None
                continue
            if (failed := session.round(RoundPlan(**message[1]))) is not None:
                row, session = failed, None
            else:
                # Just after the round, whose mode it still sees (the VM's slow mode lasts
                # seconds or longer), so that the next round starts as idle as the others.
                reply = ("round", _probe(probe))
    except BaseException as err:  # noqa: BLE001 - report, then exit
        row, whole = {**case.to_dict(), "status": "error",
                      "reason": "".join(traceback.format_exception_only(err)).strip()[:2000]
                      }, False
    conn.send(("done", row, whole))
    conn.close()


class _Worker:
    """The parent's handle on one case process."""

    def __init__(self, case: Case, settings: RunSettings, ctx,
                 phase: Phase = _no_phase) -> None:
        self.case, self.timeout_s, self.phase = case, settings.timeout_s, phase
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=_worker, args=(child, case.to_dict(), asdict(settings)))
        self.proc.start()
        child.close()
        self.row: dict | None = None  # set once the case is over
        self.whole = False
        self.reply: tuple = ()  # the process's last message while the case goes on

    def wait(self) -> bool:
        """Wait for the process's next message, passing the phases it reports on to
        ``phase`` (they do not restart the timeout); True while the case goes on."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            message = None
            answered = self.conn.poll(max(0.0, deadline - time.monotonic()))
            if answered:
                try:
                    message = self.conn.recv()
                except EOFError:  # the process died
                    message = None
            if message is None or message[0] != "phase":
                break
            self.phase(message[1])
        if message is not None and message[0] != "done":
            self.reply = message
            return True
        if message is not None:
            self.row, self.whole = message[1], message[2]
        self._end(timed_out=not answered)
        return False

    def send(self, *message: object) -> bool:
        try:
            self.conn.send(message)
        except (BrokenPipeError, OSError):
            self._end(timed_out=False)
            return False
        return True

    def _end(self, timed_out: bool) -> None:
        self.proc.join(timeout=30 if self.row is not None else 5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.conn.close()
        if self.row is not None:
            return
        case = self.case.to_dict()
        code = self.proc.exitcode
        if timed_out:
            self.row = {**case, "status": "error",
                        "reason": f"timed out after {self.timeout_s:.0f} s"}
        elif code == -signal.SIGKILL:
            self.row = {**case, "status": "oom",
                        "reason": "killed by SIGKILL, most likely the out-of-memory killer"}
        else:
            name = signal.Signals(-code).name if code and code < 0 else f"exit code {code}"
            self.row = {**case, "status": "error", "reason": f"case process crashed ({name})"}


def series_name(case: Case) -> str:
    """The implementation of a case, with its variant where it has one, e.g. ``fused`` or
    ``e3nn[small]``: what tells the cases of one comparison group apart."""
    return (case.implementation if case.variant == "default"
            else f"{case.implementation}[{case.variant}]")


def comparison_key(case: Case) -> tuple:
    """Cases with the same key are timed in interleaved rounds and compared with each
    other: every implementation and variant of one workload, direction, precision, batch
    and device."""
    return case.level, case.workload, case.direction, case.precision, case.batch, case.device


def _run_group(cases: list[Case], settings: RunSettings, ctx,
               unavailable: dict[tuple[str, ...], dict],
               phase: Callable[[Case, str], None] = lambda case, name: None) -> list[dict]:
    """Run one comparison group: prepare each case in its own process, one after another
    (so that first calls and compilation times are not disturbed), then time them in
    interleaved rounds in a fresh random order each round, then finish them one by one.
    ``phase`` is told each case's phase as it starts. Returns one row per case, in the
    order given."""
    workers: dict[int, _Worker] = {}
    rows: dict[int, dict] = {}
    for index, case in enumerate(cases):
        known = unavailable.get(registry.plugin_key(case))
        if known is not None:
            rows[index] = {**known, **case.to_dict()}
            continue
        phase(case, "start")  # its process: fork, plugins, the machine-load probe
        worker = _Worker(case, settings, ctx, lambda name, case=case: phase(case, name))
        if worker.wait():
            workers[index] = worker
            continue
        rows[index] = worker.row
        if worker.whole:
            unavailable[registry.plugin_key(case)] = dict(worker.row)
    rounds_id = uuid.uuid4().hex[:16] if len(workers) > 1 else ""
    order = random.Random()
    # One account for the group: its slots interleave, so a disturbance falls on all of
    # them, and together they hold enough clock ticks to judge.
    load = machine_load.Load()
    plan = asdict(settings.measure.round_plan)
    for index in range(settings.measure.rounds):
        active = list(workers.values())
        order.shuffle(active)
        for worker in active:
            if worker.row is None:
                phase(worker.case, round_phase(index, settings.measure.rounds))
            if worker.row is None and worker.send("round", plan):
                with machine_load.Slot(worker.proc.pid, load):
                    going_on = worker.wait()
                if going_on and worker.reply[1] is not None:
                    load.parallel.append(worker.reply[1])
    for worker in workers.values():
        if worker.row is None:
            phase(worker.case, "finish")
        if worker.row is None and worker.send("finish", rounds_id, load.disturbed(),
                                              load.summary()):
            worker.wait()
    rows.update({index: worker.row for index, worker in workers.items()})
    return [rows[index] for index in range(len(cases))]


def run_cases(
    cases: Iterable[Case],
    settings: RunSettings,
    out_path: str | Path | None = None,
    progress: bool = True,
    on_row: Callable[[dict], None] | None = None,
) -> pd.DataFrame:
    """Run every case in its own process, the cases of one comparison group in interleaved
    rounds, and write one validated table atomically."""
    cases = list(cases)
    with tempfile.TemporaryDirectory(prefix="equibench-references-") as references:
        return _run_cases(cases, replace(settings, reference_dir=references), out_path,
                          progress, on_row)


def _run_cases(cases: list[Case], settings: RunSettings, out_path: str | Path | None,
               progress: bool, on_row: Callable[[dict], None] | None) -> pd.DataFrame:
    growth = None
    if settings.scaling_limit_s > 0:
        if levels := sorted({c.level for c in cases} - {"md"}):
            raise ValueError(f"a scaling run grows md structures; it has {levels} cases")
        cases, growth = scaling.ordered(cases), scaling.Growth(settings.scaling_limit_s)
    ctx = fork_server.start(settings.cpu_allocator)
    devices = sorted({c.device for c in cases}) or ["cpu"]
    envs = {d: capture(d) for d in devices}
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        groups.setdefault(comparison_key(case), []).append(case)
    rows: list[dict] = []
    unavailable: dict[tuple[str, ...], dict] = {}
    bar = tqdm(total=len(cases), desc="cases", unit="case", disable=not progress,
               dynamic_ncols=True)
    # A run killed from outside (`timeout`, a scheduler) still leaves the rows of the groups
    # that finished, written whole (the group it stopped in is lost), and exits 143 as a
    # terminated process would.
    terminated = False
    with _sigterm_raises():
        try:
            _run_groups(groups, settings, ctx, envs, growth, unavailable, rows, on_row, bar)
        except Terminated:
            terminated = True
            for process in multiprocessing.active_children():  # else exit would wait
                process.kill()
        bar.close()
        frame = results.to_frame(rows)
        if out_path is not None and (rows or not terminated):
            results.write_atomic(frame, out_path)
    if terminated:
        where = f"their rows written to {out_path}" if out_path and rows else "nothing written"
        print(f"equibench: terminated (SIGTERM) after {len(rows)} of {len(cases)} cases; "
              f"{where}", file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGTERM)
    return frame


class Terminated(BaseException):
    """SIGTERM reached the process running the cases (a timeout, a scheduler's kill); a
    BaseException, so that no handler of a case's errors records it as one."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """Within: SIGTERM raises :class:`Terminated` (once; a repeat, as `timeout` sends to the
    process and then its group, is ignored). Outside the main thread, a no-op."""
    def stop(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread: signals are not ours to take
        yield
        return
    try:
        yield
    finally:
        # None: a handler installed from C, which Python cannot put back.
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def _run_groups(groups: dict[tuple, list[Case]], settings: RunSettings, ctx: Any,
                envs: dict[str, dict], growth: scaling.Growth | None,
                unavailable: dict[tuple[str, ...], dict], rows: list[dict],
                on_row: Callable[[dict], None] | None, bar: tqdm) -> None:
    """Run each comparison group's cases in interleaved rounds, appending their rows. Where
    the data cache holds a part of a dataset (``equibench datasets subset``), every row says
    so in ``extra.data_subsets``: its molecules were sampled from that part."""
    from equibench.datasets.registry import cached_subsets

    subsets = cached_subsets()
    for (level, workload, direction, precision, batch, device), group in groups.items():
        about = (f"{len(group)} interleaved: {level} {workload} {direction} {precision} "
                 f"b={batch} {device}")
        bar.set_postfix_str(about)

        def show(case: Case, phase: str, about: str = about) -> None:
            # The phase first: a narrow terminal cuts the line's end.
            bar.set_postfix_str(f"{series_name(case)}: {phase} | {about}")

        skipped = [growth.skipped(c) for c in group] if growth else [None] * len(group)
        running = [c for c, row in zip(group, skipped, strict=True) if row is None]
        ran = iter(_run_group(running, settings, ctx, unavailable, show) if running else [])
        done = []
        for case, row in zip(group, skipped, strict=True):
            if row is None:
                row = next(ran)
                if growth:
                    growth.record(case, row)
            row.update(envs[row["device"]], run_id=settings.run_id,
                       config_hash=settings.config_hash,
                       timestamp=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
            if subsets:
                row["extra"] = {**results.extra(row), "data_subsets": subsets}
            done.append(row)
        rows.extend(done)  # a group's rows at once: a SIGTERM keeps whole groups only
        for row in done:
            if on_row:
                on_row(row)
            bar.update()
