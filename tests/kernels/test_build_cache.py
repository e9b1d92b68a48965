"""The CPU kernels are built once per kernel and dtype, on first call, and reused by later
processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from equibench.kernels import KernelUnavailable, TPDescriptor
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


# A compiler caught while it writes its output: half an object file, then a wait for the
# kill. Every other call (--version, which names the build; the link) is the real one. A
# compiler that ninja starts as the kill lands can miss it and holds the build's lock until
# it ends: the wait is short.
_STALLING_CXX = """#!/bin/sh
case " $* " in
  *" -c "*)
    prev=""
    for arg in "$@"; do [ "$prev" = "-o" ] && out="$arg"; prev="$arg"; done
    printf 'half an object' > "$out"
    exec sleep 20;;
esac
exec c++ "$@"
"""


@pytest.mark.slow
def test_a_build_killed_midway_leaves_nothing_the_next_takes_for_done(tmp_path: Path) -> None:
    """A timeout or a cancelled job kills a build with its compilers: the next build must
    neither hang on it nor link what it left half written."""
    cxx = tmp_path / "stalling-c++"
    cxx.write_text(_STALLING_CXX)
    cxx.chmod(0o755)
    cache = tmp_path / "cache"
    proc = subprocess.Popen([sys.executable, "-c", _BUILD], start_new_session=True,
                            env=dict(os.environ, EQUIBENCH_KERNEL_CACHE=str(cache),
                                     CXX=str(cxx)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not list(cache.glob("*/*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.01)  # until a compiler writes its output
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert list(cache.glob("*/*.tmp")), "the build ended before it could be killed"
    assert not list(cache.glob("*/*.so"))
    rebuilt = _build_in_subprocess(cache)
    assert Path(rebuilt["path"]).exists()
