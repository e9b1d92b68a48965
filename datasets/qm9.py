"""QM9: 130,831 small organic molecules (H, C, N, O, F) with DFT geometries and properties.

Two sources give identical prepared data (same molecules in the same order, same
coordinates, charges and targets; only ``metadata["source"]`` differs):

* ``qm9pack`` (default, offline): the CSV files shipped in the ``qm9pack`` wheel,
  read with pandas (``qm9pack.get_data`` is not called: it needs ``pkg_resources``).
  The package already leaves out the 3,054 molecules that failed the consistency check.
* ``figshare``: the original ``dsgdb9nsd.xyz.tar.bz2`` (133,885 XYZ files) plus
  ``uncharacterized.txt``, whose 3,054 ids are excluded here.

Units are the original ones of the XYZ files (Ramakrishnan et al., Sci. Data 2014),
listed in :data:`TARGETS` and stored in ``metadata["units"]``; positions are Å.
Molecules are ordered by their GDB index.
"""

from __future__ import annotations

import importlib.util
import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from .cache import raw_dir
from .download import RemoteFile, download
from .prepared import PreparedData, base_metadata, build_radius_graphs

NAME = "qm9"
SOURCES = ("qm9pack", "figshare")
DEFAULT_SOURCE = "qm9pack"
GRAPH_CUTOFF = 5.0
N_CHARACTERIZED = 130_831

FIGSHARE_ARCHIVE = RemoteFile(
    url="https://ndownloader.figshare.com/files/3195389",
    md5="ad1ebd51ee7f5b3a6e32e974e5d54012",
    filename="dsgdb9nsd.xyz.tar.bz2",
    size=86_144_227,
    offline_hint="`--source qm9pack` (equibench datasets prepare qm9 --source qm9pack)",
)
FIGSHARE_UNCHARACTERIZED = RemoteFile(
    url="https://ndownloader.figshare.com/files/3195404",
    md5="a361887bacb427b8a0ce7903d92a53b4",
    filename="uncharacterized.txt",
    offline_hint=FIGSHARE_ARCHIVE.offline_hint,
)


@dataclass(frozen=True)
class Target:
    """One QM9 property: its key, the qm9pack column holding it, unit and meaning."""

    key: str
    column: str
    unit: str
    description: str


# In the order of the XYZ comment line (after the tag and the index).
TARGETS = (
    Target("A", "RotA_GHz", "GHz", "rotational constant A"),
    Target("B", "RotB_GHz", "GHz", "rotational constant B"),
    Target("C", "RotC_GHz", "GHz", "rotational constant C"),
    Target("mu", "Dipole_debye", "D", "dipole moment"),
    Target("alpha", "Polarizability_bohr3", "bohr^3", "isotropic polarizability"),
    Target("homo", "HOMO_au", "Ha", "energy of the HOMO"),
    Target("lumo", "LUMO_au", "Ha", "energy of the LUMO"),
    Target("gap", "HOMO_LUMO_gap_au", "Ha", "HOMO-LUMO gap"),
    Target("r2", "R2_bohr2", "bohr^2", "electronic spatial extent"),
    Target("zpve", "ZPVE_au", "Ha", "zero-point vibrational energy"),
    Target("U0", "InternalEnergy_0K_au", "Ha", "internal energy at 0 K"),
    Target("U", "InternalEnergy_298K_au", "Ha", "internal energy at 298.15 K"),
    Target("H", "Enthalphy_298K_au", "Ha", "enthalpy at 298.15 K"),
    Target("G", "GibbsFreeEnergy_298K_au", "Ha", "free energy at 298.15 K"),
    Target("Cv", "Heatcapacity_Cv_cal_mol_K", "cal/(mol K)", "heat capacity at 298.15 K"),
)
ELEMENTS = {"H": 1, "C": 6, "N": 7, "O": 8, "F": 9}


@dataclass
class QM9Records:
    """Parsed molecules, concatenated.

    ``index`` (S,) GDB index; ``numbers`` (N,) uint8; ``pos`` (N, 3) Å float64;
    ``charges`` (N,) Mulliken charges in e; ``atom_ptr`` (S + 1,);
    ``targets`` key -> (S,) float64 in the units of :data:`TARGETS`.
    """

    index: np.ndarray
    numbers: np.ndarray
    pos: np.ndarray
    charges: np.ndarray
    atom_ptr: np.ndarray
    targets: dict[str, np.ndarray]


