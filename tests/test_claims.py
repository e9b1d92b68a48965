"""Claims: the packaged file, the pairing, the bootstrap interval and the verdict rule."""

import argparse
import json
import math

import numpy as np
import pandas as pd
import pytest
from equibench.dashboards.sample import A100, synthetic_results

from equibench import claims, cli_reports, results, run_ids
from equibench.claims import (
    DIFFERENT_HARDWARE,
    DIFFERENT_SIZE,
    NOT_MEASURED,
    NOT_REPRODUCED,
    REPRODUCED,
    Claim,
)

REFERENCE_IDS = {"se3t-train-speedup", "se3t-train-memory", "se3t-max-batch",
                 "se3t-time-to-train", "se3t-readme-throughput", "oeq-tp-vs-cue",
                 "oeq-tp-vs-e3nn", "oeq-mace-inference", "cue-mace-speedup", "ipu-packing",
                 "transformer-codesign"}


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """The sample's rows without their synthetic mark: the verdict logic on rows that stand
    for measured ones (marked synthetic rows never count: see the test below)."""
    sample = synthetic_results(seed=0)
    sample["extra"] = sample["extra"].map(
        lambda e: json.dumps({k: v for k, v in json.loads(e).items() if k != "synthetic"})
        if e else e)
    return sample


def test_synthetic_rows_never_reproduce_a_claim():
    found = _evaluate(claims.load(), synthetic_results(seed=0))
    assert REPRODUCED not in {r.verdict for r in found}
    assert any("synthetic rows (not measured)" in r.note for r in found)


def _evaluate_claim(claim: Claim, frame: pd.DataFrame, **kw) -> list[claims.ClaimResult]:
    """One run's claim without the run-to-run widening, whose own test is below."""
    return claims.evaluate_claim(claim, frame, **{"run_spread": 1.0, **kw})


def _evaluate(found: list[Claim], frame: pd.DataFrame, **kw) -> list[claims.ClaimResult]:
    return claims.evaluate(found, frame, **{"run_spread": 1.0, **kw})


def _claim(**kw) -> Claim:
    base = dict(id="t", source="test", statement="test", claimed=2.0, hardware="A100",
                quantity="time", numerator={"level": "tp", "implementation": "cuequivariance"},
                denominator={"level": "tp", "implementation": "e3nn"})
    return Claim(**{**base, **kw})


def _by_machine(found: list[claims.ClaimResult]) -> dict[str, claims.ClaimResult]:
    return {r.machine: r for r in found}


def test_packaged_claims_cover_the_reference():
    loaded = claims.load()
    assert {c.id for c in loaded} == REFERENCE_IDS
    for c in loaded:
        assert c.source and c.statement and c.hardware and c.claimed > 0
        assert c.measurable or c.reason
    unmeasurable = {(c.id, c.version) for c in loaded if not c.measurable}
    assert unmeasurable == {("se3t-time-to-train", "README"), ("transformer-codesign", "")}
    # NVIDIA's AMP figures are float16 autocast with float32 weights.
    max_batch = next(c for c in loaded if c.id == "se3t-max-batch")
    assert max_batch.numerator["precision"] == "amp-float16"


def test_packaged_claims_on_sample_results(frame):
    found = {(r.claim.id, r.machine): r for r in _evaluate(claims.load(), frame)}
    # The sample's openequivariance is 5x cuequivariance and 10x e3nn on the A100.
    assert found[("oeq-tp-vs-cue", A100)].verdict == REPRODUCED
    assert found[("oeq-tp-vs-e3nn", A100)].verdict == REPRODUCED
    # se3t measured on a CPU and an A100; its memory claim was made on a V100.
    assert found[("se3t-train-memory", "AMD EPYC 7763")].verdict == DIFFERENT_HARDWARE
    assert found[("se3t-train-memory", A100)].verdict == DIFFERENT_HARDWARE
    assert found[("se3t-time-to-train", "")].verdict == NOT_MEASURED
    assert "8 GPUs" in found[("se3t-time-to-train", "")].note
    assert found[("ipu-packing", "")].note == "no matching ok rows"


