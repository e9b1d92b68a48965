"""TPDescriptor: fields match e3nn, the hash is stable, the cost model follows REFERENCE §2."""

from __future__ import annotations

import torch
from e3nn import o3
from equibench.kernels import TPDescriptor
from equibench.kernels.descriptor import GENERATOR_VERSION
from equibench.kernels.workloads import WORKLOADS, roofline_triples, workload_descriptor
from kernel_testing import MIXED, mixed_descriptor


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


def test_flops_and_bytes_follow_reference_conventions() -> None:
    desc = workload_descriptor("mace-large")
    assert len(desc.paths) == 17 and desc.weight_numel == 17 * 128
    nnz = sum(p.nnz for p in desc.paths)
    assert desc.flops("forward", 10) == 3 * nnz * 128 * 10
    assert desc.flops("backward", 10) == 9 * nnz * 128 * 10
    assert desc.flops("double_backward", 10) == 27 * nnz * 128 * 10
    row = desc.in1_dim + desc.in2_dim + desc.weight_numel + desc.out_dim
    assert desc.min_bytes("forward", 10, 4) == row * 10 * 4
    assert (
        desc.conv_min_bytes("forward", 5, 20, 4)
        == ((desc.in1_dim + desc.out_dim) * 5 + (desc.in2_dim + desc.weight_numel) * 20) * 4
        + 16 * 20
    )


def test_uvw_flops_count_channel_mixing() -> None:
    desc = workload_descriptor("diffdock-l1")
    cg = sum(3 * p.nnz * desc.in1[p.i_in1].mul * desc.in2[p.i_in2].mul for p in desc.paths)
    mix = sum(2 * (2 * desc.out[p.i_out].l + 1) * p.weight_numel for p in desc.paths)
    assert desc.flops("forward", 1) == cg + mix


def test_every_workload_builds() -> None:
    for name in WORKLOADS:
        desc = workload_descriptor(name, mul_scale=1 / 16)
        assert desc.paths, name
    assert len(roofline_triples()) == 34
    for l1, l2, l3 in roofline_triples():
        assert len(workload_descriptor(f"roofline-{l1}{l2}{l3}").paths) == 1
