"""The symmetric contraction's CPU kernels: its three straight-line programs printed as
C++, compiled and called through ``ctypes`` (as the tensor product's, :mod:`.cpu_build`).

Each kernel runs over nodes in parallel (OpenMP) and over channels a vector at a time
(unit stride: arrays are ``(n, rows, c)``): the program is printed as straight-line code
on GCC vector types (``vector_size``, one AVX2 register: 8 floats or 4 doubles), its
coefficients as exact hexadecimal literals, cut into chunks that are each their own
(never inlined) function.

Build time. The first block of the ``oeq`` MACE (correlation 3, outputs up to 2e) has
programs of ~1,000 (forward), ~2,000 (backward) and ~4,000 (double backward) statements.
Printed as the body of an ``omp simd`` loop over a tile of channels, GCC 12 spent ~80 s
per dtype on them at -O3, most of it in induction-variable optimization (every load and
store of the body is a use of the loop's counter) and register allocation; without a loop
around the code (one vector per call of a chunk function) there is nothing for ivopts to
do and the allocator sees one chunk at a time. Each kernel and dtype is its own library,
built on first call (an inference process never builds the double backward), and a large
kernel's chunks are spread over several translation units that ninja compiles in
parallel.
"""

from __future__ import annotations

import ctypes
import threading

import torch
from torch import Tensor

from .cpu_build import build_library, cache_root
from .cpu_codegen import SCALARS
from .errors import KernelUnavailable
from .straight_line import Load, Statement, Store, Sum, arrays
from .symmetric_contraction import SymmetricContractionDescriptor

_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}
KERNELS = ("sc_fwd", "sc_bwd", "sc_dbwd")
# Kernels built together, into one library, when the first of them is called: MACE's
# inference takes forces, so a forward is followed by a backward (their translation units
# compile in parallel); only training calls the double backward.
GROUPS = (("sc_fwd", "sc_bwd"), ("sc_dbwd",))
# Statements per chunk function (see :func:`kernel_sources`).
CHUNK = 128
# Statements per translation unit of a kernel's chunk functions: ninja compiles the units
# of one kernel in parallel.
PART = 1024
# Lanes of the widest vector type (32 bytes: AVX2). Wider generic vectors are lowered to
# several registers by GCC, and cost it minutes on these programs.
LANES = {"f32": 8, "f64": 4}
CFLAGS: tuple[str, ...] = ()
# Below this many columns (nodes x channels) one thread does the work: starting a team
# costs more than a small call.
MIN_PARALLEL_COLUMNS = 2048


def _literal(coef: float, sfx: str) -> str:
    return coef.hex() + ("f" if sfx == "f32" else "")


def _term(coef: float, factors: tuple[str, ...], sfx: str) -> str:
    product = " * ".join(f"v_{f}" for f in factors)
    if coef == 1.0:
        return product
    if coef == -1.0:
        return f"-{product}"
    return f"{_literal(coef, sfx)} * {product}"


def _statement(s: Statement, sfx: str, channels: int) -> str:
    if isinstance(s, Load):
        return f"const V v_{s.out} = *(const V*)(p_{s.array} + {s.row * channels});"
    if isinstance(s, Sum):
        value = " + ".join(_term(coef, factors, sfx) for coef, factors in s.terms) or "V{}"
        return f"const V v_{s.out} = {value};"
    value = "V{}" if s.value is None else f"v_{s.value}"
    return f"*(V*)(p_{s.array} + {s.row * channels}) = {value};"


def _chunks(program: list[Statement]) -> list[list[Statement]]:
    """``program`` cut into pieces of about :data:`CHUNK` statements."""
    return [program[i:i + CHUNK] for i in range(0, len(program), CHUNK)]


def _slots(chunks: list[list[Statement]]) -> tuple[dict[str, int], list[list[str]], list[set[str]]]:
    """Scratch slots for the values that cross from one chunk to a later one (a slot is
    reused once its value's last reader has run), the values each chunk reads from scratch,
    and those each chunk writes there."""
    defined_in = {s.out: n for n, chunk in enumerate(chunks) for s in chunk
                  if not isinstance(s, Store)}
    last_use: dict[str, int] = {}
    reads: list[list[str]] = []
    for n, chunk in enumerate(chunks):
        used = dict.fromkeys(
            v for s in chunk for v in (
                [s.value] if isinstance(s, Store) and s.value is not None
                else [f for _, fs in s.terms for f in fs] if isinstance(s, Sum) else [])
            if defined_in[v] < n)
        reads.append(list(used))
        for v in used:
            last_use[v] = n
    slot: dict[str, int] = {}
    free: list[int] = []
    size = 0
    writes: list[set[str]] = [set() for _ in chunks]
    for n in range(len(chunks)):
        for v in [v for v, last in last_use.items() if last == n - 1]:
            free.append(slot[v])
        for v in [v for v, d in defined_in.items() if d == n and v in last_use]:
            if free:
                slot[v] = free.pop()
            else:
                slot[v], size = size, size + 1
            writes[n].add(v)
    return slot, reads, writes


