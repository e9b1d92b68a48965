"""The MACE model of a case: built from a configuration with seeded random weights
(nothing downloaded), or a saved mace-torch model read from a file.

Built models are mace-torch's own ``ScaleShiftMACE``; only the hyper-parameters live here.
A variant ``file:PATH`` names a file written by ``torch.save(model, PATH)``, as mace-torch's
training writes its models: that model, with its own weights, elements and cutoff.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import io
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch


@dataclass(frozen=True)
class MaceConfig:
    """Hyper-parameters of one ``ScaleShiftMACE`` (mace-torch's ``run_train`` defaults for
    everything not named by the OpenEquivariance MACE driver)."""

    name: str
    hidden_irreps: str
    max_ell: int
    correlation: int
    num_interactions: int = 2
    r_max: float = 5.0
    num_bessel: int = 8
    num_polynomial_cutoff: int = 5
    radial_mlp: tuple[int, ...] = (64, 64, 64)
    mlp_irreps: str = "16x0e"
    interaction: str = "RealAgnosticResidualInteractionBlock"
    interaction_first: str = "RealAgnosticResidualInteractionBlock"

    def describe(self) -> dict:
        """JSON-serializable description (stored in the result row's ``extra``)."""
        return {**asdict(self), "radial_mlp": list(self.radial_mlp)}


VARIANTS: dict[str, MaceConfig] = {
    c.name: c
    for c in (
        # The MACE of OpenEquivariance's inference claim (Bharadwaj et al., arXiv 2501.13986:
        # 2 interactions, hidden 128x0e+128x1o+128x2e, max_ell 3, correlation 3).
        MaceConfig("oeq", "128x0e+128x1o+128x2e", max_ell=3, correlation=3),
        # The foundation models whose sizes cuEquivariance quotes for MACE. MACE-MP-0
        # medium (Batatia et al., arXiv 2401.00096; mace-foundations' training log:
        # r_max 6.0, 10 Bessel functions, hidden 128x0e+128x1o, max_ell 3, correlation 3).
        MaceConfig("mp-medium", "128x0e+128x1o", max_ell=3, correlation=3, r_max=6.0,
                   num_bessel=10),
        # MACE-OFF23 (Kovacs et al., arXiv 2312.15211: r_max 5.0, max_ell 3, correlation
        # 3; medium 128 channels with L <= 1, large 192 channels with L <= 2).
        MaceConfig("off-medium", "128x0e+128x1o", max_ell=3, correlation=3),
        MaceConfig("off-large", "192x0e+192x1o+192x2e", max_ell=3, correlation=3),
        # For quick configurations and tests.
        MaceConfig("small", "32x0e+32x1o", max_ell=2, correlation=2),
    )
}
# The case default is the published configuration.
VARIANTS["default"] = VARIANTS["oeq"]


def build_model(
    config: MaceConfig,
    atomic_numbers: Sequence[int],
    avg_num_neighbors: float,
    seed: int,
) -> torch.nn.Module:
    """A float64 ``ScaleShiftMACE`` with weights drawn from ``torch.manual_seed(seed)``.

    Isolated-atom energies are zero and scale/shift are 1/0, so the energy is the
    interaction energy alone: a large constant E0 would hide errors of the network from
    the scaled-error gate.
    """
    from e3nn import o3
    from mace import modules

    default = torch.get_default_dtype()
    # mace-torch creates buffers (radial basis, CG tables) in the default dtype.
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(seed)
        model = modules.ScaleShiftMACE(
            r_max=config.r_max,
            num_bessel=config.num_bessel,
            num_polynomial_cutoff=config.num_polynomial_cutoff,
            max_ell=config.max_ell,
            interaction_cls=modules.interaction_classes[config.interaction],
            interaction_cls_first=modules.interaction_classes[config.interaction_first],
            num_interactions=config.num_interactions,
            num_elements=len(atomic_numbers),
            hidden_irreps=o3.Irreps(config.hidden_irreps),
            MLP_irreps=o3.Irreps(config.mlp_irreps),
            atomic_energies=np.zeros(len(atomic_numbers)),
            avg_num_neighbors=float(avg_num_neighbors),
            atomic_numbers=list(atomic_numbers),
            correlation=config.correlation,
            gate=torch.nn.functional.silu,
            radial_MLP=list(config.radial_mlp),
            atomic_inter_scale=1.0,
            atomic_inter_shift=0.0,
        )
    finally:
        torch.set_default_dtype(default)
    return model


# A variant naming a saved model: ``file:PATH``.
FILE_PREFIX = "file:"


class ModelFileError(ValueError):
    """A ``file:`` variant names no file, or a file that holds no usable mace-torch model."""


@dataclass(frozen=True)
class ModelSpec:
    """A case's model as far as it is known before the structures are: the cutoff of the
    neighbour lists (Å), the model's own elements (None: a built model takes the
    structures'), ``build(atomic_numbers, avg_num_neighbors, seed)`` for a fresh float64
    e3nn model, and ``description`` (the row's ``extra.model``)."""

    r_max: float
    elements: tuple[int, ...] | None
    build: Callable[[Sequence[int], float, int], torch.nn.Module]
    description: dict


def is_file_variant(variant: str) -> bool:
    return variant.startswith(FILE_PREFIX)


def model_spec(variant: str) -> ModelSpec:
    """The :class:`ModelSpec` of a built-in variant or a ``file:`` one (which loads the file;
    :class:`ModelFileError` if it holds no usable model)."""
    if is_file_variant(variant):
        saved = load_saved(variant)
        return ModelSpec(saved.r_max, saved.elements, saved.float64, saved.describe())
    config = VARIANTS[variant]
    return ModelSpec(config.r_max, None, functools.partial(build_model, config),
                     config.describe())


def file_problem(variant: str) -> str | None:
    """Why the ``file:`` variant ``variant`` names no file, or None; reads no file."""
    path = variant.removeprefix(FILE_PREFIX)
    return None if Path(path).is_file() else f"MACE model file {path!r} not found"


@dataclass(frozen=True)
class SavedModel:
    """A mace-torch model read from ``path`` (``sha256`` of the file's bytes). ``module`` is
    the model as loaded, on the CPU; it is never changed, only copied."""

    path: str
    sha256: str
    module: torch.nn.Module

    @property
    def elements(self) -> tuple[int, ...]:
        return tuple(int(z) for z in self.module.atomic_numbers)

    @property
    def r_max(self) -> float:
        return float(self.module.r_max)

    def float64(self, *_: object) -> torch.nn.Module:
        """A float64 copy. The arguments of :attr:`ModelSpec.build` (elements, mean
        in-degree, seed) do not apply: a trained model keeps its own."""
        return copy.deepcopy(self.module).to(torch.float64)

    def describe(self) -> dict:
        """JSON-serializable description (stored in the result row's ``extra``)."""
        model = self.module
        return {
            "file": str(Path(self.path).resolve()),
            "sha256": self.sha256,
            "class": f"{type(model).__module__}.{type(model).__qualname__}",
            "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "r_max": self.r_max,
            "num_interactions": int(model.num_interactions),
            # mace-torch's own reading of a model's hidden irreps (scripts_utils).
            "hidden_irreps": str(model.products[0].linear.irreps_out),
            "elements": list(self.elements),
            "avg_num_neighbors": float(model.interactions[0].avg_num_neighbors),
        }


def load_saved(variant: str) -> SavedModel:
    """The mace-torch model saved at the path of the ``file:`` variant ``variant``
    (:class:`ModelFileError` if there is none). Loaded once per process and file version:
    a case reads it to check what it supports and again to build."""
    if problem := file_problem(variant):
        raise ModelFileError(problem)
    path = variant.removeprefix(FILE_PREFIX)
    return _load(path, Path(path).stat().st_mtime_ns)


@functools.cache
def _load(path: str, mtime_ns: int) -> SavedModel:
    from e3nn import o3
    from mace.modules import MACE

    data = Path(path).read_bytes()
    try:
        # mace-torch saves whole modules, which only an unrestricted unpickling reads.
        model = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    except Exception as err:  # noqa: BLE001 - any unreadable file gets the same clear error
        raise ModelFileError(f"{path!r} is not a file torch.load reads: "
                             f"{type(err).__name__}: {err}") from err
    if not isinstance(model, MACE):
        raise ModelFileError(
            f"{path!r} holds a {type(model).__module__}.{type(model).__qualname__}; expected "
            "a whole mace-torch model (mace.modules.MACE or a subclass such as "
            "ScaleShiftMACE), saved with torch.save(model, path) as mace-torch's training "
            "writes it")
    # The reference and the conversions start from mace-torch's e3nn modules.
    converted = [type(b.conv_tp).__name__ for b in model.interactions
                 if not isinstance(b.conv_tp, o3.TensorProduct)]
    if converted:
        raise ModelFileError(
            f"{path!r} holds a MACE model already converted to another backend (conv_tp "
            f"is {converted[0]}); save the e3nn model (mace-torch's convert_cueq_e3nn or "
            "convert_oeq_e3nn converts it back)")
    return SavedModel(path, hashlib.sha256(data).hexdigest(), model)
