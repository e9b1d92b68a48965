"""The unit of work: one point of the benchmark matrix."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields

LEVELS = ("tp", "conv", "model", "md")
DIRECTIONS = ("forward", "backward", "double_backward", "inference", "train_step", "nve",
              "nvt")


@dataclass(frozen=True, order=True)
class Case:
    """One benchmark case.

    ``batch`` counts the work items of one call: tensor products for ``tp``, structures
    for ``conv`` and ``model``, MD steps for ``md``.
    """

    level: str
    workload: str
    implementation: str
    variant: str
    direction: str
    precision: str
    batch: int
    device: str

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"unknown level {self.level!r}; choose one of {LEVELS}")
        if self.direction not in DIRECTIONS:
            raise ValueError(f"unknown direction {self.direction!r}; choose one of {DIRECTIONS}")
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")

    @property
    def key(self) -> str:
        return "/".join(str(v) for v in asdict(self).values())

    def to_dict(self) -> dict[str, str | int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Case:
        return cls(**{f.name: data[f.name] for f in fields(cls)})


KEY_FIELDS = tuple(f.name for f in fields(Case))


def expand(
    *,
    level: str,
    workloads: Iterable[str],
    implementations: Iterable[str],
    directions: Iterable[str],
    precisions: Iterable[str],
    batches: Iterable[int],
    device: str,
    variants: Iterable[str] = ("default",),
) -> Iterator[Case]:
    """The cartesian product of the given axes, as cases.

    Where several variants are given, an implementation gets at the ``tp`` and ``conv``
    levels only those it has (a suite can list ``[default, ir_mul, reuse-plan]`` for several
    implementations); a single variant is asked for explicitly, and an implementation without
    it gets an ``unavailable`` row saying so. Model and md variants are the model families'.
    """
    variants = list(variants)
    for w, i, v, d, p, b in itertools.product(
        workloads, implementations, variants, directions, precisions, batches
    ):
        if len(variants) > 1 and not _has_variant(level, i, v):
            continue
        yield Case(level, w, i, v, d, p, int(b), device)


def _has_variant(level: str, implementation: str, variant: str) -> bool:
    """Whether ``implementation`` has ``variant`` at ``level``; True where only its case
    process can answer (a model level, an implementation that a plugin registers there)."""
    if level in ("model", "md") or variant == "default":
        return True
    from equibench import registry  # imports torch and this module

    try:
        impl = registry.get(implementation)
    except ValueError:
        return True
    return impl.variant_unavailable(level, variant) is None
