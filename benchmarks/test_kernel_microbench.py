"""Tensor-product micro-benchmarks under pytest-benchmark.

    pytest benchmarks/ --benchmark-only --benchmark-json=bench.json --benchmark-save-data
    equibench import bench.json --out results/microbench.parquet

Each benchmark passes the same correctness gate as ``equibench run`` before it is timed, and
every implementation gets the same warm-up and the same number of timed calls,
and records its case fields in ``extra_info`` so that the import gives ordinary result rows
(compare, claims and the dashboard then work on them). ``fused`` joins when
``equibench.implementations`` registers it and it is available on the device.
"""

from __future__ import annotations

import pytest
import torch

from equibench import registry
from equibench.cases import Case
from equibench.correctness import check_outputs
from equibench.levels.tp import build_bench
from equibench.precision import get_precision, precision_mode

WORKLOADS = ("nequip-water", "nequip-toluene-1parity", "mace-medium")
IMPLEMENTATIONS = ("e3nn", "cuequivariance", "fused")
DIRECTIONS = ("forward", "backward")
PRECISION = "float32"
# The same warm-up and number of timed calls for every implementation (pytest-benchmark's
# own calibration would give each a different count).
WARMUP_CALLS = 3
TIMED_CALLS = 30


def _implementation(name: str, device: str) -> registry.Implementation:
    if name not in registry.names("tp"):
        pytest.skip(f"{name} is not registered in equibench.implementations")
    impl = registry.get(name)
    reason = impl.available(device)
    if reason:
        pytest.skip(f"{name} unavailable on {device}: {reason}")
    return impl


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_tensor_product(benchmark, device: str, batch: int, workload: str, implementation: str,
                        direction: str) -> None:
    impl = _implementation(implementation, device)
    case = Case("tp", workload, implementation, "default", direction, PRECISION, batch, device)
    reason = impl.supports(case)
    if reason:
        pytest.skip(reason)
    precision = get_precision(PRECISION)
    with precision_mode(precision):
        bench = build_bench(case, impl, precision.dtype, seed=0)
        gate = check_outputs(bench.gated(bench.call()), bench.reference(), precision.tolerance)
        assert gate.passed, gate.message
        benchmark.group = f"{workload} {direction} b={batch}"
        benchmark.extra_info.update(
            case.to_dict(), throughput_unit=bench.unit, flops=bench.flops, bytes=bench.bytes,
            max_abs_err=gate.max_abs_err, max_scaled_err=gate.max_scaled_err,
            tolerance=precision.tolerance, threads=torch.get_num_threads(),
            gpu_name=torch.cuda.get_device_name(device) if device.startswith("cuda") else "")
        if device.startswith("cuda"):
            # pytest-benchmark reads the wall clock: wait for the kernels inside the timing.
            def call() -> None:
                bench.call()
                torch.cuda.synchronize(device)
        else:
            call = bench.call
        benchmark.pedantic(call, rounds=TIMED_CALLS, iterations=1, warmup_rounds=WARMUP_CALLS)
