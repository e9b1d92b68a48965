"""Launch ``torchrun`` so that a hang becomes a failure that shows every rank's stack.

Each rank gets ``--watchdog`` (its faulthandler dumps all threads' Python stacks to
``<stack_dir>/rank<R>.txt`` and exits after that many seconds, and dumps on SIGTERM,
which torchrun sends to the other ranks when one fails). Should torchrun itself outlive
the watchdog by ``grace_s``, the whole process group gets SIGTERM (the ranks dump), then
SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Launch:
    returncode: int | None  # None: killed after the watchdog and the grace period
    stdout: str
    stderr: str
    stacks: str  # every rank's stack-dump file, headed by its name
    seconds: float

    def report(self, tail: int = 4000) -> str:
        state = "hung, killed" if self.returncode is None else f"exit {self.returncode}"
        return (f"torchrun {state} after {self.seconds:.0f} s\n--- stderr (tail)\n"
                f"{self.stderr[-tail:]}\n--- rank stacks\n{self.stacks}")


def rank_stacks(stack_dir: Path) -> str:
    parts = []
    for path in sorted(stack_dir.glob("rank*.txt")):
        parts.append(f"=== {path.name}\n{path.read_text(errors='replace')}")
    return "\n".join(parts) or "(no rank wrote a stack file)"


def torchrun(module: str, args: list[str], nproc: int, stack_dir: Path,
             watchdog_s: float = 120, grace_s: float = 30,
             env: dict[str, str] | None = None) -> Launch:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc_per_node", str(nproc), "-m", module, *args,
           "--watchdog", str(watchdog_s), "--stack-dir", str(stack_dir)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})}, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=watchdog_s + grace_s)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # every rank dumps its stacks, then ends
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        code = None
    return Launch(code, out, err, rank_stacks(stack_dir), time.perf_counter() - start)
