"""The MACE model family: one case = one backend, variant, direction, precision and batch.

``build_bench`` builds the float64 e3nn model from the variant's configuration with
seeded weights (or, for a variant ``file:PATH``, reads a saved mace-torch model), casts a
copy to the case's precision, moves it to the backend (same weights) and returns the timed
call, with the e3nn float64 model on the same weights and inputs as reference.
:func:`breakdown` profiles one step by category. At the ``md`` level the same model drives
an NVE run of a structure (:mod:`.md`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

from equibench import structures
from equibench.cases import Case
from equibench.correctness import random_rotation, scaled_error
from equibench.levels import Bench, Outputs
from equibench.levels.md import DIRECTIONS as MD_DIRECTIONS
from equibench.levels.optimizer_step import StepCheck
from equibench.precision import get_precision, loss_scaler
from equibench.registry import ModelFamily, register_model

from . import autocast
from .backends import (
    BACKENDS,
    FUSED_PARTS,
    code_path,
    kernel_backend,
    on_backend,
    unavailable_reason,
)
from .gradients import GradientView
from .inputs import WORKLOADS, Structures, load_structures, workload_elements
from .md import build as build_md
from .models import (
    FILE_PREFIX,
    VARIANTS,
    ModelFileError,
    ModelSpec,
    file_problem,
    is_file_variant,
    load_saved,
    model_spec,
)
from .profile_breakdown import MACE_RULES, module_scopes, profile_categories
from .steps import DIRECTIONS, LEARNING_RATE, TrainStep, make_optimizer, make_step


@dataclass
class MaceCase:
    """Everything built for one case: inputs, the working model and its reference."""

    spec: ModelSpec
    structures: Structures
    model: torch.nn.Module  # on the case's backend, dtype and device
    reference_model: torch.nn.Module  # e3nn, float64, same weights, same device
    dtype: torch.dtype
    device: str


def prepare(case: Case, dtype: torch.dtype, seed: int) -> MaceCase:
    """Build the models and inputs of ``case`` (see the module docstring)."""
    spec = model_spec(case.variant)
    structures = load_structures(case.workload, case.batch, seed, spec.r_max,
                                 spec.elements).rounded(dtype)
    model64 = spec.build(structures.atomic_numbers, structures.avg_num_neighbors, seed)
    working = model64.to(dtype)
    # The reference holds exactly the working weights (float32 values are float64 values).
    reference = copy.deepcopy(working).to(torch.float64).to(case.device)
    return MaceCase(
        spec=spec,
        structures=structures,
        model=on_backend(working, case.implementation, case.device),
        reference_model=reference,
        dtype=dtype,
        device=case.device,
    )


def _profile(mc: MaceCase, direction: str,
             region: AbstractContextManager | None = None) -> dict[str, float]:
    """Seconds per category of one step, on a copy of the model (a training step moves
    the weights, and the gate needs them as built), in ``region`` (autocast) if given."""
    model = copy.deepcopy(mc.model)
    step = make_step(direction, model, mc.structures.to(mc.dtype, mc.device))
    with region or contextlib.nullcontext():
        step()  # warm-up: kernel builds, graph plans, allocator
        return profile_categories(step, MACE_RULES, module_scopes(model), mc.device)


def breakdown(case: Case, seed: int = 0) -> dict[str, float]:
    """Seconds per category (tensor product, gather/scatter, radial MLP, symmetric
    contraction, linear, other) of one step of ``case``, from ``torch.profiler``."""
    from equibench.precision import get_precision

    mc = prepare(case, get_precision(case.precision).dtype, seed)
    return _profile(mc, case.direction)


def _equivariance(mc: MaceCase, seed: int) -> Callable[[], float]:
    """Scaled error of E(Rx) = E(x), F(Rx) = R F(x) for a seeded random rotation R
    (positions, periodic shifts and cells all rotate)."""

    def check() -> float:
        rot = random_rotation(seed, mc.dtype).to(mc.device)
        data = mc.structures.to(mc.dtype, mc.device)
        turned = {
            **data,
            "positions": data["positions"] @ rot.T,
            "shifts": data["shifts"] @ rot.T,
            "cell": data["cell"] @ rot.T,
        }
        plain = make_step("inference", mc.model, data)()
        rotated = make_step("inference", mc.model, turned)()
        energy = scaled_error(rotated["energy"], plain["energy"])
        forces = scaled_error(rotated["forces"], plain["forces"] @ rot.T)
        return max(energy, forces)

    return check


def _max_batch_estimate(case: Case, mc: MaceCase) -> dict:
    """On CUDA: device memory, the peak of one step, and the batch that would fill the
    memory left if a step's memory grew linearly with structures (an estimate; the
    sweep's largest ``ok`` batch before ``oom`` is the measured limit)."""
    if not case.device.startswith("cuda"):
        return {}
    step = make_step(case.direction, copy.deepcopy(mc.model), mc.structures.to(mc.dtype, mc.device))
    dev = torch.device(case.device)
    torch.cuda.synchronize(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    base = torch.cuda.memory_allocated(dev)
    step()
    torch.cuda.synchronize(dev)
    peak = torch.cuda.max_memory_allocated(dev) - base
    free, total = torch.cuda.mem_get_info(dev)
    # Memory a step may use: free on the device plus cached but unallocated blocks.
    usable = free + torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
    return {
        "device_memory_bytes": int(total),
        "step_peak_bytes": int(peak),
        "max_batch_estimate": int(case.batch * usable / peak) if peak > 0 else None,
    }


def build(case: Case, dtype: torch.dtype, seed: int) -> Bench:
    """The :class:`Bench` of ``case`` (see the module docstring). Under an ``amp-``
    precision the model runs under autocast with e3nn's tensordot on its list
    (:mod:`.autocast`), and so does the profile of its breakdown."""
    precision = get_precision(case.precision)
    if precision.autocast is not None:
        autocast.extend()
    mc = prepare(case, dtype, seed)
    s = mc.structures
    call = make_step(case.direction, mc.model, s.to(dtype, case.device))
    scaler = None
    if isinstance(call, TrainStep):
        scaler = call.scaler = loss_scaler(precision, case.device, lambda: call.forward()[1],
                                           mc.model.parameters())
    # Built before any step of either model: the weights before the first step.
    training = isinstance(call, TrainStep)
    view = (GradientView.build(mc.reference_model, mc.model,
                               lambda m: on_backend(m, case.implementation, case.device), seed)
            if training else None)
    step = StepCheck.of(mc.model, make_optimizer, LEARNING_RATE) if training else None
    reference_step = make_step(case.direction, mc.reference_model, s.to(torch.float64, case.device))
    reference_outputs: Outputs = {}

    def reference() -> Outputs:
        # A training step moves the reference weights too: compute it once.
        if not reference_outputs:
            outputs = reference_step()
            if view is not None and step is not None:
                outputs = {**view.reference_view(outputs), **step.reference()}
            reference_outputs.update(outputs)
        return reference_outputs

    extra = {
        "dataset": s.dataset,
        # The dataset's structures are generated (oc20-like), the measurement is real: not
        # ``extra.synthetic``, which marks rows that were never measured.
        "synthetic_dataset": s.synthetic,
        "structure_indices": s.indices,
        "elements": list(s.atomic_numbers),
        "atoms_per_call": s.n_atoms,
        "edges_per_call": s.n_edges,
        "atoms_per_structure": s.n_atoms / s.n_graphs,
        "avg_num_neighbors": s.avg_num_neighbors,
        "model": mc.spec.description,
        "backend": case.implementation,
        "code_path": code_path(mc.model),
        "reference": "mace-torch e3nn model in float64, same weights"
                     + (" (the backend under test, in float64)"
                        if case.implementation == "e3nn" else ""),
        # atoms/s = throughput * atoms_per_structure; latency = time_median_s.
    }
    if scaler is not None:
        extra["loss_scale"] = scaler.get_scale()
    if case.implementation == "fused":
        extra["fused_kernels"] = kernel_backend(case.device)
        extra["fused_parts"] = list(FUSED_PARTS)
    if precision.autocast is not None:
        extra["autocast"] = autocast.describe(case.implementation)
    if case.direction == "train_step":
        extra["train"] = {
            "loss": "mace WeightedEnergyForcesLoss(1, 100) vs zero targets",
            "optimizer": "Adam(lr=1e-3, amsgrad=True)",
        }
    extra.update(_max_batch_estimate(case, mc))
    return Bench(
        call=call,
        reference=reference,
        items=s.n_graphs,
        unit="structures/s",
        equivariance=_equivariance(mc, seed),
        extra=extra,
        gate_view=None if view is None or step is None
        else lambda out: {**view.backend_view(out), **step.residuals(out)},
        floors={} if step is None else step.floors,
        profile=lambda: {
            "breakdown": _profile(mc, case.direction, precision.autocast_context(case.device)),
            "breakdown_unit": "s per step, torch.profiler self time (profiler overhead "
                              "included)"},
    )


def _symmetrix_problem(case: Case) -> str | None:
    """What Symmetrix-XL cannot run of ``case``, or None: it is an inference engine in
    float32 or float64, outside PyTorch (see :mod:`.symmetrix`)."""
    if case.implementation != "symmetrix":
        return None
    if case.direction == "train_step":
        return "symmetrix computes no gradients with respect to the weights: no train_step"
    if case.precision not in ("float32", "float64"):
        return f"symmetrix runs float32 and float64, not {case.precision}"
    if case.mode != "eager":
        return f"symmetrix is not a PyTorch program: no {case.mode} mode"
    return None


@register_model
class Mace(ModelFamily):
    """mace-torch ``ScaleShiftMACE``: energy and forces (forces by autograd)."""

    prefix = "mace"
    backends = BACKENDS
    precisions = frozenset({"float64", "float32", "amp-bfloat16", "amp-float16"})
    workloads = tuple(WORKLOADS)
    variants = tuple(VARIANTS)
    variant_forms = (f"{FILE_PREFIX}PATH (a saved mace-torch model)",)
    directions = DIRECTIONS
    md_directions = MD_DIRECTIONS

    def available(self, backend: str, device: str) -> str | None:
        return unavailable_reason(backend, device)

    def has_variant(self, variant: str) -> bool:
        return variant in VARIANTS or is_file_variant(variant)

    def variant_problem(self, variant: str) -> str | None:
        return file_problem(variant) if is_file_variant(variant) else None

    def _unknown_variant(self, variant: str) -> str | None:
        if self.has_variant(variant):
            return None
        return (f"unknown MACE variant {variant!r}; choose one of {', '.join(VARIANTS)} or "
                f"{FILE_PREFIX}PATH (a saved mace-torch model)")

    def supports(self, case: Case) -> str | None:
        if case.level == "md":
            return self._supports_md(case)
        if case.workload not in WORKLOADS:
            return f"unknown MACE workload {case.workload!r}; choose one of {', '.join(WORKLOADS)}"
        if reason := self._unknown_variant(case.variant):
            return reason
        if case.direction not in DIRECTIONS:
            return f"MACE runs {', '.join(DIRECTIONS)}, not {case.direction}"
        if reason := _symmetrix_problem(case):
            return reason
        return self._saved_model_problem(case, lambda: workload_elements(case.workload))

    def _supports_md(self, case: Case) -> str | None:
        if reason := self._unknown_variant(case.variant):
            return reason
        if case.direction not in MD_DIRECTIONS:
            return f"MACE md runs {', '.join(MD_DIRECTIONS)}, not {case.direction}"
        if case.precision not in ("float32", "float64"):
            return f"MACE md runs float32 and float64, not {case.precision}"
        if reason := _symmetrix_problem(case):
            return reason
        return structures.problem(case.workload) or self._saved_model_problem(
            case, lambda: structures.load(case.workload).numbers.tolist())

    def _saved_model_problem(self, case: Case,
                             workload_elements: Callable[[], Iterable[int]]) -> str | None:
        """Why the saved model of a ``file:`` case cannot run it, or None: the file holds no
        usable model, the workload has elements the model does not know
        (``workload_elements``, read only for a file variant), or mace-torch's converter
        to the case's backend does not take the model's class."""
        if not is_file_variant(case.variant):
            return None
        try:
            saved = load_saved(case.variant)
        except ModelFileError as err:
            return str(err)
        missing = sorted(set(workload_elements()) - set(saved.elements))
        if missing:
            return (f"{case.workload} has elements {missing} that the model {saved.path!r} "
                    f"does not know (its elements: {list(saved.elements)})")
        if case.implementation in ("cuequivariance", "openequivariance"):
            from mace.tools.scripts_utils import extract_config_mace_model

            # The converters rebuild the model from this config, and say here what they
            # cannot rebuild.
            if error := extract_config_mace_model(saved.module).get("error"):
                return (f"mace-torch's {case.implementation} converter does not take "
                        f"{saved.path!r}: {error}")
        return None

    def build_bench(self, case: Case, dtype: torch.dtype, seed: int) -> Bench:
        if case.level == "md":
            return build_md(case, dtype, seed)
        return build(case, dtype, seed)
