"""Optimization switches of the SE(3)-Transformer and the named variants built from them.

Every variant is the same code; only these switches differ. The optimizations and their
names are those of NVIDIA's SE(3)-Transformer (DeepLearningExamples, PyTorch/DrugDiscovery/
SE3Transformer, README and blog, 2021-2023); the baseline is Fuchs et al., SE(3)-Transformers,
NeurIPS 2020:

- ``baseline``: every optimization off plus the official-baseline habits (Fuchs et al.
  2020): per-edge kernels materialized, mean aggregation in the pooled convolution.
  Mean aggregation changes the function; every other switch is an exact rearrangement.
- ``plain``: every optimization off, no habits (the base the single-switch variants
  start from).
- one variant per switch on top of ``plain``: ``fuse_kv``, ``fuse-partial``,
  ``fuse-full``, ``basis_cache``, ``shared_radial``, ``low_memory``. These take the
  switch's own name, underscores included: ``low_memory`` (underscore) is the
  checkpointing switch alone on ``plain``, not NVIDIA's ``low-memory`` mode below.
- ``optimized``: every optimization of a training step on (fully fused convolutions, fused
  key/value, shared radial profile, low-memory checkpointing; bases computed once per step
  and shared by the layers, as every variant does). Under checkpointing the step keeps the
  pair bases and each chunk of edges assembles its fused basis inside the checkpoint
  (``basis.compute_bases(fuse=False)``): the zero-padded fused bases are never held whole.
- ``nvidia-default``: NVIDIA's default recipe, every optimization on except low-memory
  mode; what NVIDIA's published "optimized" figures measure (the claims use it).
- ``low-memory`` (hyphen): NVIDIA's low-memory mode: ``nvidia-default`` with activation
  checkpointing of each convolution and no fused bases (``fuse_level="none"``). Not the
  single-switch ``low_memory`` (underscore) above, which keeps ``plain``'s every other
  setting. Both names are in published result rows, so neither is renamed.
- ``nvidia-precompute``: ``nvidia-default`` with NVIDIA's ``--precompute_bases``: the edge
  bases are computed once per batch of molecules, outside the timed step, and kept.

Amortized work: ``basis_cache`` moves the edge bases out of the step, which a training step
on a new batch must pay. Variants with it (``basis_cache``, ``nvidia-precompute``) say so
(:func:`amortized`); their rows name it in ``extra.amortized`` and count the kept bases in
their peak memory. Every other variant pays everything inside the timed step.

Any variant name may end with ``+dgl`` to run the graph operations (edge softmax,
scatter-sum) with DGL instead of PyTorch (``optimized+dgl``); see ``graph_ops``.

Weights: all variants are evaluated with weights mapped from one master model in the
``optimized`` parameterization (shared radial profile, fused key/value); see
``model.transfer_weights``. Fusion levels, basis caching, checkpointing, materialized
kernels and the graph-op library change no parameter, so those variants hold identical
weights; ``shared_radial=False`` and ``fuse_kv=False`` hold the same function in more
parameters (hidden radial layers copied, output rows split).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from equibench.config import DGL_SUFFIX

FUSE_LEVELS = ("none", "partial", "full")


@dataclass(frozen=True)
class Switches:
    """What the model does; the defaults are the ``plain`` variant."""

    # One TFN convolution with doubled output channels for keys and values (per degree:
    # values first, then keys) instead of two convolutions.
    fuse_kv: bool = False
    # none: one contraction per (degree in, degree out) pair; partial: one per output
    # degree where input channels are equal (else per input degree where output channels
    # are equal); full: one for all pairs when both are uniform (falls back to partial).
    fuse_level: str = "none"
    # Edge bases (spherical harmonics and their Clebsch-Gordan contractions, fused bases
    # included) computed once per batch outside the timed call and kept, instead of once
    # in every forward (shared by the layers either way). Amortized work: see amortized().
    basis_cache: bool = False
    # One radial MLP per convolution (hidden layers shared, one output layer for every
    # degree pair) instead of one MLP per degree pair.
    shared_radial: bool = False
    # Activation checkpointing of each convolution, in chunks of edges
    # (tfn.CHECKPOINT_EDGES): its per-edge intermediates are recomputed in backward, a
    # chunk at a time, instead of kept.
    low_memory: bool = False
    # Official-baseline habit: kernel K (E, c_out (2l_out+1), c_in (2l_in+1)) built as
    # sum_J R * basis (a broadcast product, as Fuchs et al.) and applied as K @ x.
    materialize_kernels: bool = False
    # Official-baseline habit: the pooled convolution averages its messages instead of
    # summing them. Changes the function.
    mean_aggregation: bool = False
    # Graph operations library: "torch" (index_add_, scatter_reduce) or "dgl".
    graph_ops: str = "torch"

    def __post_init__(self) -> None:
        if self.fuse_level not in FUSE_LEVELS:
            raise ValueError(f"fuse_level must be one of {FUSE_LEVELS}, got {self.fuse_level!r}")
        if self.graph_ops not in ("torch", "dgl"):
            raise ValueError(f"graph_ops must be torch or dgl, got {self.graph_ops!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    def reference(self) -> Switches:
        """The same function with nothing optimized (only the function-changing habit kept):
        what the float64 reference of a case runs."""
        return Switches(mean_aggregation=self.mean_aggregation)


PLAIN = Switches()
NVIDIA_DEFAULT = Switches(fuse_kv=True, fuse_level="full", shared_radial=True)
OPTIMIZED = replace(NVIDIA_DEFAULT, low_memory=True)

# Single-switch variants are named after their switch (underscores); NVIDIA's recipes and
# the fusion levels use hyphens. Mind ``low_memory`` (the switch on plain) against
# ``low-memory`` (NVIDIA's mode, on nvidia-default): see the module docstring.
VARIANTS: dict[str, Switches] = {
    "baseline": Switches(materialize_kernels=True, mean_aggregation=True),
    "plain": PLAIN,
    "fuse_kv": replace(PLAIN, fuse_kv=True),
    "fuse-partial": replace(PLAIN, fuse_level="partial"),
    "fuse-full": replace(PLAIN, fuse_level="full"),
    "basis_cache": replace(PLAIN, basis_cache=True),
    "shared_radial": replace(PLAIN, shared_radial=True),
    "low_memory": replace(PLAIN, low_memory=True),
    "optimized": OPTIMIZED,
    "nvidia-default": NVIDIA_DEFAULT,
    "low-memory": replace(NVIDIA_DEFAULT, low_memory=True, fuse_level="none"),
    "nvidia-precompute": replace(NVIDIA_DEFAULT, basis_cache=True),
}


def amortized(switches: Switches) -> str:
    """What a variant computes outside its timed step ('' when nothing)."""
    if switches.basis_cache:
        return ("edge bases computed once per batch outside the timed step and kept "
                "(NVIDIA's --precompute_bases); their memory counts in the peak")
    return ""


def variant_switches(name: str) -> Switches:
    """Switches of a variant name (``optimized``, ``baseline+dgl``, ...)."""
    base, dgl = (name[: -len(DGL_SUFFIX)], True) if name.endswith(DGL_SUFFIX) else (name, False)
    if base not in VARIANTS:
        raise ValueError(
            f"unknown se3t variant {name!r}; choose one of {', '.join(VARIANTS)} "
            f"(optionally with {DGL_SUFFIX!r})"
        )
    switches = VARIANTS[base]
    return replace(switches, graph_ops="dgl") if dgl else switches
