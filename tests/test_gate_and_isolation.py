"""The correctness gate and per-case process isolation."""

import json
import math
from dataclasses import replace

import pytest
import torch

from equibench.cases import Case
from equibench.measure import MeasureConfig
from equibench.runner import RunSettings, run_case, run_cases

FAST = MeasureConfig(min_repeats=2, max_repeats=5, budget_s=0.2, warmup=0)
SETTINGS = RunSettings(threads=1, measure=FAST, plugins=("plugins_for_tests",), timeout_s=120)


def case(impl, direction="forward", precision="float64", workload="nequip-water", batch=16):
    return Case("tp", workload, impl, "default", direction, precision, batch, "cpu")


@pytest.fixture(scope="module", autouse=True)
def _plugins():
    import plugins_for_tests  # noqa: F401 - registers the broken implementations


@pytest.mark.parametrize("direction", ["forward", "backward", "double_backward"])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_e3nn_passes_its_own_gate(direction, precision):
    row = run_case(case("e3nn", direction, precision), SETTINGS)
    assert row["status"] == "ok", row.get("reason")
    assert row["max_scaled_err"] <= row["tolerance"]
    assert row["time_median_s"] > 0 and row["repeats"] >= 2
    assert row["peak_mem_bytes"] >= 0
    # The gated first call is reported apart from the timed samples.
    assert row["extra"]["first_call_s"] > 0


def test_gate_catches_a_wrong_implementation_and_never_times_it():
    row = run_case(case("test-wrong"), SETTINGS)
    assert row["status"] == "incorrect"
    assert "exceeds tolerance" in row["reason"]
    assert row["max_scaled_err"] > 1e-3
    assert "time_median_s" not in row and "time_samples" not in row


def test_equivariance_is_checked_on_forward():
    row = run_case(case("e3nn", "forward", "float64", workload="nequip-toluene-1parity"), SETTINGS)
    assert row["status"] == "ok"
    assert 0 <= row["equivariance_err"] < 1e-12


def test_unavailable_and_unsupported_precision_say_why():
    row = run_case(case("test-missing"), SETTINGS)
    assert row["status"] == "unavailable" and "not installed" in row["reason"]
    row = run_case(case("e3nn", precision="tfloat32"), SETTINGS)
    assert row["status"] == "unavailable" and "GPU" in row["reason"]


@pytest.mark.slow
def test_crash_and_oom_are_recorded_and_the_sweep_goes_on(tmp_path):
    cases = [case("test-crash"), case("test-oom"), case("e3nn"), case("test-wrong")]
    frame = run_cases(cases, SETTINGS, tmp_path / "r.parquet", progress=False)
    status = dict(zip(frame["implementation"], frame["status"], strict=True))
    assert status == {"test-crash": "error", "test-oom": "oom", "e3nn": "ok",
                      "test-wrong": "incorrect"}
    crash = frame[frame["implementation"] == "test-crash"].iloc[0]
    assert "SIGSEGV" in crash["reason"]
    assert math.isnan(crash["time_median_s"])
    assert (tmp_path / "r.parquet").exists()
    assert frame["git_commit"].iloc[0] and frame["host"].iloc[0]


def test_an_unavailable_implementation_costs_one_case_process(monkeypatch):
    """The first case says the implementation cannot run on this device at all; the other
    cases of that implementation reuse its row instead of starting a process each."""
    from equibench import runner

    started = []
    real = runner._Worker.__init__

    def counting(self, c, settings, ctx, *phase):
        started.append(c)
        real(self, c, settings, ctx, *phase)

    monkeypatch.setattr(runner._Worker, "__init__", counting)
    cases = [case(impl, d, p) for impl in ("openequivariance", "e3nn")
             for d in ("forward", "backward") for p in ("float32", "float64")]
    frame = run_cases(cases, SETTINGS, progress=False)
    oeq = frame[frame["implementation"] == "openequivariance"]
    assert len(oeq) == 4 and (oeq["status"] == "unavailable").all()
    assert oeq["reason"].nunique() == 1 and "GPU" in oeq["reason"].iloc[0]
    assert sorted(zip(oeq["direction"], oeq["precision"], strict=True)) == sorted(
        (c.direction, c.precision) for c in cases[:4])
    assert sum(c.implementation == "openequivariance" for c in started) == 1
    # Case-level reasons (here: none) never stand for other cases: e3nn ran all four.
    assert sum(c.implementation == "e3nn" for c in started) == 4
    assert (frame[frame["implementation"] == "e3nn"]["status"] == "ok").all()


