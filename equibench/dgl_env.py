"""The DGL environment of the ``+dgl`` model variants: build it, record whether it works,
and hand a sweep over to it.

DGL's PyPI wheels load only with torch <= 2.2.1 (ENVIRONMENT.md), so the ``+dgl`` variants
run in a virtual environment of their own (``.venv-dgl``, made by
``scripts/make_dgl_env.sh``). The workflow builds it once (rule ``dgl_env``) and writes a
status file; a failed build is a recorded state, not a failed workflow: the sweep then runs
in the main environment, where its ``+dgl`` cases come out ``unavailable`` with the reason
the build gave. Delete the status file to try again.

Status file (JSON): ``ok`` (bool), ``python`` (the environment's interpreter), ``reason``
(why it is not usable; empty when ok), ``torch_source`` (the PyTorch CPU index, or PyPI's
CUDA build when that index is unreachable, as here), ``versions`` (dgl and torch as
imported), ``log`` (the build's output), ``finished``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

from equibench.files import atomic_write

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "make_dgl_env.sh"
VENV = ".venv-dgl"
# Set in a sweep whose DGL environment could not be built; dgl_unavailable() quotes it.
ERROR_VARIABLE = "EQUIBENCH_DGL_ENV_ERROR"
_CHECK = "import dgl, dgl.ops, torch, equibench; print(dgl.__version__, torch.__version__)"
_SOURCE_LINE = "torch source: "  # printed by the build script


def _tail(text: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def build(status_path: str | Path, log_path: str | Path, venv: str = VENV,
          timeout_s: float = 1800.0) -> dict:
    """Run the build script, check that DGL imports in the result, write the status."""
    venv_dir = Path(venv).resolve()  # the script runs from the repository root
    python = str(venv_dir / "bin" / "python")
    env = {**os.environ, "EQUIBENCH_DGL_VENV": str(venv_dir)}
    log = Path(log_path)
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True,
                              timeout=timeout_s, env=env)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as err:
        output, code = f"{err.stdout or ''}{err.stderr or ''}", None
    log.write_text(output)
    versions: dict[str, str] = {}
    if code is None:
        reason = f"building it took longer than {timeout_s:.0f} s"
    elif code != 0:
        reason = f"{SCRIPT.name} failed (exit {code}): {_tail(output)}"
    else:
        check = subprocess.run([python, "-c", _CHECK], capture_output=True, text=True)
        reason = "" if check.returncode == 0 else (
            f"dgl does not import in {venv_dir}: {_tail(check.stderr)}")
        if not reason:
            versions = dict(zip(("dgl", "torch"), check.stdout.split()[-2:], strict=True))
    sources = [line.removeprefix(_SOURCE_LINE) for line in output.splitlines()
               if line.startswith(_SOURCE_LINE)]
    status = {"ok": not reason, "python": python, "reason": reason,
              "torch_source": sources[-1] if sources else "",
              "versions": versions, "log": str(log),
              "finished": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    with atomic_write(status_path, "w") as handle:
        handle.write(json.dumps(status, indent=2) + "\n")
    return status


def read_status(path: str | Path) -> dict:
    try:
        status = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SystemExit(f"no DGL environment status at {path}: build it with "
                         f"`equibench dgl-env --status {path}` (or the workflow's dgl_env "
                         "rule)") from None
    except json.JSONDecodeError as err:
        raise SystemExit(f"{path} is not a DGL environment status ({err}); delete it and "
                         "build again") from None
    if not isinstance(status, dict) or not {"ok", "python", "reason"} <= status.keys():
        raise SystemExit(f"{path} lacks ok/python/reason; delete it and build again")
    return status


def enter(status_path: str | Path, argv: list[str]) -> None:
    """Run the ``equibench`` command ``argv`` in the DGL environment when it is usable
    (replacing this process); otherwise note why in this process's environment, so that
    its ``+dgl`` cases say it, and return."""
    status = read_status(status_path)
    if not status["ok"]:
        os.environ[ERROR_VARIABLE] = (f"the DGL environment could not be built: "
                                      f"{status['reason']} (log: {status.get('log')})")
        return
    python = status["python"]
    # Compare environments, not interpreters: two virtual environments' pythons are links
    # to one interpreter, and resolving them would take the DGL one for this one.
    if Path(sys.prefix).resolve() == Path(python).absolute().parent.parent.resolve():
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(python, [python, "-m", "equibench.cli", *argv])
