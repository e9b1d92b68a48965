"""Benchmark the fused CPU kernels against e3nn on mace-large (float32), print figures.

    python benchmarks/bench_kernels.py [--nodes 2000] [--degree 30] [--batch 10000]

Each case runs in a fresh subprocess; its peak memory is the growth of the peak RSS
(``VmHWM``, reset through ``/proc/self/clear_refs``) over the RSS after building the
inputs, so inputs are not counted but outputs, gradients and temporaries are. Times are
medians of ``--reps`` calls after one warm-up call (e3nn eager convolution:
``--e3nn-reps`` calls, no warm-up, as each takes tens of seconds); the
``torch.compile`` time is the first call, printed apart.
The roofline bound of a case is ``max(FLOPs / peak, min_bytes / bandwidth)`` with the
peak measured by a float32 matmul and the bandwidth by a large copy; FLOPs and bytes
follow REFERENCE.md section 2 (``TPDescriptor.flops`` / ``min_bytes``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from equibench.kernels import TPDescriptor

WORKLOAD = "mace-large"


@dataclass(frozen=True)
class Case:
    """One measurement: ``kind`` tp|conv, ``impl`` fused|e3nn|e3nn-compiled, ``direction``
    forward|forward+backward."""

    kind: str
    impl: str
    direction: str

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.impl}:{self.direction}"


# --------------------------------------------------------------------------- inputs
def _descriptor() -> TPDescriptor:
    # imported lazily so that --help and the case dispatch stay light
    from equibench.kernels.workloads import workload_descriptor

    return workload_descriptor(WORKLOAD)


def atom_graph(num_nodes: int, degree: float, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Uniform random atoms in a periodic box sized for ``degree`` neighbours within a 5 A
    cutoff (minimum image); edges ``src -> dst`` in random order and edge vectors."""
    cutoff = 5.0
    box = (num_nodes * 4 / 3 * math.pi * cutoff**3 / degree) ** (1 / 3)
    gen = torch.Generator().manual_seed(seed)
    pos = torch.rand(num_nodes, 3, generator=gen, dtype=torch.float64) * box
    src, dst, vec = [], [], []
    for start in range(0, num_nodes, 256):  # blocks keep the pair matrix small
        d = pos[None, :, :] - pos[start : start + 256, None, :]
        d -= box * torch.round(d / box)
        r = d.norm(dim=-1)
        i, j = torch.nonzero((r < cutoff) & (r > 0), as_tuple=True)
        dst.append(i + start)
        src.append(j)
        vec.append(d[i, j])
    src_t, dst_t, vec_t = torch.cat(src), torch.cat(dst), torch.cat(vec)
    perm = torch.randperm(src_t.numel(), generator=gen)
    return src_t[perm], dst_t[perm], vec_t[perm].float()


def _inputs(args: argparse.Namespace, kind: str) -> dict[str, torch.Tensor | int]:
    from e3nn import o3

    desc = _descriptor()
    gen = torch.Generator().manual_seed(1)
    if kind == "tp":
        rows = args.batch
        x = torch.randn(rows, desc.in1_dim, generator=gen)
        y = torch.randn(rows, desc.in2_dim, generator=gen)
        extra: dict[str, torch.Tensor | int] = {}
    else:
        src, dst, vec = atom_graph(args.nodes, args.degree)
        rows = src.numel()
        x = torch.randn(args.nodes, desc.in1_dim, generator=gen)
        y = o3.spherical_harmonics(o3.Irreps(desc.irreps_in2), vec, normalize=True)
        extra = {"src": src, "dst": dst, "num_nodes": args.nodes}
    w = torch.randn(rows, desc.weight_numel, generator=gen) / math.sqrt(desc.weight_numel)
    out_rows = rows if kind == "tp" else args.nodes
    grad = torch.randn(out_rows, desc.out_dim, generator=gen)
    return {"x": x, "y": y, "w": w, "grad": grad, "rows": rows, **extra}


