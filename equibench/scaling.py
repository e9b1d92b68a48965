"""Scaling runs of the ``md`` level: one structure in growing supercells, each backend run
until a size fails or gets too slow.

The structure workloads of a scaling run (``SOURCE@AxBxC``, :mod:`equibench.structures`)
are run from the smallest supercell to the largest, per source. A backend (implementation,
model, direction, precision, steps per call and device) runs every size until one ends
other than ``ok`` (out of memory, an error, a failed gate) or takes more than the limit in
seconds per MD step; its larger sizes are then not run, and their rows are ``unavailable``
with the reason, which names the size that stopped it. The largest ``ok`` size of a
backend is the largest system it ran on that device.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from equibench.cases import Case
from equibench.structures import StructureName


def _size(case: Case) -> tuple[str, int]:
    """(source, cells): the structure a case replicates and how many copies."""
    name = StructureName.parse(case.workload)
    return name.source, math.prod(name.repeat)


def ordered(cases: Iterable[Case]) -> list[Case]:
    """``cases`` with each source's supercells from the smallest to the largest (stable:
    the order given within one size)."""
    return sorted(cases, key=_size)


def _backend(case: Case) -> tuple:
    source, _ = _size(case)
    return (source, case.implementation, case.variant, case.direction, case.precision,
            case.batch, case.device)


@dataclass
class Growth:
    """Which backends of a scaling run have stopped growing, and why.

    ``limit_s``: seconds per MD step (the median timed call over its steps) beyond which a
    backend's larger supercells are not run.
    """

    limit_s: float
    # backend -> the row fields of its sizes not run: the reason, and the thread count and
    # allocator of the row that stopped it (part of the key that compare matches rows on)
    stopped: dict[tuple, dict] = field(default_factory=dict)

    def skipped(self, case: Case) -> dict | None:
        """The row of ``case`` if its backend has stopped growing (else None)."""
        fields = self.stopped.get(_backend(case))
        return None if fields is None else {**case.to_dict(), **fields}

    def record(self, case: Case, row: dict) -> None:
        """Note the finished row of ``case``: a size that did not end ``ok``, or one over
        the time limit, stops the larger sizes of its backend."""
        key = _backend(case)
        if key in self.stopped:
            return
        if row["status"] != "ok":
            reason = f"{case.workload} ended {row['status']} on this backend"
        elif (per_step := row["time_median_s"] / case.batch) > self.limit_s:
            reason = (f"{case.workload} took {per_step:.3g} s per step on this backend, over "
                      f"the limit of {self.limit_s:g} s")
        else:
            return
        self.stopped[key] = {
            "status": "unavailable", "reason": f"not run (scaling): {reason}",
            **{k: row[k] for k in ("threads", "cpu_allocator") if k in row}}
