"""The result table: one tidy row per case, written atomically, validated on read.

Rows from many runs and machines concatenate into one table; ``run_id`` and the provenance
columns say where each came from.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from equibench.files import atomic_write
from equibench.run_ids import config_name_of
from equibench.vocabulary import DIRECTIONS, LEVEL_INFO, MODES, STATUSES, TIMED_STATUSES


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "str", "int", "float", "bool", "list"
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("run_id", "str", "unique identifier of the run that produced the row: "
           "<configuration name>-<UTC time>-<random> (equibench.run_ids)"),
    Column("config_name", "str", "name of the configuration that ran it (results/<name>/)"),
    Column("level", "str", "tp (bare tensor product), conv (fused with gather/scatter), model, "
           "md (molecular dynamics)"),
    Column("workload", "str", "problem name, e.g. mace-large"),
    Column("implementation", "str", "registered implementation name, e.g. e3nn"),
    Column("variant", "str", "implementation option set (default unless a model switch)"),
    Column("direction", "str", ", ".join(DIRECTIONS)),
    Column("precision", "str", "float64, float32, tfloat32, bfloat16, float16"),
    Column("batch", "int", "work items per timed call: " + ", ".join(
        f"{level.batch_unit} at {name}" for name, level in LEVEL_INFO.items())),
    Column("device", "str", "cpu or cuda:N, the device the case ran on"),
    Column("mode", "str", ", ".join(MODES) + ": how the step ran (eager PyTorch, "
           "torch.compile with Inductor, torch.export run as an AOTInductor package); "
           "compilation is never in the timed calls"),
    Column("status", "str", ", ".join(STATUSES)),
    Column("reason", "str", "why the status is not ok (empty when ok)"),
    Column("time_median_s", "float", "median seconds per call (NaN unless ok)"),
    Column("time_iqr_s", "float", "interquartile range of the samples, seconds"),
    Column("time_samples", "list", "every timed sample, seconds"),
    Column("repeats", "int", "number of timed samples"),
    Column("round_times_s", "list", "median seconds per call in each interleaved round, in "
           "round order"),
    Column("rounds_id", "str", "shared by the rows timed in the same interleaved rounds, "
           "whose round_times_s pair up round by round ('' when never paired)"),
    Column("disturbed", "str", "what disturbed the machine while the case was timed (steal "
           "time, other processes' CPU use); '' when it was quiet"),
    Column("cold_start_s", "float", "seconds from empty caches to the first result, in the "
           "case's fresh process: building the implementation (kernel builds, Inductor, "
           "export) and its first call; NaN where the suite does not ask for it "
           "(cold_start), see extra.cold_start_caches"),
    Column("warmup_s", "float", "seconds of the untimed warm-up calls after the first call"),
    Column("throughput", "float", "work items per second: batch / time_median_s"),
    Column("throughput_unit", "str", "what throughput counts, e.g. products/s"),
    Column("peak_mem_bytes", "int", "peak extra memory of one call, bytes (-1 unknown)"),
    Column("peak_mem_method", "str", "cuda_allocator or rss_growth (process RSS over baseline)"),
    Column("peak_tensor_bytes", "int", "peak of the live tensor bytes one call adds, bytes (-1 "
           "unknown); unlike rss_growth it does not depend on the allocator: memory ratios "
           "use it"),
    Column("peak_tensor_method", "str", "torch_profiler (torch's CPU allocator, from the "
           "profiler's memory events) or cuda_allocator"),
    Column("flops", "float", "floating-point operations of one call (cost model)"),
    Column("bytes", "float", "minimum bytes moved by one call (cost model)"),
    Column("gflops_per_s", "float", "achieved flops / time_median_s / 1e9"),
    Column("gbytes_per_s", "float", "achieved bytes / time_median_s / 1e9"),
    Column("max_abs_err", "float", "largest absolute error against the float64 reference"),
    Column("max_scaled_err", "float", "largest error / max(|reference|, 1)"),
    Column("tolerance", "float", "bound on max_scaled_err for this precision"),
    Column("equivariance_err", "float", "rotated-input check error (NaN if not run)"),
    Column("extra", "str", "JSON object with level-specific metrics"),
    Column("timestamp", "str", "UTC ISO time the case finished"),
    Column("config_hash", "str", "hash of the configuration that produced the run"),
    Column("git_commit", "str", "commit of the equibench checkout"),
    Column("git_dirty", "bool", "whether tracked files had uncommitted changes"),
    Column("host", "str", "host name"),
    Column("cpu_model", "str", "CPU model name"),
    Column("cpu_count", "int", "logical CPUs"),
    Column("cpu_flags", "str", "the CPU's ISA flags (avx*, amx*, fma, f16c, sse4_*), from "
           "/proc/cpuinfo"),
    Column("cpu_march_native", "str", "what -march=native (our CPU kernels' target) resolves "
           "to for the C++ compiler, with the vector width its tuning prefers, e.g. "
           "'rocketlake prefer-vector-width=256'"),
    Column("threads", "int", "torch intra-op threads used for the case"),
    Column("cpu_allocator", "str", "allocator of a CPU case process (tcmalloc, system); '' on "
           "GPUs"),
    Column("gpu_name", "str", "GPU model ('' on CPU)"),
    Column("gpu_driver", "str", "NVIDIA driver version"),
    Column("gpu_clock_sm_mhz", "int", "the GPU's SM clock when the row was captured (MHz, "
           "nvidia-smi; -1 without one)"),
    Column("gpu_clock_max_sm_mhz", "int", "the GPU's maximum SM clock (MHz; -1 without one)"),
    Column("gpu_power_limit_w", "float", "the GPU's power limit (W; NaN without one)"),
    Column("gpu_mig_mode", "str", "the GPU's MIG mode (Enabled, Disabled; '' without one)"),
    Column("cuda", "str", "CUDA version torch was built with"),
    Column("python", "str", "Python version"),
    Column("version_torch", "str", "torch version"),
    Column("version_e3nn", "str", "e3nn version"),
    Column("version_cuequivariance", "str", "cuequivariance version"),
    Column("version_cuequivariance_torch", "str", "cuequivariance-torch version"),
    Column("version_cuequivariance_ops_torch_cu12", "str", "CUDA ops package version"),
    Column("version_openequivariance", "str", "openequivariance version"),
    Column("version_mace_torch", "str", "mace-torch version"),
    Column("version_triton", "str", "triton version"),
    Column("version_numpy", "str", "numpy version"),
)
COLUMN_NAMES = tuple(c.name for c in COLUMNS)
# Columns added after tables were first written: a table without them (an older baseline or
# history) reads with their defaults, the allocator taken from ``extra`` where it was kept
# and the configuration's name from ``run_id`` (_fill_config_name).
LATER_COLUMNS = ("round_times_s", "rounds_id", "disturbed", "cpu_allocator",
                 "peak_tensor_bytes", "peak_tensor_method", "config_name",
                 "gpu_clock_sm_mhz", "gpu_clock_max_sm_mhz", "gpu_power_limit_w",
                 "gpu_mig_mode", "cpu_flags", "cpu_march_native", "mode", "cold_start_s")
_DEFAULTS = {"str": "", "int": -1, "float": math.nan, "bool": False, "list": []}
# A later column whose blank is not its kind's: every row from before modes ran eager.
_LATER_DEFAULTS = {"mode": "eager"}


class SchemaError(ValueError):
    """A result table that does not follow the schema."""


def blank_row() -> dict:
    row = {c.name: (list(_DEFAULTS[c.kind]) if c.kind == "list" else _DEFAULTS[c.kind])
           for c in COLUMNS}
    return {**row, **_LATER_DEFAULTS}


def make_row(**fields: object) -> dict:
    unknown = set(fields) - set(COLUMN_NAMES)
    if unknown:
        raise SchemaError(f"unknown result column(s) {sorted(unknown)}")
    row = blank_row()
    row.update(fields)
    if isinstance(row["extra"], Mapping):
        row["extra"] = json.dumps(row["extra"], sort_keys=True)
    return row


def to_frame(rows: Iterable[Mapping]) -> pd.DataFrame:
    frame = pd.DataFrame([make_row(**r) for r in rows], columns=list(COLUMN_NAMES))
    return validate(frame)


def _check_kind(frame: pd.DataFrame, col: Column) -> None:
    values = frame[col.name]
    bad = None
    if col.kind == "str":
        bad = values[~values.map(lambda v: isinstance(v, str))]
    elif col.kind in ("int", "float"):
        coerced = pd.to_numeric(values, errors="coerce")
        bad = values[coerced.isna() & values.notna()]
        if col.kind == "int":
            bad = pd.concat([bad, values[coerced.isna()]])
    elif col.kind == "bool":
        bad = values[~values.map(lambda v: isinstance(v, bool) or str(v) in ("True", "False"))]
    elif col.kind == "list":
        bad = values[~values.map(lambda v: hasattr(v, "__len__") and not isinstance(v, str))]
    if bad is not None and len(bad):
        raise SchemaError(
            f"column {col.name!r} must hold {col.kind} values; row {bad.index[0]} has "
            f"{bad.iloc[0]!r}"
        )


def _add_later_columns(frame: pd.DataFrame) -> pd.DataFrame:
    absent = [c for c in LATER_COLUMNS if c not in frame.columns]
    if not absent:
        return frame
    frame = frame.copy()
    for name in absent:
        frame[name] = [_LATER_DEFAULTS.get(name, blank_row()[name]) for _ in range(len(frame))]
    if "cpu_allocator" in absent and "extra" in frame.columns:
        frame["cpu_allocator"] = frame["extra"].map(
            lambda e: str(json.loads(e).get("cpu_allocator", "")) if e else "")
    return frame


def _fill_config_name(frame: pd.DataFrame) -> pd.DataFrame:
    """``config_name`` from ``run_id`` where it is blank: older tables, and rows whose writer
    set the run id alone."""
    blank = frame["config_name"] == ""
    if not blank.any():
        return frame
    frame = frame.copy()
    frame.loc[blank, "config_name"] = frame.loc[blank, "run_id"].map(config_name_of)
    return frame


def validate(frame: pd.DataFrame) -> pd.DataFrame:
    """Check columns, types and statuses; return the frame with canonical dtypes."""
    frame = _add_later_columns(frame)
    missing = [c for c in COLUMN_NAMES if c not in frame.columns]
    if missing:
        raise SchemaError(f"result table is missing column(s) {missing}")
    for col in COLUMNS:
        _check_kind(frame, col)
    bad_status = frame.loc[~frame["status"].isin(STATUSES), "status"]
    if len(bad_status):
        raise SchemaError(
            f"column 'status' has {bad_status.iloc[0]!r}; allowed: {', '.join(STATUSES)}"
        )
    bad_mode = frame.loc[~frame["mode"].isin(MODES), "mode"]
    if len(bad_mode):
        raise SchemaError(f"column 'mode' has {bad_mode.iloc[0]!r}; allowed: {', '.join(MODES)}")
    frame = _fill_config_name(frame)
    timed = frame["status"].isin(TIMED_STATUSES)
    untimed = frame.loc[timed & frame["time_median_s"].isna()]
    if len(untimed):
        raise SchemaError(f"column 'time_median_s' is empty for "
                          f"{untimed['status'].iloc[0]} row {untimed.index[0]}")
    out = frame.copy()
    for col in COLUMNS:
        if col.kind == "int":
            out[col.name] = out[col.name].astype("int64")
        elif col.kind == "float":
            out[col.name] = out[col.name].astype("float64")
        elif col.kind == "bool":
            out[col.name] = out[col.name].map(lambda v: v is True or str(v) == "True")
        elif col.kind == "list":
            out[col.name] = out[col.name].map(lambda v: [float(x) for x in v])
    return out


def write_atomic(frame: pd.DataFrame, path: str | Path) -> Path:
    """Validate and write a result table so that readers never see half of it."""
    return write_parquet_atomic(validate(frame), path)


def write_parquet_atomic(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write any table to parquet through a temporary file and a rename."""
    with atomic_write(path) as handle:
        frame.to_parquet(handle, index=False)
    return Path(path)


