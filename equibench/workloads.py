"""Tensor-product workloads: the one description of each product (:class:`TPProblem`), and
the one table of them (:data:`TP_WORKLOADS`), which every level and backend reads.

A problem is its irreps, its e3nn instructions and e3nn's default normalization
(``irrep_normalization="component"``, ``path_normalization="element"``, OpenEquivariance's
defaults too). Backends derive what they execute from it: the e3nn reference module
(:meth:`TPProblem.e3nn_module`), our kernels' :class:`equibench.kernels.TPDescriptor`
(:meth:`TPProblem.descriptor`), cuEquivariance's segmented polynomial
(``implementations/cuequivariance.py``) and OpenEquivariance's problem
(``implementations/openequivariance.py``). Each problem records where its definition comes
from in :attr:`TPProblem.source`.

OpenEquivariance's benchmark suite (Bharadwaj et al., arXiv 2501.13986) is here under its
own names, built as its ``openequivariance/benchmark/problems.py`` builds it (read at
:data:`OEQ_COMMIT`; re-implemented, not copied):

- channel-wise products (``ChannelwiseTPP``, from MACE's ``irreps_tools``): one ``uvu``
  output segment ``mul1 x ir_out`` per allowed path, ``ir_out`` kept if it occurs in the
  output filter (its multiplicities are ignored), the segments **sorted** by irrep (degree,
  then odd before even, stably) and the instructions re-indexed to the sorted segments and
  ordered by output segment: :func:`channelwise`. MACE large and medium (Batatia et al.,
  NeurIPS 2022), NequIP with **both parities** in every input (Batzner et al., Nat. Commun.
  2022: ``nequip-lips``, ``nequip-revmd17-*``, ``nequip-water``), Nequix MP-1 and
  SevenNet-l3i5 layers;
- NequIP's interaction (``NequIPTPP``, from ``nequip/nn/interaction_block.py``): the same
  sorted segments with the instructions left in in1-major, in2-minor order:
  :func:`nequip_interaction` (the ``nequip-oam-l-*`` layers);
- fully connected products (``FullyConnectedTPProblem``, e3nn's): every allowed
  ``(in1, in2, out)`` triple, outputs in the given order: :func:`fully_connected`
  (``DiffDock-L=1/2``, ``tetris-poly-1/2``, ``e3tools_conv``);
- their roofline: single-instruction ``uvu`` products, ``oeq-roofline-<in1><in2><out>``,
  timed on 200,000 products (``tests/benchmark.py``: ``roofline_configs``).

Checked once against the builders of the ``openequivariance`` 0.7.0 release (PyPI sdist):
every problem of their ``problems.py`` but ``e3tools_transformer`` has the same irreps,
instructions in the same order, weight count and path weights here.
``tests/test_oeq_workloads.py`` keeps a few of them, worked out by hand from their source.

Every product takes per-sample weights (``shared_weights=False``), as a convolution with
edge-dependent radial weights does. Where OpenEquivariance's definition differs: its
``tetris-poly-1/2`` take one shared weight vector (``FullyConnectedTPProblem`` leaves
``shared_weights`` unset, which e3nn reads as shared); here they take one per product, the
same paths and weight count per product. Its ``e3tools_transformer`` (shared weights only)
is not in the table.

Ours, kept because they add something:

- ``roofline-<l1><l2><l3>``: a single path ``128xL1 x 1xL2 -> 128xL3`` for every allowed
  triple up to degree 3, with the standard parities (``e`` for even, ``o`` for odd degrees);
- ``nequip-<molecule>-1parity``: NequIP's channel counts and degrees with one parity per
  degree (the parities of NequIP-OAM and MACE), built as this project always built them
  (:func:`channelwise` with ``sort_outputs=False``: outputs in path order). They were named
  ``nequip-<molecule>`` until OpenEquivariance's problems took those names: every row
  measured under the old names is of these problems, and with a third to a half of the
  paths of OpenEquivariance's (e.g. 23 against ``nequip-revmd17-benzene``'s 68) they keep
  the quick preset within its time.

=======================  ==============================  =====================
name                     in1 (and output filter)         in2 (sph. harm.)
=======================  ==============================  =====================
nequip-water-1parity     32x0e+32x1o                     1x0e+1x1o
nequip-aspirin-1parity   64x0e+64x1o                     1x0e+1x1o
nequip-toluene-1parity   64x0e+64x1o+64x2e               1x0e+1x1o+1x2e
nequip-benzene-1parity   64x0e+64x1o+64x2e+64x3o         1x0e+1x1o+1x2e+1x3o
=======================  ==============================  =====================

Workloads the user defines by irreps (``equibench run --tp``, the configuration's
``workloads:``) are built by the same builders and added to the table at run time:
:mod:`equibench.custom_workloads`.

Renamed with OpenEquivariance's names: ``diffdock-l1``/``-l2`` are ``DiffDock-L=1``/``=2``
(the same problems). ``mace-large``, ``mace-medium`` and ``nequip-water`` now mean
OpenEquivariance's problems (for MACE the same paths, their outputs sorted).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import torch
from e3nn import o3

Instruction = tuple[int, int, int, str, bool]

OEQ_REPO = "https://github.com/PASSIONLab/OpenEquivariance"
OEQ_COMMIT = "723182d043735850978b5215e1c84cca71aad7b0"
OEQ_PROBLEMS = (f"{OEQ_REPO}/blob/{OEQ_COMMIT}/"
                "openequivariance/openequivariance/benchmark/problems.py")
# Their roofline list and batch live in the benchmark driver, read at this commit.
OEQ_BENCHMARK = (f"{OEQ_REPO}/blob/0525b347278fbb550834a90ace360783b41dd9be/"
                 "tests/benchmark.py")
OEQ_PAPER = "Bharadwaj et al., arXiv 2501.13986"


@dataclass(frozen=True)
class TPProblem:
    """A tensor product ``in1 x in2 -> out`` with explicit e3nn instructions.

    ``source``: where the definition comes from (paper and repository path at a commit).
    ``spec``: the user's definition ``IN1 x IN2 -> OUT mode`` of a workload defined in a
    configuration or on the command line (:mod:`equibench.custom_workloads`); empty for the
    built-in ones.
    """

    name: str
    irreps_in1: str
    irreps_in2: str
    irreps_out: str
    instructions: tuple[Instruction, ...]
    mode: str
    note: str = ""
    source: str = ""
    spec: str = ""

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

        return replace(self, name=f"{self.name}/x{mul_scale:g}",
                       irreps_in1=scale(self.irreps_in1), irreps_out=scale(self.irreps_out))


def _channelwise_paths(in1: str, in2: str, out_filter: str
                       ) -> tuple[list[tuple[int, o3.Irrep]], list[tuple[int, int]]]:
    """The output segments ``(mul1, ir_out)`` and ``(i_in1, i_in2)`` of a channel-wise
    product, one per allowed path, enumerated in1-major, in2-minor, then by ``ir_out`` in
    increasing degree (e3nn's ``Irrep.__mul__``); ``ir_out`` is allowed if it occurs in
    ``out_filter``, whatever its multiplicity there."""
    allowed = {ir for _, ir in o3.Irreps(out_filter)}
    segments: list[tuple[int, o3.Irrep]] = []
    paths: list[tuple[int, int]] = []
    for i1, (mul, ir1) in enumerate(o3.Irreps(in1)):
        for i2, (_, ir2) in enumerate(o3.Irreps(in2)):
            for ir_out in ir1 * ir2:
                if ir_out in allowed:
                    paths.append((i1, i2))
                    segments.append((mul, ir_out))
    return segments, paths


def _uvu(name: str, in1: str, in2: str, segments: list[tuple[int, o3.Irrep]],
         instructions: list[Instruction], source: str, note: str) -> TPProblem:
    return TPProblem(name, str(o3.Irreps(in1)), str(o3.Irreps(in2)), str(o3.Irreps(segments)),
                     tuple(instructions), "uvu", note, source)


def channelwise(name: str, in1: str, in2: str, out_filter: str, *, source: str,
                note: str = "", sort_outputs: bool = True) -> TPProblem:
    """A ``uvu`` product with one output segment per allowed path (MACE style).

    ``sort_outputs`` (OpenEquivariance's ``ChannelwiseTPP``): the segments sorted by irrep
    (e3nn's ``Irreps.sort``: degree, then odd before even, ties in path order) and the
    instructions re-indexed to them and ordered by output segment. Else (this project's
    original construction) the segments in path order.
    """
    segments, paths = _channelwise_paths(in1, in2, out_filter)
    new_index = range(len(segments))
    if sort_outputs:
        sorted_irreps, new_index, _ = o3.Irreps(segments).sort()
        segments = list(sorted_irreps)
    instructions = sorted(((i1, i2, new_index[k], "uvu", True) for k, (i1, i2) in
                           enumerate(paths)), key=lambda ins: ins[2])
    return _uvu(name, in1, in2, segments, instructions, source, note)


def nequip_interaction(name: str, in1: str, in2: str, out_filter: str, *, source: str,
                       note: str = "") -> TPProblem:
    """A ``uvu`` product as NequIP's interaction block (OpenEquivariance's ``NequIPTPP``)
    builds it: the segments sorted as :func:`channelwise` sorts them, the instructions left
    in path order."""
    segments, paths = _channelwise_paths(in1, in2, out_filter)
    sorted_irreps, new_index, _ = o3.Irreps(segments).sort()
    instructions = [(i1, i2, new_index[k], "uvu", True) for k, (i1, i2) in enumerate(paths)]
    return _uvu(name, in1, in2, list(sorted_irreps), instructions, source, note)


def fully_connected(name: str, in1: str, in2: str, out: str, *, source: str,
                    note: str = "") -> TPProblem:
    """A ``uvw`` product over every allowed path (e3nn's FullyConnectedTensorProduct),
    outputs in the order given."""
    irreps1, irreps2, irreps_out = o3.Irreps(in1), o3.Irreps(in2), o3.Irreps(out)
    instructions = tuple(
        (i1, i2, i_out, "uvw", True)
        for i1, (_, ir1) in enumerate(irreps1)
        for i2, (_, ir2) in enumerate(irreps2)
        for i_out, (_, ir_out) in enumerate(irreps_out)
        if ir_out in ir1 * ir2
    )
    return TPProblem(name, str(irreps1), str(irreps2), str(irreps_out), instructions, "uvw",
                     note, source)


def single_path(name: str, in1: str, in2: str, out: str, *, source: str,
                note: str = "") -> TPProblem:
    """One ``uvu`` instruction ``in1 x in2 -> out`` (OpenEquivariance's
    ``SingleInstruction``), for roofline measurements."""
    return TPProblem(name, str(o3.Irreps(in1)), str(o3.Irreps(in2)), str(o3.Irreps(out)),
                     ((0, 0, 0, "uvu", True),), "uvu", note, source)


def _parity_irrep(l: int) -> str:  # noqa: E741 - l is the degree, as in the literature
    return f"{l}{'e' if l % 2 == 0 else 'o'}"


def roofline_problems(lmax: int = 3) -> list[TPProblem]:
    """Ours: single-path ``128xL1 x 1xL2 -> 128xL3`` products for every allowed triple,
    standard parities."""
    problems = []
    for l1 in range(lmax + 1):
        for l2 in range(lmax + 1):
            for l3 in range(abs(l1 - l2), min(l1 + l2, lmax) + 1):
                ir1, ir2 = o3.Irrep(_parity_irrep(l1)), o3.Irrep(_parity_irrep(l2))
                ir3 = o3.Irrep(l3, ir1.p * ir2.p)
                problems.append(single_path(
                    f"roofline-{l1}{l2}{l3}", f"128x{ir1}", f"1x{ir2}", f"128x{ir3}",
                    source="equibench: every allowed triple up to degree 3",
                    note="single path, for the roofline",
                ))
    return problems


# OpenEquivariance's roofline_configs, in their order: (in1, in2, out) of 128 channels.
_OEQ_ROOFLINE = (("1e", "1e", "1e"), ("2e", "1e", "2e"), ("3e", "3e", "3e"), ("5e", "5e", "3e"),
                 ("5e", "3e", "5e"), ("6e", "3e", "6e"), ("7e", "4e", "7e"), ("7e", "7e", "7e"))


def oeq_roofline_problems() -> list[TPProblem]:
    """OpenEquivariance's roofline: ``128xA x 1xB -> 128xC`` for their eight triples."""
    return [
        single_path(f"oeq-roofline-{a}{b}{c}", f"128x{a}", f"1x{b}", f"128x{c}",
                    source=f"{OEQ_PAPER} roofline; {OEQ_BENCHMARK} (roofline_configs)",
                    note=f"their [{i}]#128x{a} x 1x{b} -> 128x{c} (uvu); timed on 200,000 "
                         "products")
        for i, (a, b, c) in enumerate(_OEQ_ROOFLINE, start=1)
    ]


def _source(paper: str, upstream: str = "") -> str:
    """A paper, the upstream definition OpenEquivariance cites, and their problems.py."""
    return "; ".join(s for s in (paper, upstream, OEQ_PROBLEMS) if s)


_SH1, _SH2 = "1x0e+1x1o", "1x0e+1x1o+1x2e"
_SH3 = "1x0e+1x1o+1x2e+1x3o"
_DIFFDOCK = "10x1o+10x1e+48x0e+48x0o"
_NEQUIP_OAM_HIDDEN = _NEQUIX_HIDDEN = "128x0e+64x1o+32x2e+32x3o"
_SEVENNET_SH = "1x0e+1x1e+1x2e+1x3e"
_SEVENNET_HIDDEN = "128x0e+64x1e+32x2e+32x3e"

_MACE = _source("MACE, Batatia et al., NeurIPS 2022")
_NEQUIP = _source("NequIP, Batzner et al., Nat. Commun. 2022")
_NEQUIP_OAM = _source(
    "NequIP-OAM-L (NequIP, Batzner et al., Nat. Commun. 2022)",
    "https://github.com/mir-group/nequip/blob/27d9d2182da918ab7be0017d8300e53278f5e00e/"
    "nequip/model/nequip_models.py#L30-L58",
)
_NEQUIX = _source("Nequix MP-1",
                  "https://github.com/atomicarchitects/nequix/blob/main/configs/nequix-mp-1.yml")
_SEVENNET = _source(
    "SevenNet-l3i5",
    "https://github.com/MDIL-SNU/SevenNet/tree/main/sevenn/pretrained_potentials/SevenNet_l3i5",
)
_DIFFDOCK_SRC = _source(
    "DiffDock, Corso et al., ICLR 2023",
    "https://github.com/gcorso/DiffDock/blob/b4704d94de74d8cb2acbe7ec84ad234c09e78009/"
    "models/tensor_layers.py#L299",
)
_TETRIS = _source(
    "e3nn tetris polynomial example",
    "https://github.com/e3nn/e3nn/blob/f95297952303347a8a3cfe971efe449c710c43b2/"
    "examples/tetris_polynomial.py#L66-L68",
)
_E3TOOLS = _source("e3tools convolution (no upstream link in OpenEquivariance's source)")
_PER_SAMPLE = "per-sample weights here; OpenEquivariance's takes one shared weight vector"
_NEQUIP_1PARITY = ("equibench: NequIP's channel counts and degrees (Batzner et al., Nat. "
                   "Commun. 2022) with one parity per degree")
_NEQUIP_1PARITY_SIZES = (("water", "32x0e+32x1o", _SH1), ("aspirin", "64x0e+64x1o", _SH1),
                         ("toluene", "64x0e+64x1o+64x2e", _SH2),
                         ("benzene", "64x0e+64x1o+64x2e+64x3o", _SH3))

TP_WORKLOADS: dict[str, TPProblem] = {
    p.name: p
    for p in (
        channelwise("mace-large", "128x0e+128x1o+128x2e", _SH3, "128x0e+128x1o+128x2e+128x3o",
                    source=_MACE, note="MACE interaction, hidden 128x0e+128x1o+128x2e"),
        channelwise("mace-medium", "128x0e+128x1o", _SH3, "128x0e+128x1o+128x2e",
                    source=_MACE),
        channelwise("nequip-lips", "32x0o+32x0e+32x1o+32x1e+32x2o+32x2e", _SH2,
                    "32x0o+32x0e+32x1o+32x1e+32x2o+32x2e", source=_NEQUIP),
        channelwise("nequip-revmd17-aspirin", "64x0o+64x0e+64x1o+64x1e", _SH1,
                    "64x0o+64x0e+64x1o+64x1e", source=_NEQUIP),
        channelwise("nequip-revmd17-toluene", "64x0o+64x0e+64x1o+64x1e+64x2o+64x2e", _SH2,
                    "64x0o+64x0e+64x1o+64x1e+64x2o+64x2e", source=_NEQUIP),
        channelwise("nequip-revmd17-benzene",
                    "64x0o+64x0e+64x1o+64x1e+64x2o+64x2e+64x3o+64x3e", _SH3,
                    "64x0o+64x0e+64x1o+64x1e+64x2o+64x2e+64x3o+64x3e", source=_NEQUIP),
        channelwise("nequip-water", "32x0o+32x0e+32x1o+32x1e", _SH1,
                    "32x0o+32x0e+32x1o+32x1e", source=_NEQUIP),
        nequip_interaction("nequip-oam-l-first-layer", "32x0e", _SH3, _NEQUIP_OAM_HIDDEN,
                           source=_NEQUIP_OAM),
        nequip_interaction("nequip-oam-l-main-layers", _NEQUIP_OAM_HIDDEN, _SH3,
                           _NEQUIP_OAM_HIDDEN, source=_NEQUIP_OAM),
        nequip_interaction("nequip-oam-l-last-layer", _NEQUIP_OAM_HIDDEN, _SH3, "128x0e",
                           source=_NEQUIP_OAM),
        # Their main-layer filter lists every segment the product makes (23 of them); the
        # builder reads only which irreps occur in it.
        channelwise("nequix-mp-1-first_layer", "89x0e", _SH3, "89x0e+89x1o+89x2e+89x3o",
                    source=_NEQUIX),
        channelwise("nequix-mp-1-main_layers", _NEQUIX_HIDDEN, _SH3, "0e+1o+2e+3o",
                    source=_NEQUIX),
        channelwise("nequix-mp-1-last_layer", _NEQUIX_HIDDEN, _SH3, "0e", source=_NEQUIX),
        channelwise("SevenNet_l3i5-first-layer", "128x0e", _SEVENNET_SH,
                    "128x0e+128x1e+128x2e+128x3e", source=_SEVENNET),
        channelwise("SevenNet_l3i5-main-layers", _SEVENNET_HIDDEN, _SEVENNET_SH,
                    "0e+1e+2e+3e", source=_SEVENNET),
        channelwise("SevenNet_l3i5-last-layer", _SEVENNET_HIDDEN, _SEVENNET_SH, "0e",
                    source=_SEVENNET),
        fully_connected("DiffDock-L=1", _DIFFDOCK, _SH1, _DIFFDOCK, source=_DIFFDOCK_SRC),
        fully_connected("DiffDock-L=2", _DIFFDOCK, _SH2, _DIFFDOCK, source=_DIFFDOCK_SRC),
        fully_connected("tetris-poly-1", _SH3, _SH3, "64x0e+24x1e+24x1o+16x2e+16x2o",
                        source=_TETRIS, note=_PER_SAMPLE),
        fully_connected("tetris-poly-2", "64x0e+24x1e+24x1o+16x2e+16x2o", _SH2, "1x0o+6x0e",
                        source=_TETRIS, note=_PER_SAMPLE),
        fully_connected("e3tools_conv", "64x0e+16x1o", _SH1, "80x0e+16x1o", source=_E3TOOLS),
        *oeq_roofline_problems(),
        *(channelwise(f"nequip-{molecule}-1parity", irreps, sh, irreps, sort_outputs=False,
                      source=_NEQUIP_1PARITY, note=f"named nequip-{molecule} until "
                      "OpenEquivariance's problems took the nequip names")
          for molecule, irreps, sh in _NEQUIP_1PARITY_SIZES),
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
