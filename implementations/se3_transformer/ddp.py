"""Data-parallel training throughput and weak-scaling efficiency.

    torchrun --nproc_per_node N -m equibench.implementations.se3_transformer.ddp \
        --steps S --batch B [--size full] [--variant optimized]

Each process trains on its own ``B`` molecules (weak scaling: the global batch is N B);
``gloo`` on CPU, ``nccl`` with one GPU per process. Every process first runs ``S`` steps
of its model alone (no gradient exchange, all processes at once, so that they share the
machine as they do afterwards), then ``S`` steps under ``DistributedDataParallel``.
Weak-scaling efficiency = DDP throughput / sum of the standalone throughputs: the fraction
of ideal scaling left after gradient all-reduce and synchronization. Rank 0 prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

from .bench import master_model, sample_molecules
from .graph_ops import make_graph_ops
from .model import SIZES, build_model
from .switches import variant_switches


def _timed_steps(model, optimizer, mol, bases, ops, steps: int, device: str) -> float:  # noqa: ANN001
    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.l1_loss(model(mol, bases, ops), mol.target).backward()
        optimizer.step()

    step()  # warm-up: allocations, DDP bucket setup
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def run(steps: int, batch: int, size: str, variant: str, seed: int) -> dict | None:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = f"cuda:{local}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(local)
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    switches = variant_switches(variant)
    mol = sample_molecules(batch, seed + rank).to(device, torch.float32)
    ops = make_graph_ops(switches.graph_ops, mol.edge_src, mol.edge_dst, mol.n_nodes)
    master = master_model(size, seed)

    def fresh():  # noqa: ANN202
        model = build_model(SIZES[size], switches, "basis", device, torch.float32, master)
        bases = model.bases(mol.edge_vec) if switches.basis_cache else None
        return model, bases

    model, bases = fresh()
    alone = _timed_steps(model, torch.optim.Adam(model.parameters()), mol, bases, ops, steps,
                         device)
    model, bases = fresh()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    dist.barrier()
    together = _timed_steps(ddp, torch.optim.Adam(ddp.parameters()), mol, bases, ops, steps,
                            device)
    times = torch.tensor([alone, together], dtype=torch.float64)
    gathered = [torch.zeros_like(times) for _ in range(world)]
    dist.all_gather(gathered, times.to(device) if cuda else times)
    dist.destroy_process_group()
    if rank != 0:
        return None
    alone_rates = [batch * steps / float(t[0]) for t in gathered]
    # The slowest process paces a synchronous data-parallel step.
    ddp_rate = world * batch * steps / max(float(t[1]) for t in gathered)
    return {
        "world_size": world, "device": "cuda" if cuda else "cpu",
        "backend": "nccl" if cuda else "gloo", "size": size, "variant": variant,
        "batch_per_process": batch, "steps": steps,
        "throughput_molecules_per_s": ddp_rate,
        "standalone_throughput_molecules_per_s": sum(alone_rates),
        "weak_scaling_efficiency": ddp_rate / sum(alone_rates),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=16, help="molecules per process")
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--variant", default="optimized")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = run(args.steps, args.batch, args.size, args.variant, args.seed)
    if result is not None:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
