"""Fixtures shared by the test modules that run cases in this process."""

import pytest
import torch

from equibench.measure import MeasureConfig
from equibench.runner import RunSettings

# One timed repeat: tests that use it check rows, not speed.
ONE_REPEAT = RunSettings(measure=MeasureConfig(budget_s=0.0, min_repeats=1, max_repeats=1,
                                               warmup=0))


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for a module: small batches gain nothing from threads, and two
    threads on two shared cores spin."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
