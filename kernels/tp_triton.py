"""Triton backend (GPU; on CPU only under ``TRITON_INTERPRET=1``, for tests).

The descriptor is lowered to a table of "entries", one per nonzero Clebsch-Gordan
coefficient and per channel ``v`` of the second input, each with the addresses it
touches (column base and stride over channels of x, y, w and out) and its coefficient
``alpha * C``. Four generic kernels walk segments of that table:

* ``_fwd``   one program per (row block, output component ``(i_out, k)``): sums its
  entries into registers, then stores (or ``atomic_add`` s to the destination row: the
  convolution, ``out[dst[e]] += TP(x[src[e]], y[e], w[e])``);
* ``_bwd_x`` per input-1 component ``(i_in1, i)``: ``grad x`` (atomics to ``src`` rows in
  the convolution);
* ``_bwd_y`` per input-2 column: ``grad y`` (a reduction over channels);
* ``_bwd_w`` per weight block ``(path, v)``: ``grad w``.

Rows are vectorized in blocks of ``BZ`` and channels in blocks of ``BU`` (the next power
of two of the multiplicity). The double backward is composed from these kernels with
the identities in :func:`_double_backward`. Convolution atomics make the GPU result
order-dependent at round-off level (the CPU backend is deterministic).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import torch
from torch import Tensor

from .descriptor import TPDescriptor
from .errors import KernelUnavailable
from .graph import ConvPlan
from .launch import Launch, Record

try:
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - exercised only where triton is absent
    triton = None


def _require_triton() -> None:
    if triton is None:
        raise KernelUnavailable("triton is not installed (pip install triton)")
    if os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        raise KernelUnavailable(
            "Triton needs a GPU; on CPU set TRITON_INTERPRET=1 before importing triton "
            "(interpreter, slow: for tests only)"
        )


# Entry-table columns (int64). Channel strides: x[u] at xb + u*dx, out[u] at ob + u*do,
# uvu weight at wb + u*wu, uvw weight W[u, w] at wb + u*wu + w.
_COLS = ("mode", "hw", "xb", "dx", "mul1", "yc", "ob", "do", "mul3", "wb", "wu")
_UVU, _UVW = 0, 1


@dataclass(frozen=True)
class _Segments:
    """Entries grouped by one key: ``ptr (n_slots+1,)`` into the entry order ``perm``."""

    ptr: Tensor
    perm: Tensor


def _segments(keys: list[int], n_slots: int) -> _Segments:
    k = torch.tensor(keys, dtype=torch.int64)
    perm = torch.argsort(k, stable=True)
    ptr = torch.zeros(n_slots + 1, dtype=torch.int64)
    torch.cumsum(torch.bincount(k, minlength=n_slots), 0, out=ptr[1:])
    return _Segments(ptr, perm)


class _Tables:
    """The entry table of a descriptor and its four segmentations (CPU int64)."""

    def __init__(self, desc: TPDescriptor) -> None:
        rows: list[tuple[int, ...]] = []
        coef: list[float] = []
        out_key, x_key, y_key, w_key = [], [], [], []
        out_slot = {(b, k): n for n, (b, k) in enumerate(
            (b, k) for b, blk in enumerate(desc.out) for k in range(blk.dim))}  # fmt: skip
        x_slot = {(a, i): n for n, (a, i) in enumerate(
            (a, i) for a, blk in enumerate(desc.in1) for i in range(blk.dim))}  # fmt: skip
        w_slots: list[tuple[int, ...]] = []  # (mode, wb, wu, mul1, mul3) per (path, v)
        for p in desc.paths:
            a, b, o = desc.in1[p.i_in1], desc.in2[p.i_in2], desc.out[p.i_out]
            mode = _UVU if p.mode == "uvu" else _UVW
            for v in range(b.mul):
                if mode == _UVU:
                    wb, wu = p.weight_offset + v, b.mul
                else:
                    wb, wu = p.weight_offset + v * o.mul, b.mul * o.mul
                if p.has_weight:
                    w_slots.append((mode, wb, wu, a.mul, o.mul))
                for i, j, k, c in p.cg:
                    yc = b.offset + v * b.dim + j
                    rows.append((mode, int(p.has_weight), a.offset + i, a.dim, a.mul,
                                 yc, o.offset + k, o.dim, o.mul, wb, wu))  # fmt: skip
                    coef.append(p.alpha * c)
                    out_key.append(out_slot[p.i_out, k])
                    x_key.append(x_slot[p.i_in1, i])
                    y_key.append(yc)
                    w_key.append(len(w_slots) - 1 if p.has_weight else -1)
        self.entries = torch.tensor(rows, dtype=torch.int64).reshape(-1, len(_COLS))
        self.coef = torch.tensor(coef, dtype=torch.float64)
        self.out_seg = _segments(out_key, len(out_slot))
        self.x_seg = _segments(x_key, len(x_slot))
        self.y_seg = _segments(y_key, desc.in2_dim)
        has_w = [n for n, k in enumerate(w_key) if k >= 0]
        seg = _segments([w_key[n] for n in has_w], len(w_slots))
        self.w_seg = _Segments(seg.ptr, torch.tensor(has_w, dtype=torch.int64)[seg.perm])
        # per-slot addressing of the written tensor: (column base, channel stride, length)
        self.out_slots = torch.tensor(
            [(o.offset + k, o.dim, o.mul) for o in desc.out for k in range(o.dim)],
            dtype=torch.int64,
        ).reshape(-1, 3)
        self.x_slots = torch.tensor(
            [(a.offset + i, a.dim, a.mul) for a in desc.in1 for i in range(a.dim)],
            dtype=torch.int64,
        ).reshape(-1, 3)
        self.w_slots = torch.tensor(w_slots, dtype=torch.int64).reshape(-1, 5)
        self.max_mul = max([blk.mul for blk in (*desc.in1, *desc.out)] + [1])


def _ordered(
    t: _Tables, seg: _Segments, device: torch.device, dtype: torch.dtype
) -> tuple[list[Tensor], Tensor]:
    """Entry columns and coefficients permuted into ``seg`` order, on ``device``."""
    e = t.entries[seg.perm].to(device)
    return [e[:, n].contiguous() for n in range(len(_COLS))], t.coef[seg.perm].to(device, dtype)


# Rows per program (BZ) and warps tried on a GPU, per problem size and dtype: more rows
# per program reuse a slot's table entries more, fewer give more programs. The (BZ, BU)
# accumulator (BU: the padded multiplicity) holds one element per thread: compiled for
# sm_80/sm_90/sm_100 (``equibench gpu-compile``, docs/design-decisions.md), four or more
# spilled in a third of the quick preset's kernels and left 12-38% occupancy, two spilled
# in 6 of 492 (sm_80), one never did and kept 62-100%. The interpreter (CPU tests,
# TRITON_INTERPRET=1) runs the default alone: there is no GPU time to tune on.
DEFAULT_BLOCK_ROWS = 16
_BLOCK_ROWS = (1, 2, 4, 8, 16, 32, 64, 128)
_WARPS = (2, 4, 8)
_PER_THREAD = (1,)
_MAX_BLOCK = 4096


def default_block_rows(bu: int) -> int:
    return max(1, min(DEFAULT_BLOCK_ROWS, _MAX_BLOCK // bu))


def _prune(configs: list, named_args: dict, **kwargs) -> list:
    """The configurations that give each thread :data:`_PER_THREAD` accumulator elements;
    under the interpreter, or where none does, the default alone."""
    bu = kwargs["BU"]
    fits = [c for c in configs
            if c.kwargs["BZ"] * bu in {32 * c.num_warps * k for k in _PER_THREAD}]
    if os.environ.get("TRITON_INTERPRET") == "1" or not fits:
        return [triton.Config({"BZ": default_block_rows(bu)}, num_warps=4)]
    return fits


# The kernels are not specialized on the row count ``B`` or the row strides (Triton would
# otherwise compile one binary per pattern of ``% 16 == 0`` among them): the addresses
# stride over channels by table entries, so no load vectorizes on a row stride's alignment
# anyway. A new batch size or descriptor of the same block shape reuses the binary, and the
# GPU compile check (:mod:`.gpu_compile`) has fewer, exact binaries to compile.
def _autotuned(written: str):
    """Autotune a kernel over :data:`_BLOCK_ROWS` x :data:`_WARPS`, keyed on the problem's
    dimensions and whether it gathers (a convolution) or not; ``written``, the output it
    stores or adds into, is restored after each trial run (the convolutions add into it
    atomically)."""

    def wrap(kernel):
        return triton.autotune(
            configs=[triton.Config({"BZ": bz}, num_warps=w)
                     for bz in _BLOCK_ROWS for w in _WARPS],
            key=["B", "XD", "YD", "WD", "OD", "GATHER"],
            prune_configs_by={"early_config_prune": _prune},
            restore_value=[written],
        )(kernel)

    return wrap


if triton is not None:

    @_autotuned("out_ptr")
    @triton.jit(do_not_specialize=["B", "XD", "YD", "WD", "OD", "SKIP_UNW"])
    def _fwd(x_ptr, y_ptr, w_ptr, out_ptr, xi_ptr, oi_ptr, ptr, slots,
             mode_t, hw_t, xb_t, dx_t, mul1_t, yc_t, wb_t, wu_t, coef_t,
             B, XD, YD, WD, OD, SKIP_UNW, GATHER: tl.constexpr,
             BZ: tl.constexpr, BU: tl.constexpr):  # fmt: skip
        z = tl.program_id(0) * BZ + tl.arange(0, BZ)
        s = tl.program_id(1)
        zm = z < B
        z64 = z.to(tl.int64)
        if GATHER:
            xr = tl.load(xi_ptr + z64, mask=zm, other=0)
            orow = tl.load(oi_ptr + z64, mask=zm, other=0)
        else:
            xr = z64
            orow = z64
        u = tl.arange(0, BU)
        ob = tl.load(slots + 3 * s)
        od = tl.load(slots + 3 * s + 1)
        mul3 = tl.load(slots + 3 * s + 2)
        m2 = zm[:, None] & (u < mul3)[None, :]
        acc = tl.zeros((BZ, BU), dtype=out_ptr.dtype.element_ty)
        for e in range(tl.load(ptr + s), tl.load(ptr + s + 1)):
            hw = tl.load(hw_t + e)
            # SKIP_UNW: the weights are a cotangent, and paths without weights do not
            # depend on them
            c = tl.where((hw != 0) | (SKIP_UNW == 0), tl.load(coef_t + e), 0.0)
            xb = tl.load(xb_t + e)
            dx = tl.load(dx_t + e)
            wb = tl.load(wb_t + e)
            wu = tl.load(wu_t + e)
            yv = c * tl.load(y_ptr + z64 * YD + tl.load(yc_t + e), mask=zm, other=0.0)
            if tl.load(mode_t + e) == 0:
                xv = tl.load(x_ptr + xr[:, None] * XD + xb + u[None, :] * dx, mask=m2, other=0.0)
                wv = tl.load(w_ptr + z64[:, None] * WD + wb + u[None, :] * wu,
                             mask=m2 & ((u * 0 + hw) != 0)[None, :], other=1.0)  # fmt: skip
                acc += yv[:, None] * xv * wv
            else:
                for uu in range(0, tl.load(mul1_t + e)):
                    xs = tl.load(x_ptr + xr * XD + xb + uu * dx, mask=zm, other=0.0)
                    wv = tl.load(w_ptr + z64[:, None] * WD + wb + uu * wu + u[None, :],
                                 mask=m2, other=0.0)  # fmt: skip
                    acc += (yv * xs)[:, None] * wv
        optr = out_ptr + orow[:, None] * OD + ob + u[None, :] * od
        if GATHER:
            tl.atomic_add(optr, acc, mask=m2)
        else:
            tl.store(optr, acc, mask=m2)

    @_autotuned("gx_ptr")
    @triton.jit(do_not_specialize=["B", "XD", "YD", "WD", "OD", "SKIP_UNW"])
    def _bwd_x(g_ptr, y_ptr, w_ptr, gx_ptr, xi_ptr, gi_ptr, ptr, slots,
               mode_t, hw_t, yc_t, ob_t, do_t, mul3_t, wb_t, wu_t, coef_t,
               B, XD, YD, WD, OD, SKIP_UNW, GATHER: tl.constexpr,
               BZ: tl.constexpr, BU: tl.constexpr):  # fmt: skip
        z = tl.program_id(0) * BZ + tl.arange(0, BZ)
        s = tl.program_id(1)
        zm = z < B
        z64 = z.to(tl.int64)
        if GATHER:
            xr = tl.load(xi_ptr + z64, mask=zm, other=0)
            gr = tl.load(gi_ptr + z64, mask=zm, other=0)
        else:
            xr = z64
            gr = z64
        u = tl.arange(0, BU)
        xb = tl.load(slots + 3 * s)
        dx = tl.load(slots + 3 * s + 1)
        mul1 = tl.load(slots + 3 * s + 2)
        m2 = zm[:, None] & (u < mul1)[None, :]
        acc = tl.zeros((BZ, BU), dtype=gx_ptr.dtype.element_ty)
        for e in range(tl.load(ptr + s), tl.load(ptr + s + 1)):
            hw = tl.load(hw_t + e)
            # SKIP_UNW: the weights are a cotangent, and paths without weights do not
            # depend on them
            c = tl.where((hw != 0) | (SKIP_UNW == 0), tl.load(coef_t + e), 0.0)
            ob = tl.load(ob_t + e)
            od = tl.load(do_t + e)
            wb = tl.load(wb_t + e)
            wu = tl.load(wu_t + e)
            yv = c * tl.load(y_ptr + z64 * YD + tl.load(yc_t + e), mask=zm, other=0.0)
            if tl.load(mode_t + e) == 0:
                gv = tl.load(g_ptr + gr[:, None] * OD + ob + u[None, :] * od, mask=m2, other=0.0)
                wv = tl.load(w_ptr + z64[:, None] * WD + wb + u[None, :] * wu,
                             mask=m2 & ((u * 0 + hw) != 0)[None, :], other=1.0)  # fmt: skip
                acc += yv[:, None] * gv * wv
            else:
                for ww in range(0, tl.load(mul3_t + e)):
                    gs = tl.load(g_ptr + gr * OD + ob + ww * od, mask=zm, other=0.0)
                    wv = tl.load(w_ptr + z64[:, None] * WD + wb + u[None, :] * wu + ww,
                                 mask=m2, other=0.0)  # fmt: skip
                    acc += (yv * gs)[:, None] * wv
        optr = gx_ptr + xr[:, None] * XD + xb + u[None, :] * dx
        if GATHER:
            tl.atomic_add(optr, acc, mask=m2)
        else:
            tl.store(optr, acc, mask=m2)

    @_autotuned("gy_ptr")
    @triton.jit(do_not_specialize=["B", "XD", "YD", "WD", "OD", "SKIP_UNW"])
    def _bwd_y(x_ptr, g_ptr, w_ptr, gy_ptr, xi_ptr, gi_ptr, ptr,
               mode_t, hw_t, xb_t, dx_t, mul1_t, ob_t, do_t, mul3_t, wb_t, wu_t, coef_t,
               B, XD, YD, WD, OD, SKIP_UNW, GATHER: tl.constexpr,
               BZ: tl.constexpr, BU: tl.constexpr):  # fmt: skip
        z = tl.program_id(0) * BZ + tl.arange(0, BZ)
        s = tl.program_id(1)
        zm = z < B
        z64 = z.to(tl.int64)
        if GATHER:
            xr = tl.load(xi_ptr + z64, mask=zm, other=0)
            gr = tl.load(gi_ptr + z64, mask=zm, other=0)
        else:
            xr = z64
            gr = z64
        u = tl.arange(0, BU)
        acc = tl.zeros((BZ,), dtype=gy_ptr.dtype.element_ty)
        for e in range(tl.load(ptr + s), tl.load(ptr + s + 1)):
            hw = tl.load(hw_t + e)
            # SKIP_UNW: the weights are a cotangent, and paths without weights do not
            # depend on them
            c = tl.where((hw != 0) | (SKIP_UNW == 0), tl.load(coef_t + e), 0.0)
            xb = tl.load(xb_t + e)
            dx = tl.load(dx_t + e)
            ob = tl.load(ob_t + e)
            od = tl.load(do_t + e)
            mul1 = tl.load(mul1_t + e)
            mul3 = tl.load(mul3_t + e)
            wb = tl.load(wb_t + e)
            wu = tl.load(wu_t + e)
            if tl.load(mode_t + e) == 0:
                m2 = zm[:, None] & (u < mul1)[None, :]
                xv = tl.load(x_ptr + xr[:, None] * XD + xb + u[None, :] * dx, mask=m2, other=0.0)
                gv = tl.load(g_ptr + gr[:, None] * OD + ob + u[None, :] * od, mask=m2, other=0.0)
                wv = tl.load(w_ptr + z64[:, None] * WD + wb + u[None, :] * wu,
                             mask=m2 & ((u * 0 + hw) != 0)[None, :], other=1.0)  # fmt: skip
                acc += c * tl.sum(xv * gv * wv, axis=1)
            else:
                m2 = zm[:, None] & (u < mul3)[None, :]
                gv = tl.load(g_ptr + gr[:, None] * OD + ob + u[None, :] * od, mask=m2, other=0.0)
                for uu in range(0, mul1):
                    xs = tl.load(x_ptr + xr * XD + xb + uu * dx, mask=zm, other=0.0)
                    wv = tl.load(w_ptr + z64[:, None] * WD + wb + uu * wu + u[None, :],
                                 mask=m2, other=0.0)  # fmt: skip
                    acc += c * xs * tl.sum(wv * gv, axis=1)
        tl.store(gy_ptr + z64 * YD + s, acc, mask=zm)

    @_autotuned("gw_ptr")
    @triton.jit(do_not_specialize=["B", "XD", "YD", "WD", "OD"])
    def _bwd_w(x_ptr, y_ptr, g_ptr, gw_ptr, xi_ptr, gi_ptr, ptr, slots,
               xb_t, dx_t, yc_t, ob_t, do_t, coef_t,
               B, XD, YD, WD, OD,
               GATHER: tl.constexpr, BZ: tl.constexpr, BU: tl.constexpr):  # fmt: skip
        z = tl.program_id(0) * BZ + tl.arange(0, BZ)
        s = tl.program_id(1)
        zm = z < B
        z64 = z.to(tl.int64)
        if GATHER:
            xr = tl.load(xi_ptr + z64, mask=zm, other=0)
            gr = tl.load(gi_ptr + z64, mask=zm, other=0)
        else:
            xr = z64
            gr = z64
        u = tl.arange(0, BU)
        mode = tl.load(slots + 5 * s)
        wb = tl.load(slots + 5 * s + 1)
        wu = tl.load(slots + 5 * s + 2)
        mul1 = tl.load(slots + 5 * s + 3)
        mul3 = tl.load(slots + 5 * s + 4)
        start = tl.load(ptr + s)
        end = tl.load(ptr + s + 1)
        if mode == 0:
            m2 = zm[:, None] & (u < mul1)[None, :]
            acc = tl.zeros((BZ, BU), dtype=gw_ptr.dtype.element_ty)
            for e in range(start, end):
                yv = tl.load(coef_t + e) * tl.load(y_ptr + z64 * YD + tl.load(yc_t + e),
                                                   mask=zm, other=0.0)  # fmt: skip
                xv = tl.load(x_ptr + xr[:, None] * XD + tl.load(xb_t + e)
                             + u[None, :] * tl.load(dx_t + e), mask=m2, other=0.0)  # fmt: skip
                gv = tl.load(g_ptr + gr[:, None] * OD + tl.load(ob_t + e)
                             + u[None, :] * tl.load(do_t + e), mask=m2, other=0.0)  # fmt: skip
                acc += yv[:, None] * xv * gv
            tl.store(gw_ptr + z64[:, None] * WD + wb + u[None, :] * wu, acc, mask=m2)
        else:
            m2 = zm[:, None] & (u < mul3)[None, :]
            for uu in range(0, mul1):
                acc = tl.zeros((BZ, BU), dtype=gw_ptr.dtype.element_ty)
                for e in range(start, end):
                    yv = tl.load(coef_t + e) * tl.load(y_ptr + z64 * YD + tl.load(yc_t + e),
                                                       mask=zm, other=0.0)  # fmt: skip
                    xs = tl.load(x_ptr + xr * XD + tl.load(xb_t + e) + uu * tl.load(dx_t + e),
                                 mask=zm, other=0.0)  # fmt: skip
                    gv = tl.load(g_ptr + gr[:, None] * OD + tl.load(ob_t + e)
                                 + u[None, :] * tl.load(do_t + e), mask=m2, other=0.0)  # fmt: skip
                    acc += (yv * xs)[:, None] * gv
                tl.store(gw_ptr + z64[:, None] * WD + wb + uu * wu + u[None, :], acc, mask=m2)


class TritonKernels:
    """Triton implementation of the :class:`.ops.Kernels` interface for one descriptor.

    ``record``: hand every launch to it instead of running it (:mod:`.launch`; the GPU
    compile check, which calls these methods with ``meta`` tensors on any machine).
    """

    def __init__(self, desc: TPDescriptor, record: Record | None = None) -> None:
        if record is None:
            _require_triton()
        elif triton is None:
            raise KernelUnavailable("triton is not installed (pip install triton)")
        self.record = record
        self.desc = desc
        self.t = _Tables(desc)
        self.bu = triton.next_power_of_2(self.t.max_mul)
        self._dev: dict[tuple, dict] = {}

    def _tables(self, device: torch.device, dtype: torch.dtype) -> dict:
        """Per-(device, dtype) copies of the entry table in each segment order."""
        key = (str(device), dtype)
        if key not in self._dev:
            t = self.t
            d = {}
            for name, seg in (("out", t.out_seg), ("x", t.x_seg), ("y", t.y_seg), ("w", t.w_seg)):
                cols, coef = _ordered(t, seg, device, dtype)
                d[name] = (seg.ptr.to(device), dict(zip(_COLS, cols, strict=True)), coef)
            d["out_slots"] = t.out_slots.to(device)
            d["x_slots"] = t.x_slots.to(device)
            d["w_slots"] = t.w_slots.to(device)
            self._dev[key] = d
        return self._dev[key]

    def _dims(self, rows: int) -> tuple[int, ...]:
        d = self.desc
        return rows, d.in1_dim, d.in2_dim, d.weight_numel, d.out_dim

    @staticmethod
    def _grid(rows: int, slots: int):
        """The launch grid for the block size the autotuner picks."""
        return lambda meta: (triton.cdiv(rows, meta["BZ"]), slots)

    def _launch(self, kernel, grid, *args, **constexprs) -> None:  # noqa: ANN001
        if self.record is not None:
            self.record(Launch(kernel, grid, args, constexprs))
        else:
            kernel[grid](*args, **constexprs)

    # ------------------------------------------------------------ launches
    # ``xi``/``gi``: row of x / of grad_out (or out) for each edge (convolution), or None.
    # ``wonly``: skip paths without weights (``w`` is a cotangent of the weights).
    def _launch_fwd(
        self, x: Tensor, y: Tensor, w: Tensor, out: Tensor,
        xi: Tensor | None, oi: Tensor | None, wonly: bool = False,
    ) -> None:  # fmt: skip
        rows = y.shape[0]
        nslots = self.t.out_slots.shape[0]
        if rows == 0 or nslots == 0:
            return
        tb = self._tables(x.device, x.dtype)
        ptr, c, coef = tb["out"]
        self._launch(
            _fwd, self._grid(rows, nslots), x, y, w, out, xi, oi, ptr, tb["out_slots"],
            c["mode"], c["hw"], c["xb"], c["dx"], c["mul1"], c["yc"], c["wb"], c["wu"], coef,
            *self._dims(rows), int(wonly), GATHER=xi is not None, BU=self.bu,
        )  # fmt: skip

    def _launch_bwd(
        self, g: Tensor, x: Tensor, y: Tensor, w: Tensor,
        gx: Tensor | None, gy: Tensor | None, gw: Tensor | None,
        xi: Tensor | None, gi: Tensor | None, wonly: bool = False,
    ) -> None:  # fmt: skip
        rows = y.shape[0]
        if rows == 0:
            return
        tb = self._tables(y.device, y.dtype)
        dims = self._dims(rows)
        flags = dict(GATHER=xi is not None, BU=self.bu)
        if gx is not None and self.t.x_slots.shape[0]:
            ptr, c, coef = tb["x"]
            self._launch(
                _bwd_x, self._grid(rows, self.t.x_slots.shape[0]),
                g, y, w, gx, xi, gi, ptr, tb["x_slots"],
                c["mode"], c["hw"], c["yc"], c["ob"], c["do"], c["mul3"], c["wb"], c["wu"], coef,
                *dims, int(wonly), **flags,
            )  # fmt: skip
        if gy is not None and self.desc.in2_dim:
            ptr, c, coef = tb["y"]
            self._launch(
                _bwd_y, self._grid(rows, self.desc.in2_dim),
                x, g, w, gy, xi, gi, ptr,
                c["mode"], c["hw"], c["xb"], c["dx"], c["mul1"], c["ob"], c["do"], c["mul3"],
                c["wb"], c["wu"], coef,
                *dims, int(wonly), **flags,
            )  # fmt: skip
        if gw is not None and self.t.w_slots.shape[0]:
            ptr, c, coef = tb["w"]
            self._launch(
                _bwd_w, self._grid(rows, self.t.w_slots.shape[0]),
                x, y, g, gw, xi, gi, ptr, tb["w_slots"],
                c["xb"], c["dx"], c["yc"], c["ob"], c["do"], coef,
                *dims, **flags,
            )  # fmt: skip

    # ------------------------------------------------------------ Kernels interface
    def tp_forward(self, x: Tensor, y: Tensor, w: Tensor) -> Tensor:
        out = torch.zeros(x.shape[0], self.desc.out_dim, dtype=x.dtype, device=x.device)
        self._launch_fwd(x, y, w, out, None, None)
        return out

    def tp_backward(self, g: Tensor, x: Tensor, y: Tensor, w: Tensor) -> tuple[Tensor, ...]:
        gx, gy, gw = (torch.zeros_like(t) for t in (x, y, w))
        self._launch_bwd(g, x, y, w, gx, gy, gw, None, None)
        return gx, gy, gw

    def tp_double_backward(
        self, g: Tensor, x: Tensor, y: Tensor, w: Tensor,
        ggx: Tensor | None, ggy: Tensor | None, ggw: Tensor | None,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        return self._double_backward(g, x, y, w, ggx, ggy, ggw, None)

    def conv_forward(self, x: Tensor, y: Tensor, w: Tensor, plan: ConvPlan) -> Tensor:
        out = torch.zeros(plan.num_nodes, self.desc.out_dim, dtype=x.dtype, device=x.device)
        self._launch_fwd(x, y, w, out, plan.edge_src, plan.edge_dst)
        return out

    def conv_backward(
        self, g: Tensor, x: Tensor, y: Tensor, w: Tensor, plan: ConvPlan
    ) -> tuple[Tensor, ...]:
        gx, gy, gw = (torch.zeros_like(t) for t in (x, y, w))
        self._launch_bwd(g, x, y, w, gx, gy, gw, plan.edge_src, plan.edge_dst)
        return gx, gy, gw

    def conv_double_backward(
        self, g: Tensor, x: Tensor, y: Tensor, w: Tensor,
        ggx: Tensor | None, ggy: Tensor | None, ggw: Tensor | None, plan: ConvPlan,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        return self._double_backward(g, x, y, w, ggx, ggy, ggw, plan)

    def _double_backward(
        self, g: Tensor, x: Tensor, y: Tensor, w: Tensor,
        ggx: Tensor | None, ggy: Tensor | None, ggw: Tensor | None, plan: ConvPlan | None,
    ) -> tuple[Tensor, ...]:  # fmt: skip
        """Double backward from forward/backward launches. The product is trilinear in
        (x, y, w) on weighted paths and bilinear in (x, y) on the others, so with ``T?*``
        the backward products and ``|w`` "weighted paths only":
        ``dg = T(ggx, y, w) + T(x, ggy, w) + T|w(x, y, ggw)``;
        ``dx = Tx*(g; ggy, w) + Tx*|w(g; y, ggw)``; ``dy = Ty*(g; ggx, w) + Ty*|w(g; x, ggw)``;
        ``dw = Tw*(g; ggx, y) + Tw*(g; x, ggy)``.
        """
        xi, gi = (plan.edge_src, plan.edge_dst) if plan is not None else (None, None)
        dg = torch.zeros_like(g)
        dx, dy, dw = (torch.zeros_like(t) for t in (x, y, w))
        # (operands, weighted paths only, contributes to (dx, dy, dw))
        terms = [
            ((ggx, y, w), False, (False, True, True)),
            ((x, ggy, w), False, (True, False, True)),
            ((x, y, ggw), True, (True, True, False)),
        ]
        for (a, b, c), wonly, needs in terms:
            if a is None or b is None or c is None:
                continue
            # The TP kernels store (not add) their rows, so each term gets scratch outputs.
            part = torch.zeros_like(dg)
            self._launch_fwd(a, b, c, part, xi, gi, wonly)
            dg += part
            parts = [
                torch.zeros_like(t) if need else None
                for t, need in zip((dx, dy, dw), needs, strict=True)
            ]
            self._launch_bwd(g, a, b, c, *parts, xi, gi, wonly)
            for acc, p in zip((dx, dy, dw), parts, strict=True):
                if p is not None:
                    acc += p
        return dg, dx, dy, dw


_LOCK = threading.Lock()
_CACHE: dict[str, TritonKernels] = {}


def triton_kernels(desc: TPDescriptor) -> TritonKernels:
    """Triton kernels of ``desc`` (tables built once per descriptor)."""
    _require_triton()
    with _LOCK:
        if desc.hash not in _CACHE:
            _CACHE[desc.hash] = TritonKernels(desc)
        return _CACHE[desc.hash]
