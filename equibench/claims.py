"""Published claims, checked against result tables.

A claim (``claims.yaml``) is a ratio of one quantity between two selected sets of cases,
or an absolute value of one set. :func:`evaluate` pairs the rows of each run (both sides
from one run, host and machine; a run is one ``run_id``, unique per invocation), computes
the ratio per pair and run (rows timed in the same interleaved rounds: the median of the
per-round ratios), and takes, per pair, the median over the runs that measured it. Every
pair is listed (``ClaimResult.pair_list``) with the min, geometric mean and max over pairs;
the claim's measured value is the aggregate its wording supports: for "up to N x" claims
the upper quartile over pairs (``upper_quartile``: a quarter of the pairs reach it, so one
noisy pair cannot carry the claim as the maximum let it), else the geometric mean.

Rows that can never be evidence (:func:`excluded`): any status but ``ok`` (an
``unverifiable`` row included), synthetic rows, rows measured on a disturbed machine, a
fallback code path (``extra.code_path.fallback``, e.g. cuEquivariance's pure-PyTorch path)
and amortized rows (``extra.amortized``: work done outside the timed call). The note counts
those left out. A ``max_batch`` ratio also needs the denominator's out-of-memory at the next
batch it tried above its largest ok batch; otherwise its limit was never measured and the
claim is ``not measured``, saying why. The project's own targets (``targets.yaml``,
``equibench.targets``) are judged by this engine too.

The 95% interval is a bootstrap over runs and, within each run, over its interleaved rounds
(or raw samples where rows were timed apart), so it holds the run-to-run spread where the
tables hold several runs of the machine. From one run that spread cannot be measured: the
interval is then widened by ``run_spread`` (default :data:`SINGLE_RUN_SPREAD`, measured on
the CI VM by ``benchmarks/noise.py``) and the note says so.

Verdict rule, per claim and machine:

- ``not measured``: the claim is marked ``measurable: false``, or no rows that can count
  match it (per machine where rows matched but none can count, with the reasons);
- ``different hardware``: rows matched, but the machine (the GPU name, else the CPU model)
  does not name the claim's ``hardware`` (as a token: ``A100`` is in
  ``NVIDIA A100-SXM4-80GB``, not in ``RTX A1000``); never ``reproduced``;
- ``different size``: the hardware matches, but the claim's batch was not run there, so the
  value is at the largest batch that was (a claim whose selectors fix one batch is measured
  at the largest batch both sides ran when its own is missing, e.g. the claims preset's
  smaller CPU sizes, and the note names both batches);
- ``reproduced``: the hardware matches and the interval's lower bound is at least
  ``claimed / tolerance`` (tolerance 1.1 by default: the claim holds to within 10%, and
  noise alone cannot carry it, since the whole interval must clear the bar);
- ``not reproduced``: the hardware matches, and the lower bound falls short.
"""

from __future__ import annotations

import importlib.resources
import json
import math
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TypeVar

import numpy as np
import pandas as pd
import yaml

from equibench.analysis import KEY_COLUMNS, machine_labels
from equibench.paired import is_paired, samples_of
from equibench.results import code_path

T = TypeVar("T")
REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
DIFFERENT_HARDWARE = "different hardware"
DIFFERENT_SIZE = "different size"
NOT_MEASURED = "not measured"

# quantity -> bigger is better
QUANTITIES = {"throughput": True, "time": False, "peak_tensor_bytes": False,
              "max_batch": True}
AGGREGATES = ("geomean", "upper_quartile")
SELECTOR_COLUMNS = ("level", "workload", "implementation", "variant", "direction", "precision",
                    "batch")
BOOTSTRAP_RESAMPLES = 2000
# Run-to-run change of paired speedups between two runs of unchanged code on the 2-core CI
# VM (benchmarks/noise.py, 87 tp and conv cases, quick preset): 95th percentile of
# |log(b / a)| = log 1.38 (median 1.12, worst 1.79). A one-run interval is widened by it.
SINGLE_RUN_SPREAD = 1.38
WORDING = {"upper_quartile": "up to (upper quartile over pairs: a quarter reach it)",
           "geomean": "typical (geometric mean over pairs)"}


