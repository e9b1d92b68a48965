"""The GPU compile check (``equibench gpu-compile``): every Triton kernel of the presets'
fused cases compiles for sm_80 and sm_90 without spills, and the check fails on a planted
compile error and a planted spill. Compiling needs Triton without its interpreter, which
the kernel tests turn on in this process: each check runs in a process of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from equibench.kernels.occupancy import ARCHITECTURES, occupancy

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9 warns while it is unset
    return env


def test_occupancy_follows_the_calculator_rules() -> None:
    h100 = ARCHITECTURES["sm_90"]
    # 32 registers, 4 warps: the 64 warp slots of an SM are the limit
    small = occupancy(h100, 32, 0, 4)
    assert (small.blocks_per_sm, small.fraction, small.limiter) == (16, 1.0, "warps")
    # 255 registers: 8192 per warp, 8 warps per SM, 2 blocks of 4 warps
    full = occupancy(h100, 255, 0, 4)
    assert (full.blocks_per_sm, full.fraction, full.limiter) == (2, 0.125, "registers")
    # 100 KiB of shared memory per block (+1 KiB reserved): 2 blocks fit in 228 KiB
    shared = occupancy(h100, 32, 100 * 1024, 4)
    assert (shared.blocks_per_sm, shared.limiter) == (2, "shared memory")
    assert occupancy(ARCHITECTURES["sm_80"], 32, 200 * 1024, 4).blocks_per_sm == 0
    with pytest.raises(ValueError, match="warps per block"):
        occupancy(h100, 32, 0, 64)


def test_a_planted_compile_error_and_a_forced_spill_fail_the_check() -> None:
    """``tl.dot`` with K = 4 runs in the interpreter and fails to compile; a kernel held to
    32 registers spills (the same kernel without the cap does not)."""
    run = subprocess.run([sys.executable, str(ROOT / "tests" / "planted_gpu_kernels.py")],
                         capture_output=True, text=True, env=_env(), timeout=300, check=True)
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    errors = [r for r in rows if r["planted"] == "compile error"]
    assert {r["arch"] for r in errors} == {"sm_80", "sm_90"}
    assert all(r["problem"] == "compile error" and "K >= " in r["error"] for r in errors)
    spills = {(r["arch"], r["maxnreg"]): r for r in rows if r["planted"] == "spill"}
    for arch in ("sm_80", "sm_90"):
        assert spills[arch, 32]["problem"] == "spills" and spills[arch, 32]["spill_stores"] > 0
        assert spills[arch, None]["problem"] is None and spills[arch, None]["registers"] > 32


@pytest.mark.slow
def test_every_kernel_of_the_presets_compiles_for_a100_and_h100(tmp_path: Path) -> None:
    """The CI check: the quick and full presets' kernels for every architecture this
    Triton targets (sm_80 and sm_90 at least; sm_100 with Triton 3.9); exit 0 means no
    compile error and no spill, shared memory or grid over the limit in quick's."""
    out = tmp_path / "gpu-kernels.parquet"
    run = subprocess.run(
        [sys.executable, "-m", "equibench.cli", "gpu-compile", "--preset", "quick,full",
         "--out", str(out)],
        capture_output=True, text=True, env=_env(), timeout=1200, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    frame = pd.read_parquet(out)
    assert set(frame["arch"]) >= {"sm_80", "sm_90"}
    assert {"tp_triton._fwd", "tp_triton._bwd_x", "tp_triton._bwd_y", "tp_triton._bwd_w",
            "sc_triton._poly"} <= set(frame["kernel"])
    assert (frame["error"] == "").all() and (frame["registers"] > 0).all()
    assert set(frame["dtype"]) == {"fp32", "fp64"}
    # the wrappers' launch grids against the compiled kernels: within CUDA's limits, and
    # one thread per accumulator element (tp) or channel (sc) in every configuration
    for row in frame.itertuples():
        grid = [int(n) for n in row.grid.split("x")]
        assert 0 < grid[0] < 2**31 and all(0 < n <= 65535 for n in grid[1:]), row
        block = dict(p.split("=") for p in row.block.split())
        spec = dict(p.split("=") for p in row.specialization.split())
        per_program = (int(block["BZ"]) * int(spec["BU"]) if "BZ" in block
                       else int(block["BC"]))
        assert per_program == 32 * row.num_warps, row
    quick = frame[frame["presets"].str.contains("quick")]
    assert len(quick) and (quick["spill_stores"] == 0).all()
