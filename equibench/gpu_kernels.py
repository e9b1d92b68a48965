"""``equibench gpu-compile``: every Triton kernel that the presets' ``fused`` cases would
launch on a GPU, compiled for NVIDIA architectures on this machine (no GPU needed), with
its registers, spills, shared memory and occupancy in a table.

Which kernels: for every case of the chosen presets whose implementation is ``fused``
(and that it supports), the descriptors its level builds (a tensor product at ``tp``, a
convolution at ``conv``, the convolutions and symmetric contractions of a fused MACE or the
tensor products of a fused SE(3)-Transformer at ``model`` and ``md``), in the dtype its
kernels run in (float32 under autocast), at the derivative order its direction needs. Each
descriptor's launches are recorded from the Triton wrappers themselves on ``meta`` tensors
(:mod:`equibench.kernels.launch`), then every autotune configuration of every launch is
compiled (:mod:`equibench.kernels.gpu_compile`). Launches that specialize alike compile once.

Figures are compiler output, never GPU measurements: the table says ``compiled, not run``.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from equibench import config as configs
from equibench import environment, registry
from equibench.cases import Case
from equibench.precision import get_precision

ROWS = 1001  # rows (edges, tensor products, nodes) of the recorded launches: B is not
# specialized on (tp_triton), so any count compiles the same binary; not a multiple of 16
NODES = 97
DEVICE = "cuda:0"  # the cases are expanded as a GPU run would (its batches)

# Derivative order a direction needs of each kernel: 1 forward, 2 + backward, 3 + double
# backward. MACE's inference takes forces (a backward through the model); its training step
# differentiates the forces. The SE(3)-Transformer predicts a scalar without forces.
DEPTH = {("tp", "forward"): 1, ("tp", "backward"): 2, ("tp", "double_backward"): 3,
         ("conv", "forward"): 1, ("conv", "backward"): 2, ("conv", "double_backward"): 3,
         ("mace", "inference"): 2, ("mace", "train_step"): 3,
         ("se3t", "inference"): 1, ("se3t", "train_step"): 2,
         ("md", "nve"): 2, ("md", "nvt"): 2}

COLUMNS = ("kernel", "op", "arch", "gpus", "dtype", "specialization", "block", "num_warps",
           "num_stages", "registers", "spill_stores", "spill_loads", "stack_bytes",
           "shared_bytes", "blocks_per_sm", "occupancy", "limiter", "problem", "error",
           "grid", "compile_s", "presets", "suites", "workloads", "job", "triton",
           "git_commit", "created")


@dataclass(frozen=True)
class Use:
    """A preset suite's workload (and variant) that launches a kernel."""

    preset: str
    suite: str
    workload: str
    variant: str

    def label(self) -> str:
        return self.workload if self.variant == "default" else f"{self.workload}[{self.variant}]"


@dataclass
class KernelSet:
    """One descriptor's kernels in one dtype: ``op`` ``tp`` / ``conv`` (a
    :class:`~equibench.kernels.TPDescriptor`) or ``sc`` (a symmetric contraction, with its
    channel count), up to derivative order ``depth``, and the cases that use them."""

    op: str
    desc: Any
    dtype: torch.dtype
    channels: int = 0
    depth: int = 1
    uses: set[Use] = field(default_factory=set)


def kernel_dtype(precision: str) -> torch.dtype:
    """The dtype our kernels run in under ``precision`` (its custom ops are registered to
    run in float32 under autocast)."""
    p = get_precision(precision)
    return torch.float32 if p.autocast is not None else p.dtype


def fused_cases(preset: str) -> list[tuple[str, Case]]:
    """``(suite, case)`` of every ``fused`` case of ``preset`` that ``fused`` supports, at
    the batches of a GPU run."""
    cfg = configs.resolve({"preset": preset})
    out = []
    for block in cfg["suites"]:
        if "fused" not in block["implementations"] or not configs.batches(block, DEVICE):
            continue
        for case in configs.suite_cases(cfg, block["name"], "fused", DEVICE):
            plugin = registry.plugin(case)
            if case.precision in plugin.precisions and plugin.supports(case) is None:
                out.append((block["name"], case))
    return out


def _family(case: Case) -> str:
    if case.level == "md":
        return "md"
    if case.level == "model":
        return "se3t" if case.workload.startswith("se3t") else "mace"
    return case.level