@dataclass(frozen=True)
class Claim:
    """One published claim and how to measure it."""

    id: str
    source: str
    statement: str
    claimed: float
    hardware: str
    # Which published version says this (a claim revised between versions is one entry per
    # version, same id) and when it was published ('' where not known).
    version: str = ""
    date: str = ""
    conditions: str = ""
    quantity: str = "throughput"
    numerator: Mapping[str, object] = field(default_factory=dict)
    denominator: Mapping[str, object] | None = None  # None: an absolute value
    aggregate: str = "geomean"
    scale: float = 1.0
    unit: str = "x"
    tolerance: float = 1.1
    measurable: bool = True
    reason: str = ""
    # What GPU-only thing the claim's cases need ('' if none): said where none of them ran.
    needs_gpu: str = ""
    # Pairs only at the largest batch both sides ran (per pair otherwise alike, run and
    # machine), e.g. "at the largest batch where both ran".
    largest_batch: bool = False

    def __post_init__(self) -> None:
        if self.quantity not in QUANTITIES:
            raise ValueError(f"claim {self.id}: quantity {self.quantity!r} is not one of "
                             f"{', '.join(QUANTITIES)}")
        if self.aggregate not in AGGREGATES:
            raise ValueError(f"claim {self.id}: aggregate {self.aggregate!r} is not one of "
                             f"{', '.join(AGGREGATES)}")
        if self.tolerance < 1:
            raise ValueError(f"claim {self.id}: tolerance must be >= 1, got {self.tolerance}")
        if not self.measurable:
            if not self.reason:
                raise ValueError(f"claim {self.id}: measurable: false needs a reason")
            return
        if not self.numerator:
            raise ValueError(f"claim {self.id}: a measurable claim needs a numerator selector")
        for side in (self.numerator, self.denominator or {}):
            unknown = set(side) - set(SELECTOR_COLUMNS)
            if unknown:
                raise ValueError(f"claim {self.id}: selector column(s) {sorted(unknown)} not "
                                 f"in {', '.join(SELECTOR_COLUMNS)}")
        if self.quantity == "max_batch" and self.denominator is None:
            raise ValueError(f"claim {self.id}: max_batch is only meaningful as a ratio")
        if self.largest_batch and ("batch" in self.numerator or self.quantity == "max_batch"):
            raise ValueError(f"claim {self.id}: largest_batch picks the batch itself; fix "
                             "none in the selectors (and not with max_batch)")
        if self.denominator is not None and \
                ("batch" in self.numerator) != ("batch" in self.denominator):
            # A batch fixed on one side only would pair that batch with every batch of
            # the other side.
            raise ValueError(f"claim {self.id}: fix batch on both selectors or on neither")

    @property
    def higher_is_better(self) -> bool:
        return QUANTITIES[self.quantity]

    @property
    def batch(self) -> int | None:
        """The one batch both selectors fix (the claim's own size), else None."""
        batch = self.numerator.get("batch")
        if not isinstance(batch, int) or isinstance(batch, bool):
            return None
        return batch if self.denominator is None or self.denominator.get("batch") == batch \
            else None

    def at_any_batch(self) -> Claim:
        """The same claim with its batch left free (pairs then match batch to batch)."""
        def free(selector: Mapping[str, object]) -> dict[str, object]:
            return {k: v for k, v in selector.items() if k != "batch"}
        return replace(self, numerator=free(self.numerator),
                       denominator=None if self.denominator is None else free(self.denominator))


@dataclass(frozen=True)
class PairResult:
    """One matched pair (or, for an absolute claim, one row) of a claim on one machine:
    the numerator and denominator cases, the runs that measured it, its ratio (median over
    those runs) and its own 95% interval."""

    numerator: str
    denominator: str
    runs: int
    ratio: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class ClaimResult:
    """A claim's verdict on one machine (or on none, when not measured).

    ``measured`` is the aggregate the claim's wording supports (``claim.aggregate``);
    ``pair_min``/``pair_geomean``/``pair_max`` summarize ``pair_list`` whatever the wording.
    ``ci_low``/``ci_high`` (and each pair's) are widened for run-to-run spread where one run
    measured a timing.
    """

    claim: Claim
    verdict: str
    machine: str = ""
    measured: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    pairs: int = 0
    hardware_match: bool = False
    note: str = ""
    runs: int = 0
    pair_min: float = math.nan
    pair_geomean: float = math.nan
    pair_max: float = math.nan
    pair_list: tuple[PairResult, ...] = ()


