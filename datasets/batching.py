"""Batches of graphs for models: which structures go together, and the tensors they become.

Three ways to group structures (:func:`plan_batches`):

* ``dynamic``: a fixed number of structures per batch; shapes vary from batch to batch.
* ``padded``: a fixed number of structures per batch, padded to fixed numbers of
  node, edge and graph slots, for static shapes (CUDA graphs, XLA, compiled kernels).
* ``packed``: structures bin-packed first-fit-decreasing into packs of at most
  ``max_nodes`` node slots (and ``max_edges`` edges, ``max_graphs`` graph slots),
  then padded like ``padded``; packing wastes far fewer slots than padding a fixed
  count of structures (Graphcore's packing of atomistic graphs, Helal et al. 2024).

Padding layout (``padded`` and ``packed``): real nodes, edges and graphs come first.
Every padded batch keeps at least one padding node and one padding graph slot: the
padding nodes belong to the last graph slot, and padding edges are self-loops on the
first padding node, so scatter-sums over padding never touch real nodes or graphs.
``node_mask``, ``edge_mask`` and ``graph_mask`` mark what is real; padding
efficiency is real nodes / node slots.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    # torch is imported where tensors are made, not here: `equibench datasets info`
    # and preparation never need it, and importing it costs about 2.5 s.
    import torch

BATCH_MODES = ("dynamic", "padded", "packed")


@dataclass
class GraphBatch:
    """Several graphs as one disjoint graph, as torch tensors (N nodes, E edges, G graphs).

    ``pos`` (N, 3) Å; ``numbers`` (N,) int64; ``edge_src``, ``edge_dst`` (E,) int64
    (messages flow src -> dst); ``edge_vec`` (E, 3) = ``pos[dst] - pos[src] + edge_shift``;
    ``edge_shift`` (E, 3) Å; ``node_graph`` (N,) graph index of each node;
    ``n_graphs`` = G; ``n_nodes`` (G,) nodes per graph slot; ``node_mask`` (N,),
    ``edge_mask`` (E,), ``graph_mask`` (G,) bool, True where real;
    ``edge_attr`` (E, F) or None; ``targets`` key -> (G, ...) per-graph labels;
    ``node_targets`` key -> (N, ...) per-node labels (forces); ``node_attrs`` key ->
    (N, ...) per-node inputs (OC20 tags); ``cell`` (G, 3, 3) Å or None.
    """

    pos: torch.Tensor
    numbers: torch.Tensor
    edge_src: torch.Tensor
    edge_dst: torch.Tensor
    edge_vec: torch.Tensor
    edge_shift: torch.Tensor
    node_graph: torch.Tensor
    n_graphs: int
    n_nodes: torch.Tensor
    node_mask: torch.Tensor
    edge_mask: torch.Tensor
    graph_mask: torch.Tensor
    edge_attr: torch.Tensor | None = None
    targets: dict[str, torch.Tensor] = field(default_factory=dict)
    node_targets: dict[str, torch.Tensor] = field(default_factory=dict)
    node_attrs: dict[str, torch.Tensor] = field(default_factory=dict)
    cell: torch.Tensor | None = None

    @property
    def n_real_graphs(self) -> int:
        return int(self.graph_mask.sum())

    @property
    def padding_efficiency(self) -> float:
        """Real nodes / node slots (1.0 without padding)."""
        return float(self.node_mask.float().mean()) if self.node_mask.numel() else 1.0

    @property
    def edge_efficiency(self) -> float:
        """Real edges / edge slots (1.0 without padding)."""
        return float(self.edge_mask.float().mean()) if self.edge_mask.numel() else 1.0

    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> GraphBatch:
        """Move every tensor to ``device``; cast floating-point tensors to ``dtype``."""
        import torch

        def move(value: object) -> object:
            if isinstance(value, torch.Tensor):
                cast = dtype if dtype is not None and value.is_floating_point() else None
                return value.to(device=device, dtype=cast)
            if isinstance(value, dict):
                return {key: move(item) for key, item in value.items()}
            return value

        return replace(self, **{f.name: move(getattr(self, f.name)) for f in fields(self)})


@dataclass
class BatchArrays:
    """The real (unpadded) contents of a batch as numpy arrays; shapes as in :class:`GraphBatch`
    with n real nodes, e real edges, g real graphs, and ``edge_src``/``edge_dst`` already
    offset into the concatenated nodes."""

    numbers: np.ndarray
    pos: np.ndarray
    node_graph: np.ndarray
    n_graphs: int
    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_vec: np.ndarray
    edge_shift: np.ndarray
    edge_attr: np.ndarray | None = None
    targets: Mapping[str, np.ndarray] = field(default_factory=dict)
    node_targets: Mapping[str, np.ndarray] = field(default_factory=dict)
    node_attrs: Mapping[str, np.ndarray] = field(default_factory=dict)
    cell: np.ndarray | None = None


def _pad(array: np.ndarray, size: int) -> np.ndarray:
    """Zero-pad the first axis of ``array`` to ``size``."""
    extra = size - array.shape[0]
    if extra == 0:
        return array
    return np.concatenate([array, np.zeros((extra, *array.shape[1:]), dtype=array.dtype)])


def assemble_batch(
    parts: BatchArrays,
    *,
    max_nodes: int | None = None,
    max_edges: int | None = None,
    max_graphs: int | None = None,
    dtype: torch.dtype | None = None,
) -> GraphBatch:
    """Pad ``parts`` to the given slot counts (None: no padding there) and make tensors.

    Floating-point tensors get ``dtype`` (default ``torch.float32``). Raises ValueError
    when the contents do not fit, or when padding edges are needed but no node slot
    is left to host them (see the module docstring).
    """
    import torch

    n, e, g = parts.numbers.shape[0], parts.edge_src.shape[0], parts.n_graphs
    padded = not (max_nodes is None and max_edges is None and max_graphs is None)
    n_slots = n + (1 if padded else 0) if max_nodes is None else max_nodes
    e_slots = e if max_edges is None else max_edges
    g_slots = g + (1 if padded else 0) if max_graphs is None else max_graphs
    if n > n_slots or e > e_slots or g > g_slots:
        raise ValueError(
            f"batch of {g} graphs, {n} nodes, {e} edges does not fit "
            f"{g_slots} graph, {n_slots} node, {e_slots} edge slots"
        )
    if (e_slots > e and n_slots == n) or (n_slots > n and g_slots == g):
        raise ValueError("padding needs one spare node slot and one spare graph slot")
    node_graph = np.concatenate(
        [parts.node_graph, np.full(n_slots - n, g_slots - 1, dtype=np.int64)]
    )
    pad_src = np.full(e_slots - e, n, dtype=np.int64)  # self-loops on the first padding node
    edge_src = np.concatenate([parts.edge_src, pad_src])
    edge_dst = np.concatenate([parts.edge_dst, pad_src])

    # Conversions happen in numpy: for these sizes it is faster than torch's .to().
    np_dtype = torch.empty(0, dtype=dtype or torch.float32).numpy().dtype

    def floats(array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(array, dtype=np_dtype))

    def labels(group: Mapping[str, np.ndarray], size: int) -> dict[str, torch.Tensor]:
        return {
            key: floats(_pad(value, size))
            if np.issubdtype(value.dtype, np.floating)
            else torch.from_numpy(np.ascontiguousarray(_pad(value, size)))
            for key, value in group.items()
        }

    def mask(real: int, slots: int) -> torch.Tensor:
        return torch.from_numpy(np.arange(slots) < real)

    return GraphBatch(
        pos=floats(_pad(parts.pos, n_slots)),
        numbers=torch.from_numpy(_pad(parts.numbers.astype(np.int64), n_slots)),
        edge_src=torch.from_numpy(edge_src),
        edge_dst=torch.from_numpy(edge_dst),
        edge_vec=floats(_pad(parts.edge_vec, e_slots)),
        edge_shift=floats(_pad(parts.edge_shift, e_slots)),
        node_graph=torch.from_numpy(node_graph),
        n_graphs=g_slots,
        n_nodes=torch.from_numpy(np.bincount(node_graph, minlength=g_slots)),
        node_mask=mask(n, n_slots),
        edge_mask=mask(e, e_slots),
        graph_mask=mask(g, g_slots),
        edge_attr=None if parts.edge_attr is None else floats(_pad(parts.edge_attr, e_slots)),
        targets=labels(parts.targets, g_slots),
        node_targets=labels(parts.node_targets, n_slots),
        node_attrs=labels(parts.node_attrs, n_slots),
        cell=None if parts.cell is None else floats(_pad(parts.cell, g_slots)),
    )


def dynamic_batches(
    n_structures: int,
    batch_size: int,
    *,
    indices: np.ndarray | None = None,
    shuffle: bool = False,
    seed: int = 0,
    drop_last: bool = False,
) -> list[np.ndarray]:
    """Consecutive groups of ``batch_size`` structure indices (optionally shuffled first)."""
    order = np.arange(n_structures) if indices is None else np.asarray(indices, dtype=np.int64)
    if shuffle:
        order = np.random.default_rng(seed).permutation(order)
    stop = len(order) - len(order) % batch_size if drop_last else len(order)
    return [order[start : start + batch_size] for start in range(0, stop, batch_size)]


def pack_first_fit_decreasing(
    n_nodes: np.ndarray,
    n_edges: np.ndarray | None = None,
    *,
    max_nodes: int,
    max_edges: int | None = None,
    max_graphs: int | None = None,
) -> list[np.ndarray]:
    """Bin-pack structures (sizes ``n_nodes``, ``n_edges``, shape (S,)) first-fit-decreasing.

    Items are taken largest first (nodes, then edges) and each goes into the first
    open pack where it fits all limits, else a new pack. A segment tree over packs
    holds the largest remaining capacity per subtree, so finding the first fitting
    pack costs O(log S) instead of a scan; all of QM9 packs in a few seconds.
    Returns the structure indices of each pack.
    """
    n_nodes = np.asarray(n_nodes, dtype=np.int64)
    n_edges = np.zeros_like(n_nodes) if n_edges is None else np.asarray(n_edges, dtype=np.int64)
    edge_cap = int(n_edges.sum()) + 1 if max_edges is None else max_edges
    graph_cap = n_nodes.shape[0] + 1 if max_graphs is None else max_graphs
    too_big = (n_nodes > max_nodes) | (n_edges > edge_cap)
    if too_big.any():
        raise ValueError(f"structures {np.flatnonzero(too_big)[:5]} exceed the pack limits")
    size = 1
    while size < max(1, n_nodes.shape[0]):
        size *= 2
    # Remaining capacity per tree node; leaves are packs, unopened packs are full.
    room = np.empty((3, 2 * size), dtype=np.int64)
    room[:, :] = np.array([max_nodes, edge_cap, graph_cap])[:, None]
    order = np.lexsort((-n_edges, -n_nodes))
    assignment = np.empty(n_nodes.shape[0], dtype=np.int64)
    rn, re, rg = room[0], room[1], room[2]
    for item in order.tolist():
        need_n, need_e = int(n_nodes[item]), int(n_edges[item])
        # Leftmost leaf with enough room on every limit: depth-first, left child first.
        stack = [1]
        while True:
            node = stack.pop()
            if rn[node] < need_n or re[node] < need_e or rg[node] < 1:
                continue
            if node >= size:
                break
            stack.append(2 * node + 1)
            stack.append(2 * node)
        assignment[item] = node - size
        rn[node] -= need_n
        re[node] -= need_e
        rg[node] -= 1
        node //= 2
        while node:
            left, right = 2 * node, 2 * node + 1
            rn[node] = max(rn[left], rn[right])
            re[node] = max(re[left], re[right])
            rg[node] = max(rg[left], rg[right])
            node //= 2
    n_packs = int(assignment.max(initial=-1)) + 1
    by_pack = np.argsort(assignment, kind="stable")
    bounds = np.searchsorted(assignment[by_pack], np.arange(n_packs + 1))
    return [by_pack[bounds[k] : bounds[k + 1]] for k in range(n_packs)]


@dataclass
class BatchPlan:
    """Which structures form each batch, and the slot counts they are padded to.

    ``batches``: structure indices per batch; ``max_nodes``/``max_edges``/``max_graphs``:
    slots per batch (None for ``dynamic``); ``n_nodes``/``n_edges`` (S,) sizes of all
    structures, for the efficiency figures.
    """

    mode: str
    batches: list[np.ndarray]
    n_nodes: np.ndarray
    n_edges: np.ndarray
    max_nodes: int | None = None
    max_edges: int | None = None
    max_graphs: int | None = None

    def _efficiency(self, sizes: np.ndarray, slots: int | None) -> float:
        if slots is None or not self.batches:
            return 1.0
        real = sum(int(sizes[b].sum()) for b in self.batches)
        return real / (slots * len(self.batches))

    @property
    def padding_efficiency(self) -> float:
        """Real nodes / node slots over all batches (1.0 for ``dynamic``)."""
        return self._efficiency(self.n_nodes, self.max_nodes)

    @property
    def edge_efficiency(self) -> float:
        """Real edges / edge slots over all batches (1.0 for ``dynamic``)."""
        return self._efficiency(self.n_edges, self.max_edges)


def plan_batches(
    n_nodes: np.ndarray,
    n_edges: np.ndarray,
    mode: str = "dynamic",
    *,
    batch_size: int = 32,
    max_nodes: int | None = None,
    max_edges: int | None = None,
    max_graphs: int | None = None,
    indices: np.ndarray | None = None,
    shuffle: bool = False,
    seed: int = 0,
) -> BatchPlan:
    """Group structures for ``mode`` (see the module docstring).

    ``n_nodes``, ``n_edges``: (S,) sizes of every structure. ``padded``: slot counts
    default to the largest batch plus one padding node and graph. ``packed``:
    ``max_nodes`` is required and counts slots, one of which stays free for padding;
    ``max_graphs`` defaults to the fullest pack plus one. Packs are shuffled (not
    their contents) when ``shuffle`` is set.
    """
    n_nodes = np.asarray(n_nodes, dtype=np.int64)
    n_edges = np.asarray(n_edges, dtype=np.int64)
    if mode not in BATCH_MODES:
        raise ValueError(f"unknown batch mode {mode!r}; choose one of {BATCH_MODES}")
    if mode in ("dynamic", "padded"):
        batches = dynamic_batches(
            n_nodes.shape[0], batch_size, indices=indices, shuffle=shuffle, seed=seed
        )
        if mode == "dynamic":
            return BatchPlan(mode, batches, n_nodes, n_edges)
        max_nodes = max_nodes or max(int(n_nodes[b].sum()) for b in batches) + 1
        max_edges = max_edges or max(int(n_edges[b].sum()) for b in batches)
        return BatchPlan(
            mode, batches, n_nodes, n_edges, max_nodes, max_edges, max_graphs or batch_size + 1
        )
    if max_nodes is None:
        raise ValueError("packed batches need max_nodes")
    subset = np.arange(n_nodes.shape[0]) if indices is None else np.asarray(indices)
    packs = pack_first_fit_decreasing(
        n_nodes[subset],
        n_edges[subset],
        max_nodes=max_nodes - 1,
        max_edges=max_edges,
        max_graphs=None if max_graphs is None else max_graphs - 1,
    )
    batches = [subset[p] for p in packs]
    if shuffle:
        batches = [batches[k] for k in np.random.default_rng(seed).permutation(len(batches))]
    max_edges = max_edges or max(int(n_edges[b].sum()) for b in batches)
    max_graphs = max_graphs or max(len(b) for b in batches) + 1
    return BatchPlan(mode, batches, n_nodes, n_edges, max_nodes, max_edges, max_graphs)
