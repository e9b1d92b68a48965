"""The structures of a MACE case, as mace-torch's input dictionary."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from equibench.datasets import GraphBatch

# workload -> (dataset, atomic numbers of the model's elements or None: the dataset's)
WORKLOADS: dict[str, tuple[str, tuple[int, ...] | None]] = {
    "mace-qm9": ("qm9", (1, 6, 7, 8, 9)),
    # Synthetic periodic slabs with adsorbates, OC20-shaped (not OC20 data).
    "mace-oc20-like": ("oc20-like", None),
}


@dataclass
class Structures:
    """A seeded sample of ``n_graphs`` structures of a dataset, radius graph at ``cutoff``.

    ``data`` is mace-torch's input: ``positions (N, 3)``, ``edge_index (2, E)`` (row 0
    sender, row 1 receiver), ``shifts (E, 3)`` (Å, ``pos[recv] - pos[send] + shift`` is
    the edge vector), ``cell (G, 3, 3)``, ``batch (N,)``, ``ptr (G+1,)``,
    ``node_attrs (N, n_elements)`` (one-hot).
    """

    dataset: str
    synthetic: bool
    indices: list[int]
    atomic_numbers: tuple[int, ...]
    data: dict[str, torch.Tensor]

    @property
    def n_atoms(self) -> int:
        return int(self.data["positions"].shape[0])

    @property
    def n_edges(self) -> int:
        return int(self.data["edge_index"].shape[1])

    @property
    def n_graphs(self) -> int:
        return int(self.data["ptr"].shape[0] - 1)

    @property
    def avg_num_neighbors(self) -> float:
        """Mean in-degree, which MACE's training script uses to normalize messages."""
        return self.n_edges / max(self.n_atoms, 1)

    def rounded(self, dtype: torch.dtype) -> Structures:
        """The same structures with every float rounded to ``dtype`` (stored in float64), so
        that a float64 reference sees exactly the inputs of a ``dtype`` case."""
        data = {
            key: value.to(dtype).to(torch.float64) if value.is_floating_point() else value
            for key, value in self.data.items()
        }
        return replace(self, data=data)

    def to(self, dtype: torch.dtype, device: str) -> dict[str, torch.Tensor]:
        """A fresh copy of ``data`` (floating tensors in ``dtype``) on ``device``: mace-torch
        marks ``positions`` as requiring grad in place, so each model gets its own."""
        return {
            key: value.to(device=device, dtype=dtype if value.is_floating_point() else None).clone()
            for key, value in self.data.items()
        }


def workload_elements(workload: str) -> tuple[int, ...]:
    """The elements of ``workload``'s dataset (which a built model is made for)."""
    from equibench import datasets

    name, elements = WORKLOADS[workload]
    return elements or tuple(int(z) for z in datasets.info(name)["elements"])


def load_structures(workload: str, n_graphs: int, seed: int, cutoff: float,
                    model_elements: Sequence[int] | None = None) -> Structures:
    """``n_graphs`` structures of ``workload``'s dataset drawn without replacement, one-hot
    over ``model_elements`` (a saved model's own) or else the dataset's elements."""
    from equibench import datasets

    name, elements = WORKLOADS[workload]
    ds = datasets.load(name)
    info = datasets.info(name)
    indices = ds.sample(n_graphs, seed)
    # MACE has no neighbour cap: every pair within r_max interacts.
    batch = ds.batch(indices, graph="radius", cutoff=cutoff, dtype=torch.float64)
    atomic_numbers = tuple(model_elements or elements or (int(z) for z in info["elements"]))
    return Structures(
        dataset=name,
        synthetic=bool(info.get("synthetic", False)),
        indices=[int(i) for i in indices],
        atomic_numbers=atomic_numbers,
        data=mace_data(batch, atomic_numbers),
    )


def mace_data(batch: GraphBatch, atomic_numbers: Sequence[int]) -> dict[str, torch.Tensor]:
    """mace-torch's input dictionary of an (unpadded) ``equibench.datasets.GraphBatch``."""
    size = max(max(atomic_numbers), int(batch.numbers.max())) + 1
    table = torch.full((size,), -1, dtype=torch.int64)
    table[torch.tensor(atomic_numbers)] = torch.arange(len(atomic_numbers))
    species = table[batch.numbers]
    if (species < 0).any():
        missing = sorted(set(batch.numbers[species < 0].tolist()))
        raise ValueError(f"elements {missing} are not among the model's {atomic_numbers}")
    ptr = torch.zeros(batch.n_graphs + 1, dtype=torch.int64)
    torch.cumsum(batch.n_nodes, 0, out=ptr[1:])
    cell = batch.cell if batch.cell is not None else torch.zeros(batch.n_graphs, 3, 3)
    return {
        "positions": batch.pos,
        "edge_index": torch.stack([batch.edge_src, batch.edge_dst]),
        "shifts": batch.edge_shift,
        "cell": cell.to(batch.pos.dtype),
        "batch": batch.node_graph,
        "ptr": ptr,
        "node_attrs": torch.nn.functional.one_hot(species, len(atomic_numbers)).to(batch.pos.dtype),
    }
