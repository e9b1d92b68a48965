"""benchmarks/targets.py: the printed ratios are those of the table's rows."""

import importlib.util
from pathlib import Path

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

    def time(**where):
        rows = ok
        for key, value in where.items():
            rows = rows[rows[key] == value]
        return float(rows["time_median_s"].iloc[0])

    conv = dict(level="conv", workload="mace-large@qm9", direction="forward", batch=8)
    ratio = time(implementation="e3nn", **conv) / time(implementation="fused", **conv)
    line = next(ln for ln in out.splitlines()
                if "conv mace-large@qm9 forward b=8: e3nn / fused" in ln)
    assert f"{ratio:.2f}x" in line
    assert ("met" in line) == (ratio >= 10)
    assert "train_step b=" in out and "peak memory baseline / optimized" in out