def read(paths: str | Path | Iterable[str | Path]) -> pd.DataFrame:
    """Read one or more result files (or directories of them) and validate them."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files.extend(sorted(p.glob("results.parquet")) or sorted(p.rglob("*.parquet")))
        elif p.exists():
            files.append(p)
        else:
            raise FileNotFoundError(f"no result file at {p}; run a benchmark first")
    if not files:
        raise FileNotFoundError(f"no result files under {', '.join(map(str, paths))}")
    frames = []
    for f in files:
        try:
            frames.append(validate(pd.read_parquet(f)))
        except SchemaError as err:
            raise SchemaError(f"{f}: {err}") from None
    return pd.concat(frames, ignore_index=True)


def extra(row: Mapping) -> dict:
    """A row's ``extra`` as a dict, whether still a dict (before ``to_frame``) or JSON."""
    value = row.get("extra")
    if isinstance(value, Mapping):
        return dict(value)
    return json.loads(value) if value else {}


def code_path(extra_json: str) -> dict[str, str]:
    """A row's ``extra.code_path`` (``path`` and ``fallback``; empty when not recorded) from
    its ``extra`` column. A ``fallback`` that is not '' says why the code that ran is not the
    implementation's product path."""
    path = (json.loads(extra_json) if extra_json else {}).get("code_path") or {}
    return {"path": path.get("path", ""), "fallback": path.get("fallback", "")} if isinstance(
        path, dict) else {}
