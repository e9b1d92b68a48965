"""Instructions executed by one call of a generated CPU kernel, counted by cachegrind: the
tensor product's and convolution's (:mod:`.cpu_codegen`) and the symmetric contraction's
(:mod:`.sc_cpu`).

Wall-clock times on this project's shared VM vary by 1.2-2.7x between runs of the same
code; the number of instructions a deterministic single-threaded program executes does not
vary at all, so it can gate CI on what the generated kernels execute (code-generation
changes, extra arithmetic or loads, a different algorithm).

How a count is made (:func:`count_instructions`, :func:`count_sc_instructions`):

* the kernel source of :func:`.cpu_codegen.generate_cpu_source` (or
  :func:`.sc_cpu.generate_source`) is compiled with the fixed flags :data:`FLAGS` (not
  ``-march=native``: the count must not depend on the host CPU, and valgrind 3.19 cannot
  execute AVX-512; the symmetric contraction adds its own ``sc_cpu.CFLAGS``, as its
  production build does) into an object file cached under
  ``cpu_build.cache_root() / "instruction-count"``;
* a generated driver program (its own translation unit, so the compiler cannot
  specialize the kernel for the driver's constant sizes) fills the inputs from a fixed
  seed and calls the kernel ``argv[1]`` times, as ``ctypes`` calls the production
  library: the argument lists of ``cpu_build._SIGNATURES`` (the symmetric contraction's:
  the node count, the arrays its program reads, those it writes), one thread;
* the driver runs under ``valgrind --tool=cachegrind --cache-sim=no`` with 2 and with 4
  calls; half the difference of the two totals (``Ir``) is one call, without program
  start-up, input filling, the first call's lazy symbol binding or the first two calls'
  different paths through ``malloc`` (the conv kernels allocate scratch copies).

The count includes what the kernel itself calls (``memset``, ``malloc``), so a different
compiler or C library gives different counts: :func:`toolchain` says which were used. The
host CPU does not matter as long as valgrind runs the code (AVX2): valgrind shows the
program one synthetic CPU, so glibc picks the same ``memset`` everywhere.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .cpu_build import _SIGNATURES, _compiler_id, cache_root, direction_group
from .cpu_codegen import SCALARS, generate_cpu_source
from .descriptor import TPDescriptor
from .errors import KernelUnavailable
from .straight_line import arrays
from .symmetric_contraction import SymmetricContractionDescriptor

FLAGS: tuple[str, ...] = ("-O3", "-march=x86-64-v3", "-std=c++17", "-fopenmp-simd")
"""Compiler flags of the counted build. ``-fopenmp-simd`` honours the generated
``#pragma omp simd`` (the production build vectorizes with them) without the OpenMP
runtime, so the count is of one thread and no thread pool start-up is counted."""

Kernel = Literal["tp_fwd", "tp_bwd", "tp_dbwd", "conv_fwd", "conv_bwd", "conv_dbwd"]
ScKernel = Literal["sc_fwd", "sc_bwd", "sc_dbwd"]
Dtype = Literal["f32", "f64"]
KERNELS: tuple[Kernel, ...] = ("tp_fwd", "tp_bwd", "tp_dbwd", "conv_fwd", "conv_bwd", "conv_dbwd")
SC_KERNELS: tuple[ScKernel, ...] = ("sc_fwd", "sc_bwd", "sc_dbwd")

CONV_DEGREE = 8
"""Edges per destination node of the synthetic conv graph (a QM9 radius graph has ~8-9)."""
GRAPH_SEED = 0
INPUT_SEED = 0x9E3779B97F4A7C15
_CALLS = (2, 4)
# glibc's memset/memcpy switch to `rep stosb`/`rep movsb` above 2 KiB, and valgrind counts
# every byte of those as an instruction: zeroing an output row would outweigh the product.
# Without them the same calls run vector loops, whose count follows the stores made.
_ENV = {"GLIBC_TUNABLES": "glibc.cpu.x86_rep_stosb_threshold=1000000000000:"
                          "glibc.cpu.x86_rep_movsb_threshold=1000000000000"}
# C types of the ctypes argument types; every pointer const, so the driver can pass its
# read-only graph arrays (the symbol is C, so the declaration only needs the ABI to match)
_CTYPES = {ctypes.c_int64: "int64_t", ctypes.c_void_p: "const void*", ctypes.c_int: "int"}

# A pointer argument of a kernel: ("f", rows, width) is a float buffer of rows x width,
# ("i", name) one of the graph's int64 arrays.
_Arg = tuple[str, int, int] | tuple[str, str]


@dataclass(frozen=True)
class Toolchain:
    """What a count depends on besides the generated code."""

    compiler: str
    valgrind: str
    libc: str
    flags: tuple[str, ...] = FLAGS


def _cxx() -> str:
    cxx = os.environ.get("CXX", "c++")
    if shutil.which(cxx) is None:
        raise KernelUnavailable(
            f"no C++ compiler: {cxx!r} is not on PATH (apt-get install g++, or set $CXX)"
        )
    return cxx


def _valgrind() -> str:
    path = shutil.which("valgrind")
    if path is None:
        raise KernelUnavailable(
            "instruction counts need valgrind, which is not on PATH (apt-get install valgrind)"
        )
    return path


def toolchain() -> Toolchain:
    """The compiler, valgrind and C library that counts are made with here; raises
    :class:`KernelUnavailable` when the compiler or valgrind is missing."""
    version = subprocess.run(
        [_valgrind(), "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    # gcc's version line starts with the name it was called by; called by its real path,
    # "c++" and "g++" (links to one compiler) read the same
    compiler = _compiler_id(os.path.realpath(shutil.which(_cxx()) or ""))
    return Toolchain(compiler, version, " ".join(platform.libc_ver()))


def workload_descriptor(workload: str) -> TPDescriptor:
    """The descriptor the ``fused`` implementation runs for a tensor-product workload of
    :data:`equibench.workloads.TP_WORKLOADS`."""
    from equibench.workloads import get_tp_workload

    return get_tp_workload(workload).descriptor


def products_per_call(kernel: Kernel, batch: int) -> int:
    """Tensor products one call computes: ``batch`` rows, or the conv graph's edges."""
    return batch * CONV_DEGREE if kernel.startswith("conv") else batch


