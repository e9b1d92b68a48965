"""torch.compile's and torch.export's modules, imported once by the fork server of a run
with compile or export cases (``fork_server.start``), so that each such case process starts
with them: imports are outside a case's cold start (docs/modes.md)."""

import torch._dynamo  # noqa: F401
import torch._inductor.compile_fx  # noqa: F401
import torch.export  # noqa: F401
import torch.fx.experimental.proxy_tensor  # noqa: F401

import equibench.preload  # noqa: F401
