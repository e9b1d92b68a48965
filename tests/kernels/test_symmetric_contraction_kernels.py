"""The symmetric contraction's kernels, from its description alone: the derivatives of
straight-line programs, and the CPU (and, in its interpreter, Triton) kernels' forward,
backward and double backward against autograd of the defining formula in float64."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from equibench.kernels import KernelUnavailable
from equibench.kernels.ops import register_sc_descriptor, sc_fwd
from equibench.kernels.straight_line import Load, Store, Sum, gradient, tangent
from equibench.kernels.symmetric_contraction import SCPath, SymmetricContractionDescriptor

# Correlations 1 to 3, a squared and a cubed feature, an output component no path writes
# (row 2) and a feature no path reads (row 4).
DESC = SymmetricContractionDescriptor(5, (1, 3), (
    SCPath(1, 0, ((0, (0,), 1.0),)),
    SCPath(2, 1, ((0, (1, 2), 0.5), (1, (1, 1), -0.75))),
    SCPath(3, 0, ((0, (1, 1, 2), 2.0), (0, (0, 3, 3), -0.125))),
    SCPath(3, 1, ((1, (3, 3, 3), 0.3),)),
))


def _reference(desc: SymmetricContractionDescriptor, x: torch.Tensor, w: torch.Tensor):
    """``out (n, o, c)`` from the formula in the descriptor's docstring."""
    out = x.new_zeros(x.shape[0], desc.out_dim, x.shape[2])
    rows = []
    for o in range(desc.out_dim):
        total = x.new_zeros(x.shape[0], x.shape[2])
        for p, path in enumerate(desc.paths):
            for m, t, coef in path.terms:
                if desc.out_offsets[path.output] + m == o:
                    total = total + coef * w[:, p] * torch.stack([x[:, i] for i in t]).prod(0)
        rows.append(total)
    return out + torch.stack(rows, dim=1)


def _evaluate(program, inputs: dict[str, torch.Tensor]) -> dict[tuple[str, int], torch.Tensor]:
    values, stored = {}, {}
    for s in program:
        if isinstance(s, Load):
            values[s.out] = inputs[s.array][s.row]
        elif isinstance(s, Sum):
            values[s.out] = sum(c * torch.stack([values[f] for f in fs]).prod(0)
                                for c, fs in s.terms)
        else:
            stored[s.array, s.row] = torch.zeros(()) if s.value is None else values[s.value]
    return stored


