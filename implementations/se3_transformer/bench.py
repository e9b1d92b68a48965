"""The ``se3t`` model family: SE(3)-Transformer cases for the runner.

Workloads: ``se3t-qm9`` (the full NVIDIA QM9 recipe), ``se3t-qm9-medium`` and
``se3t-qm9-small`` (the reduced configs of ``model.SIZES``). A case's ``batch`` molecules
are a seeded sample of QM9 with RDKit bond graphs; its ``implementation`` is the TFN
backend (``tfn.BACKENDS``), its ``variant`` the switch set (``switches.VARIANTS``,
optionally ``+dgl``).

Directions: ``inference`` (forward without autograd) and ``train_step`` (forward, L1
loss on the standardized HOMO, backward, Adam step; under ``amp-float16`` with the loss
scaled as NVIDIA's recipe does, :func:`equibench.precision.loss_scaler`). Outside the
timed call: data and graph-op structures; the edge bases only in the amortized variants
(``basis_cache``, ``nvidia-precompute``: ``extra.amortized`` says so, and their kept bases
count in the peak memory through ``Bench.kept_bytes``).

Gate: the first call against a float64 model holding the same function (weights mapped
from one master model, ``model.transfer_weights``), on backend ``basis`` with nothing
optimized (``Switches.reference``: the ``baseline`` variant keeps its mean aggregation)
or, for the ``e3nn`` backend, ``e3nn`` itself (its tensor product rounds the
Clebsch-Gordan table to float32, ~1e-8 away from the float64 ``wigner_3j`` of the
others). Compared: predictions, loss and, for a training step, every parameter's gradient
element by element, the reference's mapped into the model's parameterization
(:class:`GradientMap`, outside the timed call), and the optimizer's step
(:mod:`equibench.levels.optimizer_step`); the reference pools at the atoms the
model under test picked (``model.pool_winners``), so that near-ties in the max pooling
cannot move gradients between atoms.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from equibench import registry
from equibench.cases import Case
from equibench.correctness import random_rotation, scaled_error
from equibench.levels import Bench
from equibench.levels.optimizer_step import StepCheck, without_params
from equibench.precision import backward_and_step, get_precision, loss_scaler
from equibench.registry import CodePath, ModelFamily, Unsupported, register_model
from equibench.vocabulary import MODEL_DIRECTIONS as DIRECTIONS

from .graph_ops import dgl_unavailable, make_graph_ops
from .model import (
    SIZES,
    MoleculeBatch,
    SE3TransformerPooled,
    build_model,
    featurize,
    pool_winners,
)
from .switches import DGL_SUFFIX, OPTIMIZED, VARIANTS, Switches, amortized, variant_switches
from .tfn import BACKENDS, cue_method

LEARNING_RATE = 1e-3


def make_optimizer(params: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
    """The training step's optimizer over ``params``."""
    return torch.optim.Adam(params, lr=LEARNING_RATE)


WORKLOADS = {"se3t-qm9": "full", "se3t-qm9-medium": "medium", "se3t-qm9-small": "small"}


def breakdown(model: SE3TransformerPooled, call, device: str) -> dict[str, float] | None:  # noqa: ANN001
    """Seconds per category of one call (``mace.profile_breakdown``), or None without it."""
    try:
        from equibench.implementations.mace.profile_breakdown import (
            Rule,
            module_scopes,
            profile_categories,
        )
    except ImportError:
        return None
    rules = (
        Rule("radial profile", r"\.radial\b"),
        Rule("TFN contraction", r"\.products\.\d+\b"),
        Rule("edge bases", r"(^|/)bases(/|$)"),
        Rule("norm", r"(^|/)norms\.\d+\b"),
        Rule("linear", r"\.(to_query|project)\b|(^|/)mlp\b"),
        Rule("gather/scatter/softmax",
             r"aten::(index|index_select|index_add_?|index_put_?|scatter_add_?|scatter_reduce_?"
             r"|gather|exp)(/|$)"),
    )
    return profile_categories(call, rules, module_scopes(model), device)


