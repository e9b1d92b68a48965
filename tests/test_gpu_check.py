"""scripts/gpu_check.sh names only workloads, implementations, variants, directions and
precisions that exist: on a lent GPU a stale name would cost a whole check's device time
(`equibench run` refuses unknown names before any case starts)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

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