def test_gradient_and_tangent_of_a_program_are_autograds() -> None:
    # out0 = 3 a b^2 - a ; out1 = 0.5 b
    program = [Load("a", "x", 0), Load("b", "x", 1), Sum("bb", ((1.0, ("b", "b")),)),
               Sum("o", ((3.0, ("a", "bb")), (-1.0, ("a",)))), Store("out", 0, "o"),
               Sum("h", ((0.5, ("b",)),)), Store("out", 1, "h")]
    x = torch.tensor([0.7, -1.3], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([0.4, 2.0], dtype=torch.float64)
    v = torch.tensor([-0.2, 0.9], dtype=torch.float64)
    out = _evaluate(program, {"x": x})
    value = torch.stack([out["out", 0], out["out", 1]])
    (want_gx,) = torch.autograd.grad(value, x, g, create_graph=True)
    backward = gradient(program, {"out": "g"}, {"x": "gx"}, keep_stores=True)
    got = _evaluate(backward, {"x": x, "g": g})
    torch.testing.assert_close(torch.stack([got["gx", 0], got["gx", 1]]), want_gx)
    # double backward: d<v, gx>/dx is the tangent of gx along v; d<v, gx>/dg that of out
    want_dx, want_dg = torch.autograd.grad(want_gx, (x, g.requires_grad_(True)), v,
                                           allow_unused=True)
    double = _evaluate(tangent(backward, {"x": "v"}, {"out": "dg", "gx": "dx"}),
                       {"x": x, "g": g, "v": v})
    torch.testing.assert_close(torch.stack([double["dx", 0], double["dx", 1]]), want_dx)
    want_dg = torch.autograd.functional.jvp(
        lambda x: torch.stack(list(_evaluate(program, {"x": x}).values())), x, v)[1]
    torch.testing.assert_close(torch.stack([double["dg", 0], double["dg", 1]]), want_dg)


def test_a_descriptor_rejects_an_unsorted_term() -> None:
    with pytest.raises(ValueError, match="not a sorted tuple"):
        SymmetricContractionDescriptor(3, (1,), (SCPath(2, 0, ((0, (2, 1), 1.0),)),))


@pytest.mark.parametrize("backend,channels", [("cpu", 6), ("cpu", 64), ("triton", 6)])
def test_kernels_match_autograd_of_the_formula(backend: str, channels: int) -> None:
    """Forward, backward and double backward (second derivatives in ``x`` and ``w``) in
    float64; 6 channels runs tiles of 2, 64 tiles of 32."""
    key = register_sc_descriptor(DESC)
    generator = torch.Generator().manual_seed(1)
    # Triton on the GPU where there is one (scripts/gpu_check.sh), else its interpreter
    device = "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"
    x, w, probe = (torch.randn(7, rows, channels, dtype=torch.float64, generator=generator
                               ).to(device)
                   for rows in (DESC.num_features, DESC.num_paths, DESC.out_dim))

    def derivatives(function):
        xx, ww, gg = (t.clone().requires_grad_(True) for t in (x, w, probe))
        out = function(xx, ww)
        gx, gw = torch.autograd.grad((out * gg).sum(), (xx, ww), create_graph=True)
        # the double backward's three outputs: in x, w and the cotangent g
        return [out, gx, gw, *torch.autograd.grad(gx.square().sum() + (gw * ww).sum(),
                                                  (xx, ww, gg))]

    try:
        got = derivatives(lambda x, w: sc_fwd(x, w, key, backend))
    except KernelUnavailable as err:
        pytest.skip(str(err))
    for mine, want in zip(got, derivatives(lambda x, w: _reference(DESC, x, w)), strict=True):
        torch.testing.assert_close(mine, want, rtol=1e-12, atol=1e-12)


def test_cpu_kernels_cut_into_chunks_match(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """Chunks of 3 statements: values cross several chunk functions through scratch slots
    that are reused (the oeq model's kernels cut at 128), in several translation units of
    4 chunks (4 channels: vectors of 4)."""
    from equibench.kernels import sc_cpu

    monkeypatch.setenv("EQUIBENCH_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(sc_cpu, "CHUNK", 3)
    monkeypatch.setattr(sc_cpu, "PART", 12)
    program = DESC.programs()["sc_dbwd"]
    chunks = sc_cpu._chunks(program)
    slot, _, _ = sc_cpu._slots(chunks)
    assert len(chunks) > 10 and max(slot.values()) + 1 < len(slot)  # slots are reused
    assert len(sc_cpu.kernel_sources(DESC, "sc_dbwd", program, "f64", 4)) > 2
    kernels = sc_cpu.ScCpuKernels(DESC, channels=4)
    generator = torch.Generator().manual_seed(2)
    x, w, g, ggx, ggw = (torch.randn(3, DESC.rows(a), 4, dtype=torch.float64,
                                     generator=generator) for a in ("x", "w", "g", "x", "w"))
    xx, ww = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    out = _reference(DESC, xx, ww)
    gx, gw = torch.autograd.grad(out, (xx, ww), g, create_graph=True)
    dx, dw = torch.autograd.grad((gx * ggx).sum() + (gw * ggw).sum(), (xx, ww))
    try:
        got = kernels.run("sc_dbwd", g=g, x=x, w=w, ggx=ggx, ggw=ggw)
    except KernelUnavailable as err:
        pytest.skip(str(err))
    torch.testing.assert_close(got["dx"], dx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got["dw"], dw, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kernels.run("sc_fwd", x=x, w=w)["out"], out.detach(),
                               rtol=1e-12, atol=1e-12)


def test_cpu_kernels_are_built_when_first_called(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:
    """A forward builds the forward and backward of its dtype, not the double backward
    nor the other dtype; 6 channels: vectors of 2."""
    from equibench.kernels import sc_cpu

    monkeypatch.setenv("EQUIBENCH_KERNEL_CACHE", str(tmp_path))
    kernels = sc_cpu.ScCpuKernels(DESC, channels=6)
    x, w = (torch.randn(3, DESC.rows(a), 6) for a in ("x", "w"))
    try:
        out = kernels.run("sc_fwd", x=x, w=w)["out"]
    except KernelUnavailable as err:
        pytest.skip(str(err))
    torch.testing.assert_close(out, _reference(DESC, x, w))
    libraries = sorted(p.name.split("_")[1:3] for p in tmp_path.rglob("*.so"))
    assert libraries == [["sc6", "fwd"]]
    assert set(kernels._fn) == {("sc_fwd", "f32"), ("sc_bwd", "f32")}
