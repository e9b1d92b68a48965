"""Graphs over one structure: chemical bonds, radius cutoff, or all pairs.

Edge convention (every builder, every batch): edge ``k`` carries a message from
node ``edge_src[k]`` to node ``edge_dst[k]`` (messages flow src -> dst, and
aggregation sums over edges with the same ``edge_dst``), and

    edge_vec[k] = pos[edge_dst[k]] - pos[edge_src[k]] + edge_shift[k]

where ``edge_shift`` is the Cartesian lattice translation (Å) of the periodic image
of ``edge_dst`` that is meant (zero without periodic boundaries). Models that need
forces by autograd recompute ``edge_vec`` from ``pos`` with ``edge_shift``.
Every graph is directed and symmetric: each edge appears in both directions.
Edges are sorted by (src, dst, shift) so that equal inputs give equal arrays.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    # vesin is imported where neighbour lists are built: it imports torch (2.5 s),
    # which loading a dataset or `equibench datasets info` must not pay for.
    from vesin import NeighborList

GRAPH_KINDS = ("radius", "bonds", "full")
BOND_TYPES = ("single", "double", "triple", "aromatic")


class BondOrderWarning(UserWarning):
    """RDKit could not assign bond orders; bonds were typed from connectivity only."""


@dataclass
class Graph:
    """Edges of one structure.

    Shapes: ``edge_src``, ``edge_dst`` (E,) int64; ``edge_vec`` (E, 3) Å;
    ``edge_shift`` (E, 3) Å (Cartesian lattice translation); ``cell_shift`` (E, 3)
    int (the same translation in units of the cell vectors); ``edge_attr`` (E, F)
    or None (for ``bonds``: one-hot of :data:`BOND_TYPES`, F = 4).
    """

    edge_src: np.ndarray
    edge_dst: np.ndarray
    edge_vec: np.ndarray
    edge_shift: np.ndarray
    cell_shift: np.ndarray
    edge_attr: np.ndarray | None = None

    @property
    def n_edges(self) -> int:
        return int(self.edge_src.shape[0])


def make_graph(
    pos: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    cell_shift: np.ndarray | None = None,
    cell: np.ndarray | None = None,
    edge_attr: np.ndarray | None = None,
) -> Graph:
    """Assemble a :class:`Graph` from index pairs, computing vectors per the convention."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if cell_shift is None:
        cell_shift = np.zeros((src.shape[0], 3), dtype=np.int64)
    if cell is None or not cell_shift.any():
        edge_shift = np.zeros((src.shape[0], 3), dtype=pos.dtype)
    else:
        edge_shift = (cell_shift @ np.asarray(cell, dtype=np.float64)).astype(pos.dtype)
    edge_vec = pos[dst] - pos[src] + edge_shift
    return Graph(src, dst, edge_vec, edge_shift, cell_shift.astype(np.int64), edge_attr)


def canonical_order(src: np.ndarray, dst: np.ndarray, cell_shift: np.ndarray) -> np.ndarray:
    """Permutation that sorts edges by (src, dst, shift); used so outputs are reproducible."""
    return np.lexsort((cell_shift[:, 2], cell_shift[:, 1], cell_shift[:, 0], dst, src))


def limit_neighbors(
    dst: np.ndarray, dist: np.ndarray, max_neighbors: int, tie_break: np.ndarray | None = None
) -> np.ndarray:
    """Boolean mask keeping, for each receiving node ``dst``, its ``max_neighbors`` nearest edges.

    The limit is on incoming edges because that is what a node aggregates (OC20's
    ``max_num_neighbors`` convention); ties in distance are broken by ``tie_break``
    (the edge's position in canonical order) so the choice is deterministic.
    """
    if tie_break is None:
        tie_break = np.arange(dst.shape[0])
    order = np.lexsort((tie_break, dist, dst))
    sorted_dst = dst[order]
    # Rank of each edge among the edges of its receiver, counted from the nearest.
    group_start = np.flatnonzero(np.r_[True, sorted_dst[1:] != sorted_dst[:-1]])
    counts = np.diff(np.r_[group_start, sorted_dst.shape[0]])
    rank = np.arange(sorted_dst.shape[0]) - np.repeat(group_start, counts)
    keep = np.zeros(dst.shape[0], dtype=bool)
    keep[order[rank < max_neighbors]] = True
    return keep