@functools.cache
def _mace_parts(variant: str) -> tuple[tuple[str, Any, int], ...]:
    """``(op, descriptor, channels)`` of a fused MACE of ``variant`` (built on the CPU: the
    descriptors do not depend on the device; the elements are QM9's)."""
    from equibench.implementations.mace.backends import on_backend
    from equibench.implementations.mace.models import model_spec
    from equibench.implementations.mace.symmetric_contraction import FusedSymmetricContraction
    from equibench.kernels import FusedConvolution

    model = on_backend(model_spec(variant).build((1, 6, 7, 8, 9), 10.0, 0), "fused", "cpu")
    parts = []
    for module in model.modules():
        if isinstance(module, FusedConvolution):
            parts.append(("conv", module.desc, 0))
        elif isinstance(module, FusedSymmetricContraction):
            channels = module.contractions[0].weights_max.shape[-1]
            parts.append(("sc", module.description, int(channels)))
    return tuple(parts)


@functools.cache
def _se3t_parts(workload: str, variant: str) -> tuple[tuple[str, Any, int], ...]:
    from equibench.implementations.se3_transformer.bench import WORKLOADS
    from equibench.implementations.se3_transformer.model import SIZES, SE3TransformerPooled
    from equibench.implementations.se3_transformer.switches import variant_switches
    from equibench.kernels import FusedTensorProduct

    model = SE3TransformerPooled(SIZES[WORKLOADS[workload]], variant_switches(variant),
                                 "fused", "cpu")
    return tuple(("tp", m.desc, 0) for m in model.modules() if isinstance(m, FusedTensorProduct))


def parts(case: Case) -> tuple[tuple[str, Any, int], ...]:
    """``(op, descriptor, channels)`` of every fused kernel set ``case`` launches."""
    from equibench.levels.conv import parse_workload
    from equibench.workloads import get_tp_workload

    family = _family(case)
    if family == "tp":
        return (("tp", get_tp_workload(case.workload).descriptor, 0),)
    if family == "conv":
        return (("conv", parse_workload(case.workload)[0].descriptor, 0),)
    if family == "se3t":
        return _se3t_parts(case.workload, case.variant)
    return _mace_parts(case.variant)


def kernel_sets(presets: Iterable[str]) -> list[KernelSet]:
    """The kernel sets of every fused case of ``presets``, merged by descriptor and dtype."""
    sets: dict[tuple, KernelSet] = {}
    for preset in presets:
        for suite, case in fused_cases(preset):
            dtype = kernel_dtype(case.precision)
            depth = DEPTH[_family(case), case.direction]
            for op, desc, channels in parts(case):
                ks = sets.setdefault((op, desc.hash, channels, dtype),
                                     KernelSet(op, desc, dtype, channels))
                ks.depth = max(ks.depth, depth)
                ks.uses.add(Use(preset, suite, case.workload, case.variant))
    return list(sets.values())


def record_launches(ks: KernelSet) -> list:
    """The Triton launches of ``ks``, recorded from the wrappers on ``meta`` tensors."""
    from equibench.kernels.graph import ConvPlan
    from equibench.kernels.sc_triton import ScTritonKernels
    from equibench.kernels.tp_triton import TritonKernels

    launches: list = []

    def meta(*shape: int, dtype: torch.dtype = ks.dtype) -> torch.Tensor:
        return torch.empty(shape, dtype=dtype, device="meta")

    if ks.op == "sc":
        kernels = ScTritonKernels(ks.desc, record=launches.append)
        x = meta(NODES, ks.desc.rows("x"), ks.channels)
        for name in ("sc_fwd", "sc_bwd", "sc_dbwd")[:ks.depth]:
            kernels.run(name, x=x)
        return launches
    d = ks.desc
    k = TritonKernels(d, record=launches.append)
    nodes = NODES if ks.op == "conv" else ROWS
    x, g = meta(nodes, d.in1_dim), meta(nodes, d.out_dim)
    y, w = meta(ROWS, d.in2_dim), meta(ROWS, d.weight_numel)
    if ks.op == "tp":
        k.tp_forward(x, y, w)
        if ks.depth >= 2:
            k.tp_backward(g, x, y, w)
        if ks.depth >= 3:
            k.tp_double_backward(g, x, y, w, x, y, w)
        return launches
    i = meta(ROWS, dtype=torch.int64)
    ptr = meta(nodes + 1, dtype=torch.int64)
    plan = ConvPlan(i, i, ptr, i, ptr, i)
    k.conv_forward(x, y, w, plan)
    if ks.depth >= 2:
        k.conv_backward(g, x, y, w, plan)
    if ks.depth >= 3:
        k.conv_double_backward(g, x, y, w, x, y, w, plan)
    return launches


@dataclass
class JobInfo:
    job: Any  # gpu_compile.CompileJob
    op: str
    block: str
    grid: tuple[int, ...]
    uses: set[Use] = field(default_factory=set)


