"""Tensor-product workloads of REFERENCE.md section 2 as :class:`TPDescriptor` builders.

``uvu`` workloads build their instructions the way MACE does (every pair of input
irreps, every output irrep of the product allowed by parity and the triangle
inequality that appears in the output irreps, one weighted ``uvu`` path), but point
each path at the listed output block instead of giving it its own. ``uvw`` workloads
use every allowed ``(i_in1, i_in2, i_out)`` triple, as ``FullyConnectedTensorProduct``.
``mul_scale`` shrinks every multiplicity of the first input and the output (never
below 1) for fast tests.
"""

from __future__ import annotations

from dataclasses import dataclass

from .descriptor import TPDescriptor


@dataclass(frozen=True)
class Workload:
    """One row of the workload table."""

    name: str
    mode: str
    irreps_in1: str
    irreps_in2: str
    irreps_out: str


def _both_parities(mul: int, lmax: int) -> str:
    return "+".join(f"{mul}x{l}{p}" for l in range(lmax + 1) for p in "oe")  # noqa: E741


def _sph(lmax: int) -> str:
    return "+".join(f"1x{l}{'e' if l % 2 == 0 else 'o'}" for l in range(lmax + 1))  # noqa: E741


_DIFFDOCK = "10x1o+10x1e+48x0e+48x0o"

WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            "mace-large",
            "uvu",
            "128x0e+128x1o+128x2e",
            "1x0e+1x1o+1x2e+1x3o",
            "128x0e+128x1o+128x2e+128x3o",
        ),
        Workload(
            "mace-medium", "uvu", "128x0e+128x1o", "1x0e+1x1o+1x2e+1x3o", "128x0e+128x1o+128x2e"
        ),
        Workload("nequip-water", "uvu", _both_parities(32, 1), _sph(1), _both_parities(32, 1)),
        Workload("nequip-aspirin", "uvu", _both_parities(64, 1), _sph(1), _both_parities(64, 1)),
        Workload("nequip-toluene", "uvu", _both_parities(64, 2), _sph(2), _both_parities(64, 2)),
        Workload("nequip-benzene", "uvu", _both_parities(64, 3), _sph(3), _both_parities(64, 3)),
        Workload("diffdock-l1", "uvw", _DIFFDOCK, "0e+1o", _DIFFDOCK),
        Workload("diffdock-l2", "uvw", _DIFFDOCK, "0e+1o+2e", _DIFFDOCK),
    ]
}


def roofline_triples(lmax: int = 3) -> list[tuple[int, int, int]]:
    """Every ``(L1, L2, L3)`` with ``L <= lmax`` allowed by the triangle inequality."""
    return [
        (l1, l2, l3)
        for l1 in range(lmax + 1)
        for l2 in range(lmax + 1)
        for l3 in range(abs(l1 - l2), min(l1 + l2, lmax) + 1)
    ]


def _scaled(irreps: str, mul_scale: float) -> str:
    from e3nn import o3

    return str(o3.Irreps([(max(1, round(mul * mul_scale)), ir) for mul, ir in o3.Irreps(irreps)]))


def instructions_for(
    irreps_in1: str, irreps_in2: str, irreps_out: str, mode: str
) -> list[tuple[int, int, int, str, bool]]:
    """All allowed weighted paths, in MACE's (``uvu``) or e3nn's (``uvw``) order."""
    from e3nn import o3

    i1, i2, io = o3.Irreps(irreps_in1), o3.Irreps(irreps_in2), o3.Irreps(irreps_out)
    out_irs = [ir for _, ir in io]
    ins = []
    for a, (_, ir1) in enumerate(i1):
        for b, (_, ir2) in enumerate(i2):
            if mode == "uvu":
                for ir in ir1 * ir2:
                    if ir in out_irs:
                        ins.append((a, b, out_irs.index(ir), "uvu", True))
            else:
                for c, ir in enumerate(out_irs):
                    if ir in ir1 * ir2:
                        ins.append((a, b, c, "uvw", True))
    return ins


def workload_descriptor(name: str, mul_scale: float = 1.0) -> TPDescriptor:
    """Descriptor of a named workload (``roofline-L1L2L3`` for the roofline family)."""
    if name.startswith("roofline-"):
        l1, l2, l3 = (int(c) for c in name.removeprefix("roofline-"))
        mul = max(1, round(128 * mul_scale))
        parity = ["e", "o"]
        a, b, c = f"{mul}x{l1}{parity[l1 % 2]}", f"1x{l2}{parity[l2 % 2]}", f"{mul}x{l3}"
        c += parity[(l1 + l2) % 2]
        return TPDescriptor.from_e3nn(a, b, c, [(0, 0, 0, "uvu", True)])
    w = WORKLOADS[name]
    in1, out = _scaled(w.irreps_in1, mul_scale), _scaled(w.irreps_out, mul_scale)
    return TPDescriptor.from_e3nn(
        in1, w.irreps_in2, out, instructions_for(in1, w.irreps_in2, out, w.mode)
    )
