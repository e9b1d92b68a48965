"""A short autotune of our Triton kernels on a GPU: which configuration each kernel picks
and how long each candidate took, for the tensor product of ``mace-large`` (forward,
backward, double backward) and the symmetric contractions of the ``oeq`` MACE.

    python benchmarks/gpu_autotune.py --out autotune.json     # on a GPU (gpu_check.sh)
    python benchmarks/gpu_autotune.py --dry-run               # anywhere: the launches only

The candidates are the configurations ``equibench gpu-compile`` compiles (and that CI
checks for spills); this measures them. ``--dry-run`` records the same launches on
``meta`` tensors and prints how many configurations each would try, without a GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

from equibench import gpu_kernels
from equibench.workloads import get_tp_workload

WORKLOAD = "mace-large"
ROWS = 50_000  # tensor products (OpenEquivariance's batch)
NODES = 4_096  # nodes of the symmetric contraction
MODEL = "oeq"


def kernel_sets() -> list[gpu_kernels.KernelSet]:
    tp = gpu_kernels.KernelSet("tp", get_tp_workload(WORKLOAD).descriptor, torch.float32,
                               depth=3)
    sc = [gpu_kernels.KernelSet("sc", desc, torch.float32, channels, depth=3)
          for op, desc, channels in gpu_kernels._mace_parts(MODEL) if op == "sc"]
    return [tp, *sc]


def dry_run() -> int:
    from equibench.kernels.gpu_compile import configs

    for ks in kernel_sets():
        for launch in gpu_kernels.record_launches(ks):
            fn = launch.kernel.fn
            named = dict(zip([p.name for p in fn.params], launch.args, strict=False))
            n = len(configs(launch.kernel, named, launch.constexprs))
            print(f"{ks.op} {fn.__name__}: {n} configuration(s) to try")
    print("gpu_autotune --dry-run: every launch recorded; nothing run")
    return 0


def autotune(out: str) -> int:
    from equibench.kernels import sc_triton, tp_triton

    device = torch.device("cuda:0")
    report = []
    generator = torch.Generator(device=device).manual_seed(0)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, generator=generator)

    for ks in kernel_sets():
        start = time.perf_counter()
        if ks.op == "tp":
            d = ks.desc
            k = tp_triton.TritonKernels(d)
            x, y, w = randn(ROWS, d.in1_dim), randn(ROWS, d.in2_dim), randn(ROWS, d.weight_numel)
            g = randn(ROWS, d.out_dim)
            k.tp_forward(x, y, w)
            k.tp_backward(g, x, y, w)
            k.tp_double_backward(g, x, y, w, x, y, w)
            module, kernels = tp_triton, ("_fwd", "_bwd_x", "_bwd_y", "_bwd_w")
        else:
            k = sc_triton.ScTritonKernels(ks.desc)
            x = randn(NODES, ks.desc.rows("x"), ks.channels)
            for name in ("sc_fwd", "sc_bwd", "sc_dbwd"):
                k.run(name, x=x)
            module, kernels = sc_triton, ("_poly",)
        torch.cuda.synchronize(device)
        for name in kernels:
            tuner = getattr(module, name)
            timings = {str(c): list(map(float, t))
                       for c, t in getattr(tuner, "configs_timings", {}).items()}
            report.append({"op": ks.op, "descriptor": ks.desc.hash[:12], "kernel": name,
                           "best": str(tuner.best_config), "timings_ms": timings,
                           "autotune_s": round(time.perf_counter() - start, 3)})
            print(f"{ks.op} {name}: best {tuner.best_config} of {len(timings)}", flush=True)
    with open(out, "w") as handle:
        json.dump({"gpu": torch.cuda.get_device_name(device), "workload": WORKLOAD,
                   "rows": ROWS, "model": MODEL, "nodes": NODES, "kernels": report},
                  handle, indent=1)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="autotune.json")
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    if args.dry_run:
        return dry_run()
    if not torch.cuda.is_available():
        print("gpu_autotune: no CUDA device (use --dry-run here)", file=sys.stderr)
        return 2
    return autotune(args.out)


if __name__ == "__main__":
    sys.exit(main())
