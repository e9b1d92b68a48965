"""Tensor-product workloads defined by irreps (``--tp``, the configuration's ``workloads:``)."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import yaml

from equibench import config, names
from equibench.cases import Case
from equibench.custom_workloads import CustomWorkload, SpecError, TPSpec, parse_all, register
from equibench.workloads import TP_WORKLOADS

TINY = "8x0e+8x1o x 0e+1o -> 8x0e+8x1o uvu"


@pytest.fixture(autouse=True)
def _builtin_workloads_only():
    """Registering adds to the one table of workloads: each test starts and ends without
    the ones it defined."""
    before = dict(TP_WORKLOADS)
    yield
    TP_WORKLOADS.clear()
    TP_WORKLOADS.update(before)


@pytest.mark.parametrize(("text", "normalized"), [
    ("32x0e+32x1o x 0e+1o+2e -> 32x0e+32x1o uvu",
     "32x0e+32x1o x 1x0e+1x1o+1x2e -> 32x0e+32x1o uvu"),
    ("  32x0e + 32x1o   x 0e+1o -> 0e + 1o  ", "32x0e+32x1o x 1x0e+1x1o -> 1x0e+1x1o uvu"),
    ("64x0e+16x1o x 0e+1o -> 80x0e+16x1o uvw", "64x0e+16x1o x 1x0e+1x1o -> 80x0e+16x1o uvw"),
])
def test_a_spec_is_read_in_e3nn_spelling_and_uvu_by_default(text, normalized):
    spec = TPSpec.parse(text)
    assert str(spec) == normalized
    assert TPSpec.parse(str(spec)) == spec


@pytest.mark.parametrize(("text", "says"), [
    ("32x0e x 0e 32x0e uvu", "has no '->'"),
    ("32x0e 0e -> 32x0e uvu", "two irreps separated by ' x '"),
    ("32x0e x 0e -> 32x0e uvv", "unknown mode 'uvv'; use uvu"),
    ("32y0e x 0e -> 32x0e", "the first input '32y0e' is not irreps"),
    ("32x0e x 0e -> 3q", "the output '3q' is not irreps"),
    ("32x0e x 0e ->", "no output irreps"),
    ("0x0e x 0e -> 0e", "the first input '0x0e' is empty"),
    # 0e x 1o makes only 1o: parity forbids 1e, angular momentum forbids 2o.
    ("32x0e x 1o -> 32x1e+32x2o uvw", "no path: in1 x in2 makes only 1o"),
    ("32x0e x 1o -> 1e uvu", "put at least one in the output"),
])
def test_a_bad_spec_says_what_is_wrong_and_how_to_write_it(text, says):
    with pytest.raises(SpecError) as err:
        TPSpec.parse(text)
    assert says in str(err.value)
    assert "write 'IN1 x IN2 -> OUT uvu|uvw'" in str(err.value)


def test_names_are_given_or_a_hash_of_the_spec():
    assert CustomWorkload.parse(f"my-tp={TINY}").name == "my-tp"
    # Every spelling of one spec has one name, which the definition reads back.
    unnamed = CustomWorkload.parse(TINY)
    assert unnamed.name.startswith("tp-") and len(unnamed.name) == len("tp-") + 8
    assert CustomWorkload.parse(TINY.replace("0e+1o", "1x0e+1x1o")).name == unnamed.name
    assert CustomWorkload.parse(unnamed.definition) == unnamed
    with pytest.raises(SpecError, match="is a built-in workload"):
        CustomWorkload.parse(f"mace-large={TINY}")
    with pytest.raises(SpecError, match="letters, digits"):
        CustomWorkload.parse(f"my@tp={TINY}")
    with pytest.raises(SpecError, match="defined twice"):
        parse_all([f"a={TINY}", "a=0e x 0e -> 0e"])


@pytest.mark.parametrize(("builtin", "spec"), [
    ("mace-medium", "128x0e+128x1o x 0e+1o+2e+3o -> 128x0e+128x1o+128x2e uvu"),
    ("e3tools_conv", "64x0e+16x1o x 0e+1o -> 80x0e+16x1o uvw"),
])
def test_a_definition_equal_to_a_builtin_is_the_same_product(builtin, spec):
    mine, theirs = TPSpec.parse(spec).problem("mine"), TP_WORKLOADS[builtin]
    assert (mine.irreps_out, mine.instructions) == (theirs.irreps_out, theirs.instructions)
    assert mine.descriptor == theirs.descriptor


def test_registered_names_are_known_to_the_name_check_at_both_levels():
    def case(level: str, workload: str) -> Case:
        return Case(level, workload, "e3nn", "default", "forward", "float32", 4, "cpu")

    with pytest.raises(names.UnknownName):
        names.check([case("tp", "tiny")])
    register([CustomWorkload.parse(f"tiny={TINY}")])
    register([CustomWorkload.parse(f"tiny={TINY}")])  # again: as each case process does
    names.check([case("tp", "tiny"), case("conv", "tiny@carbon")])
    with pytest.raises(SpecError, match="defined twice"):
        register([CustomWorkload.parse("tiny=0e x 0e -> 0e")])


def _config(workloads: list[dict], level: str = "tp", workload: str = "tiny") -> dict:
    return {"preset": "quick", "name": "custom", "device": "cpu", "workloads": workloads,
            "measure": {"min_repeats": 1, "max_repeats": 1, "budget_s": 0.01, "warmup": 0,
                        "rounds": 1},
            "suites": [{"name": "mine", "level": level, "workloads": [workload],
                        "implementations": ["e3nn"], "directions": ["forward"],
                        "precisions": ["float32"], "batches": [8]}]}


def test_a_bad_definition_in_the_configuration_stops_it_with_its_place():
    with pytest.raises(config.ConfigError, match=r"workloads/0 \(tiny\).*unknown mode 'uvx'"):
        config.resolve(_config([{"name": "tiny", "tp": "0e x 0e -> 0e uvx"}]))
    with pytest.raises(config.ConfigError, match=r"workloads/1 \(none\).*no path"):
        config.resolve(_config([{"name": "tiny", "tp": TINY},
                                {"name": "none", "tp": "8x0e x 0e -> 1o uvw"}]))
    with pytest.raises(config.ConfigError, match="workloads/0/name"):
        config.resolve(_config([{"name": "my tp", "tp": TINY}]))


def _rows(path) -> list[dict]:
    frame = pd.read_parquet(path)
    return [{**row, "extra": json.loads(row["extra"])} for row in frame.to_dict("records")]


@pytest.mark.slow
def test_equibench_run_tp_runs_through_every_implementation_and_the_gate(tmp_path):
    out = tmp_path / "r.parquet"
    subprocess.run([sys.executable, "-m", "equibench.cli", "run", "--tp", f"tiny={TINY}",
                    "--implementation", "e3nn,fused", "--batch", "4", "--rounds", "1",
                    "--budget", "0.01", "--threads", "1", "--quiet", "--out", str(out)],
                   check=True, capture_output=True, timeout=300)
    rows = _rows(out)
    assert {r["implementation"] for r in rows} == {"e3nn", "fused"}
    for row in rows:
        assert (row["workload"], row["status"]) == ("tiny", "ok"), row["reason"]
        assert row["max_scaled_err"] <= row["tolerance"]
        assert row["extra"]["tp_spec"] == str(TPSpec.parse(TINY))


@pytest.mark.slow
def test_a_configured_workload_runs_in_a_sweep_at_the_conv_level(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(_config([{"name": "tiny", "tp": TINY}], level="conv",
                                           workload="tiny@carbon")))
    assert config.suite_cases(config.load(path), "mine", "all", "cpu")[0].workload == \
        "tiny@carbon"
    out = tmp_path / "r.parquet"
    subprocess.run([sys.executable, "-m", "equibench.cli", "sweep", "--config", str(path),
                    "--suite", "mine", "--implementation", "all", "--device", "cpu",
                    "--out", str(out), "--quiet"], check=True, capture_output=True, timeout=300)
    (row,) = _rows(out)
    assert (row["workload"], row["status"]) == ("tiny@carbon", "ok"), row["reason"]
    assert row["extra"]["tp_spec"] == str(TPSpec.parse(TINY))
