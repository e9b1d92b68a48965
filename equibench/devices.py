"""Which devices a run uses, and one job per GPU at a time."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def require(device: str) -> str:
    """``device`` when this machine has it (``cpu``, or ``cuda:N`` with N below the number
    of GPUs torch sees); else ValueError, bad input, naming the problem and the fix."""
    if device == "cpu":
        return device
    index = device.removeprefix("cuda:")
    if not (device.startswith("cuda:") and index.isdigit()):
        raise ValueError(f"device {device!r}: expected cpu or cuda:N (N = 0, 1, ...)")
    count = _gpu_count()
    if int(index) >= count:
        seen = (f"torch sees {count} GPU(s), cuda:0 to cuda:{count - 1}" if count else
                "torch sees no GPU here (a CPU-only torch build, or no visible device)")
        raise ValueError(f"device {device!r}: {seen}; use --device cpu" +
                         (" or one of those" if count else ""))
    return device


def resolve_devices(spec: str | list[str]) -> list[str]:
    """``auto``: every visible GPU, else the CPU; ``cuda``: every visible GPU (error if none);
    ``cpu``, ``cuda:N`` or a comma-separated list of them as given."""
    if isinstance(spec, str) and "," in spec:
        spec = [s.strip() for s in spec.split(",") if s.strip()]
    if isinstance(spec, list):
        return list(spec)
    if spec == "cpu" or spec.startswith("cuda:"):
        return [spec]
    if spec not in ("auto", "cuda"):
        raise ValueError(f"device {spec!r}: expected auto, cpu, cuda, cuda:N or a "
                         "comma-separated list")
    count = _gpu_count()
    if spec == "cuda" and count == 0:
        raise RuntimeError("device 'cuda' requested but torch sees no GPU; use device: cpu")
    return [f"cuda:{i}" for i in range(count)] if count else ["cpu"]


def path_name(device: str) -> str:
    """A file-name-safe spelling: cuda:0 -> cuda0."""
    return device.replace(":", "")


def from_path_name(name: str) -> str:
    return f"cuda:{name[4:]}" if name.startswith("cuda") and name[4:].isdigit() else name


@contextlib.contextmanager
def exclusive(device: str, lock_dir: str | Path) -> Iterator[None]:
    """Hold a lock on ``device`` so that two benchmark jobs never share a GPU."""
    if not device.startswith("cuda"):
        yield
        return
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{path_name(device)}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
