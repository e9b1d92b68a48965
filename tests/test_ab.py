"""benchmarks/ab.py, CI's A/B stage: its verdicts, the previous commit it finds (or why
there is none), its worktrees and the import finder that keeps each side in its own tree.
The timing itself is what CI runs (minutes); nothing here starts a side."""

from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "ab.py"
ROUNDS = 9


@functools.cache
def _ab() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ab", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def _noisy(factor: float) -> tuple[list[float], list[float]]:
    """Round medians of a base and a head ``factor`` times slower, on a machine whose
    speed moves 0.7-1.5x from round to round (the same for both sides of a round)."""
    machine = [1.0, 1.5, 0.7, 1.2, 0.9, 1.4, 1.0, 0.8, 1.1]
    wobble = [1.02, 0.97, 1.01, 0.99, 1.03, 0.98, 1.0, 1.01, 0.99]  # within-round noise
    base = [1e-3 * m for m in machine]
    head = [1e-3 * m * w * factor for m, w in zip(machine, wobble, strict=True)]
    return base, head


def test_a_doubled_head_fails_and_the_same_code_passes() -> None:
    ab = _ab()
    doubled = ab.judge("conv forward", *_noisy(2.0), ab.FACTOR)
    assert doubled.status == "SLOWER" and doubled.fails
    assert doubled.ratio == pytest.approx(2.0, rel=0.03)
    assert doubled.q1 <= doubled.ratio <= doubled.q3
    assert doubled.rounds == ROUNDS
    same = ab.judge("conv forward", *_noisy(1.0), ab.FACTOR)
    assert same.status == "ok" and not same.fails
    faster = ab.judge("conv forward", *_noisy(0.5), ab.FACTOR)
    assert faster.status == "faster" and not faster.fails
    # Just past the factor fails; just below passes.
    assert ab.judge("x", [1.0] * 3, [1.31] * 3, 1.3).fails
    assert not ab.judge("x", [1.0] * 3, [1.29] * 3, 1.3).fails


def test_rounds_must_pair() -> None:
    with pytest.raises(ValueError, match="9 base rounds against 8 head rounds"):
        _ab().judge("tp forward", [1.0] * 9, [1.0] * 8, 1.3)


def test_a_slowdown_stands_only_when_measured_again() -> None:
    ab = _ab()
    first = ab.judge("sc forward", [1.0] * 5, [1.5] * 5, 1.3)
    confirmed = ab.confirm(first, ab.judge("sc forward", [1.0] * 5, [1.4] * 5, 1.3))
    assert confirmed.fails and confirmed.ratio == pytest.approx(1.4)
    assert "confirmed; first 1.500x" in confirmed.line()
    noise = ab.confirm(first, ab.judge("sc forward", [1.0] * 5, [1.05] * 5, 1.3))
    assert noise.status == "ok" and not noise.fails
    assert "not confirmed" in noise.line()
    crashed = ab.Verdict("sc forward", "HEAD FAILED", reason="head: RuntimeError: boom")
    assert ab.confirm(first, crashed).fails


def test_report_lines() -> None:
    ab = _ab()
    lines = ab.report([ab.judge("tp forward", [2e-3] * 3, [4e-3] * 3, 1.3),
                       ab.Verdict("mace-oeq inference", "not compared (base failed)",
                                  reason="base (abc): ImportError: x")], 1.3).splitlines()
    assert "fails past 1.3x" in lines[0]
    assert lines[1].split()[2:5] == ["2.000", "4.000", "2.000x"] and "SLOWER" in lines[1]
    assert lines[2].endswith("not compared (base failed): base (abc): ImportError: x")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def _commit(repo: Path, text: str) -> str:
    (repo / "file.txt").write_text(text)
    _git(repo, "add", "file.txt")
    _git(repo, "commit", "-q", "-m", text)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "-q")
    return path


def test_the_base_is_the_first_parent(repo: Path) -> None:
    first = _commit(repo, "one")
    _commit(repo, "two")
    assert _ab().resolve_commit(repo, "HEAD~1") == (first, "")


def test_a_root_commit_or_a_shallow_clone_skips(repo: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    ab = _ab()
    _commit(repo, "one")
    commit, why = ab.resolve_commit(repo, "HEAD~1")
    assert commit is None and "root commit" in why
    assert ab.main(["--repo", str(repo)]) == 0
    assert "[ab] skipped: HEAD~1 does not exist: HEAD is the root commit" in \
        capsys.readouterr().out

    _commit(repo, "two")
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    commit, why = ab.resolve_commit(shallow, "HEAD~1")
    assert commit is None and "shallow clone" in why and "--depth 2" in why
    assert ab.main(["--repo", str(shallow)]) == 0


def test_the_worktree_holds_the_commit_and_goes_away(repo: Path, tmp_path: Path) -> None:
    first = _commit(repo, "one")
    _commit(repo, "two")
    with _ab().worktree(repo, first, tmp_path) as tree:
        assert (tree / "file.txt").read_text() == "one"
        assert (repo / "file.txt").read_text() == "two"
        assert len(_git(repo, "worktree", "list").splitlines()) == 2
    assert not tree.exists()
    assert len(_git(repo, "worktree", "list").splitlines()) == 1


def test_a_base_that_cannot_start_is_told_apart(tmp_path: Path) -> None:
    """A broken previous commit must not fail the commit that repairs it: the stage skips."""
    ab = _ab()
    broken = ab.Side("base", "0" * 40, tmp_path)  # no pyproject.toml: its host exits at once
    with pytest.raises(ab.BaseUnavailable, match="exited before it started"):
        ab.run_stage(broken, broken, ab.CASES[:1], ab.Settings())


def test_each_side_imports_its_own_tree(tmp_path: Path) -> None:
    """The editable install maps ``equibench.kernels`` to the main checkout's ``kernels/``;
    a side's finder maps it, as its pyproject says, to its own tree."""
    tree = tmp_path / "tree"
    for directory, value in (("top", "top"), ("elsewhere", "sub")):
        (tree / directory).mkdir(parents=True)
        (tree / directory / "__init__.py").write_text(f"VALUE = {value!r}\n")
    (tree / "top" / "plain.py").write_text("VALUE = 'plain'\n")
    (tree / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"abtop" = "top"\n"abtop.sub" = "elsewhere"\n')
    ab = _ab()
    finder = ab._TreeFinder(ab.tree_packages(tree))
    sys.meta_path.insert(0, finder)
    try:
        import abtop.plain
        import abtop.sub

        assert (abtop.sub.VALUE, abtop.plain.VALUE) == ("sub", "plain")
        assert Path(abtop.sub.__file__) == tree / "elsewhere" / "__init__.py"
    finally:
        sys.meta_path.remove(finder)
        for name in ("abtop", "abtop.sub", "abtop.plain"):
            sys.modules.pop(name, None)
