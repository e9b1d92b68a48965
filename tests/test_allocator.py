"""The CPU allocator of case processes (equibench.allocator)."""

import os
import subprocess
import sys

import pandas as pd
import pytest

from equibench import allocator
from equibench.measure import rss_available

TCMALLOC = allocator.find_tcmalloc()
needs_tcmalloc = pytest.mark.skipif(TCMALLOC is None, reason=allocator.INSTALL_HINT)

# Page faults of eight calls that each return a fresh 48 MiB tensor, as a timed call does.
_FAULTS = """
import resource, torch
from equibench import allocator
torch.ones(1)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    torch.ones(48 * 2**20, dtype=torch.uint8)
print(allocator.active(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

# The peak-memory measurement under the preloaded allocator sees a 256 MiB temporary even
# after earlier calls left that memory free in the allocator.
_PEAK = """
import torch
from equibench.measure import peak_memory
def allocate():
    buf = torch.ones(256 * 2**20, dtype=torch.uint8)
    return int(buf[::4096].sum())
for _ in range(3):
    allocate()
print(*peak_memory(allocate, "cpu"))
"""

# Live tensor bytes of a small training step, whose activations (32 MiB each) cross glibc's
# mmap threshold and whose many small tensors do not.
_TENSOR_PEAK = """
import torch
from equibench.measure import peak_tensor_memory
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.Tanh(), torch.nn.Linear(1024, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8192, 256)
def step():
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()
for _ in range(3):
    step()
print(*peak_tensor_memory(step, "cpu"))
"""


def _python(code: str, preload: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if preload:
        env["LD_PRELOAD"] = preload
    return subprocess.run([sys.executable, "-c", code], env=env, check=True,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]


def test_unknown_choice_is_named():
    with pytest.raises(ValueError, match="jemalloc"):
        allocator.preload_for("jemalloc")
    assert allocator.preload_for("system") is None


def test_preloaded_restores_the_environment(monkeypatch):
    monkeypatch.setenv("LD_PRELOAD", "/lib/other.so")
    with allocator.preloaded("/lib/x.so"):
        assert os.environ["LD_PRELOAD"] == "/lib/x.so /lib/other.so"
    assert os.environ["LD_PRELOAD"] == "/lib/other.so"
    monkeypatch.delenv("LD_PRELOAD")
    with allocator.preloaded(None):
        assert "LD_PRELOAD" not in os.environ


@needs_tcmalloc
def test_tcmalloc_reuses_what_glibc_faults_in_again():
    name, glibc_faults = _python(_FAULTS, None).split()
    assert name == "glibc"
    name, tc_faults = _python(_FAULTS, TCMALLOC).split()
    assert name == "tcmalloc"
    # 48 MiB = 12,288 pages: glibc maps it afresh on (almost) every call.
    assert int(glibc_faults) > 4 * 12_288
    assert int(tc_faults) < 2 * 12_288


@needs_tcmalloc
@pytest.mark.skipif(not rss_available(), reason="needs /proc/self/clear_refs (Linux)")
@pytest.mark.parametrize("preload", [None, TCMALLOC], ids=["glibc", "tcmalloc"])
def test_peak_memory_sees_reused_memory(preload):
    peak, method = _python(_PEAK, preload).split()
    assert method == "rss_growth"
    assert 0.9 * 256 * 2**20 < int(peak) < 1.5 * 256 * 2**20


@pytest.mark.slow
@needs_tcmalloc
def test_tensor_peak_does_not_depend_on_the_allocator():
    glibc = _python(_TENSOR_PEAK, None).split()
    tcmalloc = _python(_TENSOR_PEAK, TCMALLOC).split()
    assert glibc == tcmalloc
    peak, method = glibc
    # The linear layer's output and tanh's, saved for the backward (32 MiB each), and the
    # gradient flowing back through them (measured: 95 MiB).
    assert method == "torch_profiler" and 2 * 32 * 2**20 <= int(peak) < 4 * 32 * 2**20


@pytest.mark.slow
@needs_tcmalloc
def test_case_rows_record_the_allocator(tmp_path):
    out = tmp_path / "rows.parquet"
    subprocess.run([sys.executable, "-m", "equibench.cli", "run", "--level", "tp",
                    "--workload", "nequip-water", "--implementation", "e3nn", "--batch", "8",
                    "--budget", "0.05", "--quiet", "--out", str(out)],
                   check=True, capture_output=True, text=True)
    [row] = pd.read_parquet(out).to_dict("records")
    assert row["status"] == "ok"
    assert row["cpu_allocator"] == "tcmalloc"
