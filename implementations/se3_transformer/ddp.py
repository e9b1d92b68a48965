"""Data-parallel training throughput and weak-scaling efficiency.

    torchrun --nproc_per_node N -m equibench.implementations.se3_transformer.ddp \
        --steps S --batch B [--size full] [--variant optimized] \
        [--threads T] [--timeout SECONDS] [--watchdog SECONDS --stack-dir DIR]

Each process trains on its own ``B`` molecules (weak scaling: the global batch is N B);
``gloo`` on CPU, ``nccl`` with one GPU per process. Every process first runs ``S`` steps
of its model alone (no gradient exchange, all processes at once, so that they share the
machine as they do afterwards), then ``S`` steps under ``DistributedDataParallel``.
Weak-scaling efficiency = DDP throughput / sum of the standalone throughputs: the fraction
of ideal scaling left after gradient all-reduce and synchronization. Rank 0 prints JSON.

Teardown order matters. With gloo, a finished collective's work object (holding the
tensors it gathered) is released by a gloo worker thread, and releasing a tensor that
has a Python object takes the GIL. ``DistributedDataParallel``'s ``Reducer`` holds the
process group, and pybind frees the ``Reducer`` with the GIL held, so if it drops the
last reference, ``~ProcessGroupGloo`` joins the worker threads while holding the GIL the
worker waits for: a deadlock (seen as one rank idle after the final ``all_gather``, in
about 1 run in 4 on two shared cores). So the DDP model is freed while the process group
is still registered, and ``destroy_process_group`` drops the last reference through the
process group's own binding, which releases the GIL before joining.

Hangs fail loudly: collectives time out after ``--timeout`` seconds (an exception, not
a wait without end), and ``--watchdog`` makes every rank dump all its threads' Python
stacks (to ``DIR/rank<R>.txt`` with ``--stack-dir``, else stderr) and exit when it is
still running after that many seconds, or when it receives SIGTERM (torchrun sends it
to the other ranks when one fails) or SIGUSR1.
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import signal
import sys
import time
import weakref
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from .bench import master_model, sample_molecules
from .graph_ops import make_graph_ops
from .model import SIZES, build_model
from .switches import variant_switches

_stack_file = None  # kept open for the life of the process: faulthandler writes to its fd
_armed_at: float | None = None


def _mark(what: str) -> None:
    """With the watchdog armed: note ``what`` was reached (the stack dump shows where a
    rank is; these lines, how far it got, even when it is stuck exiting)."""
    if _armed_at is not None:
        out = _stack_file or sys.stderr
        out.write(f"[rank {os.environ.get('RANK', '?')} +{time.monotonic() - _armed_at:.1f} s] "
                  f"{what}\n")
        out.flush()


def arm_watchdog(seconds: float, stack_dir: str | None) -> None:
    """Dump every thread's Python stack and exit after ``seconds``, on SIGTERM and on
    SIGUSR1 (without exiting). faulthandler needs no GIL, so it also reports a rank
    deadlocked inside C++ (the Python frame that called into it is shown)."""
    global _stack_file, _armed_at
    rank = os.environ.get("RANK", "?")
    if stack_dir:
        Path(stack_dir).mkdir(parents=True, exist_ok=True)
        _stack_file = open(Path(stack_dir) / f"rank{rank}.txt", "w")
    out = _stack_file or sys.stderr
    out.write(f"rank {rank}, pid {os.getpid()}: stacks dumped after {seconds:g} s, "
              "on SIGTERM or on SIGUSR1\n")
    out.flush()
    _armed_at = time.monotonic()
    faulthandler.dump_traceback_later(seconds, exit=True, file=out)
    faulthandler.register(signal.SIGTERM, file=out, all_threads=True, chain=True)
    faulthandler.register(signal.SIGUSR1, file=out, all_threads=True)


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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


def _ddp_steps(model, mol, bases, ops, steps: int, device: str, cuda: bool, local: int) -> float:  # noqa: ANN001
    """``steps`` timed DDP steps; the DDP wrapper (and its Reducer) is freed before this
    returns, while the process group is still registered (see the module docstring)."""
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    dist.barrier()
    elapsed = _timed_steps(ddp, torch.optim.Adam(ddp.parameters()), mol, bases, ops, steps,
                           device)
    alive = weakref.ref(ddp)
    del ddp
    gc.collect()  # DDP may sit in a reference cycle
    if alive() is not None:
        raise RuntimeError("DistributedDataParallel still referenced after its steps: freeing "
                           "it after destroy_process_group can deadlock gloo")
    return elapsed


def run(steps: int, batch: int, size: str, variant: str, seed: int,
        timeout_s: float = 600.0, threads: int | None = None) -> dict | None:
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    _mark(f"process group up ({world} ranks)")
    local = int(os.environ.get("LOCAL_RANK", rank))
    device = f"cuda:{local}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(local)
    else:
        torch.set_num_threads(threads or max(1, _cpu_count() // world))
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
    _mark(f"{steps} steps alone in {alone:.2f} s")
    model, bases = fresh()
    together = _ddp_steps(model, mol, bases, ops, steps, device, cuda, local)
    times = torch.tensor([alone, together], dtype=torch.float64, device=device)
    gathered = [torch.zeros_like(times) for _ in range(world)]
    _mark(f"{steps} DDP steps in {together:.2f} s, DDP freed")
    dist.all_gather(gathered, times)
    rows = [[float(x) for x in t.tolist()] for t in gathered]
    del times, gathered
    dist.barrier()  # no rank leaves while another still exchanges with it
    dist.destroy_process_group()
    _mark("process group destroyed")
    if rank != 0:
        return None
    alone_rates = [batch * steps / row[0] for row in rows]
    # The slowest process paces a synchronous data-parallel step.
    ddp_rate = world * batch * steps / max(row[1] for row in rows)
    return {
        "world_size": world, "device": "cuda" if cuda else "cpu",
        "backend": "nccl" if cuda else "gloo", "size": size, "variant": variant,
        "batch_per_process": batch, "steps": steps,
        "threads_per_process": None if cuda else torch.get_num_threads(),
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
    parser.add_argument("--threads", type=int,
                        help="torch threads per process on CPU (default: cores // processes)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds a collective may wait before it raises")
    parser.add_argument("--watchdog", type=float, default=0.0,
                        help="dump every rank's stacks and exit after this many seconds "
                             "(0: off)")
    parser.add_argument("--stack-dir", help="with --watchdog: write rank R's stacks to "
                                            "STACK_DIR/rankR.txt instead of stderr")
    args = parser.parse_args(argv)
    if args.watchdog > 0:
        arm_watchdog(args.watchdog, args.stack_dir)
    result = run(args.steps, args.batch, args.size, args.variant, args.seed, args.timeout,
                 args.threads)
    if result is not None:
        print(json.dumps(result), flush=True)
    _mark("done; exiting")


if __name__ == "__main__":
    main()
