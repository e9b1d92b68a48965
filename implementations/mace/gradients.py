"""Every parameter's gradient of a MACE training step as the gate compares it, whatever
the backend's parameterization.

A backend model holds the reference's weights mapped by a converter (mace-torch's, for
cuEquivariance and OpenEquivariance; none for e3nn and fused, which keep the e3nn model's
parameters). For each parameter tensor of the backend:

* **direct** (``grad:<reference name>``): it holds exactly the values of a reference tensor
  (the same name, the same values, at most reshaped), so its gradient is that tensor's
  gradient, compared element by element;
* **projected** (``grad_proj:<backend name>``): the converter mixed or reordered values.
  The converter is linear, ``w_b = A w_r``, so for a direction ``d_r`` of the reference's
  weights and its conversion ``d_b = A d_r``, ``<g_b, d_b> = <A^T g_b, d_r> = <g_r, d_r>``:
  :data:`PROBES` random reference models, converted like the model itself, give that
  many projections of the tensor's gradient, compared with the same projections of the
  reference's gradient over the reference tensors the converter built it from (those of
  the same module).

The optimizer step (``step:<backend name>``): the backend's weights after its step less
what the same optimizer makes of its own gradients from the weights before, in its own
dtype (the difference is exactly zero when the step is applied; a skipped or misapplied
step is at least one learning rate). Judged at the floor of one learning rate.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from equibench.levels import Outputs
from equibench.levels.optimizer_step import GRAD, PARAM

# Random directions per projected tensor: the scale of a projection is the largest of the
# reference's, so that one projection that happens to be small cannot make rounding look
# large (with two, both below 5% of the gradient's norm has probability ~0.2%).
PROBES = 2
PROJ = "grad_proj:"


def _same_values(a: Tensor, b: Tensor) -> bool:
    return a.numel() == b.numel() and torch.equal(a.detach().reshape(-1).double(),
                                                  b.detach().reshape(-1).double())


@dataclass
class GradientView:
    """How a backend model's gradients compare with the reference's (see the module
    docstring). Built once per case, outside the timed call."""

    direct: dict[str, str]  # backend name -> reference name
    groups: dict[str, list[str]]  # backend name -> the reference names it is built from
    reference_directions: list[dict[str, Tensor]]  # per probe, by reference name
    backend_directions: list[dict[str, Tensor]]  # per probe, by backend name
    shapes: dict[str, torch.Size]  # reference name -> shape
    backend_shapes: dict[str, torch.Size]  # backend name -> shape

    @classmethod
    def build(cls, reference: torch.nn.Module, backend: torch.nn.Module,
              convert: Callable[[torch.nn.Module], torch.nn.Module], seed: int) -> GradientView:
        """``reference`` (float64, the reference's parameterization), ``backend`` (the model
        under test, before its first step), ``convert`` (reference -> backend
        parameterization, the converter the backend was built with)."""
        ref_params = dict(reference.named_parameters())
        direct, groups = {}, {}
        for name, p in backend.named_parameters():
            if name in ref_params and _same_values(p, ref_params[name]):
                direct[name] = name
                continue
            module = name.rsplit(".", 1)[0] + "."
            sources = [r for r in ref_params if r.startswith(module)]
            if not sources:
                raise ValueError(f"backend parameter {name!r} has no reference parameter in "
                                 f"its module {module[:-1]!r}: the gate cannot compare it")
            groups[name] = sources
        # Every reference gradient is compared, in full or through a projection.
        covered = set(direct.values()) | {s for sources in groups.values() for s in sources}
        if missing := sorted(set(ref_params) - covered):
            raise ValueError(f"the reference parameters {missing} have no counterpart in the "
                             "backend's model: the gate cannot compare their gradients")
        ref_dirs, backend_dirs = [], []
        if groups:
            generator = torch.Generator().manual_seed(seed + 2000)
            for _ in range(PROBES):
                delta = copy.deepcopy(reference)
                with torch.no_grad():
                    for p in delta.parameters():
                        p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype))
                ref_dirs.append({n: p.detach().double().cpu()
                                 for n, p in delta.named_parameters()})
                converted = dict(convert(delta).named_parameters())
                backend_dirs.append({n: converted[n].detach().double().cpu() for n in groups})
        return cls(direct, groups, ref_dirs, backend_dirs,
                   {n: p.shape for n, p in ref_params.items()},
                   {n: p.shape for n, p in backend.named_parameters()})

    def reference_view(self, outputs: Outputs) -> Outputs:
        """The reference step's outputs (``grad:<name>`` for every reference parameter) as
        the gate compares them."""
        view = {k: v for k, v in outputs.items() if not k.startswith((GRAD, PARAM))}
        for name in self.direct.values():
            view[GRAD + name] = self._grad(outputs, name, self.shapes[name])
        for name, sources in self.groups.items():
            view[PROJ + name] = torch.stack([
                sum(((self._grad(outputs, s, self.shapes[s]).double().cpu() * d[s]).sum()
                     for s in sources), torch.zeros((), dtype=torch.float64))
                for d in self.reference_directions])
        return view

    def backend_view(self, outputs: Outputs) -> Outputs:
        """The backend's step outputs (``grad:<backend name>``) as the gate compares them,
        as in :meth:`reference_view`."""
        view = {k: v for k, v in outputs.items() if not k.startswith((GRAD, PARAM))}
        for name, ref_name in self.direct.items():
            view[GRAD + ref_name] = self._grad(outputs, name, self.shapes[ref_name])
        for name in self.groups:
            grad = self._grad(outputs, name, self.backend_shapes[name]).double().cpu()
            view[PROJ + name] = torch.stack([(grad * d[name]).sum()
                                             for d in self.backend_directions])
        return view

    @staticmethod
    def _grad(outputs: Outputs, name: str, shape: torch.Size) -> Tensor:
        """A parameter's gradient from a step's outputs, in ``shape``; a parameter that got
        no gradient (None) has a zero one, as the optimizer sees it."""
        grad = outputs.get(GRAD + name)
        if grad is None:
            return torch.zeros(shape, dtype=torch.float64)
        return grad.detach().reshape(shape)
