"""Regression tracking: `equibench compare` and `equibench history`."""

import argparse

import numpy as np
import pandas as pd
import pytest
from equibench.dashboards.sample import synthetic_results

from equibench import cli_reports, compare, history, results


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
    # The new run is on another machine: only the machine-independent ratio is comparable.
    cpu = base[base["host"] == "cpu-host"]
    moved = _slow_down(cpu, "cuequivariance", 1.5).assign(host="other",
                                                            cpu_model="Intel Xeon")
    changes = compare.compare(cpu, moved)
    assert changes and {c.metric for c in changes} == {"speedup vs e3nn"}
    assert all(c.verdict == "regression" for c in changes)


def test_below_threshold_or_not_significant_is_unchanged(base):
    small = compare.compare(base, _slow_down(base, "cuequivariance", 1.05))
    assert all(c.verdict == "unchanged" for c in small)
    few = base.copy()
    few["time_samples"] = few["time_samples"].map(lambda s: s[:3])
    few = results.validate(few)
    # 3 samples against 3: the rank test can never reach p < 0.05.
    assert all(c.verdict == "unchanged"
               for c in compare.compare(few, _slow_down(few, "cuequivariance", 3.0)))


def test_memory_regression_needs_threshold_and_floor(base):
    new = base.copy()
    rows = new["implementation"] == "cuequivariance"
    new.loc[rows, "peak_mem_bytes"] = new.loc[rows, "peak_mem_bytes"] * 2 + 8 * 2**20
    flagged = [c for c in compare.compare(base, new) if c.verdict == "regression"]
    assert flagged and {c.metric for c in flagged} == {"peak memory"}
    floor = compare.compare(base, new, mem_floor=1e12)
    assert all(c.verdict == "unchanged" for c in floor)


def test_compare_cli_exit_status_and_table(base, tmp_path, capsys):
    results.write_atomic(base, tmp_path / "base.parquet")
    results.write_atomic(_slow_down(base, "cuequivariance", 1.5), tmp_path / "slow.parquet")
    assert _cli(["compare", str(tmp_path / "base.parquet"), str(tmp_path / "base.parquet")]) == 0
    assert "0 regression(s)" in capsys.readouterr().out
    assert _cli(["compare", str(tmp_path / "base.parquet"), str(tmp_path / "slow.parquet"),
                 "--threshold", "1.2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("| case | metric |") and "| regression |" in out
    # Improvements do not fail the check.
    assert _cli(["compare", str(tmp_path / "slow.parquet"), str(tmp_path / "base.parquet")]) == 0
    with pytest.raises(ValueError, match="threshold"):
        compare.compare(base, base, threshold=0.9)


def test_markdown_table_counts_and_escapes_pipes():
    change = compare.Change("tp/w a|b forward float32 b=1 cpu", "time", False, 1.0, 2.0, 0.001,
                            "regression")
    text = compare.markdown([change])
    assert "| 2x |" in text and "1 regression(s)" in text
    assert "a\\|b" in text


def test_history_add_appends_and_replaces(base, tmp_path, capsys):
    path = tmp_path / "history.parquet"
    merged, added = history.add(base, path)
    expected = len(compare.speedups(base))
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
