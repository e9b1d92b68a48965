"""A short training run on a QM9 subset: does the model learn HOMO?

    python -m equibench.implementations.se3_transformer.train --molecules 2000 --epochs 5

Molecules are a seeded sample split 90/10 into training and validation; HOMO is
standardized with the training mean and standard deviation; L1 loss, Adam. Batches are
fixed once (bond graphs from RDKit and, with ``basis_cache``, the edge bases computed once
for the whole run, as the NVIDIA data module does) and visited in a new order each epoch.
Prints one JSON line per epoch: training loss (standardized L1) and validation HOMO MAE
in meV.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass

import numpy as np
import torch

from .bench import master_model
from .graph_ops import GraphOps, make_graph_ops
from .model import SIZES, MoleculeBatch, build_model, featurize
from .switches import variant_switches
from .tfn import BACKENDS

HARTREE_MEV = 27211.386245988


@dataclass
class Prepared:
    """One fixed batch: inputs, its graph operations and (with ``basis_cache``) its bases."""

    mol: MoleculeBatch
    ops: GraphOps
    bases: dict | None


def prepare(indices: np.ndarray, batch: int, mean: float, std: float, model, dtype,  # noqa: ANN001
            graph_ops: str, cache: bool) -> list[Prepared]:
    from equibench import datasets

    ds = datasets.load("qm9")
    out = []
    for start in range(0, len(indices), batch):
        mol = featurize(ds.batch(indices[start : start + batch].tolist(), graph="bonds"))
        mol.target = (mol.target - mean) / std
        mol = mol.to("cpu", dtype)
        ops = make_graph_ops(graph_ops, mol.edge_src, mol.edge_dst, mol.n_nodes)
        out.append(Prepared(mol, ops, model.bases(mol.edge_vec) if cache else None))
    return out


def train(molecules: int = 2000, epochs: int = 5, batch: int = 32, size: str = "small",
          variant: str = "optimized", backend: str = "basis", lr: float = 2e-3, seed: int = 0,
          log=print) -> list[dict]:  # noqa: ANN001
    """Train and return the per-epoch records (also passed to ``log`` as JSON lines)."""
    from equibench import datasets

    ds = datasets.load("qm9")
    # The sample is sorted by index; a seeded shuffle splits it into validation and training
    # (the same generator then orders the training batches of each epoch).
    rng = np.random.default_rng(seed)
    chosen = rng.permutation(ds.sample(molecules, seed))
    n_val = max(1, molecules // 10)
    val_idx, train_idx = np.sort(chosen[:n_val]), np.sort(chosen[n_val:])
    homo = ds.data.targets["homo"][train_idx]
    mean, std = float(homo.mean()), float(homo.std())

    switches = variant_switches(variant)
    dtype = torch.float32
    model = build_model(SIZES[size], switches, backend, "cpu", dtype, master_model(size, seed))
    train_set = prepare(train_idx, batch, mean, std, model, dtype, switches.graph_ops,
                        switches.basis_cache)
    val_set = prepare(val_idx, batch, mean, std, model, dtype, switches.graph_ops,
                      switches.basis_cache)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=max(1, epochs))
    records = []
    for epoch in range(epochs):
        start, losses = time.perf_counter(), []
        model.train()
        for k in rng.permutation(len(train_set)):
            b = train_set[k]
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.l1_loss(model(b.mol, b.bases, b.ops), b.mol.target)
            loss.backward()
            optimizer.step()
            losses.append(loss.item() * b.mol.n_graphs)
        scheduler.step()
        model.eval()
        errors = []
        with torch.no_grad():
            for b in val_set:
                errors.append((model(b.mol, b.bases, b.ops) - b.mol.target).abs() * std)
        record = {"epoch": epoch + 1, "train_loss": sum(losses) / len(train_idx),
                  "val_homo_mae_meV": float(torch.cat(errors).mean()) * HARTREE_MEV,
                  "epoch_s": time.perf_counter() - start}
        records.append(record)
        log(json.dumps(record))
    return records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--molecules", type=int, default=2000)
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--size", choices=sorted(SIZES), default="small",
                        help="model size (full: the NVIDIA recipe, slow on CPU)")
    parser.add_argument("--variant", default="optimized")
    parser.add_argument("--backend", choices=BACKENDS, default="basis")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    train(args.molecules, args.epochs, args.batch, args.size, args.variant, args.backend,
          args.lr, args.seed)


if __name__ == "__main__":
    main()
