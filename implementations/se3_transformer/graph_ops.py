"""Graph operations of the model: sum messages into nodes, softmax over incoming edges.

Two libraries with one interface (:class:`GraphOps`): pure PyTorch (``index_add_`` and a
segment softmax through ``scatter_reduce`` amax), and DGL (``copy_e_sum``,
``edge_softmax``), the library of the NVIDIA implementation. DGL's PyPI wheels only load
with torch <= 2.2.1 (workflows/envs/dgl.yaml), so :func:`dgl_unavailable` says why it
cannot run where it does not import.
"""

from __future__ import annotations

import os

from torch import Tensor


def dgl_unavailable() -> str | None:
    """None if DGL imports and works here, else the reason."""
    try:
        import dgl  # noqa: F401
        import dgl.ops  # noqa: F401
    except Exception as err:  # noqa: BLE001 - a broken wheel raises more than ImportError
        from equibench.dgl_env import ERROR_VARIABLE

        built = os.environ.get(ERROR_VARIABLE)
        return (f"dgl does not import ({type(err).__name__}: {str(err)[:200]}); DGL wheels "
                "need torch <= 2.2.1, in an environment of their own: "
                + (built or "`equibench dgl-env` (scripts/make_dgl_env.sh) builds it and "
                             "the workflow runs +dgl suites there"))
    return None


class GraphOps:
    """Pure PyTorch. Edges ``src -> dst`` (E,), ``n_nodes`` nodes."""

    name = "torch"

    def __init__(self, edge_src: Tensor, edge_dst: Tensor, n_nodes: int) -> None:
        self.edge_src, self.edge_dst, self.n_nodes = edge_src, edge_dst, n_nodes

    def sum_in(self, messages: Tensor) -> Tensor:
        """(E, ...) -> (N, ...): each node sums the messages of its incoming edges."""
        out = messages.new_zeros((self.n_nodes, *messages.shape[1:]))
        return out.index_add_(0, self.edge_dst, messages)

    def in_degree(self, dtype) -> Tensor:  # noqa: ANN001 - a torch dtype
        """(N,) number of incoming edges per node."""
        ones = self.edge_dst.new_ones(self.edge_dst.shape[0], dtype=dtype)
        return ones.new_zeros(self.n_nodes).index_add_(0, self.edge_dst, ones)

    def softmax_in(self, scores: Tensor) -> Tensor:
        """(E, H) -> (E, H): softmax over the incoming edges of each destination node."""
        index = self.edge_dst[:, None].expand_as(scores)
        # Subtracting each node's maximum keeps exp() finite; it cancels in the ratio.
        peak = scores.new_full((self.n_nodes, scores.shape[1]), float("-inf"))
        peak = peak.scatter_reduce(0, index, scores.detach(), "amax", include_self=True)
        e = (scores - peak[self.edge_dst]).exp()
        total = e.new_zeros(peak.shape).index_add_(0, self.edge_dst, e)
        return e / total[self.edge_dst]


class DGLGraphOps(GraphOps):
    """DGL kernels on a ``dgl.graph`` built once per batch (outside the timed call)."""

    name = "dgl"

    def __init__(self, edge_src: Tensor, edge_dst: Tensor, n_nodes: int) -> None:
        import dgl

        super().__init__(edge_src, edge_dst, n_nodes)
        self.graph = dgl.graph((edge_src, edge_dst), num_nodes=n_nodes)

    def sum_in(self, messages: Tensor) -> Tensor:
        import dgl.ops

        return dgl.ops.copy_e_sum(self.graph, messages)

    def softmax_in(self, scores: Tensor) -> Tensor:
        from dgl.nn.functional import edge_softmax

        return edge_softmax(self.graph, scores)


def make_graph_ops(kind: str, edge_src: Tensor, edge_dst: Tensor, n_nodes: int) -> GraphOps:
    return (DGLGraphOps if kind == "dgl" else GraphOps)(edge_src, edge_dst, n_nodes)
