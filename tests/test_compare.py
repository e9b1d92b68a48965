"""Regression tracking: `equibench compare` and `equibench history`."""

import argparse

import numpy as np
import pandas as pd
import pytest
from equibench.dashboards.sample import synthetic_results

from equibench import analysis, cli_reports, compare, history, results


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    cli_reports.add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def _slow_down(frame: pd.DataFrame, implementation: str, factor: float) -> pd.DataFrame:
    """A copy in which one implementation's every sample takes ``factor`` times longer."""
    out = frame.copy()
    rows = (out["implementation"] == implementation) & (out["status"] == "ok")
    out.loc[rows, "time_samples"] = out.loc[rows, "time_samples"].map(
        lambda s: [x * factor for x in s])
    out.loc[rows, "time_median_s"] *= factor
    out.loc[rows, "throughput"] /= factor
    return results.validate(out)


@pytest.fixture(scope="module")
def base() -> pd.DataFrame:
    return synthetic_results(seed=0)


def test_planted_slowdown_is_caught(base):
    new = _slow_down(base, "cuequivariance", 1.5)
    changes = compare.compare(base, new)
    flagged = [c for c in changes if c.verdict == "regression"]
    assert flagged
    assert all(" cuequivariance " in c.case for c in flagged)
    metrics = {c.metric for c in flagged}
    assert metrics == {"speedup vs e3nn", "time"}
    # Every cuequivariance case is caught on both metrics.
    cue_ok = ((base["implementation"] == "cuequivariance") & (base["status"] == "ok")).sum()
    assert len(flagged) == 2 * cue_ok
    assert all(c.worse_by == pytest.approx(1.5, rel=1e-9) for c in flagged)
    # Rows of this table were never interleaved: their ratios say so.
    assert all("unpaired" in c.note for c in flagged if c.metric.startswith("speedup"))


def test_unchanged_code_does_not_flag(base):
    assert all(c.verdict == "unchanged" for c in compare.compare(base, base))
    # A rerun: same code, fresh noise (5% log-normal) on every sample.
    rerun = synthetic_results(seed=1)
    verdicts = {c.verdict for c in compare.compare(base, rerun)}
    assert verdicts == {"unchanged"}


def test_reference_slowdown_shows_as_improvement_of_the_others(base):
    # e3nn gets slower: its own raw time regresses, the others' speedups over it improve.
    changes = compare.compare(base, _slow_down(base, "e3nn", 1.5))
    regressions = {(c.metric, " e3nn " in c.case) for c in changes if c.verdict == "regression"}
    assert regressions == {("time", True)}
    assert any(c.verdict == "improvement" and c.metric == "speedup vs e3nn" for c in changes)


def test_ratio_is_compared_across_machines(base):
    # The new run is on another machine: only the machine-independent paired ratio is
    # comparable, and the output says so.
    cpu = _interleaved(0)
    moved = _interleaved(1, slow={"cuequivariance": 1.5}).assign(host="other",
                                                                  cpu_model="Intel Xeon")
    changes = [c for c in compare.compare(cpu, moved) if c.metric != "status"]
    assert changes and all(c.metric.endswith("(across machines)") for c in changes)
    assert all(c.metric.startswith("speedup vs ") for c in changes)
    flagged = [c for c in changes if c.verdict == "regression"]
    assert flagged and all(" cuequivariance " in c.case for c in flagged)
    # Ratios of medians timed apart carry each machine's drift: not compared across them.
    apart = base[base["host"] == "cpu-host"]
    other = _slow_down(apart, "cuequivariance", 1.5).assign(host="other",
                                                            cpu_model="Intel Xeon")
    assert not [c for c in compare.compare(apart, other) if c.metric != "status"]


@pytest.mark.slow
def test_below_threshold_or_not_significant_is_unchanged(base):
    small = compare.compare(base, _slow_down(base, "cuequivariance", 1.05))
    assert all(c.verdict == "unchanged" for c in small)

    def noisy(spread: list[float]) -> pd.DataFrame:
        # Four samples spread over 6x: a 1.2x change cannot be told from noise.
        out = base.copy()
        out["time_samples"] = out["time_median_s"].map(lambda m: [m * f for f in spread])
        return results.validate(out)

    changes = compare.compare(noisy([0.4, 1.0, 2.5, 1.6]),
                              _slow_down(noisy([2.5, 0.4, 1.0, 0.9]), "cuequivariance", 1.2))
    assert not [c for c in changes if c.verdict == "regression"]
    assert all(c.detectable > 1.2 for c in changes if c.metric == "time")


