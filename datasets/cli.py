"""``equibench datasets prepare|info|subset``: the command-line face of :mod:`equibench.datasets`.

``equibench.cli`` calls :func:`add_parser` with its subparsers; each leaf command sets
``func`` (``args.func(args)`` runs it and returns the exit status). For use without
the main CLI: ``python -m equibench.datasets.cli datasets info qm9``.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .download import DownloadError
from .registry import DATASETS, describe, info, prepare, write_subset

EPILOG = (
    "datasets (sources, the first is the default):\n"
    + "".join(
        f"  {spec.name:<10} {spec.description}; {', '.join(spec.sources)}\n"
        for spec in DATASETS.values()
    )
    + "\nfiles: $EQUIBENCH_DATA_DIR (default ~/.cache/equibench/data): raw/, prepared/<name>.npz\n"
)


def add_parser(subparsers: Any) -> None:
    """Add the ``datasets`` command (with ``prepare`` and ``info``) to ``subparsers``."""
    parser = subparsers.add_parser(
        "datasets",
        help="prepare and describe benchmark datasets (QM9, OC20, oc20-like)",
        description="Prepare benchmark datasets into the local cache and describe them.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="datasets_command", metavar="COMMAND", required=True)

    prep = commands.add_parser(
        "prepare",
        help="download or read a dataset and write its prepared cache file",
        description="Download (or read/generate) a dataset and write prepared/<NAME>.npz. "
        "Does nothing when the file exists from the same source, unless --force.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    prep.add_argument(
        "name", metavar="NAME", choices=sorted(DATASETS), help=f"dataset: {', '.join(DATASETS)}"
    )
    prep.add_argument(
        "--source", metavar="S", help="where to read it from (default: the first source listed)"
    )
    prep.add_argument("--force", action="store_true", help="prepare again even if cached")
    prep.add_argument(
        "--n-structures", type=int, metavar="N", help="oc20-like: systems to generate (2000)"
    )
    prep.add_argument("--seed", type=int, default=0, help="oc20-like: random seed (0)")
    prep.add_argument(
        "--subsets",
        metavar="LIST",
        help="oc20: comma-separated S2EF subsets, NAME or NAME:MD5 "
        "(default s2ef_train_200K,s2ef_val_id)",
    )
    prep.add_argument("--max-frames", type=int, metavar="N", help="oc20: frames kept per subset")
    prep.add_argument("--quiet", action="store_true", help="no progress bars")
    prep.set_defaults(func=run_prepare)

    show = commands.add_parser(
        "info",
        help="summarise a prepared dataset (preparing it first if missing)",
        description="Print sizes, units, source and graph statistics of a prepared dataset.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument(
        "name", metavar="NAME", choices=sorted(DATASETS), help=f"dataset: {', '.join(DATASETS)}"
    )
    show.add_argument("--json", action="store_true", help="print the summary as JSON")
    show.set_defaults(func=run_info)

    part = commands.add_parser(
        "subset",
        help="write a random part of a prepared dataset, compressed, to carry elsewhere",
        description="Write a seeded random choice of a prepared dataset's structures, "
        "compressed, to FILE: place it as prepared/<NAME>.npz under a machine's "
        "$EQUIBENCH_DATA_DIR where the dataset cannot be prepared (scripts/gpu_bundle.sh). "
        "Its metadata records that it is a subset; `datasets info` shows it.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    part.add_argument(
        "name", metavar="NAME", choices=sorted(DATASETS), help=f"dataset: {', '.join(DATASETS)}"
    )
    part.add_argument("--structures", type=int, required=True, metavar="N",
                      help="how many structures to keep")
    part.add_argument("--seed", type=int, default=0, help="random seed (0)")
    part.add_argument("--out", type=Path, required=True, metavar="FILE", help="file to write")
    part.set_defaults(func=run_subset)


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """Dataset-specific options from the command line (only those that were given)."""
    if args.name == "oc20-like":
        options: dict[str, Any] = {"seed": args.seed}
        if args.n_structures is not None:
            options["n_structures"] = args.n_structures
        return options
    if args.name == "oc20":
        options = {"max_frames": args.max_frames}
        if args.subsets:
            entries = [entry.split(":", 1) for entry in args.subsets.split(",") if entry]
            options["subsets"] = tuple(entry[0] for entry in entries)
            options["md5"] = {entry[0]: entry[1] for entry in entries if len(entry) == 2}
        return options
    return {}


def _download_errors_exit_1(command: Callable[[argparse.Namespace], int]
                            ) -> Callable[[argparse.Namespace], int]:
    """A download that fails (offline, bad checksum) ends ``command`` with its message and
    exit status 1; bad input (ValueError) is left to ``main``, which exits 2."""
    @functools.wraps(command)
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except DownloadError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1

    return wrapped


@_download_errors_exit_1
def run_prepare(args: argparse.Namespace) -> int:
    """``datasets prepare``."""
    start = time.perf_counter()
    print(f"preparing {args.name} ...", file=sys.stderr)
    dataset = prepare(
        args.name,
        source=args.source,
        force=args.force,
        progress=not args.quiet,
        **_options(args),
    )
    summary = describe(dataset)
    print(
        f"{args.name}: {summary['n_structures']} structures from {summary['source']} "
        f"-> {summary['prepared_file']} ({time.perf_counter() - start:.1f} s)",
        file=sys.stderr,
    )
    return 0


def _format(summary: dict[str, Any]) -> str:
    """Human-readable summary, one fact per line."""
    atoms, edges = summary["atoms_per_structure"], summary["edges_per_structure"]
    limit = edges["max_neighbors"]
    lines = [
        f"name            {summary['name']}" + ("  (SYNTHETIC)" if summary["synthetic"] else ""),
        f"source          {summary['source']}  {summary.get('source_detail', '')}",
        f"structures      {summary['n_structures']}",
        f"periodic        {summary['periodic']}",
        f"atoms/structure min {atoms['min']}  mean {atoms['mean']}  max {atoms['max']}",
        f"edges/structure min {edges['min']}  mean {edges['mean']}  max {edges['max']}  "
        f"(radius {edges['cutoff']} Å" + (f", max {limit} neighbours)" if limit else ")"),
        f"elements        {summary['elements']}",
        f"targets         {', '.join(summary['targets'] + summary['node_targets'])}",
        "units           " + ", ".join(f"{k}: {v}" for k, v in summary["units"].items()),
        f"file            {summary['prepared_file']} ({summary['prepared_bytes']} bytes)",
    ]
    if "subset" in summary:
        lines.insert(2, f"SUBSET          {summary['subset']['note']}")
    return "\n".join(lines)


@_download_errors_exit_1
def run_info(args: argparse.Namespace) -> int:
    """``datasets info``: print the summary (text or JSON)."""
    summary = info(args.name)
    print(json.dumps(summary, indent=2, ensure_ascii=False) if args.json else _format(summary))
    return 0


@_download_errors_exit_1
def run_subset(args: argparse.Namespace) -> int:
    """``datasets subset`` (an --out that is the cache's own file is bad input)."""
    part = write_subset(args.name, args.structures, args.seed, args.out)
    print(f"{args.name}: {part.metadata['subset']['note']} -> {args.out} "
          f"({args.out.stat().st_size / 2**20:.1f} MiB)", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m equibench.datasets.cli datasets ...``."""
    parser = argparse.ArgumentParser(prog="equibench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except ValueError as err:  # bad input: exit 2, as equibench's own main does
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
