"""scripts/gpu_check.sh names only workloads, implementations, variants, directions and
precisions that exist: on a lent GPU a stale name would cost a whole check's device time
(`equibench run` refuses unknown names before any case starts)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from equibench import names
from equibench.cases import LEVEL_DEFAULTS, expand
from equibench.cli import build_parser, resolve_level_defaults

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_check.sh"


def _runs() -> list[list[str]]:
    """The arguments of every ``run NAME ...`` line, its shell variables substituted."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    variables = dict(re.findall(r"^(\w+)=(\S+)$", text, re.MULTILINE))
    text = re.sub(r"\$\(b (\d+)\)", r"\1", text)  # the batch, as outside SMOKE mode
    runs = []
    for match in re.finditer(r"\brun [\w-]+ \d+ (--level [^;\n]*)", text):
        line = re.sub(r"\$(\w+)", lambda m: variables[m.group(1)], match.group(1))
        runs.append(shlex.split(line))
    return runs


def test_every_name_of_the_gpu_check_exists() -> None:
    runs = _runs()
    # four SE(3)-Transformer claim runs, tp, tp-dbl, conv, kernels, two mace, se3t, md
    assert len(runs) == 12
    parser = build_parser()
    for arguments in runs:
        args = resolve_level_defaults(parser.parse_args(["run", "--device", "cuda:0",
                                                         *arguments]))
        cases = list(expand(
            level=args.level, workloads=args.workload.split(","),
            implementations=args.implementation.split(","),
            directions=args.direction.split(","), precisions=args.precision.split(","),
            batches=args.batch or [LEVEL_DEFAULTS[args.level].batch], device=args.device,
            variants=args.variant.split(",")))
        names.check(cases)  # raises UnknownName naming the stale one


def _dry_run(script: Path, checks: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CHECKS", "OUT", "PYTHON", "TRITON_INTERPRET")}
    env["PYTHON"] = sys.executable
    if checks:
        env["CHECKS"] = checks
    return subprocess.run(["bash", str(script), "--dry-run"], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.slow
def test_the_gpu_check_dry_run_passes_on_a_cpu() -> None:
    """Every step of the script checked without a GPU: each `equibench run` with
    --dry-run (arguments and case names), pytest's collection, the autotune script's dry
    run, the DDP module importable."""
    proc = _dry_run(SCRIPT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for step in ("se3t-fp32", "tp", "tp-dbl", "conv", "mace-inf", "mace-train", "kernels",
                 "sc-kernels", "autotune", "se3t-backends", "se3t-ddp", "md-scaling"):
        assert f"{step}: dry run ok" in proc.stdout  # the script logs everything to stdout


def test_the_gpu_check_dry_run_fails_on_a_stale_name(tmp_path: Path) -> None:
    """A copy of the script whose tp check names a workload that does not exist."""
    (tmp_path / "scripts").mkdir()
    stale = tmp_path / "scripts" / "gpu_check.sh"
    stale.write_text(SCRIPT.read_text().replace("TP_ALL=mace-large,", "TP_ALL=mace-larg,"))
    proc = _dry_run(stale, checks="tp")
    assert proc.returncode == 1
    assert "tp: dry run FAILED" in proc.stdout and "unknown tp workload 'mace-larg'" in proc.stdout
