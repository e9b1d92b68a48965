"""MACE as the potential of the ``md`` level (:mod:`equibench.levels.md`).

The model is built as at the model level (:func:`models.build_model`: the variant's
configuration, seeded weights, the structure's elements, the mean in-degree of its first
frame) or read from the variant's file (a saved model keeps its own elements and cutoff),
cast to the case's precision and moved to the backend with the same converters
(:func:`backends.on_backend`); the reference is the same weights in float64 with e3nn.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from equibench import structures
from equibench.cases import Case
from equibench.levels import Bench, md

from .backends import FUSED_PARTS, code_path, kernel_backend, on_backend
from .models import model_spec


@dataclass
class MacePotential:
    """A mace-torch model on one structure as an MD potential
    (:data:`equibench.levels.md.Potential`). ``static`` holds the inputs that do not move:
    ``node_attrs (N, n_elements)`` one-hot, ``cell (1, 3, 3)``, ``batch (N,)``,
    ``ptr (2,)``."""

    model: torch.nn.Module
    static: dict[str, Tensor]

    def __call__(self, positions: Tensor, edge_index: Tensor, shifts: Tensor
                 ) -> tuple[Tensor, Tensor]:
        # mace-torch sets requires_grad on the positions it is given, in place: a detached
        # alias keeps the integrator's own tensor free of autograd.
        data = {**self.static, "positions": positions.detach(), "edge_index": edge_index,
                "shifts": shifts}
        out = self.model(data, training=False, compute_force=True)
        return out["energy"][0].detach(), out["forces"].detach()


def _static(system: md.System, elements: list[int], dtype: torch.dtype,
            device: str) -> dict[str, Tensor]:
    index = {z: i for i, z in enumerate(elements)}
    species = torch.tensor([index[int(z)] for z in system.numbers])
    cell = system.cell if system.periodic else torch.zeros(3, 3, dtype=torch.float64)
    return {
        "node_attrs": torch.nn.functional.one_hot(species, len(elements)).to(device, dtype),
        "cell": cell[None].to(device, dtype),
        "batch": torch.zeros(system.n_atoms, dtype=torch.int64, device=device),
        "ptr": torch.tensor([0, system.n_atoms], device=device),
    }


def build(case: Case, dtype: torch.dtype, seed: int) -> Bench:
    """The :class:`Bench` of an md case: ``case.workload`` a structure, ``case.variant``
    the MACE configuration or file, ``case.batch`` the MD steps of one timed call."""
    spec = model_spec(case.variant)
    system = md.System.from_atoms(structures.load(case.workload)).rounded(dtype)
    elements = list(spec.elements or sorted({int(z) for z in system.numbers}))
    edges, _ = md.NeighbourList(spec.r_max, system.cell, system.pbc)(system.positions)
    model64 = spec.build(elements, edges.shape[1] / system.n_atoms, seed)
    working = model64.to(dtype)
    # The reference holds exactly the working weights (float32 values are float64 values).
    reference = copy.deepcopy(working).to(torch.float64).to(case.device)
    start = time.perf_counter()
    model = on_backend(working, case.implementation, case.device)
    setup_s = time.perf_counter() - start
    extra = {
        "structure": case.workload,
        "elements": elements,
        "edges_first_frame": int(edges.shape[1]),
        "model": spec.description,
        "backend": case.implementation,
        "code_path": code_path(model),
        "reference": "mace-torch e3nn model in float64, same weights, same frame"
                     + (" (the backend under test, in float64)"
                        if case.implementation == "e3nn" else ""),
    }
    if case.implementation == "fused":
        extra["fused_kernels"] = kernel_backend(case.device)
        extra["fused_parts"] = list(FUSED_PARTS)
    return md.build_bench(
        direction=case.direction, steps=case.batch, system=system,
        potential=MacePotential(model, _static(system, elements, dtype, case.device)),
        reference=MacePotential(reference, _static(system, elements, torch.float64,
                                                   case.device)),
        cutoff=spec.r_max, dtype=dtype, device=case.device, seed=seed, setup_s=setup_s,
        extra=extra,
    )