def sample_molecules(n: int, seed: int, target: str = "homo") -> MoleculeBatch:
    """``n`` QM9 molecules (seeded sample, sorted), bond graphs, float64 on CPU; the target
    standardized over the sample."""
    from equibench import datasets

    ds = datasets.load("qm9")
    mol = featurize(ds.batch(ds.sample(n, seed).tolist(), graph="bonds"), target)
    std = mol.target.std() if n > 1 else torch.tensor(1.0, dtype=torch.float64)
    mol.target = (mol.target - mol.target.mean()) / std.clamp(min=1e-12)
    return mol


def master_model(size: str, seed: int) -> SE3TransformerPooled:
    """Float64 weights of the ``optimized`` parameterization, from which all variants load."""
    torch.manual_seed(seed)
    return SE3TransformerPooled(SIZES[size], OPTIMIZED).to(torch.float64)


def prediction_and_loss(model: SE3TransformerPooled, mol: MoleculeBatch, bases: dict | None,
                        ops, pool_at: torch.Tensor | None = None  # noqa: ANN001
                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """The training step's forward half: predictions and their L1 loss on the target."""
    pred = model(mol, bases, ops, pool_at)
    return pred, torch.nn.functional.l1_loss(pred, mol.target)


def step_fn(model: SE3TransformerPooled, mol: MoleculeBatch, bases: dict | None, ops,  # noqa: ANN001
            direction: str, optimizer: torch.optim.Optimizer | None = None,
            pool_at: torch.Tensor | None = None, scaler: torch.amp.GradScaler | None = None):
    """The call of ``direction``: returns named outputs (predictions, loss and every
    parameter's gradient, ``grad:<name>``, as the tensors autograd left, and with an
    ``optimizer`` every parameter after its step, ``param:<name>``: no work added).
    ``pool_at``: see ``SE3TransformerPooled.forward``. ``scaler`` (with ``optimizer``): the
    loss scaling of NVIDIA's AMP recipe (``GradScaler``: scaled backward, gradients unscaled
    before the step, the scale updated after it)."""
    params = dict(model.named_parameters())

    def inference() -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return {"pred": model(mol, bases, ops, pool_at)}

    def train_step() -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        pred, loss = prediction_and_loss(model, mol, bases, ops, pool_at)
        if optimizer is None:
            loss.backward()
        else:
            backward_and_step(loss, optimizer, scaler)
        return {"pred": pred.detach(), "loss": loss.detach(),
                **{f"grad:{n}": p.grad for n, p in params.items()},
                **({f"param:{n}": p.detach() for n, p in params.items()}
                   if optimizer is not None else {})}

    return inference if direction == "inference" else train_step


def code_path(backend: str, device: str) -> dict[str, str]:
    """What the TFN contractions of ``backend`` run on ``device`` (``extra.code_path``)."""
    if backend == "cuequivariance":
        from equibench.implementations.cuequivariance import NAIVE_FALLBACK

        method = cue_method(device)
        path = (f"cuequivariance_torch SegmentedPolynomial method={method}"
                " (uvw,ui,vj,wk+ijk on mul_ir operands, no transposes)")
        return CodePath(path, NAIVE_FALLBACK if method == "naive" else "").to_dict()
    if backend == "fused":
        from equibench.implementations.fused import kernels_path

        return CodePath(kernels_path(device)).to_dict()
    return CodePath({
        "e3nn": "e3nn o3.TensorProduct per degree pair",
        "basis": "PyTorch contractions with the precomputed edge bases",
    }[backend]).to_dict()


@dataclass(frozen=True)
class GradientMap:
    """A training step's gradients in the parameterization of the model under test, for
    the reference's too.

    ``transfer_weights`` loads a model by copying: every weight of the reference's
    parameterization (``switches.reference()``: nothing shared, nothing fused) is a copy of
    one weight of the model's (a shared radial profile feeds several). So with ``A`` that
    selection, the model's gradient is ``A^T`` of the reference's: each reference weight's
    gradient summed into the weight it copies. ``sources`` holds, by reference parameter,
    the flat index (into the model's parameters laid end to end) of the weight each element
    copies, found by loading the reference from a model whose weights are their own indices.
    """

    names: tuple[str, ...]  # the model's parameters, in order
    shapes: tuple[torch.Size, ...]
    sources: dict[str, torch.Tensor]  # reference parameter -> (numel,) int64

    @classmethod
    def build(cls, size: str, switches: Switches) -> GradientMap:
        model = SE3TransformerPooled(SIZES[size], switches).to(torch.float64)
        params = dict(model.named_parameters())
        total = sum(p.numel() for p in params.values())
        with torch.no_grad():
            offset = 0
            for p in params.values():
                # 1-based, so that a weight the transfer never wrote (0) shows.
                p.copy_(torch.arange(offset + 1, offset + 1 + p.numel(),
                                     dtype=torch.float64).reshape(p.shape))
                offset += p.numel()
        reference = build_model(SIZES[size], switches.reference(), "basis", "cpu",
                                torch.float64, model)
        sources = {}
        for name, p in reference.named_parameters():
            index = p.detach().reshape(-1)
            if not bool(((index >= 1) & (index <= total) & (index == index.round())).all()):
                raise ValueError(f"the reference's {name!r} is not a copy of the model's "
                                 "weights: transfer_weights is no longer a selection, and the "
                                 "gradient map must change with it")
            sources[name] = index.long() - 1
        return cls(tuple(params), tuple(p.shape for p in params.values()), sources)

    def model_view(self, outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The model's step outputs as the gate compares them (a parameter without a
        gradient has a zero one, as the optimizer sees it)."""
        view = {k: v for k, v in outputs.items() if not k.startswith("grad:")}
        for name, shape in zip(self.names, self.shapes, strict=True):
            grad = outputs.get(f"grad:{name}")
            view[f"grad:{name}"] = torch.zeros(shape) if grad is None else grad
        return view

    def reference_view(self, outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The reference step's outputs, its gradients mapped into the model's
        parameterization (``A^T``, float64)."""
        view = {k: v for k, v in outputs.items() if not k.startswith("grad:")}
        flat = torch.zeros(sum(math.prod(s) for s in self.shapes), dtype=torch.float64)
        for name, index in self.sources.items():
            grad = outputs.get(f"grad:{name}")
            if grad is not None:
                flat.index_add_(0, index, grad.detach().to("cpu", torch.float64).reshape(-1))
        parts = flat.split([math.prod(s) for s in self.shapes])
        for name, shape, part in zip(self.names, self.shapes, parts, strict=True):
            view[f"grad:{name}"] = part.reshape(shape)
        return view


def _tensors(tree: object) -> list[torch.Tensor]:
    """The tensors held in nested dicts, lists and tuples (the cached bases)."""
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, dict):
        tree = list(tree.values())
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    return []


