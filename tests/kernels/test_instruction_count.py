"""Instruction counts of the generated CPU kernels (``kernels/instruction_count.py``) and the
regression check of ``benchmarks/instructions.py``."""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from equibench.kernels import KernelUnavailable
from equibench.kernels import instruction_count as ic

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = "nequip-water-1parity"  # a small workload: its kernels compile in about a second

needs_valgrind = pytest.mark.skipif(
    shutil.which("valgrind") is None,
    reason="valgrind is not installed (apt-get install valgrind): nothing can be counted",
)


@functools.cache
def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "instructions", REPO / "benchmarks" / "instructions.py"
    )
    module = importlib.util.module_from_spec(spec)
    # registered first: its dataclasses look their module up in sys.modules
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One kernel cache for the module's counts, so each kernel is compiled once."""
    return tmp_path_factory.mktemp("kernel-cache")


@pytest.mark.slow
@needs_valgrind
def test_count_is_identical_across_runs_and_rebuilds(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EQUIBENCH_KERNEL_CACHE", str(cache))
    first = ic.count_instructions(WORKLOAD, "tp_fwd", "f32", 8)
    assert ic.count_instructions(WORKLOAD, "tp_fwd", "f32", 8) == first
    monkeypatch.setenv("EQUIBENCH_KERNEL_CACHE", str(tmp_path))  # compiled again from nothing
    assert ic.count_instructions(WORKLOAD, "tp_fwd", "f32", 8) == first > 1_000


@needs_valgrind
@pytest.mark.parametrize("kernel", ["tp_dbwd", "conv_bwd", "conv_dbwd"])
def test_twice_the_work_counts_twice(
    kernel: ic.Kernel, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EQUIBENCH_KERNEL_CACHE", str(cache))
    small = ic.count_instructions(WORKLOAD, kernel, "f32", 8)
    double = ic.count_instructions(WORKLOAD, kernel, "f32", 16)  # conv: twice the edges
    assert 1.9 < double / small < 2.1


@pytest.mark.slow
@needs_valgrind
def test_symmetric_contraction_counts_twice_for_twice_the_nodes(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mace.modules", exc_type=ImportError)
    monkeypatch.setenv("EQUIBENCH_KERNEL_CACHE", str(cache))
    # the small model's block: its kernels compile in about a second; at 16 and 32 nodes
    # the scratch buffer each call allocates (a fixed cost) weighs little
    desc, channels = _script().sc_description("mace-small-product0")
    for kernel in ic.SC_KERNELS:
        small = ic.count_sc_instructions(desc, channels, kernel, "f32", 16)
        assert ic.count_sc_instructions(desc, channels, kernel, "f32", 16) == small > 1_000
        assert 1.9 < ic.count_sc_instructions(desc, channels, kernel, "f32", 32) / small < 2.1


def test_symmetric_contraction_workload_names_are_checked() -> None:
    pytest.importorskip("mace.modules", exc_type=ImportError)
    with pytest.raises(ValueError, match="mace-VARIANT-productK"):
        _script().sc_description("mace-nonesuch-product0")
    with pytest.raises(ValueError, match="product blocks"):
        _script().sc_description("mace-small-product9")


def test_missing_valgrind_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(KernelUnavailable, match="apt-get install valgrind"):
        ic.count_instructions(WORKLOAD, "tp_fwd")


def test_summary_line_is_read_by_event_name(tmp_path: Path) -> None:
    out = tmp_path / "cachegrind.out"
    out.write_text("desc: I1 cache: 32768 B\ncmd: ./driver 4\nevents: Dr Ir\nfl=a.cpp\n"
                   "fn=main\n1 5 7\nsummary: 120 345\n")  # fmt: skip
    assert ic.parse_cachegrind(out) == 345
    with pytest.raises(ValueError, match="no 'Bc'"):
        ic.parse_cachegrind(out, "Bc")


def _report(counts: dict[str, int], compiler: str = "c++ 12.2.0") -> dict:
    return {
        "toolchain": {"compiler": compiler, "libc": "glibc 2.36", "valgrind": "valgrind-3.19.0",
                      "flags": list(ic.FLAGS)},
        "cases": {key: {"instructions": n, "products": 64} for key, n in counts.items()},
    }  # fmt: skip


BASE = {"tp_fwd:mace-large:f32:64": 1_000_000, "tp_bwd:mace-large:f32:64": 2_000_000}


def test_compare_passes_identical_counts() -> None:
    lines, failed = _script().compare(_report(BASE), _report(BASE), 0.01)
    assert not failed
    assert "REGRESSION" not in "\n".join(lines)


def test_compare_flags_a_planted_regression_and_a_missing_case() -> None:
    compare = _script().compare
    grown = {**BASE, "tp_bwd:mace-large:f32:64": 2_100_000}  # +5 %
    lines, failed = compare(_report(BASE), _report(grown), 0.01)
    assert failed
    (line,) = [ln for ln in lines if ln.startswith("tp_bwd:mace-large")]
    assert "+5.00%" in line and "REGRESSION" in line
    assert not compare(_report(BASE), _report(grown), 0.06)[1]  # within a wider tolerance

    lines, failed = compare(_report(BASE), _report({"tp_fwd:mace-large:f32:64": 1_000_000}), 0.01)
    assert failed
    assert any("tp_bwd:mace-large" in ln and "missing" in ln for ln in lines)


def test_another_compiler_warns_and_does_not_fail() -> None:
    grown = {key: n * 2 for key, n in BASE.items()}
    lines, failed = _script().compare(_report(BASE), _report(grown, "c++ 14.1.0"), 0.01)
    assert not failed
    assert lines[0].startswith("WARNING") and "different compiler" in lines[0]
    assert any("c++ 14.1.0" in ln for ln in lines)


@needs_valgrind
def test_command_writes_counts_and_fails_on_a_regression(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("EQUIBENCH_KERNEL_CACHE", str(cache))
    main = _script().main
    case = f"tp_fwd:{WORKLOAD}:f32:8"
    out = tmp_path / "counts.json"
    assert main(["--case", case, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["toolchain"]["flags"] == list(ic.FLAGS)
    count = report["cases"][case]["instructions"]

    assert main(["--case", case, "--baseline", str(out)]) == 0
    assert "+0.00%  ok" in capsys.readouterr().out

    planted = copy.deepcopy(report)
    planted["cases"][case]["instructions"] = round(count / 1.05)  # now reads as +5 %
    baseline = tmp_path / "planted.json"
    baseline.write_text(json.dumps(planted))
    assert main(["--case", case, "--baseline", str(baseline)]) == 1
    assert "REGRESSION" in capsys.readouterr().out
