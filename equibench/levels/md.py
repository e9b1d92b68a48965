"""The ``md`` level: a molecular-dynamics run driven by a model's forces.

One case is one trajectory of a structure (:mod:`equibench.structures`) under a model on
one backend and precision: velocity-Verlet NVE (the ``nve`` direction) or Langevin NVT at
:data:`TEMPERATURE_K` (``nvt``: the BAOAB splitting of Leimkuhler and Matthews, friction
:data:`FRICTION_PER_FS`, one force evaluation per step as in NVE). The integrator is this
module's own small torch loop (TorchSim's releases that install beside our pins are old;
see the README): positions, velocities and forces stay in the case's dtype on its device,
and forces are ``-dE/dx`` of the model, by autograd.

- **Timed call** = ``batch`` MD steps, continuing the one trajectory from call to call (a
  step is one force evaluation: velocity Verlet reuses the last step's forces; the first
  call also evaluates the first frame's).
- **Neighbour list**: rebuilt from scratch at every step with vesin (no skin, no reuse),
  on the CPU from a host copy of the positions (on a GPU that is one copy per step), inside
  the timed call, as an MD code without a skin does. Positions are wrapped into the cell
  along its periodic axes after every step.
- **Start**: the structure's positions, velocities drawn from the Maxwell-Boltzmann
  distribution at :data:`TEMPERATURE_K` with the case's seed, zero total momentum.
- **Gate**: each call returns the energy and forces of the frame it starts from (the
  first call: the first frame, evaluated in it; later calls: those of the previous call's
  last step), and the reference is the float64 model of the reference backend on that same
  frame. Each is judged at its own scale (:mod:`equibench.correctness`): forces relative to
  the largest reference force (at least :data:`FORCE_FLOOR`, for structures whose forces
  vanish by symmetry, such as a perfect crystal), the energy relative to its own size (at
  least :data:`ENERGY_FLOOR_PER_ATOM` per atom). The runner gates the first call, then the
  frame the run has reached after timing; the first frame turned by a random rotation
  must give the same energy and the forces turned (:func:`equivariance_error`).
- **Recorded** (``Bench.summary``): ns/day at :data:`TIMESTEP_FS`, the first step's time
  (model set-up: conversion, compilation, kernel build, plus the first step), the energy
  drift over the whole run (every call, from the first frame), in meV/atom/ps, and the
  mean kinetic temperature. Under NVT the drift is that of the total energy less the heat
  the thermostat put in (the kinetic energy its friction-and-noise steps changed), which
  a correct integrator conserves as NVE conserves the total energy.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from equibench.levels import Bench, Outputs
from equibench.vocabulary import MD_DIRECTIONS as DIRECTIONS

TIMESTEP_FS = 0.5  # the hydrogen of water needs <= 0.5 fs
TEMPERATURE_K = 300.0
# Langevin friction of nvt: ASE's examples use 0.01/fs (a 100 fs relaxation time).
FRICTION_PER_FS = 0.01
# The gate's floors (Bench.floors): forces are judged at least at 0.01 eV/Å, for structures
# whose forces vanish by symmetry (a perfect crystal), where float32's round-off stays far
# below it; a total energy at least at 1 meV per atom, below which it is cancellation
# between the atoms' energies, not a value its rounding is relative to.
FORCE_FLOOR = 0.01  # eV/Å
ENERGY_FLOOR_PER_ATOM = 1e-3  # eV
SECONDS_PER_DAY = 86_400.0

# (positions (N, 3) Å, edge_index (2, E) sender/receiver, shifts (E, 3) Å) ->
# (energy () eV, forces (N, 3) eV/Å); the edge vector is pos[recv] - pos[send] + shift.
Potential = Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]


@dataclass(frozen=True)
class System:
    """A structure as float64 tensors: ``numbers (N,)`` int64, ``positions (N, 3)`` Å,
    ``masses (N,)`` amu, ``cell (3, 3)`` Å (lattice vectors as rows), ``pbc`` per axis."""

    numbers: Tensor
    positions: Tensor
    masses: Tensor
    cell: Tensor
    pbc: tuple[bool, bool, bool]

    @classmethod
    def from_atoms(cls, atoms) -> System:
        """From an ``ase.Atoms``."""
        return cls(
            numbers=torch.as_tensor(atoms.numbers, dtype=torch.int64),
            positions=torch.as_tensor(atoms.positions, dtype=torch.float64),
            masses=torch.as_tensor(atoms.get_masses(), dtype=torch.float64),
            cell=torch.as_tensor(atoms.cell.array, dtype=torch.float64),
            pbc=tuple(bool(p) for p in atoms.pbc),  # type: ignore[arg-type]
        )

    @property
    def n_atoms(self) -> int:
        return int(self.numbers.shape[0])

    @property
    def periodic(self) -> bool:
        return any(self.pbc)

    def rounded(self, dtype: torch.dtype) -> System:
        """Positions and cell rounded to ``dtype`` (kept in float64), so that a float64
        reference sees exactly the frame a ``dtype`` case starts from."""
        return System(self.numbers, self.positions.to(dtype).double(), self.masses,
                      self.cell.to(dtype).double(), self.pbc)


def initial_velocities(system: System, temperature_k: float, seed: int) -> Tensor:
    """``(N, 3)`` velocities (Å per ASE time unit) from the Maxwell-Boltzmann distribution
    at ``temperature_k``, seeded, with the centre of mass at rest."""
    from ase import units

    rng = np.random.default_rng(seed)
    masses = system.masses.numpy()[:, None]
    velocities = rng.standard_normal((system.n_atoms, 3)) * np.sqrt(units.kB * temperature_k
                                                                   / masses)
    velocities -= (masses * velocities).sum(0) / masses.sum()
    return torch.as_tensor(velocities)


class NeighbourList:
    """Every pair within ``cutoff`` Å of a structure with ``cell (3, 3)`` and ``pbc``,
    periodic images included, computed afresh on each call with vesin
    (``equibench.datasets.graphs.radius_pairs``: canonical order, so equal positions give
    equal edges)."""

    def __init__(self, cutoff: float, cell: Tensor, pbc: tuple[bool, bool, bool]) -> None:
        from vesin import NeighborList

        self.cutoff, self.pbc = cutoff, np.array(pbc)
        self.cell = cell.double().numpy()
        self.vesin = NeighborList(cutoff=cutoff, full_list=True)

    def __call__(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """``edge_index (2, E)`` int64 and ``shifts (E, 3)`` Å (the dtype and device of
        ``positions (N, 3)``)."""
        from equibench.datasets.graphs import radius_pairs

        host = positions.detach().to(device="cpu", dtype=torch.float64).numpy()
        src, dst, cell_shift = radius_pairs(host, self.cutoff, cell=self.cell, pbc=self.pbc,
                                            neighbor_list=self.vesin)
        edge_index = torch.from_numpy(np.stack([src, dst])).to(positions.device)
        shifts = torch.from_numpy(cell_shift @ self.cell).to(positions.device, positions.dtype)
        return edge_index, shifts


@dataclass(frozen=True)
class Langevin:
    """The thermostat of an ``nvt`` run: ``temperature_k``, ``friction`` (1 / ASE time
    unit) and the seed of its noise."""

    temperature_k: float
    friction: float
    seed: int

    def describe(self) -> str:
        return (f"Langevin (BAOAB), {self.temperature_k:g} K, friction "
                f"{FRICTION_PER_FS:g}/fs")


@dataclass
class Trajectory:
    """Integrator state of one trajectory, in one dtype on one device: velocity Verlet
    (NVE), or with ``thermostat`` the BAOAB Langevin splitting (half kick, half drift,
    friction and noise, half drift, forces, half kick).

    ``positions``, ``velocities``, ``forces`` ``(N, 3)``; ``energy ()`` (potential, eV);
    ``totals``: after every step, the first frame's first, the total energy less the heat
    the thermostat put in (under NVE, the total energy); ``kinetic``: the kinetic energy
    after every step.
    """

    potential: Potential
    neighbours: NeighbourList
    masses: Tensor  # (N, 1) amu
    cell: Tensor  # (3, 3)
    pbc: tuple[bool, bool, bool]
    timestep: float  # ASE time units
    positions: Tensor
    velocities: Tensor
    forces: Tensor | None = None
    energy: Tensor | None = None
    thermostat: Langevin | None = None
    totals: list[Tensor] = field(default_factory=list)
    kinetic: list[Tensor] = field(default_factory=list)
    heat: Tensor | float = 0.0  # eV the thermostat put in so far
    steps: int = 0
    first_step_s: float = float("nan")  # the first frame and the first step, in seconds
    # Where the latest call started: the frame whose energy and forces it returned.
    start_positions: Tensor | None = None
    # Fractional coordinates (positions @ inverse) wrap along the periodic axes.
    inverse: Tensor = field(init=False)
    periodic: Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.periodic = torch.tensor(self.pbc, device=self.positions.device)
        self.inverse = (torch.linalg.inv(self.cell) if any(self.pbc)
                        else torch.zeros_like(self.cell))
        if self.thermostat is not None:
            from ase import units

            self.noise = torch.Generator(self.positions.device)
            self.noise.manual_seed(self.thermostat.seed)
            # Ornstein-Uhlenbeck step over a whole timestep: v <- a v + b sqrt(kT/m) xi.
            self.decay = math.exp(-self.thermostat.friction * self.timestep)
            self.kick = (math.sqrt(1 - self.decay**2)
                         * torch.sqrt(units.kB * self.thermostat.temperature_k / self.masses))

    def _evaluate(self) -> None:
        edge_index, shifts = self.neighbours(self.positions)
        self.energy, self.forces = self.potential(self.positions, edge_index, shifts)

    def _wrap(self) -> None:
        if not any(self.pbc):
            return
        fractional = self.positions @ self.inverse
        fractional = torch.where(self.periodic, fractional - torch.floor(fractional),
                                 fractional)
        self.positions = fractional @ self.cell

    def _kinetic(self) -> Tensor:
        return 0.5 * (self.masses * self.velocities**2).sum()

    def _thermalize(self) -> None:
        """The O step: friction and noise on the velocities, its heat counted."""
        before = self._kinetic()
        noise = torch.randn(self.velocities.shape, generator=self.noise,
                            device=self.velocities.device, dtype=self.velocities.dtype)
        self.velocities = self.decay * self.velocities + self.kick * noise
        self.heat = self.heat + self._kinetic() - before

    def _record(self) -> None:
        kinetic = self._kinetic()
        self.kinetic.append(kinetic)
        self.totals.append(self.energy + kinetic - self.heat)

    def run(self, steps: int) -> Outputs:
        """``steps`` integrator steps; returns ``energy (1,)`` and ``forces (N, 3)`` of
        the frame the run started from."""
        start = time.perf_counter()
        if self.forces is None:
            self._evaluate()
            self._record()
        self.start_positions = self.positions
        started = {"energy": self.energy.reshape(1), "forces": self.forces}
        half = 0.5 * self.timestep
        for _ in range(steps):
            self.velocities = self.velocities + half * self.forces / self.masses
            if self.thermostat is None:
                self.positions = self.positions + self.timestep * self.velocities
            else:
                self.positions = self.positions + half * self.velocities
                self._thermalize()
                self.positions = self.positions + half * self.velocities
            self._wrap()
            self._evaluate()
            self.velocities = self.velocities + half * self.forces / self.masses
            self._record()
            self.steps += 1
            if self.steps == 1:
                self.first_step_s = time.perf_counter() - start
        return started


@dataclass
class FrameReference:
    """The gate of an MD run: the reference potential's energy ``(1,)`` and forces
    ``(N, 3)`` on the frame the run's latest call started from (computed once per frame, in
    float64)."""

    state: Trajectory
    reference: Potential
    positions: Tensor | None = None  # the frame of ``energy`` and ``forces``
    energy: Tensor | None = None
    forces: Tensor | None = None

    def outputs(self) -> Outputs:
        """``Bench.reference``: the reference's energy and forces."""
        if self.positions is not self.state.start_positions:
            self.positions = self.state.start_positions
            positions = self.positions.detach().to(torch.float64)
            energy, self.forces = self.reference(positions, *self.state.neighbours(positions))
            self.energy = energy.reshape(1)
        return {"energy": self.energy, "forces": self.forces}


