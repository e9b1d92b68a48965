"""NVIDIA cuEquivariance: the workload's instruction list as a ``cue`` segmented polynomial.

The polynomial is built here from the e3nn instructions rather than taken from
``cuet.ChannelWiseTensorProduct``: that orders its paths (weight blocks) and output segments by
sorted output irreps, so matching e3nn would cost a weight gather and an output gather in every
timed call. Built from the instructions, with the same subscripts and the same (exactly sparse)
Clebsch-Gordan tables, it is the polynomial cuEquivariance's own channel-wise and fully
connected descriptors give, up to the order of its segments, so the kernels do the same work
(the e3nn normalization below coincides with theirs on the benchmark's workloads).

Conversions done once, at build, into the polynomial:

- weights and outputs: one weight segment per instruction, in instruction order, of shape
  ``(mul1, mul2)`` for ``uvu`` and ``(mul1, mul2, mul_out)`` for ``uvw``, row-major as in
  e3nn; output segments follow e3nn's ``irreps_out``.
- normalization: ``cue.clebsch_gordan`` is e3nn's ``wigner_3j`` times ``sqrt(2 l_out + 1)``, so
  each path's coefficients are ``cg * path_weight / sqrt(2 l_out + 1)`` with the
  ``path_weight`` of the e3nn reference module (component irreps, element paths).

Conversions in every call, variant ``default`` only:

- layout: the kernels take ``ir_mul`` operands; inputs and output are e3nn's ``mul_ir``, so they
  go through ``cuet.TransposeIrrepsLayout`` as in cuEquivariance's own ``layout=cue.mul_ir``
  modules (an identity for segments of multiplicity 1 or dimension 1).

Variant ``ir_mul`` makes none in its calls: it takes ``x`` and ``y`` in ``ir_mul`` and returns
the output in ``ir_mul``, as a model built for cuEquivariance holds its features; the level
converts the inputs once, outside the timed call, and the outputs back for the gate
(:meth:`CuEquivariance.operand_layout`).

Methods: ``naive`` (pure PyTorch, differentiable to any order) on CPU or without
``cuequivariance_ops_torch``; with the ops on CUDA, ``uniform_1d`` when every segment has one
shape (the channel-wise workloads), else ``fused_tp`` (``uvw``). Half precisions compute in
float32 (``math_dtype``), as the CUDA kernels do; ``tfloat32`` only changes the ``naive``
path's matmuls, the CUDA kernels compute in float32 regardless.
"""

from __future__ import annotations

import functools
import logging
import math
import warnings

import torch

from equibench.registry import (
    DEFAULT_VARIANT,
    CodePath,
    ConvFunction,
    Implementation,
    OperandLayout,
    TPFunction,
    Unsupported,
    Variant,
    register,
)
from equibench.workloads import TPProblem

log = logging.getLogger(__name__)

NATIVE = "ir_mul"  # the variant whose operands are in the kernels' own layout

# e3nn connection mode -> subscripts (weights, in1, in2, out) + Clebsch-Gordan modes.
# "uvu" sums over v, as e3nn does; cue's own channel-wise "kuv" output equals it for mul2 = 1.
_SUBSCRIPTS = {"uvu": "uv,iu,jv,ku+ijk", "uvw": "uvw,iu,jv,kw+ijk"}


# Why a row that ran cuEquivariance's ``naive`` method is not its product (every model family
# that runs cuEquivariance says it alike).
NAIVE_FALLBACK = ("naive: pure PyTorch, not cuEquivariance's CUDA kernels (they need "
                  "cuequivariance_ops_torch and a CUDA device)")


def has_cuda_ops() -> bool:
    """Whether ``cuequivariance_ops_torch`` (the CUDA kernels) imports."""
    try:
        import cuequivariance_ops_torch  # noqa: F401
    except Exception:  # noqa: BLE001 - without CUDA it raises OSError (libnvrtc), not ImportError
        return False
    return True