def plan_jobs(sets: list[KernelSet], archs: list[str]) -> dict[str, JobInfo]:
    """Every distinct compilation the kernel sets need on ``archs``, by job key."""
    from equibench.kernels.gpu_compile import jobs

    todo: dict[str, JobInfo] = {}
    for ks in sets:
        for launch in record_launches(ks):
            for job, config in jobs(launch, archs):
                info = todo.get(job.key)
                if info is None:
                    block = " ".join(f"{k}={v}" for k, v in config.kwargs.items())
                    info = todo[job.key] = JobInfo(job, ks.op, block,
                                                   tuple(launch.grid(config.kwargs)))
                info.uses |= ks.uses
    return todo


def _dtype(job: Any) -> str:
    return next((t[1:] for t in job.signature.values() if t.startswith("*fp")), "")


def table(todo: dict[str, JobInfo], results: dict) -> pd.DataFrame:
    """One row per compiled job (:data:`COLUMNS`)."""
    from equibench.kernels.gpu_compile import judge, triton_version
    from equibench.kernels.occupancy import ARCHITECTURES

    rows = []
    for key, info in todo.items():
        job, result = info.job, results[key]
        verdict = judge(job, result, info.grid)
        block_names = set(dict(p.split("=") for p in info.block.split()) if info.block else {})
        spec = " ".join(f"{name}={value}"
                        for (index,), value in sorted(job.constexprs.items())
                        if (name := list(job.signature)[index]) not in block_names
                        and value is not None)
        module = job.module.rsplit(".", 1)[-1]
        rows.append({
            "kernel": f"{module}.{job.kernel}", "op": info.op, "arch": job.arch,
            "gpus": ARCHITECTURES[job.arch].gpus, "dtype": _dtype(job),
            "specialization": spec, "block": info.block,
            "num_warps": job.options["num_warps"], "num_stages": job.options["num_stages"],
            "registers": result.registers, "spill_stores": result.spill_stores,
            "spill_loads": result.spill_loads, "stack_bytes": result.stack,
            "shared_bytes": result.shared, "blocks_per_sm": verdict.blocks_per_sm,
            "occupancy": verdict.occupancy, "limiter": verdict.limiter,
            "problem": verdict.problem or "", "error": result.error or "",
            "grid": "x".join(map(str, info.grid)), "compile_s": round(result.compile_s, 3),
            "presets": " ".join(sorted({u.preset for u in info.uses})),
            "suites": " ".join(sorted({f"{u.preset}:{u.suite}" for u in info.uses})),
            "workloads": " ".join(sorted({u.label() for u in info.uses})),
            "job": key,
        })
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["triton"] = triton_version()
    frame["git_commit"] = environment.git_commit()
    frame["created"] = pd.Timestamp.now(tz="UTC").strftime("%Y-%m-%d %H:%M")
    return frame.sort_values(["kernel", "arch", "dtype", "specialization", "block",
                              "num_warps"], ignore_index=True)


def failures(frame: pd.DataFrame, gate_presets: Iterable[str]) -> pd.DataFrame:
    """The rows that fail the check: a compile error anywhere, or any other problem
    (spills, shared memory or grid over the limit) in a kernel of ``gate_presets``."""
    gated = frame["presets"].str.split().apply(lambda ps: bool(set(ps) & set(gate_presets)))
    return frame[(frame["problem"] == "compile error") | ((frame["problem"] != "") & gated)]


def run(presets: list[str], archs: list[str], workers: int, gate_presets: list[str],
        out: Path | None, progress: Callable[[str], None] | None = None) -> tuple[pd.DataFrame,
                                                                                   pd.DataFrame]:
    """Compile every kernel of ``presets`` for ``archs``; returns the table and its
    failing rows (:func:`failures`)."""
    from equibench.kernels.cpu_build import cache_root
    from equibench.kernels.gpu_compile import compile_all

    say = progress or (lambda _: None)
    start = time.perf_counter()
    sets = kernel_sets(presets)
    todo = plan_jobs(sets, archs)
    say(f"{len(sets)} descriptor/dtype sets of {', '.join(presets)}: {len(todo)} "
        f"compilations for {', '.join(archs)} ({time.perf_counter() - start:.0f} s)")
    last = [0.0]

    def tick(done: int, total: int) -> None:
        now = time.perf_counter()
        if done == total or now - last[0] > 10:
            last[0] = now
            say(f"compiled {done}/{total} ({now - start:.0f} s)")

    results = compile_all([i.job for i in todo.values()], workers,
                          cache_root() / "gpu-compile", tick)
    frame = table(todo, results)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(out, index=False)
    return frame, failures(frame, gate_presets)


def main_progress(message: str) -> None:
    print(f"[gpu-compile] {message}", file=sys.stderr, flush=True)
