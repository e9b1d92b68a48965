"""Occupancy of a compiled kernel on an NVIDIA architecture, from its registers per thread,
shared memory per block and warps per block: the rules of NVIDIA's occupancy calculator
(CUDA C++ Programming Guide, "Technical Specifications per Compute Capability").

Torch-free and GPU-free: the figures of a kernel compiled here (:mod:`.gpu_compile`) for a
GPU that is not here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GpuArch:
    """The per-SM limits of one compute capability that bound occupancy."""

    name: str  # ptxas' name, "sm_90"
    capability: int  # 90
    gpus: str  # the data-centre GPUs of this capability
    shared_per_sm: int  # bytes of shared memory an SM can give blocks (the carve-out maximum)
    shared_per_block: int  # bytes one block may use (opt-in maximum)
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    register_unit: int = 256  # registers are allocated per warp in units of this many
    shared_unit: int = 128  # shared memory is allocated in units of this many bytes
    shared_reserved_per_block: int = 1024  # the CUDA runtime's own, per block (sm_80 on)


ARCHITECTURES: dict[str, GpuArch] = {a.name: a for a in (
    GpuArch("sm_80", 80, "A100", shared_per_sm=167936, shared_per_block=166912),
    GpuArch("sm_90", 90, "H100, H200", shared_per_sm=233472, shared_per_block=232448),
    GpuArch("sm_100", 100, "B200", shared_per_sm=233472, shared_per_block=232448),
)}


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM, the fraction of the SM's warp slots they fill and
    what limits them (``warps``, ``registers``, ``shared memory`` or ``blocks``)."""

    blocks_per_sm: int
    warps_per_sm: int
    fraction: float
    limiter: str


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def occupancy(arch: GpuArch, registers: int, shared: int, num_warps: int) -> Occupancy:
    """Occupancy of a kernel using ``registers`` per thread and ``shared`` bytes of shared
    memory per block, launched with ``num_warps`` warps per block, on ``arch``."""
    if num_warps < 1 or num_warps * 32 > 1024:
        raise ValueError(f"{num_warps} warps per block: a block holds 1 to 32 warps")
    limits = {"warps": arch.max_warps_per_sm // num_warps, "blocks": arch.max_blocks_per_sm}
    if registers > 0:
        per_warp = _round_up(registers * 32, arch.register_unit)
        limits["registers"] = (arch.registers_per_sm // per_warp) // num_warps
    per_block = _round_up(shared + arch.shared_reserved_per_block, arch.shared_unit)
    limits["shared memory"] = (arch.shared_per_sm // per_block
                               if shared <= arch.shared_per_block else 0)
    limiter = min(limits, key=lambda k: (limits[k], k != "warps"))
    blocks = limits[limiter]
    return Occupancy(blocks, blocks * num_warps, blocks * num_warps / arch.max_warps_per_sm,
                     limiter)