@register_model
class SE3TransformerFamily(ModelFamily):
    prefix = "se3t"
    backends = BACKENDS
    precisions = frozenset({"float64", "float32", "tfloat32", "amp-bfloat16", "amp-float16"})
    workloads = tuple(WORKLOADS)
    variants = (*VARIANTS, *(f"{name}{DGL_SUFFIX}" for name in VARIANTS))
    directions = DIRECTIONS

    def available(self, backend: str, device: str) -> str | None:
        if device.startswith("cuda") and not torch.cuda.is_available():
            return "CUDA is not available here"
        if backend == "basis":  # this family's own contraction, plain PyTorch
            return None
        # The tensor-product backends answer for themselves (one probe per implementation).
        return registry.get(backend).available(device)

    def supports(self, case: Case) -> str | None:
        if case.workload not in WORKLOADS:
            return f"se3t workloads are {', '.join(WORKLOADS)}, not {case.workload!r}"
        if case.direction not in DIRECTIONS:
            return f"se3t runs {' and '.join(DIRECTIONS)}, not {case.direction}"
        try:
            switches = variant_switches(case.variant)
        except ValueError as err:
            return str(err)
        return dgl_unavailable() if switches.graph_ops == "dgl" else None

    def build_bench(self, case: Case, dtype: torch.dtype, seed: int) -> Bench:
        size, switches = WORKLOADS[case.workload], variant_switches(case.variant)
        master = master_model(size, seed)
        mol64 = sample_molecules(case.batch, seed)
        try:
            model = build_model(SIZES[size], switches, case.implementation, case.device, dtype,
                                master)
        except Exception as err:  # noqa: BLE001 - e.g. KernelUnavailable, no compiler
            if case.implementation in ("fused", "cuequivariance"):
                raise Unsupported(f"{case.implementation}: {type(err).__name__}: {err}") from err
            raise
        mol = mol64.to(case.device, dtype)
        ops = make_graph_ops(switches.graph_ops, mol.edge_src, mol.edge_dst, mol.n_nodes)
        bases = model.bases(mol.edge_vec) if switches.basis_cache else None
        optimizer = make_optimizer(model.parameters())
        step = StepCheck.of(model, make_optimizer, LEARNING_RATE)
        # NVIDIA's AMP recipe scales the loss (GradScaler).
        scaler = loss_scaler(get_precision(case.precision), case.device,
                             lambda: prediction_and_loss(model, mol, bases, ops)[1],
                             model.parameters())
        call = step_fn(model, mol, bases, ops, case.direction, optimizer, scaler=scaler)
        training = case.direction == "train_step"
        # The atoms the pooling picked in the first (gated) call, read by the reference; the
        # hook removes itself, so timed calls do not run it.
        pooled_input: dict[str, torch.Tensor] = {}

        def capture(_module, _inputs, output) -> None:  # noqa: ANN001
            pooled_input["h"] = output[0].detach().squeeze(-1)
            hook.remove()

        hook = model.conv_out.register_forward_hook(capture)

        def reference() -> dict[str, torch.Tensor]:
            backend = "e3nn" if case.implementation == "e3nn" else "basis"
            ref_switches = switches.reference()
            ref = build_model(SIZES[size], ref_switches, backend, case.device, torch.float64,
                              master)
            ref_mol = mol64.to(case.device, torch.float64)
            ref_ops = make_graph_ops("torch", ref_mol.edge_src, ref_mol.edge_dst,
                                     ref_mol.n_nodes)
            if not training:
                return step_fn(ref, ref_mol, None, ref_ops, case.direction)()
            if "h" not in pooled_input:
                raise RuntimeError("the reference of a training step needs the pooled "
                                   "features of the gated call: call the step first")
            pool_at = pool_winners(pooled_input["h"], mol.node_graph, mol.n_graphs)
            outputs = step_fn(ref, ref_mol, None, ref_ops, case.direction,
                              pool_at=pool_at)()
            return {**gradients.reference_view(outputs), **step.reference()}

        gradients = GradientMap.build(size, switches)

        def equivariance() -> float:
            turned = mol.transformed(random_rotation(seed + 1).to(case.device, dtype),
                                     torch.ones(3))
            with torch.no_grad():
                a = model(mol, model.bases(mol.edge_vec), ops)
                b = model(turned, model.bases(turned.edge_vec), ops)
            return scaled_error(b, a)

        return Bench(
            call=call, reference=reference, items=case.batch, unit="molecules/s",
            equivariance=equivariance, amortized=amortized(switches),
            gate_view=(lambda out: {**gradients.model_view(without_params(out)),
                                    **step.residuals(out)}) if training else None,
            floors=step.floors if training else {},
            kept_bytes=sum(t.numel() * t.element_size() for t in _tensors(bases)),
            extra={
                "size": size, "model": SIZES[size].to_dict(), "switches": switches.to_dict(),
                "backend": case.implementation, "molecules": case.batch,
                "code_path": code_path(case.implementation, case.device),
                "nodes": mol.n_nodes, "edges": mol.n_edges,
                "parameters": sum(p.numel() for p in model.parameters()),
                **({"loss_scale": scaler.get_scale()} if scaler is not None else {}),
                "fusion": sorted({c.fuse_used for c in model.convs().values()}),
                "target": "homo (standardized over the sample)",
            },
            # Without the optimizer step: the step's own update is not in its categories.
            profile=lambda: {
                "breakdown": breakdown(model, step_fn(model, mol, bases, ops, case.direction),
                                       case.device),
                "breakdown_unit": "s per step (without the optimizer step), torch.profiler "
                                  "self time, profiler overhead included"},
        )
