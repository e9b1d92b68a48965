"""SE(3)-Transformer: equivariance, one function across variants and backends, runner
integration, learning, data parallelism. Everything runs the ``small`` size on a few
QM9 molecules in float64."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from equibench.implementations.se3_transformer import bench as se3t_bench
from equibench.implementations.se3_transformer import graph_ops, tfn
from equibench.implementations.se3_transformer.bench import GradientMap, master_model
from equibench.implementations.se3_transformer.model import (
    SIZES,
    build_model,
    featurize,
    pool_winners,
)
from equibench.implementations.se3_transformer.switches import (
    NVIDIA_DEFAULT,
    OPTIMIZED,
    PLAIN,
    VARIANTS,
    variant_switches,
)
from equibench.implementations.se3_transformer.tfn import BACKENDS

from equibench import registry
from equibench.cases import Case
from equibench.correctness import random_rotation
from equibench.measure import MeasureConfig
from equibench.runner import RunSettings, run_case

SIZE = "small"


@pytest.fixture(scope="module")
def graph_batch():
    from equibench import datasets

    return datasets.load("qm9").batch(list(range(200, 206)), graph="bonds")


@pytest.fixture(scope="module")
def master():
    return master_model(SIZE, seed=3)


def predict(master, mol, switches, backend="basis"):
    model = build_model(SIZES[SIZE], switches, backend, "cpu", torch.float64, master)
    with torch.no_grad():
        return model(mol)


@pytest.mark.parametrize("backend", ["basis", "e3nn"])
def test_rotation_and_translation_leave_prediction_unchanged(graph_batch, master, backend):
    rotation, shift = random_rotation(7), torch.tensor([1.5, -2.0, 0.25], dtype=torch.float64)
    src, dst = graph_batch.edge_src, graph_batch.edge_dst

    def placed(pos):  # edge vectors from float64 positions, so both sides round alike
        return featurize(dataclasses.replace(graph_batch, pos=pos, edge_vec=pos[dst] - pos[src]))

    pos = graph_batch.pos.to(torch.float64)
    before = predict(master, placed(pos), OPTIMIZED, backend)
    after = predict(master, placed(pos @ rotation.T + shift), OPTIMIZED, backend)
    # e3nn's tensor product tabulates Clebsch-Gordan coefficients to float32 accuracy.
    tol = 1e-6 if backend == "e3nn" else 1e-10
    assert (before - after).abs().max() < tol * max(1.0, before.abs().max())


def test_every_variant_and_backend_compute_the_same_function(graph_batch, master):
    """Every variant on ``basis``; every backend on per-pair (baseline) and fully fused
    (optimized) contractions."""
    mol = featurize(graph_batch)
    plain = predict(master, mol, PLAIN)
    mean = predict(master, mol, VARIANTS["baseline"].reference())
    assert (plain - mean).abs().max() > 1e-3, "mean aggregation should change the function"
    combos = [(name, "basis") for name in VARIANTS]
    combos += [(name, b) for name in ("baseline", "optimized") for b in BACKENDS if b != "basis"]
    for name, backend in combos:
        switches = VARIANTS[name]
        expected = mean if switches.mean_aggregation else plain
        out = predict(master, mol, switches, backend)
        # e3nn's tensor product tabulates Clebsch-Gordan coefficients to float32 accuracy.
        tol = 1e-6 if backend == "e3nn" else 1e-10
        err = float((out - expected).abs().max())
        assert err < tol, f"{name}/{backend}: {err:.2e}"


def test_gradients_agree_across_parameterizations(graph_batch, master):
    """Shared radial profiles and fused keys/values: same gradients of common weights."""
    mol = featurize(graph_batch)
    grads = []
    for switches in (PLAIN, OPTIMIZED, VARIANTS["low-memory"]):
        model = build_model(SIZES[SIZE], switches, "basis", "cpu", torch.float64, master)
        model(mol).square().sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if ".radial." not in n})
    for other in grads[1:]:
        for name, grad in other.items():
            torch.testing.assert_close(grad, grads[0][name], rtol=1e-9, atol=1e-12)


def test_checkpointing_in_edge_chunks_keeps_the_gradients(graph_batch, master, monkeypatch):
    """Low-memory mode recomputes the convolutions chunk by chunk in backward: the loss
    and every gradient equal those of the same model without checkpointing."""
    mol = featurize(graph_batch)
    monkeypatch.setattr(tfn, "CHECKPOINT_EDGES", 16)
    assert mol.n_edges > 3 * tfn.CHECKPOINT_EDGES
    results = []
    for switches in (NVIDIA_DEFAULT, OPTIMIZED):
        model = build_model(SIZES[SIZE], switches, "basis", "cpu", torch.float64, master)
        loss = model(mol).square().sum()
        loss.backward()
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    assert OPTIMIZED.low_memory and not NVIDIA_DEFAULT.low_memory
    (loss_a, grads_a), (loss_b, grads_b) = results
    torch.testing.assert_close(loss_b, loss_a, rtol=1e-12, atol=0)
    assert grads_a.keys() == grads_b.keys()
    for name, grad in grads_b.items():
        torch.testing.assert_close(grad, grads_a[name], rtol=1e-9, atol=1e-12, msg=name)


def test_low_memory_step_keeps_pair_bases_and_inference_fused_ones(graph_batch, master):
    """Under checkpointing each chunk assembles its zero-padded fused bases inside the
    checkpoint, so a training step keeps only the smaller pair bases; without autograd
    (inference) the fused bases are built once and shared by the layers."""
    mol = featurize(graph_batch)
    model = build_model(SIZES[SIZE], OPTIMIZED, "basis", "cpu", torch.float64, master)
    groups = {g for conv in model.convs().values() for g in conv.groups}
    fused = {g for g in groups if len(g) > 1}
    assert fused, "the optimized small model fuses degree pairs"
    kept = model.bases(mol.edge_vec)
    assert not fused & kept.keys()
    assert {p for g in groups for p in g} <= kept.keys()
    with torch.no_grad():
        assert groups <= model.bases(mol.edge_vec).keys()


def test_segment_softmax_sums_to_one_over_incoming_edges():
    src = torch.tensor([0, 1, 2, 0, 3])
    dst = torch.tensor([1, 0, 0, 2, 2])
    scores = torch.randn(5, 3, dtype=torch.float64) * 50
    ops = graph_ops.GraphOps(src, dst, 4)
    weights = ops.softmax_in(scores)
    for node in range(4):
        mask = dst == node
        if mask.any():
            torch.testing.assert_close(weights[mask], torch.softmax(scores[mask], dim=0))
    torch.testing.assert_close(ops.sum_in(weights)[[0, 1, 2]], torch.ones(3, 3).double())


def _case(variant: str, direction: str, implementation: str = "basis") -> dict:
    settings = RunSettings(measure=MeasureConfig(min_repeats=2, max_repeats=2, warmup=0))
    case = Case("model", "se3t-qm9-small", implementation, variant, direction, "float32", 4,
                "cpu")
    return run_case(case, settings)


@pytest.mark.parametrize(("variant", "direction"),
                         [("optimized", "train_step"), ("baseline", "inference")])
def test_runner_cases_pass_the_gate(variant, direction):
    row = _case(variant, direction)
    assert row["status"] == "ok", row.get("reason")
    assert row["throughput_unit"] == "molecules/s"
    assert row["extra"]["switches"] == variant_switches(variant).to_dict()
    assert row["equivariance_err"] < 1e-4
    assert row["extra"]["code_path"]["path"] and not row["extra"]["code_path"]["fallback"]


def test_rows_name_the_code_each_backend_ran():
    from equibench.implementations.se3_transformer.bench import code_path

    cue = code_path("cuequivariance", "cpu")
    assert "method=naive" in cue["path"] and cue["fallback"].startswith("naive")
    assert "C++" in code_path("fused", "cpu")["path"]


def test_gradients_map_back_into_every_parameterization(graph_batch, master):
    """The reference's gradient (nothing shared or fused), mapped by GradientMap, is the
    gradient of a model that shares and fuses weights, element by element."""
    mol = featurize(graph_batch)

    def step_outputs(switches) -> dict[str, torch.Tensor]:
        model = build_model(SIZES[SIZE], switches, "basis", "cpu", torch.float64, master)
        loss = model(mol).square().sum()
        loss.backward()
        return {"loss": loss.detach(),
                **{f"grad:{n}": p.grad for n, p in model.named_parameters()}}

    for switches in (OPTIMIZED, variant_switches("fuse_kv"), PLAIN):
        gradients = GradientMap.build(SIZE, switches)
        mapped = gradients.reference_view(step_outputs(switches.reference()))
        own = gradients.model_view(step_outputs(switches))
        assert set(mapped) == set(own)
        for name, grad in own.items():
            torch.testing.assert_close(mapped[name], grad, rtol=1e-9, atol=1e-12)
    # A shared weight gets the sum of the gradients of the weights that copy it.
    assert len(GradientMap.build(SIZE, OPTIMIZED).names) < len(GradientMap.build(SIZE, PLAIN).names)


def test_pool_winners_pick_the_maximum_atom_of_each_molecule():
    h = torch.tensor([[1.0, 5.0], [3.0, 5.0], [2.0, -1.0], [0.0, -2.0]])
    node_graph = torch.tensor([0, 0, 1, 1])
    winners = pool_winners(h, node_graph, 2)
    assert winners.tolist() == [[1, 0], [2, 2]]  # exact tie (5.0, 5.0): the lower index
    pooled = torch.zeros(2, 2).scatter_reduce(0, node_graph[:, None].expand_as(h), h, "amax",
                                              include_self=False)
    torch.testing.assert_close(h.gather(0, winners), pooled)


def test_a_wrong_gradient_inside_an_equivariant_layer_is_incorrect(monkeypatch):
    """The readout's gradients and the loss are right, one attention layer's weight
    gradient is 10 % off: the training step must fail the gate and never be timed."""
    real = se3t_bench.build_model

    def planted(config, switches, backend, device, dtype, master):
        model = real(config, switches, backend, device, dtype, master)
        if dtype != torch.float64:  # the model under test, not the reference
            name, param = next((n, p) for n, p in model.named_parameters()
                               if n.startswith("blocks.0."))
            param.register_hook(lambda grad: grad * 1.1)
        return model

    assert _case("optimized", "train_step")["status"] == "ok"
    monkeypatch.setattr(se3t_bench, "build_model", planted)
    row = _case("optimized", "train_step")
    assert row["status"] == "incorrect", row.get("reason")
    assert "grad:blocks.0." in row["reason"]
    assert "time_median_s" not in row or row.get("time_median_s") is None


def test_only_the_amortized_variants_compute_bases_outside_the_step(monkeypatch):
    """NVIDIA's recipe and `optimized` pay the edge bases inside the timed step; the
    precomputed variants say what they amortize and count the kept bases in their peak."""
    from equibench.implementations.se3_transformer import model as se3t_model

    calls = []
    real = se3t_model.SE3TransformerPooled.bases

    def counting(self, edge_vec):
        calls.append(1)
        return real(self, edge_vec)

    monkeypatch.setattr(se3t_model.SE3TransformerPooled, "bases", counting)
    family = registry.model_family("se3t-qm9-small")
    for variant, amortizes in (("optimized", False), ("nvidia-default", False),
                               ("nvidia-precompute", True), ("basis_cache", True)):
        case = Case("model", "se3t-qm9-small", "basis", variant, "train_step", "float32", 4,
                    "cpu")
        bench = family.build_bench(case, torch.float32, 0)
        calls.clear()
        bench.call()
        assert len(calls) == (0 if amortizes else 1), variant  # once per step, shared
        assert bool(bench.amortized) == amortizes and (bench.kept_bytes > 0) == amortizes
    row = _case("nvidia-precompute", "train_step")
    assert row["status"] == "ok", row.get("reason")
    assert "precompute_bases" in row["extra"]["amortized"]
    assert row["peak_mem_bytes"] >= row["extra"]["kept_bytes"] > 0
    assert _case("nvidia-default", "inference")["extra"]["amortized"] == ""


def test_dgl_cases_say_why_they_cannot_run():
    reason = graph_ops.dgl_unavailable()
    row = _case("optimized+dgl", "inference")
    if reason is None:
        assert row["status"] == "ok", row.get("reason")
    else:
        assert row["status"] == "unavailable" and "dgl" in row["reason"]


def test_training_lowers_the_loss():
    from equibench.implementations.se3_transformer.train import train

    records = train(molecules=96, epochs=4, batch=16, size=SIZE, lr=5e-3, log=lambda _: None)
    assert records[-1]["train_loss"] < records[0]["train_loss"]


@pytest.mark.slow
def test_data_parallel_with_two_processes(tmp_path):
    """Two gloo ranks train under DDP (15-25 s here). A hang fails after the ranks'
    120 s watchdog with every rank's stack and progress in the message (ddp.py's
    docstring: the teardown deadlock that hung about one run in four)."""
    from torchrun_for_tests import torchrun

    from equibench import datasets

    datasets.load("qm9")  # a fresh cache is prepared here once, not by both ranks at once
    run = torchrun("equibench.implementations.se3_transformer.ddp",
                   ["--steps", "2", "--batch", "2", "--size", SIZE, "--timeout", "60"],
                   nproc=2, stack_dir=tmp_path, watchdog_s=120,
                   env={"OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.report()
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["world_size"] == 2 and result["backend"] == "gloo"
    assert 0 < result["weak_scaling_efficiency"] <= 1.5


def test_mixed_precision_runs_the_step_under_autocast_and_is_gated():
    """amp-bfloat16: float32 weights, the step under torch.autocast (built outside it), held
    to the bfloat16 bound. Inference passes it; the training step's bfloat16 gradients miss
    it by more than a planted 10% error would, so the gate cannot verify the step: it is
    timed and says so, never ok, never incorrect for rounding the precision makes."""
    settings = RunSettings(measure=MeasureConfig(min_repeats=1, max_repeats=1, warmup=0,
                                                 rounds=1))
    expected = {"inference": "ok", "train_step": "unverifiable"}
    for direction, status in expected.items():
        case = Case("model", "se3t-qm9-small", "basis", "nvidia-default", direction,
                    "amp-bfloat16", 4, "cpu")
        row = run_case(case, settings)
        assert row["tolerance"] == 5e-2 and row["max_scaled_err"] > 1e-4  # really bfloat16
        assert row["status"] == status, row.get("reason")
        assert row["time_median_s"] > 0  # timed either way
        if status == "unverifiable":
            assert row["tolerance"] < row["max_scaled_err"] < 0.5
            assert "unverifiable" in row["reason"] and "grad:" in row["reason"]
    from equibench.precision import get_precision
    from equibench.runner import _build

    bench = _build(Case("model", "se3t-qm9-small", "basis", "nvidia-default", "inference",
                        "amp-bfloat16", 4, "cpu"), get_precision("amp-bfloat16"), 0)
    assert bench.call()["pred"].dtype == torch.bfloat16  # the readout ran in autocast


def test_float16_training_step_scales_its_loss_as_nvidias_recipe():
    """amp-float16 trains with a scaled loss (GradScaler, as NVIDIA's recipe): at 2^16 this
    model's float16 gradients overflow, so the scaler starts lower and none underflows."""
    settings = RunSettings(measure=MeasureConfig(min_repeats=1, max_repeats=1, warmup=0,
                                                 rounds=1))
    row = run_case(Case("model", "se3t-qm9-small", "basis", "low-memory", "train_step",
                        "amp-float16", 4, "cpu"), settings)
    assert 1 < row["extra"]["loss_scale"] < 2.0**16
    # Underflowing float16 gradients would be zeros (an error of 1, incorrect); scaled, the
    # worst parameter's gradient is ~10% off, float16 rounding grown by the depth, which
    # the gate cannot tell from a planted 10% error: timed, unverifiable.
    assert row["status"] == "unverifiable", row.get("reason")
    assert row["tolerance"] < row["max_scaled_err"] < 0.5