def test_three_sample_rows_still_flag_a_large_change(base):
    few = base.copy()
    few["time_samples"] = few["time_samples"].map(lambda s: s[:3])
    few = results.validate(few)
    # 3 against 3: the rank test alone could never reach p < 0.05; Welch's t-test on the
    # logarithms sees a 3x change far beyond the 5% spread.
    changes = compare.compare(few, _slow_down(few, "cuequivariance", 3.0))
    flagged = [c for c in changes if c.verdict == "regression"]
    assert flagged and all(" cuequivariance " in c.case for c in flagged)
    assert all(c.p_value < 0.05 for c in flagged)
    assert all(c.detectable < 3.0 for c in flagged)


def _interleaved(seed: int, slow: dict[str, float] | None = None, rounds: int = 7,
                 drift: float = 0.4) -> pd.DataFrame:
    """A run timed in interleaved rounds on a drifting machine: each round's speed moves
    by a log-normal factor (sigma ``drift``: ~1.5x) that every implementation of the round
    shares, with 2% noise of its own; ``slow`` slows implementations by a factor."""
    rng = np.random.default_rng(seed)
    base_time = {"e3nn": 10e-3, "fused": 1e-3, "cuequivariance": 8e-3}
    rows = []
    for workload in ("mace-large", "nequip-benzene"):
        for direction in ("forward", "backward"):
            machine = rng.lognormal(0.0, drift) * rng.lognormal(0.0, drift / 2, rounds)
            rid = f"{seed}-{workload}-{direction}"
            for impl, t in base_time.items():
                factor = (slow or {}).get(impl, 1.0)
                times = t * factor * machine * rng.lognormal(0.0, 0.02, rounds)
                rows.append(dict(
                    run_id=f"run{seed}", level="tp", workload=workload, implementation=impl,
                    variant="default", direction=direction, precision="float32", batch=64,
                    device="cpu", status="ok", time_median_s=float(np.median(times)),
                    time_samples=list(times), repeats=rounds, round_times_s=list(times),
                    rounds_id=rid, threads=2, cpu_allocator="tcmalloc", host="vm",
                    cpu_model="AMD EPYC", timestamp="2026-12-03T00:00:00+00:00",
                    peak_mem_bytes=2**20))
    return results.to_frame(rows)


def test_paired_rounds_cancel_machine_drift():
    base, rerun = _interleaved(0), _interleaved(1)
    changes = compare.compare(base, rerun, gate=("status", "speedup", "memory"))
    # Raw times moved with the machine (reported only); the paired speedups did not.
    assert not [c for c in changes if c.fails]
    speedups = [c for c in changes if c.metric.startswith("speedup")]
    assert len(speedups) == 8 and all(c.verdict == "unchanged" for c in speedups)
    assert all(abs(c.worse_by - 1) < 0.05 for c in speedups)
    assert all(c.detectable < 1.15 for c in speedups)
    assert not any("unpaired" in c.note for c in speedups)


def test_paired_rounds_find_a_small_slowdown_through_drift():
    changes = compare.compare(_interleaved(0), _interleaved(1, slow={"fused": 1.25}),
                              gate=("status", "speedup", "memory"))
    failing = [c for c in changes if c.fails]
    assert failing and all(" fused " in c.case for c in failing)
    assert {c.metric for c in failing} == {"speedup vs e3nn"}
    assert len(failing) == 4
    assert all(c.worse_by == pytest.approx(1.25, rel=0.05) for c in failing)