def load_entries(path: str | Path | None, packaged: str, key: str, kind: type[T]
                 ) -> tuple[list[T], dict, str]:
    """The entries under ``key`` of the YAML file ``path`` (else equibench's packaged file
    ``packaged``), each built as ``kind`` (a dataclass: an unknown key is named), with the
    whole document and the file's name for messages. ``claims.yaml`` and ``targets.yaml``
    are read by it."""
    if path is None:
        text = importlib.resources.files("equibench").joinpath(packaged).read_text()
        where = f"equibench/{packaged}"
    else:
        text, where = Path(path).read_text(), str(path)
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise ValueError(f"{where} is not valid YAML: {err}") from None
    allowed = {f.name for f in fields(kind)}
    entries = []
    for entry in data.get(key, []):
        unknown = set(entry) - allowed
        if unknown:
            raise ValueError(f"{where}: {key[:-1]} {entry.get('id', '?')}: unknown key(s) "
                             f"{sorted(unknown)}; allowed: {', '.join(sorted(allowed))}")
        entries.append(kind(**entry))
    return entries, data, where


def load(path: str | Path | None = None) -> list[Claim]:
    """The claims in ``path``, or the packaged ``claims.yaml``."""
    claims, _, where = load_entries(path, "claims.yaml", "claims", Claim)
    keys = [(c.id, c.version) for c in claims]
    duplicated = sorted({f"{i} {v}".strip() for i, v in keys if keys.count((i, v)) > 1})
    if duplicated:
        raise ValueError(f"{where}: duplicate claim id(s) {duplicated}: a revised claim "
                         "needs a distinct `version` per entry")
    return claims


def select(frame: pd.DataFrame, selector: Mapping[str, object]) -> pd.DataFrame:
    """The rows of ``frame`` that a claim's (or a target's) selector picks: eager rows
    unless it names a ``mode`` (a claim is about an implementation as its users run it)."""
    mask = np.ones(len(frame), dtype=bool)
    for column, wanted in {"mode": "eager", **selector}.items():
        values = wanted if isinstance(wanted, list) else [wanted]
        mask &= frame[column].astype(str).isin([str(v) for v in values]).to_numpy()
    return frame[mask]


def _pair_keys(claim: Claim) -> list[str]:
    """Columns both sides of a pair share: every key column the selectors do not contrast,
    and the machine. Both sides also come from one run and host (see :func:`_pairs`)."""
    den = claim.denominator or {}
    keys = [c for c in KEY_COLUMNS if claim.numerator.get(c) == den.get(c)]
    if claim.quantity == "max_batch":
        keys.remove("batch")
    return [*keys, "machine"]


class _Bootstrap:
    """Per-row bootstrap replicates of a quantity; each row is resampled once per replicate,
    so a row shared by several pairs moves consistently in every replicate."""

    def __init__(self, quantity: str, resamples: int, seed: int) -> None:
        self.quantity = quantity
        self.resamples = resamples
        self.rng = np.random.default_rng(seed)
        self._cache: dict[int, np.ndarray] = {}
        self._round_picks: dict[str, np.ndarray] = {}

    def point(self, row: pd.Series) -> float:
        if self.quantity == "throughput":
            return row["batch"] / row["time_median_s"]
        if self.quantity == "time":
            return row["time_median_s"]
        if self.quantity == "max_batch":
            return float(row["batch"])  # the row kept is the group's largest ok batch
        return float(row[self.quantity])

    def replicates(self, index: int, row: pd.Series) -> np.ndarray:
        if index not in self._cache:
            self._cache[index] = self._draw(row)
        return self._cache[index]

    def paired(self, num: pd.Series, den: pd.Series) -> tuple[float, np.ndarray]:
        """Ratio of two rows timed in the same interleaved rounds, oriented as ``_pair_value``
        orients it (> 1 favours the numerator): the median of the per-round ratios, and
        replicates that resample the rounds (the same picks for every row of those rounds,
        so that shared rows move consistently)."""
        t_num = np.asarray(num["round_times_s"], dtype=float)
        t_den = np.asarray(den["round_times_s"], dtype=float)
        ratios = t_den / t_num  # time: lower is better
        if self.quantity == "throughput":  # items per second
            ratios = ratios * (num["batch"] / den["batch"])
        picks = self._round_picks.get(num["rounds_id"])
        if picks is None:
            picks = self.rng.integers(0, ratios.size, size=(self.resamples, ratios.size))
            self._round_picks[num["rounds_id"]] = picks
        return float(np.median(ratios)), np.median(ratios[picks], axis=1)

    def _draw(self, row: pd.Series) -> np.ndarray:
        if self.quantity not in ("throughput", "time"):
            return np.full(self.resamples, self.point(row))  # one number, no samples
        samples = samples_of(row)
        picks = self.rng.integers(0, samples.size, size=(self.resamples, samples.size))
        medians = np.median(samples[picks], axis=1)
        return row["batch"] / medians if self.quantity == "throughput" else medians


