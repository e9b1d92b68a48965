"""``equibench publish``: one static site from the result tables of many machines.

``equibench.cli.build_parser`` calls :func:`add_parsers` with its subparsers. Each input is
a result table or a run folder (``results/<name>/``, read through its ``results.parquet``);
their rows go into one site (``equibench.dashboards.site.write_site``) whose Machines page
and figure menus tell the machines apart. Heavy imports (pandas) happen inside the command,
so ``equibench --help`` stays quick.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

FIX = ("give result tables (.parquet, as `equibench run --out`, `sweep` and `merge` write "
       "them) or run folders that hold results.parquet")
PROBES = "probes.json"  # every input's machine.json, as one list, in the site


def _table(path: Path) -> pd.DataFrame:
    """The validated rows of one input; a ``FileNotFoundError`` or ``ValueError`` naming
    the file and the fix when it is missing or not a result table."""
    from equibench import results

    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory; {FIX}")
    try:
        return results.read(path)
    except FileNotFoundError:  # a folder without a table under it
        raise FileNotFoundError(f"{path}: no result table in this folder; {FIX}") from None
    except results.SchemaError as err:
        # read() names the file that failed (in a folder: the table under it).
        raise ValueError(f"{err}: not a result table of this equibench; {FIX}") from None
    except (OSError, ValueError) as err:  # not parquet at all: pyarrow's errors
        raise ValueError(f"{path}: not readable as a result table ({err}); {FIX}") from None


def _probe_file(path: Path) -> Path | None:
    """The ``equibench probe`` output that goes with an input: ``machine.json`` in a run
    folder; ``NAME.machine.json`` (the committed baselines') or ``machine.json`` beside a
    table."""
    candidates = ([path / "machine.json"] if path.is_dir() else
                  [path.with_name(path.name.removesuffix(".parquet") + ".machine.json"),
                   path.with_name("machine.json")])
    return next((c for c in candidates if c.is_file()), None)


def _once(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows given twice (a run folder and its own results.parquet, one table named twice)
    counted once: equal in every column but the sample lists, which the times summarise."""
    from equibench.results import COLUMNS

    scalar = [c.name for c in COLUMNS if c.kind != "list"]
    once = frame.drop_duplicates(scalar, ignore_index=True)
    if len(once) < len(frame):
        print(f"{len(frame) - len(once)} row(s) given more than once, counted once",
              flush=True)
    return once


def _summary(frame: pd.DataFrame) -> str:
    """Where a table's rows ran: its runs and machines (hardware label and host)."""
    from equibench.analysis import machine_labels

    machines = zip(machine_labels(frame), frame["host"], strict=True)
    hosts = sorted({f"{machine} (host {host})" for machine, host in machines})
    return f"{len(frame)} rows, {frame['run_id'].nunique()} run(s) on " + "; ".join(hosts)


def cmd_publish(args: argparse.Namespace) -> int:
    import pandas as pd

    from equibench.dashboards.controls import configurations
    from equibench.dashboards.site import write_site

    frames, probes = [], []
    for path in map(Path, args.results):
        frame = _table(path)
        print(f"read {path}: {_summary(frame)}", flush=True)
        frames.append(frame)
        probe = _probe_file(path)
        if probe is not None:
            probes.append(json.loads(probe.read_text()))
    frame = _once(pd.concat(frames, ignore_index=True))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # Written even when empty, so that a probe left by an earlier publish never draws.
    (out / PROBES).write_text(json.dumps(probes, indent=2))
    index = write_site(frame, out, history=args.history or pd.DataFrame(),
                       machine_json=out / PROBES,
                       gpu_kernel_table=args.gpu_kernels or None)
    found = configurations(frame)["configuration"].value_counts().sort_index()
    print(f"{len(found)} machine configuration(s):")
    for configuration, rows in found.items():
        print(f"  {configuration}: {rows} rows")
    print(f"site: {index} (machines: {out / 'machines.html'})")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add ``publish`` to the ``equibench`` parser's subparsers."""
    p = sub.add_parser(
        "publish", help="one static site from the result tables of several machines",
        description="Read result tables and run folders from any number of machines and "
                    "write one static site: every page of `equibench dashboard`, each "
                    "figure's menu listing the machines (a configuration each where one "
                    "machine ran with several hosts, allocators or thread counts), and a "
                    "Machines page with each machine's hardware and settings, its runs, and "
                    "the speedups over e3nn each measured on the cases they share. Across "
                    "machines only paired speedups and roofline fractions are compared, "
                    "never raw times. The machine.json of each input (in a run folder, or "
                    "NAME.machine.json beside a table) draws its roofline ceilings.")
    p.add_argument("results", nargs="+", metavar="RESULTS",
                   help="result tables (parquet) or run folders holding results.parquet")
    p.add_argument("--out", required=True, help="output directory of the site")
    p.add_argument("--history", default="",
                   help="history table for the History page (default: none)")
    p.add_argument("--gpu-kernels", default="",
                   help="table of `equibench gpu-compile` for the GPU kernels page (default: "
                        "gpu-kernels.parquet beside --out, else the committed "
                        "results/baselines/gpu-kernels.parquet)")
    p.set_defaults(func=cmd_publish)