def lanes(channels: int, sfx: str) -> int:
    """Channels per vector: the widest power of two up to :data:`LANES` that divides
    ``channels``."""
    return next(t for t in (8, 4, 2, 1) if t <= LANES[sfx] and channels % t == 0)


def _vector_type(sfx: str, width: int) -> str:
    scalar = SCALARS[sfx]
    size = 4 if sfx == "f32" else 8
    # aligned(element): loads and stores at any column; may_alias: a view of the arrays
    return (f"typedef {scalar} V __attribute__((vector_size({width * size}), "
            f"aligned({size}), may_alias));")


def kernel_sources(desc: SymmetricContractionDescriptor, name: str,
                   program: list[Statement], sfx: str, channels: int,
                   split: bool = True) -> list[str]:
    """C++ of one exported function ``{name}_{sfx}(n, inputs..., outputs..., threads)``
    for ``channels`` channels (a constant: every address is a constant offset from a
    node's base): the first source defines it, the others (with ``split``: one per
    :data:`PART` statements) more of its chunk functions.

    The program runs in chunks of :data:`CHUNK` statements, each a function that computes
    one vector of channels; values that cross chunks go through a per-thread scratch
    buffer. Chunks bound the values the register allocator sees at once (one loop body
    of the whole double backward of a correlation-3 block cost GCC 150 s).
    """
    width = lanes(channels, sfx)
    scalar = SCALARS[sfx]
    read, written = arrays(program)
    chunks = _chunks(program)
    slot, reads, writes = _slots(chunks)
    pointers = [f"const {scalar}* __restrict p_{a}" for a in read]
    pointers += [f"{scalar}* __restrict p_{a}" for a in written]
    signature = ", ".join([*pointers, f"{scalar}* __restrict s"])
    per_part = max(1, PART // CHUNK) if split else len(chunks)
    parts = [range(i, min(i + per_part, len(chunks))) for i in range(0, len(chunks), per_part)]
    linkage = "static" if len(parts) == 1 else '__attribute__((visibility("hidden")))'
    functions = []
    for n, (chunk, inputs, outputs) in enumerate(zip(chunks, reads, writes, strict=True)):
        lines = [f"const V v_{v} = *(const V*)(s + {slot[v] * width});" for v in inputs]
        for statement in chunk:
            lines.append(_statement(statement, sfx, channels))
            if not isinstance(statement, Store) and statement.out in outputs:
                lines.append(f"*(V*)(s + {slot[statement.out] * width}) = v_{statement.out};")
        body = "\n".join(f"  {line}" for line in lines)
        functions.append(f"{linkage} __attribute__((noinline)) void {name}_{sfx}_{n}"
                         f"({signature}) {{\n{body}\n}}")
    args = ", ".join([*(f"p_{a} + c" for a in read + written), "s"])
    calls = "\n".join(f"      {name}_{sfx}_{n}({args});" for n in range(len(chunks)))
    params = [f"const {scalar}* __restrict A_{a}" for a in read]
    params += [f"{scalar}* __restrict A_{a}" for a in written]
    bases = [f"    {'const ' if a in read else ''}{scalar}* __restrict p_{a} = "
             f"A_{a} + b * {desc.rows(a) * channels};" for a in read + written]
    scratch = max(slot.values(), default=0) + 1
    vector = _vector_type(sfx, width)
    declarations = [f"{linkage} void {name}_{sfx}_{n}({signature});"
                    for n in range(len(chunks)) if n not in parts[0]]
    main = f"""{vector}
{chr(10).join(declarations)}
{chr(10).join(functions[n] for n in parts[0])}
extern "C" void {name}_{sfx}(int64_t n, {", ".join(params)}, int nt) {{
#pragma omp parallel num_threads(nt) if (n * {channels} >= {MIN_PARALLEL_COLUMNS})
  {{
  std::vector<{scalar}> scratch({scratch * width});
  {scalar}* __restrict s = scratch.data();
#pragma omp for schedule(static)
  for (int64_t b = 0; b < n; ++b) {{
{chr(10).join(bases)}
    for (int64_t c = 0; c < {channels}; c += {width}) {{
{calls}
    }}
  }}
  }}
}}
"""
    return [main] + [
        "\n".join([f"// {name}_{sfx} chunks {part[0]}-{part[-1]} ({desc.hash})", vector,
                   *(functions[n] for n in part)]) + "\n"
        for part in parts[1:]]


def _prelude(desc: SymmetricContractionDescriptor, sfx: str, hash_function: bool = True
             ) -> list[str]:
    return [
        f"// Symmetric contraction {desc.hash} (generated by equibench, kernels/sc_cpu.py)",
        "#include <cstdint>",
        "#include <vector>",
        *([f'extern "C" const char* eqb_sc_hash_{sfx}() {{ return "{desc.hash}"; }}']
          if hash_function else []),
    ]


def generate_source(desc: SymmetricContractionDescriptor, sfx: str, channels: int) -> str:
    """All three kernels of ``desc`` in one translation unit (what the instruction
    counts of :mod:`.instruction_count` compile)."""
    programs = desc.programs()
    return "\n".join([
        *_prelude(desc, sfx),
        *(kernel_sources(desc, name, program, sfx, channels, split=False)[0]
          for name, program in programs.items()),
    ])


class ScCpuKernels:
    """The compiled kernels of one descriptor for ``channels`` channels. Arrays are
    ``(n, rows, channels)``, contiguous, of one dtype (float32 or float64): ``x (n, i, c)``,
    ``w (n, p, c)``, ``g (n, o, c)``. Each kernel and dtype is built (or found in the
    cache) on its first call."""

    def __init__(self, desc: SymmetricContractionDescriptor, channels: int) -> None:
        self.desc, self.channels = desc, channels
        self._programs = desc.programs()
        self._arrays = {name: arrays(program) for name, program in self._programs.items()}
        self._fn: dict[tuple[str, str], ctypes._CFuncPtr] = {}
        self._lock = threading.Lock()

    def function(self, name: str, sfx: str) -> ctypes._CFuncPtr:
        """Kernel ``name`` in dtype ``sfx``; its group's library (:data:`GROUPS`) is built
        on first use."""
        with self._lock:
            if (name, sfx) not in self._fn:
                group = next(g for g in GROUPS if name in g)
                self._fn.update(self._build(group, sfx))
            return self._fn[name, sfx]

    def _build(self, group: tuple[str, ...], sfx: str) -> dict[tuple[str, str], ctypes._CFuncPtr]:
        sources = {}
        for name in group:
            main, *parts = kernel_sources(self.desc, name, self._programs[name], sfx,
                                          self.channels)
            sources[f"{sfx}_{name}"] = "\n".join([*_prelude(self.desc, sfx, name == group[0]),
                                                   main])
            sources.update({f"{sfx}_{name}_{n}": part for n, part in enumerate(parts, 1)})
        tag = "_".join(name.removeprefix("sc_") for name in group)
        lib, path = build_library(sources, cache_root() / f"sc-{self.desc.hash}",
                                  f"eqb_sc{self.channels}_{tag}", CFLAGS)
        check = getattr(lib, f"eqb_sc_hash_{sfx}")
        check.restype = ctypes.c_char_p
        if check() != self.desc.hash.encode():
            raise KernelUnavailable(f"library {path} does not match {self.desc.hash}")
        functions = {}
        for name in group:
            read, written = self._arrays[name]
            fn = functions[name, sfx] = getattr(lib, f"{name}_{sfx}")
            fn.argtypes = [ctypes.c_int64, *[ctypes.c_void_p] * (len(read) + len(written)),
                           ctypes.c_int]
            fn.restype = None
        return functions

    def run(self, name: str, **given: Tensor | None) -> dict[str, Tensor]:
        """Kernel ``name`` on the arrays it reads (by name; ``None``: zeros); returns the
        arrays it writes, by name."""
        read, written = self._arrays[name]
        x = given["x"]
        assert x is not None
        n, _, channels = x.shape
        if channels != self.channels:
            raise ValueError(f"{name}: kernels built for {self.channels} channels, "
                             f"given {channels}")
        try:
            sfx = _SUFFIX[x.dtype]
        except KeyError:
            raise TypeError(f"CPU kernels support float32 and float64, not {x.dtype}") from None
        inputs = []
        for a in read:
            t = given.get(a)
            shape = (n, self.desc.rows(a), channels)
            if t is None:
                t = x.new_zeros(shape)
            if t.shape != shape or t.dtype != x.dtype or t.device.type != "cpu":
                raise ValueError(f"{name}: {a} must be a CPU {x.dtype} tensor of shape "
                                 f"{shape}, not {t.dtype} {tuple(t.shape)} on {t.device}")
            inputs.append(t.contiguous())
        outputs = [x.new_empty(n, self.desc.rows(a), channels) for a in written]
        self.function(name, sfx)(n, *(t.data_ptr() for t in inputs + outputs),
                            max(1, torch.get_num_threads()))
        return dict(zip(written, outputs, strict=True))


_LOCK = threading.Lock()
_LOADED: dict[tuple[str, int], ScCpuKernels] = {}


def sc_cpu_kernels(desc: SymmetricContractionDescriptor, channels: int) -> ScCpuKernels:
    """The CPU kernels of ``desc`` for ``channels`` channels, compiled on first use and
    cached (memory and disk)."""
    with _LOCK:
        if (desc.hash, channels) not in _LOADED:
            _LOADED[desc.hash, channels] = ScCpuKernels(desc, channels)
        return _LOADED[desc.hash, channels]
