"""Cold build time of our CPU kernels: the seconds from an empty kernel cache to the first
result of each kernel, per tensor-product descriptor and dtype, and of whole fused MACE
models (energy and forces).

    python benchmarks/build_time.py                       # quick's tp workloads, MACE small/oeq
    python benchmarks/build_time.py --tp mace-large --model oeq --dtype float64

Each measurement runs in a fresh process with its own empty cache
(``EQUIBENCH_KERNEL_CACHE`` a new temporary directory), so nothing is shared between them;
the process's imports are not counted. ``tp``: the first forward, then the first backward,
then the first double backward of one descriptor, each timed from the kernels' first
request (the later ones build only what they add); then, in another fresh process, the
three directions' libraries built together in one parallel build (as a case that needs all
three can ask, ``CpuKernels.build``) and their first calls. ``model``: a float64 e3nn MACE built
beforehand (not counted), then its conversion to the fused backend and its first
energy-and-forces call on 4 QM9 molecules (counted).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

TP = ("mace-large", "mace-medium", "nequip-benzene-1parity", "DiffDock-L=2")
MODELS = ("small", "oeq")

_TP_CHILD = r"""
import json, sys, time, torch
from equibench.workloads import get_tp_workload
from equibench.kernels.cpu_build import cpu_kernels
desc = get_tp_workload(sys.argv[1]).descriptor
dtype = getattr(torch, sys.argv[2])
g = torch.Generator().manual_seed(0)
x, y, w, go = (torch.randn(64, n, dtype=dtype, generator=g)
               for n in (desc.in1_dim, desc.in2_dim, desc.weight_numel, desc.out_dim))
times = {}
if sys.argv[3] == "together":
    t = time.perf_counter()
    cpu_kernels(desc).build(("fwd", "bwd", "dbwd"), {torch.float32: "f32"}.get(dtype, "f64"))
    times["build"] = time.perf_counter() - t
for name, call in (("forward", lambda: cpu_kernels(desc).tp_forward(x, y, w)),
                   ("backward", lambda: cpu_kernels(desc).tp_backward(go, x, y, w)),
                   ("double_backward",
                    lambda: cpu_kernels(desc).tp_double_backward(go, x, y, w, x, y, w))):
    t = time.perf_counter(); call(); times[name] = time.perf_counter() - t
print(json.dumps(times))
"""

_MODEL_CHILD = r"""
import json, sys, time, torch
from equibench.implementations.mace.backends import on_backend
from equibench.implementations.mace.inputs import load_structures
from equibench.implementations.mace.models import model_spec
from equibench.implementations.mace.steps import inference
spec = model_spec(sys.argv[1])
dtype = getattr(torch, sys.argv[2])
structures = load_structures("mace-qm9", 4, 0, spec.r_max, spec.elements).rounded(dtype)
model = spec.build(structures.atomic_numbers, structures.avg_num_neighbors, 0).to(dtype)
data = structures.to(dtype, "cpu")
t = time.perf_counter()
inference(on_backend(model, "fused", "cpu"), data)()
print(json.dumps({"energy_and_forces": time.perf_counter() - t}))
"""


def _child(code: str, *args: str) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "EQUIBENCH_KERNEL_CACHE": cache}
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              text=True, env=env, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tp", default=",".join(TP))
    parser.add_argument("--model", default=",".join(MODELS))
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    for name in filter(None, args.tp.split(",")):
        t = _child(_TP_CHILD, name, args.dtype, "in turn")
        print(f"tp {name} {args.dtype}: first forward {t['forward']:.2f} s, then backward "
              f"{t['backward']:.2f} s, then double backward {t['double_backward']:.2f} s "
              f"(total {sum(t.values()):.2f} s)", flush=True)
        t = _child(_TP_CHILD, name, args.dtype, "together")
        print(f"tp {name} {args.dtype}: the three directions built together "
              f"{t['build']:.2f} s, then their first calls "
              f"{t['forward'] + t['backward'] + t['double_backward']:.2f} s "
              f"(total {sum(t.values()):.2f} s)", flush=True)
    for variant in filter(None, args.model.split(",")):
        t = _child(_MODEL_CHILD, variant, args.dtype)
        print(f"model mace[{variant}] {args.dtype}: first energy and forces "
              f"{t['energy_and_forces']:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
