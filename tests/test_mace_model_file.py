"""Your own MACE model: a mace-torch model saved with ``torch.save`` (as mace-torch's
training writes it) is the model of a case, variant ``file:PATH``, at the model and md
levels, on e3nn and on the fused convolution; a missing file, a file without a MACE model
and a structure with an element the model does not know give clear reasons."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

pytest.importorskip("mace.modules", exc_type=ImportError)

from settings_for_tests import ONE_REPEAT  # noqa: E402

from equibench import names  # noqa: E402
from equibench.cases import Case  # noqa: E402
from equibench.precision import get_precision  # noqa: E402
from equibench.runner import run_case, run_cases  # noqa: E402

ELEMENTS = (1, 6, 7, 8, 9)  # QM9's: H, C, N, O, F (water is H and O)


# One thread (conftest): the cases check correctness, and stay quick and steady on two
# shared cores.
pytestmark = pytest.mark.usefixtures("one_thread")


def save_model(path: Path, elements: tuple[int, ...] = ELEMENTS) -> Path:
    """A small ``ScaleShiftMACE`` with seeded weights (seed 7: not the cases' seed, so the
    case runs the file's weights, not a model it could have built itself), saved whole."""
    from equibench.implementations.mace.models import VARIANTS, build_model

    torch.save(build_model(VARIANTS["small"], elements, avg_num_neighbors=9.0, seed=7), path)
    return path


@pytest.fixture(scope="module")
def model_file(tmp_path_factory) -> Path:
    return save_model(tmp_path_factory.mktemp("mace") / "mine.model")


def case(level: str, workload: str, backend: str, path: Path | str) -> Case:
    direction = "nve" if level == "md" else "inference"
    return Case(level, workload, backend, f"file:{path}", direction, "float32", 2, "cpu")


@pytest.mark.slow
def test_saved_model_runs_at_both_levels_and_is_described(model_file: Path,
                                                          tmp_path: Path) -> None:
    cases = [case(level, workload, backend, model_file)
             for level, workload in (("model", "mace-qm9"), ("md", "water-box"))
             for backend in ("e3nn", "fused")]
    assert [p for c in cases for p in names.problems(c)] == []
    frame = run_cases(cases, ONE_REPEAT, tmp_path / "rows.parquet", progress=False)
    rows = {(row["level"], row["implementation"]): row for _, row in frame.iterrows()}
    assert len(rows) == 4
    if rows["md", "fused"]["status"] == "unavailable":
        pytest.skip(rows["md", "fused"]["reason"])  # no C++ compiler here
    for row in rows.values():
        assert row["status"] == "ok", row["reason"]
        assert row["variant"] == f"file:{model_file}"
        assert row["max_scaled_err"] <= get_precision("float32").tolerance
        model = json.loads(row["extra"])["model"]
        assert model["file"] == str(model_file)
        assert model["sha256"] == hashlib.sha256(model_file.read_bytes()).hexdigest()
        assert model["class"] == "mace.modules.models.ScaleShiftMACE"
        assert model["r_max"] == 5.0 and model["num_interactions"] == 2
        assert model["hidden_irreps"] == "32x0e+32x1o"
        assert model["elements"] == list(ELEMENTS) and model["avg_num_neighbors"] == 9.0


def test_the_case_runs_the_saved_weights(model_file: Path) -> None:
    from equibench.implementations.mace.bench import prepare

    built = prepare(case("model", "mace-qm9", "e3nn", model_file), torch.float64, seed=0)
    saved = torch.load(model_file, weights_only=False).state_dict()
    for model in (built.model, built.reference_model):
        state = model.state_dict()
        assert state.keys() == saved.keys()
        assert all(torch.equal(state[key], saved[key]) for key in saved)


def test_missing_file_is_named_before_any_process(tmp_path: Path) -> None:
    missing = tmp_path / "missing.model"
    for level, workload in (("model", "mace-qm9"), ("md", "water-box")):
        found = names.problems(case(level, workload, "e3nn", missing))
        assert found == [f"MACE model file {str(missing)!r} not found"]


def test_file_without_a_mace_model_is_unavailable(tmp_path: Path) -> None:
    state_dict = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, state_dict)
    row = run_case(case("md", "water-box", "e3nn", state_dict), ONE_REPEAT)
    assert row["status"] == "unavailable"
    assert "holds a builtins.dict; expected a whole mace-torch model" in row["reason"]
    text = tmp_path / "notes.txt"
    text.write_text("not a model")
    row = run_case(case("model", "mace-qm9", "e3nn", text), ONE_REPEAT)
    assert row["status"] == "unavailable" and "is not a file torch.load reads" in row["reason"]


def test_elements_the_model_does_not_know_are_unavailable(tmp_path: Path) -> None:
    water_only = save_model(tmp_path / "water.model", elements=(1, 8))
    row = run_case(case("model", "mace-qm9", "e3nn", water_only), ONE_REPEAT)
    assert row["status"] == "unavailable"
    assert row["reason"] == (f"mace-qm9 has elements [6, 7, 9] that the model "
                             f"{str(water_only)!r} does not know (its elements: [1, 8])")
    row = run_case(case("md", "diamond", "fused", water_only), ONE_REPEAT)
    assert row["status"] == "unavailable" and "diamond has elements [6]" in row["reason"]