def equivariance_error(potential: Potential, system: System, cutoff: float,
                       rotation: Tensor, dtype: torch.dtype, device: str) -> float:
    """The gate's error of ``E(R x) = E(x)`` and ``F(R x) = R F(x)`` on the first frame of
    ``system`` for a rotation ``R (3, 3)`` (positions and cell rotate; the larger of the
    two errors, each at its own scale with the gate's floors)."""
    from equibench.correctness import errors

    def evaluate(positions: Tensor, cell: Tensor) -> tuple[Tensor, Tensor]:
        positions = positions.to(device=device, dtype=dtype)
        edge_index, shifts = NeighbourList(cutoff, cell, system.pbc)(positions)
        return potential(positions, edge_index, shifts)

    energy, forces = evaluate(system.positions, system.cell)
    turned_energy, turned_forces = evaluate(system.positions @ rotation.T,
                                            system.cell @ rotation.T)
    return max(
        errors(turned_energy.reshape(1), energy.reshape(1),
               ENERGY_FLOOR_PER_ATOM * system.n_atoms)[1],
        errors(turned_forces, forces.double() @ rotation.T.to(forces.device), FORCE_FLOOR)[1],
    )


def default_steps(n_atoms: int) -> int:
    """The MD steps of one timed call when none are given (``equibench run`` without
    ``--batch``): ``cases.MD_ATOM_STEPS_PER_CALL`` atom-steps, at least one (64 atoms: 4
    steps; the 24-atom water box: 10; the 8-atom diamond cell: 32)."""
    from equibench.cases import MD_ATOM_STEPS_PER_CALL

    return max(1, MD_ATOM_STEPS_PER_CALL // max(1, n_atoms))


def drift_mev_per_atom_ps(totals: Tensor, timestep_fs: float, n_atoms: int) -> float:
    """Slope of the least-squares line through the total energy ``totals (S + 1,)`` eV,
    one value per step from the first frame, in meV per atom per ps."""
    if totals.shape[0] < 2:
        return float("nan")
    times_ps = np.arange(totals.shape[0]) * timestep_fs * 1e-3
    slope = np.polyfit(times_ps, totals.double().cpu().numpy(), 1)[0]
    return float(slope * 1e3 / n_atoms)


def ns_per_day(steps_per_s: float, timestep_fs: float) -> float:
    return steps_per_s * timestep_fs * 1e-6 * SECONDS_PER_DAY


def mean_temperature_k(kinetic: Tensor, n_atoms: int) -> float:
    """Mean kinetic temperature of ``kinetic (S + 1,)`` eV over ``3 n_atoms`` degrees of
    freedom."""
    from ase import units

    return float(kinetic.double().mean() * 2 / (3 * n_atoms * units.kB))


def build_bench(direction: str, steps: int, system: System, potential: Potential,
                reference: Potential, cutoff: float, dtype: torch.dtype, device: str,
                seed: int, setup_s: float, extra: dict) -> Bench:
    """The :class:`Bench` of a ``direction`` (``nve`` or ``nvt``) run of ``system`` (see the
    module docstring): ``potential`` on the case's backend in ``dtype``, ``reference`` the
    float64 reference model, ``setup_s`` the seconds its set-up took (conversion,
    compilation, kernel build), ``extra`` what the model family records."""
    from ase import units

    if direction not in DIRECTIONS:
        raise ValueError(f"md runs {', '.join(DIRECTIONS)}, not {direction!r}")
    system = system.rounded(dtype)
    cell = system.cell.to(device=device, dtype=dtype)
    thermostat = (Langevin(TEMPERATURE_K, FRICTION_PER_FS / units.fs, seed)
                  if direction == "nvt" else None)
    state = Trajectory(
        potential=potential, neighbours=NeighbourList(cutoff, system.cell, system.pbc),
        masses=system.masses.to(device=device, dtype=dtype)[:, None], cell=cell,
        pbc=system.pbc, timestep=TIMESTEP_FS * units.fs,
        positions=system.positions.to(device=device, dtype=dtype),
        velocities=initial_velocities(system, TEMPERATURE_K, seed).to(device=device,
                                                                      dtype=dtype),
        thermostat=thermostat,
    )
    gate = FrameReference(state, reference)

    def summary(median_s: float) -> dict:
        return {
            "ns_per_day": ns_per_day(steps / median_s, TIMESTEP_FS),
            "first_step_s": setup_s + state.first_step_s,
            "drift_mev_per_atom_ps": drift_mev_per_atom_ps(torch.stack(state.totals),
                                                           TIMESTEP_FS, system.n_atoms),
            "temperature_mean_k": mean_temperature_k(torch.stack(state.kinetic),
                                                     system.n_atoms),
            "steps_run": state.steps,
            "simulated_ps": state.steps * TIMESTEP_FS * 1e-3,
        }

    def equivariance() -> float:
        from equibench.correctness import random_rotation

        return equivariance_error(potential, system, cutoff, random_rotation(seed + 1),
                                  dtype, device)

    return Bench(
        call=lambda: state.run(steps),
        equivariance=equivariance,
        reference=gate.outputs,
        floors={"forces": FORCE_FLOOR, "energy": ENERGY_FLOOR_PER_ATOM * system.n_atoms},
        items=steps,
        unit="steps/s",
        summary=summary,
        extra={
            **extra,
            "atoms": system.n_atoms,
            "periodic": list(system.pbc),
            "steps_per_call": steps,
            "atom_steps_per_call": steps * system.n_atoms,
            "timestep_fs": TIMESTEP_FS,
            "temperature_k": TEMPERATURE_K,
            "integrator": ("velocity Verlet, NVE" if thermostat is None
                           else thermostat.describe())
            + ", one trajectory continued across calls",
            "drift_of": ("total energy" if thermostat is None
                         else "total energy less the thermostat's heat"),
            "neighbour_list": f"vesin, {cutoff} Å, rebuilt every step (no skin), on the CPU",
            "model_setup_s": setup_s,
            "gate": "energy and forces of each call's start frame (the first call: the first "
                    f"frame); forces relative to max(max|F_ref|, {FORCE_FLOOR} eV/Å), the "
                    f"energy to max(|E_ref|, {ENERGY_FLOOR_PER_ATOM * 1e3:g} meV x atoms)",
        },
    )
