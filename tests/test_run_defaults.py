"""`equibench run` takes its default direction, variant, batch and budget from the level
(issue 36, item 7), and its progress bar shows the phase of the case it is on."""

import pandas as pd
import pytest

from equibench import cli
from equibench.cases import LEVEL_DEFAULTS, MD_ATOM_STEPS_PER_CALL, Case
from equibench.cli import build_parser, default_batch, resolve_level_defaults
from equibench.measure import MeasureConfig


@pytest.fixture
def diamond64(tmp_path):
    """The 64-atom diamond of the issue, written by ASE as a user would."""
    import ase.build
    import ase.io

    path = tmp_path / "diamond.xyz"
    ase.io.write(path, ase.build.bulk("C", "diamond", a=3.567, cubic=True).repeat(2))
    return str(path)


def _args(*argv: str):
    return resolve_level_defaults(build_parser().parse_args(
        ["run", "--implementation", "e3nn,fused", *argv]))


@pytest.mark.parametrize(("level", "direction", "variant", "budget"), [
    ("tp", "forward", "default", None),
    ("conv", "forward", "default", 3.0),
    ("model", "inference", "default", 3.0),
    ("md", "nve", "small", 3.0),
])
def test_direction_variant_and_budget_come_from_the_level(level, direction, variant, budget):
    args = _args("--level", level, "--workload", "w")
    assert (args.direction, args.variant, args.budget) == (direction, variant, budget)
    assert args.batch is None  # per workload: default_batch


def test_the_tensor_product_defaults_are_todays():
    """tp, the default level, times what `equibench run` always timed: forward, 1,024
    products, the schema's budget."""
    args = _args("--workload", "mace-large")
    assert (args.level, args.direction, args.variant) == ("tp", "forward", "default")
    assert default_batch("tp", "mace-large") == 1024
    assert args.budget is None  # _settings then takes the schema's measure.budget_s


def test_a_batch_is_sized_to_what_it_counts_at_each_level(diamond64):
    assert default_batch("conv", "mace-large@qm9") == 8
    assert default_batch("model", "mace-qm9") == 4
    # md: MD steps per timed call, sized by the structure's atoms.
    assert MD_ATOM_STEPS_PER_CALL == 256
    assert default_batch("md", diamond64) == 4
    assert default_batch("md", "diamond") == 32  # the 8-atom cell
    assert default_batch("md", "water-box") == 10  # 24 atoms
    assert default_batch("md", "diamond@3x3x3") == 1  # 216 atoms
    assert default_batch("md", "diamond@4x4x4") == 1  # 512 atoms: at least one step
    # Not a structure: the level's fallback (the name check then says what is wrong).
    assert default_batch("md", "no-such-file.xyz") == LEVEL_DEFAULTS["md"].batch == 1


@pytest.mark.parametrize("level", ["tp", "conv", "model", "md"])
def test_flags_given_are_kept_as_given(level):
    args = _args("--level", level, "--workload", "w", "--direction", "backward",
                 "--variant", "default", "--batch", "1024,8", "--budget", "10")
    assert (args.direction, args.variant, args.batch, args.budget) == (
        "backward", "default", [1024, 8], 10.0)


@pytest.fixture
def captured(monkeypatch):
    """The cases and settings `equibench run` would run (nothing runs, no process
    starts)."""
    from equibench import runner

    seen: dict = {}

    def run_cases(cases, settings, out, progress=True, on_row=None):
        seen.update(cases=list(cases), settings=settings)
        return pd.DataFrame(columns=["implementation", "reason"])

    monkeypatch.setattr(runner, "run_cases", run_cases)
    monkeypatch.setattr(cli, "_start_fork_server", lambda *args, **kwargs: None)
    monkeypatch.setattr(cli, "_names_known", lambda *args, **kwargs: True)
    return seen


def test_md_with_only_a_workload_runs_nve_steps_not_1024(captured, diamond64):
    """The issue's command: it stopped at once on `unknown direction 'forward'`, and with
    `--direction nve` timed 1,024 MD steps per call (15 minutes without finishing a case)."""
    assert cli.main(["run", "--level", "md", "--workload", diamond64,
                     "--implementation", "e3nn,fused"]) == 0
    cases = captured["cases"]
    assert [c.implementation for c in cases] == ["e3nn", "fused"]
    assert {(c.direction, c.variant, c.batch) for c in cases} == {("nve", "small", 4)}
    assert captured["settings"].measure.budget_s == 3.0


def test_each_md_structure_gets_its_own_step_count(captured, diamond64):
    assert cli.main(["run", "--level", "md", "--workload", f"water-box,{diamond64},diamond",
                     "--implementation", "e3nn"]) == 0
    assert [(c.workload, c.batch) for c in captured["cases"]] == [
        ("water-box", 10), (diamond64, 4), ("diamond", 32)]


def test_a_scaling_run_times_every_size_of_a_structure_at_one_step_count(captured):
    """Growth follows a backend across sizes at one batch: that of the largest size."""
    assert cli.main(["run", "--level", "md", "--workload",
                     "diamond,diamond@2x2x2,water-box", "--implementation", "e3nn",
                     "--scaling-limit", "5"]) == 0
    assert [(c.workload, c.batch) for c in captured["cases"]] == [
        ("diamond", 4), ("diamond@2x2x2", 4), ("water-box", 10)]


def test_tp_budget_and_batch_stay_the_schemas(captured):
    from equibench.schema import defaults

    assert cli.main(["run", "--workload", "nequip-water", "--implementation", "e3nn"]) == 0
    assert {(c.direction, c.batch) for c in captured["cases"]} == {("forward", 1024)}
    assert captured["settings"].measure.budget_s == defaults()["measure"]["budget_s"]


def test_model_and_conv_defaults_reach_the_cases(captured):
    assert cli.main(["run", "--level", "model", "--workload", "mace-qm9",
                     "--implementation", "e3nn,fused"]) == 0
    assert {(c.direction, c.variant, c.batch) for c in captured["cases"]} == {
        ("inference", "default", 4)}
    assert cli.main(["run", "--level", "conv", "--workload", "mace-large@qm9",
                     "--implementation", "e3nn,fused"]) == 0
    assert {(c.direction, c.variant, c.batch) for c in captured["cases"]} == {
        ("forward", "default", 8)}


QUICK = MeasureConfig(min_repeats=2, max_repeats=4, budget_s=0.02, warmup=1, rounds=2)
TINY = Case("tp", "nequip-water", "e3nn", "default", "forward", "float32", 8, "cpu")


def test_a_case_tells_its_phases_in_order():
    from equibench.runner import RunSettings, run_case

    phases: list[str] = []
    row = run_case(TINY, RunSettings(measure=QUICK, threads=1), phases.append)
    assert row["status"] == "ok"
    assert phases == ["build", "gate", "warm-up", "round 1/2", "round 2/2", "finish"]


def test_the_progress_bar_shows_each_cases_phase(capsys):
    """The phases of a case process reach the parent's bar (tqdm, on stderr), named with
    the implementation they belong to."""
    from equibench.runner import RunSettings, run_cases

    frame = run_cases([TINY], RunSettings(measure=QUICK, threads=1), progress=True)
    assert frame["status"].tolist() == ["ok"]
    err = capsys.readouterr().err
    for phase in ("build", "gate", "warm-up", "round 1/2", "round 2/2", "finish"):
        assert f"e3nn: {phase} | 1 interleaved: tp nequip-water forward" in err, err
