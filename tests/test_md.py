"""The md level: the physics check (first-frame energy and forces against e3nn float64)
catches a 0.1% force error, NVE runs of e3nn and fused go end to end through the runner,
and structures come from files with their periodicity and supercells."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from ase import units
from ase.build import bulk, molecule
from ase.io import write

pytest.importorskip("mace.modules", exc_type=ImportError)

from equibench import names, structures  # noqa: E402
from equibench.cases import Case  # noqa: E402
from equibench.levels import md  # noqa: E402
from equibench.measure import MeasureConfig  # noqa: E402
from equibench.runner import RunSettings, run_case, run_cases  # noqa: E402

STEPS = 2  # per timed call
# Few calls: the test checks the gate and what a row records, not the speed.
QUICK = MeasureConfig(min_repeats=2, max_repeats=2, budget_s=0, warmup=0, rounds=2)


# One thread (conftest): the cases check correctness, and stay quick and steady on two
# shared cores.
pytestmark = pytest.mark.usefixtures("one_thread")


def md_case(backend: str, precision: str = "float32", workload: str = "water-box") -> Case:
    return Case("md", workload, backend, "small", "nve", precision, STEPS, "cpu")


class ScaledForces(torch.nn.Module):
    """A mace-torch model whose forces are ``factor`` times the model's."""

    def __init__(self, model: torch.nn.Module, factor: float) -> None:
        super().__init__()
        self.model, self.factor = model, factor

    def forward(self, data: dict, **kwargs: object) -> dict:
        out = dict(self.model(data, **kwargs))
        out["forces"] = out["forces"] * self.factor
        return out


def test_forces_off_by_a_tenth_of_a_percent_are_incorrect(monkeypatch) -> None:
    from equibench.implementations.mace import md as mace_md

    convert = mace_md.on_backend
    monkeypatch.setattr(mace_md, "on_backend",
                        lambda *args: ScaledForces(convert(*args), 1.001))
    row = run_case(md_case("e3nn"), RunSettings(measure=QUICK))
    assert row["status"] == "incorrect", row.get("reason")
    # The error is 1e-3 of the largest force, ten times float32's tolerance.
    error = float(re.match(r"forces: error (\S+) of its own scale exceeds", row["reason"]).group(1))
    assert error == pytest.approx(1e-3, rel=0.01)
    assert "time_median_s" not in row  # never timed


@pytest.mark.slow
def test_nve_runs_end_to_end_for_e3nn_and_fused(tmp_path) -> None:
    cases = [md_case("e3nn"), md_case("fused"), md_case("openequivariance")]
    frame = run_cases(cases, RunSettings(measure=QUICK), tmp_path / "md.parquet",
                      progress=False)
    rows = {row["implementation"]: row for _, row in frame.iterrows()}
    assert rows["openequivariance"]["status"] == "unavailable"
    if rows["fused"]["status"] == "unavailable":
        pytest.skip(rows["fused"]["reason"])  # no C++ compiler here
    for backend in ("e3nn", "fused"):
        row = rows[backend]
        assert row["status"] == "ok", row["reason"]
        assert row["max_scaled_err"] <= 1e-4 and row["throughput_unit"] == "steps/s"
        assert row["rounds_id"]  # timed in interleaved rounds with its peer
        extra = json.loads(row["extra"])
        assert extra["ns_per_day"] == pytest.approx(
            row["throughput"] * md.TIMESTEP_FS * 1e-6 * 86_400)
        assert extra["atom_steps_per_s"] == pytest.approx(24 * row["throughput"])
        assert extra["first_step_s"] > extra["model_setup_s"] > 0
        # First call, two timed calls, the peak-memory call and the two calls that measure
        # live tensor bytes (measure.peak_tensor_memory), STEPS each.
        assert extra["steps_run"] == 6 * STEPS
        assert math.isfinite(extra["drift_mev_per_atom_ps"])
        assert "rebuilt every step" in extra["neighbour_list"]
        assert row["peak_mem_bytes"] > 0


def springs_trajectory(system: md.System, springs: md.Potential,
                       thermostat: md.Langevin | None = None) -> md.Trajectory:
    return md.Trajectory(
        potential=springs, neighbours=md.NeighbourList(2.0, system.cell, system.pbc),
        masses=system.masses[:, None], cell=system.cell, pbc=system.pbc,
        timestep=md.TIMESTEP_FS * units.fs, positions=system.positions.clone(),
        velocities=md.initial_velocities(system, md.TEMPERATURE_K, seed=0),
        thermostat=thermostat)


def diamond_springs(workload: str = "diamond@3x3x3") -> tuple[md.System, md.Potential]:
    """A diamond crystal whose atoms sit on springs (1 eV/Å^2 to their start, minimum
    image)."""
    system = md.System.from_atoms(structures.load(workload))
    cell, centre = system.cell, system.positions.clone()

    def springs(positions, edge_index, shifts):
        fractional = (positions - centre) @ torch.linalg.inv(cell)
        offset = (fractional - torch.round(fractional)) @ cell
        return 0.5 * (offset**2).sum(), -offset

    return system, springs


