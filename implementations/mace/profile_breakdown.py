"""Where the time of one model step goes, by category, from one ``torch.profiler`` trace.

Generic part (reusable by any model family): :func:`profile_categories` runs ``fn`` once
under the profiler with every module of ``scopes`` wrapped in a ``record_function`` range
named after it, gives each operator a *path* (the enclosing ranges and operator names,
outermost first, joined by ``/``) and sums self times per category of the first
:class:`Rule` whose pattern the path matches.

Backward operators run outside any module, so they are attributed through the autograd
sequence number: the backward node ``XBackward0`` evaluated by the engine carries the
sequence number of the forward operator that created it, and inherits that operator's
path (``<forward path>/XBackward0/...``). This also holds for the double backward of
training with forces: the backward of a backward operator inherits the path of the
forward operator it came from.

MACE part: :data:`MACE_RULES` over the module names of a mace-torch model
(``interactions.0.conv_tp``, ``products.1.symmetric_contractions``, ...).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch
from torch.autograd.profiler import record_function
from torch.autograd.profiler_util import FunctionEvent

_EVALUATE = "autograd::engine::evaluate_function: "
# torch 2.2 (the DGL environment) logs every profiler stage to stderr; read when the
# profiler first starts, so setting it here is in time.
os.environ.setdefault("KINETO_LOG_LEVEL", "5")


@dataclass(frozen=True)
class Rule:
    """Operators whose path matches ``pattern`` (``re.search``) belong to ``category``."""

    category: str
    pattern: str


OTHER = "other"

# Order matters: module scopes first (an index op inside the tensor product is tensor
# product time), operator names last (the gather and scatter of the message passing live
# in the interaction block itself, between its sub-modules).
MACE_RULES: tuple[Rule, ...] = (
    Rule("symmetric contraction", r"\.symmetric_contractions\b"),
    Rule("tensor product", r"\.conv_tp(?![\w])"),
    Rule("radial MLP", r"\.conv_tp_weights\b"),
    Rule("linear", r"\.(linear_up|linear|linear_\d|skip_tp)\b|(^|/)node_embedding\b"),
    Rule(
        "gather/scatter",
        r"aten::(index|index_select|index_add_?|index_put_?|scatter_add_?|scatter_reduce_?"
        r"|gather)(/|$)",
    ),
)


def categorize(path: str, rules: Iterable[Rule]) -> str:
    """The category of the first rule matching ``path``, else :data:`OTHER`."""
    for rule in rules:
        if re.search(rule.pattern, path):
            return rule.category
    return OTHER


class _Scopes:
    """Forward hooks that open a ``record_function(name)`` range around each module."""

    def __init__(self, scopes: Mapping[str, torch.nn.Module]) -> None:
        self._stack: list[record_function] = []
        self._handles = []
        for name, module in scopes.items():
            self._handles.append(module.register_forward_pre_hook(self._enter(name)))
            self._handles.append(module.register_forward_hook(self._exit))

    def _enter(self, name: str) -> Callable:
        def hook(module: torch.nn.Module, args: object) -> None:
            scope = record_function(name)
            scope.__enter__()
            self._stack.append(scope)

        return hook

    def _exit(self, module: torch.nn.Module, args: object, output: object) -> None:
        self._stack.pop().__exit__(None, None, None)

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def _paths(events: list[FunctionEvent]) -> dict[int, str]:
    """Path of every event (keyed by ``id``); see the module docstring."""
    forward_op: dict[tuple[int, int], FunctionEvent] = {}
    for e in events:
        evaluated = e.cpu_parent is not None and e.cpu_parent.name.startswith(_EVALUATE)
        if e.sequence_nr >= 0 and not e.name.startswith(_EVALUATE) and not evaluated:
            # Operators that create no autograd node report the next sequence number too;
            # the one recorded last is the operator that created the node.
            forward_op[(e.thread, e.sequence_nr)] = e
    paths: dict[int, str] = {}

    def path(e: FunctionEvent) -> str:
        key = id(e)
        if key not in paths:
            paths[key] = e.name  # guards against cycles while resolving
            if e.name.startswith(_EVALUATE) and (e.fwd_thread, e.sequence_nr) in forward_op:
                origin = forward_op[(e.fwd_thread, e.sequence_nr)]
                base = path(origin) if origin is not e else ""
                paths[key] = f"{base}/{e.name[len(_EVALUATE) :]}"
            elif e.cpu_parent is not None:
                paths[key] = f"{path(e.cpu_parent)}/{e.name}"
        return paths[key]

    for e in events:
        path(e)
    return paths


def profile_categories(
    fn: Callable[[], object],
    rules: Iterable[Rule],
    scopes: Mapping[str, torch.nn.Module] | None = None,
    device: str = "cpu",
) -> dict[str, float]:
    """Seconds of one call of ``fn`` per category of ``rules`` (plus :data:`OTHER`).

    CPU: self CPU time of each operator and range (python glue inside a module counts
    for that module's range). CUDA: self device time (the kernels each operator
    launched). Profiler overhead is included, so compare categories, not totals, with
    timed runs. The caller warms ``fn`` up first.
    """
    rules = tuple(rules)
    activities = [torch.profiler.ProfilerActivity.CPU]
    on_cuda = device.startswith("cuda")
    if on_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    hooks = _Scopes(scopes or {})
    try:
        with torch.profiler.profile(activities=activities) as prof:
            with record_function("step"):
                fn()
            if on_cuda:
                torch.cuda.synchronize()
    finally:
        hooks.remove()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CPU]
    paths = _paths(events)
    # Every category appears, in rule order, even with no time.
    totals = dict.fromkeys((*(r.category for r in rules), OTHER), 0.0)
    for e in events:
        self_us = e.self_device_time_total if on_cuda else e.self_cpu_time_total
        totals[categorize(paths[id(e)], rules)] += self_us * 1e-6
    return totals


def module_scopes(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """Every named sub-module of ``model`` (the root excluded), by qualified name."""
    return {name: module for name, module in model.named_modules() if name}
