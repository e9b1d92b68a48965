"""Edge lists sorted once per graph for the fused convolution kernels."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _csr(keys: torch.Tensor, num_rows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(row pointer ``(num_rows+1,)``, edge ids sorted by key, stable) for int64 keys."""
    perm = torch.argsort(keys, stable=True)
    counts = torch.bincount(keys, minlength=num_rows)
    ptr = torch.zeros(num_rows + 1, dtype=torch.int64, device=keys.device)
    torch.cumsum(counts, 0, out=ptr[1:])
    return ptr, perm


@dataclass(frozen=True)
class ConvPlan:
    """A graph in the two orders the kernels need.

    Forward walks destinations (``dst_ptr``/``dst_perm``: each output row is summed by
    one thread in a fixed edge order, so it is deterministic without atomics); backward
    walks sources (``src_ptr``/``src_perm``) for the same reason on ``grad x``.
    All tensors are int64 on the device of the edge lists; ``E`` edges.
    """

    edge_src: torch.Tensor  # (E,)
    edge_dst: torch.Tensor  # (E,)
    dst_ptr: torch.Tensor  # (num_nodes + 1,)
    dst_perm: torch.Tensor  # (E,) edge ids sorted by destination
    src_ptr: torch.Tensor  # (num_src + 1,)
    src_perm: torch.Tensor  # (E,) edge ids sorted by source

    @property
    def num_nodes(self) -> int:
        return self.dst_ptr.shape[0] - 1

    @property
    def num_src(self) -> int:
        return self.src_ptr.shape[0] - 1

    @property
    def num_edges(self) -> int:
        return self.edge_src.shape[0]

    @classmethod
    def build(
        cls, edge_src: torch.Tensor, edge_dst: torch.Tensor, num_nodes: int, num_src: int
    ) -> ConvPlan:
        """Sort ``edge_src -> edge_dst`` (messages flow src to dst) into both CSR lists.

        Indices are checked here, once per graph, because the kernels do not check them.
        """
        # copies: a cached plan must not change when the caller edits its edge lists
        src = edge_src.to(torch.int64, copy=True).contiguous()
        dst = edge_dst.to(torch.int64, copy=True).contiguous()
        if src.shape != dst.shape or src.dim() != 1:
            raise ValueError("edge_src and edge_dst must be 1-d and of equal length")
        if src.numel() > 0:
            if int(src.min()) < 0 or int(src.max()) >= num_src:
                raise IndexError(f"edge_src out of range [0, {num_src})")
            if int(dst.min()) < 0 or int(dst.max()) >= num_nodes:
                raise IndexError(f"edge_dst out of range [0, {num_nodes})")
        dst_ptr, dst_perm = _csr(dst, num_nodes)
        src_ptr, src_perm = _csr(src, num_src)
        return cls(src, dst, dst_ptr, dst_perm, src_ptr, src_perm)
