"""One description of MACE's symmetric contraction (its product basis), shared by every
backend, and the straight-line programs of its forward, backward and double backward.

For node features ``x (n, i, c)`` (``i`` the components of the coupled input irreps,
``c`` channels) and per-node weights ``w (n, p, c)``, one row ``p`` per :class:`SCPath`,
the contraction is, per output component ``o`` (irrep ``j``, component ``m``)::

    out[n, o, c] = sum_{p of irrep j} w[n, p, c]
                   * sum_{(m, t, coef) in p} coef * x[n, t_1, c] ... x[n, t_nu, c]

with ``t`` a sorted tuple of feature components (the monomial; the product is symmetric,
so a generalized Clebsch-Gordan tensor ``U_nu`` is summed onto sorted tuples). Every
channel is independent: a kernel runs the same straight-line program on each column
``(n, c)``. Monomials of degree ``d`` are one monomial of degree ``d - 1`` (its prefix)
times one feature, so each costs one multiplication.

The weights of a model (mace-torch's per-element ``W_nu (elements, k, c)``) become ``w``
outside the kernel (one small matrix product per path); the description knows nothing of
mace-torch (``equibench.implementations.mace.symmetric_contraction`` builds it from a
mace-torch module).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass

from .descriptor import GENERATOR_VERSION
from .straight_line import Load, Statement, Store, Sum, gradient, tangent, without_dead_code


@dataclass(frozen=True)
class SCPath:
    """One weight row: its correlation ``nu``, its output irrep, and its nonzero terms
    ``(m, sorted feature tuple of length nu, coefficient)``."""

    correlation: int
    output: int
    terms: tuple[tuple[int, tuple[int, ...], float], ...]


@dataclass(frozen=True)
class SymmetricContractionDescriptor:
    """``num_features`` input components ``i``, output irreps of ``out_dims`` components,
    and one :class:`SCPath` per weight row (in the order of ``w``'s rows)."""

    num_features: int
    out_dims: tuple[int, ...]
    paths: tuple[SCPath, ...]

    def __post_init__(self) -> None:
        for path in self.paths:
            if not 0 <= path.output < len(self.out_dims):
                raise ValueError(f"path output {path.output} is not one of "
                                 f"{len(self.out_dims)} output irreps")
            for m, t, _ in path.terms:
                if len(t) != path.correlation or list(t) != sorted(t):
                    raise ValueError(f"term {t} of a correlation-{path.correlation} path "
                                     "is not a sorted tuple of that length")
                if not 0 <= m < self.out_dims[path.output]:
                    raise ValueError(f"component {m} outside output irrep {path.output}")
                if not all(0 <= i < self.num_features for i in t):
                    raise ValueError(f"feature index in {t} outside 0..{self.num_features - 1}")

    @property
    def out_offsets(self) -> tuple[int, ...]:
        return tuple(sum(self.out_dims[:j]) for j in range(len(self.out_dims)))

    @property
    def out_dim(self) -> int:
        return sum(self.out_dims)

    @property
    def num_paths(self) -> int:
        return len(self.paths)

    @functools.cached_property
    def hash(self) -> str:
        """SHA-256 of the description (coefficients as exact hex) and the generator."""
        text = json.dumps([GENERATOR_VERSION, "symmetric-contraction", self.num_features,
                           self.out_dims,
                           [[p.correlation, p.output, [[m, t, c.hex()] for m, t, c in p.terms]]
                            for p in self.paths]])
        return hashlib.sha256(text.encode()).hexdigest()

    def forward_program(self) -> list[Statement]:
        """Reads ``x`` (rows ``i``) and ``w`` (rows ``p``), stores ``out`` (rows ``o``)."""
        program: list[Statement] = []
        monomial: dict[tuple[int, ...], str] = {}

        def make(t: tuple[int, ...]) -> str:
            if t not in monomial:
                if len(t) == 1:
                    program.append(Load(f"x{t[0]}", "x", t[0]))
                    monomial[t] = f"x{t[0]}"
                else:
                    prefix, last = make(t[:-1]), make(t[-1:])
                    monomial[t] = "m" + "_".join(map(str, t))
                    program.append(Sum(monomial[t], ((1.0, (prefix, last)),)))
            return monomial[t]

        per_output: dict[int, list[tuple[float, tuple[str, ...]]]] = {}
        for p, path in enumerate(self.paths):
            program.append(Load(f"w{p}", "w", p))
            by_m: dict[int, list[tuple[float, tuple[str, ...]]]] = {}
            for m, t, coef in path.terms:
                by_m.setdefault(m, []).append((coef, (make(t),)))
            for m, terms in sorted(by_m.items()):
                program.append(Sum(f"s{p}_{m}", tuple(terms)))
                o = self.out_offsets[path.output] + m
                per_output.setdefault(o, []).append((1.0, (f"w{p}", f"s{p}_{m}")))
        for o in range(self.out_dim):
            if o in per_output:
                program.append(Sum(f"o{o}", tuple(per_output[o])))
                program.append(Store("out", o, f"o{o}"))
            else:
                program.append(Store("out", o, None))
        return program

    def programs(self) -> dict[str, list[Statement]]:
        """The three kernels' programs by name (arrays: ``x, w -> out``; ``g, x, w -> gx,
        gw``; ``g, x, w, ggx, ggw -> dg, dx, dw``)."""
        forward = self.forward_program()
        backward = gradient(forward, {"out": "g"}, {"x": "gx", "w": "gw"}, keep_stores=True)
        double = tangent(backward, {"x": "ggx", "w": "ggw"},
                         {"out": "dg", "gx": "dx", "gw": "dw"})
        backward = [s for s in backward if not (isinstance(s, Store) and s.array == "out")]
        return {name: self._every_row_stored(without_dead_code(program))
                for name, program in (("sc_fwd", forward), ("sc_bwd", backward),
                                      ("sc_dbwd", double))}

    def _every_row_stored(self, program: list[Statement]) -> list[Statement]:
        """``program`` and a zero store for every row of a written array it leaves (a
        feature no path uses has gradient zero)."""
        stored = {(s.array, s.row) for s in program if isinstance(s, Store)}
        arrays = dict.fromkeys(s.array for s in program if isinstance(s, Store))
        return program + [Store(a, row, None) for a in arrays for row in range(self.rows(a))
                          if (a, row) not in stored]

    def rows(self, array: str) -> int:
        """Rows of each array a program reads or writes."""
        if array in ("x", "gx", "ggx", "dx"):
            return self.num_features
        if array in ("w", "gw", "ggw", "dw"):
            return self.num_paths
        return self.out_dim
