"""Run cases: each in a process of its own, gated before it is timed.

A crash, an out-of-memory kill or a hang costs the case alone: the parent records it and
goes on with the next case. Processes fork from a fork server (``fork_server``) that has
already imported torch and e3nn and preloads the CPU allocator of the settings.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import math
import signal
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import pandas as pd
import torch
from tqdm import tqdm

from equibench import allocator, fork_server, registry, results
from equibench.cases import Case
from equibench.correctness import compare
from equibench.environment import capture
from equibench.files import atomic_write
from equibench.levels import Bench
from equibench.measure import MeasureConfig, peak_memory, time_call
from equibench.precision import get_precision, precision_mode


@dataclass(frozen=True)
class RunSettings:
    run_id: str = "adhoc"
    threads: int = 0  # 0: all cores
    seed: int = 0
    timeout_s: float = 900.0
    config_hash: str = ""
    # Modules imported in each case process before it runs: implementations kept outside
    # this tree register themselves this way.
    plugins: tuple[str, ...] = ()
    measure: MeasureConfig = field(default_factory=MeasureConfig)
    # CPU allocator of the case processes (allocator.CHOICES): tcmalloc reuses freed memory
    # instead of page-faulting large tensors afresh on every call, as glibc does.
    cpu_allocator: str = "tcmalloc"
    # Directory where case processes share float64 references by ``Bench.reference_key``
    # ("" = none); run_cases makes one per call, removed when it returns.
    reference_dir: str = ""


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(err)
    return "out of memory" in text.lower() or "can't allocate memory" in text.lower()


def _build(case: Case, dtype: torch.dtype, seed: int) -> Bench:
    if case.level == "model":
        return registry.model_family(case.workload).build_bench(case, dtype, seed)
    if case.level == "tp":
        from equibench.levels.tp import build_bench
    else:
        from equibench.levels.conv import build_bench
    return build_bench(case, registry.get(case.implementation), dtype, seed)


def _implementation_unavailable(case: Case) -> str | None:
    """Why the case's implementation cannot run on its device at all, or None: the same
    answer for every case of that implementation, device and level (or model family)."""
    if case.level == "model":
        family = registry.model_family(case.workload)
        return (
            (None if case.implementation in family.backends
             else f"{family.prefix} has no backend {case.implementation!r}; backends: "
                  f"{', '.join(family.backends)}")
            or family.available(case.implementation, case.device)
        )
    impl = registry.get(case.implementation)
    return ((None if case.level in impl.levels else f"{impl.name} has no {case.level} level")
            or impl.available(case.device))


def _case_unavailable(case: Case, precision) -> str | None:
    """Why this case in particular cannot run (direction, variant, precision), or None."""
    if case.level == "model":
        family = registry.model_family(case.workload)
        return (
            family.supports(case)
            or precision.check_device(case.device)
            or (None if precision.name in family.precisions
                else f"{family.prefix} does not support {precision.name}")
        )
    impl = registry.get(case.implementation)
    return (
        impl.supports(case)
        or precision.check_device(case.device)
        or (None if precision.name in impl.precisions
            else f"{impl.name} does not support {precision.name}")
    )


# Sent with a case process's row when the implementation itself is unavailable: the runner
# answers the other cases of that implementation with the row instead of starting a
# process for each.
WHOLE_IMPLEMENTATION = "_whole_implementation"


def _implementation_key(case: Case) -> tuple[str, ...]:
    # Model families are named by their workloads' prefix (ModelFamily.prefix).
    family = case.workload.split("-")[0] if case.level == "model" else ""
    return case.level, family, case.implementation, case.device


def run_case(case: Case, settings: RunSettings) -> dict:
    """Run one case in this process and return its result fields (no provenance)."""
    return _run_case(case, settings)[0]


def _run_case(case: Case, settings: RunSettings) -> tuple[dict, bool]:
    """``run_case``, and whether its row holds for every case of the implementation."""
    reason = _implementation_unavailable(case)
    if reason:
        return {**case.to_dict(), "threads": torch.get_num_threads(), "status": "unavailable",
                "reason": reason}, True
    return _run_available(case, settings), False


def _run_available(case: Case, settings: RunSettings) -> dict:
    """``run_case`` for an implementation that can run on the case's device."""
    row: dict = {**case.to_dict(), "threads": torch.get_num_threads()}
    precision = get_precision(case.precision)
    reason = _case_unavailable(case, precision)
    if reason:
        return {**row, "status": "unavailable", "reason": reason}
    try:
        with precision_mode(precision):
            bench = _build(case, precision.dtype, settings.seed)
            row.update(throughput_unit=bench.unit, flops=bench.flops, bytes=bench.bytes,
                       tolerance=precision.tolerance, extra=bench.extra)
            # The gate: the first call of the implementation is compared with the float64
            # reference; a case that fails it is never timed.
            start = time.perf_counter()
            first = bench.call()
            # The first call pays compilation, JIT and first-touch costs, which the timed
            # calls exclude; it is reported (``extra.first_call_s``), never timed again.
            first_call_s = time.perf_counter() - start
            gate = compare(first, _reference(bench, settings.reference_dir),
                           precision.tolerance)
            row.update(max_abs_err=gate.max_abs_err, max_scaled_err=gate.max_scaled_err)
            if not gate.passed:
                return {**row, "status": "incorrect", "reason": gate.message}
            if bench.equivariance is not None:
                eq_err = bench.equivariance()
                row["equivariance_err"] = eq_err
                if not eq_err <= precision.tolerance:
                    return {**row, "status": "incorrect",
                            "reason": f"equivariance error {eq_err:.3e} exceeds "
                                      f"{precision.tolerance:.1e}"}
            timing = time_call(bench.call, settings.measure, case.device)
            # Last: on CPU it switches the allocator to give memory back (see measure.py).
            row["peak_mem_bytes"], row["peak_mem_method"] = peak_memory(bench.call, case.device)
    except registry.Unsupported as err:
        return {**row, "status": "unavailable", "reason": str(err)}
    except Exception as err:  # noqa: BLE001 - every failure becomes a recorded row
        status = "oom" if _is_oom(err) else "error"
        return {**row, "status": status, "reason": f"{type(err).__name__}: {err}"[:2000]}
    median = timing.median
    # Rates of whatever a call processes, e.g. atoms_per_call -> atoms_per_s.
    rates = {f"{key[:-len('_per_call')]}_per_s": value / median
             for key, value in bench.extra.items()
             if key.endswith("_per_call") and isinstance(value, (int, float))}
    row["extra"] = {**bench.extra, **rates, "latency_s": median, "first_call_s": first_call_s}
    if case.device == "cpu":
        row["extra"]["cpu_allocator"] = allocator.active()
    return {
        **row, "status": "ok",
        "time_median_s": median, "time_iqr_s": timing.iqr, "time_samples": timing.samples,
        "repeats": timing.repeats, "warmup_s": timing.warmup_s,
        "throughput": bench.items / median,
        "gflops_per_s": bench.flops / median / 1e9 if not math.isnan(bench.flops) else math.nan,
        "gbytes_per_s": bench.bytes / median / 1e9 if not math.isnan(bench.bytes) else math.nan,
    }