def test_cases_with_one_reference_key_share_one_reference(tmp_path):
    from equibench.levels import Bench
    from equibench.runner import _reference

    computed = []

    def bench(key):
        def reference():
            computed.append(key)
            return {"out": torch.full((3,), float(len(computed)), dtype=torch.float64)}
        return Bench(call=reference, reference=reference, items=1, unit="x", reference_key=key)

    first = _reference(bench("tp|a"), str(tmp_path))
    again = _reference(bench("tp|a"), str(tmp_path))
    other = _reference(bench("tp|b"), str(tmp_path))
    assert computed == ["tp|a", "tp|b"]
    assert torch.equal(first["out"], again["out"]) and not torch.equal(first["out"], other["out"])
    assert _reference(bench(None), str(tmp_path)) and computed[-1] is None  # no key: no cache


def test_implementations_of_a_job_pass_the_gate_on_a_shared_reference():
    cases = [case(impl, "backward", precision)
             for impl in ("e3nn", "cuequivariance") for precision in ("float64", "float32")]
    frame = run_cases(cases, SETTINGS, progress=False)
    assert (frame["status"] == "ok").all(), frame["reason"].tolist()
    assert (frame["max_scaled_err"] <= frame["tolerance"]).all()


def test_implementations_of_a_case_are_timed_in_interleaved_rounds():
    """Each round times every implementation once, in a fresh order; the rows keep one
    median per round and share the group's rounds_id."""
    from plugins_for_tests import CALL_LOG_DIR

    from equibench.paired import speedup_samples

    rounds = 6
    names = ("test-log-a", "test-log-b", "test-log-slow")
    CALL_LOG_DIR.mkdir(exist_ok=True)
    for name in names:
        (CALL_LOG_DIR / f"{name}.log").unlink(missing_ok=True)
    settings = RunSettings(threads=1, plugins=("plugins_for_tests",), timeout_s=120,
                           measure=MeasureConfig(min_repeats=rounds, max_repeats=rounds,
                                                 budget_s=0.0, warmup=0, rounds=rounds))
    frame = run_cases([case(name, "forward", "float32") for name in names], settings,
                      progress=False)
    assert (frame["status"] == "ok").all(), frame["reason"].tolist()
    assert frame["rounds_id"].nunique() == 1 and frame["rounds_id"].iloc[0]
    assert (frame["round_times_s"].map(len) == rounds).all()
    # Calls per process: the gate, the equivariance check (2), one per round, peak memory
    # (resident set, then two for live tensor bytes).
    timed = []
    for name in names:
        times = [float(t) for t in (CALL_LOG_DIR / f"{name}.log").read_text().split()]
        assert len(times) == 3 + rounds + 3
        timed += [(t, name) for t in times[3:-3]]
    order = [name for _, name in sorted(timed)]
    chunks = [tuple(order[i:i + len(names)]) for i in range(0, len(order), len(names))]
    assert all(sorted(chunk) == sorted(names) for chunk in chunks), chunks
    assert len(set(chunks)) > 1, "the order must change between rounds"
    # Paired per round: the 5 ms slower twin is slower in every round.
    rows = frame.set_index("implementation")
    ratios, paired = speedup_samples(rows.loc["test-log-slow"], rows.loc["test-log-a"])
    assert paired and len(ratios) == rounds and (ratios < 1).all()
    # Timed alone, a case has rounds but no partner.
    alone = run_cases([case("test-log-a", "forward", "float32")], settings, progress=False)
    assert alone["rounds_id"].iloc[0] == "" and len(alone["round_times_s"].iloc[0]) == rounds
    # On one thread there is no parallel probe; on two, every round of every case is.
    assert "parallel_slowdown_max" not in json.loads(frame["extra"].iloc[0])["machine_load"]
    two = run_cases([case(name, "forward", "float32") for name in names[:2]],
                    replace(settings, threads=2), progress=False)
    assert (two["status"] == "ok").all(), two["reason"].tolist()
    for extra in two["extra"]:
        load = json.loads(extra)["machine_load"]
        assert load["parallel_probes"] == 2 * rounds and load["parallel_slowdown_max"] > 0


