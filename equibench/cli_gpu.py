"""``equibench gpu-compile``: our Triton kernels compiled for GPUs that are not here.

``equibench.cli.build_parser`` calls :func:`add_parsers` with its subparsers; the work is in
:mod:`equibench.gpu_kernels`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_OUT = "results/gpu-kernels.parquet"


def cmd_gpu_compile(args: argparse.Namespace) -> int:
    from equibench import gpu_kernels
    from equibench.dashboards.gpu_kernels import summary
    from equibench.kernels.gpu_compile import (
        CompileUnavailable,
        require_compiler,
        supported_architectures,
    )

    try:
        require_compiler()
        supported = supported_architectures()
    except CompileUnavailable as err:
        print(f"equibench gpu-compile: {err}", file=sys.stderr)
        return 2
    archs = args.arch.split(",") if args.arch else supported
    unknown = [a for a in archs if a not in supported]
    if unknown:
        print(f"equibench gpu-compile: this Triton cannot target {', '.join(unknown)}; "
              f"it can target {', '.join(supported)}", file=sys.stderr)
        return 2
    presets = args.preset.split(",")
    gate = args.gate.split(",") if args.gate else []
    frame, failing = gpu_kernels.run(presets, archs, args.workers, gate,
                                     Path(args.out) if args.out else None,
                                     gpu_kernels.main_progress)
    print(summary(frame).to_string(index=False))
    print(f"\n{len(frame)} compilations of {frame['kernel'].nunique()} kernels for "
          f"{', '.join(archs)} (compiled, not run); table: {args.out or '(not written)'}")
    if len(failing):
        cols = ["kernel", "arch", "dtype", "specialization", "block", "num_warps",
                "registers", "spill_stores", "problem", "error", "suites"]
        print(f"\n{len(failing)} failing (a compile error anywhere; spills, shared memory or "
              f"grid over the limit in a kernel of {', '.join(gate) or 'no preset'}):")
        print(failing[cols].head(args.show).to_string(index=False))
        return 1
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "gpu-compile",
        help="compile every Triton kernel of the presets' fused cases for NVIDIA GPUs (no "
             "GPU needed): registers, spills, shared memory and occupancy per kernel",
        description="Records the launches our fused cases would make on a GPU, compiles every "
                    "autotune configuration of each for each architecture with the ptxas "
                    "Triton ships, and writes one row per compilation. Exits 1 on a compile "
                    "error, or a spill (or shared memory or grid over the limit) in a kernel "
                    "of a --gate preset.")
    p.add_argument("--preset", default="quick,full",
                   help="presets whose fused cases are compiled (default: quick,full)")
    p.add_argument("--arch", default="",
                   help="architectures, e.g. sm_80,sm_90 (default: every one of sm_80, sm_90 "
                        "and sm_100 this Triton can target)")
    p.add_argument("--gate", default="quick",
                   help="presets whose kernels must not spill (default: quick; '' for none; "
                        "a compile error fails whatever the preset)")
    p.add_argument("--out", default=DEFAULT_OUT, help=f"table to write (default: {DEFAULT_OUT})")
    p.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                   help="compiler processes (default: one per CPU)")
    p.add_argument("--show", type=int, default=40, help="failing rows to print (default: 40)")
    p.set_defaults(func=cmd_gpu_compile)