# Cached: building it (e3nn path weights, CG tables) costs ~1 s for mace-large, and the
# polynomial is immutable.
@functools.cache
def polynomial(problem: TPProblem):
    """The product as a ``cue.SegmentedPolynomial``, in e3nn's order and normalization.

    Inputs ``(w, x, y)`` of sizes ``(weight_numel, d1, d2)``, output of size ``d_out``; ``x``,
    ``y`` and the output in ``ir_mul`` layout, ``w`` in e3nn's layout.
    """
    import cuequivariance as cue

    if problem.mode not in _SUBSCRIPTS:
        raise Unsupported(f"connection mode {problem.mode!r} has no cuEquivariance subscripts")
    irreps = [cue.Irreps("O3", s)
              for s in (problem.irreps_in1, problem.irreps_in2, problem.irreps_out)]
    stp = cue.SegmentedTensorProduct.from_subscripts(_SUBSCRIPTS[problem.mode])
    for operand, operand_irreps in enumerate(irreps, start=1):
        for mul, ir in operand_irreps:
            stp.add_segment(operand, (ir.dim, mul))
    for ins in problem.e3nn_module(torch.float64).instructions:
        if ins.connection_mode != problem.mode or not ins.has_weight:
            raise Unsupported(f"mixed or weightless instructions: {ins}")
        ir1, ir2, ir_out = (irreps[k][i].ir for k, i in
                            enumerate((ins.i_in1, ins.i_in2, ins.i_out)))
        [cg] = cue.clebsch_gordan(ir1, ir2, ir_out)  # O(3) has no CG multiplicity
        # None: a new weight segment, its shape taken from the modes of the other operands.
        stp.add_path(None, ins.i_in1, ins.i_in2, ins.i_out,
                     c=cg * (ins.path_weight / math.sqrt(ir_out.dim)))
    return cue.SegmentedPolynomial.eval_last_operand(stp)


def cuda_method(poly) -> str:
    """The CUDA kernel for ``poly``: ``uniform_1d`` if, once the Clebsch-Gordan modes are
    flattened and size-1 modes squeezed, one mode of one size is left (the test
    ``cuet.ChannelWiseTensorProduct`` makes), else ``fused_tp``."""
    flat = poly.flatten_coefficient_modes().squeeze_modes()
    single_mode = all(len(stp.subscripts.modes()) == 1 for _, stp in flat.operations)
    return "uniform_1d" if flat.all_same_segment_shape() and single_mode else "fused_tp"


def choose_method(poly, device: str) -> str:
    """``naive`` unless the CUDA kernels can run here; then :func:`cuda_method`."""
    if not device.startswith("cuda") or not has_cuda_ops():
        return "naive"
    return cuda_method(poly)


def ir_mul_index(irreps: str) -> torch.Tensor:
    """``(d,)`` int64 on the CPU with ``ir_mul = mul_ir[..., index]`` for a tensor of
    ``irreps``: the permutation that ``cuet.TransposeIrrepsLayout`` applies, read off an
    ``arange``."""
    import cuequivariance as cue
    import cuequivariance_torch as cuet

    cue_irreps = cue.Irreps("O3", irreps)
    transpose = cuet.TransposeIrrepsLayout(cue_irreps, source=cue.mul_ir, target=cue.ir_mul,
                                           device="cpu")
    positions = torch.arange(cue_irreps.dim, dtype=torch.float64)
    return transpose(positions[None])[0].long()  # integers, exact in float64


