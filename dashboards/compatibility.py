"""The "Compatibility" page: does each implementation still work when its step is compiled
or exported, at which derivative order, how long it takes to get going, and what it gains.

A table per level, workload, precision, batch and machine: a row per implementation and
mode (``equibench.vocabulary.MODES``), a column per direction. Each cell is coloured by its
row's status and shows the cold start (``cold_start_s``), the speedup over the eager row of
the same case (``equibench.paired.ratio``: paired per-round where the two were timed in the
same interleaved rounds) and, where the case did not pass, the first line of its reason.
Only the implementations with a compile or export row are shown; the eager rows are their
reference. The cells, one row each, are the page's CSV (:func:`matrix`).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
from equibench.dashboards.figures import esc
from equibench.dashboards.layout import Block

from equibench.analysis import MATCH_COLUMNS, REFERENCE, SAME_MACHINE, latest
from equibench.paired import ratio
from equibench.results import code_path
from equibench.vocabulary import DIRECTIONS, LEVELS, MODES, STATUSES, TIMED_STATUSES

CSV = "compatibility.csv"
REASON_CHARS = 120  # of a reason's first line shown in its cell; the whole is its title
# One table per group: what the cells of a table share (the machine: SAME_MACHINE).
GROUP = ["level", "workload", "precision", "batch", "device", "threads", "cpu_allocator",
         "machine", *SAME_MACHINE]
SERIES = [*GROUP, "implementation", "variant"]
COLUMNS = [*GROUP, "implementation", "variant", "mode", "direction", "status", "reason",
           "cold_start_s", "speedup", "speedup_q1", "speedup_q3", "paired", "first_call_s",
           "mode_detail", "fallback", "run_id", "git_commit"]
INTRO = (
    "Does each implementation still run, and still pass its gate, when its step is "
    "compiled or exported? <b>eager</b>: the step as written. <b>compile</b>: "
    "<code>torch.compile</code> of the whole step with Inductor, graph breaks allowed. "
    "<b>export</b>: the step traced through autograd with <code>make_fx</code>, exported with "
    "<code>torch.export</code> and run as an AOTInductor package. Compilation is never timed: "
    "it is in the <em>cold start</em>, the seconds from empty caches to the case's first "
    "result in a fresh process. The speedup is over the eager row of the same case timed in "
    "the same interleaved rounds: the median of the paired per-round ratios, with their "
    "interquartile range (<em>unpaired</em>: the ratio of medians of rows not timed "
    "together). A cell that did not pass shows its reason's first line; hover over it for "
    "the whole, or over a passing cell for how the mode ran.")
EMPTY = ("No compile or export cases in this run; the quick preset's "
         "<code>compile-modes</code> suite runs them.")


def _cases(frame: pd.DataFrame) -> pd.DataFrame:
    """The latest row of each case and machine, of the implementations (per group) that
    have a compile or export row."""
    rows = latest(frame, list(dict.fromkeys([*MATCH_COLUMNS, "mode", *SAME_MACHINE])))
    moded = rows.loc[rows["mode"] != "eager", SERIES].drop_duplicates()
    return rows.merge(moded, on=SERIES).reset_index(drop=True)


def _speedups(rows: pd.DataFrame) -> pd.DataFrame:
    """Each row's speedup over the eager row of its case, run and machine
    (``speedup``, ``speedup_q1``, ``speedup_q3``, ``paired``): NaN for eager rows and where
    either row has no times."""
    match = [c for c in dict.fromkeys([*MATCH_COLUMNS, "run_id", *SAME_MACHINE]) if c != "mode"]
    timed = rows["status"].isin(TIMED_STATUSES)
    eager = {tuple(r[match]): r for _, r in rows[timed & (rows["mode"] == "eager")].iterrows()}
    found = []
    for _, row in rows.iterrows():
        ref = eager.get(tuple(row[match]))
        usable = row["mode"] != "eager" and row["status"] in TIMED_STATUSES and ref is not None
        found.append(ratio(ref, row) if usable else (np.nan, np.nan, np.nan, False))
    return pd.DataFrame(found, columns=["speedup", "speedup_q1", "speedup_q3", "paired"],
                        index=rows.index)


def _order(cells: pd.DataFrame) -> pd.DataFrame:
    """Levels, modes and directions in the vocabulary's order; the reference
    implementation first, then by name."""
    key = {"level": lambda s: s.map(LEVELS.index), "mode": lambda s: s.map(MODES.index),
           "direction": lambda s: s.map(DIRECTIONS.index),
           "implementation": lambda s: s.map(lambda i: f"{i != REFERENCE:d} {i}")}
    by = ["level", "workload", "precision", "batch", "machine", "device", "threads",
          "cpu_allocator", "host", "implementation", "variant", "mode", "direction"]
    return cells.sort_values(by, key=lambda s: key[s.name](s) if s.name in key else s,
                             kind="stable").reset_index(drop=True)


def matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """The page's cells, one row each (:data:`COLUMNS`), ordered as the page shows them;
    empty when no row ran in a mode other than eager."""
    rows = _cases(frame)
    if rows.empty:
        return pd.DataFrame(columns=COLUMNS)
    extras = rows["extra"].map(lambda e: json.loads(e) if e else {})
    cells = pd.concat([rows, _speedups(rows)], axis=1).assign(
        first_call_s=extras.map(lambda e: float(e.get("first_call_s", math.nan))),
        mode_detail=extras.map(lambda e: str(e.get("mode_detail", ""))),
        fallback=rows["extra"].map(lambda e: code_path(e).get("fallback", "")))
    return _order(cells[COLUMNS])


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 100 else f"{value:.3g} s"


def _times(value: float) -> str:
    """A ratio with two decimals: ``1.00``, where ``.3g`` would print a bare ``1``."""
    return f"{value:.0f}" if value >= 100 else f"{value:.2f}"


def _speedup(cell: pd.Series) -> str:
    """``×1.80 over eager (1.70–1.90)``, or why there is none; '' for an untimed or eager
    cell."""
    if cell["mode"] == "eager" or cell["status"] not in TIMED_STATUSES:
        return ""
    if math.isnan(cell["speedup"]):
        return "no timed eager row to compare"
    if not cell["paired"]:
        return f"×{_times(cell['speedup'])} over eager (unpaired)"
    return (f"×{_times(cell['speedup'])} over eager "
            f"({_times(cell['speedup_q1'])}–{_times(cell['speedup_q3'])})")


def _reason_line(reason: str) -> str:
    """A reason's first line, cut to :data:`REASON_CHARS`; '…' where anything is left out."""
    lines = reason.strip().splitlines() or [""]
    first = lines[0]
    if len(first) > REASON_CHARS:
        return first[:REASON_CHARS - 1] + "…"
    return first + ("…" if len(lines) > 1 else "")


