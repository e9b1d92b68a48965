"""Where dataset files live on disk, and how they are written safely.

Layout (one documented place for everything)::

    $EQUIBENCH_DATA_DIR            default ~/.cache/equibench/data
    ├── raw/<dataset>/...          downloads exactly as published (tarballs, text files)
    └── prepared/<dataset>.npz     one prepared file per dataset name (see ``prepared.py``)

Every file is written to a temporary name in the same directory and moved into
place with ``os.replace``, so a reader never sees a half-written file and an
interrupted run leaves the previous version intact.
"""

from __future__ import annotations

from pathlib import Path

from equibench.files import atomic_write
from equibench.vocabulary import data_dir  # the root, also read by the Snakemake workflow

__all__ = ["atomic_write", "data_dir", "prepared_path", "raw_dir"]


def raw_dir(dataset: str) -> Path:
    """Directory for the unmodified downloads of ``dataset``."""
    return data_dir() / "raw" / dataset


def prepared_path(dataset: str) -> Path:
    """The prepared cache file of ``dataset`` (the Snakemake output of ``prepare_dataset``)."""
    return data_dir() / "prepared" / f"{dataset}.npz"
