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
through fixed random projections (:func:`probe_directions`), computed outside the timed
call (``Bench.gate_view``); the reference pools at the atoms the model under test picked
(``model.pool_winners``), so that near-ties in the max pooling cannot move gradients between
atoms.
"""

from __future__ import annotations

import torch

from equibench import registry
from equibench.cases import Case
from equibench.correctness import random_rotation, scaled_error
from equibench.levels import Bench
from equibench.precision import backward_and_step, get_precision, loss_scaler
from equibench.registry import CodePath, ModelFamily, Unsupported, register_model

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

WORKLOADS = {"se3t-qm9": "full", "se3t-qm9-medium": "medium", "se3t-qm9-small": "small"}
DIRECTIONS = ("inference", "train_step")
# Random directions in weight space along which the gate compares a training step's
# gradient: one already catches a wrong gradient of any parameter (with probability 1);
# two guard against a direction that happens to be nearly orthogonal to the error.
PROBES = 2


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
    parameter's gradient, ``grad:<name>``, as the tensors autograd left: no work added).
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
                **{f"grad:{n}": p.grad for n, p in params.items()}}

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


def probe_directions(size: str, switches: Switches, seed: int, count: int = PROBES
                     ) -> list[dict[str, torch.Tensor]]:
    """``count`` fixed random directions in weight space, in the parameterization of
    ``switches`` (float64, CPU, by parameter name).

    Each is a random master model (standard normal weights) loaded through
    ``transfer_weights`` like the model's own weights. That map is linear, so the dot
    product of a model's gradient with its direction is the derivative of the loss along one
    and the same direction of the master's weights, whatever the variant or backend
    (parameter names do not depend on the backend).
    """
    directions = []
    for k in range(count):
        delta = SE3TransformerPooled(SIZES[size], OPTIMIZED).to(torch.float64)
        generator = torch.Generator().manual_seed(seed + 1000 + k)
        with torch.no_grad():
            for p in delta.parameters():
                p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64))
        model = build_model(SIZES[size], switches, "basis", "cpu", torch.float64, delta)
        directions.append({n: p.detach() for n, p in model.named_parameters()})
    return directions


def gradient_projections(outputs: dict[str, torch.Tensor],
                         directions: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """A training step's outputs as the gate compares them: predictions, loss and the
    (PROBES,) projections of the whole gradient (a missing gradient counts as zero)."""
    def project(direction: dict[str, torch.Tensor]) -> torch.Tensor:
        total = torch.zeros((), dtype=torch.float64)
        for name, d in direction.items():
            grad = outputs.get(f"grad:{name}")
            if grad is not None:
                total += (grad.detach().to(device="cpu", dtype=torch.float64) * d).sum()
        return total

    return {"pred": outputs["pred"], "loss": outputs["loss"],
            "grad_projections": torch.stack([project(d) for d in directions])}


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
        # Profiled without the optimizer step, so that the gated call starts from the master
        # weights; this one untimed call also serves as the profile's warm-up-free sample.
        profile = breakdown(model, step_fn(model, mol, bases, ops, case.direction), case.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
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
            return gradient_projections(outputs, probe_directions(size, ref_switches, seed))

        directions: list[dict[str, torch.Tensor]] = []

        def gate_view(outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            if not directions:
                directions.extend(probe_directions(size, switches, seed))
            return gradient_projections(outputs, directions)

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
            gate_view=gate_view if training else None,
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
                "breakdown": profile,
                "breakdown_unit": "s per step (first call, without the optimizer step), "
                                  "torch.profiler self time, profiler overhead included",
            },
        )
