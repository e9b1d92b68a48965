"""Forward, backward and double backward of a differentiable function, as one timed call."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from equibench.levels import Outputs
from equibench.modes import Step


def directional_call(
    direction: str,
    fn: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    names: Sequence[str],
    grad_out: torch.Tensor,
    probes: Sequence[torch.Tensor],
    aux: Sequence[torch.Tensor] = (),
) -> Step:
    """The call that a case of ``direction`` times, as a function of all its tensors
    (``fn(*inputs, *aux)``: ``aux`` are inputs that are not differentiated, such as a
    graph's indices).

    - ``forward``: ``fn(*inputs, *aux)``.
    - ``backward``: forward, then the gradients of ``<fn(*inputs, *aux), grad_out>`` with
      respect to every input (the forward is part of the timed call, as in training).
    - ``double_backward``: the gradient, with respect to every input, of the scalar
      ``sum_i <d<out, grad_out>/d input_i, probe_i>`` over the first ``len(probes)`` inputs,
      which is what a force loss backpropagates through.

    Every output the call computes is returned, so that the gate checks all of them: the
    forward output and, for ``double_backward``, the first-order gradients too. The inputs
    become leaves that require gradients inside the call, so that an exported program
    (``equibench.modes``) traces the derivatives too.
    """
    if direction not in ("forward", "backward", "double_backward"):
        raise ValueError(f"direction {direction!r} has no meaning for a differentiable "
                         "operation")
    names = list(names)

    def step(inputs: list[torch.Tensor], aux: list[torch.Tensor], grad_out: torch.Tensor,
             probes: list[torch.Tensor]) -> Outputs:
        if direction == "forward":
            return {"out": fn(*inputs, *aux)}
        leaves = [t.detach().requires_grad_(True) for t in inputs]
        with torch.enable_grad():
            out = fn(*leaves, *aux)
            grads = torch.autograd.grad(out, leaves, grad_out, materialize_grads=True,
                                        create_graph=direction == "double_backward")
            if direction == "backward":
                return {"out": out.detach(),
                        **{f"grad_{n}": g for n, g in zip(names, grads, strict=False)}}
            scalar = sum((g * p).sum() for g, p in zip(grads, probes, strict=False))
            second = torch.autograd.grad(scalar, leaves, materialize_grads=True)
        return {"out": out.detach(),
                **{f"grad_{n}": g.detach() for n, g in zip(names, grads, strict=False)},
                **{f"grad2_{n}": g for n, g in zip(names, second, strict=False)}}

    return Step(step, (list(inputs), list(aux), grad_out, list(probes)))
