"""Read pytest-benchmark JSON (``--benchmark-json``) into the result schema.

Case fields come from each benchmark's ``extra_info`` (what ``benchmarks/`` records), then
from its ``params``; a benchmark without a workload and an implementation is skipped and
reported. Timing samples are ``stats.data`` when the run kept them
(``--benchmark-save-data``); otherwise the row has the median and IQR only, and compare and
claims treat that median as a single sample.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from equibench import results

CASE_DEFAULTS = {"level": "tp", "variant": "default", "direction": "forward",
                 "precision": "float32", "device": "cpu"}
REQUIRED = ("workload", "implementation", "batch")
# extra_info keys copied into the row when present (provenance the fixture knows best).
EXTRA_COLUMNS = ("throughput_unit", "gpu_name", "flops", "bytes", "threads", "peak_mem_bytes",
                 "max_abs_err", "max_scaled_err", "tolerance")


@dataclass
class Imported:
    """The rows read, and the names of the benchmarks that could not become rows."""

    frame: pd.DataFrame
    skipped: list[str] = field(default_factory=list)


def _case_fields(bench: Mapping) -> dict:
    found = {**CASE_DEFAULTS, **(bench.get("params") or {}), **(bench.get("extra_info") or {})}
    missing = [k for k in REQUIRED if k not in found]
    if missing:
        raise KeyError(", ".join(missing))
    case = {k: str(found[k]) for k in ("level", "workload", "implementation", "variant",
                                       "direction", "precision", "device")}
    case["batch"] = int(found["batch"])
    return case


def _timing(stats: Mapping) -> dict:
    samples = [float(x) for x in stats.get("data") or []]
    median = float(stats["median"])
    iqr = float(stats.get("iqr", math.nan))
    return {"time_median_s": median, "time_iqr_s": iqr, "time_samples": samples,
            "repeats": int(stats.get("rounds", len(samples)))}


def _provenance(doc: Mapping) -> dict:
    machine = doc.get("machine_info") or {}
    commit = doc.get("commit_info") or {}
    cpu = machine.get("cpu") or {}
    return {
        "git_commit": str(commit.get("id") or "unknown"),
        "git_dirty": bool(commit.get("dirty", False)),
        "host": str(machine.get("node", "")),
        "cpu_model": str(cpu.get("brand_raw") or machine.get("processor") or ""),
        "cpu_count": int(cpu.get("count") or -1),
        "python": str(machine.get("python_version", "")),
        "timestamp": str(doc.get("datetime", "")),
    }


def read(path: str | Path, run_id: str | None = None) -> Imported:
    """The benchmarks of one pytest-benchmark JSON file as result rows (status
    ``imported``: timed outside equibench, never gated against the reference)."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSON ({err})") from None
    if not isinstance(doc, dict) or "benchmarks" not in doc:
        raise ValueError(f"{path}: not a pytest-benchmark JSON file (no 'benchmarks' list)")
    provenance = _provenance(doc)
    run = run_id or f"pytest-benchmark-{provenance['timestamp'] or path.stem}"
    rows, skipped = [], []
    for bench in doc["benchmarks"]:
        name = str(bench.get("fullname") or bench.get("name", "?"))
        try:
            case = _case_fields(bench)
        except KeyError as err:
            skipped.append(f"{name} (no {err.args[0]} in extra_info or params)")
            continue
        extra = bench.get("extra_info") or {}
        row = {**provenance, **case, **_timing(bench["stats"]), "run_id": run, "status": "imported",
               "throughput_unit": "products/s" if case["level"] == "tp" else "structures/s"}
        row.update({k: extra[k] for k in EXTRA_COLUMNS if k in extra})
        row["throughput"] = row["batch"] / row["time_median_s"]
        for amount, rate in (("flops", "gflops_per_s"), ("bytes", "gbytes_per_s")):
            if amount in row:
                row[rate] = row[amount] / row["time_median_s"] / 1e9
        row["extra"] = {"source": "pytest-benchmark", "benchmark": name}
        rows.append(row)
    return Imported(results.to_frame(rows), skipped)
