"""benchmarks/targets.py: the printed ratios are those of the table's rows."""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd

from equibench import results

REPO = Path(__file__).resolve().parent.parent
BASELINE = REPO / "results" / "baselines" / "ci-cpu.parquet"


def _targets():
    spec = importlib.util.spec_from_file_location("targets", REPO / "benchmarks" / "targets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_printed_ratios_come_from_the_rows(capsys):
    targets = _targets()
    assert targets.main([str(BASELINE)]) == 0
    out = capsys.readouterr().out
    frame = results.read(BASELINE)
    ok = frame[(frame["status"] == "ok") & (frame["precision"] == "float32")]

    def row(**where):
        rows = ok
        for key, value in where.items():
            rows = rows[rows[key] == value]
        return rows.iloc[0]

    conv = dict(level="conv", workload="mace-large@qm9", direction="forward", batch=8)
    e3nn, fused = row(implementation="e3nn", **conv), row(implementation="fused", **conv)
    # The baseline's rows were interleaved: the median of the per-round ratios.
    assert e3nn["rounds_id"] and e3nn["rounds_id"] == fused["rounds_id"]
    ratio = float(np.median(np.asarray(e3nn["round_times_s"])
                            / np.asarray(fused["round_times_s"])))
    line = next(ln for ln in out.splitlines()
                if "conv mace-large@qm9 forward b=8: e3nn / fused" in ln)
    assert f"{ratio:.2f}x" in line
    assert ("met" in line) == (ratio >= 10)
    assert "train_step b=" in out and "peak memory baseline / optimized" in out


def test_roofline_bound_is_the_lower_of_peak_and_bandwidth_times_intensity(tmp_path, capsys):
    machine = tmp_path / "machine.json"
    # A slow memory system: every case of the baseline is then memory-bound.
    machine.write_text('{"cpu": {"peak_gflops": {"float32": 1000.0}, "bandwidth_gbps": 1.0}}')
    assert _targets().main([str(BASELINE), "--machine", str(machine)]) == 0
    out = capsys.readouterr().out
    frame = results.read(BASELINE)
    row = frame[(frame["status"] == "ok") & (frame["precision"] == "float32")
                & (frame["level"] == "conv") & (frame["workload"] == "mace-large@qm9")
                & (frame["implementation"] == "fused") & (frame["direction"] == "forward")
                & (frame["batch"] == 8)].iloc[0]
    bound = 1.0 * row["flops"] / row["bytes"]
    line = next(ln for ln in out.splitlines() if "conv mace-large@qm9 forward b=8: roofline" in ln)
    assert f"{100 * row['gflops_per_s'] / bound:.1f} %" in line and "memory-bound" in line


def test_an_unmeasured_peak_meets_no_target(tmp_path, capsys):
    frame = results.read(BASELINE)
    frame.loc[frame["implementation"] == "e3nn", "peak_mem_bytes"] = -1
    frame.loc[frame["variant"] == "optimized", "peak_mem_bytes"] = 0
    results.write_atomic(frame, tmp_path / "r.parquet")
    assert _targets().main([str(tmp_path / "r.parquet")]) == 0
    out = capsys.readouterr().out
    memory = [ln for ln in out.splitlines() if "peak memory" in ln]
    assert memory and all("not measured" in ln and " met" not in ln for ln in memory)


def test_rows_of_different_runs_are_never_paired(tmp_path, capsys):
    frame = results.read(BASELINE)
    other = frame.assign(run_id="other", host="elsewhere")
    results.write_atomic(pd.concat([frame, other]), tmp_path / "r.parquet")
    assert _targets().main([str(tmp_path / "r.parquet")]) == 0
    out = capsys.readouterr().out
    assert out.count("fused kernels (float32)") == 2 and "run other on elsewhere" in out


def test_mace_targets_are_the_oeq_models(tmp_path, capsys):
    frame = results.read(BASELINE)
    mace = frame[(frame["level"] == "model") & (frame["workload"] == "mace-qm9")]
    assert _targets().main([str(BASELINE)]) == 0
    out = capsys.readouterr().out
    assert "MACE mace-qm9 [small] (float32): no targets" in out
    small = next(ln for ln in out.splitlines() if "inference b=32: e3nn / fused" in ln)
    assert "target" not in small
    # The same rows as the oeq model's are held to its targets.
    results.write_atomic(pd.concat([frame[frame["workload"] != "mace-qm9"],
                                    mace.assign(variant="oeq")]), tmp_path / "r.parquet")
    assert _targets().main([str(tmp_path / "r.parquet")]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("  ") and " b=32: " in ln]
    assert any("e3nn / fused" in ln and "target >= 5x" in ln for ln in lines)
    assert any("train_step" in ln and "e3nn / fused" in ln and "target >= 4x" in ln
               for ln in lines)
    assert any("peak memory fused / e3nn" in ln and "target <= 0.5" in ln for ln in lines)
