"""The symmetric contraction's Triton kernels (GPU; on CPU only under
``TRITON_INTERPRET=1``, for tests): one table-driven kernel for its forward, backward and
double backward.

Every quantity of the three is a sum of terms, each a coefficient times a product of rows
of the operands (the feature ``x``, the weights ``w``, the cotangent ``g``, the tangents
``ggx``/``ggw``). Per written row ``s``, the kernel walks its terms in a table::

    out[n, s, c] (+)= sum_e coef_e * A[n, a_e, c] * B[n, b_e, c] * Y[n, y_e, c]
                                   * X[n, f_e1, c] ... X[n, f_eK, c]

(a row index ``-1`` reads 1). One program per (node, block of ``BC`` channels, written
row). The tables come from the description (:func:`_tables`): forward ``out = T(w; x)``;
backward ``gx`` (a term per occurrence of the row in a monomial) and ``gw``; double
backward ``dg``, ``dw`` and ``dx`` (a term per ordered pair of occurrences).

The CPU backend runs straight-line programs instead (:mod:`.sc_cpu`). On a GPU those
keep every shared monomial live at once: compiled for sm_90 the OpenEquivariance-size
model's kernels took 32-64 registers with 23-60 KB of spills per thread and up to 190 s
to compile (docs/design-decisions.md). Here the registers are bounded by ``K + 4``
operand vectors, whatever the model, and one compiled kernel serves every model.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from .errors import KernelUnavailable
from .launch import Launch, Record
from .symmetric_contraction import SymmetricContractionDescriptor
from .tp_triton import _require_triton

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None

# Channel blocks and warps the autotuner tries on a GPU: one channel per thread (every
# operand row of a term is one vector of BC channels, so more channels per thread only
# multiply the registers). The interpreter runs the first.
CONFIGS = ((32, 1), (64, 2), (128, 4))

# The table's columns: a, b, y (rows of A, B, Y or -1), then the K factor rows of X.
_FIXED = 3


def _configs():
    if os.environ.get("TRITON_INTERPRET") == "1":
        return [triton.Config({"BC": 32}, num_warps=1)]
    return [triton.Config({"BC": bc}, num_warps=w) for bc, w in CONFIGS]


if triton is not None:

    @triton.autotune(configs=_configs(), key=["C", "K"], restore_value=["out_ptr"])
    @triton.jit(do_not_specialize=["C", "RA", "RB", "RY", "RX", "ROUT", "ADD"])
    def _poly(a_ptr, b_ptr, y_ptr, x_ptr, out_ptr, ptr, rows_t, coef_t,
              C, RA, RB, RY, RX, ROUT, ADD, K: tl.constexpr, BC: tl.constexpr):  # fmt: skip
        n = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1) * BC + tl.arange(0, BC)
        s = tl.program_id(2)
        mask = c < C
        acc = tl.zeros([BC], dtype=out_ptr.dtype.element_ty)
        for e in range(tl.load(ptr + s), tl.load(ptr + s + 1)):
            row = rows_t + e * (3 + K)
            term = tl.load(coef_t + e) + tl.zeros([BC], dtype=out_ptr.dtype.element_ty)
            ra = tl.load(row)
            term *= tl.load(a_ptr + (n * RA + ra) * C + c, mask=mask, other=0.0)
            # an absent operand (row -1) reads 1; row 0 is loaded in its place (cached)
            rb = tl.load(row + 1)
            v = tl.load(b_ptr + (n * RB + tl.maximum(rb, 0)) * C + c, mask=mask, other=1.0)
            term *= tl.where(rb >= 0, v, 1.0)
            ry = tl.load(row + 2)
            v = tl.load(y_ptr + (n * RY + tl.maximum(ry, 0)) * C + c, mask=mask, other=1.0)
            term *= tl.where(ry >= 0, v, 1.0)
            for k in tl.static_range(K):
                rf = tl.load(row + 3 + k)
                v = tl.load(x_ptr + (n * RX + tl.maximum(rf, 0)) * C + c, mask=mask, other=1.0)
                term *= tl.where(rf >= 0, v, 1.0)
            acc += term
        o = out_ptr + (n * ROUT + s) * C + c
        if ADD != 0:
            acc += tl.load(o, mask=mask, other=0.0)
        tl.store(o, acc, mask=mask)


@dataclass(frozen=True)
class _Table:
    """Terms grouped by written row: ``ptr (rows+1,)``, ``rows (E, 3+K)`` int64 (a, b, y,
    factors), ``coef (E,)`` float64."""

    ptr: Tensor
    rows: Tensor
    coef: Tensor


def _table(terms: list[tuple[int, float, int, int, int, tuple[int, ...]]], n_rows: int,
           k: int) -> _Table:
    """``terms``: ``(written row, coef, a, b, y, factors)``, factors padded to ``k``."""
    terms = sorted(terms, key=lambda t: t[0])
    counts = torch.bincount(torch.tensor([t[0] for t in terms], dtype=torch.int64),
                            minlength=n_rows)
    ptr = torch.zeros(n_rows + 1, dtype=torch.int64)
    torch.cumsum(counts, 0, out=ptr[1:])
    rows = torch.tensor([(a, b, y, *f, *([-1] * (k - len(f)))) for _, _, a, b, y, f in terms],
                        dtype=torch.int64).reshape(-1, _FIXED + k)
    return _Table(ptr, rows, torch.tensor([t[1] for t in terms], dtype=torch.float64))


def _tables(desc: SymmetricContractionDescriptor, k: int) -> dict[str, _Table]:
    """The term tables of every launch, by name (see the module docstring)."""
    out, gx, gw, dg2, dw, dx2 = [], [], [], [], [], []
    for p, path in enumerate(desc.paths):
        for m, t, coef in path.terms:
            o = desc.out_offsets[path.output] + m
            out.append((o, coef, p, -1, -1, t))
            gw.append((p, coef, o, -1, -1, t))
            for i, ti in enumerate(t):
                rest = t[:i] + t[i + 1:]
                gx.append((ti, coef, o, p, -1, rest))
                dg2.append((o, coef, p, -1, ti, rest))
                dw.append((p, coef, o, -1, ti, rest))
                for j, tj in enumerate(t):
                    if j != i:
                        dx2.append((tj, coef, o, p, ti, tuple(
                            f for q, f in enumerate(t) if q not in (i, j))))
    nx, no, npaths = desc.num_features, desc.out_dim, desc.num_paths
    return {"out": _table(out, no, k), "gx": _table(gx, nx, k), "gw": _table(gw, npaths, k),
            "dg2": _table(dg2, no, k), "dw": _table(dw, npaths, k), "dx2": _table(dx2, nx, k)}


# (table, A, B, Y, X, written array, add) per launch of each kernel name; the double
# backward's dg and dx are two launches each, the second adding.
_LAUNCHES = {
    "sc_fwd": (("out", "w", None, None, "x", "out", False),),
    "sc_bwd": (("gx", "g", "w", None, "x", "gx", False),
               ("gw", "g", None, None, "x", "gw", False)),
    "sc_dbwd": (("out", "ggw", None, None, "x", "dg", False),
                ("dg2", "w", None, "ggx", "x", "dg", True),
                ("dw", "g", None, "ggx", "x", "dw", False),
                ("gx", "g", "ggw", None, "x", "dx", False),
                ("dx2", "g", "w", "ggx", "x", "dx", True)),
}
_READ = {"sc_fwd": ("x", "w"), "sc_bwd": ("g", "x", "w"),
         "sc_dbwd": ("g", "x", "w", "ggx", "ggw")}


class ScTritonKernels:
    """The Triton kernels of one descriptor; same interface as
    :class:`.sc_cpu.ScCpuKernels` (arrays ``(n, rows, c)``, any channel count).

    ``record``: hand every launch to it instead of running it (:mod:`.launch`).
    """

    def __init__(self, desc: SymmetricContractionDescriptor,
                 record: Record | None = None) -> None:
        if record is None:
            _require_triton()
        elif triton is None:
            raise KernelUnavailable("triton is not installed (pip install triton)")
        self.record = record
        self.desc = desc
        self.k = max([p.correlation for p in desc.paths] + [1])
        self.tables = _tables(desc, self.k)
        self._dev: dict[tuple, dict[str, tuple[Tensor, Tensor, Tensor]]] = {}

    def _on(self, like: Tensor) -> dict[str, tuple[Tensor, Tensor, Tensor]]:
        key = (str(like.device), like.dtype)
        if key not in self._dev:
            self._dev[key] = {name: (t.ptr.to(like.device), t.rows.to(like.device),
                                     t.coef.to(like.device, like.dtype))
                              for name, t in self.tables.items()}
        return self._dev[key]

    def rows(self, array: str) -> int:
        d = self.desc
        return {"x": d.num_features, "gx": d.num_features, "dx": d.num_features,
                "ggx": d.num_features, "w": d.num_paths, "gw": d.num_paths,
                "dw": d.num_paths, "ggw": d.num_paths, "out": d.out_dim, "g": d.out_dim,
                "dg": d.out_dim}[array]

    def run(self, name: str, **given: Tensor | None) -> dict[str, Tensor]:
        x = given["x"]
        assert x is not None
        n, _, channels = x.shape
        arrays: dict[str, Tensor] = {}
        for a in _READ[name]:
            t = given.get(a)
            shape = (n, self.rows(a), channels)
            t = x.new_zeros(shape) if t is None else t.contiguous()
            if t.shape != shape or t.dtype != x.dtype or t.device != x.device:
                raise ValueError(f"{name}: {a} must be a {x.dtype} tensor of shape {shape} "
                                 f"on {x.device}, not {t.dtype} {tuple(t.shape)} on {t.device}")
            arrays[a] = t
        written = dict.fromkeys(launch[5] for launch in _LAUNCHES[name])
        outputs = {a: x.new_zeros(n, self.rows(a), channels) for a in written}
        arrays.update(outputs)
        if n and channels:
            tables = self._on(x)
            for table, a, b, y, xs, out, add in _LAUNCHES[name]:
                self._launch(tables[table], [arrays.get(v) if v else None
                                             for v in (a, b, y, xs)], arrays[out], add)
        return outputs

    def _launch(self, table: tuple[Tensor, Tensor, Tensor], operands: list[Tensor | None],
                out: Tensor, add: bool) -> None:
        ptr, rows, coef = table
        n, n_rows, channels = out.shape
        # an absent operand (-1 in every row of its column) reads 1: any tensor will do
        a, b, y, x = (t if t is not None else out for t in operands)
        grid = lambda meta: (n, triton.cdiv(channels, meta["BC"]), n_rows)  # noqa: E731
        args = (a, b, y, x, out, ptr, rows, coef, channels,
                *(t.shape[1] for t in (a, b, y, x, out)), int(add))
        if self.record is not None:
            self.record(Launch(_poly, grid, args, {"K": self.k}))
        else:
            _poly[grid](*args, K=self.k)


_LOCK = threading.Lock()
_LOADED: dict[str, ScTritonKernels] = {}


def sc_triton_kernels(desc: SymmetricContractionDescriptor) -> ScTritonKernels:
    """The Triton kernels of ``desc`` (tables built once per descriptor)."""
    with _LOCK:
        if desc.hash not in _LOADED:
            _LOADED[desc.hash] = ScTritonKernels(desc)
        return _LOADED[desc.hash]
