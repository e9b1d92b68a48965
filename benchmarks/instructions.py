"""Count the instructions of the fused CPU kernels under cachegrind; compare with a baseline.

    python benchmarks/instructions.py [--out FILE.json] [--baseline FILE.json]
                                      [--tolerance 0.01] [--case KERNEL:WORKLOAD:DTYPE:BATCH]

Unlike wall-clock time, the count of one single-threaded call is identical from run to
run, so it can gate CI on what our generated kernels execute (see
``equibench.kernels.instruction_count``). It says nothing about cache misses, memory
stalls, threading or code outside the kernels.

Default cases (float32), each of mace-large and nequip-benzene-1parity: tp_fwd, tp_bwd,
tp_dbwd on 64 products; conv_fwd, conv_bwd, conv_dbwd on a 16-node seeded synthetic graph
(128 edges). And MACE's symmetric contraction on our kernels: sc_fwd, sc_bwd, sc_dbwd of
the ``oeq`` model's last product block (workload ``mace-oeq-product1``: correlation 3, 128
channels, scalar outputs) on 16 nodes. Its first block (outputs up to 2e) runs the same
generator on more paths; its kernels took ~100 s to compile at these flags here, against
~2.5 s for the last block's, so CI counts the last (``benchmarks/ab.py`` times the first).
A case is ``KERNEL:WORKLOAD:DTYPE:BATCH`` (BATCH: products, nodes for conv and sc). A
symmetric-contraction workload is ``mace-VARIANT-productK``: product block K of MACE model
VARIANT (``equibench.implementations.mace.models.VARIANTS``; needs mace-torch). Its
"products" are the columns (node, channel) a call computes.

With ``--baseline``: a case whose count grew by more than ``--tolerance`` (a fraction) or
a baseline case missing from this run is a regression (exit status 1). When the baseline
was made with another compiler, C library, valgrind or flags, the counts are not
comparable: the changes are printed with a warning and do not fail. Exit status 2 when
counting is impossible here (no valgrind or no compiler) or a case names no workload.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from equibench.kernels.symmetric_contraction import SymmetricContractionDescriptor

FORMAT = "equibench-instruction-counts-1"
TP_BATCH = 64
CONV_NODES = 16
WORKLOADS = ("mace-large", "nequip-benzene-1parity")
SC_WORKLOADS = ("mace-oeq-product1",)
SC_NODES = 16
SC_KERNELS = ("sc_fwd", "sc_bwd", "sc_dbwd")


@dataclass(frozen=True)
class Case:
    """One count: ``kernel`` on ``workload`` in ``dtype`` with ``batch`` rows (tp) or nodes
    (conv)."""

    kernel: str
    workload: str
    dtype: str
    batch: int

    @property
    def key(self) -> str:
        return f"{self.kernel}:{self.workload}:{self.dtype}:{self.batch}"

    @classmethod
    def parse(cls, text: str) -> Case:
        """``KERNEL:WORKLOAD:DTYPE:BATCH``, as :attr:`key` writes it."""
        try:
            kernel, workload, dtype, batch = text.split(":")
            return cls(kernel, workload, dtype, int(batch))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not KERNEL:WORKLOAD:DTYPE:BATCH (e.g. tp_fwd:mace-large:f32:64)"
            ) from None


DEFAULT_CASES = (
    *(Case(kernel, workload, "f32", CONV_NODES if kernel.startswith("conv") else TP_BATCH)
      for workload in WORKLOADS
      for kernel in ("tp_fwd", "tp_bwd", "tp_dbwd", "conv_fwd", "conv_bwd", "conv_dbwd")),
    *(Case(kernel, workload, "f32", SC_NODES)
      for workload in SC_WORKLOADS for kernel in SC_KERNELS),
)


@functools.cache
def sc_description(workload: str) -> tuple[SymmetricContractionDescriptor, int]:
    """The symmetric contraction of ``mace-VARIANT-productK`` as our kernels describe it
    (the same description whatever the model's weights and elements), and its channels."""
    from equibench.implementations.mace.models import VARIANTS, build_model
    from equibench.implementations.mace.symmetric_contraction import describe

    match = re.fullmatch(r"mace-(.+)-product(\d+)", workload)
    if match is None or match[1] not in VARIANTS:
        raise ValueError(f"{workload!r} is not mace-VARIANT-productK with VARIANT one of "
                         f"{', '.join(sorted(VARIANTS))}")
    model = build_model(VARIANTS[match[1]], (1, 6, 7, 8, 9), avg_num_neighbors=9.0, seed=0)
    if int(match[2]) >= len(model.products):
        raise ValueError(f"{workload!r}: the {match[1]} model has {len(model.products)} "
                         "product blocks, numbered from 0")
    module = model.products[int(match[2])].symmetric_contractions
    return describe(module), module.irreps_in[0].mul


def count(case: Case) -> tuple[int, int]:
    """The instructions of one call of ``case``, and the products (symmetric contraction:
    columns) it computes."""
    from equibench.kernels import instruction_count as ic

    if case.kernel in SC_KERNELS:
        desc, channels = sc_description(case.workload)
        return (ic.count_sc_instructions(desc, channels, case.kernel, case.dtype, case.batch),
                case.batch * channels)
    return (ic.count_instructions(case.workload, case.kernel, case.dtype, case.batch),
            ic.products_per_call(case.kernel, case.batch))


def measure(cases: tuple[Case, ...]) -> dict[str, Any]:
    """Count every case (progress on stderr); the report written by ``--out``."""
    # imported here so that --help does not pay for torch and e3nn
    from equibench.kernels import instruction_count as ic

    from equibench import environment

    tools = ic.toolchain()
    env = environment.capture("cpu")
    report: dict[str, Any] = {
        "format": FORMAT,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        # flags as a list, as they read back from JSON, so that compare() sees them equal
        "toolchain": {**asdict(tools), "flags": list(tools.flags)},
        "machine": {k: env[k] for k in ("git_commit", "git_dirty", "host", "cpu_model")},
        "cases": {},
    }
    start = time.perf_counter()
    for n, case in enumerate(cases, 1):
        print(f"[{n}/{len(cases)}] {case.key} ...", end="", file=sys.stderr, flush=True)
        t = time.perf_counter()
        instructions, products = count(case)
        print(f" {instructions:,} ({time.perf_counter() - t:.1f} s)", file=sys.stderr,
              flush=True)
        report["cases"][case.key] = {**asdict(case), "products": products,
                                     "instructions": instructions}
    report["seconds"] = round(time.perf_counter() - start, 1)
    return report


def table(report: dict[str, Any]) -> str:
    """Case, instructions per call and per tensor product (a conv edge is one product, a
    symmetric contraction's column one)."""
    lines = [f"{'case':34s} {'instructions/call':>18s} {'per product':>12s}"]
    for key, case in report["cases"].items():
        per = case["instructions"] / case["products"]
        lines.append(f"{key:34s} {case['instructions']:18,d} {per:12,.0f}")
    return "\n".join(lines)


def compare(
    base: dict[str, Any], new: dict[str, Any], tolerance: float
) -> tuple[list[str], bool]:
    """Lines of the comparison and whether it fails: a count grown by more than
    ``tolerance`` (fraction) or a baseline case missing from ``new``; count changes do
    not fail when the two were made with different toolchains (different code)."""
    lines: list[str] = []
    differs = [
        f"{name}: baseline {base['toolchain'].get(name)!r}, now {new['toolchain'].get(name)!r}"
        for name in ("compiler", "libc", "valgrind", "flags")
        if base["toolchain"].get(name) != new["toolchain"].get(name)
    ]
    if differs:
        lines += [
            "WARNING: the baseline was counted with another toolchain; a different compiler "
            "or C library executes different instructions, so changes below are reported, "
            "not failed. Make a baseline with this toolchain to gate on it.",
            *(f"  {d}" for d in differs),
        ]
    failed = False
    lines.append(f"{'case':34s} {'baseline':>14s} {'now':>14s} {'change':>9s}  verdict")
    for key, old in base["cases"].items():
        case = new["cases"].get(key)
        if case is None:
            lines.append(f"{key:34s} {old['instructions']:14,d} {'-':>14s} {'-':>9s}  "
                         "REGRESSION (missing from this run)")
            failed = True
            continue
        change = case["instructions"] / old["instructions"] - 1
        if change > tolerance:
            verdict = "changed (other toolchain)" if differs else "REGRESSION"
            failed = failed or not differs
        elif change < -tolerance:
            verdict = "improved (update the baseline)"
        else:
            verdict = "ok"
        lines.append(f"{key:34s} {old['instructions']:14,d} {case['instructions']:14,d} "
                     f"{change:+9.2%}  {verdict}")
    lines += [f"{key:34s} {'-':>14s} {case['instructions']:14,d} {'-':>9s}  new case"
              for key, case in new["cases"].items() if key not in base["cases"]]
    return lines, failed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, help="write the counts to this JSON file")
    parser.add_argument("--baseline", type=Path, help="compare with these counts (JSON)")
    parser.add_argument("--tolerance", type=float, default=0.01,
                        help="growth that counts as a regression, a fraction (default 0.01)")
    parser.add_argument("--case", type=Case.parse, action="append", dest="cases",
                        help="count this case instead of the default set (repeatable)")
    args = parser.parse_args(argv)
    baseline = json.loads(args.baseline.read_text()) if args.baseline else None

    from equibench.kernels import KernelUnavailable

    from equibench.files import atomic_write

    try:
        report = measure(tuple(args.cases or DEFAULT_CASES))
    except (KernelUnavailable, ValueError) as err:  # ValueError: a workload it cannot name
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(table(report))
    print(f"({len(report['cases'])} cases in {report['seconds']} s; toolchain: "
          f"{report['toolchain']['compiler']}, {report['toolchain']['valgrind']}, "
          f"{report['toolchain']['libc']})")
    if args.out:
        with atomic_write(args.out, "w") as handle:
            json.dump(report, handle, indent=2)
            handle.write("\n")
        print(f"wrote {args.out}")
    if baseline is None:
        return 0
    lines, failed = compare(baseline, report, args.tolerance)
    print(f"\ncompared with {args.baseline} (tolerance {args.tolerance:.2%}):")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