def test_ratio_orientation_and_interval(frame):
    found = _by_machine(_evaluate_claim(_claim(claimed=2.0), frame))
    a100 = found[A100]
    # cuequivariance takes half e3nn's time in the sample: 2x faster.
    assert a100.measured == pytest.approx(2.0, rel=0.05)
    assert a100.ci_low <= a100.measured <= a100.ci_high
    assert a100.ci_high - a100.ci_low < 0.2
    assert a100.pairs == 16  # 2 workloads x 2 directions x 2 precisions x 2 batches
    assert a100.verdict == REPRODUCED and a100.hardware_match
    assert found["AMD EPYC 7763"].verdict == DIFFERENT_HARDWARE
    assert not found["AMD EPYC 7763"].hardware_match
    # The same ratio as throughput (bigger is better) and the inverse claim.
    as_throughput = _by_machine(_evaluate_claim(_claim(quantity="throughput"), frame))
    assert as_throughput[A100].measured == pytest.approx(a100.measured, rel=1e-9)
    inverse = _claim(numerator=a100.claim.denominator, denominator=a100.claim.numerator)
    assert _by_machine(_evaluate_claim(inverse, frame))[A100].measured == \
        pytest.approx(1 / a100.measured, rel=1e-9)


@pytest.mark.parametrize("machine, expected", [
    ("NVIDIA A100-SXM4-80GB", True), ("NVIDIA A100 80GB PCIe", True), ("a100", True),
    ("NVIDIA RTX A1000", False), ("NVIDIA H100 80GB HBM3", False), ("AMD EPYC 7763", False)])
def test_hardware_match_is_a_token_of_the_gpu_name(machine, expected):
    assert claims.hardware_matches("A100", machine) is expected


def test_verdict_rule_uses_the_lower_bound_and_tolerance(frame):
    result = _by_machine(_evaluate_claim(_claim(), frame))[A100]
    at_bar = result.ci_low * 1.1  # the largest claim the interval still supports
    assert _by_machine(_evaluate_claim(_claim(claimed=at_bar * 0.999), frame))[
        A100].verdict == REPRODUCED
    assert _by_machine(_evaluate_claim(_claim(claimed=at_bar * 1.001), frame))[
        A100].verdict == NOT_REPRODUCED
    strict = _claim(claimed=result.measured * 1.05, tolerance=1.0)
    assert _by_machine(_evaluate_claim(strict, frame))[A100].verdict == NOT_REPRODUCED


def test_no_rows_and_unmeasurable_claims_are_not_measured(frame):
    absent = _claim(numerator={"implementation": "nonexistent"})
    (result,) = _evaluate_claim(absent, frame)
    assert result.verdict == NOT_MEASURED and math.isnan(result.measured)
    off = _claim(measurable=False, reason="needs 8 GPUs")
    assert _evaluate_claim(off, frame)[0].verdict == NOT_MEASURED
    failed = frame.assign(status="error", reason="boom", time_median_s=math.nan)
    assert _evaluate_claim(_claim(), failed)[0].verdict == NOT_MEASURED


def test_up_to_is_the_upper_quartile_so_one_noisy_pair_cannot_carry_it(frame):
    claim = _claim(numerator={"level": "tp", "implementation": "openequivariance"},
                   aggregate="upper_quartile")
    up_to = _by_machine(_evaluate_claim(claim, frame))[A100]
    ratios = sorted(p.ratio for p in up_to.pair_list)
    assert up_to.measured == pytest.approx(float(np.percentile(ratios, 75)))
    assert up_to.ci_low <= up_to.measured <= up_to.ci_high
    assert "upper quartile over pairs" in up_to.note
    # One pair 20x faster than the rest (a noisy round, a lucky run): the maximum would
    # follow it; the upper quartile moves no further than the next pair.
    lucky = frame.copy()
    row = lucky.index[(lucky["implementation"] == "openequivariance")
                      & (lucky["gpu_name"] == A100) & (lucky["level"] == "tp")][0]
    lucky.at[row, "time_median_s"] /= 20
    lucky.at[row, "time_samples"] = [t / 20 for t in lucky.at[row, "time_samples"]]
    lucky.at[row, "round_times_s"] = [t / 20 for t in lucky.at[row, "round_times_s"]]
    moved = _by_machine(_evaluate_claim(claim, results.validate(lucky)))[A100]
    assert moved.pair_max > 10 * up_to.pair_max
    assert moved.measured <= ratios[-1] * 1.001
    with pytest.raises(ValueError, match="aggregate 'max'"):
        _claim(aggregate="max")


