"""TPDescriptor: fields match e3nn, the hash is stable, every workload builds."""

from __future__ import annotations

import torch
from e3nn import o3
from equibench.kernels import TPDescriptor
from equibench.kernels.descriptor import GENERATOR_VERSION
from kernel_testing import MIXED, mixed_descriptor

from equibench.workloads import TP_WORKLOADS


def test_from_e3nn_matches_tensor_product() -> None:
    desc = mixed_descriptor()
    tp = o3.TensorProduct(*MIXED, shared_weights=False, internal_weights=False)
    assert desc.in1_dim == tp.irreps_in1.dim
    assert desc.in2_dim == tp.irreps_in2.dim
    assert desc.out_dim == tp.irreps_out.dim
    assert desc.weight_numel == tp.weight_numel
    offset = 0
    for path, ins in zip(desc.paths, tp.instructions, strict=True):
        assert path.alpha == ins.path_weight  # e3nn's normalization, bit for bit
        assert path.weight_shape == tuple(ins.path_shape)
        assert path.weight_offset == offset
        offset += path.weight_numel
        l1, l2, l3 = (desc.in1[path.i_in1].l, desc.in2[path.i_in2].l, desc.out[path.i_out].l)
        w3j = o3.wigner_3j(l1, l2, l3, dtype=torch.float64)
        dense = torch.zeros_like(w3j)
        for i, j, k, c in path.cg:
            dense[i, j, k] = c
        assert torch.allclose(dense, w3j, atol=1e-12, rtol=0)
    assert desc.instructions == [tuple(ins) for ins in MIXED[3]]


def test_weight_layout_matches_e3nn_views() -> None:
    """Weight offsets agree with e3nn's own ``weight_views``."""
    desc = mixed_descriptor()
    tp = desc.to_e3nn()
    w = torch.arange(desc.weight_numel, dtype=torch.float64)[None]
    views = [v for v in tp.weight_views(w) if v.numel()]
    weighted = [p for p in desc.paths if p.has_weight]
    for path, view in zip(weighted, views, strict=True):
        assert int(view.flatten()[0]) == path.weight_offset
        assert tuple(view.shape[1:]) == path.weight_shape


def test_hash_is_stable_and_sensitive() -> None:
    a = mixed_descriptor()
    b = TPDescriptor.from_e3nn(*MIXED)
    assert a.hash == b.hash and len(a.hash) == 64
    assert GENERATOR_VERSION in a.canonical()
    other = TPDescriptor.from_e3nn(MIXED[0], MIXED[1], MIXED[2], MIXED[3][:-1])
    assert other.hash != a.hash


def test_every_workload_builds() -> None:
    for name, problem in TP_WORKLOADS.items():
        desc = problem.scaled(1 / 16).descriptor
        assert desc.paths, name
    roofline = [n for n in TP_WORKLOADS if n.startswith("roofline-")]
    assert len(roofline) == 34
    assert all(len(TP_WORKLOADS[n].descriptor.paths) == 1 for n in roofline)
