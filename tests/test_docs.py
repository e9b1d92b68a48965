"""The documentation: generated reference pages are current, and the site builds strictly.

A committed page under docs/reference/ that differs from what `equibench.reference_pages`
generates from the code and the baselines now is stale: regenerate it with
`python -m equibench.reference_pages` and commit the result.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from equibench import reference_pages

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    # In a fresh process: other tests register implementations and workloads of their own
    # (plugins_for_tests, custom workloads), which the pages would then list.
    code = ("import json; from equibench import reference_pages; "
            "print(json.dumps(reference_pages.generate()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def test_reference_pages_are_current(generated: dict[str, str]) -> None:
    stale = [name for name, text in generated.items()
             if not (reference_pages.OUT / name).exists()
             or (reference_pages.OUT / name).read_text() != text]
    assert not stale, (f"stale generated pages in docs/reference/: {stale}; run "
                       "`python -m equibench.reference_pages` and commit them")


def test_no_unknown_page_under_reference(generated: dict[str, str]) -> None:
    """Every page in docs/reference/ is one the generator writes (none left behind)."""
    present = {p.name for p in reference_pages.OUT.glob("*.md")}
    assert present == set(generated)


def test_stale_page_is_detected(tmp_path: Path) -> None:
    generated = reference_pages.generate()  # in this process, as stale() generates
    for name, text in generated.items():
        (tmp_path / name).write_text(text)
    assert reference_pages.stale(tmp_path) == []
    (tmp_path / "statuses.md").write_text(generated["statuses.md"] + "an edit by hand\n")
    assert reference_pages.stale(tmp_path) == ["statuses.md"]


def test_every_status_has_a_meaning() -> None:
    from equibench.vocabulary import STATUSES

    assert set(STATUSES) <= set(reference_pages.STATUS_MEANING)


def test_measurements_page_names_machine_commit_and_date(generated: dict[str, str]) -> None:
    import pandas as pd

    page = generated["measurements.md"]
    for path in sorted((ROOT / "results" / "baselines").glob("*.parquet")):
        assert path.name in page
        if path.name == "gpu-kernels.parquet":  # compiled kernels, not results
            frame = pd.read_parquet(path, columns=["git_commit", "created", "triton"])
            assert all(str(frame[c].iloc[0]) in page for c in frame.columns)
            continue
        frame = pd.read_parquet(path, columns=["git_commit", "timestamp", "cpu_model"])
        for column in ("git_commit", "cpu_model"):
            for value in frame[column].unique():
                assert str(value) in page
        assert str(frame["timestamp"].min()) in page


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (it is in the `test` extra: "
                    "pip install -e '.[test]')")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
         str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "site" / "reference" / "measurements" / "index.html").exists()
