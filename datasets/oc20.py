"""OC20 S2EF (Open Catalyst 2020, structure -> energy and forces) from the published tarballs.

Each subset ``<name>.tar`` holds pairs of LZMA-compressed files: ``<k>.extxyz.xz``
(frames: species, positions, forces, tags, fixed atoms, periodic cell, energy) and
``<k>.txt.xz`` (one line per frame: ``random<sid>,frame<fid>,<reference energy>``).
The tar is extracted under ``raw/oc20/``; the ``.xz`` files are decompressed while
reading them (streamed, so the multi-GB text never lands on disk).

Stored per structure: ``energy`` (total DFT energy, eV), ``reference_energy`` (eV,
from the txt line) and ``adsorption_energy = energy - reference_energy`` (the usual
S2EF target); per atom: ``forces`` (eV/Å), ``tags`` (0 subsurface, 1 surface,
2 adsorbate) and ``fixed``; identifiers ``sid``, ``fid`` and ``split`` (index into
``metadata["subsets"]``). Positions and forces are float32 (the files carry about 8
significant digits), which halves the cache size. The reference graph (6 Å, at most
50 neighbours, periodic) is counted, not stored: for 200K structures it would be GBs.
"""

from __future__ import annotations

import io
import itertools
import lzma
import re
import shutil
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import ase.io
import numpy as np
from ase import Atoms
from ase.constraints import FixAtoms
from tqdm.auto import tqdm

from .cache import raw_dir
from .download import RemoteFile, download
from .prepared import PreparedData, base_metadata, build_radius_graphs

NAME = "oc20"
SOURCES = ("download",)
DEFAULT_SOURCE = "download"
BASE_URL = "https://dl.fbaipublicfiles.com/opencatalystproject/data/"
# Published checksums; other subsets need theirs given in OC20Config.md5.
KNOWN_MD5 = {
    "s2ef_train_200K": "f8d0909c2623a393148435dede7d3a46",
    "s2ef_val_id": "f57f7f5c1302637940f2cc858e789410",
}
GRAPH_CUTOFF = 6.0
GRAPH_MAX_NEIGHBORS = 50
OFFLINE_HINT = "the synthetic dataset `oc20-like` (equibench datasets prepare oc20-like)"
UNITS = {"pos": "Å", "cell": "Å", "energy": "eV", "reference_energy": "eV",
         "adsorption_energy": "eV", "forces": "eV/Å"}  # fmt: skip


@dataclass
class OC20Config:
    """Which S2EF subsets to prepare.

    ``subsets``: tarball names under :data:`BASE_URL` (without ``.tar``);
    ``max_frames``: keep at most this many frames per subset (None: all);
    ``md5``: checksums of subsets not in :data:`KNOWN_MD5`;
    ``base_url``: where the tarballs are (tests point it at a local server).
    """

    subsets: tuple[str, ...] = ("s2ef_train_200K", "s2ef_val_id")
    max_frames: int | None = None
    md5: dict[str, str] = field(default_factory=dict)
    base_url: str = BASE_URL

    def remote(self, subset: str) -> RemoteFile:
        """The tarball of ``subset`` with its checksum."""
        md5 = self.md5.get(subset) or KNOWN_MD5.get(subset)
        if md5 is None:
            raise ValueError(
                f"no md5 known for OC20 subset {subset!r}: give it as {subset}:<md5> "
                "so the download can be verified"
            )
        return RemoteFile(
            url=f"{self.base_url}{subset}.tar",
            md5=md5,
            filename=f"{subset}.tar",
            offline_hint=OFFLINE_HINT,
        )


@dataclass(frozen=True)
class FrameRef:
    """A txt line: system id, frame id and reference energy (eV)."""

    sid: int
    fid: int
    reference_energy: float


def parse_frame_line(line: str) -> FrameRef:
    """Parse ``random<sid>,frame<fid>,<reference energy>`` (prefixes optional)."""
    sid, fid, energy = (part.strip() for part in line.split(","))
    return FrameRef(int(re.sub(r"^\D+", "", sid)), int(re.sub(r"^\D+", "", fid)), float(energy))


def extract(archive: Path, dest: Path) -> Path:
    """Untar ``archive`` into ``dest`` once; a marker file records a finished extraction."""
    marker = dest / ".extracted"
    if marker.exists():
        return dest
    if dest.exists():
        shutil.rmtree(dest)  # left over from an interrupted extraction
    dest.mkdir(parents=True)
    with tarfile.open(archive) as tar:
        # The "data" filter refuses absolute paths, links out of dest and devices.
        tar.extractall(dest, filter="data")
    marker.touch()
    return dest


def _numeric_stem(path: Path) -> tuple[int, str]:
    """Sort key: files are numbered 0, 1, ..., 10, ... and must be read in that order."""
    stem = path.name.split(".", 1)[0]
    return (int(stem), stem) if stem.isdigit() else (1 << 62, stem)


