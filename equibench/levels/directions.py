"""Forward, backward and double backward of a differentiable function, as one timed call."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from equibench.levels import Outputs


def directional_call(
    direction: str,
    fn: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    names: Sequence[str],
    grad_out: torch.Tensor,
    probes: Sequence[torch.Tensor],
) -> Callable[[], Outputs]:
    """The call that a case of ``direction`` times.

    - ``forward``: ``fn(*inputs)``.
    - ``backward``: forward, then the gradients of ``<fn(*inputs), grad_out>`` with respect
      to every input (the forward is part of the timed call, as in training).
    - ``double_backward``: the gradient, with respect to every input, of the scalar
      ``sum_i <d<out, grad_out>/d input_i, probe_i>`` over the first ``len(probes)`` inputs,
      which is what a force loss backpropagates through.

    Every output the call computes is returned, so that the gate checks all of them: the
    forward output and, for ``double_backward``, the first-order gradients too.
    """
    if direction == "forward":
        return lambda: {"out": fn(*inputs)}

    leaves = [t.detach().requires_grad_(True) for t in inputs]
    if direction == "backward":

        def backward() -> Outputs:
            out = fn(*leaves)
            grads = torch.autograd.grad(out, leaves, grad_out, materialize_grads=True)
            return {"out": out.detach(),
                    **{f"grad_{n}": g for n, g in zip(names, grads, strict=False)}}

        return backward

    if direction == "double_backward":

        def double_backward() -> Outputs:
            out = fn(*leaves)
            grads = torch.autograd.grad(
                out, leaves, grad_out, create_graph=True, materialize_grads=True
            )
            scalar = sum((g * p).sum() for g, p in zip(grads, probes, strict=False))
            second = torch.autograd.grad(scalar, leaves, materialize_grads=True)
            return {"out": out.detach(),
                    **{f"grad_{n}": g.detach() for n, g in zip(names, grads, strict=False)},
                    **{f"grad2_{n}": g for n, g in zip(names, second, strict=False)}}

        return double_backward
    raise ValueError(f"direction {direction!r} has no meaning for a differentiable operation")
