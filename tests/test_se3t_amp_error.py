"""benchmarks/se3t_amp_error.py: layer-by-layer errors of an autocast step, on the small model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "se3t_amp_error.py"
spec = importlib.util.spec_from_file_location("se3t_amp_error", SCRIPT)
se3t_amp_error = importlib.util.module_from_spec(spec)
spec.loader.exec_module(se3t_amp_error)


def _measure(autocast: str) -> tuple[dict[str, float], list[tuple[float, str]]]:
    args = se3t_amp_error.parse(["--size", "small", "--batch", "2", "--autocast", autocast])
    return se3t_amp_error.measure(args)


def test_float32_matches_and_bfloat16_really_rounds() -> None:
    errors32, grads32 = _measure("none")
    errors16, grads16 = _measure("bfloat16")
    assert "blocks.0" in errors32 and "norms.0" in errors32
    assert list(errors32) == list(errors16)
    assert max(errors32.values()) < 1e-4 and grads32[0][0] < 1e-3
    # bfloat16 keeps 8 bits: the predictions move by far more than float32's rounding.
    assert errors16["pred"] > 1e-4
    assert grads16[0][0] > grads32[0][0]
    assert {name for _, name in grads16} == {name for _, name in grads32}


def test_main_prints_every_layer(capsys) -> None:  # noqa: ANN001
    assert se3t_amp_error.main(["--size", "small", "--batch", "2", "--autocast", "none",
                                "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "blocks.0" in out and "pred" in out and out.count("e-") >= 4