@functools.cache
def _graph(nodes: int) -> dict[str, list[int]]:
    """CSR arrays of the synthetic conv graph: every node receives ``CONV_DEGREE`` edges
    from sources drawn uniformly (seeded), sorted by the production :class:`ConvPlan`."""
    import torch

    from .graph import ConvPlan

    gen = torch.Generator().manual_seed(GRAPH_SEED)
    dst = torch.arange(nodes).repeat_interleave(CONV_DEGREE)
    src = torch.randint(0, nodes, (nodes * CONV_DEGREE,), generator=gen)
    plan = ConvPlan.build(src, dst, nodes, nodes)
    names = ("edge_src", "edge_dst", "dst_ptr", "dst_perm", "src_ptr", "src_perm")
    return {name: getattr(plan, name).tolist() for name in names}


def _arguments(kernel: Kernel, desc: TPDescriptor, batch: int) -> tuple[list[int], list[_Arg]]:
    """Integer and pointer arguments of one call, in the order of ``_SIGNATURES``."""
    in1, in2, out, wn = desc.in1_dim, desc.in2_dim, desc.out_dim, desc.weight_numel
    if kernel.startswith("tp"):
        x, y, w, o = ("f", batch, in1), ("f", batch, in2), ("f", batch, wn), ("f", batch, out)
        pointers: dict[str, list[_Arg]] = {
            "tp_fwd": [x, y, w, o],
            "tp_bwd": [o, x, y, w, x, y, w],
            # every cotangent given: the double backward's full work
            "tp_dbwd": [o, x, y, w, x, y, w, o, x, y, w],
        }
        return [batch], pointers[kernel]
    edges = batch * CONV_DEGREE
    x, o = ("f", batch, in1), ("f", batch, out)
    y, w = ("f", edges, in2), ("f", edges, wn)
    by_dst: list[_Arg] = [("i", "dst_ptr"), ("i", "dst_perm"), ("i", "edge_src")]
    by_src: list[_Arg] = [("i", "src_ptr"), ("i", "src_perm"), ("i", "edge_dst")]
    # The last pointer: the workspace (cpu_build.conv_workspace) of nodes x columns.
    pointers = {
        "conv_fwd": [*by_dst, x, y, w, o, ("f", batch, in1)],
        "conv_bwd": [*by_src, o, x, y, w, x, y, w, ("f", batch, out)],
        "conv_dbwd": [*by_dst, *by_src, o, x, y, w, x, y, w, o, x, y, w,
                      ("f", batch, 2 * in1 + out)],
    }
    return [batch, batch], pointers[kernel]


