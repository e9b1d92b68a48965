"""Generate C++ source for one :class:`TPDescriptor` (CPU backend).

Design (why it is fast on a CPU):

* Every Clebsch-Gordan coefficient and every loop over m-components (``i``, ``j``, ``k``)
  is unrolled at generation time into literal constants; the only runtime loops are
  over channels ``u`` (contiguous, ``#pragma omp simd``) and over rows / nodes (OpenMP).
* Rows are transposed in L1 from e3nn's ``(mul, 2l+1)`` layout to channel-major
  ``(2l+1, mul)`` per irrep block ("cm" below), so the inner loop over ``u`` is unit
  stride. Offsets and sizes of blocks are the same in both layouts.
* For ``uvu`` paths the second input is contracted first, once per row:
  ``M[i, k] = alpha * sum_j C[i, j, k] * y[v, j]``; the per-channel work is then
  ``out[k, u] += w[u, v] * sum_i M[i, k] * x[i, u]``. All ``uvu`` paths writing the same
  output block share one loop over ``u`` so the output stays in registers.
* ``uvw`` paths contract with ``M`` per input channel and then mix channels with a
  small outer-product loop vectorized over the output channel ``w``.
* The forward sums the output in parts of a few blocks (the convolution: each over all of
  a node's edges before the next), zeroing a part's accumulators before and copying them
  out right after, so that they stay in L1; the convolution prefetches the next edge's
  weights. The backward computes the three gradients of a row in one pass.

Row-level primitives (``row_fwd``, ``row_bwd`` and, for the double backward, one per
gradient: ``row_bwd_x``, ``row_bwd_y``, ``row_bwd_w``) are
composed into the exported kernels: TP forward / backward / double backward over a
batch, and the fused convolution forward / backward / double backward over
destination- (resp. source-) sorted CSR lists. Exported symbols are ``extern "C"`` with
raw pointers, so the library needs no PyTorch headers (which cost ~35 s of compile
time per kernel) and is called through ``ctypes``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .descriptor import IrrepBlock, TPDescriptor, TPPath

SCALARS = {"f32": "float", "f64": "double"}
SIZES = {"f32": 4, "f64": 8}
# Bytes of output accumulators per part of the forward (``_Gen._fwd_parts``): half of a
# 32 KB L1, beside the rows of x and w they read. On mace-large@qm9 (36 KB of
# accumulators per float32 row) parts of 16 KB made the forward 1.3x faster than one
# part with the weights prefetched (parts of 8 KB: 1.2-1.25x, 32 KB: 1.15x).
PART_BYTES = 16384
# Lines of row primitives per translation unit (an instantiation counted per copy): units
# compile in parallel, and a long function compiles slower per line than short ones.
UNIT_LINES = 400
DIRECTIONS = ("fwd", "bwd", "dbwd")


@dataclass(frozen=True)
class _VPath:
    """Path ``path`` restricted to channel ``v`` of the second input (``q``: unique id)."""

    q: int
    path: TPPath
    v: int
    in1: IrrepBlock
    in2: IrrepBlock
    out: IrrepBlock

    @property
    def y_base(self) -> int:
        return self.in2.offset + self.v * self.in2.dim

    def ik_pairs(self) -> list[tuple[int, int]]:
        """Distinct (i, k) of the nonzero CG entries, in a stable order."""
        return sorted({(i, k) for i, _, k, _ in self.path.cg})

    def m_name(self, i: int, k: int, prefix: str = "m") -> str:
        return f"{prefix}{self.q}_{i}_{k}"

    def weight_index(self, u: str) -> str:
        """Weight of channel ``u`` (uvu) as a C++ index expression."""
        mul2 = self.in2.mul
        return f"{self.path.weight_offset} + {u} * {mul2} + {self.v}"


def _lit(c: float) -> str:
    return f"T({c!r})"


def _sum(terms: Iterable[str]) -> str:
    terms = list(terms)
    return " + ".join(terms) if terms else "T(0)"


def _ranges(blocks: list[IrrepBlock]) -> list[tuple[int, int]]:
    """``[start, stop)`` of ``blocks`` (in row order), adjacent ones merged."""
    out: list[tuple[int, int]] = []
    for b in sorted(blocks, key=lambda b: b.offset):
        if out and out[-1][1] == b.offset:
            out[-1] = (out[-1][0], b.offset + b.size)
        else:
            out.append((b.offset, b.offset + b.size))
    return out


def _vpaths(desc: TPDescriptor) -> list[_VPath]:
    out = []
    for p in desc.paths:
        for v in range(desc.in2[p.i_in2].mul):
            out.append(
                _VPath(len(out), p, v, desc.in1[p.i_in1], desc.in2[p.i_in2], desc.out[p.i_out])
            )
    return out


def _m_consts(vp: _VPath, src: str = "Y", prefix: str = "m") -> list[str]:
    """``M[i, k] = alpha * sum_j C[i, j, k] * y[v, j]`` for one row, as scalar constants
    (``y`` read from array ``src``, the constants named with ``prefix``)."""
    lines = []
    for i, k in vp.ik_pairs():
        terms = [
            f"{_lit(vp.path.alpha * c)} * {src}[{vp.y_base + j}]"
            for (ii, j, kk, c) in vp.path.cg
            if (ii, kk) == (i, k)
        ]
        lines.append(f"const T {vp.m_name(i, k, prefix)} = {_sum(terms)};")
    return lines


def _x(a_off: int, mul: int, i: int, u: str = "u", src: str = "X") -> str:
    return f"{src}[{a_off + i * mul} + {u}]"


class _Gen:
    """Builds the C++ translation unit for one descriptor."""

    def __init__(self, desc: TPDescriptor, sfx: str,
                 exports: tuple[str, ...] | None = None) -> None:
        self.d = desc
        self.sfx = sfx
        self.exports = exports
        self.vps = _vpaths(desc)
        self.unweighted = any(not p.has_weight for p in desc.paths)
        self.lines: list[str] = []  # after the head: transposes, declarations, inline helpers
        self.functions: list[_Primitive] = []
        self.transposes()
        self.row_fwd()
        self.row_bwd_x()
        self.row_bwd_y()
        self.row_bwd_w()
        self.row_bwd()
        self.row_dbwd_xyw()

    # ------------------------------------------------------------------ helpers
    def emit(self, *lines: str) -> None:
        self.lines.extend(lines)

    def _groups(self) -> list[tuple[int, list[_VPath]]]:
        """uvu vpaths grouped by output block (one shared channel loop per block)."""
        groups = []
        for b in range(len(self.d.out)):
            vps = [vp for vp in self.vps if vp.path.mode == "uvu" and vp.path.i_out == b]
            if vps:
                groups.append((b, vps))
        return groups

    def _uvw(self) -> list[_VPath]:
        return [vp for vp in self.vps if vp.path.mode == "uvw"]

    def _wv(self, vp: _VPath) -> str:
        if vp.path.has_weight:
            return f"const T w{vp.q} = W[{vp.weight_index('u')}];"
        return f"const T w{vp.q} = T(1);"

    @staticmethod
    def _open(vp: _VPath, indent: str) -> str:
        """Open a vpath's block; unweighted paths are compiled out when WONLY."""
        return indent + ("{" if vp.path.has_weight else "if constexpr (!WONLY) {")

    @staticmethod
    def _load_x(vps: list[_VPath], src: str = "X", name: str = "x") -> list[str]:
        lines, seen = [], set()
        for vp in vps:
            if vp.path.i_in1 in seen:
                continue
            seen.add(vp.path.i_in1)
            a = vp.in1
            for i in range(a.dim):
                lines.append(f"const T {name}{vp.path.i_in1}_{i} = "
                             f"{_x(a.offset, a.mul, i, src=src)};")
        return lines

    @staticmethod
    def _load_g(ob: IrrepBlock) -> list[str]:
        return [f"      const T g{k} = G[{ob.offset + k * ob.mul} + u];" for k in range(ob.dim)]

    def _gy_loop(self, vps: list[_VPath], ob: IrrepBlock) -> list[int]:
        """Open a channel loop that sums ``GY`` in accumulators keyed by the y entry they
        feed (shared by the group's paths); returns the keys."""
        keys = sorted({vp.y_base + j for vp in vps for _, j, _, _ in vp.path.cg})
        self.emit(
            *[f"    T gy{key} = T(0);" for key in keys],
            f"#pragma omp simd reduction(+: {', '.join(f'gy{k}' for k in keys)})",
            f"    for (int64_t u = 0; u < {ob.mul}; ++u) {{",
        )
        return keys

    def _emit_gx(self, vps: list[_VPath], terms_of: Callable[[_VPath, int], list[str]]
                 ) -> None:
        """``GX[i] += ...`` inside a group's channel loop, for every entry ``i`` of the inputs
        its paths read; ``terms_of(vp, i)``: the path's terms of that entry."""
        for a in sorted({vp.path.i_in1 for vp in vps}):
            blk = self.d.in1[a]
            for i in range(blk.dim):
                terms = [t for vp in vps if vp.path.i_in1 == a for t in terms_of(vp, i)]
                if terms:
                    self.emit(f"      GX[{blk.offset + i * blk.mul} + u] += {_sum(terms)};")

    @staticmethod
    def _gx_inner(vp: _VPath, i: int, m: str = "m") -> list[str]:
        """Terms of ``sum_k M[i, k] g[k]`` (the path's share of ``GX[i]``, unweighted)."""
        return [f"{vp.m_name(ii, k, m)} * g{k}" for ii, k in vp.ik_pairs() if ii == i]

    @staticmethod
    def _gy_sum(vp: _VPath, j: int, x: str = "x") -> str:
        """``sum_{i,k} alpha C[i, j, k] x[i] g[k]`` (the path's ``GY[j]``, unweighted)."""
        a = vp.path.i_in1
        return _sum(f"{_lit(vp.path.alpha * c)} * {x}{a}_{i} * g{k}"
                    for i, jj, k, c in vp.path.cg if jj == j)

    @staticmethod
    def _gw_sum(vp: _VPath, pairs_mx: Iterable[tuple[str, str]] = (("m", "x"),)) -> str:
        """``sum_k g[k] sum_i M[i, k] x[i]`` (the path's weight gradient at channel u),
        summed over the (constants, inputs) name pairs ``pairs_mx``."""
        a, pairs, mx = vp.path.i_in1, vp.ik_pairs(), tuple(pairs_mx)

        def inner(k: int) -> str:
            return _sum(f"{vp.m_name(i, kk, m)} * {x}{a}_{i}"
                        for m, x in mx for i, kk in pairs if kk == k)

        return _sum(f"g{k} * ({inner(k)})" for k in sorted({k for _, k in pairs}))

    # ------------------------------------------------------------------ transposes
    def transposes(self) -> None:
        # Out of line, each compiled once for the directions that call it: inlined, they
        # were three quarters of each direction's kernel unit's compile time.
        callers = {"to_cm_in1": DIRECTIONS, "to_cm_out": ("bwd", "dbwd"),
                   "from_cm_in1": ("bwd", "dbwd"), "from_cm_out": ("dbwd",)}
        for name, blocks in (("in1", self.d.in1), ("out", self.d.out)):
            start = len(self.lines)
            for b in blocks:
                self.emit(
                    f"  for (int64_t u = 0; u < {b.mul}; ++u) {{",
                    *[
                        f"    d[{b.offset + i * b.mul} + u] = s[{b.offset} + u * {b.dim} + {i}];"
                        for i in range(b.dim)
                    ],
                    "  }",
                )
            self._primitive(start, f"to_cm_{name}", "s", "d", frozenset(callers[f"to_cm_{name}"]),
                            "// e3nn layout (mul, 2l+1) -> channel-major (2l+1, mul), per irrep "
                            "block", wonly=False, cut=False)
            start = len(self.lines)
            for b in blocks:
                self.emit(*self._from_cm_block(b))
            self._primitive(start, f"from_cm_{name}", "s", "d",
                            frozenset(callers[f"from_cm_{name}"]),
                            "// channel-major -> e3nn layout", wonly=False, cut=False)

    @staticmethod
    def _from_cm_block(b: IrrepBlock) -> list[str]:
        """Copy block ``b`` of a channel-major row ``s`` into e3nn layout ``d``."""
        return [
            f"  for (int64_t u = 0; u < {b.mul}; ++u) {{",
            *[f"    d[{b.offset} + u * {b.dim} + {i}] = s[{b.offset + i * b.mul} + u];"
              for i in range(b.dim)],
            "  }",
        ]

    # ------------------------------------------------------------------ forward
    def _m_block(self, vps: list[_VPath]) -> None:
        """Per-row constants ``M`` of ``vps`` (needs ``Y``)."""
        for vp in vps:
            self.emit(*("    " + s for s in _m_consts(vp)))

    def _fwd_parts(self) -> list[tuple[list[tuple[int, list[_VPath]]], list[_VPath]]]:
        """The forward's output blocks cut into parts of at most :data:`PART_BYTES` of
        accumulators (whole blocks, in order; a larger block is a part alone; uvw paths in
        a part of their own). The tensor product finishes one part of a row, the
        convolution one part over all of a node's edges, before the next, so that the
        part's accumulators stay in L1: all of mace-large's (9,088 floats, 36 KB) do not."""
        parts: list[tuple[list[tuple[int, list[_VPath]]], list[_VPath]]] = []
        budget, size = PART_BYTES // SIZES[self.sfx], 0
        for b, vps in self._groups():
            block = self.d.out[b].size
            if not parts or (parts[-1][0] and size + block > budget):
                parts.append(([], []))
                size = 0
            parts[-1][0].append((b, vps))
            size += block
        if self._uvw() or not parts:
            parts.append(([], self._uvw()))
        return parts

    def row_fwd(self) -> None:
        parts = self._fwd_parts()
        for c, (groups, uvws) in enumerate(parts):
            start = len(self.lines)
            for b, vps in groups:
                self._fwd_group(b, vps)
            for vp in uvws:
                self._uvw_fwd(vp)
            self._primitive(
                start, f"row_fwd_{c}", "X Y W", "O", frozenset({"fwd", "dbwd"}),
                f"// O[cm out] += part {c} of TP(X[cm in1], Y[e3nn in2], W[e3nn weights]) for one",
                "// row. WONLY: only paths with weights (W is a cotangent, unweighted paths have",
                "// none).",
            )
        calls = [f"  row_fwd_{c}<T, WONLY>(X, Y, W, O);" for c in range(len(parts))]
        cases = [f"    case {c}: row_fwd_{c}<T, WONLY>(X, Y, W, O); break;"
                 for c in range(len(parts))]
        ranges = [self._weight_range([vp for _, vps in g for vp in vps] + u) for g, u in parts]
        self.emit(
            "// The whole forward of one row.",
            "template <typename T, bool WONLY>",
            "static inline void row_fwd(const T* X, const T* Y, const T* W, T* O) {",
            *calls,
            "}",
            f"constexpr int FWD_PARTS = {len(parts)};",
            "// Weights each part reads: [FWD_W_BEGIN[c], FWD_W_END[c]) of a row.",
            f"constexpr int64_t FWD_W_BEGIN[] = {{{', '.join(str(r[0]) for r in ranges)}}};",
            f"constexpr int64_t FWD_W_END[] = {{{', '.join(str(r[1]) for r in ranges)}}};",
            "template <typename T, bool WONLY>",
            "static inline void row_fwd_part(int c, const T* X, const T* Y, const T* W, T* O) {",
            "  switch (c) {",
            *cases,
            "  }",
            "}",
        )
        self._fwd_part_edges(parts)

    def _fwd_part_edges(self, parts: list[tuple[list[tuple[int, list[_VPath]]],
                                                list[_VPath]]]) -> None:
        """``fwd_begin(c, O)`` zeroes the accumulators that part ``c`` writes first;
        ``fwd_end(c, O, out)`` copies to e3nn layout the blocks it writes last, while they
        are still in L1; ``fwd_unwritten(out)`` zeroes the blocks no path writes."""
        writers: dict[int, list[int]] = {}
        for c, (groups, uvws) in enumerate(parts):
            for b in {b for b, _ in groups} | {vp.path.i_out for vp in uvws}:
                writers.setdefault(b, []).append(c)
        begin = ["template <typename T>",
                 "static inline void fwd_begin(int c, T* __restrict O) {", "  switch (c) {"]
        end = ["template <typename T>",
               "static inline void fwd_end(int c, const T* __restrict s, T* __restrict d) {",
               "  switch (c) {"]
        for c in range(len(parts)):
            first = [self.d.out[b] for b in sorted(writers) if writers[b][0] == c]
            last = [self.d.out[b] for b in sorted(writers) if writers[b][-1] == c]
            begin += [f"    case {c}:",
                      *[f"      zero(O + {lo}, {hi - lo});" for lo, hi in _ranges(first)],
                      "      break;"]
            end += [f"    case {c}: {{", *("    " + ln for ln in
                                           (ln for b in last for ln in self._from_cm_block(b))),
                    "      break;", "    }"]
        unwritten = [b for i, b in enumerate(self.d.out) if i not in writers]
        self.emit(
            *begin, "  }", "}", *end, "  }", "}",
            "template <typename T>",
            "static inline void fwd_unwritten(T* __restrict d) {",
            "  (void)d;",
            *[f"  zero(d + {lo}, {hi - lo});" for lo, hi in _ranges(unwritten)],
            "}",
        )

    @staticmethod
    def _weight_range(vps: list[_VPath]) -> tuple[int, int]:
        weighted = [vp.path for vp in vps if vp.path.has_weight]
        if not weighted:
            return 0, 0
        return (min(p.weight_offset for p in weighted),
                max(p.weight_offset + p.weight_numel for p in weighted))

    def _fwd_group(self, b: int, vps: list[_VPath]) -> None:
        """The uvu paths writing output block ``b``, one loop over channels."""
        ob = self.d.out[b]
        self.emit("  {")
        self._m_block(vps)
        self.emit("#pragma omp simd", f"    for (int64_t u = 0; u < {ob.mul}; ++u) {{")
        self.emit(*("      " + s for s in self._load_x(vps)))
        self.emit(*[f"      T o{k} = O[{ob.offset + k * ob.mul} + u];" for k in range(ob.dim)])
        for vp in vps:
            self.emit(self._open(vp, "      "), "        " + self._wv(vp))
            pairs = vp.ik_pairs()
            a = vp.path.i_in1
            # Scale the smaller side by the weight: fewer multiplies per channel.
            if vp.in1.dim <= ob.dim:
                for i in sorted({i for i, _ in pairs}):
                    self.emit(f"        const T s{i} = w{vp.q} * x{a}_{i};")
                for k in sorted({k for _, k in pairs}):
                    terms = [f"{vp.m_name(i, kk)} * s{i}" for i, kk in pairs if kk == k]
                    self.emit(f"        o{k} += {_sum(terms)};")
            else:
                for k in sorted({k for _, k in pairs}):
                    terms = [f"{vp.m_name(i, kk)} * x{a}_{i}" for i, kk in pairs if kk == k]
                    self.emit(f"        o{k} += w{vp.q} * ({_sum(terms)});")
            self.emit("      }")
        self.emit(
            *[f"      O[{ob.offset + k * ob.mul} + u] = o{k};" for k in range(ob.dim)],
            "    }",
            "  }",
        )

    def _t_buffer(self, vp: _VPath, name: str) -> list[int]:
        """Emit ``name[k][u] = sum_i M[i, k] x[i, u]``; returns the k that are nonzero."""
        a, ob = vp.in1, vp.out
        ks = sorted({k for _, k in vp.ik_pairs()})
        self.emit(f"    alignas(64) T {name}[{ob.dim * a.mul}];")
        for k in ks:
            terms = [
                f"{vp.m_name(i, kk)} * {_x(a.offset, a.mul, i)}"
                for i, kk in vp.ik_pairs()
                if kk == k
            ]
            self.emit(
                "#pragma omp simd",
                f"    for (int64_t u = 0; u < {a.mul}; ++u) "
                f"{name}[{k * a.mul} + u] = {_sum(terms)};",
            )
        return ks

    def _gt_buffer(self, vp: _VPath) -> list[int]:
        """Emit ``gt[k][u] = sum_w W[u, v, w] G[k, w]`` (uvw); returns the k used."""
        a, ob = vp.in1, vp.out
        ks = sorted({k for _, k in vp.ik_pairs()})
        self.emit(
            f"    alignas(64) T gt[{ob.dim * a.mul}];",
            f"    for (int64_t u = 0; u < {a.mul}; ++u) {{",
            f"      const T* __restrict wr = {self._w_row(vp, 'W')};",
        )
        for k in ks:
            self.emit(
                f"      T s{k} = T(0);",
                f"#pragma omp simd reduction(+: s{k})",
                f"      for (int64_t w = 0; w < {ob.mul}; ++w) "
                f"s{k} += wr[w] * G[{ob.offset + k * ob.mul} + w];",
                f"      gt[{k * a.mul} + u] = s{k};",
            )
        self.emit("    }")
        return ks

    def _w_row(self, vp: _VPath, base: str) -> str:
        mul2, mul3 = vp.in2.mul, vp.out.mul
        return f"{base} + {vp.path.weight_offset} + (u * {mul2} + {vp.v}) * {mul3}"

    def _uvw_fwd(self, vp: _VPath) -> None:
        a, ob = vp.in1, vp.out
        self.emit("  {", *("    " + s for s in _m_consts(vp)))
        ks = self._t_buffer(vp, "t")
        self.emit(
            f"    for (int64_t u = 0; u < {a.mul}; ++u) {{",
            f"      const T* __restrict wr = {self._w_row(vp, 'W')};",
        )
        for k in ks:
            self.emit(
                f"      const T t{k} = t[{k * a.mul} + u];",
                "#pragma omp simd",
                f"      for (int64_t w = 0; w < {ob.mul}; ++w) "
                f"O[{ob.offset + k * ob.mul} + w] += t{k} * wr[w];",
            )
        self.emit("    }", "  }")

    # ------------------------------------------------------------------ backward
    # One primitive per gradient: a fused one would be instantiated for every subset of
    # gradients the double backward needs, and compile time grows with code volume.
    def row_bwd_x(self) -> None:
        start = len(self.lines)
        for b, vps in self._groups():
            ob = self.d.out[b]
            self.emit("  {")
            self._m_block(vps)
            self.emit("#pragma omp simd", f"    for (int64_t u = 0; u < {ob.mul}; ++u) {{")
            self.emit(*self._load_g(ob))
            for a in sorted({vp.path.i_in1 for vp in vps}):
                blk = self.d.in1[a]
                for i in range(blk.dim):
                    for weighted in (True, False):
                        terms = []
                        for vp in vps:
                            if vp.path.i_in1 != a or vp.path.has_weight != weighted:
                                continue
                            inner = self._gx_inner(vp, i)
                            if inner:
                                w = f"W[{vp.weight_index('u')}] * " if weighted else ""
                                terms.append(f"{w}({_sum(inner)})")
                        if terms:
                            guard = "" if weighted else "if constexpr (!WONLY) "
                            self.emit(
                                f"      {guard}GX[{blk.offset + i * blk.mul} + u] += {_sum(terms)};"
                            )
            self.emit("    }", "  }")
        for vp in self._uvw():
            self._uvw_bwd_x(vp)
        self._primitive(
            start, "row_bwd_x", "Y W G", "GX", frozenset({'dbwd'}),
            "// GX[cm in1] += d/dX sum(G * TP(X, Y, W)) for one row (G channel-major).",
            wonly=True,
        )

    def _uvw_bwd_x(self, vp: _VPath) -> None:
        a = vp.in1
        self.emit("  {", *("    " + s for s in _m_consts(vp)))
        self._gt_buffer(vp)
        for i in sorted({i for i, _ in vp.ik_pairs()}):
            terms = [
                f"{vp.m_name(i, k)} * gt[{k * a.mul} + u]" for ii, k in vp.ik_pairs() if ii == i
            ]
            self.emit(
                "#pragma omp simd",
                f"    for (int64_t u = 0; u < {a.mul}; ++u) "
                f"GX[{a.offset + i * a.mul} + u] += {_sum(terms)};",
            )
        self.emit("  }")

    def row_bwd_y(self) -> None:
        start = len(self.lines)
        for b, vps in self._groups():
            ob = self.d.out[b]
            self.emit("  {")
            keys = self._gy_loop(vps, ob)
            self.emit(*("      " + s for s in self._load_x(vps)), *self._load_g(ob))
            for vp in vps:
                self.emit(self._open(vp, "      "), "        " + self._wv(vp))
                for j in sorted({j for _, j, _, _ in vp.path.cg}):
                    self.emit(f"        gy{vp.y_base + j} += w{vp.q} * ({self._gy_sum(vp, j)});")
                self.emit("      }")
            self.emit("    }", *[f"    GY[{key}] += gy{key};" for key in keys], "  }")
        for vp in self._uvw():
            self._uvw_bwd_y(vp)
        self._primitive(
            start, "row_bwd_y", "X W G", "GY", frozenset({'dbwd'}),
            "// GY[e3nn in2] += d/dY sum(G * TP(X, Y, W)) for one row (needs no Y: linear).",
            wonly=True,
        )

    def _uvw_bwd_y(self, vp: _VPath) -> None:
        a = vp.in1
        js = sorted({j for _, j, _, _ in vp.path.cg})
        self.emit("  {")
        self._gt_buffer(vp)
        self.emit(
            *[f"    T gy{j} = T(0);" for j in js],
            f"#pragma omp simd reduction(+: {', '.join(f'gy{j}' for j in js)})",
            f"    for (int64_t u = 0; u < {a.mul}; ++u) {{",
        )
        for j in js:
            terms = [
                f"{_lit(vp.path.alpha * c)} * {_x(a.offset, a.mul, i)} * gt[{k * a.mul} + u]"
                for i, jj, k, c in vp.path.cg
                if jj == j
            ]
            self.emit(f"      gy{j} += {_sum(terms)};")
        self.emit("    }", *[f"    GY[{vp.y_base + j}] += gy{j};" for j in js], "  }")

    def row_bwd_w(self) -> None:
        start = len(self.lines)
        for b, vps in self._groups():
            vps = [vp for vp in vps if vp.path.has_weight]
            if not vps:
                continue
            ob = self.d.out[b]
            self.emit("  {")
            self._m_block(vps)
            self.emit("#pragma omp simd", f"    for (int64_t u = 0; u < {ob.mul}; ++u) {{")
            self.emit(*("      " + s for s in self._load_x(vps)), *self._load_g(ob))
            for vp in vps:
                self.emit(f"      GW[{vp.weight_index('u')}] += {self._gw_sum(vp)};")
            self.emit("    }", "  }")
        for vp in self._uvw():
            self._uvw_bwd_w(vp, "+=")
        self._primitive(
            start, "row_bwd_w", "X Y G", "GW", frozenset({'dbwd'}),
            "// GW[e3nn weights] += d/dW sum(G * TP(X, Y, W)) for one row (needs no W).",
            wonly=False,
        )

    def _uvw_bwd_w(self, vp: _VPath, op: str) -> None:
        """``GW op ...`` for one uvw vpath: ``+=`` accumulates, ``=`` writes (each weight
        of the path is written by this vpath alone)."""
        a, ob = vp.in1, vp.out
        self.emit("  {", *("    " + s for s in _m_consts(vp)))
        ks = self._t_buffer(vp, "t")
        self.emit(
            f"    for (int64_t u = 0; u < {a.mul}; ++u) {{",
            f"      T* __restrict gwr = {self._w_row(vp, 'GW')};",
            *[f"      const T t{k} = t[{k * a.mul} + u];" for k in ks],
            "#pragma omp simd",
            f"      for (int64_t w = 0; w < {ob.mul}; ++w) gwr[w] {op} "
            + _sum(f"t{k} * G[{ob.offset + k * ob.mul} + w]" for k in ks)
            + ";",
            "    }",
            "  }",
        )

    def row_bwd(self) -> None:
        """All three gradients of one row in one pass per output block: x, g and the
        weight of each channel are loaded once for the three (the separate primitives,
        which the double backward combines, load them once each), and ``GW`` is written,
        not accumulated, so the caller need not zero it."""
        start = len(self.lines)

        def dx_terms(vp: _VPath, i: int) -> list[str]:
            inner = self._gx_inner(vp, i)
            return [f"w{vp.q} * ({_sum(inner)})"] if inner else []

        for b, vps in self._groups():
            ob = self.d.out[b]
            self.emit("  {")
            self._m_block(vps)
            keys = self._gy_loop(vps, ob)
            self.emit(*("      " + s for s in self._load_x(vps)), *self._load_g(ob),
                      *["      " + self._wv(vp) for vp in vps])
            self._emit_gx(vps, dx_terms)
            for vp in vps:
                for j in sorted({j for _, j, _, _ in vp.path.cg}):
                    self.emit(f"      gy{vp.y_base + j} += w{vp.q} * ({self._gy_sum(vp, j)});")
                if vp.path.has_weight:
                    self.emit(f"      GW[{vp.weight_index('u')}] = {self._gw_sum(vp)};")
            self.emit("    }", *[f"    GY[{key}] += gy{key};" for key in keys], "  }")
        for vp in self._uvw():
            self._uvw_bwd_x(vp)
            self._uvw_bwd_y(vp)
            self._uvw_bwd_w(vp, "=")
        self._primitive(
            start, "row_bwd", "X Y W G", "GX GY GW", frozenset({'bwd'}),
            "// GX[cm in1] += d/dX, GY[e3nn in2] += d/dY, GW[e3nn weights] = d/dW of",
            "// sum(G * TP(X, Y, W)) for one row (X, G channel-major).",
            wonly=False,
        )

    def row_dbwd_xyw(self) -> None:
        """The double backward's x, y and w parts when all three cotangents are given:
        six single-gradient passes (``row_dbwd_rest``) made one per output block, which
        loads x, its cotangent, g and both weight rows once and forms each path's ``M``
        from ``Y`` and from ``GGY`` once. Unweighted paths take no ``GGW`` terms."""
        start = len(self.lines)

        def dx_terms(vp: _VPath, i: int) -> list[str]:
            terms = []
            if inner := self._gx_inner(vp, i, "n"):  # Tx*(G; GGY, W)
                terms.append(f"w{vp.q} * ({_sum(inner)})")
            if vp.path.has_weight and (inner := self._gx_inner(vp, i)):  # Tx*(G; Y, GGW)
                terms.append(f"v{vp.q} * ({_sum(inner)})")
            return terms

        for b, vps in self._groups():
            ob = self.d.out[b]
            self.emit("  {")
            for vp in vps:
                self.emit(*("    " + ln for ln in _m_consts(vp)),
                          *("    " + ln for ln in _m_consts(vp, "GGY", "n")))
            keys = self._gy_loop(vps, ob)
            self.emit(*("      " + ln for ln in self._load_x(vps)),
                      *("      " + ln for ln in self._load_x(vps, "GGX", "z")),
                      *self._load_g(ob), *["      " + self._wv(vp) for vp in vps],
                      *[f"      const T v{vp.q} = GGW[{vp.weight_index('u')}];"
                        for vp in vps if vp.path.has_weight])
            self._emit_gx(vps, dx_terms)
            for vp in vps:
                for j in sorted({j for _, j, _, _ in vp.path.cg}):
                    terms = [f"w{vp.q} * ({self._gy_sum(vp, j, 'z')})"]
                    if vp.path.has_weight:
                        terms.append(f"v{vp.q} * ({self._gy_sum(vp, j)})")
                    self.emit(f"      gy{vp.y_base + j} += {_sum(terms)};")
                if vp.path.has_weight:
                    self.emit(f"      GW[{vp.weight_index('u')}] += "
                              f"{self._gw_sum(vp, (('m', 'z'), ('n', 'x')))};")
            self.emit("    }", *[f"    GY[{key}] += gy{key};" for key in keys], "  }")
        # uvw paths: the single-gradient code of each term, its inputs renamed in a block.
        for vp in self._uvw():
            for alias, emit in (("Y = GGY", self._uvw_bwd_x), ("W = GGW", self._uvw_bwd_x),
                                ("X = GGX", self._uvw_bwd_y), ("W = GGW", self._uvw_bwd_y),
                                ("X = GGX", lambda vp: self._uvw_bwd_w(vp, "+=")),
                                ("Y = GGY", lambda vp: self._uvw_bwd_w(vp, "+="))):
                self.emit(f"  {{ const T* __restrict {alias};")
                emit(vp)
                self.emit("  }")
        self._primitive(
            start, "row_dbwd_xyw", "X GGX Y GGY W GGW G", "GX GY GW", frozenset({'dbwd'}),
            "// GX[cm in1] += Tx*(G; GGY, W) + Tx*(G; Y, GGW), GY[e3nn in2] += Ty*(G; GGX, W)",
            "// + Ty*(G; X, GGW), GW[e3nn weights] += Tw*(G; GGX, Y) + Tw*(G; X, GGY) for one",
            "// row (X, GGX, G channel-major), weighted paths only for the GGW and GW terms.",
            wonly=False,
        )

    # ------------------------------------------------------------------ primitives
    def _primitive(self, start: int, name: str, inputs: str, outputs: str,
                   needs: frozenset[str], *comment: str, wonly: bool = True,
                   cut: bool = True) -> None:
        """Take the blocks emitted since ``start`` as the body of row primitive ``name``
        (pointers ``inputs`` read, ``outputs`` written; ``needs``: the directions whose
        kernels call it) and leave its declaration in their place. A body longer than
        :data:`UNIT_LINES` is cut between its top-level blocks, which are independent, into
        pieces ``name_s0``, ``name_s1``, ... that an inline ``name`` calls in order, so that
        the pieces compile in units of their own, in parallel (unless not ``cut``)."""
        body = self.lines[start:]
        del self.lines[start:]
        params = tuple([f"const T* __restrict {p}" for p in inputs.split()]
                       + [f"T* __restrict {p}" for p in outputs.split()])
        copies = len(_template_args("T", wonly, self.unweighted))  # instantiations compiled
        pieces = [[ln for block in group for ln in block]
                  for group in _cut(_blocks(body), UNIT_LINES // copies)] if cut else [body]
        names = [name] if len(pieces) == 1 else [f"{name}_s{i}" for i in range(len(pieces))]
        functions = [_Primitive(n, wonly, params, tuple(piece), needs)
                     for n, piece in zip(names, pieces, strict=True)]
        self.functions.extend(functions)
        self.emit(*comment, *[ln for f in functions for ln in f.declaration()])
        if len(pieces) > 1:
            args = ", ".join(p.split()[-1] for p in params)
            targs = "<T, WONLY>" if wonly else "<T>"
            self.emit(functions[0].template, f"static inline void {name}({', '.join(params)}) {{",
                      *[f"  {n}{targs}({args});" for n in names], "}")

    # ------------------------------------------------------------------ sources
    def _head(self) -> list[str]:
        d = self.d
        return [
            f"// Generated by equibench.kernels.cpu_codegen for {d}",
            f"// descriptor hash {d.hash}; scalar type {SCALARS[self.sfx]}",
            "#include <cstdint>",
            "#include <cstring>",
            "// Exported kernels only: units of one library share the rest, and libraries of",
            "// other descriptors loaded in the same process never see it.",
            '#define EXPORT __attribute__((visibility("default")))',
            "namespace eqb {",
            "// Row primitives are called from many drivers; inlining each copy would multiply",
            "// compile time while a call per row costs nothing next to the row's work.",
            "#define NOINLINE __attribute__((noinline))",
            "template <typename T> static inline void zero(T* p, int64_t n) {",
            "  std::memset(p, 0, n * sizeof(T));",
            "}",
            f"constexpr int64_t IN1 = {d.in1_dim}, IN2 = {d.in2_dim}, OUT = {d.out_dim};",
            f"constexpr int64_t WN = {d.weight_numel};",
            f"constexpr int64_t IN1B = {max(d.in1_dim, 1)}, OUTB = {max(d.out_dim, 1)};",
            "// WONLY only matters with unweighted paths; otherwise one instantiation serves.",
            f"constexpr bool WO = {'true' if self.unweighted else 'false'};",
            *self.lines,
        ]

    def _exports(self, kernels: tuple[str, ...] | None) -> list[str]:
        """The ``extern "C"`` entry points of ``kernels`` (None: all six)."""
        exports = [e for e in _EXPORTS.strip().split("\nvoid ")
                   if kernels is None or e.removeprefix("void ").split("_SFX(")[0] in kernels]
        return [
            "}  // namespace eqb",
            'extern "C" {',
            f'EXPORT const char* eqb_descriptor_hash_{self.sfx}() {{ return "{self.d.hash}"; }}',
            "using namespace eqb;",
            "\n".join("EXPORT void " + e.removeprefix("void ") for e in exports)
            .replace("SFX", self.sfx).replace("SCALAR", SCALARS[self.sfx]),
            '}  // extern "C"',
        ]

    def source(self) -> str:
        """One translation unit: every primitive and the kernels in ``self.exports``."""
        definitions = [ln for f in self.functions for ln in f.definition()]
        return _text(*self._head(), *definitions, _KERNELS, *self._exports(self.exports))

    def units(self) -> KernelUnits:
        """The primitives packed into units of about :data:`UNIT_LINES` (those that the
        same directions call together), and per direction a unit of its two kernels."""
        scalar = SCALARS[self.sfx]
        head = self._head()
        sources: dict[str, str] = {}
        libraries: dict[str, list[str]] = {d: [d] for d in DIRECTIONS}
        by_needs: dict[frozenset[str], list[_Primitive]] = {}
        for f in self.functions:
            by_needs.setdefault(f.needs, []).append(f)
        for needs, functions in by_needs.items():
            for group in _cut(functions, UNIT_LINES, size=lambda f: len(f.body) * len(
                    f.instantiations(scalar, self.unweighted))):
                name = f"rows{len(sources)}"
                sources[name] = _text(
                    *head,
                    *[ln for f in group for ln in f.definition()],
                    *[ln for f in group for ln in f.instantiations(scalar, self.unweighted)],
                    "}  // namespace eqb",
                )
                for d in needs:
                    libraries[d].append(name)
        for d in DIRECTIONS:
            sources[d] = _text(*head, _KERNELS, *self._exports((f"tp_{d}", f"conv_{d}")))
        return KernelUnits(sources, {d: tuple(u) for d, u in libraries.items()})


@dataclass(frozen=True)
class _Primitive:
    """A row primitive (or a piece of one): ``NOINLINE``, defined in one unit, declared in
    all."""

    name: str
    wonly: bool  # a template over WONLY too (see _template_args)
    params: tuple[str, ...]
    body: tuple[str, ...]
    needs: frozenset[str]

    @property
    def template(self) -> str:
        return "template <typename T, bool WONLY>" if self.wonly else "template <typename T>"

    def declaration(self) -> list[str]:
        return [self.template, f"NOINLINE void {self.name}({', '.join(self.params)});"]

    def definition(self) -> list[str]:
        return [self.template, f"NOINLINE void {self.name}({', '.join(self.params)}) {{",
                "  " + " ".join(f"(void){p.split()[-1]};" for p in self.params),
                *self.body, "}"]

    def instantiations(self, scalar: str, unweighted: bool) -> list[str]:
        """The explicit instantiations the other units link against."""
        params = ", ".join(p.replace("T*", f"{scalar}*") for p in self.params)
        return [f"template void {self.name}<{a}>({params});"
                for a in _template_args(scalar, self.wonly, unweighted)]


def _template_args(scalar: str, wonly: bool, unweighted: bool) -> list[str]:
    """The template arguments a primitive is instantiated with: ``WONLY`` false, and true
    where the descriptor has unweighted paths."""
    if not wonly:
        return [scalar]
    return [f"{scalar}, {w}" for w in (("false", "true") if unweighted else ("false",))]


@dataclass(frozen=True)
class KernelUnits:
    """One descriptor's kernels in one scalar type as translation units to compile apart
    and link: ``sources`` (unit name -> C++), and per direction (``fwd``, ``bwd``,
    ``dbwd``) the units of its library. Units of row primitives that several directions
    call (the forward's, which the double backward reuses) belong to each of them."""

    sources: dict[str, str]
    libraries: dict[str, tuple[str, ...]]


def _blocks(body: list[str]) -> list[list[str]]:
    """A primitive's body cut into its top-level ``{ ... }`` blocks (braces counted)."""
    blocks: list[list[str]] = []
    depth = 0
    for line in body:
        if depth == 0:
            if not line.lstrip().startswith("{"):
                raise AssertionError(f"a row primitive has a statement outside a block: {line!r}")
            blocks.append([])
        blocks[-1].append(line)
        depth += line.count("{") - line.count("}")
    return blocks


def _cut(items: list, limit: int, size: Callable[[Any], int] = len) -> list[list]:
    """Consecutive ``items`` in groups of at most ``limit`` in ``size`` (an item larger
    than that alone); never empty."""
    groups: list[list] = [[]]
    total = 0
    for item in items:
        n = size(item)
        if groups[-1] and total + n > limit:
            groups.append([])
            total = 0
        groups[-1].append(item)
        total += n
    return groups


def _text(*lines: str) -> str:
    return "\n".join(lines) + "\n"


# Batch / graph drivers around the row primitives. Per-thread scratch rows live on the
# stack (a few KB, L1/L2 resident); every output row is written by one thread in a fixed
# order, so results do not depend on the number of threads.
_KERNELS = r"""
// Below this many rows / edges a parallel region costs more than it saves (and on a
// busy machine its barrier can wait a whole scheduler time slice). Loops are scheduled
// dynamically for the same reason: a descheduled thread would stall a static share.
constexpr int64_t MIN_PAR = 64;

// Asks for rows ahead of use into L2 (prefetcht2): a walk by destination jumps between the
// weight rows of edges stored by source, which the hardware prefetcher does not foresee.
// The next edge's weights, fetched while this one computes, made the mace-large@qm9
// forward 1.11-1.18x faster here (into L1: 0-4%, more lines than L1 has miss buffers for);
// the backward walks by source, rows in order, and gained nothing.
template <typename T> static inline void prefetch_l2(const T* p, int64_t n) {
  constexpr int64_t LINE = 64 / sizeof(T);
  for (int64_t c = 0; c < n; c += LINE) __builtin_prefetch(p + c, 0, 1);
}

// Double backward of one row, cotangents (ggx, ggy, ggw) of (gx, gy, gw); any may be null.
// The product is trilinear in (x, y, w) on weighted paths and bilinear in (x, y) on the
// others, so with T? the backward products and "|w" the weighted paths only:
// dg = TP(ggx,y,w) + TP(x,ggy,w) + TP|w(x,y,ggw); dx = Tx*(g; ggy,w) + Tx*|w(g; y,ggw);
// dy = Ty*(g; ggx,w) + Ty*|w(g; x,ggw); dw = Tw*(g; ggx,y) + Tw*(g; x,ggy).
template <typename T>
static inline void row_dbwd_dg(const T* xc, const T* ggxc, const T* y, const T* ggy,
                               const T* w, const T* ggw, T* dgc) {
  if (ggxc) row_fwd<T, false>(ggxc, y, w, dgc);
  if (ggy) row_fwd<T, false>(xc, ggy, w, dgc);
  if (ggw) row_fwd<T, WO>(xc, y, ggw, dgc);
}

template <typename T>
static inline void row_dbwd_rest(const T* xc, const T* ggxc, const T* y, const T* ggy,
                                 const T* w, const T* ggw, const T* gc,
                                 T* dxc, T* dy, T* dw) {
  if (ggxc && ggy && ggw) {  // all three (a training step with forces): one pass
    row_dbwd_xyw<T>(xc, ggxc, y, ggy, w, ggw, gc, dxc, dy, dw);
    return;
  }
  if (ggy) {
    row_bwd_x<T, false>(ggy, w, gc, dxc);
    row_bwd_w<T>(xc, ggy, gc, dw);
  }
  if (ggw) {
    row_bwd_x<T, WO>(y, ggw, gc, dxc);
    row_bwd_y<T, WO>(xc, ggw, gc, dy);
  }
  if (ggxc) {
    row_bwd_y<T, false>(ggxc, w, gc, dy);
    row_bwd_w<T>(ggxc, y, gc, dw);
  }
}

template <typename T>
static void tp_fwd(int64_t B, const T* x, const T* y, const T* w, T* out, int nt) {
#pragma omp parallel num_threads(nt) if (B >= MIN_PAR)
  {
    alignas(64) T xc[IN1B];
    alignas(64) T oc[OUTB];
#pragma omp for schedule(dynamic, 32)
    for (int64_t z = 0; z < B; ++z) {
      to_cm_in1(x + z * IN1, xc);
      for (int c = 0; c < FWD_PARTS; ++c) {
        fwd_begin(c, oc);
        row_fwd_part<T, false>(c, xc, y + z * IN2, w + z * WN, oc);
        fwd_end(c, oc, out + z * OUT);
      }
      fwd_unwritten(out + z * OUT);
    }
  }
}

template <typename T>
static void tp_bwd(int64_t B, const T* g, const T* x, const T* y, const T* w,
                   T* gx, T* gy, T* gw, int nt) {
#pragma omp parallel num_threads(nt) if (B >= MIN_PAR)
  {
    alignas(64) T xc[IN1B];
    alignas(64) T gc[OUTB];
    alignas(64) T gxc[IN1B];
#pragma omp for schedule(dynamic, 32)
    for (int64_t z = 0; z < B; ++z) {
      to_cm_in1(x + z * IN1, xc);
      to_cm_out(g + z * OUT, gc);
      zero(gxc, IN1);
      zero(gy + z * IN2, IN2);
      row_bwd<T>(xc, y + z * IN2, w + z * WN, gc, gxc, gy + z * IN2, gw + z * WN);
      from_cm_in1(gxc, gx + z * IN1);
    }
  }
}

template <typename T>
static void tp_dbwd(int64_t B, const T* g, const T* x, const T* y, const T* w,
                    const T* ggx, const T* ggy, const T* ggw,
                    T* dg, T* dx, T* dy, T* dw, int nt) {
#pragma omp parallel num_threads(nt) if (B >= MIN_PAR)
  {
    alignas(64) T xc[IN1B];
    alignas(64) T ggxc[IN1B];
    alignas(64) T gc[OUTB];
    alignas(64) T dgc[OUTB];
    alignas(64) T dxc[IN1B];
#pragma omp for schedule(dynamic, 32)
    for (int64_t z = 0; z < B; ++z) {
      to_cm_in1(x + z * IN1, xc);
      if (ggx) to_cm_in1(ggx + z * IN1, ggxc);
      to_cm_out(g + z * OUT, gc);
      const T* ggx_row = ggx ? ggxc : nullptr;
      const T* ggy_row = ggy ? ggy + z * IN2 : nullptr;
      const T* ggw_row = ggw ? ggw + z * WN : nullptr;
      zero(dgc, OUT);
      zero(dxc, IN1);
      zero(dy + z * IN2, IN2);
      zero(dw + z * WN, WN);
      row_dbwd_dg<T>(xc, ggx_row, y + z * IN2, ggy_row, w + z * WN, ggw_row, dgc);
      row_dbwd_rest<T>(xc, ggx_row, y + z * IN2, ggy_row, w + z * WN, ggw_row, gc,
                       dxc, dy + z * IN2, dw + z * WN);
      from_cm_out(dgc, dg + z * OUT);
      from_cm_in1(dxc, dx + z * IN1);
    }
  }
}

// Node tensor (n rows, e3nn layout) -> channel-major copy into d (n * D), for gathers by
// edge. d is workspace the caller allocates (through torch, so that a measurement of live
// tensor bytes sees it, as it sees every other implementation's intermediates).
template <typename T, int64_t D, void (*F)(const T*, T*)>
static const T* to_cm_all(const T* s, int64_t n, T* d, int nt) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= MIN_PAR)
  for (int64_t r = 0; r < n; ++r) F(s + r * D, d + r * D);
  return d;
}

// out[n] = sum over edges e with dst(e) = n (CSR order) of TP(x[src(e)], y[e], w[e]); the
// node's sum stays in a channel-major scratch row, no per-edge message is stored.
template <typename T>
static void conv_fwd(int64_t n_dst, int64_t n_src, const int64_t* dst_ptr,
                     const int64_t* dst_perm, const int64_t* edge_src,
                     const T* x, const T* y, const T* w, T* out, T* ws, int nt) {
  const T* xcm = to_cm_all<T, IN1, to_cm_in1<T>>(x, n_src, ws, nt);
#pragma omp parallel num_threads(nt) if (dst_ptr[n_dst] >= MIN_PAR)
  {
    alignas(64) T oc[OUTB];
#pragma omp for schedule(dynamic, 16)
    for (int64_t n = 0; n < n_dst; ++n) {
      for (int c = 0; c < FWD_PARTS; ++c) {
        fwd_begin(c, oc);
        const int64_t w0 = FWD_W_BEGIN[c], wn = FWD_W_END[c] - w0;
        for (int64_t p = dst_ptr[n]; p < dst_ptr[n + 1]; ++p) {
          const int64_t e = dst_perm[p];
          if (p + 1 < dst_ptr[n + 1]) {
            prefetch_l2(w + dst_perm[p + 1] * WN + w0, wn);
          } else if (c + 1 < FWD_PARTS) {  // the next part starts again at the first edge
            prefetch_l2(w + dst_perm[dst_ptr[n]] * WN + FWD_W_BEGIN[c + 1],
                        FWD_W_END[c + 1] - FWD_W_BEGIN[c + 1]);
          }
          row_fwd_part<T, false>(c, xcm + edge_src[e] * IN1, y + e * IN2, w + e * WN,
                                 oc);
        }
        fwd_end(c, oc, out + n * OUT);
      }
      fwd_unwritten(out + n * OUT);
    }
  }
}

// Backward by source node: gx[s] sums its out-edges; gy[e], gw[e] are written per edge.
template <typename T>
static void conv_bwd(int64_t n_dst, int64_t n_src, const int64_t* src_ptr,
                     const int64_t* src_perm, const int64_t* edge_dst,
                     const T* g, const T* x, const T* y, const T* w,
                     T* gx, T* gy, T* gw, T* ws, int nt) {
  const T* gcm = to_cm_all<T, OUT, to_cm_out<T>>(g, n_dst, ws, nt);
#pragma omp parallel num_threads(nt) if (src_ptr[n_src] >= MIN_PAR)
  {
    alignas(64) T xc[IN1B];
    alignas(64) T gxc[IN1B];
#pragma omp for schedule(dynamic, 16)
    for (int64_t s = 0; s < n_src; ++s) {
      to_cm_in1(x + s * IN1, xc);
      zero(gxc, IN1);
      for (int64_t p = src_ptr[s]; p < src_ptr[s + 1]; ++p) {
        const int64_t e = src_perm[p];
        zero(gy + e * IN2, IN2);
        row_bwd<T>(xc, y + e * IN2, w + e * WN, gcm + edge_dst[e] * OUT,
                   gxc, gy + e * IN2, gw + e * WN);
      }
      from_cm_in1(gxc, gx + s * IN1);
    }
  }
}

template <typename T>
static void conv_dbwd(int64_t n_dst, int64_t n_src, const int64_t* dst_ptr,
                      const int64_t* dst_perm, const int64_t* edge_src,
                      const int64_t* src_ptr, const int64_t* src_perm, const int64_t* edge_dst,
                      const T* g, const T* x, const T* y, const T* w,
                      const T* ggx, const T* ggy, const T* ggw,
                      T* dg, T* dx, T* dy, T* dw, T* ws, int nt) {
  // ws: x, then ggx (when given), channel-major by source node; then g by target node.
  const T* xcm = to_cm_all<T, IN1, to_cm_in1<T>>(x, n_src, ws, nt);
  const T* ggxcm = ggx ? to_cm_all<T, IN1, to_cm_in1<T>>(ggx, n_src, ws + n_src * IN1, nt)
                       : nullptr;
  const T* gcm = to_cm_all<T, OUT, to_cm_out<T>>(g, n_dst, ws + 2 * n_src * IN1, nt);
#pragma omp parallel num_threads(nt) if (src_ptr[n_src] >= MIN_PAR)
  {
    alignas(64) T dgc[OUTB];
    alignas(64) T dxc[IN1B];
#pragma omp for schedule(dynamic, 16)
    for (int64_t n = 0; n < n_dst; ++n) {
      zero(dgc, OUT);
      for (int64_t p = dst_ptr[n]; p < dst_ptr[n + 1]; ++p) {
        const int64_t e = dst_perm[p], s = edge_src[e];
        row_dbwd_dg<T>(xcm + s * IN1, ggx ? ggxcm + s * IN1 : nullptr,
                       y + e * IN2, ggy ? ggy + e * IN2 : nullptr,
                       w + e * WN, ggw ? ggw + e * WN : nullptr, dgc);
      }
      from_cm_out(dgc, dg + n * OUT);
    }
#pragma omp for schedule(dynamic, 16)
    for (int64_t s = 0; s < n_src; ++s) {
      zero(dxc, IN1);
      for (int64_t p = src_ptr[s]; p < src_ptr[s + 1]; ++p) {
        const int64_t e = src_perm[p];
        zero(dy + e * IN2, IN2);
        zero(dw + e * WN, WN);
        row_dbwd_rest<T>(xcm + s * IN1, ggx ? ggxcm + s * IN1 : nullptr,
                         y + e * IN2, ggy ? ggy + e * IN2 : nullptr,
                         w + e * WN, ggw ? ggw + e * WN : nullptr,
                         gcm + edge_dst[e] * OUT, dxc, dy + e * IN2, dw + e * WN);
      }
      from_cm_in1(dxc, dx + s * IN1);
    }
  }
}
"""

_EXPORTS = r"""
void tp_fwd_SFX(int64_t B, const SCALAR* x, const SCALAR* y, const SCALAR* w, SCALAR* out,
                int nt) {
  tp_fwd(B, x, y, w, out, nt);
}
void tp_bwd_SFX(int64_t B, const SCALAR* g, const SCALAR* x, const SCALAR* y, const SCALAR* w,
                SCALAR* gx, SCALAR* gy, SCALAR* gw, int nt) {
  tp_bwd(B, g, x, y, w, gx, gy, gw, nt);
}
void tp_dbwd_SFX(int64_t B, const SCALAR* g, const SCALAR* x, const SCALAR* y, const SCALAR* w,
                 const SCALAR* ggx, const SCALAR* ggy, const SCALAR* ggw,
                 SCALAR* dg, SCALAR* dx, SCALAR* dy, SCALAR* dw, int nt) {
  tp_dbwd(B, g, x, y, w, ggx, ggy, ggw, dg, dx, dy, dw, nt);
}
void conv_fwd_SFX(int64_t n_dst, int64_t n_src, const int64_t* dst_ptr, const int64_t* dst_perm,
                  const int64_t* edge_src, const SCALAR* x, const SCALAR* y, const SCALAR* w,
                  SCALAR* out, SCALAR* ws, int nt) {
  conv_fwd(n_dst, n_src, dst_ptr, dst_perm, edge_src, x, y, w, out, ws, nt);
}
void conv_bwd_SFX(int64_t n_dst, int64_t n_src, const int64_t* src_ptr, const int64_t* src_perm,
                  const int64_t* edge_dst, const SCALAR* g, const SCALAR* x, const SCALAR* y,
                  const SCALAR* w, SCALAR* gx, SCALAR* gy, SCALAR* gw, SCALAR* ws, int nt) {
  conv_bwd(n_dst, n_src, src_ptr, src_perm, edge_dst, g, x, y, w, gx, gy, gw, ws, nt);
}
void conv_dbwd_SFX(int64_t n_dst, int64_t n_src, const int64_t* dst_ptr, const int64_t* dst_perm,
                   const int64_t* edge_src, const int64_t* src_ptr, const int64_t* src_perm,
                   const int64_t* edge_dst, const SCALAR* g, const SCALAR* x, const SCALAR* y,
                   const SCALAR* w, const SCALAR* ggx, const SCALAR* ggy, const SCALAR* ggw,
                   SCALAR* dg, SCALAR* dx, SCALAR* dy, SCALAR* dw, SCALAR* ws, int nt) {
  conv_dbwd(n_dst, n_src, dst_ptr, dst_perm, edge_src, src_ptr, src_perm, edge_dst,
            g, x, y, w, ggx, ggy, ggw, dg, dx, dy, dw, ws, nt);
}
"""


def generate_cpu_source(desc: TPDescriptor, sfx: str,
                        exports: tuple[str, ...] | None = None) -> str:
    """One C++ translation unit for ``desc`` in scalar type ``sfx`` (``f32``/``f64``),
    exporting the kernels named in ``exports`` (``tp_fwd``, ..., ``conv_dbwd``; None: all
    six)."""
    return _Gen(desc, sfx, exports).source()


def generate_cpu_units(desc: TPDescriptor, sfx: str) -> KernelUnits:
    """The same kernels as translation units to build apart (see :class:`KernelUnits`)."""
    return _Gen(desc, sfx).units()
