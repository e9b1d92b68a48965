"""Symmetrix-XL (``symmetrix-xl`` on PyPI): native CPU inference of a MACE model.

The mace-torch model is converted with Symmetrix-XL's own converter
(``symmetrix.extract_mace_data``, the library behind its ``symmetrix_extract_mace``
command) into its compact JSON format, which its ASE calculator evaluates with the
generated, edge-streaming code of its Kokkos/OpenMP backend. :class:`SymmetrixModel` puts
that behind mace-torch's call signature (``model(data, training, compute_force)`` ->
``energy (G,)``, ``forces (N, 3)``), so the model and md levels time and gate it like every
backend: one calculator per structure of the batch, called one after the other.

What it is charged for, beyond the others: Symmetrix-XL builds its own neighbour list (the
model's cutoff plus a 0.5 Å skin) inside every call, from the positions; the others are
given the graph. It computes no gradient with respect to the weights, so it has no training
step, and it is not a PyTorch program, so it has no compile or export mode.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from equibench.registry import Unsupported

PACKAGE = "symmetrix-xl"


def unavailable_reason(device: str) -> str | None:
    """None if Symmetrix-XL's native CPU backend loads here, else why not (the loader's
    error: a CPU without x86-64-v3, a missing package)."""
    if device != "cpu":
        return (f"equibench runs {PACKAGE}'s CPU backend only; its GPU backends are "
                "separate packages, one per GPU architecture (symmetrix-xl-cuda<major>-"
                "sm<arch>)")
    try:
        threads_for_openmp(torch.get_num_threads())
        import symmetrix

        symmetrix.load_backend()
    except Exception as err:  # noqa: BLE001 - any failure to load is the reason
        return f"{PACKAGE}'s native backend does not load: {type(err).__name__}: {err}"
    return None


class SymmetrixModel(torch.nn.Module):
    """A mace-torch model evaluated by Symmetrix-XL in ``dtype`` (float32 or float64).

    ``forward(data)`` takes mace-torch's batch (``positions (N, 3)``, ``node_attrs (N, Z)``
    one-hot over ``atomic_numbers``, ``ptr (G + 1,)``, ``cell (G, 3, 3)``, zero for a
    molecule) and returns ``energy (G,)`` and ``forces (N, 3)`` in the positions' dtype.
    """

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype) -> None:
        super().__init__()
        threads_for_openmp(torch.get_num_threads())
        from symmetrix.extract_mace_data import extract_mace_data

        self.atomic_numbers = [int(z) for z in model.atomic_numbers]
        self.r_max = float(model.r_max)
        self.dtype_name = {torch.float32: "float32", torch.float64: "float64"}[dtype]
        self._dir = tempfile.TemporaryDirectory(prefix="equibench-symmetrix-")
        checkpoint = Path(self._dir.name) / "model.pt"
        torch.save(copy.deepcopy(model).to(torch.float64), checkpoint)
        try:
            converted = extract_mace_data(str(checkpoint))
        except Exception as err:  # noqa: BLE001 - its converter's refusal is the reason
            raise Unsupported(f"{PACKAGE}'s converter does not take this model: "
                              f"{type(err).__name__}: {err}") from err
        self.json = Path(self._dir.name) / "model.json"
        self.json.write_text(json.dumps(converted))
        self._calculators: dict[tuple, object] = {}

    def __deepcopy__(self, memo: dict) -> SymmetrixModel:
        """A copy on the same converted model with calculators of its own (the native
        evaluators cannot be copied; a copy plans its own on its first call)."""
        twin = object.__new__(SymmetrixModel)
        torch.nn.Module.__init__(twin)
        twin.atomic_numbers, twin.r_max = self.atomic_numbers, self.r_max
        twin.dtype_name, twin._dir, twin.json = self.dtype_name, self._dir, self.json
        twin._calculators = {}
        return twin

    def describe(self) -> str:
        """The version, the native backend that runs and its settings
        (``extra.code_path``)."""
        from importlib.metadata import version

        import symmetrix

        b = symmetrix.selected_backend()
        return (f"{PACKAGE} {version(PACKAGE)}: native backend {b['backend']} "
                f"({b['architecture']}, {b['compiler']}), {self.dtype_name}, ASE calculator "
                "per structure, streamed_edges=direct, its own neighbour list (0.5 A skin) "
                "in every call")

    def _calculator(self, key: tuple) -> object:
        """One calculator per structure (its atoms and cell): Symmetrix-XL plans and
        specializes its kernels for the system it is first given."""
        if key not in self._calculators:
            from symmetrix import Symmetrix

            self._calculators[key] = Symmetrix(str(self.json), dtype=self.dtype_name)
        return self._calculators[key]

    def forward(self, data: dict[str, Tensor], training: bool = False,
                compute_force: bool = True) -> dict[str, Tensor]:
        from ase import Atoms
        from ase.calculators.calculator import all_changes

        if training:
            raise RuntimeError(f"{PACKAGE} computes no weight gradients: no training step")
        positions = data["positions"].detach().to("cpu", torch.float64).numpy()
        species = np.asarray(self.atomic_numbers)[data["node_attrs"].argmax(1).cpu().numpy()]
        ptr = data["ptr"].tolist()
        energies, forces = [], []
        for g, (lo, hi) in enumerate(zip(ptr[:-1], ptr[1:], strict=True)):
            cell = data["cell"][g].detach().to("cpu", torch.float64).numpy()
            periodic = bool(np.abs(cell).sum() > 0)
            pos = positions[lo:hi]
            if not periodic:
                # A box around the molecule: the calculator needs an invertible cell.
                margin = self.r_max + 1.0
                pos = pos - pos.min(0) + margin
                cell = np.diag(pos.max(0) + margin)
            atoms = Atoms(numbers=species[lo:hi], positions=pos, cell=cell, pbc=periodic)
            calc = self._calculator((tuple(species[lo:hi]), periodic, hi - lo))
            # Every call computes: ASE's result cache would otherwise answer a repeated
            # call on the same positions without running the model.
            calc.calculate(atoms, ["energy", "forces"], all_changes)
            energies.append(calc.results["energy"])
            forces.append(calc.results["forces"])
        like = data["positions"]
        return {"energy": torch.tensor(energies, dtype=like.dtype, device=like.device),
                "forces": torch.from_numpy(np.concatenate(forces)).to(like.dtype)}


def threads_for_openmp(threads: int) -> None:
    """Symmetrix-XL's wheel brings its own OpenMP and OpenBLAS, which read their thread
    counts when first loaded: set them to the case's before the first import."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
