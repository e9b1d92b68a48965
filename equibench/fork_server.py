"""The fork server that case processes start from.

It imports torch, e3nn and the kernels once (``equibench.preload``), so a case process does
not pay those imports again, and it is started with the CPU allocator preloaded
(``allocator``), so every case runs with it. This module imports neither torch nor pandas:
a command starts the server first and its own imports then overlap with the server's
(about 5 s each on a 2-core machine, paid once per benchmark job).
"""

from __future__ import annotations

import multiprocessing as mp
import warnings
from multiprocessing import forkserver

from equibench import allocator


def start(cpu_allocator: str = "tcmalloc", compilers: bool = False
          ) -> mp.context.BaseContext:
    """The forkserver context; started here, with ``cpu_allocator`` preloaded, unless this
    process already runs one (its case processes then keep the allocator it started with,
    which their rows record). ``compilers``: the server imports torch.compile's and
    torch.export's modules too (``equibench.preload_compilers``), for cases in those modes
    (~2 s a process here, which a run without them would pay for nothing)."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["equibench.preload",
                                *(["equibench.preload_compilers"] if compilers else [])])
    library = allocator.preload_for(cpu_allocator)
    if library is None and cpu_allocator == "tcmalloc":
        warnings.warn(f"tcmalloc not found: CPU cases run with glibc's allocator, which "
                      f"page-faults large tensors on every call; {allocator.INSTALL_HINT}",
                      stacklevel=2)
    with allocator.preloaded(library):
        forkserver.ensure_running()
    return ctx
