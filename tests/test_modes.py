"""The mode axis (equibench.modes): eager, torch.compile and torch.export cells, each
gated like any case, and a mode that cannot run says so."""

import math

import pytest

from equibench.cases import Case
from equibench.measure import MeasureConfig
from equibench.runner import RunSettings, run_case

FAST = MeasureConfig(min_repeats=2, max_repeats=3, budget_s=0.1, warmup=0, rounds=1)
SETTINGS = RunSettings(threads=1, measure=FAST, plugins=("plugins_for_tests",), timeout_s=300)


def case(impl: str, direction: str, mode: str) -> Case:
    return Case("tp", "nequip-water-1parity", impl, "default", direction, "float32", 8, "cpu",
                mode)


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    import plugins_for_tests  # noqa: F401 - registers the planted implementations


def test_eager_is_the_default_and_keeps_the_old_key():
    old = Case("tp", "w", "e3nn", "default", "forward", "float32", 8, "cpu")
    assert old.mode == "eager" and old.key == "tp/w/e3nn/default/forward/float32/8/cpu"
    assert Case.from_dict(old.to_dict() | {"mode": "export"}).key.endswith("/cpu/export")
    with pytest.raises(ValueError, match="unknown mode 'jit'"):
        Case("tp", "w", "e3nn", "default", "forward", "float32", 8, "cpu", "jit")


@pytest.mark.parametrize("mode", ["compile", "export"])
def test_a_kernel_torch_cannot_trace_is_unavailable_with_the_error(mode):
    eager = run_case(case("test-untraceable", "forward", "eager"), SETTINGS)
    assert eager["status"] == "ok", eager.get("reason")
    row = run_case(case("test-untraceable", "forward", mode), SETTINGS)
    assert row["status"] == "unavailable"
    # The error's first line, naming the operator, and the torch that raised it.
    assert row["reason"].startswith(f"{mode}: ") and "untraceable_scale" in row["reason"]
    assert "(torch 2." in row["reason"] and "\n" not in row["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["compile", "export"])
def test_a_wrong_result_under_a_mode_is_incorrect(mode):
    """The mode's outputs are gated: a 1% error planted in the product shows in every
    mode, compiled or exported."""
    row = run_case(case("test-wrong", "forward", mode), SETTINGS)
    assert row["status"] == "incorrect" and "exceeds tolerance" in row["reason"]


@pytest.mark.slow
def test_export_traces_the_derivatives_and_is_gated():
    """A double backward exported through autograd: every first and second derivative is
    an output of the program, each compared with the float64 reference; the cold start
    covers the export and the package's compilation."""
    row = run_case(case("e3nn", "double_backward", "export"),
                   RunSettings(**{**SETTINGS.__dict__, "cold_start": True}))
    assert row["status"] == "ok", row.get("reason")
    assert row["max_scaled_err"] <= row["tolerance"]
    assert row["cold_start_s"] > row["extra"]["first_call_s"] > 0
    assert "TORCHINDUCTOR_CACHE_DIR" in row["extra"]["cold_start_caches"]
    assert "AOTInductor" in row["extra"]["mode_detail"]


def test_without_cold_start_there_is_no_cold_start_figure():
    row = run_case(case("e3nn", "forward", "eager"), SETTINGS)
    assert row["status"] == "ok" and math.isnan(row.get("cold_start_s", math.nan))


def test_e3nns_own_jit_is_a_variant_gated_like_the_rest():
    row = run_case(Case("tp", "nequip-water-1parity", "e3nn", "jit", "backward", "float32", 8,
                        "cpu"), SETTINGS)
    assert row["status"] == "ok", row.get("reason")
    assert "TorchScript" in row["extra"]["code_path"]["path"]
