"""Conformance: every registered implementation, at every level it has, matches the float64
reference through the runner's own gate.

One test replaces the per-adapter "matches e3nn" copies: for each implementation of the
registry (``equibench list``) and each of its levels, a small float64 case goes through
:func:`equibench.runner.run_case` -- the build, the gate against the float64 reference
(:func:`equibench.runner.gate_outputs`), the equivariance check on forward, the gate again
on the last call -- and must come back ``ok``. A case the registry says cannot run (no GPU,
a direction the implementation declines) must come back ``unavailable`` with the registry's
own reason, and is skipped with it.

Tiers (``pytest -m "not slow"`` is the dev loop): the tp and conv cases on one small
workload are fast, except ``e3nn-compiled``'s, whose torch.compile takes 8-28 s a case on
two shared cores (its tp forward stays in the fast tier). Whole models (the ``model``
level of each family's backends) and the sweep over every kind of workload construction
are slow.
"""

from __future__ import annotations

import pytest
from settings_for_tests import ONE_REPEAT

from equibench import registry
from equibench.cases import Case
from equibench.precision import get_precision
from equibench.runner import run_case
from equibench.vocabulary import TP_CONV_DIRECTIONS as DIRECTIONS
from equibench.workloads import TP_WORKLOADS

PRECISION = "float64"
TOLERANCE = get_precision(PRECISION).tolerance
DEVICE = "cpu"
# A small workload with paths of every kind a uvu product of l <= 1 has (0e x 0e, 0e x 1o,
# 1o x 0e, 1o x 1o), whose x and output e3nn's mul_ir and cuEquivariance's ir_mul lay out
# differently.
SMALL = {"tp": ("nequip-water-1parity", 4), "conv": ("nequip-water-1parity@carbon", 1)}
# Each kind of construction once (slow): large uvu, both parities, l = 3, a single-input
# irrep, uvw with many and few paths, a single path (tests/test_workloads.py checks every
# workload's description).
CONSTRUCTIONS = ["mace-large", "nequip-revmd17-benzene", "nequip-oam-l-first-layer",
                 "DiffDock-L=2", "tetris-poly-1", "tetris-poly-2", "nequip-benzene-1parity",
                 "roofline-123", "oeq-roofline-3e3e3e"]
assert set(CONSTRUCTIONS) <= set(TP_WORKLOADS)
# torch.compile in every case: 8-28 s each here (2026-12-07, two shared cores).
COMPILES = {"e3nn-compiled"}
FAST_COMPILED = ("tp", "forward")
# A small model of each family: (workload, variant, batch). A family registered without an
# entry here fails test_every_model_family_has_a_small_model.
MODELS = {
    "mace": ("mace-qm9", "small", 2),
    "se3t": ("se3t-qm9-small", "baseline", 2),
}

pytestmark = pytest.mark.usefixtures("one_thread")


def _kernel_cases() -> list:
    params = []
    for name in registry.names():
        for level in sorted(registry.get(name).levels & set(SMALL)):
            workload, batch = SMALL[level]
            for direction in DIRECTIONS:
                slow = name in COMPILES and (level, direction) != FAST_COMPILED
                params.append(pytest.param(
                    Case(level, workload, name, "default", direction, PRECISION, batch, DEVICE),
                    id=f"{level}-{name}-{direction}",
                    marks=[pytest.mark.slow] if slow else []))
    return params


def _construction_cases() -> list:
    # e3nn against its own float64 self would test nothing; e3nn-compiled is e3nn's code.
    return [pytest.param(Case("tp", workload, name, "default", direction, PRECISION, 4,
                              DEVICE),
                         id=f"tp-{name}-{direction}-{workload}", marks=pytest.mark.slow)
            for name in registry.names("tp") if name not in {"e3nn", *COMPILES}
            for workload in CONSTRUCTIONS for direction in DIRECTIONS]


def _model_cases() -> list:
    params = []
    for family in registry.families():
        if family.prefix not in MODELS:
            continue
        workload, variant, batch = MODELS[family.prefix]
        # Symmetrix-XL's radial functions are splines, float32-accurate in float64 too, and
        # its converter takes max_ell 3 only: tests/test_symmetrix.py gates it in float32.
        for backend in (b for b in family.backends if b != "symmetrix"):
            for direction in family.directions:
                params.append(pytest.param(
                    Case("model", workload, backend, variant, direction, PRECISION, batch,
                         DEVICE),
                    id=f"model-{family.prefix}-{backend}-{direction}", marks=pytest.mark.slow))
    return params


def test_every_model_family_has_a_small_model():
    assert {f.prefix for f in registry.families()} <= set(MODELS), (
        "add a small (workload, variant, batch) of the new family to MODELS")


@pytest.mark.parametrize("case", [*_kernel_cases(), *_construction_cases(), *_model_cases()])
def test_matches_the_float64_reference(case: Case):
    plugin = registry.plugin(case)
    reason = plugin.unavailable(case.device) or plugin.supports(case)
    row = run_case(case, ONE_REPEAT)
    if reason:
        assert (row["status"], row["reason"]) == ("unavailable", reason)
        pytest.skip(reason)
    assert row["status"] == "ok", row.get("reason")
    assert row["max_scaled_err"] <= TOLERANCE
    if case.direction == "forward" and case.level in SMALL:
        assert row["equivariance_err"] <= TOLERANCE
