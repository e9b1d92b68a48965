"""CI's A/B stage: our kernels and MACE on the previous commit against this one, paired.

    python benchmarks/ab.py [--base REV] [--head REV] [--factor 1.3] [--rounds 15]
                            [--round-s 0.1] [--case NAME] [--json FILE]

As ``asv continuous`` does, it times one fixed set of cases on two commits in the same
minutes and fails on a slowdown. The base (default ``HEAD~1``, the first parent: in CI the
clone is of main and HEAD the submitted tip) is checked out into a temporary git worktree;
the head is this checkout's working tree (or ``--head REV``, another worktree). Each side
runs in processes that import *its* tree (``_TreeFinder``; the venv is shared), forked one
per case from a host process per side that has imported torch, e3nn and mace-torch once.
Per case, the two sides' processes are prepared (built, first call, warm-up), then timed in
``--rounds`` rounds at one thread, base and head alternately within each round (the first
side alternating too), each side for ``--round-s`` seconds and at least two calls; a
round's sample is the median of its calls. The per-round ratios head/base cancel what the
shared machine did in that round (``equibench.paired``): their median is the case's
slowdown, their quartiles its spread. A case whose median passes ``--factor`` is measured
again in fresh processes, and fails the stage only if that measurement passes it too: a
process can run a few percent fast or slow for its whole life, which no number of rounds
averages out, and two independent pairs rarely both pass the factor by chance.

The fixed set (``CASES``): fused tensor product (mace-large, 64 products) and convolution
(mace-large on 4 QM9 molecules) forward, backward and double backward; MACE's symmetric
contraction on our kernels (the ``oeq`` model's first product block on 64 nodes: forward,
backward, and the double backward of training with forces); the whole ``oeq`` MACE model
on 4 QM9 molecules, inference and training step (model level, implementation fused).

Kernel cache: both sides use the same one (``$EQUIBENCH_KERNEL_CACHE`` or the default),
which is safe because ``kernels/cpu_build.build_libraries`` names every object and library
by a hash of its generated source (with flags, compiler and CPU) in a directory named by the
descriptor's hash (which includes the generator's version): a side whose generated code
differs builds and loads its own library, and only byte-identical code is shared. Each case
process reports the kernel libraries it mapped; the stage prints how many both sides
shared and how many each side loaded alone. A separate cache per side would compile
everything again, when the tests before this stage in CI have built the head's.

Needs Python 3.11+ (``tomllib`` reads each tree's package layout from its pyproject).

Exit status: 0 passed, or skipped where there is no previous commit (a root commit, or a
shallow clone without it: clone with ``--depth 2`` or more) or whose tree cannot start
here; 1 a case slower than ``--factor``, or a case that fails on the head; 2 the stage
could not run (worktree, the head's host). A case that fails on the base alone is
reported, not compared, and does not fail.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import Any, Literal

FACTOR = 1.3
"""Default verdict: a paired median slowdown past this fails, if measured again. A/A runs
(the same commit on both sides) on this project's 2-core AMD EPYC VM while other jobs
shared it: 143 case medians of 13 runs (7 at 9 rounds, 6 at 15) lay within 0.69-1.53x, 95%
within 1.19x either way; 3 passed 1.3x either way, all in one disturbed run, and the one
slower (1.53x) read 1.02x measured again. Below 1.3x the noise leaves no room; 1.3x is also
the most the issue allows (docs/scale-out.md, "The A/B stage", has the runs)."""
# Fifteen paired rounds of 0.1 s per side and case (at least two calls: the training step
# takes ~0.3 s); the eleven cases' timing takes about a minute of the stage's ~100 s here,
# and CI wants the stage within four minutes. More rounds would not help much: the A/A
# outliers were biases of a process pair over all its rounds (the confirming second pair is
# for those).
ROUNDS = 15
ROUND_S = 0.1
CALLS_MIN = 2
WARMUP_S = 0.2
SEED = 0
TIMEOUT_S = 900.0
"""Longest wait for one answer of a side: a case's preparation compiles its kernels when
the cache lacks them (the symmetric contraction's took minutes here)."""


@dataclass(frozen=True)
class AbCase:
    """One timed case. ``kind`` ``case``: an equibench case of the fused implementation
    (``level``, ``workload``, ``variant``, ``direction``, ``batch``), built by the side's own
    ``registry.plugin``; ``sc``: the symmetric contraction of the ``oeq`` MACE model's first
    product block on ``batch`` nodes."""

    name: str
    kind: Literal["case", "sc"]
    direction: str
    batch: int
    level: str = ""
    workload: str = ""
    variant: str = "default"

    def spec(self) -> dict[str, Any]:
        return asdict(self)


CASES: tuple[AbCase, ...] = (
    *(AbCase(f"tp {d}", "case", d, 64, "tp", "mace-large")
      for d in ("forward", "backward", "double_backward")),
    *(AbCase(f"conv {d}", "case", d, 4, "conv", "mace-large@qm9")
      for d in ("forward", "backward", "double_backward")),
    *(AbCase(f"sc {d}", "sc", d, 64) for d in ("forward", "backward", "double_backward")),
    *(AbCase(f"mace-oeq {d}", "case", d, 4, "model", "mace-qm9", "oeq")
      for d in ("inference", "train_step")),
)


# ---------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Verdict:
    """A case's outcome: ``ratio`` is the median of the per-round ratios head/base (above
    1: the head is slower), ``q1``/``q3`` their quartiles."""

    case: str
    status: str  # ok, faster, SLOWER, not compared (base failed), HEAD FAILED
    ratio: float = float("nan")
    q1: float = float("nan")
    q3: float = float("nan")
    rounds: int = 0
    base_s: float = float("nan")
    head_s: float = float("nan")
    reason: str = ""

    @property
    def fails(self) -> bool:
        return self.status in ("SLOWER", "HEAD FAILED")

    def line(self) -> str:
        if self.rounds == 0:
            return (f"{self.case:26s} {'-':>9s} {'-':>9s} {'-':>7s} {'-':>15s}  "
                    f"{self.status}: {self.reason}")
        return (f"{self.case:26s} {self.base_s * 1e3:9.3f} {self.head_s * 1e3:9.3f} "
                f"{self.ratio:6.3f}x [{self.q1:5.3f}-{self.q3:5.3f}]  {self.status}"
                + (f" ({self.reason})" if self.reason else ""))


def round_sample(times: list[float]) -> float:
    """A round's sample: the median of its calls."""
    import numpy as np

    return float(np.median(times))


def judge(case: str, base: list[float], head: list[float], factor: float) -> Verdict:
    """The verdict on one case from its per-round medians (seconds), round ``i`` of the
    base paired with round ``i`` of the head."""
    import numpy as np

    from equibench.paired import summary

    if len(base) != len(head) or not base:
        raise ValueError(f"{case}: {len(base)} base rounds against {len(head)} head rounds")
    ratios = np.asarray(head, dtype=float) / np.asarray(base, dtype=float)
    median, q1, q3 = summary(ratios)
    status = "SLOWER" if median > factor else "faster" if median < 1 / factor else "ok"
    return Verdict(case, status, median, q1, q3, len(ratios), float(np.median(base)),
                   float(np.median(head)))


def report(verdicts: list[Verdict], factor: float) -> str:
    header = (f"{'case':26s} {'base ms':>9s} {'head ms':>9s} {'head/base':>7s} "
              f"{'[q1-q3]':>15s}  verdict (fails past {factor:g}x)")
    return "\n".join([header, *(v.line() for v in verdicts)])


# ---------------------------------------------------------------- the two sides


@dataclass(frozen=True)
class Side:
    """One side of the comparison: its name, the commit (or ``working tree``) and the tree
    its processes import."""

    name: str
    commit: str
    tree: Path


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=check)