def _reference(bench: Bench, directory: str) -> dict:
    """``bench.reference()``, computed once per key among the cases sharing ``directory``
    (every implementation and precision of a job compares with the same float64 result)."""
    if not directory or bench.reference_key is None:
        return bench.reference()
    digest = hashlib.sha256(bench.reference_key.encode()).hexdigest()[:32]
    path = Path(directory) / f"{digest}.pt"
    if path.exists():
        return torch.load(path)
    reference = bench.reference()
    with atomic_write(path) as handle:  # another case never reads half a file
        torch.save({name: t.detach() for name, t in reference.items()}, handle)
    return reference


def _child(conn, case_dict: dict, settings_dict: dict) -> None:
    measure = MeasureConfig(**settings_dict["measure"])
    settings = RunSettings(**{**settings_dict, "measure": measure})
    if settings.threads > 0:
        torch.set_num_threads(settings.threads)
    case = Case.from_dict(case_dict)
    try:
        for module in settings.plugins:
            importlib.import_module(module)
        row, whole = _run_case(case, settings)
        if whole:
            row[WHOLE_IMPLEMENTATION] = True
    except BaseException as err:  # noqa: BLE001 - report, then exit
        row = {**case.to_dict(), "status": "error",
               "reason": "".join(traceback.format_exception_only(err)).strip()[:2000]}
    conn.send(row)
    conn.close()


