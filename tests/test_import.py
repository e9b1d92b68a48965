"""`equibench import`: pytest-benchmark JSON into the result schema."""

import argparse
import json

import pytest

from equibench import analysis, cli_reports, compare, pytest_benchmark_import, results

SAMPLES = [0.010, 0.011, 0.012, 0.010, 0.013, 0.011]


def _stats(median: float, data: list[float] | None) -> dict:
    stats = {"min": median * 0.9, "max": median * 1.2, "mean": median, "stddev": 0.0,
             "rounds": len(data) if data else 7, "median": median, "iqr": median * 0.1,
             "q1": median * 0.95, "q3": median * 1.05, "iterations": 1, "ops": 1 / median}
    if data is not None:
        stats["data"] = data
    return stats


def _document(data: bool = True) -> dict:
    """What `pytest --benchmark-json` writes, cut down to the fields that matter."""
    case = {"level": "tp", "workload": "nequip-water", "variant": "default",
            "direction": "forward", "precision": "float32", "batch": 64, "device": "cpu",
            "throughput_unit": "products/s", "flops": 61440.0, "bytes": 132096.0}
    return {
        "machine_info": {"node": "bench-host", "processor": "x86_64", "python_version": "3.11.7",
                         "cpu": {"brand_raw": "AMD EPYC 7763", "count": 2}},
        "commit_info": {"id": "abc123", "dirty": False, "time": "2026-01-01T00:00:00+00:00"},
        "datetime": "2026-01-01T00:00:00+00:00",
        "version": "5.3.1",
        "benchmarks": [
            {"name": "test_tp[e3nn]", "fullname": "benchmarks/x.py::test_tp[e3nn]",
             "params": {"implementation": "e3nn"},
             "extra_info": {**case, "implementation": "e3nn"},
             "stats": _stats(0.011, SAMPLES if data else None)},
            # case fields from params alone (defaults for the rest)
            {"name": "test_tp[cue]", "fullname": "benchmarks/x.py::test_tp[cue]",
             "params": {"implementation": "cuequivariance", "workload": "nequip-water",
                        "batch": 64},
             "extra_info": {},
             "stats": _stats(0.022, [2 * s for s in SAMPLES] if data else None)},
            # no case fields at all: skipped, and said so
            {"name": "test_other", "fullname": "benchmarks/x.py::test_other", "params": None,
             "extra_info": {}, "stats": _stats(0.001, None)},
        ],
    }


def test_rows_follow_the_schema(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_document()))
    imported = pytest_benchmark_import.read(path)
    frame = imported.frame
    assert imported.skipped == ["benchmarks/x.py::test_other (no workload, implementation, "
                                "batch in extra_info or params)"]
    assert list(frame.columns) == list(results.COLUMN_NAMES)
    e3nn, cue = frame.iloc[0], frame.iloc[1]
    assert (e3nn["implementation"], e3nn["workload"], e3nn["batch"]) == ("e3nn", "nequip-water",
                                                                        64)
    # Timed elsewhere, never gated: its own status, which no claim counts.
    assert e3nn["status"] == "imported" and e3nn["time_samples"] == SAMPLES
    assert e3nn["repeats"] == len(SAMPLES)
    assert e3nn["throughput"] == pytest.approx(64 / 0.011)
    assert e3nn["gflops_per_s"] == pytest.approx(61440.0 / 0.011 / 1e9)
    assert (e3nn["host"], e3nn["cpu_model"], e3nn["git_commit"]) == ("bench-host",
                                                                     "AMD EPYC 7763", "abc123")
    assert e3nn["run_id"] == "pytest-benchmark-2026-01-01T00:00:00+00:00"
    assert json.loads(e3nn["extra"])["benchmark"] == "benchmarks/x.py::test_tp[e3nn]"
    assert (cue["implementation"], cue["direction"], cue["precision"]) == (
        "cuequivariance", "forward", "float32")


def test_without_saved_data_keeps_median_and_iqr(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_document(data=False)))
    row = pytest_benchmark_import.read(path, run_id="mine").frame.iloc[0]
    assert row["time_samples"] == [] and row["repeats"] == 7
    assert row["time_median_s"] == 0.011 and row["time_iqr_s"] == pytest.approx(0.0011)
    assert row["run_id"] == "mine"


def test_imported_rows_work_with_compare(tmp_path):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_document()))
    frame = pytest_benchmark_import.read(path).frame
    (speedup,) = analysis.speedups(frame)["speedup"]
    assert speedup == pytest.approx(0.5)
    assert all(c.verdict == "unchanged" for c in compare.compare(frame, frame))


def test_imported_rows_reach_no_claim_verdict(tmp_path):
    from equibench import claims

    path = tmp_path / "bench.json"
    path.write_text(json.dumps(_document()))
    frame = pytest_benchmark_import.read(path).frame
    claim = claims.Claim(id="t", source="s", statement="s", claimed=2.0, hardware="EPYC",
                         quantity="time", numerator={"implementation": "cuequivariance"},
                         denominator={"implementation": "e3nn"})
    (found,) = claims.evaluate([claim], frame)
    assert found.verdict == claims.NOT_MEASURED


def test_import_cli_writes_a_table_and_rejects_other_json(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    cli_reports.add_parsers(parser.add_subparsers(dest="command", required=True))
    path, out = tmp_path / "bench.json", tmp_path / "out" / "r.parquet"
    path.write_text(json.dumps(_document()))
    args = parser.parse_args(["import", str(path), "--out", str(out)])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "skipped benchmarks/x.py::test_other" in printed and "2 rows" in printed
    assert len(results.read(out)) == 2
    path.write_text(json.dumps({"something": "else"}))
    with pytest.raises(ValueError, match="not a pytest-benchmark JSON"):
        args.func(args)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="not JSON"):
        args.func(args)