def test_absolute_claim_with_scale(frame):
    claim = _claim(quantity="throughput", denominator=None, scale=1e-3, unit="mol/ms",
                   numerator={"workload": "se3t-qm9", "variant": "nvidia-default", "batch": 240})
    result = _by_machine(_evaluate_claim(claim, frame))[A100]
    rows = frame[(frame["workload"] == "se3t-qm9") & (frame["variant"] == "nvidia-default")
                 & (frame["batch"] == 240) & (frame["gpu_name"] == A100)]
    assert result.measured == pytest.approx(rows["throughput"].iloc[0] * 1e-3, rel=1e-6)
    assert "mol/ms" in claims.table([result]).loc[0, "claimed"]


def _batch_row(variant: str, batch: int, status: str, reason: str = "") -> dict:
    ok = status == "ok"
    return dict(run_id="r", level="model", workload="se3t-qm9", implementation="basis",
                variant=variant, direction="train_step", precision="float32",
                batch=batch, device="cuda:0", status=status, gpu_name="Tesla V100-32GB",
                reason=reason, host="h", time_median_s=0.1 if ok else math.nan,
                time_samples=[0.1] if ok else [])


MAX_BATCH = _claim(quantity="max_batch", claimed=10, hardware="V100",
                   numerator={"variant": "low-memory"}, denominator={"variant": "baseline"})
LOW_MEMORY = [_batch_row("low-memory", b, "ok") for b in (100, 500, 1000)]


def test_max_batch_ratio_counts_only_ok_batches():
    frame = results.to_frame(
        [_batch_row("baseline", b, "ok") for b in (50, 100)]
        + [_batch_row("baseline", 200, "oom", "CUDA out of memory")] + LOW_MEMORY)
    (result,) = _evaluate_claim(MAX_BATCH, frame)
    assert result.measured == pytest.approx(10) and result.verdict == REPRODUCED


@pytest.mark.parametrize("tried, why", [
    ([], "its largest ok batch 100 is the largest it ran, so its out-of-memory size is not "
         "measured"),
    ([_batch_row("baseline", 200, "error", "timed out after 1800 s")],
     "after its largest ok batch 100, batch 200 was error (timed out after 1800 s), not out "
     "of memory"),
    ([_batch_row("baseline", 200, "error", "timed out after 1800 s"),
      _batch_row("baseline", 400, "oom", "CUDA out of memory")],
     "after its largest ok batch 100, batch 200 was error (timed out after 1800 s), not out "
     "of memory"),
    ([{**_batch_row("baseline", 200, "ok"), "disturbed": "steal 9%"}],
     "after its largest ok batch 100, batch 200 was ok but cannot count (measured on a "
     "disturbed machine), not out of memory"),
])
def test_a_max_batch_claim_needs_the_baselines_out_of_memory(tried, why):
    """The baseline ran batches 50 and 100 ok and then none, or timed out at 200: its limit
    was never measured, so the 10x would be the sweep's batches, not memory."""
    frame = results.to_frame([_batch_row("baseline", b, "ok") for b in (50, 100)] + tried
                             + LOW_MEMORY)
    (result,) = _evaluate_claim(MAX_BATCH, frame)
    assert result.verdict == NOT_MEASURED and math.isnan(result.measured)
    assert result.note.startswith("only rows that cannot count matched: 1 x max batch not "
                                  "measured: basis[baseline] model/se3t-qm9 train_step "
                                  f"float32: {why}")


