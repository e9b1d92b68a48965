"""Where the error of an SE(3)-Transformer training step under autocast comes from.

    python benchmarks/se3t_amp_error.py [--size full] [--variant low-memory] [--batch 16]
                                        [--autocast float16] [--top 8]

Runs one forward and backward of the float32 model under ``torch.autocast`` (``--autocast
none``: plain float32) and of the float64 reference with the same weights on the same
molecules, the reference's max pooling pinned to the atoms the autocast run picked (as the
gate does, ``model.pool_winners``). Prints the scaled error of each block's and norm's
output (how the rounding of the matmuls grows layer by layer), of the predictions and
loss, and the parameters whose gradients differ most (relative Frobenius error). The
gradients are those of the loss itself (no loss scaling): a scale changes underflow, not
the relative rounding measured here. Exit status 0: it reports, it does not gate.
"""

from __future__ import annotations

import argparse
import contextlib

import torch
from equibench.implementations.se3_transformer.bench import (
    master_model,
    prediction_and_loss,
    sample_molecules,
)
from equibench.implementations.se3_transformer.graph_ops import make_graph_ops
from equibench.implementations.se3_transformer.model import SIZES, build_model, pool_winners
from equibench.implementations.se3_transformer.switches import variant_switches

from equibench.correctness import scaled_error

AUTOCAST = {"float16": torch.float16, "bfloat16": torch.bfloat16, "none": None}


def _as_tensor(output: object) -> torch.Tensor:
    """A module's output as one tensor (the blocks and norms return dicts by degree)."""
    if isinstance(output, dict):
        return torch.cat([t.detach().double().flatten() for t in output.values()])
    if isinstance(output, (tuple, list)):
        return output[0].detach().double()
    return output.detach().double()


def one_step(args: argparse.Namespace, dtype: torch.dtype, autocast: torch.dtype | None,
             pool_at: torch.Tensor | None) -> dict:
    """Outputs of the top-level modules, predictions, loss, gradients and pooled features."""
    switches = variant_switches(args.variant)
    model = build_model(SIZES[args.size], switches, "basis", "cpu", dtype,
                        master_model(args.size, args.seed))
    mol = sample_molecules(args.batch, args.seed).to("cpu", dtype)
    ops = make_graph_ops(switches.graph_ops, mol.edge_src, mol.edge_dst, mol.n_nodes)
    layers: dict[str, torch.Tensor] = {}
    hooks = [module.register_forward_hook(
        lambda _m, _i, out, name=name: layers.__setitem__(name, _as_tensor(out)))
        for name, module in model.named_modules() if name.startswith(("blocks.", "norms."))
        and name.count(".") == 1]
    hooks.append(model.conv_out.register_forward_hook(
        lambda _m, _i, out: layers.__setitem__("pooled", out[0].detach().squeeze(-1))))
    region = (torch.autocast("cpu", dtype=autocast) if autocast is not None
              else contextlib.nullcontext())
    with region:
        pred, loss = prediction_and_loss(model, mol, None, ops, pool_at)
    loss.backward()
    for hook in hooks:
        hook.remove()
    return {"layers": layers, "pred": pred.detach(), "loss": loss.detach(), "mol": mol,
            "grads": {n: p.grad for n, p in model.named_parameters() if p.grad is not None}}


def measure(args: argparse.Namespace) -> tuple[dict[str, float], list[tuple[float, str]]]:
    """Scaled errors by layer (then ``pred`` and ``loss``) and the parameters' relative
    gradient errors, largest first."""
    low = one_step(args, torch.float32, AUTOCAST[args.autocast], None)
    mol = low["mol"]
    pool_at = pool_winners(low["layers"]["pooled"], mol.node_graph, mol.n_graphs)
    ref = one_step(args, torch.float64, None, pool_at)
    errors = {name: scaled_error(low["layers"][name], want)
              for name, want in ref["layers"].items() if name != "pooled"}
    errors["pred"] = scaled_error(low["pred"], ref["pred"])
    errors["loss"] = scaled_error(low["loss"], ref["loss"])
    grads = sorted(((float((low["grads"][n].double() - g).norm() / g.norm().clamp(min=1e-30)),
                     n) for n, g in ref["grads"].items() if n in low["grads"]), reverse=True)
    return errors, grads


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="full", choices=sorted(SIZES))
    parser.add_argument("--variant", default="low-memory")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--autocast", default="float16", choices=sorted(AUTOCAST))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=8, help="parameters to list")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    errors, grads = measure(args)
    print(f"{args.size} {args.variant} batch {args.batch}, autocast {args.autocast}: "
          "scaled error max|x - ref| / max(max|ref|, 1)")
    for name, err in errors.items():
        print(f"  {name:10s} {err:.2e}")
    print(f"gradients, relative error |g - ref| / |ref| (largest {args.top} of {len(grads)}):")
    for err, name in grads[:args.top]:
        print(f"  {err:.2e}  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
