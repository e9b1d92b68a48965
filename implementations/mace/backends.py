"""The same MACE model (same weights) on each backend.

* ``e3nn``: mace-torch's default modules.
* ``cuequivariance``: mace-torch's own conversion (``mace.cli.convert_e3nn_cueq``), which
  rebuilds the model with cuEquivariance modules and maps the weights.
* ``openequivariance``: mace-torch's own conversion (``mace.cli.convert_e3nn_oeq``), GPU
  only.
* ``fused``: the e3nn model whose interaction convolution (the channel-wise ``conv_tp``
  on gathered sender features, then the scatter-sum to receivers) is the equibench fused
  convolution; see :func:`use_fused_convolution`.
* ``symmetrix``: Symmetrix-XL's native CPU inference, the model converted by its own
  converter (:mod:`.symmetrix`); inference and md only.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable

import torch
from torch import Tensor

from .linear import use_irreps_linear
from .symmetrix import SymmetrixModel

BACKENDS = ("e3nn", "cuequivariance", "openequivariance", "fused", "symmetrix")
# Marks interaction blocks whose conv_tp is an EquibenchConvolution (value of conv_fusion).
FUSION_MARK = "equibench"


@functools.cache
def import_error(module: str) -> str | None:
    """None if ``module`` imports, else why not. Any exception counts: openequivariance
    raises an AssertionError on machines without CUDA, and mace-torch imports it."""
    import importlib

    try:
        importlib.import_module(module)
    except Exception as err:  # noqa: BLE001 - every failure makes the backend unavailable
        return f"import {module} failed: {type(err).__name__}: {err}"
    return None


def unavailable_reason(backend: str, device: str) -> str | None:
    """None if ``backend`` can run on ``device`` here, else the reason: mace-torch must import,
    and the backend's implementation answers for itself (``Implementation.available``, the
    one probe of each implementation)."""
    from equibench import registry

    if reason := import_error("mace.modules"):
        return reason
    if backend == "symmetrix":
        from .symmetrix import unavailable_reason as symmetrix_unavailable

        return symmetrix_unavailable(device)
    return registry.get(backend).available(device)


def kernel_backend(device: str) -> str:
    """The equibench kernel backend of a device: generated C++ on CPU, Triton on GPU."""
    return "triton" if device.startswith("cuda") else "cpu"


class EquibenchConvolution(torch.nn.Module):
    """Drop-in for a MACE interaction's ``conv_tp`` under mace-torch's ``conv_fusion``
    contract: ``forward(node_feats, edge_attrs, tp_weights, edge_index)`` returns the
    messages already summed at the receivers.

    ``node_feats (N, in1)``, ``edge_attrs (E, in2)`` (spherical harmonics),
    ``tp_weights (E, weight_numel)`` (radial MLP), ``edge_index (2, E)`` (row 0 sender,
    row 1 receiver) -> ``(N, out)``, equal to
    ``scatter_sum(conv_tp(node_feats[edge_index[0]], edge_attrs, tp_weights),
    edge_index[1])`` of the replaced e3nn ``conv_tp``.
    """

    def __init__(self, conv_tp: torch.nn.Module, backend: str) -> None:
        super().__init__()
        from equibench.kernels import FusedConvolution, TPDescriptor, ops

        self.conv = FusedConvolution(TPDescriptor.from_tensor_product(conv_tp), backend)
        # Build the kernels now: a missing compiler shows when the model is built (the
        # backend is unavailable), not in the first timed call.
        ops.kernels(self.conv.key, backend)
        # Attributes mace-torch and its tools read from a conv_tp.
        self.irreps_in1, self.irreps_in2 = conv_tp.irreps_in1, conv_tp.irreps_in2
        self.irreps_out = conv_tp.irreps_out
        self.weight_numel = conv_tp.weight_numel

    def forward(
        self, node_feats: Tensor, edge_attrs: Tensor, tp_weights: Tensor, edge_index: Tensor
    ) -> Tensor:
        return self.conv(
            node_feats, edge_attrs, tp_weights, edge_index[0], edge_index[1],
            node_feats.shape[0],
        )  # fmt: skip


def use_fused_convolution(model: torch.nn.Module, backend: str) -> torch.nn.Module:
    """Replace, in place, every interaction's e3nn ``conv_tp`` + scatter by the fused
    convolution of the equibench kernels (``backend``: ``"cpu"`` or ``"triton"``).

    mace-torch's interaction blocks already branch on ``hasattr(self, "conv_fusion")``:
    with it they call ``conv_tp(node_feats, edge_attrs, tp_weights, edge_index)`` and
    take its result as the summed messages (the path its cuEquivariance and
    OpenEquivariance fused convolutions use). Setting that attribute and swapping the
    module is the whole change; no mace-torch code is copied. The replaced ``conv_tp``
    has no parameters (its weights come per edge from the radial MLP), so the model's
    parameters and state dict are unchanged.
    """
    from e3nn import o3

    for block in model.interactions:
        if not isinstance(block.conv_tp, o3.TensorProduct):
            raise TypeError(
                f"{type(block).__name__}.conv_tp is {type(block.conv_tp).__name__}, "
                "not an e3nn TensorProduct"
            )
        block.conv_tp = EquibenchConvolution(block.conv_tp, backend)
        block.conv_fusion = FUSION_MARK
    return model


def use_fused_symmetric_contraction(model: torch.nn.Module, backend: str) -> torch.nn.Module:
    """Replace, in place, every product block's symmetric contraction by ours
    (:class:`.symmetric_contraction.FusedSymmetricContraction`: the same weights and
    function, on the kernels generated from its description on ``backend``)."""
    from mace.modules.symmetric_contraction import SymmetricContraction

    from .symmetric_contraction import FusedSymmetricContraction

    for block in model.products:
        if not isinstance(block.symmetric_contractions, SymmetricContraction):
            raise TypeError(f"{type(block).__name__}.symmetric_contractions is "
                            f"{type(block.symmetric_contractions).__name__}, not mace-torch's "
                            "SymmetricContraction")
        block.symmetric_contractions = FusedSymmetricContraction(
            block.symmetric_contractions, backend)
    return model


# What the fused backend replaces in a mace-torch model (``extra.fused_parts``).
FUSED_PARTS = ("interaction convolution: equibench fused kernels (conv_tp + scatter)",
               "product basis: equibench fused kernels (symmetric contraction)",
               "linear layers of interactions and products: one matrix product per output "
               "irrep (IrrepsLinear)")


def _restoring_default_dtype(convert: Callable[..., torch.nn.Module]) -> Callable:
    """mace-torch's converters set the global default dtype to the model's; undo that."""

    @functools.wraps(convert)
    def wrapped(*args: object, **kwargs: object) -> torch.nn.Module:
        default = torch.get_default_dtype()
        try:
            return convert(*args, **kwargs)
        finally:
            torch.set_default_dtype(default)

    return wrapped


def code_path(model: torch.nn.Module) -> dict[str, str]:
    """What a MACE model on its backend runs: the classes of its interaction blocks'
    convolution and product modules (after mace-torch's conversion), and a fallback where
    cuEquivariance runs its pure-PyTorch path."""
    if isinstance(model, SymmetrixModel):
        return {"path": model.describe(), "fallback": ""}
    names = sorted({f"{type(m).__module__.split('.')[0]}.{type(m).__name__}"
                    for block in (*getattr(model, "interactions", []),
                                  *getattr(model, "products", []))
                    for m in block.modules()
                    if type(m).__module__.split(".")[0] in PACKAGES})
    methods = {getattr(m, "method", None) for m in model.modules()} - {None}
    fallback = ""
    if "naive" in methods:
        from equibench.implementations.cuequivariance import NAIVE_FALLBACK

        fallback = f"cuequivariance_torch method={NAIVE_FALLBACK}"
    return {"path": "modules: " + ", ".join(names), "fallback": fallback}


# Packages whose modules name a MACE backend's code path.
PACKAGES = ("e3nn", "cuequivariance_torch", "openequivariance", "equibench")


def _uses(model: torch.nn.Module, package: str) -> bool:
    return any(type(m).__module__.startswith(package) for m in model.modules())


def on_backend(model: torch.nn.Module, backend: str, device: str) -> torch.nn.Module:
    """``model`` (an e3nn mace-torch model, left untouched) on ``backend`` and ``device``."""
    from equibench.registry import Unsupported

    if backend == "symmetrix":
        dtype = next(model.parameters()).dtype
        return SymmetrixModel(model, dtype)
    model = copy.deepcopy(model).to(device)
    if backend == "e3nn":
        return model
    if backend == "fused":
        from equibench.kernels import KernelUnavailable

        try:
            model = use_fused_convolution(model, kernel_backend(device))
        except KernelUnavailable as err:
            raise Unsupported(f"fused kernels unavailable: {err}") from err
        model = use_fused_symmetric_contraction(model, kernel_backend(device))
        return use_irreps_linear(model)
    if backend == "cuequivariance":
        from mace.cli.convert_e3nn_cueq import run

        # mace-torch's choices: layout ir_mul, conv fusion on CUDA only.
        converted = _restoring_default_dtype(run)(model, device=device.split(":")[0])
        package = "cuequivariance_torch"
    elif backend == "openequivariance":
        from mace.cli.convert_e3nn_oeq import run

        converted = _restoring_default_dtype(run)(model, device=device.split(":")[0])
        package = "openequivariance"
    else:
        raise ValueError(f"unknown MACE backend {backend!r}; choose one of {BACKENDS}")
    # mace-torch silently keeps e3nn modules when the package is missing.
    if not _uses(converted, package):
        raise Unsupported(f"mace-torch built no {package} module (is it importable?)")
    return converted.to(device)
