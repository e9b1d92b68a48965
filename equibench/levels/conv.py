"""Level ``conv``: the tensor product fused with gather and scatter on a real graph.

Workload names are ``<tensor-product workload>@<graph>``:

- ``@qm9``: ``batch`` QM9 molecules (a seeded sample), 5 Å radius graph;
- ``@carbon``: a periodic diamond-carbon supercell of about ``batch`` atoms (rounded to
  ``8 k^3``, k conventional cells a side), 6 Å radius graph with periodic images;
- ``@qm9-padded`` and ``@qm9-packed`` (the packing workload): the same ``batch`` QM9
  molecules, processed as a sequence of static-shape batches in one call. ``padded`` groups
  16 molecules per batch, padded to the largest batch's node and edge counts; ``packed``
  bin-packs them (first-fit decreasing) into packs of the same node budget. Throughput
  counts real edges only, so the ratio packed/padded is what packing buys
  (the ``ipu-packing`` claim);
- ``@covid-spike`` (3 Å radius), ``@1drf`` (6 Å) and ``@carbon-lattice`` (6 Å): the graphs of
  OpenEquivariance's convolution benchmark (:data:`OEQ_GRAPHS`), read from their files where
  the user has them, else a synthetic stand-in (labelled so in the description and in the
  row's ``extra.synthetic_graph``). One fixed graph each: ``batch`` is ignored, and the row
  reports the graph's own node and edge counts.

Inputs: random node features x (N, d1), the spherical harmonics of the edge vectors
y (E, d2) (component normalization), random per-edge weights w (E, weight_numel).
Throughput counts edges per second.
"""

from __future__ import annotations

import functools
import math
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from e3nn import o3

from equibench.cases import Case
from equibench.convolution import gather_tp_scatter
from equibench.cost import conv_bytes, tp_cost
from equibench.datasets.cache import raw_dir
from equibench.datasets.graphs import Graph, radius_graph
from equibench.levels import Bench, input_key
from equibench.levels.directions import directional_call
from equibench.levels.tp import (
    e3nn_outputs,
    equivariance_check,
    native_inputs,
    reference_note,
    spec_extra,
)
from equibench.registry import Implementation, OperandLayout, Unsupported
from equibench.workloads import TPProblem, get_tp_workload

CARBON_CUTOFF = 6.0
QM9_CUTOFF = 5.0


@dataclass(frozen=True)
class ConvGraph:
    """Shapes: edge_src, edge_dst (E,) int64; edge_vec (E, 3) float64, Å."""

    edge_src: torch.Tensor
    edge_dst: torch.Tensor
    edge_vec: torch.Tensor
    num_nodes: int
    description: str
    real_edges: int | None = None  # without padding edges; None when there are none
    blocks: int = 1  # equal-sized disjoint blocks, convolved one at a time
    padding_efficiency: float = 1.0
    synthetic: bool = False  # a generated stand-in for a dataset graph that was not found


def qm9_graph(batch: int, seed: int) -> ConvGraph:
    from equibench import datasets

    ds = datasets.load("qm9")
    b = ds.batch(ds.sample(batch, seed).tolist(), graph="radius", cutoff=QM9_CUTOFF)
    return ConvGraph(b.edge_src, b.edge_dst, b.edge_vec.to(torch.float64), int(b.pos.shape[0]),
                     f"{batch} QM9 molecules, {QM9_CUTOFF} Å radius graph")


def carbon_graph(batch: int, seed: int) -> ConvGraph:
    from ase.build import bulk

    cells = max(1, round((batch / 8) ** (1 / 3)))
    atoms = bulk("C", "diamond", a=3.567, cubic=True).repeat(cells)
    g = radius_graph(atoms.positions, CARBON_CUTOFF, cell=np.asarray(atoms.cell),
                     pbc=atoms.pbc)
    return ConvGraph(torch.from_numpy(g.edge_src), torch.from_numpy(g.edge_dst),
                     torch.from_numpy(g.edge_vec).to(torch.float64), len(atoms),
                     f"diamond carbon {cells}^3 cells ({len(atoms)} atoms, periodic), "
                     f"{CARBON_CUTOFF} Å radius graph")


PADDED_BATCH = 16  # molecules per padded batch; packs get the same node budget


