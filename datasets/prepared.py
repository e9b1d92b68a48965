"""The prepared-dataset file format: flat arrays in one uncompressed ``.npz``.

All structures are concatenated (S structures, N atoms in total, E stored edges);
``atom_ptr`` (S + 1,) gives the atom range of each structure and ``edge_ptr``
(S + 1,) its edge range, so loading is a handful of array reads (no per-structure
Python objects) and all of QM9 loads in well under a second. Keys in the file:

=========================  ============  =============================================
key                        shape         meaning
=========================  ============  =============================================
``metadata``               bytes         UTF-8 JSON: name, source, units, synthetic, ...
``numbers``                (N,) uint8    atomic numbers
``pos``                    (N, 3)        Cartesian positions, Å
``atom_ptr``               (S + 1,)      atoms of structure i: ``atom_ptr[i]:atom_ptr[i+1]``
``cell``, ``pbc``          (S,3,3) (S,3) lattice vectors as rows (Å) and periodic flags;
                                         only for periodic datasets
``target/<k>``             (S, ...)      per-structure labels (energies, properties)
``node_target/<k>``        (N, ...)      per-atom labels (forces)
``node_attr/<k>``          (N, ...)      per-atom inputs (OC20 tags, Mulliken charges)
``structure_attr/<k>``     (S, ...)      identifiers (QM9 index, OC20 sid/fid/split)
``n_edges``                (S,) int32    edges per structure of the reference radius graph
``graph/edge_ptr``         (S + 1,)      edges of structure i (only if the graph is stored)
``graph/src``, ``/dst``    (E,)          structure-local atom indices (smallest uint)
``graph/cell_shift``       (E, 3) int8   lattice translation of dst, periodic only
=========================  ============  =============================================

The reference radius graph (``metadata["graph"]``: cutoff, max_neighbors) is the one
``n_edges`` counts; it is stored in full only where that stays small (QM9, oc20-like).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from .cache import atomic_write
from .graphs import radius_pairs

FORMAT_VERSION = 1


@dataclass
class StoredGraph:
    """Radius graph of every structure with structure-local indices (see module table)."""

    cutoff: float
    max_neighbors: int | None
    edge_ptr: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    cell_shift: np.ndarray | None = None


@dataclass
class PreparedData:
    """Every array of a prepared dataset (shapes in the module docstring)."""

    metadata: dict[str, Any]
    numbers: np.ndarray
    pos: np.ndarray
    atom_ptr: np.ndarray
    n_edges: np.ndarray
    cell: np.ndarray | None = None
    pbc: np.ndarray | None = None
    targets: dict[str, np.ndarray] = field(default_factory=dict)
    node_targets: dict[str, np.ndarray] = field(default_factory=dict)
    node_attrs: dict[str, np.ndarray] = field(default_factory=dict)
    structure_attrs: dict[str, np.ndarray] = field(default_factory=dict)
    graph: StoredGraph | None = None

    @property
    def n_structures(self) -> int:
        return int(self.atom_ptr.shape[0] - 1)

    def subset(self, indices: np.ndarray, note: str) -> PreparedData:
        """The structures ``indices`` (in that order) with everything stored about them;
        ``metadata["subset"]`` records ``note`` and the counts, so that a file holding
        part of a dataset always says so."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and not (0 <= idx.min() and idx.max() < self.n_structures):
            raise ValueError(f"structure indices must lie in 0..{self.n_structures - 1}")
        n_atoms = np.diff(self.atom_ptr)[idx]
        atoms = ranges(self.atom_ptr[idx], n_atoms)

        def ptr(counts: np.ndarray) -> np.ndarray:
            return np.concatenate([[0], np.cumsum(counts)]).astype(self.atom_ptr.dtype)

        graph = None
        if self.graph is not None:
            g = self.graph
            n_stored = np.diff(g.edge_ptr)[idx]
            edges = ranges(g.edge_ptr[idx], n_stored)
            graph = StoredGraph(g.cutoff, g.max_neighbors,
                                ptr(n_stored).astype(g.edge_ptr.dtype), g.src[edges],
                                g.dst[edges],
                                None if g.cell_shift is None else g.cell_shift[edges])
        metadata = {**self.metadata, "subset": {
            "note": note, "n_structures": int(idx.size), "of": self.n_structures}}
        return PreparedData(
            metadata=metadata, numbers=self.numbers[atoms], pos=self.pos[atoms],
            atom_ptr=ptr(n_atoms), n_edges=self.n_edges[idx],
            cell=None if self.cell is None else self.cell[idx],
            pbc=None if self.pbc is None else self.pbc[idx],
            targets={k: v[idx] for k, v in self.targets.items()},
            node_targets={k: v[atoms] for k, v in self.node_targets.items()},
            node_attrs={k: v[atoms] for k, v in self.node_attrs.items()},
            structure_attrs={k: v[idx] for k, v in self.structure_attrs.items()},
            graph=graph)

    def save(self, path: Path, compressed: bool = False) -> None:
        """Write atomically to ``path``: uncompressed by default, so loading is a plain
        read; ``compressed`` for a file that has to travel (``np.load`` reads both)."""
        arrays: dict[str, np.ndarray] = {
            "metadata": np.frombuffer(json.dumps(self.metadata).encode(), dtype=np.uint8),
            "numbers": self.numbers,
            "pos": self.pos,
            "atom_ptr": self.atom_ptr,
            "n_edges": self.n_edges,
        }
        if self.cell is not None:
            arrays["cell"] = self.cell
            arrays["pbc"] = self.pbc
        for prefix, group in (
            ("target", self.targets),
            ("node_target", self.node_targets),
            ("node_attr", self.node_attrs),
            ("structure_attr", self.structure_attrs),
        ):
            arrays.update({f"{prefix}/{key}": value for key, value in group.items()})
        if self.graph is not None:
            arrays["graph/edge_ptr"] = self.graph.edge_ptr
            arrays["graph/src"] = self.graph.src
            arrays["graph/dst"] = self.graph.dst
            if self.graph.cell_shift is not None:
                arrays["graph/cell_shift"] = self.graph.cell_shift
        with atomic_write(path) as handle:
            (np.savez_compressed if compressed else np.savez)(handle, **arrays)

    @classmethod
    def load(cls, path: Path) -> PreparedData:
        """Read a file written by :meth:`save`."""
        with np.load(path, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
        metadata = json.loads(arrays.pop("metadata").tobytes().decode())
        if metadata.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{path} has format {metadata.get('format_version')}, expected "
                f"{FORMAT_VERSION}: prepare it again with --force"
            )

        def group(prefix: str) -> dict[str, np.ndarray]:
            return {k.split("/", 1)[1]: v for k, v in arrays.items() if k.startswith(prefix + "/")}

        graph = None
        if "graph/edge_ptr" in arrays:
            spec = metadata["graph"]
            graph = StoredGraph(
                cutoff=spec["cutoff"],
                max_neighbors=spec["max_neighbors"],
                edge_ptr=arrays["graph/edge_ptr"],
                src=arrays["graph/src"],
                dst=arrays["graph/dst"],
                cell_shift=arrays.get("graph/cell_shift"),
            )
        return cls(
            metadata=metadata,
            numbers=arrays["numbers"],
            pos=arrays["pos"],
            atom_ptr=arrays["atom_ptr"],
            n_edges=arrays["n_edges"],
            cell=arrays.get("cell"),
            pbc=arrays.get("pbc"),
            targets=group("target"),
            node_targets=group("node_target"),
            node_attrs=group("node_attr"),
            structure_attrs=group("structure_attr"),
            graph=graph,
        )


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for each pair, without a Python loop."""
    offsets = np.cumsum(counts) - counts
    return np.repeat(starts - offsets, counts) + np.arange(int(counts.sum()))


def smallest_uint(max_value: int) -> type[np.unsignedinteger]:
    """Smallest unsigned dtype holding ``max_value`` (local indices of up to 255 atoms: uint8)."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if max_value <= np.iinfo(dtype).max:
            return dtype
    return np.uint64


