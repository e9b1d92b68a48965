"""MACE model level: every backend passes the float32 gate (float64:
tests/test_conformance.py), the fused backend really runs the fused convolution, and the
breakdown covers the step."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("mace.modules", exc_type=ImportError)

from equibench import registry  # noqa: E402
from equibench.cases import Case  # noqa: E402
from equibench.measure import MeasureConfig  # noqa: E402
from equibench.precision import get_precision  # noqa: E402
from equibench.runner import RunSettings, run_case  # noqa: E402

# One timed call: the test checks the gate, not the speed.
QUICK = RunSettings(measure=MeasureConfig(min_repeats=1, max_repeats=1, budget_s=0, warmup=0))
BATCH = 2


# One thread (conftest): the cases check correctness, and stay quick and steady on two
# shared cores.
pytestmark = pytest.mark.usefixtures("one_thread")


def mace_case(backend: str, direction: str) -> Case:
    return Case("model", "mace-qm9", backend, "small", direction, "float32", BATCH, "cpu")


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["inference", "train_step"])
@pytest.mark.parametrize("backend", ["e3nn", "fused", "cuequivariance"])
def test_backend_passes_the_float32_gate_and_breaks_down_the_step(backend: str,
                                                                  direction: str) -> None:
    row = run_case(mace_case(backend, direction), QUICK)
    if backend == "fused" and row["status"] == "unavailable":
        pytest.skip(row["reason"])  # no C++ compiler here
    assert row["status"] == "ok", row.get("reason")
    assert row["max_scaled_err"] <= get_precision("float32").tolerance
    assert row["equivariance_err"] <= 1e-4
    extra = row["extra"]
    assert extra["atoms_per_call"] > 0 and extra["edges_per_call"] > 0
    assert set(extra["breakdown"]) == {
        "tensor product", "gather/scatter", "radial MLP", "symmetric contraction", "linear",
        "other",
    }  # fmt: skip
    assert extra["breakdown"]["tensor product"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("direction", ["inference", "train_step"])
@pytest.mark.parametrize("backend", ["e3nn", "fused"])
def test_autocast_bfloat16_is_gated_and_says_what_ran_in_it(backend: str,
                                                            direction: str) -> None:
    case = Case("model", "mace-qm9", backend, "small", direction, "amp-bfloat16", BATCH, "cpu")
    row = run_case(case, QUICK)
    if backend == "fused" and row["status"] == "unavailable":
        pytest.skip(row["reason"])  # no C++ compiler here
    assert row["status"] == "ok", row.get("reason")
    # Really in bfloat16 (8 bits: float32 would be ~1e-6), within the amp-bfloat16 bound.
    assert 1e-4 < row["max_scaled_err"] <= row["tolerance"] == 5e-2
    assert row["equivariance_err"] <= 5e-2
    autocast = row["extra"]["autocast"]
    assert "aten::tensordot (e3nn o3.Linear) promoted" in autocast
    assert ("fused kernels in float32" in autocast) == (backend == "fused")


@pytest.mark.slow
def test_float16_training_step_scales_its_loss() -> None:
    """amp-float16: the step scales its loss (the scale found before the gated call is in
    the row), and the fused model, whose profile copies it after that calibration, runs."""
    case = Case("model", "mace-qm9", "fused", "small", "train_step", "amp-float16", BATCH,
                "cpu")
    row = run_case(case, QUICK)
    if row["status"] == "unavailable":
        pytest.skip(row["reason"])  # no C++ compiler here
    assert row["status"] == "ok", row.get("reason")
    assert 1e-6 < row["max_scaled_err"] <= row["tolerance"] == 5e-2
    assert 1 < row["extra"]["loss_scale"] <= 2.0**16


def test_tensordot_follows_autocast_only_inside_its_region() -> None:
    from equibench.implementations.mace import autocast

    autocast.extend()
    x, w = torch.randn(4, 8, dtype=torch.bfloat16), torch.randn(8, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        # Promoted, as CUDA autocast does: the widest input dtype.
        assert torch.tensordot(x, w, dims=1).dtype == torch.float32
        assert torch.tensordot(x, w.bfloat16(), dims=1).dtype == torch.bfloat16
        assert torch.tensordot(x.float(), w, dims=1).dtype == torch.float32
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.tensordot(x, w, dims=1)  # outside autocast, mixed dtypes stay an error


def test_openequivariance_unavailable_on_cpu() -> None:
    row = run_case(mace_case("openequivariance", "inference"), QUICK)
    assert row["status"] == "unavailable"
    assert "GPU" in row["reason"]


def test_unknown_variant_is_unavailable() -> None:
    case = Case("model", "mace-qm9", "e3nn", "huge", "inference", "float32", 1, "cpu")
    row = run_case(case, QUICK)
    assert row["status"] == "unavailable" and "variant" in row["reason"]


class _CountOps(TorchDispatchMode):
    """Counts the operators dispatched while active, by name (``equibench.conv_fwd``)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket._qualified_op_name.replace("::", ".")
        self.counts[name] = self.counts.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