def test_a_variant_without_an_e3nn_twin_is_compared_with_e3nn_default():
    """cuequivariance[ir_mul] has no e3nn[ir_mul]: its reference is e3nn's default row, not
    the first row by name (cuequivariance's own default); without e3nn, that first row."""
    base = _interleaved(0)
    cue = base[base["implementation"] == "cuequivariance"]
    native = cue.assign(variant="ir_mul", time_median_s=cue["time_median_s"] / 2,
                        round_times_s=cue["round_times_s"].map(lambda s: [x / 2 for x in s]),
                        time_samples=cue["time_samples"].map(lambda s: [x / 2 for x in s]))
    frame = results.validate(pd.concat([base, native], ignore_index=True))
    rel = analysis.relative(frame)
    ir_mul = rel[rel["variant"] == "ir_mul"]
    assert len(ir_mul) == 4 and set(ir_mul["reference"]) == {"e3nn"}
    # e3nn takes 10 ms, cuequivariance[ir_mul] 4 ms: paired round by round.
    assert np.allclose(ir_mul["speedup"], 2.5, rtol=0.1) and ir_mul["paired"].all()
    without_e3nn = analysis.relative(frame[frame["implementation"] != "e3nn"])
    assert set(without_e3nn[without_e3nn["variant"] == "ir_mul"]["reference"]) == {
        "cuequivariance"}
    # The speedups that history and the dashboard's bars read agree.
    joined = analysis.speedups(frame)
    native_joined = joined[joined["variant"] == "ir_mul"]
    assert len(native_joined) == 4
    assert np.allclose(native_joined["speedup"], 2.5, rtol=0.1)
    assert len(joined[joined["variant"] == "default"]) == len(
        frame[(frame["variant"] == "default") & (frame["implementation"] != "e3nn")])


def test_status_change_and_missing_case_are_regressions():
    base = _interleaved(0)
    new = base.copy()
    broken = (new["implementation"] == "fused") & (new["direction"] == "forward") & (
        new["workload"] == "mace-large")
    new.loc[broken, "status"] = "error"
    new.loc[broken, "reason"] = "RuntimeError: kernel failed"
    gone = (new["implementation"] == "cuequivariance") & (new["direction"] == "backward") & (
        new["workload"] == "nequip-benzene")
    new = results.validate(new[~gone])
    status = [c for c in compare.compare(base, new) if c.metric == "status"]
    assert len(status) == 2 and all(c.verdict == "regression" and c.fails for c in status)
    notes = sorted(c.note for c in status)
    assert notes[0].startswith("missing from the new run")
    assert notes[1] == "ok -> error: RuntimeError: kernel failed"
    # Fixed again: an improvement, which does not fail the check.
    back = compare.compare(new, base)
    assert [c.verdict for c in back if c.metric == "status"] == ["improvement"]


def test_a_group_whose_reference_changed_tells_its_speedups_apart():
    """e3nn unavailable in the base (the others compared with cuequivariance, the first by
    name), ok in the new run (compared with e3nn): their speedups are over different rows,
    so they are listed as not compared, and nothing fails."""
    base = _interleaved(0)
    e3nn = base["implementation"] == "e3nn"
    without = base.copy()
    without.loc[e3nn, ["status", "reason"]] = ["unavailable", "e3nn not installed"]
    changes = compare.compare(results.validate(without), base)
    assert not [c for c in changes if c.fails]
    moved = [c for c in changes if c.verdict == "not compared"]
    # fused in both workloads and directions; cuequivariance was the reference before, and
    # its speedup over e3nn now has nothing to be compared with.
    fused = [c for c in moved if " fused " in c.case]
    cue = [c for c in moved if " cuequivariance " in c.case]
    assert len(fused) == 4 and len(cue) == 4 and len(moved) == 8
    assert {c.metric for c in fused} == {"speedup vs cuequivariance -> e3nn"}
    assert all("reference changed" in c.note for c in fused)
    assert {c.metric for c in cue} == {"speedup vs e3nn"}
    assert all(c.note == "its group's reference in the base run" and np.isnan(c.base)
               and c.new > 0 for c in cue)
    assert [c.verdict for c in changes if c.metric == "status"] == ["improvement"] * 4
    assert "8 not compared (reference changed)" in compare.markdown(changes)
    # The other way round: e3nn lost.
    lost = [c for c in compare.compare(base, results.validate(without))
            if c.verdict == "not compared"]
    assert len(lost) == 8 and sum(c.note == "its group's reference in the new run"
                                  for c in lost) == 4


def test_allocator_and_threads_are_part_of_the_key():
    base = _interleaved(0)
    other = base.assign(cpu_allocator="system")
    changes = compare.compare(base, other)
    # Nothing is compared across allocators: every case is missing, and the note says why.
    assert {c.metric for c in changes} == {"status"}
    assert all("cpu_allocator=system instead of" in c.note for c in changes)
    assert len(changes) == len(base)
    threads = compare.compare(base, base.assign(threads=1))
    assert {c.metric for c in threads} == {"status"}
    assert all("threads=1" in c.note for c in threads)


