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
  (the ``ipu-packing`` claim).

Inputs: random node features x (N, d1), the spherical harmonics of the edge vectors
y (E, d2) (component normalization), random per-edge weights w (E, weight_numel).
Throughput counts edges per second.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch
from e3nn import o3

from equibench.cases import Case
from equibench.convolution import gather_tp_scatter
from equibench.cost import conv_bytes, tp_cost
from equibench.levels import Bench, input_key
from equibench.levels.directions import directional_call
from equibench.levels.tp import (
    check_variant,
    e3nn_outputs,
    equivariance_check,
    native_inputs,
    reference_note,
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


def qm9_graph(batch: int, seed: int) -> ConvGraph:
    from equibench import datasets

    ds = datasets.load("qm9")
    b = ds.batch(ds.sample(batch, seed).tolist(), graph="radius", cutoff=QM9_CUTOFF)
    return ConvGraph(b.edge_src, b.edge_dst, b.edge_vec.to(torch.float64), int(b.pos.shape[0]),
                     f"{batch} QM9 molecules, {QM9_CUTOFF} Å radius graph")


def carbon_graph(batch: int, seed: int) -> ConvGraph:
    from ase.build import bulk

    from equibench.datasets.graphs import radius_graph

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


GRAPHS = {
    "qm9": qm9_graph,
    "carbon": carbon_graph,
    "qm9-padded": functools.partial(qm9_static_batches, mode="padded"),
    "qm9-packed": functools.partial(qm9_static_batches, mode="packed"),
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
            "grad_out": randn(n, dout), "probe_x": randn(n, d1), "probe_y": randn(*y.shape)}


def build_bench(case: Case, impl: Implementation, dtype: torch.dtype, seed: int) -> Bench:
    check_variant(case, impl)
    problem, graph_name = parse_workload(case.workload)
    graph = GRAPHS[graph_name](case.batch, seed)
    master = conv_inputs(problem, graph, seed)
    src, dst = graph.edge_src.to(case.device), graph.edge_dst.to(case.device)
    n = graph.num_nodes

    def bench_fn(conv, dt, layout: OperandLayout | None):
        data = {k: v.to(device=case.device, dtype=dt)
                for k, v in native_inputs(master, layout).items()}
        fn = functools.partial(_bound, conv, src, dst, n, graph.blocks)
        call = directional_call(case.direction, fn, [data["x"], data["y"], data["w"]],
                                ["x", "y", "w"], data["grad_out"],
                                [data["probe_x"], data["probe_y"]])
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
               "paths": len(problem.instructions), "mode": problem.mode,
               "code_path": impl.code_path(conv, case.device).to_dict(),
               "reference": reference_note(impl.name) + " with index_add"},
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
