"""The ``equibench`` command line."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from equibench import config as config_mod
from equibench import run_ids
from equibench.cases import LEVEL_DEFAULTS, MD_ATOM_STEPS_PER_CALL, expand
from equibench.devices import require
from equibench.vocabulary import DIRECTIONS, LEVEL_INFO, LEVELS, MODES

if TYPE_CHECKING:
    from equibench.custom_workloads import CustomWorkload

# torch, e3nn and pandas are imported inside the commands that need them, so that quick
# commands (help, datasets info, config) start in well under a second.
PRECISION_NAMES = ("float64", "float32", "tfloat32", "bfloat16", "float16", "amp-bfloat16",
                   "amp-float16")


def _csv(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _ints(text: str) -> list[int]:
    """Comma-separated integers, each once (a repeated batch would time one case twice)."""
    try:
        return list(dict.fromkeys(int(t) for t in _csv(text)))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def _cpu_allocator(args: argparse.Namespace, cfg: dict | None = None) -> str:
    from equibench.schema import defaults

    return getattr(args, "cpu_allocator", None) or {**defaults(), **(cfg or {})}["cpu_allocator"]


def _start_fork_server(args: argparse.Namespace, cfg: dict | None = None,
                       modes: Sequence[str] = ()) -> None:
    """Start the case processes' fork server before this process imports torch, so that
    the two sets of imports overlap (``fork_server``); with the compilers' modules where
    ``modes`` has one besides eager."""
    from equibench import fork_server

    fork_server.start(_cpu_allocator(args, cfg), compilers=any(m != "eager" for m in modes))


def _custom_workloads(args: argparse.Namespace, cfg: dict | None = None
                      ) -> list[CustomWorkload]:
    """The user's tensor-product workloads (the configuration's ``workloads:``, ``--tp``),
    registered here for the name check; the run settings carry them to the case processes
    (``_settings``). A bad definition is a ``SpecError`` saying how to write it."""
    from equibench import custom_workloads

    defined = [*custom_workloads.from_config((cfg or {}).get("workloads", [])),
               *custom_workloads.parse_all(getattr(args, "tp", None) or [])]
    custom_workloads.register(defined)
    return defined


def _settings(args: argparse.Namespace, cfg: dict | None = None,
              workloads: Sequence[CustomWorkload] = (), suite: dict | None = None):
    """The run's settings: the configuration's (else the schema's defaults), then a suite's
    own keys (``scaling_limit_s``, ``breakdown``), then the command's flags."""
    from equibench.measure import MeasureConfig
    from equibench.runner import RunSettings
    from equibench.schema import defaults

    # A resolved configuration has every default already; `equibench run` has none.
    given = {**defaults(), **(cfg or {})}
    suite = suite or {}
    overrides = {key: value for key, value in (("budget_s", getattr(args, "budget", None)),
                                               ("rounds", getattr(args, "rounds", None)),
                                               ("breakdown", suite.get("breakdown")))
                 if value is not None}
    measure = MeasureConfig(**{**given["measure"], **overrides})
    return RunSettings(
        # Unique per invocation (the workflow's jobs share theirs): two runs of one
        # configuration must count as two in claims and targets.
        run_id=run_ids.current(given.get("name", "adhoc")),
        threads=args.threads if getattr(args, "threads", None) is not None
        else given["threads"],
        seed=given["seed"],
        timeout_s=given["timeout_s"],
        config_hash=config_mod.config_hash(cfg) if cfg else "",
        measure=measure,
        cpu_allocator=_cpu_allocator(args, cfg),
        plugins=tuple(given["plugins"]) + tuple(getattr(args, "plugin", None) or []),
        workloads=tuple(w.definition for w in workloads),
        scaling_limit_s=suite.get("scaling_limit_s", 0.0),
        cold_start=bool(suite.get("cold_start", getattr(args, "cold_start", False))),
    )


def _print_table(frame) -> None:
    import pandas as pd

    cols = ["implementation", "variant", "workload", "direction", "precision", "batch", "device",
            "status", "time_median_s", "throughput", "peak_tensor_bytes", "max_scaled_err",
            "reason"]
    view = frame[[c for c in cols if c in frame.columns]].copy()
    view["reason"] = view["reason"].str.slice(0, 60)
    with pd.option_context("display.max_rows", 500, "display.width", 200,
                           "display.max_colwidth", 60, "display.float_format", "{:.4g}".format):
        print(view.to_string(index=False))


def _log_row(row: dict) -> None:
    """One line per finished case, for logs where a progress bar would be noise."""
    timing = (f"{row['time_median_s']:.4g} s" if row.get("status") == "ok"
              else str(row.get("reason", ""))[:100])
    print(f"[{row['status']}] {row['implementation']} {row['workload']} {row['direction']} "
          f"{row['precision']} batch={row['batch']}: {timing}", flush=True)


def _names_known(cases, plugins, command: str) -> bool:  # noqa: ANN001
    """Check every name of ``cases`` before any process starts (a typo then costs nothing);
    print the problems and return False if one is unknown."""
    from equibench import names

    try:
        names.check(cases, plugins=plugins)
    except names.UnknownName as err:
        print(f"{command}: {err}", file=sys.stderr)
        return False
    return True


def resolve_level_defaults(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the direction, variant and budget that ``equibench run`` was not given from its
    level's (``cases.LEVEL_DEFAULTS``); the batch is filled per workload
    (:func:`default_batch`). A flag given is kept as given."""
    level = LEVEL_DEFAULTS[args.level]
    if args.direction is None:
        args.direction = level.direction
    if args.variant is None:
        args.variant = level.variant
    if args.budget is None:
        args.budget = level.budget_s  # None: the schema's
    return args


def default_batch(level: str, workload: str) -> int:
    """The batch of ``workload`` at ``level`` when ``--batch`` is not given. A batch means
    tensor products at tp, graphs at conv, structures at model and MD steps per timed call
    at md, where it is sized by the structure's atoms (``levels.md.default_steps``): the
    tensor product's 1,024 would be an hour of MD per call."""
    if level == "md":
        from equibench import structures
        from equibench.levels.md import default_steps

        try:
            return default_steps(len(structures.load(workload)))
        except (OSError, ValueError):
            pass  # not a structure: the name check says why
    return LEVEL_DEFAULTS[level].batch


def _batches(args: argparse.Namespace, workloads: list[str]) -> dict[str, list[int]]:
    """Each workload's batches: ``--batch`` as given, else its default. A scaling run times
    every size of a structure with one step count (a backend's growth is followed at one
    batch), that of its largest size."""
    if args.batch:
        return {workload: args.batch for workload in workloads}
    own = {workload: default_batch(args.level, workload) for workload in workloads}
    if args.scaling_limit is None:
        return {workload: [batch] for workload, batch in own.items()}
    from equibench.structures import StructureName

    source = {workload: StructureName.parse(workload).source for workload in workloads}
    return {workload: [min(own[w] for w in workloads if source[w] == source[workload])]
            for workload in workloads}


def cmd_run(args: argparse.Namespace) -> int:
    if args.dry_run:  # the device need not be here (a GPU run checked on a CPU)
        if args.device != "cpu" and not re.fullmatch(r"cuda:\d+", args.device):
            raise ValueError(f"device {args.device!r}: expected cpu or cuda:N (N = 0, 1, ...)")
    else:
        require(args.device)
    resolve_level_defaults(args)
    if not args.dry_run:
        # First, so that the server's imports overlap with ours (the name check imports the
        # registry); it exits with this process if a name is unknown.
        _start_fork_server(args, modes=_csv(args.mode))
    defined = _custom_workloads(args)
    # At level tp the --tp workloads are what runs unless --workload says otherwise; a conv
    # workload needs its graph named (NAME@qm9).
    workloads = _csv(args.workload or "") or ([w.name for w in defined] if args.level == "tp"
                                               else [])
    if not workloads:
        raise ValueError("--workload is required (at level tp --tp alone will do; at level "
                         "conv name a --tp workload with a graph: --workload NAME@qm9)")
    if args.scaling_limit is not None and args.level != "md":
        raise ValueError("--scaling-limit grows md structures: use it with --level md")
    batches = _batches(args, workloads)
    cases = [case for workload in workloads for case in expand(
        level=args.level, workloads=[workload], implementations=_csv(args.implementation),
        directions=_csv(args.direction), precisions=_csv(args.precision),
        batches=batches[workload], device=args.device, variants=_csv(args.variant),
        modes=_csv(args.mode),
    )]
    if not _names_known(cases, args.plugin or (), "equibench run"):
        return 2
    if args.dry_run:
        print(f"equibench run --dry-run: {len(cases)} case(s) on {args.device}, every name "
              "known; nothing was run")
        return 0
    from equibench.runner import run_cases

    frame = run_cases(cases, _settings(args, workloads=defined,
                                       suite={"scaling_limit_s": args.scaling_limit or 0.0}),
                      args.out, progress=not args.quiet,
                      on_row=_log_row if args.quiet else None)
    _print_table(frame)
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.config)
    require(args.device)
    if args.environment:
        from equibench import dgl_env

        # Re-runs this command in the DGL environment when it is usable (never returns).
        dgl_env.enter(args.environment, [
            "sweep", "--config", args.config, "--suite", args.suite, "--implementation",
            args.implementation, "--device", args.device, "--out", args.out,
            *(["--quiet"] if args.quiet else [])])

    # First: its imports overlap with the name check's.
    _start_fork_server(args, cfg, config_mod.suite(cfg, args.suite).get("modes", ()))
    defined = _custom_workloads(args, cfg)
    cases = config_mod.suite_cases(cfg, args.suite, args.implementation, args.device)
    if not _names_known(cases, cfg["plugins"], f"equibench sweep: suite {args.suite}"):
        return 2
    from equibench.devices import exclusive
    from equibench.runner import run_cases

    print(f"{len(cases)} cases: suite {args.suite}, {args.implementation}, {args.device}",
          flush=True)
    with exclusive(args.device, Path(args.out).parent / ".locks"):
        settings = _settings(args, cfg, defined, config_mod.suite(cfg, args.suite))
        frame = run_cases(cases, settings, args.out,
                          progress=not args.quiet,
                          on_row=_log_row if args.quiet else None)
    _print_table(frame)
    return 0


def cmd_dgl_env(args: argparse.Namespace) -> int:
    from equibench import dgl_env

    status = dgl_env.build(args.status, args.log, args.venv)
    print(f"DGL environment: {'ok, ' + status['python'] if status['ok'] else status['reason']}"
          f"\n(status {args.status}, log {args.log})")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from equibench import results
    frame = results.read(args.results)
    for clause in args.where or []:
        key, equals, value = clause.partition("=")
        if not equals:
            raise ValueError(f"--where {clause!r}: expected COLUMN=VALUE, e.g. status=ok")
        if key not in frame.columns:
            raise ValueError(f"--where: no column {key!r}; columns: {', '.join(frame.columns)}")
        frame = frame[frame[key].astype(str) == value]
    if args.columns:
        cols = _csv(args.columns)
        unknown = [c for c in cols if c not in frame.columns]
        if unknown:
            raise ValueError(f"--columns: no column(s) {unknown}; columns: "
                             f"{', '.join(frame.columns)}")
        print(frame[cols].to_string(index=False))
    else:
        _print_table(frame)
    counts = frame["status"].value_counts().to_dict()
    print(f"\n{len(frame)} rows: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from equibench.environment import capture

    print(json.dumps(capture(require(args.device)), indent=2))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from equibench import registry
    from equibench.workloads import TP_WORKLOADS

    device = require(args.device)
    print("implementations:")
    for name in registry.names():
        impl = registry.get(name)
        reason = impl.available(device)
        state = "available" if reason is None else f"unavailable: {reason}"
        print(f"  {name:18s} levels={','.join(sorted(impl.levels)):10s} {state}")
        print(f"  {'':18s} {impl.description}")
        for variant, about in impl.variants.items():
            print(f"  {'':18s} variant {variant} ({','.join(sorted(about.levels))}): "
                  f"{about.description}")
    print("tensor-product workloads:")
    for name, p in TP_WORKLOADS.items():
        print(f"  {name:16s} {p.mode} {p.irreps_in1} x {p.irreps_in2} ({len(p.instructions)} "
              "paths)")
    print("model families (level model; md: the families with md directions):")
    for family in registry.families():
        print(f"  {family.prefix:16s} workloads {', '.join(family.workloads)}")
        variants = ", ".join((*family.variants, *family.variant_forms))
        print(f"  {'':16s} backends {', '.join(family.backends)}; variants {variants}; "
              f"directions {', '.join(family.directions)}"
              + (f"; md directions {', '.join(family.md_directions)}"
                 if family.md_directions else ""))
    from equibench.structures import BUILTINS

    print(f"md structures: {', '.join(BUILTINS)}, or any file ASE reads; SOURCE@AxBxC "
          "replicates it into a supercell")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    from equibench import results
    frame = results.read(args.inputs)
    results.write_atomic(frame, args.out)
    counts = frame["status"].value_counts().to_dict()
    print(f"wrote {args.out}: {len(frame)} rows (" +
          ", ".join(f"{k} {v}" for k, v in counts.items()) + ")")
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    from equibench import results
    from equibench.dashboards.site import write_site

    index = write_site(results.read(args.results), args.out,
                       gpu_kernel_table=args.gpu_kernels or None)
    print(f"dashboard: {index}")
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from equibench.devices import resolve_devices
    from equibench.machine_probe import write_probe

    out = write_probe([require(d) for d in resolve_devices(args.device)], args.out,
                      args.threads)
    print(Path(out).read_text())
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    cfg = config_mod.load(args.file)
    # The names every job uses, checked here as each job checks its own when it starts (the
    # workflow leaves them to the jobs: the check imports every implementation).
    _custom_workloads(args, cfg)
    cases = [case for suite, implementation, device in config_mod.jobs(cfg)
             for case in config_mod.suite_cases(cfg, suite, implementation, device)]
    if not _names_known(cases, cfg["plugins"], f"equibench config {args.file}"):
        return 2
    if args.jobs:
        for job in config_mod.jobs(cfg):
            print(" ".join(job))
    else:
        print(json.dumps(cfg, indent=2))
    return 0


class _Version(argparse.Action):
    """``--version``: the package's version and the checkout's commit (what every result row
    records as ``git_commit``), looked up only when asked (provenance imports torch)."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0,
                         help="print the version, the commit and torch's version, then exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from equibench import environment

        env = environment.capture()
        dirty = ", uncommitted changes" if env["git_dirty"] else ""
        print(f"equibench {environment.package_version('equibench') or 'unknown'} "
              f"(commit {env['git_commit']}{dirty}; torch {env['version_torch']})")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="equibench",
        description="Benchmark equivariant GNN implementations: verify against a float64 "
                    "reference, then time them.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run one case or a small sweep given on the command line",
                       description="Run the cartesian product of the given values; each "
                                   "value list is comma-separated. The implementations and "
                                   "variants of each case are timed in interleaved rounds.")
    p.add_argument("--level", choices=LEVELS, default="tp")
    p.add_argument("--workload", help="e.g. mace-large,nequip-benzene-1parity (level tp: "
                                      "default the --tp workloads)")
    p.add_argument("--tp", action="append", metavar="[NAME=]SPEC",
                   help="define a tensor-product workload by irreps, 'IN1 x IN2 -> OUT "
                        "[uvu|uvw]', e.g. 'my-tp=32x0e+32x1o x 0e+1o -> 32x0e+32x1o uvu' "
                        "(named tp-<hash> without NAME=; at level conv run it as NAME@qm9); "
                        "repeatable")
    p.add_argument("--implementation", required=True, help="e.g. e3nn,e3nn-compiled")
    by_level = "; ".join(f"{name} {d.variant}" for name, d in LEVEL_DEFAULTS.items())
    p.add_argument("--variant",
                   help="model option sets, e.g. small,oeq or file:PATH, a saved model (mace), or "
                        "baseline,optimized (se3t); "
                        "tp/conv variants an implementation declares, e.g. ir_mul "
                        "(cuequivariance), reuse-plan (fused conv): see `equibench list` "
                        f"(default by level: {by_level})")
    by_level = "; ".join(f"{name} {d.direction}" for name, d in LEVEL_DEFAULTS.items())
    p.add_argument("--direction", help=f"from {', '.join(DIRECTIONS)} (default by level: "
                                       f"{by_level})")
    p.add_argument("--precision", default="float32", help=f"from {', '.join(PRECISION_NAMES)}")
    by_level = "; ".join(f"{name} {d.batch}" for name, d in LEVEL_DEFAULTS.items()
                         if name != "md")
    p.add_argument("--batch", type=_ints,
                   help="the work of one timed call: "
                        + ", ".join(f"{info.batch_unit} ({name})"
                                    for name, info in LEVEL_INFO.items())
                        + ", e.g. 256,1024 (default by "
                        f"level: {by_level}; md {MD_ATOM_STEPS_PER_CALL} atom-steps, e.g. "
                        "4 steps of 64 atoms, 32 of 8)")
    p.add_argument("--device", default="cpu", help="cpu or cuda:N")
    p.add_argument("--mode", default="eager",
                   help=f"how each step runs, from {', '.join(MODES)}: eager PyTorch, "
                        "torch.compile (Inductor) or torch.export run as an AOTInductor "
                        "package (default: eager), e.g. eager,compile,export")
    p.add_argument("--cold-start", action="store_true",
                   help="start each case from empty caches (kernel builds, Inductor, Triton) "
                        "and record cold_start_s, its seconds to the first result")
    p.add_argument("--threads", type=int, help="torch threads on CPU (default: all cores)")
    from equibench.schema import defaults

    schema_budget = defaults()["measure"]["budget_s"]
    by_level = "; ".join(f"{name} {schema_budget if d.budget_s is None else d.budget_s:g} s"
                         for name, d in LEVEL_DEFAULTS.items())
    p.add_argument("--budget", type=float,
                   help=f"timing budget per case, seconds (default by level: {by_level})")
    p.add_argument("--scaling-limit", type=float, metavar="SECONDS",
                   help="level md: a scaling run; each structure's supercells "
                        "(--workload diamond@2x2x2,diamond@3x3x3,...) run from the smallest up, "
                        "and a backend stops growing after a size that fails or takes longer "
                        "than SECONDS per MD step (its larger sizes: unavailable, with why)")
    p.add_argument("--rounds", type=int,
                   help="interleaved timing rounds (default 7): the implementations of each "
                        "case are timed round by round, in a fresh order each round")
    p.add_argument("--cpu-allocator", choices=("tcmalloc", "system"),
                   help="allocator of CPU case processes (default tcmalloc where installed; "
                        "see equibench/allocator.py)")
    p.add_argument("--out", help="write the result table (parquet) here")
    p.add_argument("--dry-run", action="store_true",
                   help="check the arguments and every name of every case, print how many "
                        "cases there are and run none (the device need not be present)")
    p.add_argument("--plugin", action="append", metavar="MODULE",
                   help="import MODULE first (an implementation kept outside this tree)")
    p.add_argument("--quiet", action="store_true",
                   help="no progress bar: a line per finished case (for logs)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="run one job of a workflow configuration (Snakemake "
                                     "calls this)")
    p.add_argument("--config", required=True, help="configuration YAML")
    p.add_argument("--suite", required=True)
    p.add_argument("--implementation", required=True,
                   help="one of the suite's implementations, or all of them: all")
    p.add_argument("--device", required=True)
    p.add_argument("--out", required=True, help="result table to write (parquet)")
    p.add_argument("--environment", metavar="STATUS",
                   help="status file of the DGL environment (equibench dgl-env): run there "
                        "if it was built, else record why its cases cannot run")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("dgl-env", help="build the DGL environment of the +dgl variants "
                                       "(scripts/make_dgl_env.sh) and record its status")
    p.add_argument("--status", default="results/envs/dgl.json", help="status file to write")
    p.add_argument("--log", default="results/envs/dgl.log", help="the build's output")
    p.add_argument("--venv", default=".venv-dgl")
    p.set_defaults(func=cmd_dgl_env)

    p = sub.add_parser("show", help="print a results table")
    p.add_argument("results", nargs="+", help="result files or directories")
    p.add_argument("--where", action="append", metavar="COL=VALUE", help="filter rows")
    p.add_argument("--columns", help="comma-separated columns to print")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("env", help="print the environment recorded with every row")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=cmd_env)

    p = sub.add_parser("list", help="list implementations (with availability) and workloads")
    p.add_argument("--device", default="cpu")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("merge", help="concatenate result tables (runs, machines) into one")
    p.add_argument("--out", required=True)
    p.add_argument("inputs", nargs="+")
    p.set_defaults(func=cmd_merge)

    p = sub.add_parser("dashboard", help="write the static dashboard site for a results table")
    p.add_argument("results", nargs="+")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--gpu-kernels", default="",
                   help="table of `equibench gpu-compile` for the GPU kernels page (default: "
                        "gpu-kernels.parquet beside --out, else the committed "
                        "results/baselines/gpu-kernels.parquet)")
    p.set_defaults(func=cmd_dashboard)

    p = sub.add_parser("probe", help="measure peak FLOP/s (matmul) and bandwidth (copy) for "
                                     "the roofline")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("config", help="validate a configuration (schema, then every name its "
                                      "suites use) and print it resolved")
    p.add_argument("file")
    p.add_argument("--jobs", action="store_true", help="print the benchmark jobs instead")
    p.set_defaults(func=cmd_config)

    from equibench.cli_gpu import add_parsers as add_gpu_commands
    from equibench.cli_publish import add_parsers as add_publish_command
    from equibench.cli_reports import add_parsers as add_report_commands

    add_report_commands(sub)
    add_gpu_commands(sub)
    add_publish_command(sub)
    try:
        from equibench.datasets.cli import add_parser as add_datasets
    except ImportError:
        pass  # the datasets package is optional at this layer
    else:
        add_datasets(sub)
    return parser


def _bad_input(err: Exception) -> str:
    """What was wrong with the input, and where it came from."""
    if isinstance(err, FileNotFoundError) and err.filename is not None:
        return f"no such file or directory: {err.filename}; check the path"
    return str(err)


def _reader_gone() -> int:
    """The reader of our output went away (``| head``): nothing is wrong with the run; stop
    writing (the rest goes to /dev/null) and exit as a command killed by SIGPIPE does."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + 13


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:
        return _reader_gone()
    # ConfigError and results.SchemaError are ValueErrors (invalid YAML too, named by the file
    # that held it): bad input, said plainly.
    except (FileNotFoundError, ValueError) as err:
        print(f"equibench {args.command}: error: {_bad_input(err)}", file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - a fault of equibench, told apart from a verdict
        traceback.print_exc()
        print(f"equibench {args.command}: internal error (traceback above); please report it",
              file=sys.stderr)
        return 3


def entry() -> None:
    """The console script: ``main``, then exit without Python's teardown, which takes 1-2 s
    once torch and e3nn are imported (paid by every benchmark job). Results are written
    atomically before this point and nothing else is left to clean up."""
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_gone()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    entry()
