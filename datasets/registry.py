"""The datasets equibench knows, and preparing, loading and describing them by name."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .cache import data_dir, prepared_path
from .dataset import Dataset
from .prepared import PreparedData


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset name: its sources (first = default) and how to prepare it.

    ``prepare(source, progress=..., **options)`` returns the prepared arrays;
    ``options`` are dataset-specific (see :func:`prepare`).
    """

    name: str
    sources: tuple[str, ...]
    description: str
    prepare: Callable[..., PreparedData]


# The preparers import their modules on use: pandas, ase.io and the generators are
# slow to import and only preparation needs them, not loading or `info`.
def _qm9(source: str, *, progress: bool = False) -> PreparedData:
    from .qm9 import prepare_qm9

    return prepare_qm9(source, progress=progress)


def _oc20(
    source: str,
    *,
    progress: bool = False,
    subsets: tuple[str, ...] | None = None,
    max_frames: int | None = None,
    md5: dict[str, str] | None = None,
) -> PreparedData:
    from .oc20 import OC20Config, prepare_oc20

    config = OC20Config(max_frames=max_frames, md5=md5 or {})
    if subsets:
        config.subsets = tuple(subsets)
    return prepare_oc20(source, config=config, progress=progress)


def _oc20_like(
    source: str, *, progress: bool = False, n_structures: int | None = None, seed: int = 0
) -> PreparedData:
    from .oc20_like import OC20LikeConfig, prepare_oc20_like

    config = OC20LikeConfig(seed=seed)
    if n_structures is not None:
        config.n_structures = n_structures
    return prepare_oc20_like(source, config=config, progress=progress)


DATASETS: dict[str, DatasetSpec] = {
    spec.name: spec
    for spec in (
        DatasetSpec("qm9", ("qm9pack", "figshare"), "QM9 molecules (130,831)", _qm9),
        DatasetSpec("oc20", ("download",), "OC20 S2EF slab + adsorbate systems", _oc20),
        DatasetSpec(
            "oc20-like", ("generator",), "SYNTHETIC OC20-shaped systems, offline", _oc20_like
        ),
    )
}


def spec(name: str) -> DatasetSpec:
    """The :class:`DatasetSpec` of ``name``; ValueError listing the known names otherwise."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]


def prepare(
    name: str,
    *,
    source: str | None = None,
    force: bool = False,
    progress: bool = False,
    **options: Any,
) -> Dataset:
    """Prepare ``name`` into its cache file (unless present and ``force`` is off) and load it.

    Options: ``oc20``: ``subsets`` (tuple of names), ``max_frames`` (per subset), ``md5``
    (subset -> checksum for subsets without a published one); ``oc20-like``:
    ``n_structures`` (default 2000), ``seed`` (default 0).
    """
    dataset_spec = spec(name)
    source = source or dataset_spec.sources[0]
    if source not in dataset_spec.sources:
        raise ValueError(f"{name} has no source {source!r}; choose from {dataset_spec.sources}")
    path = prepared_path(name)
    if path.exists() and not force:
        data = PreparedData.load(path)
        if data.metadata["source"] == source:
            return Dataset(data)
    data = dataset_spec.prepare(source, progress=progress, **options)
    data.save(path)
    return Dataset(data)


def load(name: str, *, source: str | None = None) -> Dataset:
    """Load the prepared ``name`` (``qm9``, ``oc20``, ``oc20-like``), preparing it if missing.

    With ``source=None`` any prepared file is used (QM9 is identical from either
    source); an explicit ``source`` different from the cached one prepares again.
    """
    dataset_spec = spec(name)
    path = prepared_path(name)
    if path.exists():
        data = PreparedData.load(path)
        if source is None or data.metadata["source"] == source:
            return Dataset(data)
    return prepare(name, source=source or dataset_spec.sources[0], force=True)


def _stats(values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {"min": 0, "mean": 0.0, "max": 0, "total": 0}
    return {
        "min": int(values.min()),
        "mean": round(float(values.mean()), 3),
        "max": int(values.max()),
        "total": int(values.sum()),
    }


def describe(dataset: Dataset) -> dict[str, Any]:
    """Summary of a loaded dataset (what ``info`` returns)."""
    meta = dataset.metadata
    path = prepared_path(dataset.name)
    keys = ("name", "source", "synthetic", "periodic", "units", "source_detail", "reference")
    summary = {key: meta[key] for key in keys if key in meta}
    summary.update(
        n_structures=len(dataset),
        atoms_per_structure=_stats(dataset.n_atoms),
        edges_per_structure={**meta["graph"], **_stats(dataset.data.n_edges)},
        graph_stored=dataset.data.graph is not None,
        elements=sorted(int(z) for z in np.unique(dataset.data.numbers)),
        targets=sorted(dataset.data.targets),
        node_targets=sorted(dataset.data.node_targets),
        prepared_file=str(path),
        prepared_bytes=path.stat().st_size if path.exists() else None,
    )
    if "subset" in meta:
        summary["subset"] = meta["subset"]
    extra = ("targets", "subsets", "max_frames", "n_requested", "seed", "tags")
    summary["details"] = {key: meta[key] for key in extra if key in meta}
    return summary


def write_subset(name: str, n_structures: int, seed: int, out: Path) -> Dataset:
    """A random ``n_structures`` of the prepared ``name`` (seeded, in their original order),
    compressed into ``out``: a copy small enough to carry to a machine that cannot prepare
    the dataset (the GPU machine has no network and no room for qm9pack). Rows measured on
    it sample batches from the subset; its metadata and ``datasets info`` say so."""
    if Path(out).resolve() == prepared_path(name).resolve():
        raise ValueError(f"--out is this machine's own prepared {name}: a part written there "
                         f"would stand in for the whole dataset here; write it elsewhere")
    dataset = load(name)
    if not 0 < n_structures <= len(dataset):
        raise ValueError(f"--structures must be in 1..{len(dataset)} for {name}, "
                         f"got {n_structures}")
    picked = np.sort(np.random.default_rng(seed).choice(len(dataset), n_structures,
                                                        replace=False))
    part = dataset.data.subset(picked, f"random {n_structures} of {len(dataset)} "
                                       f"structures, seed {seed}")
    part.save(out, compressed=True)
    return Dataset(part)


def cached_subsets() -> dict[str, str]:
    """``{name: note}`` of every prepared file in the data cache that holds only part of its
    dataset (:func:`write_subset`); reads each file's metadata, not its arrays."""
    found = {}
    for path in sorted((data_dir() / "prepared").glob("*.npz")):
        try:
            with np.load(path, allow_pickle=False) as npz:
                metadata = json.loads(npz["metadata"].tobytes().decode())
        except (OSError, ValueError, KeyError):
            continue  # not a prepared file of ours; loading it would say why
        if "subset" in metadata:
            found[path.stem] = metadata["subset"]["note"]
    return found


def info(name: str) -> dict[str, Any]:
    """Summary of the prepared ``name`` (prepared first if missing): sizes, units, source.

    Keys include ``n_structures``, ``periodic``, ``synthetic``, ``source``, ``units``,
    ``atoms_per_structure`` and ``edges_per_structure`` (min/mean/max/total, for the
    reference radius graph whose ``cutoff`` and ``max_neighbors`` are given too).
    """
    return describe(load(name))
