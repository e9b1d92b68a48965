"""The project's targets (equibench/targets.yaml), judged by the claims engine, and
benchmarks/targets.py, which prints them."""

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from equibench import results, targets
from equibench.cost import executed_multiply_adds
from equibench.workloads import get_tp_workload

REPO = Path(__file__).resolve().parent.parent
BASELINE = REPO / "results" / "baselines" / "ci-cpu.parquet"
RESAMPLES = 200
# The fused convolution's rows of the baseline (conv/mace-large@qm9, b=8) and its peers'.
CONV = {"level": "conv", "workload": "mace-large@qm9", "precision": "float32",
        "variant": "default"}


def _targets_command():
    spec = importlib.util.spec_from_file_location("targets_command",
                                                  REPO / "benchmarks" / "targets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def baseline() -> pd.DataFrame:
    return results.read(BASELINE)


def _where(frame: pd.DataFrame, **where: object) -> pd.Series:
    mask = pd.Series(True, index=frame.index)
    for key, value in where.items():
        mask &= frame[key] == value
    return mask


def _judge(frame: pd.DataFrame, target_id: str) -> list[targets.TargetResult]:
    wanted, _ = targets.load()
    (target,) = (t for t in wanted if t.id == target_id)
    return targets.evaluate([target], frame, resamples=RESAMPLES)


def test_packaged_targets_load_and_use_the_claims_selectors():
    wanted, roofline = targets.load()
    ids = {t.id for t in wanted}
    assert {"conv-vs-e3nn", "tp-vs-e3nn", "se3t-train-time", "se3t-train-memory",
            "mace-inference-vs-e3nn", "mace-train-vs-e3nn", "mace-memory-vs-e3nn"} <= ids
    assert roofline.aim == 0.5 and roofline.cases
    mace = [t for t in wanted if t.id.startswith("mace-") and t.target is not None]
    assert mace and all(t.numerator["variant"] == t.denominator["variant"] == "oeq"
                        for t in mace)


def test_bad_targets_files_are_named(tmp_path):
    bad = tmp_path / "targets.yaml"
    entry = ("  - {id: a, statement: s, quantity: time, target: 2,"
             " numerator: {level: tp}, denominator: {level: conv}%s}\n")
    bad.write_text("targets:\n" + entry % ", colour: red")
    with pytest.raises(ValueError, match="colour"):
        targets.load(bad)
    bad.write_text("targets:\n" + entry % "" * 2)
    with pytest.raises(ValueError, match="duplicate target"):
        targets.load(bad)
    bad.write_text("targets:\n" + (entry % "").replace("level: tp", "host: x"))
    with pytest.raises(ValueError, match="host"):
        targets.load(bad)


def test_printed_ratio_is_the_paired_median_and_its_verdict_the_interval(baseline, capsys):
    assert _targets_command().main([str(BASELINE), "--resamples", str(RESAMPLES)]) == 0
    out = capsys.readouterr().out
    e3nn = baseline[_where(baseline, implementation="e3nn", direction="forward", batch=8,
                           **CONV)].iloc[0]
    fused = baseline[_where(baseline, implementation="fused", direction="forward", batch=8,
                            **CONV)].iloc[0]
    assert e3nn["rounds_id"] and e3nn["rounds_id"] == fused["rounds_id"]
    ratio = float(np.median(np.asarray(e3nn["round_times_s"])
                            / np.asarray(fused["round_times_s"])))
    line = next(ln for ln in out.splitlines()
                if "fused conv/mace-large@qm9 forward float32 b=8 / e3nn " in ln)
    assert f"{ratio:.2f}x" in line
    low, high = (float(v) for v in line.split("[")[1].split("]")[0].split("-"))
    assert low < ratio < high
    assert line.endswith(targets.judge(low, high, 10))
    assert "se3t-train-memory" in out and "roofline" in out


def test_a_verdict_follows_the_whole_interval():
    assert targets.judge(10.0, 12.0, 10) == targets.MET
    assert targets.judge(6.0, 9.9, 10) == targets.MISSED
    assert targets.judge(9.0, 12.0, 10) == targets.UNSETTLED


PLANTS = {
    "synthetic": lambda f, m: f.loc[m, "extra"].map(
        lambda e: json.dumps({**json.loads(e or "{}"), "synthetic": True})),
    "disturbed": lambda f, m: "steal 12% of CPU time",
    "fallback": lambda f, m: f.loc[m, "extra"].map(lambda e: json.dumps(
        {**json.loads(e or "{}"), "code_path": {"path": "naive", "fallback": "pure PyTorch"}})),
    "amortized": lambda f, m: f.loc[m, "extra"].map(
        lambda e: json.dumps({**json.loads(e or "{}"), "amortized": "the plan, built once"})),
}


@pytest.mark.parametrize("plant", [*PLANTS, "unverifiable"])
def test_a_row_that_cannot_count_never_makes_a_target_met(baseline, plant):
    """The baseline meets the convolution's target against e3nn; with the fused rows
    planted as synthetic, disturbed, a fallback, amortized or unverifiable it is never met,
    and the result says why."""
    conv = baseline[_where(baseline, **CONV)]
    (before,) = _judge(conv, "conv-vs-e3nn")
    assert before.verdict == targets.MET
    planted = conv.copy()
    fused = _where(planted, implementation="fused")
    if plant == "unverifiable":
        planted.loc[fused, "status"] = "unverifiable"
        planted.loc[fused, "reason"] = "rounding error as large as a planted error"
    else:
        column = "disturbed" if plant == "disturbed" else "extra"
        planted.loc[fused, column] = PLANTS[plant](planted, fused)
    (after,) = _judge(results.validate(planted), "conv-vs-e3nn")
    assert after.verdict == targets.NOT_MEASURED and not after.pairs
    reason = {"synthetic": "synthetic rows", "disturbed": "disturbed machine",
              "fallback": "fallback: pure PyTorch", "amortized": "amortized",
              "unverifiable": "unverifiable (rounding error"}[plant]
    assert reason in after.note


def test_every_row_synthetic_and_disturbed_meets_nothing(baseline):
    marked = baseline.assign(disturbed="steal 30% of CPU time")
    marked["extra"] = marked["extra"].map(
        lambda e: json.dumps({**json.loads(e or "{}"), "synthetic": True}))
    wanted, _ = targets.load()
    found = targets.evaluate(wanted, results.validate(marked), resamples=RESAMPLES)
    assert found and {r.verdict for r in found} == {targets.NOT_MEASURED}


def test_one_planted_pair_is_left_out_and_named(baseline):
    """A disturbed row of one pair: that pair leaves the judgement, the others stay."""
    # Rows the baseline itself marks disturbed would be left out already: start from
    # none, so that the one planted row is the only one left out.
    tp = baseline[_where(baseline, level="tp", workload="mace-large", precision="float32")]
    tp = results.validate(tp.assign(disturbed=""))
    (before,) = _judge(tp, "tp-vs-e3nn")
    assert before.pairs, "the baseline has no tp-vs-e3nn pair to disturb"
    planted = tp.copy()
    planted.loc[_where(planted, implementation="e3nn", batch=64), "disturbed"] = "steal 9%"
    (after,) = _judge(results.validate(planted), "tp-vs-e3nn")
    assert len(after.pairs) == len(before.pairs) - 1
    assert not any(p.pair.numerator.endswith("b=64") for p in after.pairs)
    assert "left out: 1 x measured on a disturbed machine" in after.note


def test_a_fallback_peer_is_not_measured_and_says_so(baseline):
    """cuEquivariance's CPU rows run its pure-PyTorch fallback: the target against it is
    not measured (before, its ratio printed 'met')."""
    (found,) = _judge(baseline[_where(baseline, **CONV)], "conv-vs-cuequivariance")
    assert found.verdict == targets.NOT_MEASURED and "fallback: naive" in found.note


def test_an_unmeasured_peak_meets_no_target(baseline):
    frame = baseline.copy()
    frame.loc[frame["implementation"] == "e3nn", "peak_tensor_bytes"] = -1
    frame.loc[frame["variant"] == "optimized", "peak_tensor_bytes"] = 0
    for target_id in ("conv-memory-vs-e3nn", "mace-memory-vs-e3nn", "se3t-train-memory"):
        assert {r.verdict for r in _judge(frame, target_id)} == {targets.NOT_MEASURED}


def test_rows_of_different_runs_are_never_paired(baseline):
    conv = baseline[_where(baseline, **CONV)]
    fused_only = conv[conv["implementation"] == "fused"]
    e3nn_elsewhere = conv[conv["implementation"] == "e3nn"].assign(run_id="quick-other")
    (found,) = _judge(pd.concat([fused_only, e3nn_elsewhere], ignore_index=True),
                      "conv-vs-e3nn")
    assert found.verdict == targets.NOT_MEASURED
    (twice,) = _judge(pd.concat([conv, conv.assign(run_id="quick-again")], ignore_index=True),
                      "conv-vs-e3nn")
    assert twice.runs == 2 and all(p.pair.runs == 2 for p in twice.pairs)


def test_mace_targets_are_the_oeq_models(baseline):
    small = baseline[_where(baseline, level="model", workload="mace-qm9", variant="small",
                            precision="float32")]
    (reported,) = _judge(small, "mace-small-vs-e3nn")
    assert reported.verdict == "" and reported.pairs
    assert {p.verdict for p in reported.pairs} == {""}
    assert _judge(small, "mace-inference-vs-e3nn")[0].verdict == targets.NOT_MEASURED
    # The same rows as the oeq model's are held to its targets.
    as_oeq = results.validate(small.assign(variant="oeq"))
    (held,) = _judge(as_oeq, "mace-inference-vs-e3nn")
    assert held.verdict in (targets.MET, targets.MISSED, targets.UNSETTLED)
    assert {p.verdict for p in held.pairs} <= {targets.MET, targets.MISSED, targets.UNSETTLED}


def test_se3t_targets_take_the_largest_batch_both_ran(baseline):
    (found,) = _judge(baseline, "se3t-train-time")
    batches = {p.pair.numerator.split()[1]: p.pair.numerator.rsplit("b=", 1)[1]
               for p in found.pairs}
    sizes = baseline[_where(baseline, level="model", implementation="basis",
                            direction="train_step", status="ok")]
    for workload, batch in batches.items():
        workload = workload.split("/")[1]
        both = (set(sizes[_where(sizes, workload=workload, variant="optimized")]["batch"])
                & set(sizes[_where(sizes, workload=workload, variant="baseline")]["batch"]))
        assert int(batch) == max(both)


def _fused_conv_row(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[_where(frame, implementation="fused", direction="forward", batch=8, **CONV)]


def test_roofline_uses_executed_work_and_the_rows_own_device_probe(baseline):
    row = _fused_conv_row(baseline).iloc[0]
    gpu = row.to_frame().T.assign(device="cuda:0", gpu_name="NVIDIA A100-SXM4-80GB")
    frame = results.validate(pd.concat([row.to_frame().T, gpu], ignore_index=True))
    # A slow memory system for the CPU, a fast one for the GPU: were the CPU's probe used
    # for both (as before), the GPU row would get a figure from it.
    probe = {"cpu": {"peak_gflops": {"float32": 1000.0}, "bandwidth_gbps": 1.0},
             "cuda:0": {"peak_gflops": {"float32": 19500.0}, "bandwidth_gbps": 2039.0}}
    _, spec = targets.load()
    cpu, cuda = targets.roofline(frame, probe, spec)
    executed = 2 * executed_multiply_adds(get_tp_workload("mace-large"), "forward") \
        * json.loads(row["extra"])["edges"]
    assert executed < row["flops"]  # the generated code does less than the papers count
    bound_s = max(executed / 1000e9, row["bytes"] / 1e9)
    assert cpu.fraction == pytest.approx(bound_s / row["time_median_s"])
    assert cpu.executed_gflops_per_s == pytest.approx(executed / row["time_median_s"] / 1e9)
    assert cpu.nominal_gflops_per_s == pytest.approx(row["flops"] / row["time_median_s"] / 1e9)
    assert cpu.bound == "memory"
    # The GPU row runs other kernels (Triton): no executed count, so no fraction from the
    # nominal one; without its own probe entry it says so rather than borrow the CPU's.
    assert math.isnan(cuda.fraction) and "executed work not counted" in cuda.note
    (alone,) = targets.roofline(frame[frame["device"] == "cuda:0"], {"cpu": probe["cpu"]},
                                spec)
    assert alone.note == "no machine probe of device cuda:0"


def test_roofline_names_rows_that_cannot_count(baseline):
    row = _fused_conv_row(baseline).assign(disturbed="steal 20%")
    _, spec = targets.load()
    probe = {"cpu": {"peak_gflops": {"float32": 100.0}, "bandwidth_gbps": 10.0}}
    (figure,) = targets.roofline(results.validate(row), probe, spec)
    assert math.isnan(figure.fraction)
    assert figure.note == "cannot count: measured on a disturbed machine"


def test_printed_roofline_says_which_count_is_which(tmp_path):
    machine = tmp_path / "machine.json"
    machine.write_text('{"cpu": {"peak_gflops": {"float32": 1000.0}, "bandwidth_gbps": 1.0}}')
    command = _targets_command()
    figures = targets.roofline(results.read(BASELINE), json.loads(machine.read_text()),
                               targets.load()[1])
    lines = command.roofline_lines(figures, 0.5)
    assert "nominal = the cost model's count" in lines[0]
    assert "executed = 2 x the multiply-adds" in lines[0]
    conv = next(ln for ln in lines if "fused conv/mace-large@qm9 forward float32 b=8" in ln)
    assert "memory-bound" in conv and "executed" in conv and "nominal" in conv