def _se3t_row(variant: str, batch: int, gpu: str, t: float, status: str = "ok",
              reason: str = "") -> dict:
    ok = status == "ok"
    return dict(run_id="r", level="model", workload="se3t-qm9", implementation="basis",
                variant=variant, direction="train_step", precision="float32", batch=batch,
                device="cuda:0" if gpu else "cpu", status=status, reason=reason,
                gpu_name=gpu, cpu_model="Xeon", host="h", time_median_s=t if ok else math.nan,
                time_samples=[t] * 5 if ok else [])


def test_a_claim_missing_its_own_batch_is_measured_at_the_largest_batch_run():
    claim = _claim(quantity="time", claimed=10, hardware="A100",
                   numerator={"variant": "nvidia-default", "batch": 100},
                   denominator={"variant": "baseline", "batch": 100})
    assert claim.batch == 100 and "batch" not in claim.at_any_batch().numerator
    # Batches 4 and 8 on a CPU, 8 on an A100: the CPU uses 8, never 4, and no pair mixes
    # batches; the A100 matches the hardware but not the size.
    cpu = [_se3t_row("baseline", b, "", 1.0 * b) for b in (4, 8)] + [
        _se3t_row("nvidia-default", b, "", 0.5 * b if b == 4 else 0.25 * b) for b in (4, 8)]
    gpu = [_se3t_row("baseline", 8, A100, 0.1), _se3t_row("nvidia-default", 8, A100, 0.01)]
    found = _by_machine(_evaluate_claim(claim, results.to_frame(cpu + gpu)))
    on_cpu = found["Xeon"]
    assert on_cpu.verdict == DIFFERENT_HARDWARE and on_cpu.pairs == 1
    assert on_cpu.measured == pytest.approx(4.0)
    assert "at batch 8, not the claim's 100" in on_cpu.note
    assert found[A100].verdict == DIFFERENT_SIZE and found[A100].measured == pytest.approx(10)
    # Where the claim's own batch ran, only it counts there and the verdict is the usual
    # one; the CPU, which did not run it, is still measured at its largest batch.
    own = cpu + gpu + [_se3t_row("baseline", 100, A100, 1.0),
                       _se3t_row("nvidia-default", 100, A100, 0.05)]
    found = _by_machine(_evaluate_claim(claim, results.to_frame(own)))
    assert found[A100].verdict == REPRODUCED and found[A100].measured == pytest.approx(20)
    assert found["Xeon"].measured == pytest.approx(4.0)


def test_a_claim_that_could_not_run_quotes_why():
    claim = _claim(numerator={"variant": "nvidia-default", "batch": 100},
                   denominator={"variant": "baseline", "batch": 100})
    rows = [_se3t_row("baseline", 8, "", 1.0),
            _se3t_row("nvidia-default", 8, "", 0, status="unavailable",
                      reason="openequivariance needs CUDA")]
    (result,) = _evaluate_claim(claim, results.to_frame(rows))
    assert result.verdict == NOT_MEASURED
    assert "unavailable (openequivariance needs CUDA)" in result.note
    # None of its cases ran (a GPU-only suite on a CPU): the claim says what it needs.
    gpu_only = _claim(numerator={"implementation": "openequivariance"},
                      needs_gpu="OpenEquivariance's CUDA/HIP kernels")
    (result,) = _evaluate_claim(gpu_only, results.to_frame(rows))
    assert result.note == ("needs a GPU (OpenEquivariance's CUDA/HIP kernels); none of its "
                           "cases ran here")


