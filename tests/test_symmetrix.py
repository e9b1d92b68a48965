"""Symmetrix-XL as a MACE backend: its inference is gated against the float64 e3nn model
like every backend's (a planted error of the tolerance's size fails), and what it cannot
run says why."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("mace.modules", exc_type=ImportError)

from equibench.implementations.mace import symmetrix  # noqa: E402

from equibench.cases import Case  # noqa: E402
from equibench.measure import MeasureConfig  # noqa: E402
from equibench.precision import get_precision  # noqa: E402
from equibench.runner import RunSettings, run_case  # noqa: E402

QUICK = RunSettings(measure=MeasureConfig(min_repeats=1, max_repeats=1, budget_s=0, warmup=0))
TOLERANCE = get_precision("float32").tolerance

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def _its_own_jit_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Symmetrix-XL's usual JIT cache, not one a cold-start case earlier in this process
    pointed at an empty directory: generating and compiling a model's kernels takes it
    minutes, once per model and machine."""
    monkeypatch.delenv("SYMMETRIX_JIT_CACHE", raising=False)


def _case(variant: str = "oeq", direction: str = "inference", precision: str = "float32",
          mode: str = "eager") -> Case:
    # One molecule: one calculator to plan, the least work that exercises the backend.
    return Case("model", "mace-qm9", "symmetrix", variant, direction, precision, 1, "cpu",
                mode=mode)


def _needs_symmetrix() -> None:
    if reason := symmetrix.unavailable_reason("cpu"):
        pytest.skip(reason)


@pytest.mark.slow
def test_inference_passes_the_float32_gate_and_names_what_ran() -> None:
    _needs_symmetrix()
    row = run_case(_case(), QUICK)
    assert row["status"] == "ok", row.get("reason")
    assert row["max_scaled_err"] <= TOLERANCE
    assert row["equivariance_err"] <= 1e-4
    path = row["extra"]["code_path"]["path"]
    assert path.startswith(f"{symmetrix.PACKAGE} 0.1.1: native backend cpu"), path


@pytest.mark.slow
def test_an_error_of_the_tolerance_in_its_forces_fails_the_gate(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _needs_symmetrix()
    honest = symmetrix.SymmetrixModel.forward

    def planted(self: symmetrix.SymmetrixModel, data: dict, *args: object,
                **kwargs: object) -> dict[str, torch.Tensor]:
        out = honest(self, data, *args, **kwargs)
        return {**out, "forces": out["forces"] * (1 + 2 * TOLERANCE)}

    monkeypatch.setattr(symmetrix.SymmetrixModel, "forward", planted)
    row = run_case(_case(), QUICK)
    assert row["status"] == "incorrect", row.get("reason")
    assert "forces" in row["reason"]


@pytest.mark.parametrize(("case", "says"), [
    (_case(direction="train_step"), "no gradients with respect to the weights"),
    (_case(precision="amp-bfloat16"), "float32 and float64"),
    (_case(mode="compile"), "not a PyTorch program"),
])
def test_what_it_cannot_run_is_unavailable_with_the_reason(case: Case, says: str) -> None:
    row = run_case(case, QUICK)
    assert row["status"] == "unavailable" and says in row["reason"], row.get("reason")


@pytest.mark.slow
def test_a_model_its_converter_refuses_is_unavailable_with_its_reason() -> None:
    _needs_symmetrix()
    row = run_case(_case(variant="small"), QUICK)  # max_ell 2: the converter takes 3 only
    assert row["status"] == "unavailable", row.get("reason")
    assert "converter does not take this model" in row["reason"]