def qm9pack_data_dir() -> Path:
    """The ``data`` folder of the installed qm9pack, located without importing it.

    Importing ``qm9pack`` fails without ``pkg_resources``; ``find_spec`` only looks.
    """
    spec = importlib.util.find_spec("qm9pack")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("qm9pack is not installed: pip install qm9pack")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _parse_number_lists(column: pd.Series, counts: np.ndarray, what: str) -> np.ndarray:
    """Parse a column of JSON-like number lists (``[[x,y,z],...]``) into one flat array.

    Vectorised: brackets are stripped from the joined column and ``np.fromstring``
    (C ``strtod``, correctly rounded) reads everything at once. Unlike ``json.loads``
    it accepts ``0.`` and ``1.``, which some qm9pack rows contain.
    """
    text = ",".join(column.tolist()).translate(str.maketrans("", "", "[] "))
    values = np.fromstring(text, sep=",")
    if values.shape[0] != int(counts.sum()):
        raise ValueError(
            f"qm9pack {what}: parsed {values.shape[0]} values, expected {counts.sum()}"
        )
    return values


def read_qm9pack(data_dir: Path | None = None) -> QM9Records:
    """Read ``qm9_part{1,2,3}.csv`` from qm9pack (or from ``data_dir``, in tests).

    The isotropic polarizability is already a column of the parts, so
    ``qm9_polarizability.csv`` (the full tensor, absent from the figshare files) is
    not merged: both sources then hold exactly the same fields.
    """
    data_dir = data_dir or qm9pack_data_dir()
    columns = ["Index", "N_atoms", "Elements", "XYZ_Ang", "Mulliken_pop"]
    columns += [t.column for t in TARGETS]
    # Targets are read as text and converted by numpy (correctly rounded, like float()
    # for the figshare files): pandas' own float parser differs between versions.
    as_text = {t.column: str for t in TARGETS}
    parts = [
        pd.read_csv(data_dir / f"qm9_part{i}.csv", usecols=columns, dtype=as_text)
        for i in (1, 2, 3)
    ]
    frame = pd.concat(parts, ignore_index=True)
    frame = frame.sort_values("Index", kind="stable", ignore_index=True)
    counts = frame["N_atoms"].to_numpy(dtype=np.int64)
    rows_ok = frame["XYZ_Ang"].str.count(",").to_numpy() == 3 * counts - 1
    if not rows_ok.all():
        bad = frame["Index"].to_numpy()[~rows_ok][:5]
        raise ValueError(f"qm9pack: coordinate lists of the wrong length for indices {bad}")
    pos = _parse_number_lists(frame["XYZ_Ang"], 3 * counts, "XYZ_Ang").reshape(-1, 3)
    charges = _parse_number_lists(frame["Mulliken_pop"], counts, "Mulliken_pop")
    # QM9 symbols are single letters, so stripping the list syntax leaves one byte per atom.
    symbols = "".join(frame["Elements"].tolist()).translate(str.maketrans("", "", "[]', "))
    table = np.zeros(128, dtype=np.uint8)
    for symbol, z in ELEMENTS.items():
        table[ord(symbol)] = z
    numbers = table[np.frombuffer(symbols.encode("ascii"), dtype=np.uint8)]
    if numbers.shape[0] != counts.sum() or not numbers.all():
        raise ValueError("qm9pack: element lists do not match N_atoms or hold unknown symbols")
    return QM9Records(
        index=frame["Index"].to_numpy(dtype=np.int64),
        numbers=numbers,
        pos=pos,
        charges=charges,
        atom_ptr=np.concatenate([[0], np.cumsum(counts)]),
        targets={t.key: np.array(frame[t.column].tolist(), dtype=np.float64) for t in TARGETS},
    )


def _float(token: str) -> float:
    """Parse a number of the XYZ files, which use Mathematica exponents (``2.1997*^-6``)."""
    return float(token.replace("*^", "e"))


@dataclass
class XYZMolecule:
    """One molecule of the original XYZ format: ``numbers`` (n,), ``pos`` (n, 3) Å,
    ``charges`` (n,) e, ``properties`` (15,) in :data:`TARGETS` order."""

    index: int
    numbers: list[int]
    pos: list[list[float]]
    charges: list[float]
    properties: list[float]


def parse_xyz(text: str) -> XYZMolecule:
    """Parse one ``dsgdb9nsd_NNNNNN.xyz`` file.

    Line 1: number of atoms n; line 2: ``gdb``, index and the 15 properties; n lines of
    element, x, y, z, Mulliken charge; then frequencies, SMILES and InChI (not used).
    """
    lines = text.splitlines()
    n = int(lines[0])
    header = lines[1].split()
    if header[0] != "gdb" or len(header) != 2 + len(TARGETS):
        raise ValueError(f"not a QM9 XYZ header: {lines[1]!r}")
    numbers, pos, charges = [], [], []
    for line in lines[2 : 2 + n]:
        symbol, x, y, z, charge = line.split()
        numbers.append(ELEMENTS[symbol])
        pos.append([_float(x), _float(y), _float(z)])
        charges.append(_float(charge))
    return XYZMolecule(int(header[1]), numbers, pos, charges, [_float(t) for t in header[2:]])


