"""The CPU memory allocator of case processes: tcmalloc where installed, else glibc's.

Why it matters: glibc serves a block above its mmap threshold (adaptive, at most 32 MiB)
with a fresh mapping and unmaps it on free, so a call whose tensors cross that size
page-faults all of them again on every call. Measured here on the ``mace-large`` tensor
product forward at batch 1024 (a 37 MB output): 9,089 page faults per call, and the fused
kernel took 24 ms under glibc against 8 ms under tcmalloc (e3nn: 200 ms against 159 ms).
Where that cliff falls depends on tensor sizes, not on the implementation, so by default
case processes run with tcmalloc, as PyTorch's CPU performance tuning guide recommends.
glibc's own knobs (``mallopt`` thresholds) were tried and do not stop it: small requests
split the freed block and the next large one is mapped afresh.

tcmalloc is ``libtcmalloc_minimal.so.4`` (Debian/Ubuntu: ``apt install
libtcmalloc-minimal4``; conda: ``gperftools``), preloaded into the runner's forkserver, so
every case process inherits it. The allocator a case actually ran with is recorded in its
row (its ``cpu_allocator`` column).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from collections.abc import Iterator
from pathlib import Path

CHOICES = ("tcmalloc", "system")
TCMALLOC = "libtcmalloc_minimal.so.4"
INSTALL_HINT = ("install it (Debian/Ubuntu: apt install libtcmalloc-minimal4; conda: "
                "gperftools) or set cpu_allocator: system")
_LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64",
                 "/usr/lib", "/usr/local/lib")
# glibc's mallopt parameter numbers and its default trim threshold.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_DEFAULT_TRIM_THRESHOLD = 128 * 1024


def find_tcmalloc() -> str | None:
    """Path of tcmalloc's shared library, or None where it is not installed."""
    prefix = os.environ.get("CONDA_PREFIX")
    dirs = ([f"{prefix}/lib"] if prefix else []) + list(_LIBRARY_DIRS)
    for directory in dirs:
        path = Path(directory) / TCMALLOC
        if path.is_file():
            return str(path)
    found = ctypes.util.find_library("tcmalloc_minimal")
    return found if found and Path(found).is_absolute() else None


def preload_for(choice: str) -> str | None:
    """The library to preload into case processes for ``choice`` (None: glibc's own).

    Raises ValueError for an unknown choice; ``tcmalloc`` where it is not installed gives
    None (the rows then say ``glibc``) and the caller warns.
    """
    if choice not in CHOICES:
        raise ValueError(f"cpu_allocator must be one of {CHOICES}, got {choice!r}")
    return find_tcmalloc() if choice == "tcmalloc" else None


@contextlib.contextmanager
def preloaded(library: str | None) -> Iterator[None]:
    """``LD_PRELOAD`` holds ``library`` (prepended) while the block starts processes."""
    if library is None:
        yield
        return
    before = os.environ.get("LD_PRELOAD")
    os.environ["LD_PRELOAD"] = f"{library} {before}" if before else library
    try:
        yield
    finally:
        if before is None:
            del os.environ["LD_PRELOAD"]
        else:
            os.environ["LD_PRELOAD"] = before


def _tcmalloc_release() -> ctypes._CFuncPtr | None:
    """tcmalloc's C entry point that returns free pages to the OS, if it is loaded here."""
    return getattr(ctypes.CDLL(None), "MallocExtension_ReleaseFreeMemory", None)


def active() -> str:
    """The allocator serving this process: ``tcmalloc`` or ``glibc``."""
    return "tcmalloc" if _tcmalloc_release() is not None else "glibc"


def release_free_memory() -> None:
    """Give freed memory back to the OS now and (glibc) from now on.

    For the peak-memory measurement, which reads the resident set's growth during one
    call: memory the allocator kept from earlier calls would be reused unseen. tcmalloc
    releases its free pages (reused ones fault in again and count); glibc gets a fixed
    small mmap threshold so that every large block is a fresh mapping, counted when
    touched. This slows allocation, so it comes after timing, in a process that runs
    nothing else afterwards.
    """
    release = _tcmalloc_release()
    if release is not None:
        release()
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(_M_MMAP_THRESHOLD, 64 * 1024)
        libc.mallopt(_M_TRIM_THRESHOLD, _DEFAULT_TRIM_THRESHOLD)
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass  # neither: the growth is then a lower bound
