"""Straight-line programs over one column of values, and their derivatives.

A generated kernel that has no loops inside its body (every coefficient and index fixed
when it is generated) is a list of three kinds of statement, each row of an array read or
written at the same column ``c``::

    Load(v, "x", 3)                   v = x[3, c]
    Sum(v, ((0.5, (a, b)), (2, (d,)))) v = 0.5 * a * b + 2 * d
    Store("out", 1, v)                out[1, c] = v   (value None: 0)

From one such program :func:`gradient` derives its reverse-mode derivative (the
backward) and :func:`tangent` the forward-mode derivative of any program, so that the
double backward of a kernel is the tangent of its backward (by the symmetry of second
derivatives, the gradient of ``<gg, backward(g, x)>`` in ``x`` is the derivative of
``backward(g, x)`` along ``gg``; in ``g`` it is the derivative of the forward along ``gg``).
Backends only print statements (:mod:`.sc_cpu` as C++, :mod:`.sc_triton` as Triton).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

Term = tuple[float, tuple[str, ...]]


@dataclass(frozen=True)
class Load:
    out: str
    array: str
    row: int


@dataclass(frozen=True)
class Sum:
    """``out = sum(coef * prod(factors))`` over ``terms`` (no terms: 0)."""

    out: str
    terms: tuple[Term, ...]


@dataclass(frozen=True)
class Store:
    array: str
    row: int
    value: str | None  # None: zero


Statement = Load | Sum | Store


class _Names:
    """Fresh variable names with a prefix (programs built from others never collide)."""

    def __init__(self, prefix: str) -> None:
        self.prefix, self.count = prefix, 0

    def __call__(self) -> str:
        self.count += 1
        return f"{self.prefix}{self.count}"


def gradient(program: list[Statement], cotangents: dict[str, str],
             gradients: dict[str, str], keep_stores: bool = False) -> list[Statement]:
    """The reverse-mode derivative of ``program``: reads the cotangent of each stored array
    ``a`` from array ``cotangents[a]`` and stores the gradient of each loaded array ``a``
    in ``gradients[a]`` (every row the program loads). ``keep_stores`` keeps the
    program's own stores (a double backward needs the forward's outputs)."""
    fresh = _Names("r")
    primal = [s for s in program if not isinstance(s, Store)]
    stores = [s for s in program if isinstance(s, Store)]
    out: list[Statement] = list(primal) + (stores if keep_stores else [])
    contributions: dict[str, list[Term]] = defaultdict(list)
    for store in stores:
        if store.value is not None and store.array in cotangents:
            seed = fresh()
            out.append(Load(seed, cotangents[store.array], store.row))
            contributions[store.value].append((1.0, (seed,)))
    adjoint: dict[str, str] = {}
    # Reverse order: every use of a value comes after its definition, so its adjoint
    # is complete when the definition is reached.
    for statement in reversed(primal):
        terms = contributions.pop(statement.out, None)
        if not terms:
            continue
        adj = adjoint[statement.out] = fresh()
        out.append(Sum(adj, tuple(terms)))
        if isinstance(statement, Sum):
            for coef, factors in statement.terms:
                for i, factor in enumerate(factors):
                    contributions[factor].append((coef, (adj, *factors[:i], *factors[i + 1:])))
    for statement in primal:
        if isinstance(statement, Load) and statement.array in gradients:
            out.append(Store(gradients[statement.array], statement.row,
                             adjoint.get(statement.out)))
    return out


def tangent(program: list[Statement], directions: dict[str, str],
            outputs: dict[str, str]) -> list[Statement]:
    """The forward-mode derivative of ``program`` along arrays ``directions`` (loaded
    array ``a`` moves along array ``directions[a]``; others stay fixed): stores the
    derivative of each stored array ``a`` in ``outputs[a]``, and drops the program's own
    stores."""
    fresh = _Names("t")
    out: list[Statement] = []
    dot: dict[str, str] = {}  # value -> its tangent (absent: zero)
    for statement in program:
        if isinstance(statement, Load):
            out.append(statement)
            if statement.array in directions:
                dot[statement.out] = fresh()
                out.append(Load(dot[statement.out], directions[statement.array],
                                statement.row))
        elif isinstance(statement, Sum):
            out.append(statement)
            terms = tuple((coef, (dot[f], *factors[:i], *factors[i + 1:]))
                          for coef, factors in statement.terms
                          for i, f in enumerate(factors) if f in dot)
            if terms:
                dot[statement.out] = fresh()
                out.append(Sum(dot[statement.out], terms))
        elif statement.array in outputs:
            value = None if statement.value is None else dot.get(statement.value)
            out.append(Store(outputs[statement.array], statement.row, value))
    return out


def without_dead_code(program: list[Statement]) -> list[Statement]:
    """``program`` less every statement no store depends on."""
    live: set[str] = set()
    kept: list[Statement] = []
    for statement in reversed(program):
        if isinstance(statement, Store):
            if statement.value is not None:
                live.add(statement.value)
        elif statement.out in live:
            if isinstance(statement, Sum):
                live.update(f for _, factors in statement.terms for f in factors)
        else:
            continue
        kept.append(statement)
    return kept[::-1]


def arrays(program: Iterable[Statement]) -> tuple[list[str], list[str]]:
    """The arrays ``program`` reads and those it writes, in first-use order."""
    read: dict[str, None] = {}
    written: dict[str, None] = {}
    for statement in program:
        if isinstance(statement, Load):
            read[statement.array] = None
        elif isinstance(statement, Store):
            written[statement.array] = None
    return list(read), list(written)