def test_bad_claims_files_are_named(tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text("claims:\n  - {id: a, source: s, statement: s, claimed: 1, hardware: A100,"
                   " numerator: {level: tp}, colour: red}\n")
    with pytest.raises(ValueError, match="colour"):
        claims.load(bad)
    bad.write_text("claims:\n  - {id: a, source: s, statement: s, claimed: 1, hardware: A100,"
                   " numerator: {host: x}}\n")
    with pytest.raises(ValueError, match="host"):
        claims.load(bad)
    bad.write_text("claims:\n" + "  - {id: a, source: s, statement: s, claimed: 1, hardware: X,"
                   " numerator: {level: tp}}\n" * 2)
    with pytest.raises(ValueError, match="duplicate"):
        claims.load(bad)
    with pytest.raises(ValueError, match="reason"):
        _claim(measurable=False)
    with pytest.raises(ValueError, match="quantity"):
        _claim(quantity="speed")


def test_claims_cli_prints_the_table(frame, tmp_path, capsys):
    results.write_atomic(frame, tmp_path / "r.parquet")
    parser = argparse.ArgumentParser()
    cli_reports.add_parsers(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["claims", str(tmp_path), "--resamples", "200", "--markdown",
                              "--run-spread", "1", "--pairs"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("| claim | version | claimed | measured | wording |")
    assert ("| claim | version | measured on | numerator | denominator | runs | ratio | 95% CI |"
            in out)
    for claim_id in REFERENCE_IDS:
        assert claim_id in out
    assert "| reproduced |" in out and "| different hardware |" in out


def test_interleaved_rows_give_the_paired_ratio_and_a_tighter_interval():
    """Rows timed in the same rounds: the claim's ratio is the median of the per-round
    ratios, which a drifting machine leaves alone; the raw samples would not."""
    drift = [1.0, 2.5, 0.6, 1.8, 1.0, 3.0, 0.8]  # the machine's speed, per round

    def row(impl: str, t: float) -> dict:
        times = [t * d for d in drift]
        return dict(run_id="r", level="tp", workload="w", implementation=impl,
                    variant="default", direction="forward", precision="float32", batch=64,
                    device="cuda:0", status="ok", time_median_s=sorted(times)[3],
                    time_samples=times, round_times_s=times, rounds_id="g1", repeats=7,
                    gpu_name=A100, host="h")

    frame = results.to_frame([row("cuequivariance", 1.0), row("e3nn", 2.0)])
    (found,) = _evaluate([_claim(claimed=2.0, quantity="throughput")], frame)
    assert found.measured == pytest.approx(2.0)
    assert found.ci_low == pytest.approx(2.0) and found.ci_high == pytest.approx(2.0)
    assert found.verdict == REPRODUCED
    unpaired = frame.assign(rounds_id="")
    (apart,) = _evaluate([_claim(claimed=2.0, quantity="throughput")], unpaired)
    assert apart.ci_high - apart.ci_low > 1.0  # the drift lands in the interval


def test_fallback_rows_never_stand_for_the_product(frame):
    """cuEquivariance's pure-PyTorch fallback is not what a claim about cuEquivariance
    measured: its rows are left out, and the verdict says why."""
    import json

    marked = frame.copy()
    cue = marked["implementation"] == "cuequivariance"
    marked.loc[cue, "extra"] = json.dumps(
        {"code_path": {"path": "method=naive", "fallback": "naive: pure PyTorch"}})
    claim = next(c for c in claims.load() if c.id == "oeq-tp-vs-cue")
    found = _by_machine(_evaluate([claim], results.validate(marked)))
    assert found[A100].verdict == NOT_MEASURED
    assert found[A100].note.startswith(
        "only rows that cannot count matched: ") and "x fallback: naive: pure PyTorch" in \
        found[A100].note
    assert _by_machine(_evaluate([claim], frame))[A100].verdict == REPRODUCED


def test_every_pair_is_listed_with_min_geomean_and_max(frame):
    geo, = (r for r in _evaluate_claim(_claim(), frame) if r.machine == A100)
    assert len(geo.pair_list) == geo.pairs == 16
    ratios = [p.ratio for p in geo.pair_list]
    assert geo.pair_min == pytest.approx(min(ratios)) and geo.pair_max == pytest.approx(
        max(ratios))
    assert geo.pair_min <= geo.pair_geomean <= geo.pair_max
    assert geo.measured == pytest.approx(geo.pair_geomean)
    up_to, = (r for r in _evaluate_claim(_claim(aggregate="upper_quartile"), frame)
              if r.machine == A100)
    assert up_to.measured == pytest.approx(np.percentile(ratios, 75))
    pair = geo.pair_list[0]
    assert pair.numerator.startswith("cuequivariance tp/") and pair.denominator.startswith(
        "e3nn tp/")
    assert pair.ci_low <= pair.ratio <= pair.ci_high and pair.runs == 1
    shown = claims.table([geo, up_to])
    assert list(shown["wording"]) == [claims.WORDING["geomean"],
                                      claims.WORDING["upper_quartile"]]
    assert len(claims.pairs_table([geo, up_to])) == 32


def test_one_run_is_widened_by_the_run_to_run_spread(frame):
    bare, = (r for r in _evaluate_claim(_claim(), frame) if r.machine == A100)
    wide, = (r for r in claims.evaluate_claim(_claim(), frame) if r.machine == A100)
    assert wide.runs == 1 and "run-to-run" in wide.note
    assert wide.ci_low == pytest.approx(bare.ci_low / claims.SINGLE_RUN_SPREAD)
    assert wide.ci_high == pytest.approx(bare.ci_high * claims.SINGLE_RUN_SPREAD)
    assert wide.measured == pytest.approx(bare.measured)
    # Each pair's own interval too (targets judge pair by pair).
    for narrow, widened in zip(bare.pair_list, wide.pair_list, strict=True):
        assert widened.ci_low == pytest.approx(narrow.ci_low / claims.SINGLE_RUN_SPREAD)
        assert widened.ci_high == pytest.approx(narrow.ci_high * claims.SINGLE_RUN_SPREAD)


def test_one_run_of_memory_is_not_widened_by_the_timing_spread():
    """A memory ratio measured exactly at the claim is reproduced from one run: the
    run-to-run spread of timings says nothing about bytes."""
    rows = [{**_two_impl_row("r1", impl, 1.0), "peak_tensor_bytes": mem}
            for impl, mem in (("cuequivariance", 1_000), ("e3nn", 4_300))]
    claim = _claim(quantity="peak_tensor_bytes", claimed=4.3)
    (found,) = claims.evaluate_claim(claim, results.to_frame(rows))
    assert found.measured == pytest.approx(4.3) and found.ci_low == pytest.approx(4.3)
    assert found.verdict == REPRODUCED and "spread not known" in found.note
    assert "widened" not in found.note


@pytest.mark.parametrize("plant, reason", [
    ({"disturbed": "steal 9% of CPU time"}, "measured on a disturbed machine"),
    ({"extra": {"synthetic": True}}, "synthetic rows (not measured)"),
    ({"extra": {"amortized": "the plan, built once"}},
     "amortized (work done outside the timed call)"),
    ({"extra": {"code_path": {"path": "naive", "fallback": "pure PyTorch"}}},
     "fallback: pure PyTorch"),
])
def test_rows_that_cannot_count_are_left_out_and_named(plant, reason):
    """A 10x pair planted as disturbed, synthetic, amortized or a fallback never counts:
    beside a 2x pair the claim measures 2x; alone it is not measured, saying why."""
    counted = [_two_impl_row("r1", "cuequivariance", 1.0), _two_impl_row("r1", "e3nn", 2.0)]
    clean = [{**_two_impl_row("r1", impl, t), "workload": "v"}
             for impl, t in (("cuequivariance", 1.0), ("e3nn", 10.0))]
    planted = [{**clean[0], **plant}, clean[1]]
    assert _evaluate_claim(_claim(), results.to_frame(counted + clean))[0].pairs == 2
    (found,) = _evaluate_claim(_claim(), results.to_frame(counted + planted))
    assert found.pairs == 1 and found.measured == pytest.approx(2.0, rel=0.05)
    assert f"left out: 1 x {reason}" in found.note
    (alone,) = _evaluate_claim(_claim(), results.to_frame(planted))
    assert alone.verdict == NOT_MEASURED and math.isnan(alone.measured)
    assert alone.note == f"only rows that cannot count matched: 1 x {reason}"


def test_an_unverifiable_row_never_counts():
    rows = [_two_impl_row("r1", "cuequivariance", 1.0),
            {**_two_impl_row("r1", "e3nn", 10.0), "status": "unverifiable",
             "reason": "rounding error as large as a planted error"}]
    (found,) = _evaluate_claim(_claim(), results.to_frame(rows))
    assert found.verdict == NOT_MEASURED
    assert "unverifiable (rounding error as large as a planted error)" in found.note


def test_a_batch_fixed_on_one_side_only_is_refused():
    with pytest.raises(ValueError, match="fix batch on both selectors or on neither"):
        _claim(numerator={"level": "tp", "batch": 8}, denominator={"level": "tp"})


def _two_impl_row(run: str, impl: str, t: float) -> dict:
    times = [t * f for f in (1.0, 1.02, 0.99, 1.01, 0.98)]
    return dict(run_id=run, level="tp", workload="w", implementation=impl, variant="default",
                direction="forward", precision="float32", batch=64, device="cuda:0",
                status="ok", time_median_s=sorted(times)[2], time_samples=times,
                round_times_s=times, rounds_id=f"{run}-g", repeats=5, gpu_name=A100,
                host="h")


def test_several_runs_put_their_spread_in_the_interval():
    """Two runs of one pair at 2x and 3x: the pair's ratio is their median and the interval
    spans both, with no widening; each run alone has an interval of a few percent."""
    rows = [_two_impl_row("r1", "cuequivariance", 1.0), _two_impl_row("r1", "e3nn", 2.0),
            _two_impl_row("r2", "cuequivariance", 1.0), _two_impl_row("r2", "e3nn", 3.0)]
    frame = results.to_frame(rows)
    (found,) = claims.evaluate_claim(_claim(claimed=2.0), frame)
    assert found.runs == 2 and found.pairs == 1 and found.note == ""
    assert found.pair_list[0].runs == 2
    assert found.measured == pytest.approx(2.5, rel=0.02)
    assert found.ci_low < 2.1 and found.ci_high > 2.9
    (alone,) = claims.evaluate_claim(_claim(claimed=2.0), frame[frame["run_id"] == "r1"],
                                     run_spread=1.0)
    assert alone.ci_high - alone.ci_low < 0.15


def test_two_runs_of_one_configuration_count_as_two_runs():
    """Two invocations of the preset `quick` on one host, at 2x and 3x: each row carries its
    invocation's own run id, so the claim sees two runs (median 2.5x), never one run whose
    value is whichever row came last."""
    first, second = run_ids.new_run_id("quick"), run_ids.new_run_id("quick")
    assert first != second
    rows = [_two_impl_row(first, "cuequivariance", 1.0), _two_impl_row(first, "e3nn", 2.0),
            _two_impl_row(second, "cuequivariance", 1.0), _two_impl_row(second, "e3nn", 3.0)]
    frame = results.to_frame(rows)
    assert set(frame["config_name"]) == {"quick"}
    (found,) = claims.evaluate_claim(_claim(claimed=2.0), frame)
    assert found.runs == 2 and found.pair_list[0].runs == 2
    assert found.measured == pytest.approx(2.5, rel=0.02)
    # Tables from before unique ids named both runs `quick`: one run, at the two rows'
    # median (not the last row's 3x), and the note says why.
    (old,) = claims.evaluate_claim(_claim(claimed=2.0), frame.assign(run_id="quick"))
    assert old.runs == 1 and old.measured == pytest.approx(2.5, rel=0.02)
    assert "1 pair(s) had several rows under one run id" in old.note


def test_largest_batch_pairs_only_the_largest_batch_both_ran():
    claim = _claim(numerator={"variant": "nvidia-default"}, denominator={"variant": "baseline"},
                   largest_batch=True)
    rows = [_se3t_row("baseline", b, A100, 1.0 * b) for b in (4, 8, 16)] + [
        _se3t_row("nvidia-default", b, A100, 0.5 * b if b == 4 else 0.1 * b) for b in (4, 8)]
    (found,) = _evaluate_claim(claim, results.to_frame(rows))
    assert found.pairs == 1 and found.measured == pytest.approx(10)
    assert found.pair_list[0].numerator.endswith("b=8")
    with pytest.raises(ValueError, match="largest_batch"):
        _claim(numerator={"batch": 8}, denominator={"batch": 8}, largest_batch=True)


def test_cue_mace_claim_is_pinned_to_one_model_and_precision():
    claim = next(c for c in claims.load() if c.id == "cue-mace-speedup")
    for side in (claim.numerator, claim.denominator):
        assert side["variant"] == "oeq" and side["precision"] == "float32"


def test_oeq_mace_claim_is_pinned_to_the_model_it_was_made_on():
    claim = next(c for c in claims.load() if c.id == "oeq-mace-inference")
    assert claim.numerator["variant"] == claim.denominator["variant"] == "oeq"


def test_every_published_version_of_a_revised_claim_is_checked(frame):
    loaded = claims.load()
    versions = {c.id: [] for c in loaded}
    for c in loaded:
        versions[c.id].append((c.version, c.claimed))
    assert dict(versions["oeq-tp-vs-cue"]) == {"arXiv v1": 4.5, "arXiv HTML rendering (ar5iv)": 4.8,
                                               "arXiv v4": 1.3, "README": 1.0}
    assert {v for v, _ in versions["oeq-mace-inference"]} >= {"arXiv v1", "arXiv v4"}
    assert {claimed for _, claimed in versions["se3t-train-memory"]} == {4.7, 9, 43}
    # 21x is 1780 / 83 mol/s, with AMP; the FP32 figure is 1680 / 83.
    assert dict(versions["se3t-train-speedup"]) == {'blog, "21x" (the AMP figure)': 21,
                                                    "blog, FP32 figure": 20.2}
    # The sample's openequivariance is 5x cuequivariance; slowed 2.5x it is 2x: v4's 1.3x and
    # the README's parity hold, v1's 4.5x and the rendering's 4.8x do not.
    slower = frame.copy()
    oeq = slower["implementation"] == "openequivariance"
    slower.loc[oeq, "time_median_s"] *= 2.5
    slower.loc[oeq, "time_samples"] = slower.loc[oeq, "time_samples"].map(
        lambda t: [x * 2.5 for x in t])
    moved = claims.versions_table(_evaluate(loaded, results.validate(slower)))
    row = moved[moved["claim"] == "oeq-tp-vs-cue"].iloc[0]
    assert "arXiv v1 (2025-01): 4.5x" in row["claimed, by version"]
    assert "arXiv v4: 1.3x" in row["claimed, by version"]
    assert row["we reproduce"] == "arXiv v4, README"
    assert "arXiv v1: not reproduced on NVIDIA A100" in row["verdict, by version"]
    # A claim with one version has no row; NVIDIA's two figures of the 21x claim do.
    assert "cue-mace-speedup" not in set(moved["claim"])
    speedup = moved[moved["claim"] == "se3t-train-speedup"].iloc[0]
    assert speedup["claimed, by version"] == ('blog, "21x" (the AMP figure): 21x; '
                                              "blog, FP32 figure: 20.2x")


def test_a_duplicated_claim_version_is_named(tmp_path):
    bad = tmp_path / "claims.yaml"
    entry = ("  - {id: a, version: v1, source: s, statement: s, claimed: 1, hardware: X,"
             " numerator: {level: tp}}\n")
    bad.write_text("claims:\n" + entry * 2)
    with pytest.raises(ValueError, match="distinct `version`"):
        claims.load(bad)