def _driver_source(kernel: Kernel, desc: TPDescriptor, dtype: Dtype, batch: int) -> str:
    """C++ of a program that calls ``kernel`` ``argv[1]`` times on seeded inputs."""
    ints, pointers = _arguments(kernel, desc, batch)
    params = [_CTYPES[t] for t in _SIGNATURES[kernel]]
    if len(params) != len(ints) + len(pointers) + 1:  # + 1: the thread count
        raise AssertionError(f"{kernel}: arguments disagree with cpu_build._SIGNATURES")
    graph = _graph(batch) if kernel.startswith("conv") else {}
    return _program(f"{kernel}_{dtype}", params, SCALARS[dtype], ints, pointers, graph)


def _sc_driver_source(kernel: ScKernel, desc: SymmetricContractionDescriptor, dtype: Dtype,
                      nodes: int, channels: int) -> str:
    """C++ of a program that calls symmetric-contraction ``kernel`` ``argv[1]`` times on
    seeded ``(nodes, rows, channels)`` arrays, in the order of :func:`.sc_cpu.kernel_source`
    (those the program reads, then those it writes)."""
    read, written = arrays(desc.programs()[kernel])
    names = read + written
    params = ["int64_t", *[_CTYPES[ctypes.c_void_p]] * len(names), "int"]
    pointers: list[_Arg] = [("f", nodes * desc.rows(a), channels) for a in names]
    return _program(f"{kernel}_{dtype}", params, SCALARS[dtype], [nodes], pointers, {})


def _program(fn: str, params: list[str], scalar: str, ints: list[int], pointers: list[_Arg],
             statics: dict[str, list[int]]) -> str:
    """C++ of a program that calls ``fn(ints..., pointers..., 1)`` ``argv[1]`` times: float
    buffers filled from :data:`INPUT_SEED`, ``statics`` as constant int64 arrays."""
    lines = [
        "#include <cstdint>",
        "#include <cstdlib>",
        "#include <vector>",
        # declared as ctypes sees it; the definition lives in the kernel's object file
        f'extern "C" void {fn}({", ".join(params)});',
        f"static uint64_t state = {INPUT_SEED}ull;",
        f"static std::vector<{scalar}> filled(size_t n) {{",
        f"  std::vector<{scalar}> v(n);",
        "  for (auto& e : v) {  // 64-bit LCG (Knuth's MMIX constants), values in [-1, 1)",
        "    state = state * 6364136223846793005ull + 1442695040888963407ull;",
        f"    e = {scalar}(int64_t(state >> 40) - (int64_t(1) << 23)) / {scalar}(1 << 23);",
        "  }",
        "  return v;",
        "}",
    ]
    for name, values in statics.items():
        lines.append(f"static const int64_t {name}[] = {{{', '.join(map(str, values))}}};")
    args = [str(i) for i in ints]
    lines.append("int main(int argc, char** argv) {")
    for n, arg in enumerate(pointers):
        if arg[0] == "f":
            lines.append(f"  std::vector<{scalar}> b{n} = filled({arg[1] * arg[2]});")
            args.append(f"b{n}.data()")
        else:
            args.append(str(arg[1]))
    lines += [
        "  const long calls = argc > 1 ? std::atol(argv[1]) : 1;",
        f"  for (long c = 0; c < calls; ++c) {fn}({', '.join([*args, '1'])});",
        "  return 0;",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _compile(cxx: str, flags: Sequence[str], sources: Sequence[Path], target: Path, *,
             object_only: bool) -> None:
    """Compile into ``target`` unless it exists; built under a temporary name and moved
    into place, so a concurrent process never runs half a file."""
    if target.exists():
        return
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    cmd = [cxx, *flags, *(["-c"] if object_only else []), *map(str, sources), "-o", str(tmp)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise KernelUnavailable(f"compiling {sources[0]} failed:\n{out.stderr[-4000:]}")
    os.replace(tmp, target)


def _write(path: Path, text: str) -> None:
    if not path.exists():
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def _executable(kernel_source: str, driver: str, dtype: Dtype, flags: Sequence[str]) -> Path:
    """The driver executable linked with the kernel source's object file (built on first
    use, then cached); files are named by the hash of what they are built from, so a
    changed generator builds anew."""
    cxx = _cxx()
    key = hashlib.sha256(
        "\n".join([kernel_source, " ".join(flags), _compiler_id(cxx)]).encode()
    ).hexdigest()[:16]
    build_dir = cache_root() / "instruction-count" / key
    build_dir.mkdir(parents=True, exist_ok=True)
    kernel_src, kernel_obj = build_dir / f"kernels_{dtype}.cpp", build_dir / f"kernels_{dtype}.o"
    _write(kernel_src, kernel_source)
    _compile(cxx, flags, [kernel_src], kernel_obj, object_only=True)
    name = f"driver_{hashlib.sha256(driver.encode()).hexdigest()[:16]}"
    driver_src, exe = build_dir / f"{name}.cpp", build_dir / name
    _write(driver_src, driver)
    _compile(cxx, flags, [driver_src, kernel_obj], exe, object_only=False)
    return exe


def build_driver(kernel: Kernel, desc: TPDescriptor, dtype: Dtype, batch: int) -> Path:
    """The driver executable of one tensor-product or convolution case."""
    if kernel not in KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join(KERNELS)}")
    # the unit that runs: the kernel's direction group (cpu_build)
    return _executable(generate_cpu_source(desc, dtype, exports=direction_group(kernel)),
                       _driver_source(kernel, desc, dtype, batch), dtype, FLAGS)


def build_sc_driver(kernel: ScKernel, desc: SymmetricContractionDescriptor, dtype: Dtype,
                    nodes: int, channels: int) -> Path:
    """The driver executable of one symmetric-contraction case: ``nodes`` nodes of
    ``channels`` channels (the kernels are generated for a fixed channel count)."""
    from .sc_cpu import CFLAGS, generate_source

    if kernel not in SC_KERNELS:
        raise ValueError(f"unknown kernel {kernel!r}; choose one of {', '.join(SC_KERNELS)}")
    return _executable(generate_source(desc, dtype, channels),
                       _sc_driver_source(kernel, desc, dtype, nodes, channels), dtype,
                       (*FLAGS, *CFLAGS))


def parse_cachegrind(path: Path, event: str = "Ir") -> int:
    """The program total of ``event`` from a cachegrind output file (its ``events:`` and
    ``summary:`` lines)."""
    events: list[str] = []
    for line in path.read_text().splitlines():
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("summary:"):
            if event not in events:
                raise ValueError(f"{path}: no {event!r} among the events {events}")
            return int(line.split()[1:][events.index(event)])
    raise ValueError(f"{path}: no summary line")


def _run_counted(valgrind: str, exe: Path, calls: int, workdir: Path) -> int:
    out_file = workdir / f"cachegrind.{calls}.out"
    cmd = [valgrind, "--tool=cachegrind", "--cache-sim=no",
           f"--cachegrind-out-file={out_file}", str(exe), str(calls)]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, check=False,
                         env={**os.environ, **_ENV})
    if run.returncode != 0:
        raise KernelUnavailable(
            f"{exe.name} under cachegrind exited with {run.returncode}:\n{run.stderr[-4000:]}"
        )
    return parse_cachegrind(out_file)


