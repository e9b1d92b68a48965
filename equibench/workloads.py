"""Tensor-product workloads: the one description of each product (:class:`TPProblem`), and
the one table of them (:data:`TP_WORKLOADS`), which every level and backend reads.

A problem is its irreps, its e3nn instructions and e3nn's default normalization
(``irrep_normalization="component"``, ``path_normalization="element"``). Backends derive
what they execute from it: the e3nn reference module (:meth:`TPProblem.e3nn_module`), our
kernels' :class:`equibench.kernels.TPDescriptor` (:meth:`TPProblem.descriptor`),
cuEquivariance's segmented polynomial (``implementations/cuequivariance.py``) and
OpenEquivariance's problem (``implementations/openequivariance.py``).

Sources: the workload names and sizes are those of OpenEquivariance's benchmark suite
(Bharadwaj et al., arXiv 2501.13986, ``openequivariance/benchmark/problems.py``): MACE's
large and medium interactions (Batatia et al., NeurIPS 2022), NequIP's water, aspirin,
toluene and benzene configurations (Batzner et al., Nat. Commun. 2022), DiffDock's L = 1 and
L = 2 products (Corso et al., ICLR 2023) and single-path roofline products. Two differences
from that suite, kept so that every row measured so far means the same problem: our NequIP
inputs carry one parity per degree (below), theirs both; our channel-wise outputs follow
the instruction order, theirs are sorted by irrep.

Every product takes per-sample weights (``shared_weights=False``), as a convolution with
edge-dependent radial weights does. Channel-wise (``uvu``) products are built the way MACE
and NequIP build them: one output segment ``mul x ir_out`` per allowed path, keeping only the
``ir_out`` in the workload's output filter. Fully connected (``uvw``) products connect every
allowed ``(in1, in2, out)`` triple.

NequIP rows use the standard NequIP irreps (even scalars, odd vectors, ...) at the channel
counts and maximum degrees of the published configurations:

==================  =============================================  =================
name                in1 (and output filter)                        in2 (sph. harm.)
==================  =============================================  =================
nequip-water        32x0e+32x1o                                    1x0e+1x1o
nequip-aspirin      64x0e+64x1o                                    1x0e+1x1o
nequip-toluene      64x0e+64x1o+64x2e                              1x0e+1x1o+1x2e
nequip-benzene      64x0e+64x1o+64x2e+64x3o                        1x0e+1x1o+1x2e+1x3o
==================  =============================================  =================
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from e3nn import o3

Instruction = tuple[int, int, int, str, bool]


@dataclass(frozen=True)
class TPProblem:
    """A tensor product ``in1 x in2 -> out`` with explicit e3nn instructions."""

    name: str
    irreps_in1: str
    irreps_in2: str
    irreps_out: str
    instructions: tuple[Instruction, ...]
    mode: str
    note: str = ""

    @cached_property
    def dims(self) -> tuple[int, int, int]:
        return tuple(o3.Irreps(s).dim for s in (self.irreps_in1, self.irreps_in2, self.irreps_out))

    def e3nn_module(self, dtype: torch.dtype = torch.float64) -> o3.TensorProduct:
        """The e3nn module (per-sample weights, default normalizations) in ``dtype``.

        It is built with ``dtype`` as torch's default dtype, because e3nn computes its
        Clebsch-Gordan buffers in the default dtype: a float32-built module cast to float64
        is only float32-accurate (equivariance error ~1e-7).
        """
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype if dtype in (torch.float32, torch.float64) else previous)
        try:
            module = o3.TensorProduct(
                self.irreps_in1,
                self.irreps_in2,
                self.irreps_out,
                list(self.instructions),
                shared_weights=False,
                internal_weights=False,
            )
        finally:
            torch.set_default_dtype(previous)
        return module.to(dtype=dtype)

    @cached_property
    def weight_numel(self) -> int:
        return self.e3nn_module().weight_numel

    @cached_property
    def descriptor(self):  # noqa: ANN201 - equibench.kernels is imported on first use
        """Our kernels' :class:`equibench.kernels.TPDescriptor` of this product (sparse
        Clebsch-Gordan entries, weight layout, e3nn's normalization constants)."""
        from equibench.kernels import TPDescriptor

        return TPDescriptor.from_e3nn(self.irreps_in1, self.irreps_in2, self.irreps_out,
                                      list(self.instructions))

    def scaled(self, mul_scale: float) -> TPProblem:
        """The same product with the multiplicities of the first input and of the output
        scaled by ``mul_scale`` (rounded, at least 1), for fast tests: the instructions
        index the same blocks, so the paths and their Clebsch-Gordan blocks are unchanged."""
        def scale(irreps: str) -> str:
            return str(o3.Irreps([(max(1, round(mul * mul_scale)), ir)
                                  for mul, ir in o3.Irreps(irreps)]))

        return TPProblem(f"{self.name}/x{mul_scale:g}", scale(self.irreps_in1),
                         self.irreps_in2, scale(self.irreps_out), self.instructions,
                         self.mode, self.note)


