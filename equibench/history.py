"""The history of tracked ratios across commits.

Each run adds, per case, its speedup over the reference implementation measured in the
same run. The workflow writes a run's entries to ``results/<run>/history.parquet`` (a
declared output); ``equibench history add`` appends to ``results/history.parquet`` by hand;
:func:`read_all` joins both kinds under a results directory. Ratios, not raw times, so that
runs on different machines stay comparable; ``machine`` is kept so that a plot can still
separate them.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd

from equibench.analysis import KEY_COLUMNS, REFERENCE, speedups
from equibench.results import write_parquet_atomic

DEFAULT_PATH = Path("results/history.parquet")
COLUMNS = (*KEY_COLUMNS, "machine", "host", "run_id", "git_commit", "git_dirty", "timestamp",
           "added_at", "speedup", "time_median_s", "ref_time_s")
# A run added twice replaces its earlier entries instead of doubling them.
IDENTITY = (*KEY_COLUMNS, "machine", "host", "run_id", "git_commit")


def tracked(frame: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """The run's tracked ratios: one row per non-reference ok case with a reference row."""
    joined = speedups(frame, reference)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    if joined.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    # One timestamp per run (its last case), so that a run plots as one point in time.
    joined["timestamp"] = joined.groupby("run_id")["timestamp"].transform("max")
    joined["added_at"] = now
    return joined[list(COLUMNS)].reset_index(drop=True)


def read(path: str | Path = DEFAULT_PATH) -> pd.DataFrame:
    """The history at ``path``; an empty table if there is none yet."""
    path = Path(path)
    if not path.exists():
        return pd.DataFrame(columns=list(COLUMNS))
    frame = pd.read_parquet(path)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: not a history table (missing column(s) {missing})")
    return frame


def add(frame: pd.DataFrame, path: str | Path = DEFAULT_PATH,
        reference: str = REFERENCE) -> tuple[pd.DataFrame, int]:
    """Append the run's tracked ratios to the history at ``path`` (written atomically).

    Returns the new history and the number of entries the run contributed.
    """
    path = Path(path)
    new = tracked(frame, reference)
    old = read(path)
    merged = new if old.empty else pd.concat([old, new], ignore_index=True)
    merged = merged.drop_duplicates(list(IDENTITY), keep="last")
    merged = merged.sort_values(["timestamp", *KEY_COLUMNS], kind="stable")
    merged = merged.reset_index(drop=True)
    write_parquet_atomic(merged, path)
    return merged, len(new)


def read_all(root: str | Path = DEFAULT_PATH.parent) -> pd.DataFrame:
    """Every history under ``root``: ``root/history.parquet`` and each run's
    ``root/<run>/history.parquet``, a run added twice counted once."""
    root = Path(root)
    parts = [read(p) for p in [root / DEFAULT_PATH.name, *sorted(root.glob("*/history.parquet"))]
             if p.exists()]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS))
    merged = pd.concat(parts, ignore_index=True).drop_duplicates(list(IDENTITY), keep="last")
    return merged.sort_values(["timestamp", *KEY_COLUMNS], kind="stable").reset_index(drop=True)
