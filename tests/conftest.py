"""Fixtures shared by the test modules."""

import pytest
import torch


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for a module: small batches gain nothing from threads, and two
    threads on two shared cores spin."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
