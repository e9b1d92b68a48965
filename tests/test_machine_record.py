"""Every row records the CPU's ISA flags and what ``-march=native`` (our CPU kernels'
target) resolves to: the same kernels reach different fractions of peak on AVX2 and
AVX-512 machines, and a comparison across machines needs to say which ran."""

from __future__ import annotations

import platform

import pytest

from equibench import environment, results


def test_a_row_carries_the_isa_flags_and_the_kernels_target() -> None:
    env = environment.capture("cpu")
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the flags named are x86's")
    flags = env["cpu_flags"].split()
    assert flags == sorted(flags) and "sse4_2" in flags  # every x86-64 CPU of this decade
    assert all(f.startswith(("avx", "amx", "fma", "f16c", "sse4")) for f in flags)
    assert env["cpu_march_native"]  # e.g. znver3, sapphirerapids
    row = results.make_row(**{k: v for k, v in env.items() if k in results.COLUMN_NAMES})
    assert row["cpu_flags"] == env["cpu_flags"]


def test_an_older_table_reads_with_blank_flags(tmp_path) -> None:
    row = results.make_row(run_id="old", level="tp", workload="w", implementation="e3nn",
                           variant="default", direction="forward", precision="float32",
                           batch=1, device="cpu", status="ok", time_median_s=1.0)
    old = results.to_frame([row]).drop(columns=["cpu_flags", "cpu_march_native"])
    old.to_parquet(tmp_path / "old.parquet")
    frame = results.read(tmp_path / "old.parquet")
    assert frame[["cpu_flags", "cpu_march_native"]].iloc[0].tolist() == ["", ""]
