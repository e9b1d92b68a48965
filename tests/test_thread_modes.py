"""benchmarks/thread_modes.py: samples are split by the probe's mode, ratios per mode."""

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _thread_modes():
    path = REPO / "benchmarks" / "thread_modes.py"
    spec = importlib.util.spec_from_file_location("thread_modes", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _sample(probe_2t: float, e3nn_2t: float, fused_2t: float) -> dict[str, float]:
    return {"e3nn_1t": 12.8, "fused_1t": 0.73, "probe_1t": 0.345,
            "e3nn_2t": e3nn_2t, "fused_2t": fused_2t, "probe_2t": probe_2t}


def test_samples_split_by_the_probe_and_ratios_per_mode():
    modes = _thread_modes()
    usual = [_sample(0.33, 7.3, 0.38)] * 3
    slow = [_sample(0.65, 12.6, 0.46)] * 2
    summary = modes.summarize(usual + slow, threads=2)
    assert summary["samples"] == 5
    assert summary["usual"]["samples"] == 3 and summary["slow"]["samples"] == 2
    # p10 / median / p90 of identical samples: the value three times.
    assert summary["usual"]["ratio_1t"] == [pytest.approx(12.8 / 0.73, rel=1e-3)] * 3
    assert summary["usual"]["ratio_2t"][1] == pytest.approx(7.3 / 0.38, rel=1e-3)
    assert summary["slow"]["ratio_2t"][1] == pytest.approx(12.6 / 0.46, rel=1e-3)
    assert summary["slow"]["probe_2t"] == [0.65] * 3


def test_a_mode_without_samples_says_so():
    summary = _thread_modes().summarize([_sample(0.33, 7.3, 0.38)], threads=2)
    assert summary["slow"] == {"samples": 0}