class CueProduct(torch.nn.Module):
    """The product ``x (B, d1), y (B, d2), w (B, weight_numel) -> (B, d_out)``.

    cuEquivariance's kernels take ``ir_mul`` operands. By default (variant ``default``) the
    tensors are e3nn's ``mul_ir``: the inputs are transposed to ``ir_mul`` on every call and
    the output back, as cuEquivariance's own ``layout=mul_ir`` modules do. With ``native``
    (variant ``ir_mul``) ``x``, ``y`` and the output are in ``ir_mul`` and no call transposes
    anything, as in a model that keeps its features in that layout.
    """

    def __init__(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 native: bool = False):
        super().__init__()
        import cuequivariance as cue
        import cuequivariance_torch as cuet

        poly = polynomial(problem)
        # The kernels accumulate in float32 or float64 only; half inputs compute in float32.
        math_dtype = dtype if dtype in (torch.float32, torch.float64) else torch.float32
        self.native = native
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            self.poly = cuet.SegmentedPolynomial(poly, method=choose_method(poly, device),
                                                 math_dtype=math_dtype).to(device)
            if not self.native:
                self.in1, self.in2, self.out = (
                    cuet.TransposeIrrepsLayout(cue.Irreps("O3", s), source=src, target=dst,
                                               device=device)
                    for s, src, dst in (
                        (problem.irreps_in1, cue.mul_ir, cue.ir_mul),
                        (problem.irreps_in2, cue.mul_ir, cue.ir_mul),
                        (problem.irreps_out, cue.ir_mul, cue.mul_ir),
                    )
                )
        # A backend that fails to load falls back to naive with a warning: log it once, here,
        # and keep the method that runs.
        self.method: str = self.poly.method
        for w in caught:
            log.info("cuequivariance %s: %s", problem.name, w.message)
        # Where the operands depart from e3nn's layout (the level converts outside the call).
        self.operand_layout: OperandLayout | None = OperandLayout(
            *(ir_mul_index(s) for s in
              (problem.irreps_in1, problem.irreps_in2, problem.irreps_out))
        ) if native else None

    def forward(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``(B, d1), (B, d2), (B, weight_numel) -> (B, d_out)``."""
        if self.native:
            [out] = self.poly([w, x, y])
            return out
        [out] = self.poly([w, self.in1(x), self.in2(y)])
        return self.out(out)

    def conv(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor, edge_src: torch.Tensor,
             edge_dst: torch.Tensor, num_nodes: int) -> torch.Tensor:
        """``x (N, d1)`` gathered by ``edge_src (E,)``, ``y (E, d2)``, ``w (E, weight_numel)``,
        products scatter-summed by ``edge_dst (E,)`` into ``(num_nodes, d_out)``.

        Gather and scatter are the polynomial's own indices (fused in ``uniform_1d``); in
        ``mul_ir``, nodes are transposed before the gather and after the scatter, so per
        node rather than per edge.
        """
        if not self.native:
            x, y = self.in1(x), self.in2(y)
        [out] = self.poly(
            [w, x, y],
            input_indices={1: edge_src},
            output_indices={0: edge_dst},
            # Only the row count of this tensor is read.
            output_shapes={0: x.new_empty(num_nodes, 1)},
        )
        return out if self.native else self.out(out)


@register
class CuEquivariance(Implementation):
    name = "cuequivariance"
    levels = frozenset({"tp", "conv"})
    description = (
        "cuEquivariance SegmentedPolynomial from the e3nn instructions, mul_ir layout; naive "
        "(PyTorch) on CPU, uniform_1d/fused_tp with cuequivariance_ops_torch on CUDA; conv = "
        "indexed gather/scatter"
    )
    precisions = frozenset({"float64", "float32", "tfloat32", "bfloat16", "float16"})
    variants = {NATIVE: Variant(
        "x, y and the output in cuEquivariance's native ir_mul layout (converted once, outside "
        "the timed call): no per-call transposes")}

    def available(self, device: str) -> str | None:
        try:
            import cuequivariance  # noqa: F401
            import cuequivariance_torch  # noqa: F401
        except Exception as err:  # noqa: BLE001 - any import failure means unavailable
            return f"cuequivariance_torch does not import: {type(err).__name__}: {err}"
        return None

    def build_tp(self, problem: TPProblem, dtype: torch.dtype, device: str,
                 variant: str = DEFAULT_VARIANT) -> TPFunction:
        return CueProduct(problem, dtype, device, native=variant == NATIVE)

    def build_conv(self, problem: TPProblem, dtype: torch.dtype, device: str,
                   variant: str = DEFAULT_VARIANT) -> ConvFunction:
        return CueProduct(problem, dtype, device, native=variant == NATIVE).conv

    def operand_layout(self, built: object) -> OperandLayout | None:
        return _product(built).operand_layout

    def code_path(self, built: object, device: str) -> CodePath:
        product = _product(built)
        layout = ("operands and output in native ir_mul, no per-call transposes"
                  if product.native else
                  "inputs and output transposed between mul_ir and ir_mul on every call")
        path = (f"cuequivariance_torch SegmentedPolynomial method={product.method}; "
                f"{layout}")
        return CodePath(path, NAIVE_FALLBACK if product.method == "naive" else "")


def _product(built: object) -> CueProduct:
    """The :class:`CueProduct` of a builder's result (conv: its bound method)."""
    return getattr(built, "__self__", built)