def build_radius_graphs(
    pos: np.ndarray,
    atom_ptr: np.ndarray,
    *,
    cutoff: float,
    max_neighbors: int | None = None,
    cell: np.ndarray | None = None,
    pbc: np.ndarray | None = None,
    store: bool = True,
    progress: bool = False,
) -> tuple[np.ndarray, StoredGraph | None]:
    """Radius graph of every structure: ``(n_edges (S,) int32, StoredGraph or None)``.

    With ``store=False`` only the per-structure edge counts are kept (for datasets
    whose full edge list would be gigabytes, such as OC20).
    """
    from vesin import NeighborList  # lazily, see graphs.py

    n_structures = atom_ptr.shape[0] - 1
    nl = NeighborList(cutoff=cutoff, full_list=True)
    counts = np.zeros(n_structures, dtype=np.int32)
    srcs: list[np.ndarray] = []
    dsts: list[np.ndarray] = []
    shifts: list[np.ndarray] = []
    steps: Iterable[int] = range(n_structures)
    if progress:
        steps = tqdm(steps, desc=f"radius graph {cutoff:g} Å", unit="structure")
    for i in steps:
        src, dst, shift = radius_pairs(
            pos[atom_ptr[i] : atom_ptr[i + 1]],
            cutoff,
            cell=None if cell is None else cell[i],
            pbc=None if pbc is None else pbc[i],
            max_neighbors=max_neighbors,
            neighbor_list=nl,
        )
        counts[i] = src.shape[0]
        if store:
            srcs.append(src)
            dsts.append(dst)
            shifts.append(shift)
    if not store:
        return counts, None
    index_dtype = smallest_uint(int(np.diff(atom_ptr).max(initial=1)) - 1)
    periodic = pbc is not None and bool(np.any(pbc))
    graph = StoredGraph(
        cutoff=cutoff,
        max_neighbors=max_neighbors,
        edge_ptr=np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]),
        src=_concat(srcs, index_dtype),
        dst=_concat(dsts, index_dtype),
        cell_shift=_concat(shifts, np.int8).reshape(-1, 3) if periodic else None,
    )
    return counts, graph


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """Concatenate and cast, also for an empty list."""
    if not parts:
        return np.zeros(0, dtype=dtype)
    return np.concatenate(parts).astype(dtype, copy=False)


def base_metadata(
    name: str,
    *,
    source: str,
    synthetic: bool,
    periodic: bool,
    units: dict[str, str],
    graph_cutoff: float,
    graph_max_neighbors: int | None,
    **extra: Any,
) -> dict[str, Any]:
    """The metadata keys every prepared dataset has (JSON-serialisable)."""
    return {
        "format_version": FORMAT_VERSION,
        "name": name,
        "source": source,
        "synthetic": synthetic,
        "periodic": periodic,
        "units": units,
        "graph": {"kind": "radius", "cutoff": graph_cutoff, "max_neighbors": graph_max_neighbors},
        **extra,
    }