def parse_uncharacterized(text: str) -> np.ndarray:
    """Ids in ``uncharacterized.txt``: 9 header lines, one line per molecule, 1 footer line."""
    lines = text.rstrip("\n").splitlines()[9:-1]
    return np.array([int(line.split()[0]) for line in lines if line.strip()], dtype=np.int64)


def read_figshare(archive: Path, uncharacterized: Path, *, progress: bool = False) -> QM9Records:
    """Read the original tarball, streaming its members (no 133,885 files on disk)."""
    excluded = set(parse_uncharacterized(uncharacterized.read_text()).tolist())
    molecules: list[XYZMolecule] = []
    with tarfile.open(archive, mode="r:bz2") as tar:
        members = tqdm(tar, desc="reading XYZ files", unit="file", disable=not progress)
        for member in members:
            if not member.isfile() or not member.name.endswith(".xyz"):
                continue
            handle = tar.extractfile(member)
            assert handle is not None  # a regular file always has contents
            molecule = parse_xyz(handle.read().decode("utf-8"))
            if molecule.index not in excluded:
                molecules.append(molecule)
    molecules.sort(key=lambda m: m.index)
    counts = np.array([len(m.numbers) for m in molecules], dtype=np.int64)
    properties = np.array([m.properties for m in molecules], dtype=np.float64).reshape(-1, 15)
    return QM9Records(
        index=np.array([m.index for m in molecules], dtype=np.int64),
        numbers=np.array([z for m in molecules for z in m.numbers], dtype=np.uint8),
        pos=np.array([p for m in molecules for p in m.pos], dtype=np.float64).reshape(-1, 3),
        charges=np.array([q for m in molecules for q in m.charges], dtype=np.float64),
        atom_ptr=np.concatenate([[0], np.cumsum(counts)]),
        targets={t.key: properties[:, k].copy() for k, t in enumerate(TARGETS)},
    )


def prepare_qm9(
    source: str = DEFAULT_SOURCE,
    *,
    progress: bool = False,
    qm9pack_dir: Path | None = None,
    figshare_files: tuple[RemoteFile, RemoteFile] = (FIGSHARE_ARCHIVE, FIGSHARE_UNCHARACTERIZED),
) -> PreparedData:
    """Read QM9 from ``source`` and build the prepared arrays with the 5 Å radius graph.

    ``qm9pack_dir`` and ``figshare_files`` exist so tests can use small fixtures.
    """
    if source == "qm9pack":
        records = read_qm9pack(qm9pack_dir)
        detail = str(qm9pack_dir or qm9pack_data_dir())
    elif source == "figshare":
        archive_file, unchar_file = figshare_files
        archive = download(archive_file, raw_dir(NAME), progress=progress)
        unchar = download(unchar_file, raw_dir(NAME), progress=progress)
        records = read_figshare(archive, unchar, progress=progress)
        detail = archive_file.url
    else:
        raise ValueError(f"unknown QM9 source {source!r}; choose one of {SOURCES}")
    published = (
        qm9pack_dir is None if source == "qm9pack" else figshare_files[0] == FIGSHARE_ARCHIVE
    )
    if published and records.index.shape[0] != N_CHARACTERIZED:
        raise ValueError(
            f"QM9 from {source}: {records.index.shape[0]} molecules, expected {N_CHARACTERIZED}"
        )
    n_edges, graph = build_radius_graphs(
        records.pos, records.atom_ptr, cutoff=GRAPH_CUTOFF, progress=progress
    )
    units = {"pos": "Å", "mulliken_charge": "e"} | {t.key: t.unit for t in TARGETS}
    metadata = base_metadata(
        NAME,
        source=source,
        synthetic=False,
        periodic=False,
        units=units,
        graph_cutoff=GRAPH_CUTOFF,
        graph_max_neighbors=None,
        source_detail=detail,
        targets={t.key: t.description for t in TARGETS},
        reference="Ramakrishnan et al., Sci. Data 1, 140022 (2014); 3,054 uncharacterized "
        "molecules excluded",
    )
    return PreparedData(
        metadata=metadata,
        numbers=records.numbers,
        pos=records.pos,
        atom_ptr=records.atom_ptr,
        n_edges=n_edges,
        targets=records.targets,
        node_attrs={"mulliken_charge": records.charges},
        structure_attrs={"index": records.index},
        graph=graph,
    )