def count_instructions(
    workload: str, kernel: Kernel, dtype: Dtype = "f32", batch: int = 64
) -> int:
    """Instructions (cachegrind ``Ir``) one call of ``kernel`` executes on ``workload``
    (a tensor-product workload name) with ``batch`` rows (``tp_*``) or nodes (``conv_*``:
    the seeded synthetic graph of :func:`_graph`), in ``dtype``, on one thread.

    Raises :class:`KernelUnavailable` when valgrind or the compiler is missing or the
    program fails under valgrind.
    """
    valgrind = _valgrind()
    return _count(valgrind, build_driver(kernel, workload_descriptor(workload), dtype, batch),
                  kernel)


def count_sc_instructions(
    desc: SymmetricContractionDescriptor, channels: int, kernel: ScKernel,
    dtype: Dtype = "f32", nodes: int = 16,
) -> int:
    """Instructions one call of symmetric-contraction ``kernel`` (``sc_fwd``, ``sc_bwd``,
    ``sc_dbwd``) of ``desc`` executes on ``nodes`` nodes of ``channels`` channels, in
    ``dtype``, on one thread; raises as :func:`count_instructions`."""
    valgrind = _valgrind()
    return _count(valgrind, build_sc_driver(kernel, desc, dtype, nodes, channels), kernel)


def _count(valgrind: str, exe: Path, kernel: str) -> int:
    """One call's instructions: half the difference of the totals of 4 and 2 calls."""
    with tempfile.TemporaryDirectory(prefix="eqb-cachegrind-") as tmp:
        few, many = (_run_counted(valgrind, exe, calls, Path(tmp)) for calls in _CALLS)
    per_call, rest = divmod(many - few, _CALLS[1] - _CALLS[0])
    if rest:  # calls 3 and 4 differ: the kernel has no steady per-call count to report
        raise RuntimeError(f"{exe.name}: repeated calls of {kernel} differ in length")
    return per_call
