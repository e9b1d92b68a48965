"""The ``se3t`` model family: SE(3)-Transformer cases for the runner.

Workloads: ``se3t-qm9`` (the full NVIDIA QM9 recipe), ``se3t-qm9-medium`` and
``se3t-qm9-small`` (the reduced configs of ``model.SIZES``). A case's ``batch`` molecules
are a seeded sample of QM9 with RDKit bond graphs; its ``implementation`` is the TFN
backend (``tfn.BACKENDS``), its ``variant`` the switch set (``switches.VARIANTS``,
optionally ``+dgl``).

Directions: ``inference`` (forward without autograd) and ``train_step`` (forward, L1
loss on the standardized HOMO, backward, Adam step). Outside the timed call: data and
graph-op structures; the edge bases only in the amortized variants (``basis_cache``,
``nvidia-precompute``: ``extra.amortized`` says so, and their kept bases count in the peak
memory through ``Bench.kept_bytes``).

Gate: the first call against a float64 model holding the same function (weights mapped
from one master model, ``model.transfer_weights``), on backend ``basis`` with nothing
optimized (``Switches.reference``: the ``baseline`` variant keeps its mean aggregation)
or, for the ``e3nn`` backend, ``e3nn`` itself (its tensor product rounds the
Clebsch-Gordan table to float32, ~1e-8 away from the float64 ``wigner_3j`` of the
others). Compared: predictions, loss and the readout MLP's gradients (see ``WATCHED``).
"""

from __future__ import annotations

import numpy as np
import torch

from equibench.cases import Case
from equibench.levels import Bench
from equibench.registry import ModelFamily, Unsupported, register_model

from .graph_ops import dgl_unavailable, make_graph_ops
from .model import SIZES, MoleculeBatch, SE3TransformerPooled, build_model, featurize
from .switches import OPTIMIZED, amortized, variant_switches
from .tfn import BACKENDS

WORKLOADS = {"se3t-qm9": "full", "se3t-qm9-medium": "medium", "se3t-qm9-small": "small"}
DIRECTIONS = ("inference", "train_step")
# Gradients compared by the gate: the readout MLP's, which every variant names alike. Deeper
# gradients pass through the max pooling, whose argmax can differ between float32 and
# float64 where two atoms nearly tie (seen: a 1.7e-5 gap moved one channel's gradient to
# another atom, 3 % of the first layer's gradient); they are compared exactly in float64
# by tests/test_se3_transformer.py instead.
WATCHED = ("mlp.0.weight", "mlp.2.weight")


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
    rng = np.random.default_rng(seed)
    indices = np.sort(rng.choice(len(ds), size=n, replace=False))
    mol = featurize(ds.batch(indices.tolist(), graph="bonds"), target)
    std = mol.target.std() if n > 1 else torch.tensor(1.0, dtype=torch.float64)
    mol.target = (mol.target - mol.target.mean()) / std.clamp(min=1e-12)
    return mol


def random_rotation(seed: int) -> torch.Tensor:
    """(3, 3) float64 proper rotation from a seeded QR decomposition."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    return q if torch.det(q) > 0 else -q


def master_model(size: str, seed: int) -> SE3TransformerPooled:
    """Float64 weights of the ``optimized`` parameterization, from which all variants load."""
    torch.manual_seed(seed)
    return SE3TransformerPooled(SIZES[size], OPTIMIZED).to(torch.float64)


def step_fn(model: SE3TransformerPooled, mol: MoleculeBatch, bases: dict | None, ops,  # noqa: ANN001
            direction: str, optimizer: torch.optim.Optimizer | None = None):
    """The call of ``direction``: returns named outputs (predictions, loss, gradients)."""
    params = dict(model.named_parameters())

    def inference() -> dict[str, torch.Tensor]:
        with torch.no_grad():
            return {"pred": model(mol, bases, ops)}

    def train_step() -> dict[str, torch.Tensor]:
        model.zero_grad(set_to_none=True)
        pred = model(mol, bases, ops)
        loss = torch.nn.functional.l1_loss(pred, mol.target)
        loss.backward()
        if optimizer is not None:
            optimizer.step()
        return {"pred": pred.detach(), "loss": loss.detach(),
                **{f"grad:{n}": params[n].grad for n in WATCHED}}

    return inference if direction == "inference" else train_step


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
    precisions = frozenset({"float64", "float32", "tfloat32"})

    def available(self, backend: str, device: str) -> str | None:
        if device.startswith("cuda") and not torch.cuda.is_available():
            return "CUDA is not available here"
        try:
            if backend == "cuequivariance":
                import cuequivariance  # noqa: F401
                import cuequivariance_torch  # noqa: F401
            elif backend == "fused":
                import equibench.kernels  # noqa: F401
        except Exception as err:  # noqa: BLE001 - any import failure means unavailable
            return f"{backend} does not import: {type(err).__name__}: {err}"
        return None

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
        call = step_fn(model, mol, bases, ops, case.direction, optimizer)

        def reference() -> dict[str, torch.Tensor]:
            backend = "e3nn" if case.implementation == "e3nn" else "basis"
            ref = build_model(SIZES[size], switches.reference(), backend, case.device,
                              torch.float64, master)
            ref_mol = mol64.to(case.device, torch.float64)
            ref_ops = make_graph_ops("torch", ref_mol.edge_src, ref_mol.edge_dst,
                                     ref_mol.n_nodes)
            return step_fn(ref, ref_mol, None, ref_ops, case.direction)()

        def equivariance() -> float:
            turned = mol.transformed(random_rotation(seed + 1).to(case.device, dtype),
                                     torch.ones(3))
            with torch.no_grad():
                a = model(mol, model.bases(mol.edge_vec), ops)
                b = model(turned, model.bases(turned.edge_vec), ops)
            return float((a - b).abs().max()) / max(float(a.abs().max()), 1.0)

        return Bench(
            call=call, reference=reference, items=case.batch, unit="molecules/s",
            equivariance=equivariance, amortized=amortized(switches),
            kept_bytes=sum(t.numel() * t.element_size() for t in _tensors(bases)),
            extra={
                "size": size, "model": SIZES[size].to_dict(), "switches": switches.to_dict(),
                "backend": case.implementation, "molecules": case.batch,
                "nodes": mol.n_nodes, "edges": mol.n_edges,
                "parameters": sum(p.numel() for p in model.parameters()),
                "fusion": sorted({c.fuse_used for c in model.convs().values()}),
                "target": "homo (standardized over the sample)",
                "breakdown": profile,
                "breakdown_unit": "s per step (first call, without the optimizer step), "
                                  "torch.profiler self time, profiler overhead included",
            },
        )