def run_isolated(case: Case, settings: RunSettings, ctx=None) -> dict:
    """Run ``case`` in a fresh process; a crash or a timeout becomes a row, never an error."""
    return _run_isolated(case, settings, ctx)[0]


def _run_isolated(case: Case, settings: RunSettings, ctx=None) -> tuple[dict, bool]:
    """``run_isolated``, and whether the row holds for every case of the implementation."""
    ctx = ctx or fork_server.start(settings.cpu_allocator)
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, case.to_dict(), asdict(settings)))
    proc.start()
    child.close()
    row = None
    if parent.poll(settings.timeout_s):
        try:
            row = parent.recv()
        except EOFError:
            row = None
    proc.join(timeout=30 if row is not None else 5)
    if proc.is_alive():
        proc.kill()
        proc.join()
        if row is None:
            return {**case.to_dict(), "status": "error",
                    "reason": f"timed out after {settings.timeout_s:.0f} s"}, False
    if row is not None:
        whole = bool(row.pop(WHOLE_IMPLEMENTATION, False))
        return row, whole
    code = proc.exitcode
    if code == -signal.SIGKILL:
        return {**case.to_dict(), "status": "oom",
                "reason": "killed by SIGKILL, most likely the out-of-memory killer"}, False
    name = signal.Signals(-code).name if code and code < 0 else f"exit code {code}"
    return {**case.to_dict(), "status": "error",
            "reason": f"case process crashed ({name})"}, False


def run_cases(
    cases: Iterable[Case],
    settings: RunSettings,
    out_path: str | Path | None = None,
    progress: bool = True,
    on_row: Callable[[dict], None] | None = None,
) -> pd.DataFrame:
    """Run every case in its own process and write one validated table atomically."""
    cases = list(cases)
    with tempfile.TemporaryDirectory(prefix="equibench-references-") as references:
        return _run_cases(cases, replace(settings, reference_dir=references), out_path,
                          progress, on_row)


def _run_cases(cases: list[Case], settings: RunSettings, out_path: str | Path | None,
               progress: bool, on_row: Callable[[dict], None] | None) -> pd.DataFrame:
    ctx = fork_server.start(settings.cpu_allocator)
    devices = sorted({c.device for c in cases}) or ["cpu"]
    envs = {d: capture(d) for d in devices}
    rows = []
    unavailable: dict[tuple[str, ...], dict] = {}
    bar = tqdm(cases, desc="cases", unit="case", disable=not progress, dynamic_ncols=True)
    for case in bar:
        bar.set_postfix_str(f"{case.implementation} {case.workload} {case.direction} "
                            f"{case.precision} b={case.batch}")
        known = unavailable.get(_implementation_key(case))
        if known is not None:
            row = {**known, **case.to_dict()}
        else:
            row, whole = _run_isolated(case, settings, ctx)
            if whole:
                unavailable[_implementation_key(case)] = dict(row)
        row.update(envs[case.device], run_id=settings.run_id, config_hash=settings.config_hash,
                   timestamp=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        rows.append(row)
        if on_row:
            on_row(row)
    frame = results.to_frame(rows)
    if out_path is not None:
        results.write_atomic(frame, out_path)
    return frame
