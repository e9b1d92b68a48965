"""Names are checked before any case process starts, with the nearest valid names."""

import pytest

from equibench import cli, names
from equibench.cases import Case


def _case(**kw) -> Case:
    base = dict(level="tp", workload="mace-large", implementation="e3nn", variant="default",
                direction="forward", precision="float32", batch=8, device="cpu")
    return Case(**{**base, **kw})


@pytest.mark.parametrize(("field", "wrong", "suggested"), [
    ("workload", "mace-larg", "mace-large"),
    ("implementation", "e3nm", "e3nn"),
    ("precision", "float23", "float32"),
    ("variant", "ir-mul", "ir_mul"),
])
def test_a_misspelt_name_is_named_with_the_nearest_valid_one(field, wrong, suggested):
    with pytest.raises(names.UnknownName) as err:
        names.check([_case(**{field: wrong})])
    assert repr(wrong) in str(err.value) and f"did you mean {suggested!r}" in str(err.value)


def test_valid_names_pass_at_every_level():
    names.check([
        _case(),
        _case(level="conv", workload="mace-large@qm9", implementation="fused",
              variant="reuse-plan"),
        # A variant of another implementation is a known name: its row says `unavailable`.
        _case(level="conv", workload="mace-large@qm9", variant="ir_mul"),
        _case(level="model", workload="se3t-qm9-small", implementation="basis",
              variant="optimized+dgl", direction="train_step"),
        _case(level="model", workload="mace-qm9", implementation="fused", variant="small",
              direction="inference"),
    ])


def test_model_names_are_checked_against_their_family():
    found = names.problems(_case(level="model", workload="se3t-qm9-small",
                                 implementation="fusd", variant="optimised",
                                 direction="forward"))
    assert len(found) == 3
    assert "did you mean 'fused'" in found[0] and "for se3t" in found[0]
    assert "did you mean 'optimized'" in found[1]
    assert "'forward'" in found[2] and "inference" in found[2]
    (unknown,) = names.problems(_case(level="model", workload="se3t-qm9-smal"))
    assert "did you mean 'se3t-qm9-small'" in unknown


def test_equibench_run_stops_before_any_process(capsys, monkeypatch):
    from equibench import runner

    # The fork server starts first (its imports overlap with the check's); no case runs.
    monkeypatch.setattr(cli, "_start_fork_server", lambda *a, **k: None)
    monkeypatch.setattr(runner, "run_cases", lambda *a, **k: pytest.fail("a case ran"))
    code = cli.main(["run", "--workload", "mace-larg", "--implementation", "e3nn",
                     "--batch", "8"])
    assert code == 2
    assert "did you mean 'mace-large'" in capsys.readouterr().err