@pytest.mark.slow
def test_fused_backend_runs_the_fused_convolution() -> None:
    from e3nn import o3

    family = registry.model_family("mace-qm9")
    if reason := family.available("fused", "cpu"):
        pytest.skip(reason)
    try:
        bench = family.build_bench(mace_case("fused", "train_step"), torch.float32, seed=0)
    except registry.Unsupported as err:
        pytest.skip(str(err))
    from equibench.implementations.mace.linear import IrrepsLinear
    from equibench.implementations.mace.symmetric_contraction import (
        FusedSymmetricContraction,
    )
    from mace.modules.symmetric_contraction import Contraction

    e3nn_tp_calls, mace_contractions, ours, e3nn_linears, linears = [], [], [], [], []

    def seen(module, args, out) -> None:
        # The convolution's e3nn product is a plain TensorProduct (skip_tp is a subclass).
        if type(module) is o3.TensorProduct:
            e3nn_tp_calls.append(module)
        elif isinstance(module, o3.Linear):
            e3nn_linears.append(module)
        elif isinstance(module, IrrepsLinear):
            linears.append(module)
        elif isinstance(module, Contraction):
            mace_contractions.append(module)
        elif isinstance(module, FusedSymmetricContraction):
            ours.append(module)

    hook = torch.nn.modules.module.register_module_forward_hook(seen)
    try:
        with _CountOps() as counter:
            bench.call()
    finally:
        hook.remove()
    layers = bench.extra["model"]["num_interactions"]
    # Per interaction: the forward; its backward for the forces and again in
    # loss.backward() (the energy term); the double backward in loss.backward() (the
    # force term).
    assert counter.counts.get("equibench.conv_fwd") == layers
    assert counter.counts.get("equibench.conv_bwd") == 2 * layers
    assert counter.counts.get("equibench.conv_dbwd") == layers
    assert e3nn_tp_calls == [] and mace_contractions == []
    assert len(ours) == layers  # the product basis of every interaction is ours
    # ... on the generated kernels: forward, and in training the backward (forces, then
    # the energy term) and the double backward (the force term)
    assert counter.counts.get("equibench.sc_fwd") == layers
    assert counter.counts.get("equibench.sc_bwd") == 2 * layers
    assert counter.counts.get("equibench.sc_dbwd") == layers
    assert bench.extra["fused_parts"][1] == (
        "product basis: equibench fused kernels (symmetric contraction)")
    # linear_up and linear of every interaction, linear of every product block: ours;
    # e3nn's Linear remains in the readouts only (they map to scalars)
    assert len(linears) == 3 * layers
    assert all(m.irreps_out.lmax == 0 for m in e3nn_linears)


def test_profile_categories_attributes_backward_to_the_forward_module() -> None:
    from equibench.implementations.mace.profile_breakdown import Rule, profile_categories

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
    x = torch.randn(256, 64, requires_grad=True)

    def step() -> None:
        (grad,) = torch.autograd.grad(model(x).sum(), x, create_graph=True)
        grad.square().sum().backward()  # double backward, as in training with forces

    # Paths of backward operators start with the path of their forward operator.
    rules = [
        Rule("first, double backward", r"^step/0/.*Backward.*Backward"),
        Rule("first, backward", r"^step/0/.*Backward"),
        Rule("first", r"^step/0/"),
        Rule("last", r"^step/2/"),
    ]
    totals = profile_categories(step, rules, {"0": model[0], "2": model[2]})
    assert list(totals) == [r.category for r in rules] + ["other"]
    assert all(seconds > 0 for category, seconds in totals.items() if category != "other")


@pytest.mark.slow
def test_rows_name_the_modules_that_ran_and_the_fallback():
    from equibench.implementations.mace.backends import code_path
    from equibench.implementations.mace.bench import prepare

    paths = {}
    for backend in ("e3nn", "fused", "cuequivariance"):
        case = Case("model", "mace-qm9", backend, "small", "inference", "float32", 2, "cpu")
        paths[backend] = code_path(prepare(case, torch.float32, 0).model)
    assert "e3nn.TensorProduct" in paths["e3nn"]["path"] and not paths["e3nn"]["fallback"]
    assert "equibench.FusedConvolution" in paths["fused"]["path"]
    assert "equibench.FusedSymmetricContraction" in paths["fused"]["path"]
    assert "cuequivariance_torch.SymmetricContraction" in paths["cuequivariance"]["path"]
    assert "naive" in paths["cuequivariance"]["fallback"]  # no CUDA ops on this machine
