"""One description of a Clebsch-Gordan tensor product, shared by every backend.

A :class:`TPDescriptor` captures everything a kernel generator needs to reproduce
``e3nn.o3.TensorProduct(irreps_in1, irreps_in2, irreps_out, instructions,
shared_weights=False, internal_weights=False)`` with e3nn's default normalization
(``irrep_normalization="component"``, ``path_normalization="element"``):

* the irreps blocks of both inputs and the output (offsets in e3nn's ``mul x (2l+1)``
  layout, i.e. ``x[..., offset + u * (2l+1) + m]``),
* one :class:`TPPath` per instruction, with e3nn's own normalization constant and the
  nonzero entries of ``e3nn.o3.wigner_3j(l1, l2, l3)``,
* the per-sample weight layout (instruction order; ``uvu``: ``(mul1, mul2)`` row-major,
  ``uvw``: ``(mul1, mul2, mul_out)`` row-major).

It is derived from the product's one description, ``equibench.workloads.TPProblem``
(``TPProblem.descriptor``), or from an e3nn module (a MACE interaction's). FLOPs and bytes
are counted once, by ``equibench.cost``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# Bump whenever generated code or the descriptor's meaning changes: it is part of the
# hash, so stale compiled kernels in the on-disk cache are never reused.
GENERATOR_VERSION = "equibench-kernels-1"

# wigner_3j entries below this are round-off of exact zeros (largest true |C| ~ 1e-2).
_CG_ZERO = 1e-10

Direction = Literal["forward", "backward", "double_backward"]
Mode = Literal["uvu", "uvw"]


@dataclass(frozen=True)
class IrrepBlock:
    """One ``mul x (l, parity)`` block of an irreps; ``offset`` is its start in a row."""

    mul: int
    l: int  # noqa: E741 - the angular momentum is called l everywhere in this field
    parity: int
    offset: int

    @property
    def dim(self) -> int:
        """Width of one copy of the irrep, ``2l+1``."""
        return 2 * self.l + 1

    @property
    def size(self) -> int:
        """Number of entries of the whole block in a row, ``mul * (2l+1)``."""
        return self.mul * self.dim


@dataclass(frozen=True)
class TPPath:
    """One instruction of the tensor product.

    ``out[w, k] += alpha * sum_{u,v,i,j} W[...] * cg(i, j, k) * x1[u, i] * x2[v, j]`` with
    ``W[u, v]`` (``uvu``, output channel ``w = u``) or ``W[u, v, w]`` (``uvw``).
    ``cg`` lists the nonzero ``(i, j, k, value)`` of ``wigner_3j(l1, l2, l3)``; ``alpha``
    is e3nn's normalized ``path_weight`` (already square-rooted).
    """

    i_in1: int
    i_in2: int
    i_out: int
    mode: Mode
    has_weight: bool
    alpha: float
    weight_offset: int
    weight_shape: tuple[int, ...]
    cg: tuple[tuple[int, int, int, float], ...]

    @property
    def weight_numel(self) -> int:
        """Number of weights this path reads per sample (0 without weights)."""
        if not self.has_weight:
            return 0
        n = 1
        for s in self.weight_shape:
            n *= s
        return n

    @property
    def nnz(self) -> int:
        """Number of nonzero Clebsch-Gordan coefficients of the path."""
        return len(self.cg)


def _blocks(irreps: object) -> tuple[IrrepBlock, ...]:
    blocks = []
    offset = 0
    for mul, ir in irreps:  # type: ignore[attr-defined]
        blocks.append(IrrepBlock(mul=mul, l=ir.l, parity=ir.p, offset=offset))
        offset += mul * ir.dim
    return tuple(blocks)


def _blocks_str(blocks: Sequence[IrrepBlock]) -> str:
    return "+".join(f"{b.mul}x{b.l}{'e' if b.parity == 1 else 'o'}" for b in blocks)


@dataclass(frozen=True)
class TPDescriptor:
    """Backend-independent description of one e3nn tensor product (see module doc)."""

    in1: tuple[IrrepBlock, ...]
    in2: tuple[IrrepBlock, ...]
    out: tuple[IrrepBlock, ...]
    paths: tuple[TPPath, ...]

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_e3nn(
        cls,
        irreps_in1: object,
        irreps_in2: object,
        irreps_out: object,
        instructions: Sequence[tuple],
    ) -> TPDescriptor:
        """Build from the arguments of ``e3nn.o3.TensorProduct``.

        ``instructions`` are ``(i_in1, i_in2, i_out, mode, has_weight)`` with mode ``uvu``
        or ``uvw``. Normalization constants are read back from an e3nn ``TensorProduct``
        built with the same arguments, so they match e3nn bit for bit.
        """
        from e3nn import o3

        for ins in instructions:
            if ins[3] not in ("uvu", "uvw"):
                raise ValueError(f"unsupported connection mode {ins[3]!r} (uvu, uvw only)")
            if ins[3] == "uvw" and not ins[4]:
                raise ValueError("uvw paths need weights")
        tp = o3.TensorProduct(
            irreps_in1,
            irreps_in2,
            irreps_out,
            [tuple(ins) for ins in instructions],
            shared_weights=False,
            internal_weights=False,
        )
        return cls.from_tensor_product(tp)

    @classmethod
    def from_tensor_product(cls, tp: object) -> TPDescriptor:
        """Build from an existing ``e3nn.o3.TensorProduct`` (uvu/uvw paths only)."""
        import torch
        from e3nn import o3

        in1, in2, out = _blocks(tp.irreps_in1), _blocks(tp.irreps_in2), _blocks(tp.irreps_out)
        paths = []
        offset = 0
        for ins in tp.instructions:  # type: ignore[attr-defined]
            if ins.connection_mode not in ("uvu", "uvw"):
                raise ValueError(f"unsupported connection mode {ins.connection_mode!r}")
            l1, l2, l3 = in1[ins.i_in1].l, in2[ins.i_in2].l, out[ins.i_out].l
            w3j = o3.wigner_3j(l1, l2, l3, dtype=torch.float64)
            cg = tuple(
                (i, j, k, float(w3j[i, j, k]))
                for i in range(2 * l1 + 1)
                for j in range(2 * l2 + 1)
                for k in range(2 * l3 + 1)
                if abs(float(w3j[i, j, k])) > _CG_ZERO
            )
            path = TPPath(
                i_in1=ins.i_in1,
                i_in2=ins.i_in2,
                i_out=ins.i_out,
                mode=ins.connection_mode,
                has_weight=bool(ins.has_weight),
                alpha=float(ins.path_weight),
                weight_offset=offset,
                weight_shape=tuple(int(s) for s in ins.path_shape),
                cg=cg,
            )
            offset += path.weight_numel
            paths.append(path)
        desc = cls(in1=in1, in2=in2, out=out, paths=tuple(paths))
        if desc.weight_numel != tp.weight_numel:  # type: ignore[attr-defined]
            raise AssertionError("weight layout disagrees with e3nn")
        return desc

    def to_e3nn(self) -> object:
        """The equivalent ``e3nn.o3.TensorProduct`` (the reference implementation)."""
        from e3nn import o3

        return o3.TensorProduct(
            self.irreps_in1,
            self.irreps_in2,
            self.irreps_out,
            self.instructions,
            shared_weights=False,
            internal_weights=False,
        )

    # ---------------------------------------------------------------- sizes
    @property
    def irreps_in1(self) -> str:
        return _blocks_str(self.in1)

    @property
    def irreps_in2(self) -> str:
        return _blocks_str(self.in2)

    @property
    def irreps_out(self) -> str:
        return _blocks_str(self.out)

    @property
    def instructions(self) -> list[tuple[int, int, int, str, bool]]:
        """The e3nn instructions this descriptor was built from."""
        return [(p.i_in1, p.i_in2, p.i_out, p.mode, p.has_weight) for p in self.paths]

    @property
    def in1_dim(self) -> int:
        return sum(b.size for b in self.in1)

    @property
    def in2_dim(self) -> int:
        return sum(b.size for b in self.in2)

    @property
    def out_dim(self) -> int:
        return sum(b.size for b in self.out)

    @property
    def weight_numel(self) -> int:
        return sum(p.weight_numel for p in self.paths)

    # ---------------------------------------------------------------- identity
    def canonical(self) -> str:
        """Canonical JSON text: floats as exact hex so the hash is bit-exact."""
        doc = {
            "generator": GENERATOR_VERSION,
            "in1": [(b.mul, b.l, b.parity) for b in self.in1],
            "in2": [(b.mul, b.l, b.parity) for b in self.in2],
            "out": [(b.mul, b.l, b.parity) for b in self.out],
            "paths": [
                [
                    p.i_in1,
                    p.i_in2,
                    p.i_out,
                    p.mode,
                    p.has_weight,
                    float(p.alpha).hex(),
                    p.weight_offset,
                    list(p.weight_shape),
                    [[i, j, k, float(c).hex()] for i, j, k, c in p.cg],
                ]
                for p in self.paths
            ],
        }
        return json.dumps(doc, separators=(",", ":"), sort_keys=True)

    @functools.cached_property
    def hash(self) -> str:
        """sha256 of :meth:`canonical` (includes :data:`GENERATOR_VERSION`); computed once,
        because every kernel call looks its kernels up by it (0.6 ms for mace-large)."""
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    def __str__(self) -> str:
        return (
            f"TPDescriptor({self.irreps_in1} x {self.irreps_in2} -> {self.irreps_out}, "
            f"{len(self.paths)} paths, {self.weight_numel} weights)"
        )
