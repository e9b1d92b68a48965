"""The unit of work: one point of the benchmark matrix."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields

from equibench.vocabulary import DIRECTIONS, LEVELS, MODES


@dataclass(frozen=True, order=True)
class Case:
    """One benchmark case. Its fields are the key columns of a result row; four of them
    mean something else at each level (``equibench.vocabulary.LEVEL_INFO``):

    - ``workload``: at ``tp`` a tensor product's shape (``mace-large``); at ``conv`` such a
      shape on a graph set (``mace-large@qm9``); at ``model`` a model and its inputs
      (``mace-qm9``, ``se3t-qm9``); at ``md`` the structure simulated (a built-in name or
      a file).
    - ``variant``: at ``tp`` and ``conv`` an option set of the implementation (``default``,
      ``ir_mul``, ...); at ``model`` the model family's variant (a MACE configuration, an
      SE(3)-Transformer switch set); at ``md`` the model that drives the dynamics (a MACE
      configuration such as ``small``, or a ``file:`` model).
    - ``direction``: ``forward``, ``backward`` or ``double_backward`` of the operation at
      ``tp`` and ``conv``; ``inference`` or ``train_step`` at ``model``; the ensemble,
      ``nve`` or ``nvt``, at ``md``.
    - ``batch``: the work items of one timed call: tensor products at ``tp``, graphs at
      ``conv``, structures at ``model``, MD steps at ``md``.

    ``mode`` says how the step runs (``equibench.modes``): ``eager``, ``compile`` or
    ``export``. It is last, with a default, so that tables and callers from before it read
    as eager; the key leaves an eager mode out for the same reason.
    """

    level: str
    workload: str
    implementation: str
    variant: str
    direction: str
    precision: str
    batch: int
    device: str
    mode: str = "eager"

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"unknown level {self.level!r}; choose one of {LEVELS}")
        if self.direction not in DIRECTIONS:  # any level's: equibench.names checks its own
            raise ValueError(f"unknown direction {self.direction!r}; choose one of {DIRECTIONS}")
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}; choose one of {MODES}")
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")

    @property
    def key(self) -> str:
        values = asdict(self)
        if self.mode == "eager":
            del values["mode"]
        return "/".join(str(v) for v in values.values())

    def to_dict(self) -> dict[str, str | int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Case:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


KEY_FIELDS = tuple(f.name for f in fields(Case))


@dataclass(frozen=True)
class LevelDefaults:
    """What ``equibench run`` times at a level when a flag is not given: the ``direction``,
    the ``batch`` (the work of one timed call, see :class:`Case`; at md the fallback of
    ``levels.md.default_steps``, which sizes it by the structure), the ``variant`` and the
    timing budget per case (``budget_s`` seconds; None: the schema's ``measure.budget_s``).
    """

    direction: str
    batch: int
    variant: str
    budget_s: float | None


# Sized so that one timed call takes about 0.1-1 s on a 2-core CPU and that a run of two
# implementations given nothing but a workload ends within a couple of minutes (fused's
# first kernel build aside, which its cache keeps).
LEVEL_DEFAULTS = {
    # Tensor products per call: milliseconds at 1,024; their numbers come from many calls,
    # so the schema's budget.
    "tp": LevelDefaults("forward", 1024, "default", None),
    # QM9 graphs per call (~140 atoms, ~2,500 edges at 8), as the quick preset's conv suite.
    "conv": LevelDefaults("forward", 8, "default", 3.0),
    # Structures per inference call.
    "model": LevelDefaults("inference", 4, "default", 3.0),
    # The small MACE: one step of the default (OpenEquivariance-size) model on 64 atoms of
    # diamond took 16 s with e3nn. The batch is the fallback for a structure the CLI cannot
    # read; else levels.md.default_steps gives MD_ATOM_STEPS_PER_CALL atom-steps.
    "md": LevelDefaults("nve", 1, "small", 3.0),
}
# At md the default step count is sized by the structure: a call of this many atom-steps
# (64 atoms of diamond, ~86 neighbours each within the small MACE's 5 Å: 4 steps, ~0.2 s
# with e3nn and ~0.07 s with fused on one 2-vCPU Intel Xeon).
MD_ATOM_STEPS_PER_CALL = 256


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
    modes: Iterable[str] = ("eager",),
) -> Iterator[Case]:
    """The cartesian product of the given axes, as cases.

    Where several variants are given, an implementation gets at the ``tp`` and ``conv``
    levels only those it has (a suite can list ``[default, ir_mul, reuse-plan]`` for several
    implementations); a single variant is asked for explicitly, and an implementation without
    it gets an ``unavailable`` row saying so. Model and md variants are the model families'.
    """
    variants = list(variants)
    for w, i, v, d, p, b, m in itertools.product(
        workloads, implementations, variants, directions, precisions, batches, modes
    ):
        if len(variants) > 1 and not _has_variant(level, i, v):
            continue
        yield Case(level, w, i, v, d, p, int(b), device, m)


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
