"""Structures of the ``md`` level: built-in boxes made with ASE, or any file ASE reads,
optionally replicated into a supercell.

A structure workload is ``SOURCE`` or ``SOURCE@AxBxC``. ``SOURCE`` is a built-in name
(:data:`BUILTINS`) or the path of a file ASE reads (extended XYZ, CIF, POSCAR, PDB, ...;
the format is guessed from the name as ``ase.io.read`` does, the first frame is taken).
``AxBxC`` replicates the structure ``A``, ``B`` and ``C`` times along its three cell
vectors. Periodicity is the file's own (``Atoms.pbc``: a plain XYZ is a molecule, a CIF or
POSCAR a crystal, an extended XYZ says which axes are periodic); a structure is replicated
only along its periodic axes. Built-ins are built offline, deterministically.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ase import Atoms

SUPERCELL = re.compile(r"^(\d+)x(\d+)x(\d+)$")
# Water at 1 g/cm^3: 18.015 g/mol / 6.02214e23 /mol = 29.915 Å^3 per molecule.
WATER_VOLUME_A3 = 29.915
DIAMOND_LATTICE_A = 3.567
# Solid argon, fcc, a = 5.26 Å (near 0 K; Barrett & Meyer, J. Chem. Phys. 41, 1078 (1964)).
ARGON_LATTICE_A = 5.26


def water_box(per_side: int = 2, seed: int = 0) -> Atoms:
    """``per_side^3`` water molecules (3 ``per_side^3`` atoms), each turned by a seeded
    random rotation, on a cubic grid in a periodic cube at 1 g/cm^3 (2 per side: 24 atoms,
    a 6.21 Å cube)."""
    from ase import Atoms
    from ase.build import molecule
    from scipy.spatial.transform import Rotation

    count = per_side**3
    side = (count * WATER_VOLUME_A3) ** (1 / 3)
    spacing = side / per_side
    template = molecule("H2O")
    template.positions -= template.get_center_of_mass()
    turns = Rotation.random(count, random_state=seed).as_matrix()
    grid = np.stack(np.meshgrid(*[np.arange(per_side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    positions = [template.positions @ turn.T + (corner + 0.5) * spacing
                 for turn, corner in zip(turns, grid, strict=True)]
    return Atoms(template.get_chemical_symbols() * count, positions=np.concatenate(positions),
                 cell=np.eye(3) * side, pbc=True)


def diamond() -> Atoms:
    """The cubic 8-atom cell of diamond carbon (a = 3.567 Å), periodic; mace-torch's
    benchmark replicates it to ``3x3x3`` ... ``9x9x9``."""
    from ase.build import bulk

    return bulk("C", "diamond", a=DIAMOND_LATTICE_A, cubic=True)


def argon() -> Atoms:
    """The cubic 4-atom cell of fcc argon (a = 5.26 Å), periodic. With MACE-MP's 6 Å
    cutoff each atom has 18 neighbours (12 at 3.72 Å, 6 at 5.26 Å): ``argon@10x10x10`` is
    a graph of 4,000 atoms and 72,000 edges, the size of cuEquivariance's MACE-MP case."""
    from ase.build import bulk

    return bulk("Ar", "fcc", a=ARGON_LATTICE_A, cubic=True)


BUILTINS: dict[str, Callable[[], Atoms]] = {
    "water-box": water_box, "diamond": diamond, "argon": argon,
}


@dataclass(frozen=True)
class StructureName:
    """A parsed structure workload: ``source`` (a built-in or a file path) and the supercell
    ``repeat`` (``(1, 1, 1)``: the structure as it is)."""

    source: str
    repeat: tuple[int, int, int] = (1, 1, 1)

    @classmethod
    def parse(cls, workload: str) -> StructureName:
        source, at, suffix = workload.rpartition("@")
        match = SUPERCELL.match(suffix) if at else None
        if match is None:
            return cls(workload)
        repeat = tuple(int(n) for n in match.groups())
        if min(repeat) < 1:
            raise ValueError(f"supercell {suffix!r} of {workload!r}: every factor must be >= 1")
        return cls(source, repeat)  # type: ignore[arg-type]

    @property
    def is_file(self) -> bool:
        return self.source not in BUILTINS


def problem(workload: str) -> str | None:
    """Why ``workload`` names no structure (an unknown built-in, a missing file, a bad
    supercell), or None; reads no file."""
    try:
        name = StructureName.parse(workload)
    except ValueError as err:
        return str(err)
    if name.is_file and not Path(name.source).is_file():
        return (f"{name.source!r} is neither a built-in structure ({', '.join(BUILTINS)}) "
                "nor a file")
    return None


def load(workload: str) -> Atoms:
    """The structure of ``workload`` (see the module docstring), positions wrapped into a
    periodic cell."""
    name = StructureName.parse(workload)
    if name.is_file:
        from ase.io import read

        atoms = read(name.source, index=0)
    else:
        atoms = BUILTINS[name.source]()
    flat = [axis for axis, n in enumerate(name.repeat) if n > 1 and not atoms.pbc[axis]]
    if flat:
        raise ValueError(f"{workload!r}: cannot replicate along axes {flat}, which "
                         f"{name.source!r} does not make periodic (pbc {atoms.pbc.tolist()})")
    atoms = atoms.repeat(name.repeat)
    if atoms.pbc.any():
        atoms.wrap()
    return atoms