def excluded(row: pd.Series) -> str:
    """Why an ok row cannot be evidence for a claim or a target ('' when it can): synthetic
    (``extra.synthetic``: never measured), measured on a disturbed machine (``disturbed``),
    a fallback code path (``extra.code_path.fallback``: not the product the ratio is about)
    or amortized (``extra.amortized``: part of its work was done outside the timed call)."""
    extra = json.loads(row["extra"]) if row["extra"] else {}
    if extra.get("synthetic"):
        return "synthetic rows (not measured)"
    if row["disturbed"]:
        return "measured on a disturbed machine"
    fallback = code_path(row["extra"]).get("fallback", "")
    if fallback:
        return f"fallback: {fallback}"
    if extra.get("amortized"):
        return "amortized (work done outside the timed call)"
    return ""


def _case(row: pd.Series) -> str:
    """A case without its batch (as a max-batch note names it)."""
    return side(row).rsplit(" b=", 1)[0]


def _unconfirmed_limits(claim: Claim, frame: pd.DataFrame, ok: pd.DataFrame,
                        why: pd.Series) -> pd.Series:
    """``why`` with a reason for every denominator row of a ``max_batch`` claim whose largest
    ok batch is not shown to be its limit: the next batch it tried above it (any status, in
    ``frame``) must have run out of memory (``oom``). Without that the ratio would be bounded
    by the batches the sweep happened to run, or by a timeout or error, not by memory."""
    assert claim.denominator is not None  # max_batch claims are ratios (Claim checks it)
    keys = [*_pair_keys(claim), "run_id", "host"]
    tried = select(frame, claim.denominator).copy()
    tried["machine"] = machine_labels(tried)
    tried_groups = dict(list(tried.groupby(keys, sort=False, dropna=False)))
    den = select(ok[why == ""], claim.denominator)
    why = why.copy()
    for key, rows in den.groupby(keys, sort=False, dropna=False):
        largest = int(rows["batch"].max())
        above = tried_groups[key]
        above = above[above["batch"] > largest]
        if above.empty:
            found = (f"its largest ok batch {largest} is the largest it ran, so its "
                     "out-of-memory size is not measured")
        else:
            nxt = above[above["batch"] == above["batch"].min()]
            if (nxt["status"] == "oom").all():
                continue
            first = nxt[nxt["status"] != "oom"].iloc[0]
            status = (f"ok but cannot count ({why.get(first.name, '')})"
                      if first["status"] == "ok" else
                      f"{first['status']} ({str(first['reason'])[:80]})")
            found = (f"after its largest ok batch {largest}, batch {int(first['batch'])} was "
                     f"{status}, not out of memory")
        why[rows.index] = f"max batch not measured: {_case(rows.iloc[0])}: {found}"
    return why


