"""Named variants at the tp and conv levels: cuequivariance's native ``ir_mul`` layout, the
fused convolution's reused graph plan, and variants an implementation does not have."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from equibench.implementations import cuequivariance as cue_adapter
from settings_for_tests import ONE_REPEAT

from equibench.cases import Case, expand
from equibench.levels import conv as conv_level
from equibench.levels import tp as tp_level
from equibench.precision import get_precision
from equibench.registry import get
from equibench.runner import run_case
from equibench.vocabulary import TP_CONV_DIRECTIONS as DIRECTIONS

# nequip-water-1parity: 32x0e+32x1o, so ir_mul differs from mul_ir in x and in the output.
WORKLOADS = {"tp": "nequip-water-1parity", "conv": "nequip-water-1parity@carbon"}
BATCHES = {"tp": 8, "conv": 1}
SETTINGS = ONE_REPEAT
pytestmark = pytest.mark.usefixtures("one_thread")



def _case(level: str, implementation: str, variant: str, direction: str = "forward",
          precision: str = "float64", workload: str | None = None,
          batch: int | None = None) -> Case:
    return Case(level, workload or WORKLOADS[level], implementation, variant, direction,
                precision, batch or BATCHES[level], "cpu")


def _build(case: Case):
    level = tp_level if case.level == "tp" else conv_level
    return level.build_bench(case, get(case.implementation), torch.float64, seed=0)


# --- cuequivariance, variant ir_mul ------------------------------------------------------


@pytest.mark.parametrize("precision", ["float64", "float32"])
@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("level", ["tp", "conv"])
def test_ir_mul_passes_the_gate(level: str, direction: str, precision: str):
    row = run_case(_case(level, "cuequivariance", "ir_mul", direction, precision), SETTINGS)
    assert row["status"] == "ok", row.get("reason")
    tolerance = get_precision(precision).tolerance
    assert row["max_scaled_err"] <= tolerance
    if direction == "forward":
        assert row["equivariance_err"] <= tolerance
    assert "native ir_mul, no per-call transposes" in row["extra"]["code_path"]["path"]
    assert row["extra"]["amortized"] == ""


def test_default_cue_row_still_says_it_transposes_every_call():
    row = run_case(_case("conv", "cuequivariance", "default"), SETTINGS)
    assert row["status"] == "ok", row.get("reason")
    assert "transposed between mul_ir and ir_mul on every call" in (
        row["extra"]["code_path"]["path"])


@pytest.mark.parametrize("level", ["tp", "conv"])
def test_ir_mul_call_takes_ir_mul_operands_and_transposes_nothing(level: str, monkeypatch):
    import cuequivariance_torch as cuet

    transposes = []
    original = cuet.TransposeIrrepsLayout.forward
    monkeypatch.setattr(cuet.TransposeIrrepsLayout, "forward",
                        lambda self, x: transposes.append(1) or original(self, x))
    seen: list[torch.Tensor] = []
    method = "forward" if level == "tp" else "conv"
    product_call = getattr(cue_adapter.CueProduct, method)
    monkeypatch.setattr(cue_adapter.CueProduct, method,
                        lambda self, x, *rest: seen.append(x) or product_call(self, x, *rest))

    default = _build(_case(level, "cuequivariance", "default"))
    default.call()
    assert len(transposes) == 3  # x, y and the output: the default pays them every call
    native = _build(_case(level, "cuequivariance", "ir_mul"))
    transposes.clear()
    native.call()
    assert not transposes
    x_mul_ir, x_ir_mul = seen[0], seen[-1]
    layout = get("cuequivariance").operand_layout(
        cue_adapter.CueProduct(tp_level.get_tp_workload(WORKLOADS["tp"]), torch.float64, "cpu",
                               native=True))
    assert not torch.equal(x_ir_mul, x_mul_ir)
    assert torch.equal(x_ir_mul, layout.native("in1", x_mul_ir))


@pytest.mark.parametrize(("direction", "view"), [
    ("forward", lambda layout: None),  # forgets to convert anything
    # converts the output but not the gradients, which are in their operands' layout
    ("backward", lambda layout: lambda o: {**o, "out": layout.e3nn("out", o["out"])}),
])
@pytest.mark.parametrize("level", ["tp", "conv"])
def test_a_gate_view_that_forgets_the_layout_fails_the_gate(level, direction, view,
                                                            monkeypatch):
    monkeypatch.setattr(tp_level if level == "tp" else conv_level, "e3nn_outputs", view)
    row = run_case(_case(level, "cuequivariance", "ir_mul", direction), SETTINGS)
    assert row["status"] == "incorrect"
    assert "exceeds tolerance" in row["reason"]


def test_the_equivariance_check_rotates_in_e3nns_layout():
    """Rotating ir_mul operands as if they were mul_ir breaks equivariance: the check must
    convert (it does, and passes to float64 rounding)."""
    case = _case("tp", "cuequivariance", "ir_mul")
    problem = tp_level.get_tp_workload(case.workload)
    fn = get("cuequivariance").build_tp(problem, torch.float64, "cpu", "ir_mul")
    layout = get("cuequivariance").operand_layout(fn)
    data = tp_level.native_inputs(tp_level.tp_inputs(problem, 8, seed=0), layout)
    assert tp_level.equivariance_check(fn, problem, data, layout, seed=1)() < 1e-12
    assert tp_level.equivariance_check(fn, problem, data, None, seed=1)() > 1e-2


# --- fused, variant reuse-plan -----------------------------------------------------------


def test_reuse_plan_says_what_it_amortizes_and_keeps():
    from equibench.kernels.graph import ConvPlan

    row = run_case(_case("conv", "fused", "reuse-plan", precision="float32"), SETTINGS)
    assert row["status"] == "ok", row.get("reason")
    extra = row["extra"]
    assert "CSR plan" in extra["amortized"]
    graph = conv_level.carbon_graph(1, seed=0)
    plan = ConvPlan.build(graph.edge_src, graph.edge_dst, graph.num_nodes, graph.num_nodes)
    plan_bytes = sum(getattr(plan, f.name).nbytes for f in dataclasses.fields(plan))
    assert extra["kept_bytes"] == plan_bytes > 0
    # What it keeps counts in its peaks.
    assert row["peak_mem_bytes"] >= plan_bytes and row["peak_tensor_bytes"] >= plan_bytes
    assert "reused" in extra["code_path"]["path"]

    default = run_case(_case("conv", "fused", "default", precision="float32"), SETTINGS)
    assert default["status"] == "ok", default.get("reason")
    assert default["extra"]["amortized"] == "" and default["extra"]["kept_bytes"] == 0
    assert "built every call" in default["extra"]["code_path"]["path"]


@pytest.mark.parametrize(("variant", "builds"), [("default", 1), ("reuse-plan", 0)])
def test_only_the_default_builds_the_plan_in_the_call(variant: str, builds: int, monkeypatch):
    from equibench.kernels.graph import ConvPlan

    bench = _build(_case("conv", "fused", variant))
    calls = []
    build = ConvPlan.build.__func__
    monkeypatch.setattr(ConvPlan, "build",
                        classmethod(lambda cls, *args: calls.append(1) or build(cls, *args)))
    bench.call()
    assert len(calls) == builds


def test_reuse_plan_declines_a_call_over_several_graphs():
    # 32 molecules in padded batches of 16: two graphs convolved in turn in one call.
    row = run_case(_case("conv", "fused", "reuse-plan",
                         workload="nequip-benzene-1parity@qm9-padded", batch=32), SETTINGS)
    assert row["status"] == "unavailable"
    assert "convolves 2 graphs" in row["reason"]


# --- variants an implementation does not have --------------------------------------------


def test_a_list_of_variants_expands_to_those_each_implementation_has():
    def pairs(level: str) -> set[tuple[str, str]]:
        return {(c.implementation, c.variant) for c in expand(
            level=level, workloads=[WORKLOADS[level]],
            implementations=["e3nn", "cuequivariance", "fused", "not-registered-here"],
            directions=["forward"], precisions=["float32"], batches=[8], device="cpu",
            variants=["default", "ir_mul", "reuse-plan"])}

    assert pairs("conv") == {
        ("e3nn", "default"), ("cuequivariance", "default"), ("cuequivariance", "ir_mul"),
        ("fused", "default"), ("fused", "reuse-plan"),
        # Registered by a plugin in its case process, if at all: that process answers.
        *(("not-registered-here", v) for v in ("default", "ir_mul", "reuse-plan")),
    }
    assert ("fused", "reuse-plan") not in pairs("tp")  # a conv-level variant
    assert ("cuequivariance", "ir_mul") in pairs("tp")


@pytest.mark.parametrize(("level", "implementation", "variant", "have"), [
    ("conv", "e3nn", "ir_mul", "its conv variants: default, jit"),
    ("tp", "fused", "reuse-plan", "its tp variants: default"),
    ("tp", "cuequivariance", "reuse-plan", "its tp variants: default, ir_mul"),
])
def test_a_variant_asked_for_explicitly_but_absent_is_unavailable(level, implementation,
                                                                  variant, have):
    [case] = expand(level=level, workloads=[WORKLOADS[level]], implementations=[implementation],
                    directions=["forward"], precisions=["float32"], batches=[BATCHES[level]],
                    device="cpu", variants=[variant])
    row = run_case(case, SETTINGS)
    assert row["status"] == "unavailable"
    assert row["reason"] == f"{implementation} has no {level} variant {variant!r}; {have}"
