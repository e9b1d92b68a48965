"""Compile our Triton kernels for NVIDIA GPUs on a machine without one, and read what
decides their speed there: registers per thread, spills, shared memory, occupancy.

A recorded :class:`.launch.Launch` (the wrappers' real argument and grid logic, run on
``meta`` tensors) becomes one :class:`CompileJob` per autotune configuration the autotuner
may pick. Each job is specialized exactly as Triton's launcher would at run time (Triton's
own binder: argument types, 16-byte divisibility, constants), then compiled to a cubin by
``triton.compile`` for a :class:`GpuTarget` with the ``ptxas`` the Triton wheel ships.
``ptxas -v`` reports the registers and spills; :mod:`.occupancy` turns them into resident
warps. Nothing runs: no figure here is a GPU measurement.

Compiling needs no GPU but needs Triton's compiler, not its interpreter: a process with
``TRITON_INTERPRET=1`` set before Triton was imported (the kernel tests) cannot compile.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import io
import json
import os
import re
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from .launch import Launch
from .occupancy import ARCHITECTURES, occupancy

# CUDA's grid limits: x up to 2**31 - 1 blocks, y and z up to 65535.
GRID_LIMITS = (2**31 - 1, 65535, 65535)


class CompileUnavailable(RuntimeError):
    """Triton's compiler cannot run in this process (not installed, or interpreter mode)."""


def require_compiler() -> None:
    try:
        import triton  # noqa: F401
    except ImportError as err:
        raise CompileUnavailable(f"triton is not installed ({err}): pip install triton") from err
    from triton.runtime.interpreter import InterpretedFunction

    from . import tp_triton

    if isinstance(tp_triton._fwd.fn, InterpretedFunction):
        raise CompileUnavailable(
            "this process imported Triton with TRITON_INTERPRET=1 (its CPU interpreter); "
            "compiling for a GPU needs a process without it: unset TRITON_INTERPRET")


def supported_architectures() -> list[str]:
    """The architectures of :data:`.occupancy.ARCHITECTURES` the installed Triton's CUDA
    backend can target (its ``ptxas`` knows them)."""
    from triton.backends.nvidia.compiler import get_ptxas

    names = []
    for name, arch in ARCHITECTURES.items():
        try:
            get_ptxas(arch.capability)
        except Exception:  # noqa: BLE001, S112 - any failure: this Triton cannot target it
            continue
        names.append(name)
    return names


@dataclass(frozen=True)
class CompileJob:
    """One specialization of one kernel for one architecture; picklable (the kernel is
    found again by module and name in a worker process)."""

    module: str  # the module holding the kernel (``sys.modules`` key)
    kernel: str  # its name there
    signature: dict[str, str]
    constexprs: dict[tuple, Any]
    attrs: dict[tuple, Any]
    options: dict[str, Any]  # num_warps, num_stages, maxnreg, ...
    arch: str  # "sm_90"
    source_key: str  # the kernel source's cache key (its text and what it calls)

    @property
    def key(self) -> str:
        text = json.dumps([self.module.split(".")[-1], self.kernel, self.signature,
                           sorted(map(repr, self.constexprs.items())),
                           sorted(map(repr, self.attrs.items())),
                           sorted(map(repr, self.options.items())), self.arch,
                           self.source_key, triton_version()])
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def constant(self, name: str) -> Any:
        """The value of constexpr ``name`` (``BZ``, ``BU``, ...), or None."""
        return self.constexprs.get(name)


@dataclass(frozen=True)
class Compiled:
    """What ``ptxas`` reported for one job, or why it failed (``error``)."""

    registers: int = 0
    spill_stores: int = 0  # bytes
    spill_loads: int = 0  # bytes
    stack: int = 0  # bytes of stack frame per thread
    shared: int = 0  # bytes of shared memory per block (Triton's allocation)
    compile_s: float = 0.0
    error: str | None = None


