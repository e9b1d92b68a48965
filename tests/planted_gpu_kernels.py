"""Planted kernels for the GPU compile check (tests/test_gpu_compile.py), run in a process
of their own: compiling needs Triton without its interpreter.

``_dot_k4`` is a program Triton's CPU interpreter runs and its compiler rejects (``tl.dot``
with K = 4: a GPU's needs K >= 8); ``_many_live`` keeps 64 floats per thread live and is compiled
with ``maxnreg=32``, which forces spills. Prints one JSON line per planted job.
"""

from __future__ import annotations

import json

import torch
import triton
import triton.language as tl
from equibench.kernels.gpu_compile import compile_all, jobs, judge
from equibench.kernels.launch import Launch


@triton.jit
def _dot_k4(a_ptr, b_ptr, c_ptr):
    i = tl.arange(0, 16)
    k = tl.arange(0, 4)
    a = tl.load(a_ptr + i[:, None] * 4 + k[None, :])
    b = tl.load(b_ptr + k[:, None] * 16 + i[None, :])
    tl.store(c_ptr + i[:, None] * 16 + i[None, :], tl.dot(a, b))


@triton.autotune(configs=[triton.Config({"BLOCK": 2048}, num_warps=1),
                          triton.Config({"BLOCK": 2048}, num_warps=1, maxnreg=32)], key=[])
@triton.jit
def _many_live(x_ptr, out_ptr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i)
    y = tl.load(x_ptr + BLOCK + i)
    tl.store(out_ptr + i, tl.sum(x * y) * x + tl.sum(x) * y)


def main() -> None:
    f32 = torch.empty(4096, dtype=torch.float32, device="meta")
    launches = {"compile error": Launch(_dot_k4, lambda meta: (1,), (f32, f32, f32)),
                "spill": Launch(_many_live, lambda meta: (1,), (f32, f32))}
    for name, launch in launches.items():
        planned = list(jobs(launch, ["sm_80", "sm_90"]))
        results = compile_all([job for job, _ in planned], workers=1)
        for job, config in planned:
            result = results[job.key]
            print(json.dumps({"planted": name, "arch": job.arch,
                              "maxnreg": config.maxnreg, "registers": result.registers,
                              "spill_stores": result.spill_stores, "error": result.error,
                              "problem": judge(job, result, (1,)).problem}))


if __name__ == "__main__":
    main()
