"""The CPU kernels are built once per kernel and dtype, on first call, and reused by later
processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from equibench.kernels import KernelUnavailable, TPDescriptor, cpu_build
from equibench.kernels.cpu_build import cpu_kernels

_BUILD = """
import json, sys, time, torch
from equibench.kernels import TPDescriptor
from equibench.kernels.cpu_build import cpu_kernels
t = time.perf_counter()
desc = TPDescriptor.from_e3nn("5x0e+5x1o", "1x1o", "5x1e", [(1, 0, 0, "uvu", True)])
k = cpu_kernels(desc)
k.tp_forward(*(torch.ones(2, n) for n in (desc.in1_dim, desc.in2_dim, desc.weight_numel)))
print(json.dumps({"path": str(k.paths["tp_fwd", "f32"]), "seconds": time.perf_counter() - t}))
"""


def _build_in_subprocess(cache: Path) -> dict:
    env = dict(os.environ, EQUIBENCH_KERNEL_CACHE=str(cache))
    out = subprocess.run([sys.executable, "-c", _BUILD], env=env, capture_output=True,
                         text=True, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_second_process_reuses_the_build(tmp_path: Path) -> None:
    first = _build_in_subprocess(tmp_path)
    lib = Path(first["path"])
    assert lib.is_relative_to(tmp_path) and lib.exists()
    objects = {p: p.stat().st_mtime_ns for p in lib.parent.iterdir() if p.suffix in (".o", ".so")}
    # a forward in float32 built the forwards (tp and conv) in float32 alone
    assert [p.name for p in objects if p.suffix == ".so"] == [lib.name]
    assert lib.name.startswith("eqb_fwd_")
    second = _build_in_subprocess(tmp_path)
    assert second["path"] == first["path"]
    assert {p: p.stat().st_mtime_ns for p in objects} == objects  # nothing recompiled


def test_missing_compiler_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("EQUIBENCH_KERNEL_CACHE", str(tmp_path))
    desc = TPDescriptor.from_e3nn("7x0e", "1x0e", "7x0e", [(0, 0, 0, "uvu", True)])
    x = torch.ones(2, 7)
    with pytest.raises(KernelUnavailable, match="no C\\+\\+ compiler"):
        cpu_kernels(desc).tp_forward(x, torch.ones(2, 1), torch.ones(2, 7))


def test_a_build_leaves_the_flags_that_name_the_next(tmp_path: Path) -> None:
    """A library's name hashes its link flags: a build must not change them for the next
    build of the process (torch's load() appends to the list it is given)."""
    before = list(cpu_build.LDFLAGS)
    cpu_build.build_library({"f32": 'extern "C" int eqb_probe() { return 1; }\n'}, tmp_path,
                            "eqb_probe")
    assert cpu_build.LDFLAGS == before


@pytest.mark.slow
def test_a_lock_left_by_a_killed_build_does_not_hang_the_next(tmp_path: Path) -> None:
    """torch's load() waits without limit while its ``lock`` file exists; a build killed
    midway leaves one. The next build, the only one holding the directory, removes it."""
    source = {"f32": 'extern "C" int eqb_stale() { return 2; }\n'}
    (tmp_path / "lock").write_text("")  # as a killed build leaves it
    out = subprocess.run(
        [sys.executable, "-c", "import sys; from pathlib import Path; "
         "from equibench.kernels import cpu_build; "
         f"lib, _ = cpu_build.build_library({source!r}, Path(sys.argv[1]), 'eqb_stale'); "
         "print(lib.eqb_stale())", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "2"
    assert not (tmp_path / "lock").exists()