@functools.cache
def _binder(fn: Any, arch: str) -> tuple[Any, Any]:
    """Triton's launch-time specializer of ``fn`` for ``arch``: the function
    ``JITFunction.run`` uses, built for a target instead of the current device."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    backend = make_backend(GPUTarget("cuda", ARCHITECTURES[arch].capability, 32))
    return backend, create_function_from_signature(fn.signature, fn.params, backend)


def configs(kernel: Any, named_args: dict[str, Any], constexprs: dict[str, Any]) -> list:
    """The autotune configurations ``kernel`` may pick for these arguments (after its early
    pruning), or one default configuration for a plain ``triton.jit`` function."""
    import triton

    if not isinstance(kernel, triton.runtime.Autotuner):
        return [triton.Config({}, num_warps=4)]
    prune = getattr(kernel, "early_config_prune", None)
    return list(prune(kernel.configs, named_args, **constexprs) if prune else kernel.configs)


def jobs(launch: Launch, arch_names: Iterable[str]) -> Iterator[tuple[CompileJob, Any]]:
    """``(job, config)`` for every configuration ``launch``'s kernel may pick, on every
    architecture in ``arch_names``."""
    import triton
    from triton import knobs

    fn = launch.kernel.fn if isinstance(launch.kernel, triton.runtime.Autotuner) else launch.kernel
    names = [p.name for p in fn.params]
    named = dict(zip(names, launch.args, strict=False))
    for config in configs(launch.kernel, named, launch.constexprs):
        kwargs = {**launch.constexprs, **config.all_kwargs(),
                  "debug": bool(fn.debug or knobs.runtime.debug)}
        for name in arch_names:
            backend, binder = _binder(fn, name)
            bound, specialization, options = binder(*launch.args, **kwargs)
            options, signature, constexprs, attrs = fn._pack_args(
                backend, kwargs, bound, specialization, options)
            yield CompileJob(fn.__module__, fn.__name__, signature, constexprs, attrs,
                             {k: v for k, v in options.__dict__.items()
                              if k in ("num_warps", "num_stages", "num_ctas", "maxnreg")},
                             name, fn.cache_key), config


_PTXAS_RESOURCES = re.compile(r"Used (\d+) registers")
_PTXAS_SPILLS = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def _kernel(job: CompileJob) -> Any:
    import sys

    from triton.runtime.jit import JITFunction

    module = sys.modules.get(job.module) or importlib.import_module(job.module)
    kernel = getattr(module, job.kernel)
    while not isinstance(kernel, JITFunction):  # an autotuner (or heuristics) wraps it
        kernel = kernel.fn
    return kernel


def compile_job(job: CompileJob) -> Compiled:
    """Compile ``job`` to a cubin and read ``ptxas -v``'s report (Triton's own ``ptxas``
    run, with its flags). Triton's on-disk cache is bypassed for this compilation: a cached
    binary comes without the report."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    arch = ARCHITECTURES[job.arch]
    log = io.StringIO()
    start = time.perf_counter()
    try:
        fn = _kernel(job)
        with (knobs.nvidia.scope(), knobs.compilation.scope(), contextlib.redirect_stdout(log)):
            knobs.nvidia.dump_ptxas_log = True
            knobs.compilation.always_compile = True
            compiled = triton.compile(
                ASTSource(fn, job.signature, job.constexprs, job.attrs),
                target=GPUTarget("cuda", arch.capability, 32), options=dict(job.options))
    except Exception as err:  # noqa: BLE001 - any compiler failure is this job's result
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        # Triton's CompilationError: "at LINE:COL:", the source, then the reason
        where = f"{lines[0]} ... {lines[-1]}" if len(lines) > 1 else "".join(lines)
        return Compiled(compile_s=time.perf_counter() - start,
                        error=f"{type(err).__name__}: {where}"[:400])
    text = log.getvalue()
    registers = _PTXAS_RESOURCES.search(text)
    spills = _PTXAS_SPILLS.search(text)
    if registers is None or spills is None:
        return Compiled(compile_s=time.perf_counter() - start,
                        error=f"no ptxas report in the compiler's output: {text[:200]!r}")
    stack, stores, loads = (int(v) for v in spills.groups())
    return Compiled(int(registers.group(1)), stores, loads, stack,
                    int(compiled.metadata.shared), time.perf_counter() - start)


def compile_all(todo: list[CompileJob], workers: int, cache_dir: os.PathLike | None = None,
                progress: Any = None) -> dict[str, Compiled]:
    """Every job's :class:`Compiled`, by job key: from ``cache_dir`` (results of earlier
    runs, keyed by everything that decides the binary) or compiled in ``workers`` forked
    processes. ``progress(done, total)`` is called as jobs finish."""
    import multiprocessing
    from pathlib import Path

    from equibench.files import atomic_write

    results: dict[str, Compiled] = {}
    cache = Path(cache_dir) if cache_dir is not None else None
    missing = []
    for job in todo:
        hit = cache / f"{job.key}.json" if cache is not None else None
        if hit is not None and hit.exists():
            results[job.key] = Compiled(**json.loads(hit.read_text()))
        else:
            missing.append(job)
    done = len(results)
    if progress:
        progress(done, len(todo))
    # fork: the workers find the generated kernel modules the parent loaded
    with ProcessPoolExecutor(max(1, workers),
                             mp_context=multiprocessing.get_context("fork")) as pool:
        for job, result in zip(missing, pool.map(compile_job, missing, chunksize=4),
                               strict=True):
            results[job.key] = result
            if cache is not None and result.error is None:
                cache.mkdir(parents=True, exist_ok=True)
                with atomic_write(cache / f"{job.key}.json", "w") as handle:
                    json.dump(asdict(result), handle)
            done += 1
            if progress:
                progress(done, len(todo))
    return results


def grid_within_limits(grid: tuple[int, ...]) -> bool:
    return all(0 < n <= limit for n, limit in zip(grid, GRID_LIMITS, strict=False))


@dataclass(frozen=True)
class Verdict:
    """A compiled job judged on its architecture: ``problem`` is None when it compiled
    without spills, within the shared memory per block and at its launch grid."""

    occupancy: float
    blocks_per_sm: int
    limiter: str
    problem: str | None


def judge(job: CompileJob, result: Compiled, grid: tuple[int, ...]) -> Verdict:
    arch = ARCHITECTURES[job.arch]
    if result.error is not None:
        return Verdict(0.0, 0, "", "compile error")
    occ = occupancy(arch, result.registers, result.shared, job.options["num_warps"])
    problem = None
    if result.spill_stores or result.spill_loads:
        problem = "spills"
    elif result.shared > arch.shared_per_block:
        problem = "shared memory over the limit"
    elif not grid_within_limits(grid):
        problem = "grid over the limit"
    return Verdict(occ.fraction, occ.blocks_per_sm, occ.limiter, problem)


def triton_version() -> str:
    import triton

    return triton.__version__
