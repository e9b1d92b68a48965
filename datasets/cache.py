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

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

DATA_DIR_ENV = "EQUIBENCH_DATA_DIR"
DEFAULT_DATA_DIR = Path("~/.cache/equibench/data")


def data_dir() -> Path:
    """Root of the data cache: ``$EQUIBENCH_DATA_DIR`` or ``~/.cache/equibench/data``.

    Read on every call (not at import) so tests and workflows can redirect it.
    """
    return Path(os.environ.get(DATA_DIR_ENV) or DEFAULT_DATA_DIR).expanduser()


def raw_dir(dataset: str) -> Path:
    """Directory for the unmodified downloads of ``dataset``."""
    return data_dir() / "raw" / dataset


def prepared_path(dataset: str) -> Path:
    """The prepared cache file of ``dataset`` (the Snakemake output of ``prepare_dataset``)."""
    return data_dir() / "prepared" / f"{dataset}.npz"


@contextlib.contextmanager
def atomic_write(path: Path) -> Iterator[BinaryIO]:
    """Open a temporary binary file next to ``path``; move it onto ``path`` on success.

    The temporary file lives in the destination directory because ``os.replace`` is
    only atomic within one file system. On error the temporary file is removed and
    ``path`` is left untouched.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        # mkstemp creates the file 0600; give it the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
