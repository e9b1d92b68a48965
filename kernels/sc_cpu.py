"""The symmetric contraction's CPU kernels: its three straight-line programs printed as
C++, compiled and called through ``ctypes`` (as the tensor product's, :mod:`.cpu_build`).

Each kernel runs over nodes in parallel (OpenMP) and over channels in its inner loop
(``#pragma omp simd``, unit stride: arrays are ``(n, rows, c)``), the program unrolled in
the loop body with its coefficients as exact hexadecimal literals.
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
# Statements per loop body (see :func:`kernel_source`).
CHUNK = 384
# GCC gives up vectorizing a loop with more than 1,000 memory references (its default
# ``loop-max-datarefs-for-datadeps``); a chunk of the backward has more (loads, scratch).
CFLAGS = ("--param", "loop-max-datarefs-for-datadeps=100000")
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


def _statement(s: Statement, scalar: str, sfx: str, channels: int) -> str:
    if isinstance(s, Load):
        return f"const {scalar} v_{s.out} = p_{s.array}[{s.row * channels} + c];"
    if isinstance(s, Sum):
        value = " + ".join(_term(coef, factors, sfx) for coef, factors in s.terms)
        return f"const {scalar} v_{s.out} = {value};"
    value = f"({scalar})0" if s.value is None else f"v_{s.value}"
    return f"p_{s.array}[{s.row * channels} + c] = {value};"


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


def _tile(channels: int) -> int:
    return next(t for t in (32, 16, 8, 4, 2, 1) if channels % t == 0)


def kernel_source(desc: SymmetricContractionDescriptor, name: str,
                  program: list[Statement], sfx: str, channels: int) -> str:
    """One exported function ``{name}_{sfx}(n, inputs..., outputs..., threads)`` for
    ``channels`` channels (a constant: every address is a constant offset from a node's
    base).

    The program runs in chunks of :data:`CHUNK` statements, each its own loop over a tile
    of up to 32 channels; values that cross chunks go through a per-thread scratch
    buffer. One loop body of thousands of statements with hundreds of live values costs
    GCC minutes of register allocation (the double backward of a correlation-3 MACE
    block: 150 s at -O3); chunks bound what is live at once.
    """
    tile = _tile(channels)
    scalar = SCALARS[sfx]
    read, written = arrays(program)
    params = [f"const {scalar}* __restrict A_{a}" for a in read]
    params += [f"{scalar}* __restrict A_{a}" for a in written]
    bases = [f"    {'const ' if a in read else ''}{scalar}* __restrict p_{a} = "
             f"A_{a} + b * {desc.rows(a) * channels};" for a in read + written]
    chunks = _chunks(program)
    slot, reads, writes = _slots(chunks)
    loops = []
    for chunk, inputs, outputs in zip(chunks, reads, writes, strict=True):
        lines = [f"const {scalar} v_{v} = s[{slot[v] * tile} + l];" for v in inputs]
        for statement in chunk:
            lines.append(_statement(statement, scalar, sfx, channels))
            if not isinstance(statement, Store) and statement.out in outputs:
                lines.append(f"s[{slot[statement.out] * tile} + l] = v_{statement.out};")
        body = "\n".join(f"        {line}" for line in lines)
        loops.append(f"""#pragma omp simd
      for (int64_t l = 0; l < {tile}; ++l) {{
        const int64_t c = c0 + l;
{body}
      }}""")
    scratch = max(slot.values(), default=0) + 1
    return f"""
extern "C" void {name}_{sfx}(int64_t n, {", ".join(params)}, int nt) {{
#pragma omp parallel num_threads(nt) if (n * {channels} >= {MIN_PARALLEL_COLUMNS})
  {{
  std::vector<{scalar}> scratch({scratch * tile});
  {scalar}* __restrict s = scratch.data();
#pragma omp for schedule(static)
  for (int64_t b = 0; b < n; ++b) {{
{chr(10).join(bases)}
    for (int64_t c0 = 0; c0 < {channels}; c0 += {tile}) {{
      {chr(10).join(loops)}
    }}
  }}
  }}
}}
"""


def generate_source(desc: SymmetricContractionDescriptor, sfx: str, channels: int) -> str:
    programs = desc.programs()
    return "\n".join([
        f"// Symmetric contraction {desc.hash} (generated by equibench, kernels/sc_cpu.py)",
        "#include <cstdint>",
        "#include <vector>",
        f'extern "C" const char* eqb_sc_hash_{sfx}() {{ return "{desc.hash}"; }}',
        *(kernel_source(desc, name, program, sfx, channels)
          for name, program in programs.items()),
    ])


class ScCpuKernels:
    """The compiled kernels of one descriptor for ``channels`` channels. Arrays are
    ``(n, rows, channels)``, contiguous, of one dtype (float32 or float64): ``x (n, i, c)``,
    ``w (n, p, c)``, ``g (n, o, c)``."""

    def __init__(self, desc: SymmetricContractionDescriptor, channels: int) -> None:
        self.desc, self.channels = desc, channels
        sources = {sfx: generate_source(desc, sfx, channels) for sfx in ("f32", "f64")}
        lib, self.path = build_library(sources, cache_root() / f"sc-{desc.hash}",
                                       f"eqb_sc{channels}", CFLAGS)
        self._fn = {}
        self._arrays: dict[str, tuple[list[str], list[str]]] = {}
        for name, program in desc.programs().items():
            read, written = self._arrays[name] = arrays(program)
            for sfx in ("f32", "f64"):
                fn = getattr(lib, f"{name}_{sfx}")
                fn.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * (
                    len(read) + len(written)) + [ctypes.c_int]
                fn.restype = None
                self._fn[name, sfx] = fn
        for sfx in sources:
            check = getattr(lib, f"eqb_sc_hash_{sfx}")
            check.restype = ctypes.c_char_p
            if check() != desc.hash.encode():
                raise KernelUnavailable(f"library {self.path} does not match {desc.hash}")

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
        self._fn[name, sfx](n, *(t.data_ptr() for t in inputs + outputs),
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
