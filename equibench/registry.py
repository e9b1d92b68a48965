"""Implementations register themselves here; the runner looks them up by name.

An implementation is one module in ``implementations/`` (the package
``equibench.implementations``) defining a subclass of :class:`Implementation` decorated
with :func:`register`. Nothing else in the tree changes when one is added.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from equibench.cases import Case
from equibench.workloads import TPProblem

# (x, y, w) -> out, shapes (B, d1), (B, d2), (B, weight_numel) -> (B, d_out)
TPFunction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# (x_nodes, y_edges, w_edges, edge_src, edge_dst, num_nodes) -> out_nodes
ConvFunction = Callable[
    [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int], torch.Tensor
]


class Unsupported(Exception):
    """Raised by a builder for a case the implementation cannot run; becomes `unavailable`."""


DEFAULT_VARIANT = "default"
VARIANT_LEVELS = frozenset({"tp", "conv"})


@dataclass(frozen=True)
class Variant:
    """A named variant of an implementation at the ``tp`` and ``conv`` levels.

    The ``default`` variant follows the rule: the timed call is everything a step with a new
    batch would pay. Another variant says in ``description`` (one line) what it changes: work
    it amortizes over calls (:class:`Amortized`), or a layout of the implementation's own for
    its operands (:class:`OperandLayout`). ``levels``: where it exists.
    """

    description: str
    levels: frozenset[str] = VARIANT_LEVELS


@dataclass(frozen=True)
class OperandLayout:
    """Where a built function's operands and output are in a layout of the implementation's
    own instead of e3nn's ``mul_ir``: ``native = e3nn[..., index]`` for each of them (a change
    of layout permutes the last dimension; the weights ``w`` keep e3nn's layout).

    Shapes: ``in1 (d1,)``, ``in2 (d2,)``, ``out (d_out,)``, int64 permutations.
    """

    in1: torch.Tensor
    in2: torch.Tensor
    out: torch.Tensor

    def native(self, operand: str, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor (..., d)`` of ``operand`` (``in1``, ``in2`` or ``out``), from e3nn's
        layout into the native one."""
        return tensor[..., getattr(self, operand).to(tensor.device)]

    def e3nn(self, operand: str, tensor: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`native`."""
        out = torch.empty_like(tensor)
        out[..., getattr(self, operand).to(tensor.device)] = tensor
        return out


@dataclass(frozen=True)
class Amortized:
    """Work that a built function does once, outside the timed call, and keeps across calls:
    ``what`` it is (``Bench.amortized``) and the bytes it keeps (``Bench.kept_bytes``)."""

    what: str
    kept_bytes: int


class Implementation:
    """Base class of an adapter. Override what the implementation supports."""

    name: ClassVar[str]
    levels: ClassVar[frozenset[str]] = frozenset()
    description: ClassVar[str] = ""
    precisions: ClassVar[frozenset[str]] = frozenset({"float64", "float32"})
    # Variants at the tp and conv levels beyond ``default``, by name. The levels call the
    # builders with ``default`` or one of these (never one the implementation lacks there).
    variants: ClassVar[dict[str, Variant]] = {}

    def available(self, device: str) -> str | None:
        """None if the implementation can run on ``device``, else the reason it cannot."""
        return None

    def supports(self, case: Case) -> str | None:
        """None if this case can run, else the reason (e.g. a direction it cannot do)."""
        return None

    def variant_names(self, level: str) -> list[str]:
        """The variants the implementation has at ``level`` (``tp`` or ``conv``),
        ``default`` first."""
        return [DEFAULT_VARIANT, *(name for name, v in self.variants.items()
                                   if level in v.levels)]

    def variant_unavailable(self, level: str, variant: str) -> str | None:
        """None if the implementation has ``variant`` at ``level``, else the reason, naming
        the variants it has there."""
        have = self.variant_names(level)
        if variant in have:
            return None
        return (f"{self.name} has no {level} variant {variant!r}; its {level} variants: "
                f"{', '.join(have)}")

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT) -> TPFunction:
        raise Unsupported(f"{self.name} has no tensor-product builder")

    def build_conv(self, problem: TPProblem, dtype: torch.dtype, device: str,
                   variant: str = DEFAULT_VARIANT) -> ConvFunction:
        raise Unsupported(f"{self.name} has no convolution builder")

    def operand_layout(self, built: object) -> OperandLayout | None:
        """The layout of the operands ``x``, ``y`` and the output of ``built`` (a builder's
        result) where it is not e3nn's ``mul_ir`` (None): the level then hands it its inputs
        in that layout, converted once outside the timed call, and turns its outputs back
        for the gate, outside the timed call too."""
        return None

    def amortize_conv(self, built: object, edge_src: torch.Tensor, edge_dst: torch.Tensor,
                      num_nodes: int) -> Amortized | None:
        """Do, once and outside the timed call, the work that ``built`` (a
        :meth:`build_conv` result) keeps across calls on the graph ``edge_src -> edge_dst``
        (``(E,)`` each, ``num_nodes`` nodes), and say what it is; None when it keeps none
        (the rule: the timed call pays everything a step with a new batch would)."""
        return None

    def code_path(self, built: object, device: str) -> CodePath:
        """What actually executes in ``built`` (a builder's result) on ``device``; recorded
        in every row as ``extra.code_path``. Override where the path depends on the machine
        (a fallback, a backend chosen at run time)."""
        return CodePath(self.description or self.name)


@dataclass(frozen=True)
class CodePath:
    """The code a row ran: ``path`` says what executed; ``fallback`` says why it is not the
    implementation's product path ('' when it is), e.g. a pure-PyTorch fallback where the
    CUDA kernels are missing. Claims never count a fallback as the product."""

    path: str
    fallback: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "fallback": self.fallback}


class ModelFamily:
    """A whole model (MACE, SE(3)-Transformer) benchmarked at the ``model`` level.

    Its workloads are named ``<prefix>-...`` (e.g. ``mace-qm9``); the case's
    ``implementation`` names the backend (``e3nn``, ``cuequivariance``, ``fused``, ...) and
    its ``variant`` the model options. ``build_bench`` returns a
    :class:`equibench.levels.Bench` whose ``reference`` is the float64 result of the
    family's reference backend on the same inputs and weights.

    A family whose models are MD potentials also drives the ``md`` level
    (:mod:`equibench.levels.md`): it names its MD runs in ``md_directions``, and its
    ``supports`` and ``build_bench`` take md cases too, whose workload is a structure
    (:mod:`equibench.structures`) and whose variant is the family's model.
    """

    prefix: ClassVar[str]
    backends: ClassVar[tuple[str, ...]] = ()
    precisions: ClassVar[frozenset[str]] = frozenset({"float64", "float32"})
    # The names a case may use (checked, with suggestions, before any process starts).
    workloads: ClassVar[tuple[str, ...]] = ()
    variants: ClassVar[tuple[str, ...]] = ()
    # Variants beyond ``variants`` that :meth:`has_variant` takes, as ``equibench list``
    # shows them (MACE: ``file:PATH``).
    variant_forms: ClassVar[tuple[str, ...]] = ()
    directions: ClassVar[tuple[str, ...]] = ()
    md_directions: ClassVar[tuple[str, ...]] = ()  # none: no md level

    def available(self, backend: str, device: str) -> str | None:
        return None

    def has_variant(self, variant: str) -> bool:
        """Whether ``variant`` names a model of the family: one of ``variants``, or one a
        family reads from elsewhere (MACE: a saved model, ``file:PATH``)."""
        return variant in self.variants

    def variant_problem(self, variant: str) -> str | None:
        """Why a variant the family has cannot be used (a missing model file), or None;
        reads no file (the names are checked before any process starts)."""
        return None

    def supports(self, case: Case) -> str | None:
        return None

    def build_bench(self, case: Case, dtype: torch.dtype, seed: int):
        raise NotImplementedError


_REGISTRY: dict[str, Implementation] = {}
_MODELS: dict[str, ModelFamily] = {}
_discovered = False


def families() -> list[ModelFamily]:
    """Every registered model family."""
    discover()
    return list(_MODELS.values())


def register_model(cls: type[ModelFamily]) -> type[ModelFamily]:
    if cls.prefix in _MODELS:
        raise ValueError(f"model family {cls.prefix!r} is registered twice")
    _MODELS[cls.prefix] = cls()
    return cls


def model_family(workload: str) -> ModelFamily:
    """The family whose prefix starts ``workload`` (``mace-qm9`` -> ``mace``)."""
    discover()
    for prefix, family in _MODELS.items():
        if workload == prefix or workload.startswith(prefix + "-"):
            return family
    raise ValueError(
        f"no model family for workload {workload!r}; model workloads start with one of "
        f"{', '.join(sorted(_MODELS)) or '(none registered)'}"
    )


def md_family(variant: str) -> ModelFamily | None:
    """The family that drives an md case of model ``variant``: the first with MD
    directions that has the variant (None: none has)."""
    return next((f for f in families() if f.md_directions and f.has_variant(variant)), None)


def register(cls: type[Implementation]) -> type[Implementation]:
    if cls.name in _REGISTRY:
        raise ValueError(f"implementation {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls()
    return cls


def discover() -> None:
    """Import every module and subpackage of ``equibench.implementations`` so that they
    register."""
    global _discovered
    if _discovered:
        return
    package = importlib.import_module("equibench.implementations")
    for module in pkgutil.iter_modules(package.__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{package.__name__}.{module.name}")
    _discovered = True


def get(name: str) -> Implementation:
    discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"unknown implementation {name!r}; registered: {', '.join(sorted(_REGISTRY))}"
        ) from None


def names(level: str | None = None) -> list[str]:
    discover()
    return sorted(n for n, impl in _REGISTRY.items() if level is None or level in impl.levels)


@dataclass(frozen=True)
class CasePlugin:
    """What runs a case, whatever its level; the one place where the two plug-in kinds meet
    the runner. At ``tp`` and ``conv`` it is the :class:`Implementation` the case names; at
    ``model`` it is the :class:`ModelFamily` of the case's workload, and the case's
    ``implementation`` is that family's backend.

    ``unavailable(device)`` and ``supports(case)``: None, or why not; ``build(case, dtype,
    seed)``: the case's :class:`equibench.levels.Bench`.
    """

    name: str
    unavailable: Callable[[str], str | None]
    supports: Callable[[Case], str | None]
    precisions: frozenset[str]
    build: Callable[[Case, torch.dtype, int], object]


def plugin(case: Case) -> CasePlugin:
    """The :class:`CasePlugin` of ``case``."""
    if case.level == "md":
        return _md_plugin(case)
    if case.level == "model":
        family = model_family(case.workload)

        return CasePlugin(f"{family.prefix} backend {case.implementation}",
                          lambda device: _backend_unavailable(family, case.implementation,
                                                              device),
                          family.supports, family.precisions, family.build_bench)
    impl = get(case.implementation)

    def unavailable(device: str) -> str | None:
        if case.level not in impl.levels:
            return f"{impl.name} has no {case.level} level"
        return impl.available(device)

    def build(c: Case, dtype: torch.dtype, seed: int) -> object:
        if c.level == "tp":
            from equibench.levels.tp import build_bench
        else:
            from equibench.levels.conv import build_bench
        return build_bench(c, impl, dtype, seed)

    def supports(c: Case) -> str | None:
        return impl.variant_unavailable(c.level, c.variant) or impl.supports(c)

    return CasePlugin(impl.name, unavailable, supports, impl.precisions, build)


def _md_plugin(case: Case) -> CasePlugin:
    """An md case's plug-in: the model family of its variant (:func:`md_family`), its
    backend the case's implementation."""
    family = md_family(case.variant)
    if family is None:
        variants = [v for f in families() if f.md_directions for v in f.variants]
        reason = (f"no model family drives md with the model {case.variant!r}; md models: "
                  f"{', '.join(variants) or '(none registered)'}")
        return CasePlugin("md", lambda device: reason, lambda c: None, frozenset(),
                          lambda c, dtype, seed: None)
    return CasePlugin(f"{family.prefix} md backend {case.implementation}",
                      lambda device: _backend_unavailable(family, case.implementation, device),
                      family.supports, family.precisions, family.build_bench)


def _backend_unavailable(family: ModelFamily, backend: str, device: str) -> str | None:
    """Why ``family`` cannot run ``backend`` on ``device``, or None."""
    if backend not in family.backends:
        return (f"{family.prefix} has no backend {backend!r}; backends: "
                f"{', '.join(family.backends)}")
    return family.available(backend, device)


def plugin_key(case: Case) -> tuple[str, ...]:
    """Cases sharing this key share their plug-in's ``unavailable`` answer, so one case
    process finds out for all. Computed without importing any implementation: model
    families are named by their workloads' prefix (``ModelFamily.prefix``), and at the md
    level by the case's variant, the model (:func:`md_family`)."""
    family = {"model": case.workload.split("-")[0], "md": case.variant}.get(case.level, "")
    return case.level, family, case.implementation, case.device