def radius_pairs(
    pos: np.ndarray,
    cutoff: float,
    *,
    cell: np.ndarray | None = None,
    pbc: np.ndarray | None = None,
    max_neighbors: int | None = None,
    neighbor_list: NeighborList | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Index pairs of :func:`radius_graph` without the vectors: ``(src, dst, cell_shift)``.

    Shapes (E,), (E,), (E, 3); canonical order. Kept separate because dataset
    preparation only stores indices and calls this once per structure.
    """
    pos = np.ascontiguousarray(pos, dtype=np.float64)
    periodic = pbc is not None and bool(np.any(pbc))
    if pos.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 3), np.int64)
    box = np.asarray(cell, dtype=np.float64) if periodic else np.zeros((3, 3))
    if neighbor_list is None:
        from vesin import NeighborList

        neighbor_list = NeighborList(cutoff=cutoff, full_list=True)
    flags = [bool(p) for p in pbc] if periodic else False
    src, dst, shift = neighbor_list.compute(pos, box, flags, quantities="ijS")
    src, dst, shift = src.astype(np.int64), dst.astype(np.int64), shift.astype(np.int64)
    order = canonical_order(src, dst, shift)
    src, dst, shift = src[order], dst[order], shift[order]
    if max_neighbors is not None:
        # Distances recomputed as make_graph and Dataset.batch do, so that ties between
        # equidistant neighbours are broken identically everywhere.
        dist = np.linalg.norm(pos[dst] - pos[src] + shift @ box, axis=1)
        keep = limit_neighbors(dst, dist, max_neighbors)
        src, dst, shift = src[keep], dst[keep], shift[keep]
    return src, dst, shift


def radius_graph(
    pos: np.ndarray,
    cutoff: float,
    *,
    cell: np.ndarray | None = None,
    pbc: np.ndarray | None = None,
    max_neighbors: int | None = None,
    neighbor_list: NeighborList | None = None,
) -> Graph:
    """All pairs closer than ``cutoff`` Å (vesin neighbour list), optionally periodic.

    ``pos`` (n, 3) Å; ``cell`` (3, 3) Å with lattice vectors as rows; ``pbc`` (3,)
    bool. Self-pairs are excluded, periodic images of an atom itself are included.
    ``max_neighbors`` keeps the nearest edges per receiving node. Pass a reusable
    ``neighbor_list`` (same cutoff, ``full_list=True``) in tight loops.
    """
    src, dst, shift = radius_pairs(
        pos, cutoff, cell=cell, pbc=pbc, max_neighbors=max_neighbors, neighbor_list=neighbor_list
    )
    periodic = pbc is not None and bool(np.any(pbc))
    return make_graph(
        np.asarray(pos, dtype=np.float64), src, dst, shift, cell if periodic else None
    )


def full_graph(pos: np.ndarray) -> Graph:
    """Every ordered pair of distinct atoms (no periodic images): n (n - 1) edges."""
    n = pos.shape[0]
    src, dst = np.nonzero(~np.eye(n, dtype=bool))
    return make_graph(np.asarray(pos, dtype=np.float64), src, dst)


def _perceive_bonds(block: str, charge: int) -> tuple[Any, str | None]:
    """RDKit molecule with bonds from an XYZ block, and why bond orders failed (or None).

    Covalent-radius connectivity (fast) is tried first; where it over-connects strained
    rings (about 5 % of QM9: "explicit valence ... greater than permitted"), extended
    Hückel connectivity (slower, ~6 ms) is tried before giving up on bond orders.
    """
    from rdkit import Chem, rdBase
    from rdkit.Chem import rdDetermineBonds

    # Our own warning reports failures; RDKit's log lines would only repeat them.
    _logs_blocked = rdBase.BlockLogs()
    error = None
    for use_hueckel in (False, True):
        mol = Chem.MolFromXYZBlock(block)
        try:
            rdDetermineBonds.DetermineBonds(mol, charge=charge, useHueckel=use_hueckel)
        except Exception as err:  # RDKit raises ValueError or RuntimeError here
            error = str(err)
            continue
        try:
            Chem.SanitizeMol(mol)
        except Exception:
            # Aromaticity perception failed; the Kekulé bond orders are still valid.
            pass
        return mol, None
    mol = Chem.MolFromXYZBlock(block)
    rdDetermineBonds.DetermineConnectivity(mol, charge=charge)
    return mol, error


def bond_graph(numbers: np.ndarray, pos: np.ndarray, *, charge: int = 0) -> Graph:
    """Chemical bonds perceived from the 3-D structure with RDKit (SE(3)-Transformer recipe).

    Connectivity and bond orders come from ``rdDetermineBonds.DetermineBonds``;
    aromaticity from RDKit sanitization. ``edge_attr`` (E, 4) is the one-hot of
    single/double/triple/aromatic. When bond orders cannot be determined (unusual
    valence or charge), connectivity alone is kept, every bond is typed single and a
    :class:`BondOrderWarning` says so.
    """
    from rdkit import Chem

    pos = np.asarray(pos, dtype=np.float64)
    table = Chem.GetPeriodicTable()
    block = f"{len(numbers)}\n\n" + "".join(
        f"{table.GetElementSymbol(int(z))} {x:.10f} {y:.10f} {w:.10f}\n"
        for z, (x, y, w) in zip(numbers, pos, strict=True)
    )
    mol, error = _perceive_bonds(block, charge)
    if error is not None:
        warnings.warn(
            f"RDKit could not assign bond orders ({error}); "
            "bonds typed as single from connectivity only",
            BondOrderWarning,
            stacklevel=2,
        )
    kinds = {
        Chem.BondType.SINGLE: 0,
        Chem.BondType.DOUBLE: 1,
        Chem.BondType.TRIPLE: 2,
        Chem.BondType.AROMATIC: 3,
    }
    pairs = []
    for bond in mol.GetBonds():
        i, j = bond.GetBeginAtomIdx(), bond.GetEndAtomIdx()
        kind = kinds.get(bond.GetBondType(), 0)
        pairs += [(i, j, kind), (j, i, kind)]
    edges = np.array(pairs, dtype=np.int64).reshape(-1, 3)
    edges = edges[np.lexsort((edges[:, 1], edges[:, 0]))]
    attr = np.zeros((edges.shape[0], len(BOND_TYPES)), dtype=np.float32)
    attr[np.arange(edges.shape[0]), edges[:, 2]] = 1.0
    return make_graph(pos, edges[:, 0], edges[:, 1], edge_attr=attr)