def resolve_commit(repo: Path, rev: str) -> tuple[str | None, str]:
    """The commit ``rev`` names in ``repo`` (``--base``, ``--head``), or None with why
    there is none (a shallow clone that lacks it, or a root commit's missing parent)."""
    found = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
    if found.returncode == 0:
        return found.stdout.strip(), ""
    shallow = _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true"
    if shallow:
        return None, (f"{rev} is not in this shallow clone (fetch with --depth 2 or more, "
                      "or --unshallow, to compare with it)")
    if rev.startswith("HEAD~") or rev.endswith("^"):
        return None, f"{rev} does not exist: HEAD is the root commit, nothing came before it"
    return None, f"{rev} names no commit here"


@contextlib.contextmanager
def worktree(repo: Path, commit: str, parent: Path) -> Iterator[Path]:
    """``commit`` checked out (detached) in a new worktree under ``parent``, removed (and
    its administrative files pruned) on exit, whatever happened inside."""
    path = parent / commit[:12]
    _git(repo, "worktree", "add", "--detach", "--quiet", str(path), commit)
    try:
        yield path
    finally:
        _git(repo, "worktree", "remove", "--force", str(path), check=False)
        _git(repo, "worktree", "prune", check=False)


def tree_packages(tree: Path) -> dict[str, Path]:
    """The packages that ``tree``'s pyproject maps to directories of their own
    (``[tool.setuptools.package-dir]``: ``equibench.kernels`` is ``kernels/``), as
    directories of ``tree``; the editable install maps them into the main checkout."""
    import tomllib

    config = tomllib.loads((tree / "pyproject.toml").read_text())
    dirs = config["tool"]["setuptools"]["package-dir"]
    return {name: tree / directory for name, directory in dirs.items()}


