"""``oc20-like``: SYNTHETIC adsorbate + slab systems shaped like OC20, generated offline.

Not OC20 data. It stands in for OC20 where the real tarballs cannot be downloaded:
the same kind of input (periodic transition-metal slabs with a small adsorbate,
OC20 tags, fixed subsurface atoms) and a similar size distribution (7-225 atoms,
mean about 73), so timings and memory of graph building and models are
representative. Labels come from a Morse pair potential, so energies and forces are
consistent (forces = -dE/dpos) but physically meaningless. Every prepared file says
``synthetic: true`` in its metadata.

Generation is deterministic for a given ``(n_structures, seed)``: one
``numpy.random.default_rng(seed)`` stream drives every choice, in order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ase import Atoms
from ase.build import bcc110, fcc111, hcp0001, molecule
from ase.data import covalent_radii
from tqdm.auto import tqdm
from vesin import NeighborList

from .oc20 import GRAPH_CUTOFF, GRAPH_MAX_NEIGHBORS, UNITS
from .prepared import PreparedData, base_metadata, build_radius_graphs

NAME = "oc20-like"
SOURCES = ("generator",)
DEFAULT_SOURCE = "generator"

# Transition metals of OC20's bulk set, by the surface ase builds for their lattice.
FACETS = {
    "fcc111": ("Ni", "Cu", "Rh", "Pd", "Ag", "Ir", "Pt", "Au"),
    "bcc110": ("V", "Cr", "Fe", "Nb", "Mo", "Ta", "W"),
    "hcp0001": ("Sc", "Ti", "Co", "Zn", "Y", "Zr", "Tc", "Ru", "Cd", "Hf", "Re", "Os"),
}
# Small C/H/N/O adsorbates like OC20's (single atoms built directly, the rest from ase's g2).
ADSORBATES = (
    "H", "O", "N", "C", "OH", "H2O", "CO", "CO2", "CH3", "CH4", "NH2", "NH3", "N2", "NO",
    "HCO", "H2CO", "CH3O", "CH3OH", "C2H2", "C2H4", "C2H6", "CH3CHO", "CH3CH2OH", "C3H8",
)  # fmt: skip
VACUUM = 10.0  # Å each side: periodic images along z stay farther apart than the 6 Å cutoff
MORSE_DEPTH = 0.5  # eV
MORSE_WIDTH = 1.5  # 1/Å
MIN_ATOMS, MAX_ATOMS = 7, 225


@dataclass
class OC20LikeConfig:
    """How many systems to generate and from which seed."""

    n_structures: int = 2000
    seed: int = 0


def _slab(facet: str, metal: str, size: tuple[int, int, int]) -> Atoms:
    builders = {"fcc111": fcc111, "bcc110": bcc110, "hcp0001": hcp0001}
    return builders[facet](metal, size=size, vacuum=VACUUM)


def _adsorbate(name: str) -> Atoms:
    return Atoms(name) if len(name) == 1 else molecule(name)


def _slab_size(rng: np.random.Generator, n_adsorbate: int) -> tuple[int, int, int]:
    """Slab repeats (nx, ny, layers) with a total atom count in [7, 225].

    nx, ny in 1..7 and 3..6 layers, drawn until the total fits; this gives a mean of
    about 73 atoms like OC20 (whose slabs also vary from tiny to a few hundred atoms).
    """
    while True:
        nx, ny = rng.integers(1, 8, size=2)
        layers = rng.integers(3, 7)
        total = nx * ny * layers + n_adsorbate
        if MIN_ATOMS <= total <= MAX_ATOMS:
            return int(nx), int(ny), int(layers)


def generate_system(rng: np.random.Generator) -> tuple[Atoms, dict[str, int]]:
    """One adsorbate on a slab, periodic in all three directions (as OC20 stores them).

    Tags follow OC20: 0 subsurface (fixed), 1 the two top layers, 2 adsorbate.
    """
    facet = list(FACETS)[rng.integers(len(FACETS))]
    metal_index = int(rng.integers(len(FACETS[facet])))
    metal = FACETS[facet][metal_index]
    ads_index = int(rng.integers(len(ADSORBATES)))
    adsorbate = _adsorbate(ADSORBATES[ads_index])
    slab = _slab(facet, metal, _slab_size(rng, len(adsorbate)))
    layer = slab.get_tags()  # ase: 1 = top layer, counting down
    slab.set_tags(np.where(layer <= 2, 1, 0))
    adsorbate.rotate(rng.uniform(0, 360), "z")
    adsorbate.rotate(rng.uniform(0, 180), "x")
    adsorbate.positions -= adsorbate.positions.mean(axis=0)
    adsorbate.positions[:, 2] -= adsorbate.positions[:, 2].min()
    site = rng.uniform(0, 1, size=2) @ slab.cell.array[:2, :2]
    top = slab.positions[:, 2].max()
    adsorbate.positions += [site[0], site[1], top + rng.uniform(1.5, 2.5)]
    adsorbate.set_tags(2)
    system = slab + adsorbate
    system.info.pop("adsorbate_info", None)  # ase's site table: not part of the system
    system.positions += rng.normal(0.0, 0.05, size=system.positions.shape)
    system.pbc = True
    system.wrap()
    # Stored positions are float32: label the rounded geometry so forces match it exactly.
    system.positions = system.positions.astype(np.float32).astype(np.float64)
    labels = {"facet": list(FACETS).index(facet), "metal": int(system.numbers[0]),
              "adsorbate": ads_index}  # fmt: skip
    return system, labels


def morse_energy_forces(atoms: Atoms, cutoff: float = GRAPH_CUTOFF) -> tuple[float, np.ndarray]:
    """Synthetic labels: a Morse pair potential with r0 = sum of covalent radii.

    E = sum over pairs D [(1 - exp(-a (r - r0)))^2 - 1]; forces (n, 3) = -dE/dpos.
    """
    nl = NeighborList(cutoff=cutoff, full_list=False)
    i, j, vec, dist = nl.compute(atoms.positions, atoms.cell.array, True, quantities="ijDd")
    r0 = covalent_radii[atoms.numbers[i]] + covalent_radii[atoms.numbers[j]]
    decay = np.exp(-MORSE_WIDTH * (dist - r0))
    energy = float(np.sum(MORSE_DEPTH * ((1.0 - decay) ** 2 - 1.0)))
    de_dr = 2.0 * MORSE_DEPTH * MORSE_WIDTH * (1.0 - decay) * decay
    # vec = pos[j] - pos[i] + shift, so dr/dpos[j] = vec / r and dr/dpos[i] = -vec / r.
    pair_force = (de_dr / dist)[:, None] * vec
    forces = np.zeros_like(atoms.positions)
    np.add.at(forces, i, pair_force)
    np.add.at(forces, j, -pair_force)
    return energy, forces


def prepare_oc20_like(
    source: str = DEFAULT_SOURCE, *, config: OC20LikeConfig | None = None, progress: bool = False
) -> PreparedData:
    """Generate ``config.n_structures`` systems and their stored 6 Å / 50-neighbour graph."""
    if source not in SOURCES:
        raise ValueError(f"unknown oc20-like source {source!r}; choose one of {SOURCES}")
    config = config or OC20LikeConfig()
    rng = np.random.default_rng(config.seed)
    systems, labels, energies, forces = [], [], [], []
    steps = tqdm(range(config.n_structures), desc="generating oc20-like", disable=not progress)
    for _ in steps:
        atoms, label = generate_system(rng)
        energy, force = morse_energy_forces(atoms)
        systems.append(atoms)
        labels.append(label)
        energies.append(energy)
        forces.append(force)
    atom_ptr = np.concatenate([[0], np.cumsum([len(a) for a in systems])])
    pos = np.concatenate([a.positions for a in systems]).astype(np.float32)
    cell = np.array([a.cell.array for a in systems], dtype=np.float64)
    pbc = np.ones((len(systems), 3), dtype=bool)
    n_edges, graph = build_radius_graphs(
        pos, atom_ptr, cutoff=GRAPH_CUTOFF, max_neighbors=GRAPH_MAX_NEIGHBORS,
        cell=cell, pbc=pbc, progress=progress,
    )  # fmt: skip
    metadata = base_metadata(
        NAME,
        source=source,
        synthetic=True,
        periodic=True,
        units=UNITS | {"energy": "eV (synthetic Morse potential)"},
        graph_cutoff=GRAPH_CUTOFF,
        graph_max_neighbors=GRAPH_MAX_NEIGHBORS,
        source_detail="generated offline by equibench.datasets.oc20_like (SYNTHETIC, not OC20)",
        n_requested=config.n_structures,
        seed=config.seed,
        facets=list(FACETS),
        adsorbates=list(ADSORBATES),
        tags={"0": "subsurface", "1": "surface", "2": "adsorbate"},
    )
    tags = np.concatenate([a.get_tags() for a in systems]).astype(np.int8)
    return PreparedData(
        metadata=metadata,
        numbers=np.concatenate([a.numbers for a in systems]).astype(np.uint8),
        pos=pos,
        atom_ptr=atom_ptr,
        n_edges=n_edges,
        cell=cell,
        pbc=pbc,
        targets={"energy": np.array(energies, dtype=np.float64)},
        node_targets={"forces": np.concatenate(forces).astype(np.float32)},
        node_attrs={"tags": tags, "fixed": tags == 0},
        structure_attrs={
            key: np.array([label[key] for label in labels], dtype=np.int64)
            for key in ("facet", "metal", "adsorbate")
        }
        | {"sid": np.arange(len(systems), dtype=np.int64)},
        graph=graph,
    )
