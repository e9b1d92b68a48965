"""Kernel test configuration: without a GPU, Triton runs in its interpreter.

``TRITON_INTERPRET=1`` must be set before ``triton`` is first imported, hence here.
Shared helpers live in ``kernel_testing.py``.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "0" if torch.cuda.is_available() else "1")


@pytest.fixture(params=[torch.float64, torch.float32], ids=["f64", "f32"])
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    return request.param