def channelwise(name: str, in1: str, in2: str, out_filter: str, note: str = "") -> TPProblem:
    """A ``uvu`` product with one output segment per allowed path (MACE/NequIP style)."""
    irreps1, irreps2 = o3.Irreps(in1), o3.Irreps(in2)
    allowed = {ir for _, ir in o3.Irreps(out_filter)}
    out: list[tuple[int, o3.Irrep]] = []
    instructions: list[Instruction] = []
    for i1, (mul, ir1) in enumerate(irreps1):
        for i2, (_, ir2) in enumerate(irreps2):
            for ir_out in ir1 * ir2:
                if ir_out in allowed:
                    instructions.append((i1, i2, len(out), "uvu", True))
                    out.append((mul, ir_out))
    return TPProblem(name, in1, in2, str(o3.Irreps(out)), tuple(instructions), "uvu", note)


def fully_connected(name: str, in1: str, in2: str, out: str, note: str = "") -> TPProblem:
    """A ``uvw`` product over every allowed path (e3nn's FullyConnectedTensorProduct)."""
    irreps1, irreps2, irreps_out = o3.Irreps(in1), o3.Irreps(in2), o3.Irreps(out)
    instructions = tuple(
        (i1, i2, i_out, "uvw", True)
        for i1, (_, ir1) in enumerate(irreps1)
        for i2, (_, ir2) in enumerate(irreps2)
        for i_out, (_, ir_out) in enumerate(irreps_out)
        if ir_out in ir1 * ir2
    )
    return TPProblem(name, in1, in2, out, instructions, "uvw", note)


def _parity_irrep(l: int) -> str:  # noqa: E741 - l is the degree, as in the literature
    return f"{l}{'e' if l % 2 == 0 else 'o'}"


def roofline_problems(lmax: int = 3) -> list[TPProblem]:
    """Single-path ``128xL1 x 1xL2 -> 128xL3`` products for every allowed triple."""
    problems = []
    for l1 in range(lmax + 1):
        for l2 in range(lmax + 1):
            for l3 in range(abs(l1 - l2), min(l1 + l2, lmax) + 1):
                ir1, ir2 = o3.Irrep(_parity_irrep(l1)), o3.Irrep(_parity_irrep(l2))
                ir3 = o3.Irrep(l3, ir1.p * ir2.p)
                problems.append(
                    TPProblem(
                        f"roofline-{l1}{l2}{l3}",
                        f"128x{ir1}",
                        f"1x{ir2}",
                        f"128x{ir3}",
                        ((0, 0, 0, "uvu", True),),
                        "uvu",
                        "single path, for the roofline",
                    )
                )
    return problems


_SH3 = "1x0e+1x1o+1x2e+1x3o"
_DIFFDOCK = "10x1o+10x1e+48x0e+48x0o"

TP_WORKLOADS: dict[str, TPProblem] = {
    p.name: p
    for p in (
        channelwise(
            "mace-large", "128x0e+128x1o+128x2e", _SH3, "128x0e+128x1o+128x2e+128x3o",
            "MACE interaction, hidden 128x0e+128x1o+128x2e",
        ),
        channelwise("mace-medium", "128x0e+128x1o", _SH3, "128x0e+128x1o+128x2e"),
        channelwise("nequip-water", "32x0e+32x1o", "1x0e+1x1o", "32x0e+32x1o"),
        channelwise("nequip-aspirin", "64x0e+64x1o", "1x0e+1x1o", "64x0e+64x1o"),
        channelwise(
            "nequip-toluene", "64x0e+64x1o+64x2e", "1x0e+1x1o+1x2e", "64x0e+64x1o+64x2e"
        ),
        channelwise(
            "nequip-benzene", "64x0e+64x1o+64x2e+64x3o", _SH3, "64x0e+64x1o+64x2e+64x3o"
        ),
        fully_connected("diffdock-l1", _DIFFDOCK, "1x0e+1x1o", _DIFFDOCK),
        fully_connected("diffdock-l2", _DIFFDOCK, "1x0e+1x1o+1x2e", _DIFFDOCK),
        *roofline_problems(),
    )
}


def get_tp_workload(name: str) -> TPProblem:
    try:
        return TP_WORKLOADS[name]
    except KeyError:
        raise ValueError(
            f"unknown tensor-product workload {name!r}; choose one of {', '.join(TP_WORKLOADS)}"
        ) from None
