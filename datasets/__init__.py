"""Datasets for equibench: QM9, OC20 S2EF and the synthetic ``oc20-like``, prepared once.

Public API (kept stable for the rest of equibench)::

    from equibench import datasets
    ds = datasets.load("qm9")                # prepares into the cache first if missing
    ds.structure(0)                          # Structure: numbers, pos (Å), cell, pbc, targets
    ds.graph(0, kind="radius", cutoff=5.0)   # Graph: edge_src, edge_dst, edge_vec (src -> dst)
    ds.batch(range(100), graph="radius", cutoff=5.0)  # GraphBatch of torch tensors
    datasets.info("qm9")                     # dict: n_structures, units, size statistics

Prepared files live under ``$EQUIBENCH_DATA_DIR`` (default ``~/.cache/equibench/data``):
downloads in ``raw/``, prepared arrays in ``prepared/<name>.npz``.
"""

from .batching import BatchPlan, GraphBatch
from .cache import data_dir, prepared_path
from .dataset import Dataset, Structure
from .graphs import Graph
from .registry import DATASETS, info, load, prepare

__all__ = [
    "DATASETS",
    "BatchPlan",
    "Dataset",
    "Graph",
    "GraphBatch",
    "Structure",
    "data_dir",
    "info",
    "load",
    "prepare",
    "prepared_path",
]
