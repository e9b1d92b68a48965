"""The machine's measured peak FLOP/s and memory bandwidth, for the roofline.

Peak compute is the best of a few large matrix multiplications (what the machine's BLAS or
cuBLAS reaches, not a datasheet number); bandwidth is the best of a few copies of a buffer
much larger than the last-level cache, counted as bytes read plus bytes written.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from equibench.environment import capture, machine_label
from equibench.files import atomic_write


def _best_seconds(fn, device: str, repeats: int) -> float:
    fn()  # warm-up: thread pools, cuBLAS handles
    best = float("inf")
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - t0)
    return best


def peak_gflops(device: str, dtype: torch.dtype, n: int = 2048, repeats: int = 5) -> float:
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    return 2 * n**3 / _best_seconds(lambda: a @ b, device, repeats) / 1e9


def bandwidth_gbps(device: str, nbytes: int = 512 * 2**20, repeats: int = 5) -> float:
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / _best_seconds(lambda: dst.copy_(src), device, repeats) / 1e9


def probe(device: str, threads: int = 0) -> dict:
    if threads > 0:
        torch.set_num_threads(threads)
    env = capture(device)
    return {
        "device": device,
        "machine": machine_label(env),
        "host": env["host"],
        "threads": torch.get_num_threads(),
        "peak_gflops": {"float32": peak_gflops(device, torch.float32),
                        "float64": peak_gflops(device, torch.float64)},
        "bandwidth_gbps": bandwidth_gbps(device),
    }


def write_probe(devices: list[str], out: str | Path, threads: int = 0) -> Path:
    out = Path(out)
    data = {d: probe(d, threads) for d in devices}
    with atomic_write(out, "w") as f:
        json.dump(data, f, indent=2)
    return out