class _TreeFinder(importlib.abc.MetaPathFinder):
    """Finds the mapped packages in one tree, ahead of the editable install's finder (which
    knows only the main checkout); their submodules then follow each package's path."""

    def __init__(self, packages: dict[str, Path]) -> None:
        self.packages = packages

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        directory = self.packages.get(fullname)
        if directory is None:
            return None
        return importlib.util.spec_from_file_location(
            fullname, directory / "__init__.py", submodule_search_locations=[str(directory)])


# ---------------------------------------------------------------- case processes


def _sc_call(direction: str, nodes: int) -> Callable[[], object]:
    """One call of our symmetric contraction (the ``oeq`` model's first product block,
    float32, seeded inputs): ``forward`` (no graph), ``backward`` (gradients in the
    features and weights of a forward) or ``double_backward`` (training with forces: the
    features' gradient with its graph, then its gradients in features and weights)."""
    import torch
    from equibench.implementations.mace.models import VARIANTS, build_model
    from equibench.implementations.mace.symmetric_contraction import (
        FusedSymmetricContraction,
    )

    elements = (1, 6, 7, 8, 9)
    model = build_model(VARIANTS["oeq"], elements, avg_num_neighbors=9.0, seed=SEED)
    mace = model.products[0].symmetric_contractions.float()
    module = FusedSymmetricContraction(mace, "cpu")
    weights = [p for p in module.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(SEED)
    features = sum(ir.dim for _, ir in mace.irreps_in)
    x = torch.randn(nodes, mace.irreps_in[0].mul, features, generator=gen)
    y = torch.nn.functional.one_hot(torch.randint(0, len(elements), (nodes,), generator=gen),
                                    len(elements)).float()
    with torch.no_grad():
        g = torch.randn_like(module(x, y))
    gg = torch.randn(x.shape, generator=gen)
    xg = x.clone().requires_grad_(True)

    def forward() -> object:
        with torch.no_grad():
            return module(x, y)

    def backward() -> object:
        return torch.autograd.grad(module(xg, y), [xg, *weights], g)

    def double_backward() -> object:
        (gx,) = torch.autograd.grad(module(xg, y), xg, g, create_graph=True)
        return torch.autograd.grad(gx, [xg, *weights], gg)

    return {"forward": forward, "backward": backward,
            "double_backward": double_backward}[direction]


def _build_call(spec: dict[str, Any]) -> Callable[[], object]:
    import torch

    if spec["kind"] == "sc":
        return _sc_call(spec["direction"], spec["batch"])
    from equibench import registry
    from equibench.cases import Case

    case = Case(spec["level"], spec["workload"], "fused", spec["variant"], spec["direction"],
                "float32", spec["batch"], "cpu")
    return registry.plugin(case).build(case, torch.float32, SEED).call


def _kernel_libraries() -> list[str]:
    """The libraries of the kernel cache that this process has mapped (its kernels)."""
    from equibench.kernels.cpu_build import cache_root

    root = str(cache_root())
    with open("/proc/self/maps") as maps:
        paths = {line.split(maxsplit=5)[-1].strip() for line in maps if ".so" in line}
    return sorted(p for p in paths if p.startswith(root))


def _time_round(call: Callable[[], object], seconds: float) -> list[float]:
    """The times of the calls of one round: at least :data:`CALLS_MIN`, then more until
    ``seconds`` have passed."""
    times: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(times) < CALLS_MIN or time.perf_counter() < deadline:
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def _case_process(conn: Connection, spec: dict[str, Any]) -> None:
    """A case process: build, first call, warm-up; then ``("round", seconds)`` answered
    with the round's median until ``("stop",)``."""
    try:
        import torch

        torch.set_num_threads(1)
        start = time.perf_counter()
        call = _build_call(spec)
        build_s = time.perf_counter() - start
        call()
        first_s = time.perf_counter() - start - build_s
        deadline = time.perf_counter() + WARMUP_S
        while time.perf_counter() < deadline:
            call()
        conn.send(("ready", {"build_s": build_s, "first_call_s": first_s,
                             "libraries": _kernel_libraries()}))
        while (message := conn.recv())[0] == "round":
            conn.send(("round", _time_round(call, message[1])))
    except BaseException:  # noqa: BLE001 - the parent records it as the case's failure
        conn.send(("error", traceback.format_exc(limit=-8)))


def serve(tree: Path, fd: int) -> None:
    """A side's host: imports from ``tree``, then forks one process per case on the
    parent's ``("start", spec)`` and relays ``("round", s)`` and ``("stop",)``
    to it; ``("exit",)`` ends it."""
    sys.meta_path.insert(0, _TreeFinder(tree_packages(tree)))
    import torch

    torch.set_num_threads(1)
    import e3nn.o3  # noqa: F401 - imported once here rather than in every case process

    with contextlib.suppress(ImportError):  # model cases then fail with the reason
        import mace.modules  # noqa: F401
    import equibench.kernels

    import equibench
    from equibench import registry

    registry.discover()
    parent = Connection(fd)
    parent.send(("hello", {"equibench": equibench.__file__,
                           "kernels": equibench.kernels.__file__}))
    child: Connection | None = None
    pid = 0
    while (message := parent.recv())[0] != "exit":
        if message[0] == "start":
            child, child_end = Pipe()
            pid = os.fork()
            if pid == 0:
                parent.close()
                child.close()
                _case_process(child_end, *message[1:])
                os._exit(0)
            child_end.close()
        else:
            assert child is not None
            child.send(message)
            if message[0] == "stop":
                child.close()
                os.waitpid(pid, 0)
                child = None
                continue
        try:
            reply = child.recv()
        except EOFError:  # it died: a crash or the out-of-memory killer
            _, status = os.waitpid(pid, 0)
            reply = ("error", f"case process died ({_exit_text(status)})")
        else:
            if reply[0] == "error":  # it has ended: reap it
                os.waitpid(pid, 0)
        if reply[0] == "error":
            child.close()
            child = None
        parent.send(reply)


def _exit_text(status: int) -> str:
    if os.WIFSIGNALED(status):
        return signal.Signals(os.WTERMSIG(status)).name
    return f"exit code {os.waitstatus_to_exitcode(status)}"


@dataclass
class Host:
    """The parent's handle on one side's host process."""

    side: Side
    proc: subprocess.Popen[bytes]
    conn: Connection
    modules: dict[str, str] = field(default_factory=dict)

    @classmethod
    def start(cls, side: Side, preload: str | None) -> Host:
        """Start the host in ``side.tree`` and check that it imports equibench from there."""
        ours, theirs = socket.socketpair()
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env.pop("PYTHONPATH", None)  # nothing from the main checkout on the path
        if preload:
            env["LD_PRELOAD"] = preload
        # -P: not even this script's directory on the path; a session of its own, so that
        # a hung host goes down with its case processes.
        proc = subprocess.Popen(
            [sys.executable, "-P", str(Path(__file__).resolve()), "serve", str(side.tree),
             str(theirs.fileno())], cwd=side.tree, env=env, pass_fds=[theirs.fileno()],
            start_new_session=True)
        theirs.close()
        host = cls(side, proc, Connection(ours.detach()))
        try:
            _, modules = host.receive(TIMEOUT_S)
        except EOFError:  # its traceback is above, on the stderr it shares with us
            host.close()
            raise RuntimeError(f"the {side.name} side's host process exited before it "
                               "started") from None
        for name, path in modules.items():
            if not Path(path).resolve().is_relative_to(side.tree.resolve()):
                host.close()
                raise RuntimeError(f"the {side.name} side imported {name} from {path}, "
                                   f"outside its tree {side.tree}")
        host.modules = modules
        return host

    def send(self, *message: object) -> None:
        self.conn.send(message)

    def receive(self, timeout_s: float) -> tuple:
        if not self.conn.poll(timeout_s):
            raise TimeoutError(f"the {self.side.name} side did not answer in {timeout_s:.0f} s")
        return self.conn.recv()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.send("exit")
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.conn.close()


def _fail_line(side: Side, reply: tuple) -> str:
    return f"{side.name} ({side.commit[:12]}): {reply[1].strip().splitlines()[-1]}"


class BaseUnavailable(Exception):
    """The base's tree cannot even start (a broken previous commit): failing on it would
    also fail the commit that repairs it, so the stage says so and skips."""


@dataclass(frozen=True)
class Settings:
    """How each case is timed and judged (see the command's options)."""

    rounds: int = ROUNDS
    round_s: float = ROUND_S
    factor: float = FACTOR


@dataclass
class Run:
    """What one run of the stage measured."""

    verdicts: list[Verdict] = field(default_factory=list)
    # measurement -> side -> the call times of each round (seconds), for --json
    calls: dict[str, dict[str, list[list[float]]]] = field(default_factory=dict)
    # measurement -> the wall seconds its preparation took, and what each side reported
    prepared: dict[str, dict[str, Any]] = field(default_factory=dict)
    shared_libraries: set[str] = field(default_factory=set)
    own_libraries: dict[str, set[str]] = field(default_factory=dict)


def measure(case: AbCase, hosts: list[Host], settings: Settings, run: Run, key: str) -> Verdict:
    """Prepare ``case`` on both sides at once (nothing is timed meanwhile), then time it in
    interleaved rounds; the verdict. ``hosts``: base, head; ``key`` names the measurement
    in ``run``."""
    start = time.perf_counter()
    for host in hosts:
        host.send("start", case.spec())
    replies = [host.receive(TIMEOUT_S) for host in hosts]
    run.prepared[key] = {"seconds": time.perf_counter() - start, **{
        host.side.name: reply[1] for host, reply in zip(hosts, replies, strict=True)
        if reply[0] == "ready"}}
    failed = [(host.side, reply) for host, reply in zip(hosts, replies, strict=True)
              if reply[0] != "ready"]
    times: dict[str, list[list[float]]] = {host.side.name: [] for host in hosts}
    if not failed:
        base_libraries, head_libraries = (set(reply[1]["libraries"]) for reply in replies)
        run.shared_libraries |= base_libraries & head_libraries
        run.own_libraries.setdefault("base", set()).update(base_libraries - head_libraries)
        run.own_libraries.setdefault("head", set()).update(head_libraries - base_libraries)
        run.calls[key] = times
        failed = _rounds(hosts, settings, times)
    for host, reply in zip(hosts, replies, strict=True):
        if reply[0] == "ready" and all(side != host.side for side, _ in failed):
            host.send("stop")
    if failed:
        reason = "; ".join(_fail_line(side, reply) for side, reply in failed)
        if any(side.name == "head" for side, _ in failed):
            return Verdict(case.name, "HEAD FAILED", reason=reason)
        return Verdict(case.name, "not compared (base failed)", reason=reason)
    return judge(case.name, [round_sample(t) for t in times["base"]],
                 [round_sample(t) for t in times["head"]], settings.factor)


def _rounds(hosts: list[Host], settings: Settings,
            times: dict[str, list[list[float]]]) -> list[tuple[Side, tuple]]:
    """Time the prepared case's rounds into ``times``; the sides that failed (none, or
    the one whose round failed: the case ends there)."""
    # Both orders equally often (the first side drawn at random), so that neither side
    # always runs right after the other's round.
    order = hosts if random.random() < 0.5 else hosts[::-1]
    for r in range(settings.rounds):
        for host in order if r % 2 == 0 else order[::-1]:
            host.send("round", settings.round_s)
            reply = host.receive(TIMEOUT_S)
            if reply[0] != "round":
                return [(host.side, reply)]
            times[host.side.name].append(reply[1])
    return []


def confirm(first: Verdict, again: Verdict) -> Verdict:
    """The verdict on a case that was ``SLOWER`` once, from its measurement ``again`` in
    fresh processes: the slowdown stands only if that shows it too (two independent paired
    measurements; the noise of a shared machine rarely passes the factor in both)."""
    if again.status not in ("SLOWER", "ok", "faster"):
        return again
    if again.status == "SLOWER":
        return replace(again, reason=f"confirmed; first {first.ratio:.3f}x")
    return replace(again, status="ok", reason=f"first {first.ratio:.3f}x, not confirmed")


def run_stage(base: Side, head: Side, cases: tuple[AbCase, ...], settings: Settings) -> Run:
    """Every case of ``cases`` on both sides, one after another; prints as it goes."""
    from equibench import allocator

    preload = allocator.preload_for("tcmalloc")
    print(f"[ab] allocator: {preload or 'glibc (tcmalloc not installed)'}; one thread; "
          f"{settings.rounds} rounds of {settings.round_s:g} s per side and case", flush=True)
    hosts: list[Host] = []
    run = Run()
    try:
        for side in (base, head):
            try:
                hosts.append(Host.start(side, preload))
            except (RuntimeError, TimeoutError) as err:
                if side.name == "base":
                    raise BaseUnavailable(str(err)) from err
                raise
            print(f"[ab] {side.name}: {side.commit[:12]}, equibench from "
                  f"{Path(hosts[-1].modules['equibench']).parent}", flush=True)
        print(report([], settings.factor), flush=True)
        for case in cases:
            verdict = measure(case, hosts, settings, run, case.name)
            if verdict.status == "SLOWER":
                print(f"{verdict.line()}: measuring again in fresh processes", flush=True)
                again = measure(case, hosts, settings, run, f"{case.name} (again)")
                verdict = confirm(verdict, again)
            run.verdicts.append(verdict)
            print(verdict.line(), flush=True)
    finally:
        for host in hosts:
            host.close()
    return run


def _prepare_datasets(cases: tuple[AbCase, ...]) -> None:
    """Prepare QM9 once here if the cache lacks it, rather than in both sides' first
    case processes at once (offline, from the qm9pack wheel)."""
    from equibench.datasets.cache import prepared_path

    if any("qm9" in c.workload for c in cases) and not prepared_path("qm9").exists():
        print("[ab] preparing QM9 (once)", flush=True)
        subprocess.run([str(Path(sys.executable).with_name("equibench")), "datasets",
                        "prepare", "qm9", "--quiet"], check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="HEAD~1",
                        help="the commit to compare with (default HEAD~1, the first parent)")
    parser.add_argument("--head", help="a commit to time instead of this working tree")
    parser.add_argument("--factor", type=float, default=FACTOR,
                        help=f"a median slowdown past this fails (default {FACTOR})")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--round-s", type=float, default=ROUND_S,
                        help="seconds each side is timed per round and case")
    parser.add_argument("--case", action="append", dest="cases", metavar="NAME",
                        choices=[c.name for c in CASES], help="time only this case (repeatable)")
    parser.add_argument("--json", type=Path, help="write the verdicts here")
    parser.add_argument("--repo", type=Path, default=Path("."), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.factor <= 1 or args.rounds < 1 or args.round_s <= 0:
        parser.error("--factor must exceed 1, --rounds be >= 1 and --round-s > 0")
    start = time.perf_counter()
    repo = Path(_git(args.repo, "rev-parse", "--show-toplevel").stdout.strip())
    base_commit, why = resolve_commit(repo, args.base)
    if base_commit is None:
        print(f"[ab] skipped: {why}")
        return 0
    cases = tuple(c for c in CASES if not args.cases or c.name in args.cases)
    _prepare_datasets(cases)
    with contextlib.ExitStack() as stack:
        parent = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="equibench-ab-")))
        base = Side("base", base_commit, stack.enter_context(worktree(repo, base_commit,
                                                                       parent)))
        if args.head:
            head_commit, why = resolve_commit(repo, args.head)
            if head_commit is None:
                print(f"[ab] error: {why}", file=sys.stderr)
                return 2
            head = Side("head", head_commit, stack.enter_context(
                worktree(repo, head_commit, parent / "head")))
        else:
            head = Side("head", "working tree", repo)
        settings = Settings(args.rounds, args.round_s, args.factor)
        try:
            run = run_stage(base, head, cases, settings)
        except BaseUnavailable as err:
            print(f"[ab] skipped: the base {base.commit[:12]} cannot run here: {err}")
            return 0
        except (RuntimeError, TimeoutError, EOFError, OSError) as err:
            print(f"[ab] error: {err}", file=sys.stderr)
            return 2
    failed = [v for v in run.verdicts if v.fails]
    print(f"[ab] kernel libraries: {len(run.shared_libraries)} loaded by both sides (the same "
          f"generated code), " + ", ".join(f"{len(v)} by the {k} alone"
                                           for k, v in sorted(run.own_libraries.items())))
    seconds = time.perf_counter() - start
    if args.json:
        args.json.write_text(json.dumps({
            "base": base.commit, "head": head.commit, "factor": args.factor,
            "rounds": args.rounds, "round_s": args.round_s, "seconds": round(seconds, 1),
            "verdicts": [asdict(v) for v in run.verdicts], "prepared": run.prepared,
            "calls": run.calls}) + "\n")
    print(f"[ab] {len(run.verdicts)} cases in {seconds:.0f} s: " + (
        f"{len(failed)} failed ({', '.join(v.case for v in failed)})" if failed
        else f"none slower than {args.factor:g}x"))
    return 1 if failed else 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(Path(sys.argv[2]), int(sys.argv[3]))
    else:
        sys.exit(main())