def _cell(cell: pd.Series | None) -> str:
    """One cell's ``<td>``: its status, cold start, speedup and reason, every string from
    the row escaped."""
    if cell is None:
        return '<td class="compat-none">not run</td>'
    status = cell["status"]
    parts = [f"<b>{esc(status)}</b>"]
    if not math.isnan(cell["cold_start_s"]):
        parts.append(f"cold start {_seconds(cell['cold_start_s'])}")
    if speedup := _speedup(cell):
        parts.append(esc(speedup))
    title = cell["mode_detail"]
    if status != "ok" and cell["reason"]:
        parts.append(f'<span class="reason">{esc(_reason_line(cell["reason"]))}</span>')
        title = cell["reason"]
    tip = f' title="{esc(title)}"' if title else ""
    return f'<td class="compat-{esc(status)}"{tip}>{"<br>".join(parts)}</td>'


def _series_header(part: pd.DataFrame, span: int) -> str:
    """The implementation[variant] of a table's rows, marked ``(fallback)`` when any of
    them ran a path that is not the implementation's product (its title says which)."""
    impl, variant = part["implementation"].iloc[0], part["variant"].iloc[0]
    label = impl if variant == "default" else f"{impl} [{variant}]"
    fallbacks = sorted({f for f in part["fallback"] if f})
    if not fallbacks:
        return f'<th rowspan="{span}">{esc(label)}</th>'
    return (f'<th rowspan="{span}" title="{esc("; ".join(fallbacks))}">'
            f'{esc(label + " (fallback)")}</th>')


def _heading(group: pd.Series) -> str:
    """What a table's cells share: level, workload, precision, batch and machine."""
    where = [str(group["device"]), f"host {group['host']}"]
    if group["device"] == "cpu":
        where.append(f"{group['threads']} thread{'' if group['threads'] == 1 else 's'}")
    if group["cpu_allocator"]:
        where.append(str(group["cpu_allocator"]))
    return esc(f"{group['level']} · {group['workload']} · {group['precision']} · batch "
               f"{group['batch']} · {group['machine']} ({', '.join(where)})")


def _table(cells: pd.DataFrame) -> str:
    """One group's table: a row per implementation and mode, a column per direction."""
    directions = list(dict.fromkeys(cells["direction"]))
    modes = list(dict.fromkeys(cells["mode"].sort_values(key=lambda s: s.map(MODES.index))))
    by_cell = {(r["implementation"], r["variant"], r["mode"], r["direction"]): r
               for _, r in cells.iterrows()}
    head = "".join(f"<th>{esc(d)}</th>" for d in ["implementation", "mode", *directions])
    body = []
    for (impl, variant), part in cells.groupby(["implementation", "variant"], sort=False):
        for i, mode in enumerate(modes):
            row = _series_header(part, len(modes)) if i == 0 else ""
            row += f"<th>{esc(mode)}</th>" + "".join(
                _cell(by_cell.get((impl, variant, mode, d))) for d in directions)
            body.append(f"<tr>{row}</tr>")
    return (f'<h3>{_heading(cells.iloc[0])}</h3><table class="compat">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def _legend() -> str:
    """The status colours, in a row of cells of the same classes as the tables'."""
    swatches = "".join(f'<td class="compat-{s}">{s}</td>' for s in STATUSES)
    return (f'<table class="compat legend"><tbody><tr><th>status</th>{swatches}'
            '<td class="compat-none">not run</td></tr></tbody></table>')


def blocks(cells: pd.DataFrame) -> list[Block]:
    """The page from its cells (:func:`matrix`); says so when there are none."""
    intro = f'<p class="note">{INTRO}</p>'
    if cells.empty:
        return [intro, '<p class="empty">no rows</p>', f'<p class="note">{EMPTY}</p>']
    tables = [_table(part) for _, part in cells.groupby(GROUP, sort=False)]
    return [intro, _legend(), *tables,
            f'<p class="note">Every cell, with its numbers, in <a href="{CSV}">{CSV}</a>.</p>']
