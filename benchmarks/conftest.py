"""Options of the pytest-benchmark micro-benchmarks (``pytest benchmarks/ --benchmark-only``)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("equibench")
    group.addoption("--equibench-device", default="cpu",
                    help="device the micro-benchmarks run on: cpu or cuda:N (default cpu)")
    group.addoption("--equibench-batch", type=int, default=64,
                    help="tensor products per call (default 64)")


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--equibench-device")


@pytest.fixture(scope="session")
def batch(request: pytest.FixtureRequest) -> int:
    return request.config.getoption("--equibench-batch")