@pytest.mark.parametrize("direction", ["backward", "double_backward"])
def test_a_wrong_forward_output_fails_the_gate_of_every_direction(direction):
    """Gradients of `out + c` are right; the forward output the call also computes is not."""
    row = run_case(case("test-offset", direction), SETTINGS)
    assert row["status"] == "incorrect"
    assert row["reason"].startswith("out:")


def test_a_non_finite_reference_is_an_error_not_a_pass():
    from equibench.correctness import NonFiniteReference, check_outputs
    from equibench.runner import _failed

    out = {"out": torch.zeros(3, dtype=torch.float64)}
    reference = {"out": torch.tensor([0.0, float("nan"), 0.0], dtype=torch.float64)}
    with pytest.raises(NonFiniteReference, match="not finite"):
        check_outputs(out, reference, 1e-9)
    try:
        check_outputs(out, reference, 1e-9)
    except NonFiniteReference as err:
        row = _failed({}, err)
    assert row["status"] == "error" and "not finite" in row["reason"]


def test_rows_say_which_code_ran_and_what_they_were_checked_against():
    cue = run_case(case("cuequivariance", "forward", "float32"), SETTINGS)
    path = cue["extra"]["code_path"]
    assert "method=naive" in path["path"] and "CUDA kernels" in path["fallback"]
    fused = run_case(case("fused", "forward", "float32"), SETTINGS)
    assert "C++" in fused["extra"]["code_path"]["path"]
    assert fused["extra"]["code_path"]["fallback"] == ""
    e3nn = run_case(case("e3nn", "forward", "float32"), SETTINGS)
    assert "implementation under test itself" in e3nn["extra"]["reference"]
    assert "itself" not in fused["extra"]["reference"]


def test_outputs_that_drift_during_timing_fail_the_second_gate():
    row = run_case(case("test-drift", "forward", "float32"), SETTINGS)
    assert row["status"] == "incorrect"
    assert row["reason"].startswith("after timing, the last call: out:")


@pytest.mark.parametrize("breakdown", [True, False])
def test_a_profile_runs_last_and_only_when_asked(monkeypatch, breakdown):
    """A model's profile by category (``Bench.profile``) costs more than its timed calls:
    the runner calls it once, after every timed and memory call, and not at all with
    ``measure.breakdown`` off."""
    from equibench import runner

    calls: list[str] = []
    build = runner._build

    def with_profile(*args, **kwargs):
        bench = build(*args, **kwargs)
        call = bench.call

        def counted():
            calls.append("call")
            return call()
        return replace(bench, call=counted,
                       profile=lambda: calls.append("profile") or {"breakdown": {"all": 1.0}})

    monkeypatch.setattr(runner, "_build", with_profile)
    settings = replace(SETTINGS, measure=replace(FAST, breakdown=breakdown))
    row = run_case(case("e3nn"), settings)
    assert row["status"] == "ok", row.get("reason")
    if breakdown:
        assert calls.count("profile") == 1 and calls[-1] == "profile"
        assert row["extra"]["breakdown"] == {"all": 1.0}
    else:
        assert "profile" not in calls and "breakdown" not in row["extra"]
    assert calls.count("call") >= 1 + FAST.min_repeats + 2  # gate, timing, two memory calls