def _function(case: Case, inp: dict) -> Callable[[torch.Tensor, ...], torch.Tensor]:
    """``f(x, y, w) -> out`` of the case's implementation."""
    from equibench.kernels import FusedConvolution, FusedTensorProduct

    desc = _descriptor()
    if case.impl == "fused":
        if case.kind == "tp":
            return FusedTensorProduct(desc)
        conv = FusedConvolution(desc)
        src, dst, n = inp["src"], inp["dst"], inp["num_nodes"]
        return lambda x, y, w: conv(x, y, w, src, dst, n)
    tp = desc.to_e3nn()
    if case.kind == "tp":
        fn = tp
    else:
        src, dst, n = inp["src"], inp["dst"], inp["num_nodes"]

        def fn(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
            out = torch.zeros(n, desc.out_dim, dtype=x.dtype)
            return out.index_add(0, dst, tp(x[src], y, w))

    return torch.compile(fn) if case.impl == "e3nn-compiled" else fn


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> int:
    """Reset the kernel's peak-RSS counter (Linux ``clear_refs`` 5); returns RSS bytes."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kib("VmRSS") * 1024


def _peak() -> int:
    """Peak RSS in bytes since the last :func:`_reset_peak`."""
    return _status_kib("VmHWM") * 1024


def run_case(case: Case, args: argparse.Namespace) -> dict:
    """Time one case in this process; returns times, compile time and peak memory."""
    torch.manual_seed(0)
    inp = _inputs(args, case.kind)
    fn = _function(case, inp)
    x, y, w, grad = inp["x"], inp["y"], inp["w"], inp["grad"]
    if case.impl == "fused":
        from equibench.kernels.cpu_build import cpu_kernels

        cpu_kernels(_descriptor())  # load the library before the memory baseline
    base = _reset_peak()

    def call() -> None:
        if case.direction == "forward":
            with torch.no_grad():
                fn(x, y, w)
        else:
            xs, ys, ws = (t.detach().requires_grad_(True) for t in (x, y, w))
            torch.autograd.grad(fn(xs, ys, ws), (xs, ys, ws), grad)

    slow = case.impl == "e3nn" and case.kind == "conv"
    compile_s = None
    if not slow:
        t = time.perf_counter()
        call()  # warm-up: kernel load / graph plan / torch.compile
        compile_s = time.perf_counter() - t if case.impl == "e3nn-compiled" else None
    times = []
    for _ in range(args.e3nn_reps if case.impl != "fused" else args.reps):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return {
        "times": times,
        "compile_s": compile_s,
        "peak_bytes": _peak() - base,
        "rows": inp["rows"],
    }


def run_isolated(case: Case, args: argparse.Namespace) -> dict:
    """Run a case in a fresh interpreter; a failure (e.g. out of memory) is reported."""
    cmd = [sys.executable, __file__, "--case", case.name, *sys.argv[1:]]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"error": f"exit {proc.returncode}: {tail[0][:120]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- machine
def machine_peaks(threads: int) -> tuple[float, float]:
    """(float32 FLOP/s of a 2048^3 matmul, bytes/s of a 256 MiB copy), best of 5."""
    torch.set_num_threads(threads)
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    t_mm = min(_timed(lambda: torch.mm(a, b)) for _ in range(5))
    src = torch.randn(64 * 1024 * 1024)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t_cp = min(_timed(lambda: dst.copy_(src)) for _ in range(5))
    return 2 * n**3 / t_mm, 2 * src.numel() * 4 / t_cp


def _timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# --------------------------------------------------------------------------- report
def _check_accuracy() -> float:
    """Relative error of the fused float32 conv against e3nn float64 on a small graph."""
    from equibench.kernels import FusedConvolution

    desc = _descriptor()
    src, dst, vec = atom_graph(100, 30, seed=3)
    torch.set_default_dtype(torch.float64)
    try:
        tp = desc.to_e3nn()
    finally:
        torch.set_default_dtype(torch.float32)
    from e3nn import o3

    x = torch.randn(100, desc.in1_dim, dtype=torch.float64)
    y = o3.spherical_harmonics(o3.Irreps(desc.irreps_in2), vec.double(), normalize=True)
    w = torch.randn(src.numel(), desc.weight_numel, dtype=torch.float64)
    ref = torch.zeros(100, desc.out_dim, dtype=torch.float64).index_add(0, dst, tp(x[src], y, w))
    got = FusedConvolution(desc)(x.float(), y.float(), w.float(), src, dst, 100)
    return float((got.double() - ref).abs().max() / ref.abs().max())


def _row(
    name: str, kind: str, direction: str, impl: str, r: dict, res: dict,
    peak: float, bw: float, nodes: int,
) -> str:  # fmt: skip
    """One printed line: time, compile time, memory, GFLOP/s, roofline fraction, speedups."""
    if "error" in r:
        return f"{name:34s} {r['error']}"
    desc = _descriptor()
    t = statistics.median(r["times"])
    rows = r["rows"]
    dirs = ["forward"] if direction == "forward" else ["forward", "backward"]
    flops = sum(desc.flops(d, rows) for d in dirs)
    if kind == "tp":
        nbytes = sum(desc.min_bytes(d, rows, 4) for d in dirs)
    else:
        nbytes = sum(desc.conv_min_bytes(d, nodes, rows, 4) for d in dirs)
    bound = max(flops / peak, nbytes / bw)
    speed = []
    for ref in ("e3nn", "e3nn-compiled"):
        rr = res.get(ref, {})
        ok = impl == "fused" and "times" in rr
        speed.append(f"{statistics.median(rr['times']) / t:7.1f}x" if ok else "")
    comp = f"{r['compile_s']:9.1f}" if r["compile_s"] is not None else ""
    return (f"{name:34s} {t:9.3f} {comp:>9s} {r['peak_bytes'] / 2**20:9.0f} "
            f"{flops / t / 1e9:8.1f} {bound / t:8.1%} {speed[0]:>8s} {speed[1]:>8s}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--nodes", type=int, default=2000)
    p.add_argument("--degree", type=float, default=30.0, help="mean neighbours per node")
    p.add_argument("--batch", type=int, default=10000, help="rows of the bare TP")
    p.add_argument("--reps", type=int, default=5, help="timed calls of fast cases")
    p.add_argument("--e3nn-reps", type=int, default=1, help="timed calls of e3nn cases")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile'd e3nn")
    p.add_argument("--case", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.case:
        kind, impl, direction = args.case.split(":")
        print(json.dumps(run_case(Case(kind, impl, direction), args)))
        return

    from equibench.kernels.cpu_build import cpu_kernels

    desc = _descriptor()
    cpu_kernels(desc)  # build once here, so no case times the compiler
    threads = torch.get_num_threads()
    peak, bw = machine_peaks(threads)
    src, _, _ = atom_graph(args.nodes, args.degree)
    edges = src.numel()
    print(f"equibench fused kernels vs e3nn, {WORKLOAD} float32, {threads} threads, "
          f"torch {torch.__version__}, load avg {os.getloadavg()[0]:.1f}")  # fmt: skip
    print(f"machine: matmul {peak / 1e9:.0f} GFLOP/s, copy {bw / 1e9:.1f} GB/s")
    print(f"bare TP batch {args.batch}; conv graph {args.nodes} nodes, {edges} edges "
          f"({edges / args.nodes:.1f}/node, random order)")  # fmt: skip
    print(f"fused conv float32 vs e3nn float64 (100 nodes): rel. error {_check_accuracy():.1e}")
    impls = ["e3nn"] + ([] if args.no_compile else ["e3nn-compiled"]) + ["fused"]
    header = (f"{'case':34s} {'median s':>9s} {'compile s':>9s} {'peak MiB':>9s} "
              f"{'GFLOP/s':>8s} {'roofline':>8s} {'vs e3nn':>8s} {'vs comp.':>8s}")  # fmt: skip
    print(header)
    print("-" * len(header))
    for kind in ("tp", "conv"):
        for direction in ("forward", "forward+backward"):
            res = {impl: run_isolated(Case(kind, impl, direction), args) for impl in impls}
            for impl, r in res.items():
                print(_row(f"{kind} {direction} {impl}", kind, direction, impl, r, res,
                           peak, bw, args.nodes))  # fmt: skip
            if "peak_bytes" in res["fused"] and "peak_bytes" in res["e3nn"]:
                ratio = res["fused"]["peak_bytes"] / max(res["e3nn"]["peak_bytes"], 1)
                print(f"{'':34s} fused/e3nn peak memory: {ratio:.3f}")
    print("GFLOP/s: nominal FLOPs (3 x nnz x mul per path forward, 9x backward) / time;")
    print("roofline: fraction of max(FLOPs/peak, min bytes/bandwidth) achieved.")


if __name__ == "__main__":
    main()