@pytest.mark.slow
def test_nvt_holds_its_temperature_and_conserves_energy_less_heat() -> None:
    """Langevin at 600 K on springs started at 300 K: the temperature climbs to the bath's
    and the total energy less the heat put in holds as NVE's total energy does, while the
    total energy itself moves by the heat."""
    system, springs = diamond_springs()
    bath = md.Langevin(600.0, 0.05 / units.fs, seed=3)  # a 20 fs relaxation time
    state = springs_trajectory(system, springs, bath)
    state.run(6000)  # 3 ps
    kinetic = torch.stack(state.kinetic)
    assert md.mean_temperature_k(kinetic[3000:], system.n_atoms) == pytest.approx(600, rel=0.1)
    totals = torch.stack(state.totals)
    heat = float(state.heat)
    # Equipartition: 300 K more in 3N kinetic and 3N potential degrees of freedom is
    # 3 N kB 300 K = 16.8 eV; what the bath put in is of that order.
    assert heat > 0.5 * 3 * system.n_atoms * units.kB * 300
    assert (totals - totals[0]).abs().max() < 1e-3 * heat
    # The same seed gives the same trajectory.
    first, second = (springs_trajectory(system, springs, bath) for _ in range(2))
    first.run(50)
    second.run(50)
    assert torch.equal(first.positions, second.positions)


def test_nve_conserves_energy_and_wraps_positions() -> None:
    """Atoms of a diamond cell on springs (1 eV/Å^2 to their start, minimum image): the
    total energy holds and the atoms that cross the cell's faces come back inside."""
    system, springs = diamond_springs("diamond")
    cell, centre = system.cell, system.positions.clone()
    state = springs_trajectory(system, springs)
    state.run(400)
    totals = torch.stack(state.totals)
    assert (totals - totals[0]).abs().max() < 1e-4 * totals[0].abs()
    assert abs(md.drift_mev_per_atom_ps(totals, md.TIMESTEP_FS, system.n_atoms)) < 0.1
    fractional = state.positions @ torch.linalg.inv(cell)
    assert ((fractional >= 0) & (fractional < 1)).all()
    # The atom at the origin oscillates across three faces: wrapping moved it.
    assert (state.positions - centre).abs().max() > 1.0


def test_structure_files_keep_their_periodicity_and_replicate(tmp_path) -> None:
    water = structures.water_box()
    write(tmp_path / "water.extxyz", water)
    write(tmp_path / "diamond.cif", bulk("C", "diamond", a=3.567, cubic=True))
    write(tmp_path / "molecule.xyz", molecule("CH4"))

    box = structures.load(str(tmp_path / "water.extxyz"))
    assert box.pbc.all() and len(box) == len(water) == 24
    assert structures.load(f"{tmp_path / 'water.extxyz'}@2x1x3").get_global_number_of_atoms() \
        == 24 * 6
    crystal = structures.load(f"{tmp_path / 'diamond.cif'}@2x2x2")
    assert crystal.pbc.all() and len(crystal) == 8 * 8
    assert (crystal.get_scaled_positions(wrap=False) < 1).all()
    methane = structures.load(str(tmp_path / "molecule.xyz"))
    assert not methane.pbc.any() and len(methane) == 5
    with pytest.raises(ValueError, match="does not make periodic"):
        structures.load(f"{tmp_path / 'molecule.xyz'}@2x1x1")
    assert structures.problem(str(tmp_path / "missing.cif")) is not None
    assert structures.problem(f"{tmp_path / 'diamond.cif'}@2x2x2") is None
    assert len(structures.load("diamond@3x3x3")) == 216


def test_full_preset_has_cuequivariances_mace_sizes() -> None:
    """The full preset's MACE-MP and MACE-OFF cases run on graphs of cuEquivariance's MACE
    sizes (~3,000-4,000 atoms, 70,000-160,000 edges), with those models' cutoffs."""
    from equibench.implementations.mace.models import VARIANTS

    from equibench.config import resolve

    suites = {s["name"]: s for s in resolve({"preset": "full"})["suites"]}
    for suite, (atoms, low, high) in {"md-cuequivariance-sizes-mp": (4000, 70_000, 75_000),
                                      "md-cuequivariance-sizes-off": (3000, 155_000, 165_000)
                                      }.items():
        (workload,) = suites[suite]["workloads"]
        structure = structures.load(workload)
        for variant in suites[suite]["variants"]:
            cutoff = VARIANTS[variant].r_max
            edges, _ = md.NeighbourList(cutoff, torch.tensor(structure.cell[:]),
                                        tuple(structure.pbc))(
                torch.tensor(structure.positions))
            assert len(structure) == atoms and low <= edges.shape[1] <= high, (suite, variant)


def test_md_names_are_checked_before_any_process() -> None:
    found = names.problems(Case("md", "watr-box", "fusd", "small", "inference", "float32", 2,
                                "cpu"))
    assert len(found) == 3
    assert "neither a built-in structure" in found[0]
    assert "'fused'" in found[1] and "(valid: nve, nvt)" in found[2]
    assert names.problems(md_case("e3nn")) == []
