import pytest

from equibench import config, schema, vocabulary


def test_presets_validate():
    for preset in ("quick", "full", "claims", "dgl"):
        cfg = config.resolve({"preset": preset})
        assert cfg["name"] == preset
        assert list(config.jobs({**cfg, "device": "cpu"}))


def test_a_preset_file_resolves_as_that_preset():
    """`equibench config workflows/config/full.yaml` shows what `--config preset=full` runs,
    not full.yaml merged over the default preset."""
    for preset in ("quick", "full", "claims", "dgl"):
        assert config.load(config.CONFIG_DIR / f"{preset}.yaml") == config.resolve(
            {"preset": preset})


def test_the_schema_names_the_vocabulary_levels_and_directions():
    """schema.yaml lists them for editors and the config page; they are the vocabulary's."""
    suite = schema._schema()["properties"]["suites"]["items"]["properties"]
    assert tuple(suite["level"]["enum"]) == vocabulary.LEVELS
    assert tuple(suite["directions"]["items"]["enum"]) == vocabulary.DIRECTIONS


def test_unknown_key_is_named():
    with pytest.raises(config.ConfigError, match="bogus"):
        config.resolve({"preset": "quick", "bogus": 1})


def test_bad_value_is_named():
    with pytest.raises(config.ConfigError, match="suites/0/precisions/0"):
        config.resolve({"preset": "quick", "suites": [{
            "name": "s", "level": "tp", "workloads": ["mace-large"],
            "implementations": ["e3nn"], "directions": ["forward"],
            "precisions": ["float99"], "batches": [8]}]})


def test_unknown_preset():
    with pytest.raises(config.ConfigError, match="nosuch"):
        config.resolve({"preset": "nosuch"})


def test_overrides_merge_over_preset():
    preset = config.resolve({"preset": "quick"})
    cfg = config.resolve({"preset": "quick", "measure": {"budget_s": 0.25}, "name": "x"})
    assert preset["measure"]["budget_s"] != 0.25
    assert cfg["measure"]["budget_s"] == 0.25
    # Keys the override does not name are kept from the preset.
    assert cfg["measure"]["min_repeats"] == preset["measure"]["min_repeats"]
    assert cfg["measure"]["max_repeats"] == preset["measure"]["max_repeats"]
    assert cfg["name"] == "x"


def test_suite_cases():
    cfg = config.resolve({"preset": "quick", "device": "cpu"})
    cases = config.suite_cases(cfg, "tp-batch", "e3nn", "cpu")
    assert {c.direction for c in cases} == {"forward", "backward"}
    assert {c.precision for c in cases} == {"float32", "float64"}
    assert {c.workload for c in cases} == {"mace-large", "nequip-benzene-1parity"}
    assert all(c.implementation == "e3nn" and c.device == "cpu" for c in cases)


def test_cpu_batches_replace_batches_on_a_cpu_only():
    cfg = config.resolve({"preset": "claims"})
    on_cpu = config.suite_cases(cfg, "se3t-fp32", "all", "cpu")
    on_gpu = config.suite_cases(cfg, "se3t-fp32", "all", "cuda:0")
    assert {c.batch for c in on_cpu} == {16}
    assert {c.batch for c in on_gpu} == {100, 200, 400}
    # A suite without cpu_batches runs its batches everywhere; an empty list, GPUs only.
    assert {c.batch for c in config.suite_cases(cfg, "se3t-amp", "all", "cuda:0")} == {
        100, 200, 400, 1000}
    jobs = {(suite, device) for suite, _, device in config.jobs({**cfg, "device": "cpu"})}
    assert ("se3t-fp32", "cpu") in jobs and ("oeq-tp", "cpu") not in jobs
    assert ("oeq-tp", "cuda:0") in set(
        (suite, device) for suite, _, device in config.jobs({**cfg, "device": ["cuda:0"]}))


def test_claims_preset_runs_every_measurable_claims_cases():
    """Each measurable claim's selectors match cases of the claims preset (on a GPU, at the
    claim's own batch), so no claim is left unmeasured for want of a case."""
    import pandas as pd

    from equibench import claims

    cfg = config.resolve({"preset": "claims"})
    cases = pd.DataFrame([
        vars(c) for suite in cfg["suites"]
        for c in config.suite_cases(cfg, suite["name"], "all", "cuda:0")])
    for claim in claims.load():
        if not claim.measurable:
            continue
        for side in (claim.numerator, claim.denominator or {}):
            assert not claims.select(cases, side).empty, (claim.id, claim.version, side)


def test_per_suite_jobs_sweep_every_implementation_of_a_suite():
    per_impl = config.resolve({"preset": "quick", "device": "cpu", "jobs": "per-implementation"})
    per_suite = config.resolve({"preset": "quick", "device": "cpu", "jobs": "per-suite"})
    assert len(list(config.jobs(per_suite))) == len(per_suite["suites"])
    assert {impl for _, impl, _ in config.jobs(per_suite)} == {config.ALL_IMPLEMENTATIONS}
    for suite in per_suite["suites"]:
        every = config.suite_cases(per_suite, suite["name"], config.ALL_IMPLEMENTATIONS, "cpu")
        one_by_one = [case for name, impl, device in config.jobs(per_impl)
                      if name == suite["name"]
                      for case in config.suite_cases(per_impl, name, impl, device)]
        assert sorted(every) == sorted(one_by_one)


def test_all_is_not_an_implementation_name():
    with pytest.raises(config.ConfigError, match="implementations"):
        config.resolve({"preset": "quick", "suites": [{
            "name": "x", "level": "tp", "workloads": ["mace-large"], "implementations": ["all"],
            "directions": ["forward"], "precisions": ["float32"], "batches": [8]}]})