def test_a_status_is_matched_whatever_settings_a_case_that_never_ran_lacks():
    """Rows of cases that ended before their process set threads and allocator (an
    unavailable implementation, a crash, a timeout) carry -1 and no allocator: their
    status still matches the case, in either direction."""
    base = _interleaved(0)
    case = (base["implementation"] == "fused") & (base["direction"] == "forward") & (
        base["workload"] == "mace-large")
    never = base.copy()
    never.loc[case, ["status", "reason", "threads", "cpu_allocator"]] = [
        "unavailable", "fused needs a compiler", -1, ""]
    never = results.validate(never)
    fixed = [c for c in compare.compare(never, base) if c.metric == "status"]
    assert [(c.verdict, c.fails) for c in fixed] == [("improvement", False)]
    timed_out = never.copy()
    timed_out.loc[case, ["status", "reason"]] = ["error", "timed out after 600 s"]
    broke = [c for c in compare.compare(base, results.validate(timed_out))
             if c.metric == "status"]
    assert [(c.verdict, c.note) for c in broke] == [
        ("regression", "ok -> error: timed out after 600 s")]
    # Two rows that never ran, on other threads: the same status, nothing to report.
    assert not [c for c in compare.compare(never, never.assign(threads=1))
                if c.metric == "status" and not c.note.startswith("missing")
                and "fused" in c.case]


def test_broken_samples_are_left_out_and_a_failed_test_is_not_a_verdict():
    good = np.array([1.0, 1.02, 0.98, 1.01])
    verdict, p, _ = compare._judge(good, np.array([2.0, 2.04, np.inf, 0.0, 1.97]), 1.1, 0.05)
    assert verdict == "regression" and p < 0.05
    assert compare._judge(good, np.array([np.nan]), 1.1, 0.05)[0] == "unchanged"


def test_memory_regression_needs_threshold_and_floor(base):
    new = base.copy()
    rows = new["implementation"] == "cuequivariance"
    new.loc[rows, "peak_tensor_bytes"] = new.loc[rows, "peak_tensor_bytes"] * 2 + 8 * 2**20
    flagged = [c for c in compare.compare(base, new) if c.verdict == "regression"]
    assert flagged and {c.metric for c in flagged} == {"peak memory"}
    floor = compare.compare(base, new, mem_floor=1e12)
    assert all(c.verdict == "unchanged" for c in floor)


def test_memory_compares_live_tensor_bytes_else_the_resident_set(base):
    """Resident-set growth moves with the allocator: where both rows have live tensor
    bytes, those decide; a table written before that column compares resident sets."""
    new = base.copy()
    rows = new["implementation"] == "cuequivariance"
    new.loc[rows, "peak_mem_bytes"] = new.loc[rows, "peak_mem_bytes"] * 2 + 8 * 2**20
    assert all(c.verdict == "unchanged" for c in compare.compare(base, new)
               if c.metric == "peak memory")
    older = base.drop(columns=["peak_tensor_bytes", "peak_tensor_method"])
    flagged = [c for c in compare.compare(results.validate(older), new)
               if c.verdict == "regression"]
    assert flagged and {c.metric for c in flagged} == {"peak memory"}


@pytest.mark.slow
def test_a_gate_factor_fails_large_changes_and_reports_smaller_ones(base, tmp_path, capsys):
    """``memory:2``: memory regressions from 2x fail, those between the threshold and 2x are
    reported (CI's gate on this VM, whose peak memory moved up to 1.36x between runs)."""
    rows = (base["implementation"] == "cuequivariance") & (base["peak_tensor_bytes"] > 0)
    before = base.copy()
    before.loc[rows, "peak_tensor_bytes"] = 64 * 2**20

    def grown(factor: float) -> pd.DataFrame:
        new = before.copy()
        new.loc[rows, "peak_tensor_bytes"] = int(64 * 2**20 * factor)
        return new

    for factor, fails in ((1.6, False), (2.5, True)):
        changes = compare.compare(before, grown(factor), threshold=1.5,
                                  gate={"status": None, "memory": 2.0})
        memory = [c for c in changes if c.metric == "peak memory" and c.verdict == "regression"]
        assert memory and all(c.fails == fails for c in memory), factor
        assert any(c.fails for c in changes) == fails
    results.write_atomic(before, tmp_path / "base.parquet")
    results.write_atomic(grown(1.6), tmp_path / "new.parquet")
    argv = ["compare", str(tmp_path / "base.parquet"), str(tmp_path / "new.parquet"),
            "--threshold", "1.5", "--gate"]
    assert _cli([*argv, "status,memory:2"]) == 0
    assert "| regression (report) |" in capsys.readouterr().out
    assert _cli([*argv, "status,memory"]) == 1
    for bad in ("memory:x", "mem:2"):
        with pytest.raises(SystemExit):
            _cli([*argv, bad])
    with pytest.raises(ValueError, match="status changes have no factor"):
        compare.compare(base, base, gate={"status": 2.0})
    with pytest.raises(ValueError, match="below the threshold"):
        compare.compare(base, base, threshold=1.5, gate={"memory": 1.2})


