"""The SE(3)-Transformer for QM9 (NVIDIA's ``SE3TransformerPooled`` recipe).

Inputs per molecule: a bond graph (RDKit bonds, both directions). Node features (6):
one-hot of H, C, N, O, F plus the atomic number / 9 (the NVIDIA recipe takes the first
6 columns of DGL's QM9 atom features: 5 one-hots and the atomic number; scaled here so
that all inputs are O(1)). Edge features (5): one-hot of the bond type
(single/double/triple/aromatic) plus the bond length in Å, the radial profiles' input.

Layers: ``num_layers`` attention blocks (each followed by ``NormSE3``), hidden fiber
``channels`` per degree 0..max_degree, then a pooled TFN convolution with
self-interaction to ``(max_degree + 1) * channels`` scalars, max pooling over each
molecule's atoms, and an MLP to one number (the standardized target).

Sizes (:data:`SIZES`): ``full`` is the recipe (7 layers, degrees 0-3, 32 channels,
8 heads, channels_div 2); ``small`` (2 layers, degrees 0-1, 8 channels, 2 heads,
channels_div 2) keeps every switch meaningful (uniform channels: all fusion levels
apply) for tests and quick runs; ``medium`` is ``small`` with degrees 0-2, where the
per-pair kernels the baseline materializes start to dominate as they do in the recipe.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn
from torch.autograd.profiler import record_function

from .attention import AttentionBlockSE3, NormSE3
from .basis import compute_bases
from .graph_ops import make_graph_ops
from .switches import Switches
from .tfn import ConvSE3, EdgeInputs, checkpointing

ELEMENTS = (1, 6, 7, 8, 9)  # H, C, N, O, F
NODE_FEATURES = len(ELEMENTS) + 1
EDGE_FEATURES = 4 + 1  # bond type one-hot + length


@dataclass(frozen=True)
class ModelConfig:
    num_layers: int = 7
    max_degree: int = 3
    channels: int = 32
    heads: int = 8
    channels_div: int = 2
    mid: int = 32  # hidden width of the radial profiles

    def to_dict(self) -> dict:
        return asdict(self)


SIZES = {
    "full": ModelConfig(),
    "medium": ModelConfig(num_layers=2, max_degree=2, channels=8, heads=2, channels_div=2),
    "small": ModelConfig(num_layers=2, max_degree=1, channels=8, heads=2, channels_div=2),
}


@dataclass
class MoleculeBatch:
    """Model inputs: ``node_feats`` (N, 6), ``edge_feats`` (E, 5), ``edge_src``/``edge_dst``
    (E,), ``edge_vec`` (E, 3) Å, ``node_graph`` (N,), ``n_graphs`` G, ``target`` (G,)."""

    node_feats: Tensor
    edge_feats: Tensor
    edge_src: Tensor
    edge_dst: Tensor
    edge_vec: Tensor
    node_graph: Tensor
    n_graphs: int
    target: Tensor

    @property
    def n_nodes(self) -> int:
        return int(self.node_feats.shape[0])

    @property
    def n_edges(self) -> int:
        return int(self.edge_src.shape[0])

    def to(self, device: str | torch.device, dtype: torch.dtype) -> MoleculeBatch:
        def move(t: Tensor) -> Tensor:
            return t.to(device, dtype) if t.is_floating_point() else t.to(device)

        return MoleculeBatch(*(move(t) if isinstance(t, Tensor) else t
                               for t in (self.node_feats, self.edge_feats, self.edge_src,
                                         self.edge_dst, self.edge_vec, self.node_graph,
                                         self.n_graphs, self.target)))

    def transformed(self, rotation: Tensor, shift: Tensor) -> MoleculeBatch:
        """The same molecules rotated (3, 3) and translated (3,): edge vectors rotate."""
        del shift  # edge vectors are differences: a translation cancels
        return MoleculeBatch(self.node_feats, self.edge_feats, self.edge_src, self.edge_dst,
                             self.edge_vec @ rotation.T, self.node_graph, self.n_graphs,
                             self.target)


def featurize(batch, target_key: str = "homo") -> MoleculeBatch:  # noqa: ANN001 - GraphBatch
    """A ``datasets`` ``GraphBatch`` built with ``graph="bonds"`` -> :class:`MoleculeBatch`."""
    numbers = batch.numbers
    one_hot = torch.stack([numbers == z for z in ELEMENTS], dim=1).to(torch.float64)
    node_feats = torch.cat([one_hot, numbers[:, None].to(torch.float64) / 9.0], dim=1)
    edge_vec = batch.edge_vec.to(torch.float64)
    edge_feats = torch.cat([batch.edge_attr.to(torch.float64),
                            edge_vec.norm(dim=1, keepdim=True)], dim=1)
    return MoleculeBatch(node_feats, edge_feats, batch.edge_src, batch.edge_dst, edge_vec,
                         batch.node_graph, batch.n_graphs,
                         batch.targets[target_key].to(torch.float64))


class SE3TransformerPooled(nn.Module):
    """The model; ``forward`` returns (G,) predictions of the standardized target."""

    def __init__(self, config: ModelConfig, switches: Switches, backend: str = "basis",
                 device: str = "cpu") -> None:
        super().__init__()
        self.config, self.switches, self.backend = config, switches, backend
        hidden = {d: config.channels for d in range(config.max_degree + 1)}
        fiber: dict[int, int] = {0: NODE_FEATURES}
        self.blocks = nn.ModuleList()
        self.norms = nn.ModuleList()
        for _ in range(config.num_layers):
            self.blocks.append(AttentionBlockSE3(
                fiber, hidden, EDGE_FEATURES, config.mid, config.heads, config.channels_div,
                switches, backend, device))
            self.norms.append(NormSE3(hidden))
            fiber = hidden
        n_out = (config.max_degree + 1) * config.channels
        self.conv_out = ConvSE3(fiber, {0: n_out}, EDGE_FEATURES, config.mid, switches, backend,
                                device, pool=True, self_interaction=True)
        self.mlp = nn.Sequential(nn.Linear(n_out, n_out), nn.ReLU(), nn.Linear(n_out, 1))

    def convs(self) -> dict[str, ConvSE3]:
        return {name: m for name, m in self.named_modules() if isinstance(m, ConvSE3)}

    def bases(self, edge_vec: Tensor) -> dict:
        """Edge bases every convolution of this model reads (``basis.compute_bases``); under
        checkpointing the pair bases, each chunk assembling its fused ones."""
        convs = self.convs().values()
        groups = [g for c in convs for g in c.groups] if self.backend == "basis" else []
        with record_function("bases"):  # a profiler range: see bench.breakdown
            return compute_bases(edge_vec, groups, 2 * self.config.max_degree,
                                 fuse=not checkpointing(self.switches))

    def forward(self, mol: MoleculeBatch, bases: dict | None = None, ops=None,  # noqa: ANN001
                pool_at: Tensor | None = None) -> Tensor:
        """``bases``: precomputed (``basis_cache``) or None to compute them here; ``ops``: a
        ``graph_ops.GraphOps`` of the batch (built here if None); ``pool_at``: None to max-pool
        each molecule's channels, or (G, C) atom indices to read instead (the gate's
        reference pools at the atoms the model under test picked, see :func:`pool_winners`).
        """
        if bases is None:
            bases = self.bases(mol.edge_vec)
        if ops is None:
            ops = make_graph_ops(self.switches.graph_ops, mol.edge_src, mol.edge_dst, mol.n_nodes)
        g = EdgeInputs(mol.edge_src, mol.edge_dst, mol.edge_feats, bases, ops)
        x = {0: mol.node_feats[:, :, None]}
        for block, norm in zip(self.blocks, self.norms, strict=True):
            x = norm(block(x, g))
        h = self.conv_out(x, g)[0].squeeze(-1)  # (N, n_out)
        if pool_at is not None:
            return self.mlp(h.gather(0, pool_at)).squeeze(-1)
        index = mol.node_graph[:, None].expand_as(h)
        pooled = h.new_zeros(mol.n_graphs, h.shape[1]).scatter_reduce(
            0, index, h, "amax", include_self=False)
        return self.mlp(pooled).squeeze(-1)


def pool_winners(h: Tensor, node_graph: Tensor, n_graphs: int) -> Tensor:
    """(G, C) index of the atom holding each molecule's maximum of each channel of ``h``
    (N, C), the lowest index among exact ties.

    Max pooling sends a channel's gradient to one atom; where two atoms nearly tie, float32
    and float64 can pick different ones (seen: a 1.7e-5 gap moved 3 % of a layer's
    gradient). Pooling the reference at the same atoms keeps every gradient comparable.
    """
    index = node_graph[:, None].expand_as(h)
    peak = h.new_full((n_graphs, h.shape[1]), -torch.inf).scatter_reduce(
        0, index, h, "amax", include_self=True)
    atoms = torch.arange(h.shape[0], device=h.device)[:, None].expand_as(h)
    candidates = torch.where(h == peak[node_graph], atoms, h.shape[0])
    return torch.full_like(peak, h.shape[0], dtype=torch.long).scatter_reduce(
        0, index, candidates, "amin", include_self=True)


def _radial_sources(src: SE3TransformerPooled, name: str) -> tuple[ConvSE3, dict[int, int]]:
    """The convolution of ``src`` holding the weights of ``dst``'s convolution ``name`` and
    the output-channel offset of each degree within it (keys sit after values)."""
    convs = src.convs()
    if name in convs:
        return convs[name], {}
    block_name, role = name.rsplit(".", 1)
    kv = convs[f"{block_name}.kv"]
    block = src.get_submodule(block_name)
    offset = block.value_fiber if role == "k" else {}
    return kv, offset


@torch.no_grad()
def transfer_weights(src: SE3TransformerPooled, dst: SE3TransformerPooled) -> None:
    """Load ``dst`` with the function of ``src`` (same config).

    ``src`` must be in the parameterization with the fewest parameters among the two
    (shared radial profile if ``dst`` shares it; fused key/value if ``dst`` fuses).
    Everything but the radial profiles has the same names and is copied; each radial
    profile pair of ``dst`` gets the hidden MLP of its source and the output rows of its
    output channels (``fuse_kv`` off: keys = rows after the values of the fused conv).
    """
    src_state = src.state_dict()
    # Radial profiles are mapped below; products hold constants (CG tables), no weights.
    dst_state = {k: v for k, v in dst.state_dict().items()
                 if ".radial." not in k and ".products." not in k}
    for key, value in dst_state.items():
        value.copy_(src_state[key])
    for name, conv in dst.convs().items():
        source, offset = _radial_sources(src, name)
        for p, (d_in, d_out) in enumerate(conv.pairs):
            hidden, rows = source.radial.pair_params(source.pairs.index((d_in, d_out)))
            c_out = conv.fiber_out[d_out]
            start = offset.get(d_out, 0)
            rows = rows.view(source.fiber_out[d_out], -1, rows.shape[-1])[start : start + c_out]
            conv.radial.set_pair_params(p, hidden, rows.reshape(-1, rows.shape[-1]))


def build_model(config: ModelConfig, switches: Switches, backend: str, device: str,
                dtype: torch.dtype, master: SE3TransformerPooled) -> SE3TransformerPooled:
    """A model of ``switches``/``backend`` holding ``master``'s function, on device/dtype."""
    model = SE3TransformerPooled(config, switches, backend, device).to(torch.float64)
    transfer_weights(master, model)
    return model.to(device=device, dtype=dtype)
