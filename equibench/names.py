"""The names a case may use, checked before any case process starts.

A misspelt workload, implementation, variant, direction or precision would otherwise cost
a process start-up (seconds to minutes of imports and builds) before a row says
``unavailable``. :func:`check` names every unknown name at once, with the closest valid
ones (``difflib``), and what the valid names are.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable, Sequence

from equibench.cases import Case
from equibench.precision import PRECISIONS
from equibench.vocabulary import LEVEL_INFO, LEVELS


class UnknownName(ValueError):
    """A case names something that does not exist here."""


def _problem(kind: str, name: str, valid: Sequence[str], where: str = "") -> str:
    close = difflib.get_close_matches(name, valid, n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    listing = ", ".join(valid) if len(valid) <= 12 else ", ".join(valid[:12]) + ", ..."
    return f"unknown {kind} {name!r}{where}{hint} (valid: {listing})"


def _workloads(level: str) -> list[str]:
    from equibench.workloads import TP_WORKLOADS

    if level == "tp":
        return list(TP_WORKLOADS)
    from equibench.levels.conv import GRAPHS

    return [f"{tp}@{graph}" for graph in GRAPHS for tp in TP_WORKLOADS]


def problems(case: Case) -> list[str]:
    """Every unknown name of ``case`` (empty when all are known)."""
    from equibench import registry

    if case.level not in LEVELS:
        return [_problem("level", case.level, LEVELS)]
    found = []
    if case.precision not in PRECISIONS:
        found.append(_problem("precision", case.precision, list(PRECISIONS)))
    if case.level == "md":
        return [*found, *_md_problems(case)]
    if case.level == "model":
        families = registry.families()
        family = next((f for f in families if case.workload in f.workloads), None)
        if family is None:
            every = [w for f in families for w in f.workloads]
            return [*found, _problem("model workload", case.workload, every)]
        where = f" for {family.prefix}"
        if case.implementation not in family.backends:
            found.append(_problem("backend", case.implementation, family.backends, where))
        if not family.has_variant(case.variant):
            found.append(_problem("variant", case.variant, family.variants, where))
        elif problem := family.variant_problem(case.variant):
            found.append(problem)
        if case.direction not in family.directions:
            found.append(_problem("direction", case.direction, family.directions, where))
        return found
    workloads = _workloads(case.level)
    if case.workload not in workloads:
        found.append(_problem(f"{case.level} workload", case.workload, workloads))
    directions = LEVEL_INFO[case.level].directions
    if case.direction not in directions:
        found.append(_problem("direction", case.direction, directions))
    implementations = registry.names(case.level)
    if case.implementation not in implementations:
        found.append(_problem(f"{case.level} implementation", case.implementation,
                              implementations))
    # A variant of another implementation is a known name: that case gets an `unavailable`
    # row saying which variants its implementation has.
    variants = list(dict.fromkeys(name for impl in implementations
                                  for name in registry.get(impl).variant_names(case.level)))
    if case.variant not in variants:
        found.append(_problem(f"{case.level} variant", case.variant, variants))
    return found


def _md_problems(case: Case) -> list[str]:
    """Unknown names of an md case: its structure (a built-in or a file), its model (a
    variant of a family that drives md), and that family's backend and direction."""
    from equibench import registry, structures

    found = [p for p in [structures.problem(case.workload)] if p]
    family = registry.md_family(case.variant)
    if family is None:
        models = [v for f in registry.families() if f.md_directions for v in f.variants]
        return [*found, _problem("md model (variant)", case.variant, models)]
    where = f" for {family.prefix} md"
    if problem := family.variant_problem(case.variant):
        found.append(problem)
    if case.implementation not in family.backends:
        found.append(_problem("backend", case.implementation, family.backends, where))
    if case.direction not in family.md_directions:
        found.append(_problem("direction", case.direction, family.md_directions, where))
    return found


def check(cases: Iterable[Case], plugins: Iterable[str] = ()) -> None:
    """Raise :class:`UnknownName` listing every unknown name of ``cases`` (each once).
    ``plugins``: modules that register implementations, imported first."""
    for module in plugins:
        importlib.import_module(module)
    found = list(dict.fromkeys(p for case in cases for p in problems(case)))
    if found:
        raise UnknownName("; ".join(found))
