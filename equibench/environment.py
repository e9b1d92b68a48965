"""Where a result came from: code version, machine and library versions."""

from __future__ import annotations

import functools
import importlib.metadata
import math
import os
import platform
import re
import socket
import subprocess
from pathlib import Path

import torch

from equibench import vocabulary

TRACKED_PACKAGES = (
    "torch", "e3nn", "cuequivariance", "cuequivariance-torch", "cuequivariance-ops-torch-cu12",
    "openequivariance", "mace-torch", "triton", "numpy",
)


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], capture_output=True, text=True, timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# The CPU features that decide which vector code runs (ours is built -march=native, and
# PyTorch dispatches on them): AVX, AVX2, AVX-512 and its extensions, AMX, FMA, F16C.
_ISA = re.compile(r"^(avx.*|amx.*|fma|f16c|sse4_[12])$")


def _cpu_flags() -> str:
    """The ISA flags of /proc/cpuinfo that :data:`_ISA` names, sorted, space-separated."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return " ".join(sorted(f for f in line.split(":", 1)[1].split()
                                           if _ISA.match(f)))
    except OSError:
        pass
    return ""


@functools.cache
def _march_native() -> str:
    """What ``-march=native`` resolves to for the C++ compiler that builds our kernels
    (``$CXX``, else ``c++``), and the vector width its tuning prefers for auto-vectorized
    loops: ``znver3``, ``rocketlake prefer-vector-width=256``, ...; '' if it cannot say."""
    try:
        out = subprocess.run([os.environ.get("CXX", "c++"), "-march=native", "-Q",
                              "--help=target"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    march = re.search(r"^\s*-march=\s*(\S+)", out.stdout, re.MULTILINE)
    width = re.search(r"^\s*-mprefer-vector-width=\s+(\d+)", out.stdout, re.MULTILINE)
    if march is None:
        return ""
    return march.group(1) + (f" prefer-vector-width={width.group(1)}" if width else "")


def package_version(package: str) -> str:
    """The installed version of a distribution, '' when it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _nvidia_driver() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout else ""


# What nvidia-smi is asked of the case's GPU, beside its name: the clocks and power limit
# that bound its speed, and MIG (a slice of a GPU is not the whole GPU).
GPU_QUERY = ("clocks.sm", "clocks.max.sm", "power.limit", "mig.mode.current")


def _nvidia_smi(index: int, fields: tuple[str, ...]) -> list[str]:
    """``nvidia-smi``'s values of ``fields`` for GPU ``index``; [] where it does not run."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits",
             "-i", str(index)], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
    values = [v.strip() for v in lines[0].split(",")] if lines else []
    return values if len(values) == len(fields) else []


def gpu_state(device: str) -> dict[str, int | float | str]:
    """The clocks, power limit and MIG mode of ``device`` (``cuda:N``), as result columns;
    the blanks (-1, NaN, '') where nvidia-smi does not answer or says N/A."""
    values = _nvidia_smi(int(device.partition(":")[2] or 0), GPU_QUERY)
    sm, max_sm, power, mig = values or ["", "", "", ""]

    def number(text: str, kind: type) -> int | float:
        try:
            return kind(float(text))
        except ValueError:  # "[N/A]", "[Not Supported]", ""
            return -1 if kind is int else math.nan

    return {"gpu_clock_sm_mhz": number(sm, int), "gpu_clock_max_sm_mhz": number(max_sm, int),
            "gpu_power_limit_w": number(power, float),
            "gpu_mig_mode": "" if mig.startswith("[") else mig}


def git_commit() -> str:
    """The commit of the equibench checkout ('unknown' outside one)."""
    return _git("rev-parse", "HEAD") or "unknown"


def capture(device: str = "cpu") -> dict[str, str | int | float | bool]:
    """A flat dict of provenance fields, merged into every result row."""
    env: dict[str, str | int | bool] = {
        "git_commit": git_commit(),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "host": socket.gethostname(),
        "cpu_model": _cpu_model(),
        "cpu_flags": _cpu_flags(),
        "cpu_march_native": _march_native(),
        "cpu_count": os.cpu_count() or 0,
        "python": platform.python_version(),
        "gpu_name": "",
        "gpu_driver": "",
        "cuda": torch.version.cuda or "",
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu_name"] = torch.cuda.get_device_name(torch.device(device))
        env["gpu_driver"] = _nvidia_driver()
        env.update(gpu_state(device))
    for package in TRACKED_PACKAGES:
        env["version_" + package.replace("-", "_")] = package_version(package)
    return env


def machine_label(env: dict) -> str:
    """The machine label (``equibench.vocabulary.machine_label``) of a captured ``env``."""
    return vocabulary.machine_label(env.get("gpu_name"), env.get("cpu_model"))
