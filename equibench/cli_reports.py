"""Report commands of the ``equibench`` CLI: claims, compare, import, history.

``equibench.cli.build_parser`` calls :func:`add_parsers` with its subparsers. Heavy
imports (pandas, scipy) happen inside the commands, so ``equibench --help`` stays quick.
"""

from __future__ import annotations

import argparse

from equibench.vocabulary import METRICS


def _print_frame(frame, markdown: bool) -> None:
    import pandas as pd

    if markdown:
        head = "| " + " | ".join(frame.columns) + " |"
        rule = "|" + "---|" * len(frame.columns)
        body = ["| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |"
                for row in frame.itertuples(index=False)]
        print("\n".join([head, rule, *body]))
        return
    with pd.option_context("display.max_rows", 1000, "display.width", 250,
                           "display.max_colwidth", 70):
        print(frame.to_string(index=False))


def cmd_claims(args: argparse.Namespace) -> int:
    from equibench import claims, results

    frame = results.read(args.results)
    evaluated = claims.evaluate(claims.load(args.claims), frame, resamples=args.resamples,
                                run_spread=(claims.SINGLE_RUN_SPREAD if args.run_spread is None
                                            else args.run_spread))
    _print_frame(claims.table(evaluated), args.markdown)
    if args.pairs:
        print()
        _print_frame(claims.pairs_table(evaluated), args.markdown)
    return 0


def _metrics(text: str) -> dict[str, float | None]:
    """``status,memory:2`` -> {"status": None, "memory": 2.0} (None: the threshold)."""
    chosen: dict[str, float | None] = {}
    for item in (t.strip() for t in text.split(",")):
        if not item:
            continue
        kind, _, factor = item.partition(":")
        if kind not in METRICS:
            raise argparse.ArgumentTypeError(f"unknown metric {kind!r}; choose from "
                                             f"{', '.join(METRICS)}")
        try:
            chosen[kind] = float(factor) if factor else None
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{item!r}: the factor after ':' must be a number, e.g. memory:2") from None
    return chosen


def cmd_compare(args: argparse.Namespace) -> int:
    from equibench import compare, results

    changes = compare.compare(results.read(args.base), results.read(args.new),
                              threshold=args.threshold, alpha=args.alpha,
                              reference=args.reference, gate=args.gate)
    print(compare.markdown(changes, show_all=args.all))
    return 1 if any(c.fails for c in changes) else 0


def cmd_import(args: argparse.Namespace) -> int:
    from equibench import pytest_benchmark_import, results

    imported = pytest_benchmark_import.read(args.json, run_id=args.run_id)
    for name in imported.skipped:
        print(f"skipped {name}")
    if imported.frame.empty:
        raise ValueError(f"{args.json}: no benchmark named its case (workload, implementation "
                         "and batch in extra_info or params); nothing written")
    results.write_atomic(imported.frame, args.out)
    print(f"wrote {args.out}: {len(imported.frame)} rows")
    return 0


def cmd_history_add(args: argparse.Namespace) -> int:
    from equibench import history, results

    merged, added = history.add(results.read(args.results), args.history, args.reference)
    print(f"{args.history}: added {added} ratio(s); {len(merged)} in all, "
          f"{merged['git_commit'].nunique()} commit(s)")
    return 0


def cmd_history_show(args: argparse.Namespace) -> int:
    from equibench import history

    frame = history.read(args.history)
    if frame.empty:
        print(f"{args.history}: no history yet; add a run with `equibench history add`")
        return 0
    cols = ["timestamp", "git_commit", "machine", "workload", "implementation", "direction",
            "precision", "batch", "speedup"]
    view = frame[cols].copy()
    view["git_commit"] = view["git_commit"].str.slice(0, 10)
    _print_frame(view, markdown=False)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add the report subcommands to the ``equibench`` parser's subparsers."""
    p = sub.add_parser(
        "claims", help="check published claims against result tables",
        description="Evaluate every claim of the claims file against the results: the "
                    "ratio the claim's wording supports (max over matched pairs for 'up to' "
                    "claims, else their geometric mean), min / geomean / max over the pairs, "
                    "a bootstrap 95% interval over runs and rounds, hardware match and "
                    "verdict. Give several runs (files or directories) to measure the "
                    "run-to-run spread; a one-run interval is widened by --run-spread.")
    p.add_argument("results", nargs="+", help="result files or directories")
    p.add_argument("--claims", help="claims YAML (default: the packaged claims.yaml)")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--run-spread", type=float, default=None,
                   help="factor (x/÷) that widens the interval of a claim measured in one "
                        "run, for the run-to-run spread it cannot show (default: "
                        "claims.SINGLE_RUN_SPREAD, 1.38, measured between runs on the CI VM by "
                        "benchmarks/noise.py; 1: none)")
    p.add_argument("--pairs", action="store_true",
                   help="also print every matched pair with its ratio and interval")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    p.set_defaults(func=cmd_claims)

    p = sub.add_parser(
        "compare", help="flag regressions between a baseline and a new result table",
        description="Match cases on their key columns, threads and CPU allocator. A case "
                    "whose status got worse, or that the new run lacks, is a regression. "
                    "Compare each case's speedup over its group's reference measured in the "
                    "same run (paired round by round where the rows were interleaved), and "
                    "raw times and memory where both ran on the same machine. A regression "
                    "passes the ratio threshold and a one-sided test (Mann-Whitney U, or "
                    "Welch's t on logarithms where the samples are too few for ranks); each "
                    "row says the smallest change its samples could detect. Exit status 1 "
                    "on a regression.")
    p.add_argument("base", help="baseline result file or directory")
    p.add_argument("new", help="new result file or directory")
    p.add_argument("--threshold", type=float, default=1.10,
                   help="smallest factor that counts as a change (default 1.10)")
    p.add_argument("--alpha", type=float, default=0.05,
                   help="significance level of the rank test (default 0.05)")
    p.add_argument("--reference", default="e3nn", help="reference implementation")
    p.add_argument("--gate", type=_metrics, default=dict.fromkeys(METRICS),
                   help="comma-separated metrics whose regressions fail the check, from "
                        f"{','.join(METRICS)} (default: all); the others are reported, for "
                        "a shared machine whose speed drifts between runs. METRIC:FACTOR "
                        "fails from that factor on and reports smaller changes (e.g. "
                        "memory:2)")
    p.add_argument("--all", action="store_true", help="list unchanged cases too")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser(
        "import", help="convert pytest-benchmark JSON into a result table",
        description="Read a file written by `pytest --benchmark-json` (samples kept with "
                    "--benchmark-save-data) into the result schema.")
    p.add_argument("json", help="pytest-benchmark JSON file")
    p.add_argument("--out", required=True, help="result table to write (parquet)")
    p.add_argument("--run-id", help="run id of the rows (default: from the file's datetime)")
    p.set_defaults(func=cmd_import)

    p = sub.add_parser("history", help="track speedups over commits")
    history_sub = p.add_subparsers(dest="history_command", required=True, metavar="ACTION")
    q = history_sub.add_parser("add", help="append a run's speedups over the reference")
    q.add_argument("results", nargs="+", help="result files or directories")
    q.add_argument("--history", default="results/history.parquet",
                   help="history table (default results/history.parquet)")
    q.add_argument("--reference", default="e3nn", help="reference implementation")
    q.set_defaults(func=cmd_history_add)
    q = history_sub.add_parser("show", help="print the history")
    q.add_argument("--history", default="results/history.parquet",
                   help="history table (default results/history.parquet)")
    q.set_defaults(func=cmd_history_show)
