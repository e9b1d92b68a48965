"""The benchmark's words, in one place that imports neither torch nor pandas.

Levels with their directions and batch units, statuses, the metrics that regression checks
judge, the machine label of a row and the data directory. Cases, name checks, reports and
the Snakemake workflow all read them from here, so that a Snakemake start or ``equibench
--help`` needs no torch and no two lists of the same names can drift apart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Level:
    """One level of the benchmark: ``name``, the ``directions`` a case of it may time, and
    what a case's ``batch`` counts there: ``batch_unit`` per timed call."""

    name: str
    directions: tuple[str, ...]
    batch_unit: str


# A differentiable operation (tp, conv), a model, an MD run.
TP_CONV_DIRECTIONS = ("forward", "backward", "double_backward")
MODEL_DIRECTIONS = ("inference", "train_step")
MD_DIRECTIONS = ("nve", "nvt")

LEVEL_INFO: dict[str, Level] = {level.name: level for level in (
    Level("tp", TP_CONV_DIRECTIONS, "tensor products"),
    Level("conv", TP_CONV_DIRECTIONS, "graphs"),
    Level("model", MODEL_DIRECTIONS, "structures"),
    Level("md", MD_DIRECTIONS, "MD steps"),
)}
# In the order reports list them: from the bare operation up to a simulation.
LEVELS = tuple(LEVEL_INFO)
# Every direction of some level, each once, in the levels' order.
DIRECTIONS = tuple(dict.fromkeys(d for level in LEVEL_INFO.values() for d in level.directions))

# How a case's step runs (equibench.modes): as written (``eager``), under torch.compile with
# Inductor (``compile``), or exported with torch.export and run as a compiled AOTInductor
# package (``export``).
MODES = ("eager", "compile", "export")

STATUSES = ("ok", "unverifiable", "incorrect", "oom", "unavailable", "error", "imported")
# Rows with timings: ``ok`` (gated against the float64 reference, then timed),
# ``unverifiable`` (a low precision whose real rounding error is as large as the planted
# error its gate must reject, equibench.correctness: timed and shown as such, never
# evidence) and ``imported`` (timed elsewhere, e.g. pytest-benchmark: never gated).
TIMED_STATUSES = ("ok", "unverifiable", "imported")
# Timed rows whose times regression checks compare: never an unverifiable one. Claims and
# targets take ``ok`` rows alone.
COMPARABLE_STATUSES = ("ok", "imported")

# The kinds of change that ``equibench compare`` judges, each of which may gate the check.
METRICS = ("status", "speedup", "time", "memory")

UNKNOWN_MACHINE = "unknown"


def machine_label(gpu_name: str | None, cpu_model: str | None) -> str:
    """A short name for the hardware a row ran on (claims match hardware by it): its GPU
    name, else its CPU model, else ``unknown``."""
    return str(gpu_name or cpu_model or UNKNOWN_MACHINE)


DATA_DIR_ENV = "EQUIBENCH_DATA_DIR"
DEFAULT_DATA_DIR = Path("~/.cache/equibench/data")


def data_dir() -> Path:
    """Root of the data cache: ``$EQUIBENCH_DATA_DIR`` or ``~/.cache/equibench/data``.

    Read on every call (not at import) so tests and workflows can redirect it.
    """
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).expanduser()