def _max_batch_rows(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per group: the largest batch that ran ok."""
    return rows.sort_values("batch").groupby(keys, as_index=False).tail(1)


def _pairs(claim: Claim, ok: pd.DataFrame) -> pd.DataFrame:
    """One row per pair and run: ``num_index`` and ``den_index`` (rows of ``ok``), ``run``
    (run and host), ``machine`` and the pair's identity columns (:func:`_pair_keys`), which
    are the same in every run. An absolute claim has numerator rows only."""
    keys = _pair_keys(claim)
    run = ["run_id", "host"]
    num = select(ok, claim.numerator)
    if claim.denominator is None:
        pairs = num[[*keys, *run]].assign(num_index=num.index)
    else:
        den = select(ok, claim.denominator)
        if claim.quantity == "max_batch":
            num, den = _max_batch_rows(num, keys + run), _max_batch_rows(den, keys + run)
        left = num[[*keys, *run]].assign(num_index=num.index)
        right = den[[*keys, *run]].assign(den_index=den.index)
        pairs = left.merge(right, on=[*keys, *run])
    if claim.largest_batch and not pairs.empty:
        alike = [k for k in keys if k != "batch"] + run
        pairs = pairs[pairs["batch"] == pairs.groupby(alike)["batch"].transform("max")]
    return pairs.assign(run=pairs["run_id"].astype(str) + "@" + pairs["host"].astype(str))


def side(row: pd.Series) -> str:
    """A case as the pairs list names it."""
    variant = "" if row["variant"] == "default" else f"[{row['variant']}]"
    return (f"{row['implementation']}{variant} {row['level']}/{row['workload']} "
            f"{row['direction']} {row['precision']} b={row['batch']}")


def _pair_value(claim: Claim, boot: _Bootstrap, ok: pd.DataFrame, pair: pd.Series
                ) -> tuple[float, np.ndarray]:
    """The pair's ratio (oriented so that > 1 favours the numerator) and its replicates."""
    num = ok.loc[pair["num_index"]]
    point, reps = boot.point(num), boot.replicates(pair["num_index"], num)
    if claim.denominator is None:
        return point * claim.scale, reps * claim.scale
    den = ok.loc[pair["den_index"]]
    if claim.quantity in ("throughput", "time") and is_paired(num, den):
        return boot.paired(num, den)
    den_point, den_reps = boot.point(den), boot.replicates(pair["den_index"], den)
    if claim.higher_is_better:
        return point / den_point, reps / den_reps
    return den_point / point, den_reps / reps


def _left_out(pairs: pd.DataFrame, why: pd.Series) -> str:
    """The rows of ``pairs`` that cannot count, by reason: '3 x measured on a disturbed
    machine; 1 x fallback: ...' ('' when every row counts)."""
    indices = sorted({*pairs["num_index"], *pairs.get("den_index", [])})
    reasons = why[indices]
    counts = reasons[reasons != ""].value_counts(sort=False)
    return "; ".join(f"{n} x {reason}" for reason, n in sorted(counts.items()))


def _aggregate(ratios: np.ndarray, how: str) -> np.ndarray:
    """Aggregate over the last axis (pairs)."""
    if how == "upper_quartile":
        return np.percentile(ratios, 75, axis=-1)
    return np.exp(np.log(ratios).mean(axis=-1))


def hardware_matches(hardware: str, machine: str) -> bool:
    """Whether ``machine`` names ``hardware`` as a whole token: ``A100`` matches
    ``NVIDIA A100-SXM4-80GB`` but not ``NVIDIA RTX A1000``."""
    pattern = rf"(?<![A-Za-z0-9]){re.escape(hardware)}(?![0-9])"
    return re.search(pattern, machine, re.IGNORECASE) is not None


def _verdict(claim: Claim, machine: str, ci_low: float) -> tuple[bool, str]:
    match = hardware_matches(claim.hardware, machine)
    if not match:
        return False, DIFFERENT_HARDWARE
    return True, REPRODUCED if ci_low >= claim.claimed / claim.tolerance else NOT_REPRODUCED


def _over_runs(points: np.ndarray, reps: np.ndarray, run_picks: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per pair, the median over runs of ``points (P, U)`` and of the replicates
    ``reps (P, U, R)`` over the runs each replicate drew (``run_picks (R, U)``); NaN where a
    pair was not measured in a run. A replicate that drew none of a pair's runs uses all."""
    drawn = np.take_along_axis(reps, run_picks.T[None, :, :], axis=1)  # (P, U, R)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices, handled below
        per_rep = np.nanmedian(drawn, axis=1)
        fallback = np.nanmedian(reps, axis=1)
    per_rep = np.where(np.isnan(per_rep), fallback, per_rep)
    return np.nanmedian(points, axis=1), per_rep


def _evaluate_machine(claim: Claim, boot: _Bootstrap, ok: pd.DataFrame, group: pd.DataFrame,
                      machine: str, run_spread: float) -> ClaimResult:
    runs = sorted(group["run"].unique())
    identity = [c for c in _pair_keys(claim) if c != "machine"] or ["machine"]
    pair_ids = list(group.groupby(identity, sort=True, dropna=False).groups.values())
    points = np.full((len(pair_ids), len(runs)), np.nan)
    reps = np.full((len(pair_ids), len(runs), boot.resamples), np.nan)
    names = []
    measured_in: dict[tuple[int, int], list[tuple[float, np.ndarray]]] = {}
    for p, indices in enumerate(pair_ids):
        rows = group.loc[indices]
        first = ok.loc[rows["num_index"].iloc[0]]
        den = (side(ok.loc[rows["den_index"].iloc[0]]) if claim.denominator is not None
               else f"(absolute, x {claim.scale:g})")
        names.append((side(first), den))
        for _, pair in rows.iterrows():
            measured_in.setdefault((p, runs.index(pair["run"])), []).append(
                _pair_value(claim, boot, ok, pair))
    for (p, u), values in measured_in.items():
        points[p, u] = np.median([point for point, _ in values])
        reps[p, u] = np.median([r for _, r in values], axis=0)
    run_picks = boot.rng.integers(0, len(runs), size=(boot.resamples, len(runs)))
    pair_points, pair_reps = _over_runs(points, reps, run_picks)
    measured = float(_aggregate(pair_points, claim.aggregate))
    low, high = np.percentile(_aggregate(pair_reps.T, claim.aggregate), [2.5, 97.5])
    notes = []
    widen = 1.0
    if len(runs) == 1 and claim.quantity in ("throughput", "time"):
        # One run cannot show how much the next run's timings would move: widen by the
        # spread measured between runs (never narrower than the rounds' own interval).
        # Memory and batch counts are not timings: that spread says nothing about them.
        widen = run_spread
        notes.append(f"one run: interval widened x/÷ {run_spread:g} for run-to-run spread "
                     "(measured between runs on the CI VM); more runs measure it")
    elif len(runs) == 1:
        notes.append("one run: a single measurement, its run-to-run spread not known")
    repeated = sum(len(values) > 1 for values in measured_in.values())
    if repeated:
        # Tables written before run ids were unique name every run of a configuration
        # alike: such rows cannot be told apart, so they count as one run, at their median.
        notes.append(f"{repeated} pair(s) had several rows under one run id (runs of one "
                     "configuration before run ids were unique): counted as one run each")
    if claim.aggregate == "upper_quartile":
        notes.append("up to: the upper quartile over pairs, each pair the median of its "
                     "paired per-round ratios (of medians where timed apart)")
    low, high = low / widen, high * widen
    note = "; ".join(notes)
    match, verdict = _verdict(claim, machine, float(low))
    pair_list = tuple(
        PairResult(num, den, int(np.sum(~np.isnan(points[p]))), float(pair_points[p]),
                   *(float(v) * f for v, f in zip(np.percentile(pair_reps[p], [2.5, 97.5]),
                                                  (1 / widen, widen), strict=True)))
        for p, (num, den) in enumerate(names))
    return ClaimResult(claim, verdict, machine=machine, measured=measured, ci_low=float(low),
                       ci_high=float(high), pairs=len(pair_ids), hardware_match=match,
                       note=note, runs=len(runs), pair_min=float(pair_points.min()),
                       pair_geomean=float(_aggregate(pair_points, "geomean")),
                       pair_max=float(pair_points.max()), pair_list=pair_list)


def evaluate_claim(claim: Claim, frame: pd.DataFrame, resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = 0, run_spread: float = SINGLE_RUN_SPREAD) -> list[ClaimResult]:
    """The claim's result on every machine with matching ok rows (one 'not measured' if none).
    ``run_spread``: the factor that widens a one-run interval (1: none)."""
    if not claim.measurable:
        return [ClaimResult(claim, NOT_MEASURED, note=claim.reason)]
    if run_spread < 1:
        raise ValueError(f"run_spread must be >= 1, got {run_spread}")
    ok = frame[frame["status"] == "ok"].copy()
    if claim.quantity == "peak_tensor_bytes":
        ok = ok[ok["peak_tensor_bytes"] > 0]  # -1: not measured; 0: below the resolution
    ok["machine"] = machine_labels(ok)
    why = pd.Series([excluded(row) for _, row in ok.iterrows()], index=ok.index, dtype=str)
    # The rows a claim could have used, for naming those left out: with max_batch, also the
    # largest batch among rows that count as rows (which the limit check may then refuse).
    candidates = [ok]
    if claim.quantity == "max_batch":
        candidates.append(ok[why == ""])
        why = _unconfirmed_limits(claim, frame, ok, why)
    eligible = ok[why == ""]
    pairs = _pairs(claim, eligible)
    boot = _Bootstrap(claim.quantity, resamples, seed)
    found = [_evaluate_machine(claim, boot, ok, group, str(machine), run_spread)
             for machine, group in pairs.groupby("machine", sort=True)]
    if claim.batch is not None:  # machines that did not run the claim's own batch
        found += _at_largest_batch(claim, boot, eligible, set(pairs["machine"]), run_spread)
    found = _say_what_was_left_out(claim, candidates, why, found)
    return found or [ClaimResult(claim, NOT_MEASURED, note=_why_not_measured(claim, frame))]


def _say_what_was_left_out(claim: Claim, candidates: Sequence[pd.DataFrame], why: pd.Series,
                           found: list[ClaimResult]) -> list[ClaimResult]:
    """``found`` with the rows of ``candidates`` that matched but cannot count named in each
    machine's note, and a ``not measured`` result for each machine where only such rows
    matched."""
    # A claim whose own batch is missing is measured at the largest batch run instead.
    sides = [claim] if claim.batch is None else [claim, claim.at_any_batch()]
    matched = pd.concat([_pairs(c, rows) for rows in candidates for c in sides])
    by_machine = {r.machine: i for i, r in enumerate(found)}
    found = list(found)
    for machine, group in matched.groupby("machine", sort=True):
        left_out = _left_out(group, why)
        if not left_out:
            continue
        if machine in by_machine:
            result = found[by_machine[machine]]
            found[by_machine[machine]] = replace(result, note="; ".join(
                n for n in (result.note, f"left out: {left_out}") if n))
        else:
            found.append(ClaimResult(claim, NOT_MEASURED, machine=str(machine),
                                     note=f"only rows that cannot count matched: {left_out}"))
    return found


def _at_largest_batch(claim: Claim, boot: _Bootstrap, eligible: pd.DataFrame,
                      done: set[str], run_spread: float) -> list[ClaimResult]:
    """The claim on each machine not in ``done`` at the largest batch both sides ran there
    (its own batch was not): never ``reproduced`` (:data:`DIFFERENT_SIZE` at best)."""
    free = claim.at_any_batch()
    pairs = _pairs(free, eligible)
    found = []
    for machine, group in pairs[~pairs["machine"].isin(done)].groupby("machine", sort=True):
        batch = int(group["batch"].max())
        result = _evaluate_machine(free, boot, eligible, group[group["batch"] == batch],
                                   str(machine), run_spread)
        size = (f"at batch {batch}, not the claim's {claim.batch}: the largest batch run "
                "on this machine")
        found.append(replace(
            result, claim=claim,
            verdict=DIFFERENT_SIZE if result.hardware_match else DIFFERENT_HARDWARE,
            note="; ".join(n for n in (size, result.note) if n)))
    return found


def _why_not_measured(claim: Claim, frame: pd.DataFrame) -> str:
    """The note of a claim that matched no ok row: the reasons its cases did not run (e.g.
    a GPU-only implementation, or an ``unverifiable`` precision)."""
    free = claim if claim.batch is None else claim.at_any_batch()
    sides = [free.numerator, *([free.denominator] if free.denominator is not None else [])]
    failed = pd.concat([select(frame, side) for side in sides])
    failed = failed[failed["status"] != "ok"]
    reasons = list(dict.fromkeys(
        f"{r.implementation} {r.precision}: {r.status} ({r.reason})"
        for r in failed.itertuples()))
    if not reasons and claim.needs_gpu and failed.empty:
        return f"needs a GPU ({claim.needs_gpu}); none of its cases ran here"
    if not reasons:
        return "no matching ok rows"
    more = f"; and {len(reasons) - 3} more" if len(reasons) > 3 else ""
    return "no matching ok rows: " + "; ".join(reasons[:3]) + more


def evaluate(claims: Iterable[Claim], frame: pd.DataFrame, resamples: int = BOOTSTRAP_RESAMPLES,
             seed: int = 0, run_spread: float = SINGLE_RUN_SPREAD) -> list[ClaimResult]:
    return [r for claim in claims
            for r in evaluate_claim(claim, frame, resamples, seed, run_spread)]


def _num(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.3g}"


def table(results: Sequence[ClaimResult]) -> pd.DataFrame:
    """The claims table (the CLI prints it; the dashboard's index page starts with it).
    ``measured`` is what the claim's wording supports (``wording``); every pair is in
    :func:`pairs_table`."""
    rows = []
    for r in results:
        c = r.claim
        suffix = "x" if c.unit == "x" else f" {c.unit}"
        spread = (f"{_num(r.pair_min)} / {_num(r.pair_geomean)} / {_num(r.pair_max)}"
                  if r.pairs else "")
        rows.append({
            "claim": c.id,
            "version": c.version,
            "claimed": f"{c.claimed:g}{suffix}",
            "measured": f"{_num(r.measured)}{suffix}" if not math.isnan(r.measured) else "",
            "wording": WORDING[c.aggregate] if c.measurable else "",
            "95% CI": (f"{_num(r.ci_low)}-{_num(r.ci_high)}" if not math.isnan(r.ci_low)
                       else ""),
            "pairs": r.pairs if r.pairs else "",
            "pairs min / geomean / max": spread,
            "runs": r.runs if r.runs else "",
            "claimed on": c.hardware,
            "measured on": r.machine,
            "hardware match": ("" if r.verdict == NOT_MEASURED
                               else "yes" if r.hardware_match else "no"),
            "verdict": r.verdict,
            "note": r.note,
        })
    return pd.DataFrame(rows)


def pairs_table(results: Sequence[ClaimResult]) -> pd.DataFrame:
    """Every matched pair of every measured claim: its cases, runs, ratio and interval."""
    columns = ["claim", "version", "measured on", "numerator", "denominator", "runs", "ratio",
               "95% CI"]
    return pd.DataFrame([{
        "claim": r.claim.id, "version": r.claim.version, "measured on": r.machine,
        "numerator": pair.numerator,
        "denominator": pair.denominator, "runs": pair.runs, "ratio": _num(pair.ratio),
        "95% CI": f"{_num(pair.ci_low)}-{_num(pair.ci_high)}",
    } for r in results for pair in r.pair_list], columns=columns)


def versions_table(results: Sequence[ClaimResult]) -> pd.DataFrame:
    """How each claim published in several versions moved, and which version our
    measurement reproduces: one row per claim id with more than one version."""
    by_id: dict[str, list[ClaimResult]] = {}
    for r in results:
        by_id.setdefault(r.claim.id, []).append(r)
    rows = []
    for claim_id, found in by_id.items():
        versions = list(dict.fromkeys(r.claim.version for r in found))
        if len(versions) < 2:
            continue
        first = {v: next(r for r in found if r.claim.version == v) for v in versions}
        claimed = "; ".join(
            f"{v}{f' ({first[v].claim.date})' if first[v].claim.date else ''}: "
            f"{first[v].claim.claimed:g}{'x' if first[v].claim.unit == 'x' else ''}"
            for v in versions)
        verdicts = "; ".join(
            f"{v}: " + ", ".join(sorted({r.verdict + (f' on {r.machine}' if r.machine else '')
                                         for r in found if r.claim.version == v}))
            for v in versions)
        reproduced = [v for v in versions
                      if any(r.verdict == REPRODUCED for r in found if r.claim.version == v)]
        rows.append({"claim": claim_id, "claimed, by version": claimed,
                     "verdict, by version": verdicts,
                     "we reproduce": ", ".join(reproduced) if reproduced else "none"})
    return pd.DataFrame(rows, columns=["claim", "claimed, by version", "verdict, by version",
                                       "we reproduce"])


def details(claims: Iterable[Claim]) -> pd.DataFrame:
    """What each claim says and how it is measured (the dashboard lists it under the table)."""
    def selector(side: Mapping[str, object] | None) -> str:
        return ", ".join(f"{k}={v}" for k, v in (side or {}).items())

    return pd.DataFrame([{
        "claim": c.id, "version": c.version, "date": c.date, "source": c.source,
        "statement": c.statement,
        "conditions": c.conditions, "quantity": c.quantity,
        "numerator": selector(c.numerator) if c.measurable else "",
        "denominator": (selector(c.denominator) if c.denominator else
                        f"(absolute, x {c.scale:g})") if c.measurable else "",
    } for c in claims])
