import math

import pandas as pd
import pytest

from equibench import results


def _row(**kw):
    base = dict(run_id="r", level="tp", workload="w", implementation="e3nn", variant="default",
                direction="forward", precision="float32", batch=8, device="cpu", status="ok",
                time_median_s=0.1, time_samples=[0.1, 0.1], repeats=2)
    return {**base, **kw}


def test_roundtrip(tmp_path):
    frame = results.to_frame([_row(), _row(status="unavailable", reason="no GPU",
                                           time_median_s=math.nan, time_samples=[])])
    path = results.write_atomic(frame, tmp_path / "r.parquet")
    back = results.read(path)
    assert list(back.columns) == list(results.COLUMN_NAMES)
    assert back.loc[0, "time_samples"] == [0.1, 0.1]
    assert back.loc[1, "reason"] == "no GPU"
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]  # no temp file left


def test_unknown_column_is_named():
    with pytest.raises(results.SchemaError, match="bogus"):
        results.make_row(bogus=1)


def test_bad_value_names_the_column(tmp_path):
    frame = results.to_frame([_row()])
    frame["batch"] = ["eight"]
    frame.to_parquet(tmp_path / "bad.parquet")
    with pytest.raises(results.SchemaError, match="'batch'"):
        results.read(tmp_path / "bad.parquet")


def test_missing_column_and_bad_status_are_named():
    frame = results.to_frame([_row()])
    with pytest.raises(results.SchemaError, match="time_iqr_s"):
        results.validate(frame.drop(columns=["time_iqr_s"]))
    frame["status"] = ["fast"]
    with pytest.raises(results.SchemaError, match="'status'"):
        results.validate(frame)


def test_ok_rows_must_be_timed():
    with pytest.raises(results.SchemaError, match="time_median_s"):
        results.to_frame([_row(time_median_s=math.nan)])


def test_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "r.parquet"
    results.write_atomic(results.to_frame([_row()]), path)

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", boom)
    with pytest.raises(OSError):
        results.write_atomic(results.to_frame([_row(batch=16)]), path)
    monkeypatch.undo()
    assert results.read(path).loc[0, "batch"] == 8
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]


def test_tables_from_before_the_round_columns_still_read(tmp_path):
    """Baselines and histories written before interleaved rounds keep working."""
    import json

    import pandas as pd

    from equibench import results

    row = results.make_row(run_id="old", level="tp", workload="w", implementation="e3nn",
                           variant="default", direction="forward", precision="float32",
                           batch=1, device="cpu", status="ok", time_median_s=1.0,
                           extra={"cpu_allocator": "tcmalloc"})
    old = pd.DataFrame([row]).drop(columns=list(results.LATER_COLUMNS))
    old.to_parquet(tmp_path / "old.parquet")
    frame = results.read(tmp_path / "old.parquet")
    assert frame["cpu_allocator"].tolist() == ["tcmalloc"]
    assert frame["rounds_id"].tolist() == [""] and frame["round_times_s"].tolist() == [[]]
    assert frame["peak_tensor_bytes"].tolist() == [-1]  # not measured, never zero
    assert json.loads(frame["extra"].iloc[0]) == {"cpu_allocator": "tcmalloc"}
