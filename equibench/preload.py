"""Modules imported once by the fork server, so every case process starts warm.

Imported for its side effects only. Libraries that fail to import are skipped here: their
adapters report the failure as `unavailable` when a case asks for them.
"""

import importlib

import torch  # noqa: F401
from e3nn import o3  # noqa: F401

import equibench.runner  # noqa: F401

# mace-torch's modules take ~3 s to import (its tools pull in matscipy, torch_ema, ...):
# paid once here instead of in each of a job's model and MD case processes.
for _module in ("cuequivariance_torch", "equibench.kernels", "mace.modules"):
    try:
        importlib.import_module(_module)
    except Exception:  # noqa: BLE001, S110 - an adapter reports the real error later
        pass