def qm9_static_batches(batch: int, seed: int, mode: str) -> ConvGraph:
    """The sample of :func:`qm9_graph` as fixed-shape batches laid side by side.

    Batches are disjoint blocks of one graph (node and edge indices offset per block);
    the timed call runs the convolution once per block, and every block has the same node
    and edge slot counts, which is what static-shape (compiled) code needs.
    """
    from equibench import datasets

    ds = datasets.load("qm9")
    indices = ds.sample(batch, seed)
    padded = ds.plan("padded", batch_size=PADDED_BATCH, indices=indices, cutoff=QM9_CUTOFF)
    plan = padded if mode == "padded" else ds.plan(
        "packed", max_nodes=padded.max_nodes, max_edges=padded.max_edges, indices=indices,
        cutoff=QM9_CUTOFF,
    )
    src, dst, vec, real_edges, offset = [], [], [], 0, 0
    for b in ds.batches(plan, cutoff=QM9_CUTOFF, dtype=torch.float64):
        src.append(b.edge_src + offset)
        dst.append(b.edge_dst + offset)
        vec.append(b.edge_vec)
        real_edges += int(b.edge_mask.sum())
        offset += int(b.pos.shape[0])
    return ConvGraph(
        torch.cat(src), torch.cat(dst), torch.cat(vec), offset,
        f"{batch} QM9 molecules as {len(plan.batches)} {mode} batches of {plan.max_nodes} "
        f"node / {plan.max_edges} edge slots (node padding efficiency "
        f"{plan.padding_efficiency:.3f}), {QM9_CUTOFF} Å radius graph",
        real_edges=real_edges,
        blocks=len(plan.batches),
        padding_efficiency=plan.padding_efficiency,
    )


@dataclass(frozen=True)
class OEQGraph:
    """One graph of OpenEquivariance's convolution benchmark (``benchmark_convolution`` in
    their ``tests/benchmark.py``; sources below).

    ``file``: their file name, a pickle of ``{"coords": (N, 3), "row": (E,), "col": (E,)}``
    (their ``load_graph``); ``radius``: Å, as the file name states. ``nodes``, ``edges``:
    the synthetic stand-in's counts; ``stand_in`` says where they come from.
    """

    file: str
    label: str
    radius: float
    nodes: int
    edges: int
    stand_in: str


# Sources (PASSIONLab/OpenEquivariance): file names, radii and labels from
# tests/benchmark.py (benchmark_convolution, download_graphs) at
# 0525b347278fbb550834a90ace360783b41dd9be and openequivariance/benchmark/plotting/
# plot_convolution.py at 3e0d73b684fc56156c977c79e32284f5fa3a21fd; the file format from
# load_graph in openequivariance/openequivariance/benchmark/ConvBenchmarkSuite.py at
# 53f80696421da1eb3761608dcfb4313996281e88. Their node
# and edge counts are in none of these (nor in their docs): the stand-ins are atoms at the
# material's density (all-atom protein with hydrogens 0.11 per Å^3, diamond 0.176 per Å^3),
# as many as the structure has to within its order of magnitude, with the mean degree that
# density gives within the radius (density x 4/3 pi r^3), rounded. Replace them with the
# files' counts once known.
_PROTEIN = "stand-in: all-atom protein density 0.11 Å^-3"
OEQ_GRAPHS = {
    "covid-spike": OEQGraph("covid_spike_radius3.0.pickle", "COVID spike", 3.0,
                            nodes=60_000, edges=746_400,
                            stand_in=f"{_PROTEIN}, a spike trimer's ~60k atoms"),
    "1drf": OEQGraph("1drf_radius6.0.pickle", "DHFR", 6.0,
                     nodes=3_000, edges=298_580,
                     stand_in=f"{_PROTEIN}, a DHFR monomer's ~3k atoms"),
    "carbon-lattice": OEQGraph("carbon_lattice_radius6.0.pickle", "carbon-lattice", 6.0,
                               nodes=10_000, edges=1_594_700,
                               stand_in="stand-in: diamond density 0.176 Å^-3, 10k atoms"),
}


def oeq_graph_dir() -> Path:
    """Where OpenEquivariance's graph files are read:
    ``$EQUIBENCH_DATA_DIR/raw/openequivariance-graphs`` (default data dir
    ``~/.cache/equibench/data``); copy their pickles there under their own names."""
    return raw_dir("openequivariance-graphs")


