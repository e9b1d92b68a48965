"""The gate's comparison: each output at its own scale, floors, statuses, dtypes."""

from __future__ import annotations

import pytest
import torch

from equibench.correctness import INCORRECT_FROM, check_dtypes, check_outputs, errors
from equibench.precision import PRECISIONS


def test_a_small_output_is_judged_at_its_own_scale():
    """Forces of 0.05 replaced by zeros were an error of 0.05 when errors were scaled by
    max(|ref|, 1): within autocast's bound. At their own scale it is 1."""
    ref = torch.full((10, 3), 0.05, dtype=torch.float64)
    verdict = check_outputs({"f": torch.zeros(10, 3)}, {"f": ref}, 0.05)
    assert verdict.status == "incorrect" and verdict.max_scaled_err == pytest.approx(1.0)
    scaled = check_outputs({"f": ref * 1.01}, {"f": ref}, 1e-4)
    assert scaled.status == "incorrect" and scaled.max_scaled_err == pytest.approx(0.01)


@pytest.mark.parametrize("name", list(PRECISIONS))
def test_every_tolerance_lies_below_its_planted_error(name):
    precision = PRECISIONS[name]
    assert precision.tolerance < precision.planted < INCORRECT_FROM
    ref = torch.linspace(-2, 3, 50, dtype=torch.float64)
    verdict = check_outputs({"y": ref * (1 + precision.planted)}, {"y": ref},
                            precision.tolerance, low_precision=precision.low)
    assert verdict.status == ("unverifiable" if precision.low else "incorrect")


def test_low_precisions_are_unverifiable_between_tolerance_and_half_the_scale():
    ref = torch.linspace(1, 2, 8, dtype=torch.float64)
    for factor, status in ((1.01, "ok"), (1.2, "unverifiable"), (1.6, "incorrect"),
                           (0.0, "incorrect"), (-1.0, "incorrect")):
        verdict = check_outputs({"y": ref * factor}, {"y": ref}, 5e-2, low_precision=True)
        assert verdict.status == status, (factor, verdict.message)


def test_the_worst_output_decides_and_is_named():
    a = torch.ones(4, dtype=torch.float64)
    b = torch.full((3,), 1e-6, dtype=torch.float64)
    verdict = check_outputs({"a": a, "b": b * 1.5}, {"a": a, "b": b}, 1e-4)
    assert verdict.status == "incorrect" and verdict.worst == "b"


def test_floors_are_the_smallest_scale_an_output_is_judged_at():
    ref = torch.zeros(5, 3, dtype=torch.float64)
    rounding = torch.full((5, 3), 1e-7)
    assert errors(rounding, ref)[1] == float("inf")  # no floor: a zero must stay zero
    assert errors(torch.zeros(5, 3), ref)[1] == 0.0
    assert errors(rounding, ref, floor=0.01)[1] == pytest.approx(1e-5)
    assert check_outputs({"f": rounding}, {"f": ref}, 1e-4, floors={"f": 0.01}).passed


def test_missing_misshapen_and_non_finite_outputs_fail_and_a_broken_reference_raises():
    ref = {"y": torch.ones(3, dtype=torch.float64)}
    assert check_outputs({}, ref, 1e-4).status == "incorrect"
    assert check_outputs({"y": torch.ones(2)}, ref, 1e-4).status == "incorrect"
    assert check_outputs({"y": torch.tensor([1.0, float("nan"), 1.0])}, ref, 1e-4).status == \
        "incorrect"
    with pytest.raises(ValueError, match="empty"):
        check_outputs({"y": torch.ones(0)}, {"y": torch.ones(0, dtype=torch.float64)}, 1e-4)
    with pytest.raises(ValueError, match="no outputs"):
        check_outputs({}, {}, 1e-4)


def test_outputs_must_have_the_precision_s_dtype():
    f32 = PRECISIONS["float32"]
    assert check_dtypes({"y": torch.ones(2), "i": torch.ones(2, dtype=torch.long)},
                        f32.output_dtypes) is None
    assert "float64" in check_dtypes({"y": torch.ones(2, dtype=torch.float64)},
                                     f32.output_dtypes)
    amp = PRECISIONS["amp-bfloat16"]
    assert check_dtypes({"y": torch.ones(2, dtype=torch.bfloat16)}, amp.output_dtypes) is None
    assert check_dtypes({"y": torch.ones(2, dtype=torch.float16)}, amp.output_dtypes)
