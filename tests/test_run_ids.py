"""Run ids unique per invocation, and the configuration's name in its own column."""

import argparse

import pandas as pd

from equibench import cli, results, run_ids


def _row(run_id: str) -> dict:
    return dict(run_id=run_id, level="tp", workload="w", implementation="e3nn",
                variant="default", direction="forward", precision="float32", batch=1,
                device="cpu", status="ok", time_median_s=1.0)


def test_each_invocation_gets_its_own_id_and_keeps_the_name():
    first, second = run_ids.new_run_id("quick"), run_ids.new_run_id("quick")
    assert first != second and first.startswith("quick-")
    assert run_ids.config_name_of(first) == run_ids.config_name_of(second) == "quick"
    # A name with dashes of its own, and an older id that was the name itself.
    assert run_ids.config_name_of(run_ids.new_run_id("my-run-2")) == "my-run-2"
    assert run_ids.config_name_of("quick") == "quick"


def test_config_name_defaults_from_the_run_id(tmp_path):
    run = run_ids.new_run_id("full")
    frame = results.to_frame([_row(run), {**_row("x"), "config_name": "named"}])
    assert frame["config_name"].tolist() == ["full", "named"]
    # A table written before the column existed reads with the name its run id held.
    old = pd.DataFrame([results.make_row(**_row("quick"))]).drop(columns=["config_name"])
    old.to_parquet(tmp_path / "old.parquet")
    assert results.read(tmp_path / "old.parquet")["config_name"].tolist() == ["quick"]


def test_a_run_takes_the_workflows_id_or_makes_its_own(monkeypatch):
    args = argparse.Namespace(threads=1)
    monkeypatch.delenv(run_ids.ENV, raising=False)
    own = cli._settings(args, {"name": "quick"}).run_id
    assert run_ids.config_name_of(own) == "quick" and own != "quick"
    assert cli._settings(args, {"name": "quick"}).run_id != own
    monkeypatch.setenv(run_ids.ENV, "quick-20260101T000000Z-abcdef")
    assert cli._settings(args, {"name": "quick"}).run_id == "quick-20260101T000000Z-abcdef"
