"""A prepared dataset in memory: structures, their graphs, and batches of them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .batching import BatchArrays, BatchPlan, GraphBatch, assemble_batch, plan_batches
from .graphs import GRAPH_KINDS, Graph, bond_graph, full_graph, limit_neighbors, radius_graph
from .prepared import PreparedData, ranges

if TYPE_CHECKING:
    import torch


@dataclass
class Structure:
    """One structure of n atoms.

    ``numbers`` (n,) atomic numbers; ``pos`` (n, 3) Å; ``cell`` (3, 3) Å, lattice
    vectors as rows (zeros when not periodic); ``pbc`` (3,) bool; ``targets``:
    labels, per structure (scalars) and per atom (arrays of n rows, named in
    ``node_target_keys``, e.g. ``forces``); ``node_attrs``: per-atom inputs (OC20
    ``tags``, QM9 ``mulliken_charge``); ``info``: identifiers (QM9 ``index``, OC20
    ``sid``/``fid``).
    """

    numbers: np.ndarray
    pos: np.ndarray
    cell: np.ndarray
    pbc: np.ndarray
    targets: dict[str, Any]
    node_target_keys: tuple[str, ...] = ()
    node_attrs: dict[str, np.ndarray] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_ase(self) -> Any:
        """The structure as ``ase.Atoms`` (positions, cell, pbc, tags if known)."""
        from ase import Atoms

        atoms = Atoms(numbers=self.numbers, positions=self.pos, cell=self.cell, pbc=self.pbc)
        if "tags" in self.node_attrs:
            atoms.set_tags(self.node_attrs["tags"])
        return atoms


class Dataset:
    """Structures of a prepared dataset, with graphs and batches built on demand.

    The reference radius graph stored at preparation time (QM9: 5 Å; oc20-like: 6 Å,
    50 neighbours) is reused whenever a request can be answered from it (a cutoff no
    larger, a neighbour limit no looser); anything else is computed with vesin.
    """

    def __init__(self, data: PreparedData) -> None:
        self.data = data
        self.metadata = data.metadata
        self._bonds: dict[int, Graph] = {}

    @property
    def name(self) -> str:
        return str(self.metadata["name"])

    @property
    def synthetic(self) -> bool:
        return bool(self.metadata["synthetic"])

    @property
    def periodic(self) -> bool:
        return bool(self.metadata["periodic"])

    @property
    def source(self) -> str:
        return str(self.metadata["source"])

    def __len__(self) -> int:
        return self.data.n_structures

    def __repr__(self) -> str:
        flag = ", synthetic" if self.synthetic else ""
        return f"Dataset({self.name!r}, {len(self)} structures, source={self.source!r}{flag})"

    def sample(self, n: int, seed: int) -> np.ndarray:
        """(n,) sorted indices of ``n`` structures drawn without replacement, seeded: the one
        way every level and model picks its structures, so that a seed means one sample."""
        if not 0 < n <= len(self):
            raise ValueError(f"cannot sample {n} structures from {self.name}, which has "
                             f"{len(self)}; ask for 1 to {len(self)}")
        return np.sort(np.random.default_rng(seed).choice(len(self), size=n, replace=False))

    @property
    def n_atoms(self) -> np.ndarray:
        """(S,) atoms per structure."""
        return np.diff(self.data.atom_ptr)

    def structure(self, i: int) -> Structure:
        d = self.data
        i = self._check(i)
        atoms = slice(int(d.atom_ptr[i]), int(d.atom_ptr[i + 1]))
        targets: dict[str, Any] = {key: value[i] for key, value in d.targets.items()}
        targets.update({key: value[atoms] for key, value in d.node_targets.items()})
        return Structure(
            numbers=d.numbers[atoms],
            pos=d.pos[atoms].astype(np.float64),
            cell=np.zeros((3, 3)) if d.cell is None else d.cell[i],
            pbc=np.zeros(3, dtype=bool) if d.pbc is None else d.pbc[i],
            targets=targets,
            node_target_keys=tuple(d.node_targets),
            node_attrs={key: value[atoms] for key, value in d.node_attrs.items()},
            info={key: value[i].item() for key, value in d.structure_attrs.items()},
        )

    def _check(self, i: int) -> int:
        if not -len(self) <= i < len(self):
            raise IndexError(f"structure {i} out of range for {len(self)} structures")
        return int(i) % len(self)

    def _stored_graph_usable(self, cutoff: float, max_neighbors: int | None) -> bool:
        g = self.data.graph
        if g is None or cutoff > g.cutoff:
            return False
        # A neighbour-limited stored graph only answers requests limited at least as much.
        return g.max_neighbors is None or (
            max_neighbors is not None and max_neighbors <= g.max_neighbors
        )

    def graph(
        self, i: int, kind: str = "radius", cutoff: float = 5.0, max_neighbors: int | None = None
    ) -> Graph:
        """Edges of structure ``i`` (see :mod:`.graphs` for the convention).

        ``kind``: ``radius`` (``cutoff`` Å, optional ``max_neighbors``, periodic
        images where the structure is periodic), ``bonds`` (RDKit chemical bonds,
        molecules only), ``full`` (all pairs).
        """
        i = self._check(i)
        if kind == "radius" and self._stored_graph_usable(cutoff, max_neighbors):
            src, dst, vec, shift, cell_shift, _ = self._stored_edges(
                np.array([i]), cutoff, max_neighbors
            )
            return Graph(src, dst, vec, shift, cell_shift)
        s = self.structure(i)
        if kind == "radius":
            return radius_graph(s.pos, cutoff, cell=s.cell, pbc=s.pbc, max_neighbors=max_neighbors)
        if kind == "full":
            return full_graph(s.pos)
        if kind == "bonds":
            if self.periodic:
                raise ValueError(f"bond graphs need molecules; {self.name} is periodic")
            if i not in self._bonds:
                # RDKit takes milliseconds per molecule: keep each result for later epochs.
                self._bonds[i] = bond_graph(s.numbers, s.pos)
            return self._bonds[i]
        raise ValueError(f"unknown graph kind {kind!r}; choose one of {GRAPH_KINDS}")

    def _stored_edges(
        self, idx: np.ndarray, cutoff: float, max_neighbors: int | None
    ) -> tuple[np.ndarray, ...]:
        """Stored edges of structures ``idx`` with batch-global node indices.

        Returns ``(src, dst, vec, shift, cell_shift, edge_graph)``; nodes are numbered
        in the order of ``idx``, as :meth:`batch` concatenates them.
        """
        d, g = self.data, self.data.graph
        assert g is not None
        n_e = (g.edge_ptr[idx + 1] - g.edge_ptr[idx]).astype(np.int64)
        edges = ranges(g.edge_ptr[idx], n_e)
        n_a = np.diff(d.atom_ptr)[idx]
        first_node = np.repeat(np.cumsum(n_a) - n_a, n_e)
        edge_graph = np.repeat(np.arange(idx.shape[0]), n_e)
        src = g.src[edges].astype(np.int64) + first_node
        dst = g.dst[edges].astype(np.int64) + first_node
        pos = d.pos[ranges(d.atom_ptr[idx], n_a)].astype(np.float64)
        if g.cell_shift is not None and d.cell is not None:
            cell_shift = g.cell_shift[edges].astype(np.int64)
            shift = np.einsum("ej,ejk->ek", cell_shift, d.cell[idx][edge_graph])
        else:
            cell_shift = np.zeros((src.shape[0], 3), dtype=np.int64)
            shift = np.zeros((src.shape[0], 3))
        vec = pos[dst] - pos[src] + shift
        tighter_limit = max_neighbors is not None and (
            g.max_neighbors is None or max_neighbors < g.max_neighbors
        )
        if cutoff < g.cutoff or tighter_limit:
            dist = np.linalg.norm(vec, axis=1)
            keep = dist < cutoff
            if max_neighbors is not None:
                keep &= limit_neighbors(dst, np.where(keep, dist, np.inf), max_neighbors)
            src, dst, vec, shift = src[keep], dst[keep], vec[keep], shift[keep]
            cell_shift, edge_graph = cell_shift[keep], edge_graph[keep]
        return src, dst, vec, shift, cell_shift, edge_graph

    def edge_counts(
        self, graph: str = "radius", cutoff: float = 5.0, max_neighbors: int | None = None
    ) -> np.ndarray:
        """(S,) edges per structure for a graph choice (instant for the reference graph)."""
        ref = self.metadata["graph"]
        if graph == "radius" and (cutoff, max_neighbors) == (ref["cutoff"], ref["max_neighbors"]):
            return self.data.n_edges.astype(np.int64)
        return np.array(
            [self.graph(i, graph, cutoff, max_neighbors).n_edges for i in range(len(self))],
            dtype=np.int64,
        )

    def batch(
        self,
        indices: Sequence[int] | np.ndarray,
        graph: str = "radius",
        cutoff: float = 5.0,
        max_neighbors: int | None = None,
        *,
        max_nodes: int | None = None,
        max_edges: int | None = None,
        max_graphs: int | None = None,
        dtype: torch.dtype | None = None,
    ) -> GraphBatch:
        """Structures ``indices`` as one :class:`GraphBatch` (padded if any ``max_*`` is set).

        Graph ``g`` of the batch is structure ``indices[g]``. From the stored graph
        the whole batch is gathered with array operations (no per-structure loop).
        """
        d = self.data
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.shape[0] == 0:
            raise ValueError("a batch needs at least one structure")
        if idx.min() < -len(self) or idx.max() >= len(self):
            raise IndexError(f"structure indices out of range for {len(self)} structures")
        idx = idx % len(self)
        n_a = np.diff(d.atom_ptr)[idx]
        atoms = ranges(d.atom_ptr[idx], n_a)
        if graph == "radius" and self._stored_graph_usable(cutoff, max_neighbors):
            src, dst, vec, shift, _, _ = self._stored_edges(idx, cutoff, max_neighbors)
            edge_attr = None
        else:
            graphs = [self.graph(int(i), graph, cutoff, max_neighbors) for i in idx]
            first = np.cumsum(n_a) - n_a
            src = np.concatenate([gr.edge_src + o for gr, o in zip(graphs, first, strict=True)])
            dst = np.concatenate([gr.edge_dst + o for gr, o in zip(graphs, first, strict=True)])
            vec = np.concatenate([gr.edge_vec for gr in graphs]).reshape(-1, 3)
            shift = np.concatenate([gr.edge_shift for gr in graphs]).reshape(-1, 3)
            attrs = [gr.edge_attr for gr in graphs]
            edge_attr = None if attrs[0] is None else np.concatenate(attrs)
        parts = BatchArrays(
            numbers=d.numbers[atoms],
            pos=d.pos[atoms],
            node_graph=np.repeat(np.arange(idx.shape[0]), n_a),
            n_graphs=int(idx.shape[0]),
            edge_src=src.astype(np.int64),
            edge_dst=dst.astype(np.int64),
            edge_vec=vec,
            edge_shift=shift,
            edge_attr=edge_attr,
            targets={key: value[idx] for key, value in d.targets.items()},
            node_targets={key: value[atoms] for key, value in d.node_targets.items()},
            node_attrs={key: value[atoms] for key, value in d.node_attrs.items()},
            cell=None if d.cell is None else d.cell[idx],
        )
        return assemble_batch(
            parts, max_nodes=max_nodes, max_edges=max_edges, max_graphs=max_graphs, dtype=dtype
        )

    def plan(
        self,
        mode: str = "dynamic",
        *,
        batch_size: int = 32,
        max_nodes: int | None = None,
        max_edges: int | None = None,
        max_graphs: int | None = None,
        graph: str = "radius",
        cutoff: float = 5.0,
        max_neighbors: int | None = None,
        indices: np.ndarray | None = None,
        shuffle: bool = False,
        seed: int = 0,
    ) -> BatchPlan:
        """Group structures into batches (``dynamic``, ``padded`` or ``packed``; see
        :mod:`.batching`) and report their padding efficiency."""
        counts = self.edge_counts(graph, cutoff, max_neighbors)
        return plan_batches(
            self.n_atoms, counts, mode, batch_size=batch_size, max_nodes=max_nodes,
            max_edges=max_edges, max_graphs=max_graphs, indices=indices, shuffle=shuffle,
            seed=seed,
        )  # fmt: skip

    def batches(
        self,
        plan: BatchPlan,
        graph: str = "radius",
        cutoff: float = 5.0,
        max_neighbors: int | None = None,
        dtype: torch.dtype | None = None,
    ) -> Iterator[GraphBatch]:
        """The batches of ``plan`` (from :meth:`plan`, with the same graph choice)."""
        for indices in plan.batches:
            yield self.batch(
                indices, graph, cutoff, max_neighbors, max_nodes=plan.max_nodes,
                max_edges=plan.max_edges, max_graphs=plan.max_graphs, dtype=dtype,
            )  # fmt: skip