def iter_frames(directory: Path) -> Iterator[tuple[Atoms, FrameRef]]:
    """Frames of every ``*.extxyz.xz`` under ``directory`` with their txt line, in file order."""
    for xyz in sorted(directory.rglob("*.extxyz.xz"), key=_numeric_stem):
        txt = xyz.with_name(xyz.name.replace(".extxyz.xz", ".txt.xz"))
        with lzma.open(txt, "rt") as handle:
            refs = [parse_frame_line(line) for line in handle if line.strip()]
        with lzma.open(xyz, "rb") as raw:
            frames = ase.io.iread(io.TextIOWrapper(raw, encoding="utf-8"), format="extxyz")
            count = 0
            for atoms in frames:
                if count == len(refs):
                    raise ValueError(f"{xyz}: more frames than lines in {txt.name}")
                yield atoms, refs[count]
                count += 1
        if count != len(refs):
            raise ValueError(f"{xyz}: {count} frames but {len(refs)} lines in {txt.name}")


def _fixed_mask(atoms: Atoms) -> np.ndarray:
    """Atoms held fixed in the DFT relaxation (the FixAtoms constraint), as (n,) bool."""
    mask = np.zeros(len(atoms), dtype=bool)
    for constraint in atoms.constraints:
        if isinstance(constraint, FixAtoms):
            mask[constraint.get_indices()] = True
    return mask


def prepare_oc20(
    source: str = DEFAULT_SOURCE,
    *,
    config: OC20Config | None = None,
    progress: bool = False,
) -> PreparedData:
    """Download, extract and read the configured subsets into prepared arrays."""
    if source not in SOURCES:
        raise ValueError(f"unknown OC20 source {source!r}; choose one of {SOURCES}")
    config = config or OC20Config()
    numbers, pos, forces, tags, fixed = [], [], [], [], []
    cells, pbcs, energies, refs, split = [], [], [], [], []
    for k, subset in enumerate(config.subsets):
        archive = download(config.remote(subset), raw_dir(NAME), progress=progress)
        directory = extract(archive, raw_dir(NAME) / f"{subset}.extracted")
        frames = itertools.islice(iter_frames(directory), config.max_frames)
        for atoms, ref in tqdm(frames, desc=subset, unit="frame", disable=not progress):
            numbers.append(atoms.numbers.astype(np.uint8))
            pos.append(atoms.positions.astype(np.float32))
            forces.append(atoms.get_forces().astype(np.float32))
            tags.append(atoms.get_tags().astype(np.int8))
            fixed.append(_fixed_mask(atoms))
            cells.append(atoms.cell.array)
            pbcs.append(atoms.pbc.copy())
            energies.append(atoms.get_potential_energy())
            refs.append(ref)
            split.append(k)
    if not numbers:
        raise ValueError(f"no OC20 frames found in subsets {config.subsets}")
    atom_ptr = np.concatenate([[0], np.cumsum([len(z) for z in numbers])])
    cell = np.array(cells, dtype=np.float64)
    pbc = np.array(pbcs, dtype=bool)
    all_pos = np.concatenate(pos)
    n_edges, _ = build_radius_graphs(
        all_pos, atom_ptr, cutoff=GRAPH_CUTOFF, max_neighbors=GRAPH_MAX_NEIGHBORS,
        cell=cell, pbc=pbc, store=False, progress=progress,
    )  # fmt: skip
    energy = np.array(energies, dtype=np.float64)
    reference = np.array([r.reference_energy for r in refs], dtype=np.float64)
    metadata = base_metadata(
        NAME,
        source=source,
        synthetic=False,
        periodic=True,
        units=UNITS,
        graph_cutoff=GRAPH_CUTOFF,
        graph_max_neighbors=GRAPH_MAX_NEIGHBORS,
        source_detail=config.base_url,
        subsets=list(config.subsets),
        max_frames=config.max_frames,
        tags={"0": "subsurface", "1": "surface", "2": "adsorbate"},
        reference="Chanussot et al., ACS Catal. 11, 6059 (2021); S2EF task",
    )
    return PreparedData(
        metadata=metadata,
        numbers=np.concatenate(numbers),
        pos=all_pos,
        atom_ptr=atom_ptr,
        n_edges=n_edges,
        cell=cell,
        pbc=pbc,
        targets={
            "energy": energy,
            "reference_energy": reference,
            "adsorption_energy": energy - reference,
        },
        node_targets={"forces": np.concatenate(forces)},
        node_attrs={"tags": np.concatenate(tags), "fixed": np.concatenate(fixed)},
        structure_attrs={
            "sid": np.array([r.sid for r in refs], dtype=np.int64),
            "fid": np.array([r.fid for r in refs], dtype=np.int64),
            "split": np.array(split, dtype=np.int8),
        },
    )
