"""How a case's step runs: eager, under ``torch.compile``, or exported.

The three modes (``equibench.vocabulary.MODES``) answer a user's question before any
speed: does this implementation still work when I compile or export my model, and at
which derivative order?

- ``eager``: the step as written.
- ``compile``: ``torch.compile`` (Inductor, static shapes) of the whole step, autograd and
  optimizer inside, graph breaks allowed, as a user compiles a training or force step.
  Inductor compiles on the first call, which is never timed (``extra.first_call_s``).
- ``export``: the step traced through autograd (``make_fx``: its derivatives become
  operations of the graph, as NequIP's ``nequip-compile`` does for forces), exported with
  ``torch.export``, compiled into an AOTInductor package, loaded and run. The program
  holds the module's weights as constants, as a deployed model does; every input of the
  step (features, graph, cotangents, probes) stays an input. Only a :class:`Step`, a call
  given as a function of its tensors, can be exported: a training step updates weights and
  optimizer state that an exported program does not hold.

A mode that fails to compile, export or make its first call leaves the case
``unavailable`` with the error's first line (:func:`failure`); its outputs are gated like
any other's.

A cold start (a suite's ``cold_start``) is the time from empty caches to a case's first
result: its process, fresh from the fork server (which imported the libraries and built
nothing), points every cache of :data:`COLD_CACHES` at a new empty directory
(:func:`empty_caches`) before the implementation is built.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from equibench.levels import Outputs

# What each mode runs (``extra.mode_detail``).
MODE_DETAIL = {
    "eager": "eager PyTorch",
    "compile": "torch.compile(step, dynamic=False), Inductor, graph breaks allowed",
    "export": "make_fx(step) through autograd, torch.export (non-strict), an AOTInductor "
              "package (aoti_compile_and_package, aoti_load_package)",
}

# The caches a cold start empties, by the environment variable that places each. e3nn and
# cuEquivariance's CPU path keep none of their own; under compile and export they use
# Inductor's.
COLD_CACHES = {
    "EQUIBENCH_KERNEL_CACHE": "our fused kernels' compiled C++ libraries",
    "TORCHINDUCTOR_CACHE_DIR": "Inductor's FX graph, AOT autograd and compiled-code caches "
                               "(compile and export modes)",
    "TRITON_CACHE_DIR": "Triton's compiled kernels (GPU)",
    "TORCH_EXTENSIONS_DIR": "torch C++ extensions built at run time (OpenEquivariance)",
    "SYMMETRIX_JIT_CACHE": "Symmetrix-XL's kernels generated and compiled for a model",
}


@dataclass
class Step:
    """A timed call as a function of its inputs: ``call() == fn(*args)``.

    ``args`` are tensors or pytrees of them (lists, dicts); nothing else the call reads
    may change between calls, so that an exported program can take ``args`` as its inputs.
    """

    fn: Callable[..., Outputs]
    args: tuple[Any, ...]

    def __call__(self) -> Outputs:
        return self.fn(*self.args)


class ModeUnavailable(RuntimeError):
    """A mode that this step cannot run in, by construction (not an error it raised)."""


def apply(mode: str, call: Callable[[], Outputs], scratch: Path | None
          ) -> Callable[[], Outputs]:
    """``call`` run in ``mode``; ``export`` compiles its package under ``scratch`` (a
    directory of the case's own) now, and ``compile`` compiles on the first call."""
    if mode == "eager":
        return call
    if mode == "compile":
        return _compiled(call)
    if mode == "export":
        return _exported(call, scratch)
    raise ValueError(f"unknown mode {mode!r}")


def empty_caches(directory: Path) -> dict[str, str]:
    """Point every cache of :data:`COLD_CACHES` at a new empty directory under
    ``directory``, for the rest of this process; returns what was done, for
    ``extra.cold_start_caches``."""
    done = {}
    for variable, what in COLD_CACHES.items():
        path = directory / variable.lower()
        # Private: Symmetrix-XL refuses a JIT cache that others could write to.
        path.mkdir(parents=True, mode=0o700)
        os.environ[variable] = str(path)
        done[variable] = f"{what}: a new empty directory"
    return done


def _compiled(call: Callable[[], Outputs]) -> Callable[[], Outputs]:
    # Donated buffers forbid create_graph=True, which a double backward and a training step
    # on forces need; without this every such step would fail for a reason of our making.
    torch._functorch.config.donated_buffer = False
    if isinstance(call, Step):
        return Step(torch.compile(call.fn, dynamic=False), call.args)
    return torch.compile(lambda: call(), dynamic=False)


def _exported(call: Callable[[], Outputs], scratch: Path | None) -> Callable[[], Outputs]:
    if scratch is None:
        raise ValueError("export needs a directory for its package")
    if not isinstance(call, Step):
        raise ModeUnavailable(
            "export: this step is not a function of its inputs (a training step updates "
            "weights and optimizer state, which an exported program does not hold)")
    from torch._inductor import aoti_compile_and_package, aoti_load_package
    from torch.fx.experimental.proxy_tensor import make_fx

    traced = make_fx(call.fn)(*call.args)
    program = torch.export.export(traced, call.args, strict=False)
    scratch.mkdir(parents=True, exist_ok=True)
    package = aoti_compile_and_package(program, package_path=str(scratch / "step.pt2"))
    return Step(aoti_load_package(package), call.args)


def failure(mode: str, err: BaseException) -> str:
    """The ``unavailable`` reason of a step that ``mode`` could not run: the error's first
    line, its root cause's where that says more (torch wraps a tracing error in a generic
    one), and the torch version that raised it."""
    if isinstance(err, ModeUnavailable):
        return f"{_first_line(err)} (torch {torch.__version__})"
    reason = f"{mode}: {type(err).__name__}: {_first_line(err)}"
    root = err
    while (cause := root.__cause__ or root.__context__) is not None:
        root = cause
    if root is not err and _first_line(root) != _first_line(err):
        reason += f"; cause: {type(root).__name__}: {_first_line(root)}"
    return f"{reason[:800]} (torch {torch.__version__})"


def _first_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[0] if lines else ""