def read_oeq_graph(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(coords (N, 3) float64 Å, edge_src (E,) int64, edge_dst (E,) int64)`` of one of
    their pickles (trusted input: unpickling runs code). Their convolution sums into
    ``row`` the products of ``col``'s features (``implementations/openequivariance.py``), so
    ``col`` is the sender, ``row`` the receiver. The file holds no periodic shifts: edge
    vectors are coordinate differences."""
    with open(path, "rb") as f:
        data = pickle.load(f)
    return (np.asarray(data["coords"], dtype=np.float64), np.asarray(data["col"], np.int64),
            np.asarray(data["row"], np.int64))


@functools.cache
def synthetic_radius_graph(nodes: int, edges: int, radius: float, seed: int = 0
                           ) -> tuple[Graph, float, float]:
    """A periodic radius graph of ``nodes`` atoms with exactly ``edges`` directed edges,
    shaped like one of ``radius`` Å; returns it with its density (Å^-3) and effective
    cutoff (Å).

    Atoms sit at the density that gives the mean degree ``edges / nodes`` within
    ``radius`` in a periodic box (no surface), on a cubic grid with random vacancies and
    jitter (a quarter spacing) so that none overlap. The ``edges`` shortest directed edges
    of the periodic radius graph are kept, the two directions of a pair side by side: all
    pairs closer than an effective cutoff close to ``radius`` (returned), symmetric when
    ``edges`` is even.
    """
    rng = np.random.default_rng(seed)
    density = edges / nodes / (4 / 3 * math.pi * radius**3)
    side = (nodes / density) ** (1 / 3)
    per_axis = math.ceil(nodes ** (1 / 3))
    spacing = side / per_axis
    sites = rng.choice(per_axis**3, size=nodes, replace=False)
    grid = np.stack(np.unravel_index(sites, (per_axis,) * 3), axis=1).astype(np.float64)
    pos = (grid + 0.5 + rng.uniform(-0.25, 0.25, size=(nodes, 3))) * spacing
    cell = np.eye(3) * side
    cutoff = radius * 1.15
    while True:
        g = radius_graph(pos, cutoff, cell=cell, pbc=np.array([True] * 3))
        if g.n_edges >= edges:
            break
        cutoff *= 1.1
    dist = np.linalg.norm(g.edge_vec, axis=1)
    # Ties in distance come in pairs (the two directions): ordering them by pair keeps the
    # two side by side, so an even cut keeps whole pairs.
    lo, hi = np.minimum(g.edge_src, g.edge_dst), np.maximum(g.edge_src, g.edge_dst)
    keep = np.sort(np.lexsort((g.edge_src, hi, lo, dist))[:edges])
    kept = Graph(g.edge_src[keep], g.edge_dst[keep], g.edge_vec[keep], g.edge_shift[keep],
                 g.cell_shift[keep])
    return kept, density, float(dist[keep].max())


def oeq_conv_graph(batch: int, seed: int, name: str) -> ConvGraph:
    """OpenEquivariance's graph ``name`` from its file under :func:`oeq_graph_dir`, or its
    synthetic stand-in (fixed: generator seed 0). ``batch`` and ``seed`` do not change it."""
    spec = OEQ_GRAPHS[name]
    path = oeq_graph_dir() / spec.file
    if path.is_file():
        coords, src, dst = read_oeq_graph(path)
        vec = torch.from_numpy(coords[dst] - coords[src])
        return ConvGraph(torch.from_numpy(src), torch.from_numpy(dst), vec, len(coords),
                         f"OpenEquivariance's {spec.label} graph ({path}: {len(coords)} nodes, "
                         f"{len(src)} edges, {spec.radius} Å radius; batch ignored)")
    g, density, cutoff = synthetic_radius_graph(spec.nodes, spec.edges, spec.radius)
    return ConvGraph(
        torch.from_numpy(g.edge_src), torch.from_numpy(g.edge_dst), torch.from_numpy(g.edge_vec),
        spec.nodes,
        f"synthetic stand-in for OpenEquivariance's {spec.label} graph ({spec.file} not in "
        f"{path.parent}): {spec.nodes} atoms at {density:.3f} Å^-3 in a periodic box, "
        f"{spec.edges} edges (radius graph at {cutoff:.2f} Å, theirs {spec.radius} Å); "
        f"counts {spec.stand_in}, not theirs; batch ignored",
        synthetic=True,
    )


GRAPHS = {
    "qm9": qm9_graph,
    "carbon": carbon_graph,
    "qm9-padded": functools.partial(qm9_static_batches, mode="padded"),
    "qm9-packed": functools.partial(qm9_static_batches, mode="packed"),
    **{name: functools.partial(oeq_conv_graph, name=name) for name in OEQ_GRAPHS},
}


def parse_workload(name: str) -> tuple[TPProblem, str]:
    tp_name, sep, graph = name.partition("@")
    if not sep or graph not in GRAPHS:
        raise ValueError(
            f"conv workload {name!r} must be '<tp workload>@<graph>' with graph one of "
            f"{', '.join(GRAPHS)} (e.g. mace-large@qm9)"
        )
    return get_tp_workload(tp_name), graph


def conv_inputs(problem: TPProblem, graph: ConvGraph, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    n, e = graph.num_nodes, graph.edge_src.shape[0]
    d1, _, dout = problem.dims

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    y = o3.spherical_harmonics(o3.Irreps(problem.irreps_in2), graph.edge_vec, normalize=True,
                               normalization="component")
    return {"x": randn(n, d1), "y": y, "w": randn(e, problem.weight_numel),
            "grad_out": randn(n, dout), "probe_x": randn(n, d1), "probe_y": randn(*y.shape),
            "probe_w": randn(e, problem.weight_numel)}


def build_bench(case: Case, impl: Implementation, dtype: torch.dtype, seed: int) -> Bench:
    problem, graph_name = parse_workload(case.workload)
    graph = GRAPHS[graph_name](case.batch, seed)
    master = conv_inputs(problem, graph, seed)
    src, dst = graph.edge_src.to(case.device), graph.edge_dst.to(case.device)
    n = graph.num_nodes

    def bench_fn(conv, dt, layout: OperandLayout | None):
        data = {k: v.to(device=case.device, dtype=dt)
                for k, v in native_inputs(master, layout).items()}
        fn = functools.partial(_bound, conv, src, dst, n, graph.blocks)

        def on_graph(x, y, w, edge_src, edge_dst):  # the graph is an input of the step
            return _bound(conv, edge_src, edge_dst, n, graph.blocks, x, y, w)

        call = directional_call(case.direction, on_graph, [data["x"], data["y"], data["w"]],
                                ["x", "y", "w"], data["grad_out"],
                                [data["probe_x"], data["probe_y"], data["probe_w"]],
                                aux=[src, dst])
        return fn, data, call

    conv = impl.build_conv(problem, dtype, case.device, case.variant)
    layout = impl.operand_layout(conv)
    amortized = impl.amortize_conv(conv, src, dst, n)
    if amortized is not None and graph.blocks > 1:
        raise Unsupported(f"{impl.name}[{case.variant}] keeps what it amortizes for one graph; "
                          f"this workload's call convolves {graph.blocks} graphs in turn")
    fn, data, call = bench_fn(conv, dtype, layout)

    def reference():
        module = problem.e3nn_module(torch.float64).to(case.device)
        return bench_fn(functools.partial(gather_tp_scatter, module), torch.float64, None)[2]()

    edges = int(src.shape[0])
    real_edges = graph.real_edges if graph.real_edges is not None else edges
    itemsize = torch.empty((), dtype=dtype).element_size()
    return Bench(
        call=call,
        reference=reference,
        items=real_edges,
        unit="edges/s",
        flops=tp_cost(problem).flops(case.direction) * edges,
        bytes=conv_bytes(problem, case.direction, n, edges, itemsize),
        equivariance=equivariance_check(fn, problem, data, layout, seed + 1)
        if case.direction == "forward" else None,
        extra={"graph": graph.description, "nodes": n, "edges": edges,
               "real_edges": real_edges, "blocks": graph.blocks,
               "padding_efficiency": graph.padding_efficiency,
               "synthetic_graph": graph.synthetic,
               "paths": len(problem.instructions), "mode": problem.mode,
               "code_path": impl.code_path(conv, case.device).to_dict(),
               "reference": reference_note(impl.name) + " with index_add",
               **spec_extra(problem)},
        reference_key=input_key(case.level, case.workload, case.direction, case.batch, seed,
                                case.device),
        amortized=amortized.what if amortized is not None else "",
        kept_bytes=amortized.kept_bytes if amortized is not None else 0,
        gate_view=e3nn_outputs(layout),
    )


def _bound(conv, src, dst, n, blocks, x, y, w):
    if blocks == 1:
        return conv(x, y, w, src, dst, n)
    # Equal blocks: node block k holds nodes [k n_b, (k+1) n_b), edge block k its edges.
    n_b, e_b = n // blocks, src.shape[0] // blocks
    outs = [
        conv(x[k * n_b:(k + 1) * n_b], y[k * e_b:(k + 1) * e_b], w[k * e_b:(k + 1) * e_b],
             src[k * e_b:(k + 1) * e_b] - k * n_b, dst[k * e_b:(k + 1) * e_b] - k * n_b, n_b)
        for k in range(blocks)
    ]
    return torch.cat(outs)