@pytest.mark.slow
def test_compare_cli_exit_status_and_table(base, tmp_path, capsys):
    results.write_atomic(base, tmp_path / "base.parquet")
    results.write_atomic(_slow_down(base, "cuequivariance", 1.5), tmp_path / "slow.parquet")
    assert _cli(["compare", str(tmp_path / "base.parquet"), str(tmp_path / "base.parquet")]) == 0
    out = capsys.readouterr().out
    assert "0 regression(s)" in out and "noise floor: speedup:" in out
    assert _cli(["compare", str(tmp_path / "base.parquet"), str(tmp_path / "slow.parquet"),
                 "--threshold", "1.2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("| case | metric |") and "| regression |" in out
    # Improvements do not fail the check.
    assert _cli(["compare", str(tmp_path / "slow.parquet"), str(tmp_path / "base.parquet")]) == 0
    with pytest.raises(ValueError, match="threshold"):
        compare.compare(base, base, threshold=0.9)
    # A machine twice as slow for everything: raw times regress, paired speedups do not;
    # reported, not failing, when raw times are not gated.
    slow = _interleaved(0)
    for col in ("time_samples", "round_times_s"):
        slow[col] = slow[col].map(lambda s: [2 * x for x in s])
    slow["time_median_s"] *= 2
    results.write_atomic(_interleaved(0), tmp_path / "a.parquet")
    results.write_atomic(slow, tmp_path / "b.parquet")
    assert _cli(["compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet")]) == 1
    assert _cli(["compare", str(tmp_path / "a.parquet"), str(tmp_path / "b.parquet"),
                 "--gate", "status,speedup"]) == 0
    assert "(report)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        _cli(["compare", "a", "b", "--gate", "speed"])


def test_markdown_table_counts_and_escapes_pipes():
    change = compare.Change("tp/w a|b forward float32 b=1 cpu", "time", False, 1.0, 2.0, 0.001,
                            "regression", detectable=1.3)
    text = compare.markdown([change])
    assert "| 2x |" in text and "| 1.3x |" in text and "1 regression(s)" in text
    assert "a\\|b" in text


def test_history_add_appends_and_replaces(base, tmp_path, capsys):
    path = tmp_path / "history.parquet"
    merged, added = history.add(base, path)
    expected = len(analysis.speedups(base))
    assert added == expected and len(merged) == expected
    assert set(merged["implementation"]) == {"cuequivariance", "openequivariance"}
    ratio = merged[(merged["implementation"] == "cuequivariance")]["speedup"]
    assert np.allclose(ratio, 2.0, rtol=0.15)  # the sample's cuequivariance is 2x e3nn
    # Adding the same run again replaces its entries; another commit appends.
    merged, _ = history.add(base, path)
    assert len(merged) == expected
    later = base.assign(git_commit="f00d", run_id="later", timestamp="2026-01-01T00:00:00")
    merged, _ = history.add(later, path)
    assert len(merged) == 2 * expected
    assert list(merged["git_commit"].drop_duplicates()) == ["c0ffee0000", "f00d"]
    assert [p.name for p in tmp_path.iterdir()] == ["history.parquet"]  # no temp file left
    results.write_atomic(base, tmp_path / "r.parquet")
    assert _cli(["history", "add", str(tmp_path / "r.parquet"), "--history", str(path)]) == 0
    assert "2 commit(s)" in capsys.readouterr().out
    assert _cli(["history", "show", "--history", str(path)]) == 0
    assert "f00d" in capsys.readouterr().out


def test_history_read_rejects_other_tables(base, tmp_path):
    results.write_atomic(base, tmp_path / "r.parquet")
    with pytest.raises(ValueError, match="not a history table"):
        history.read(tmp_path / "r.parquet")
    assert history.read(tmp_path / "absent.parquet").empty
