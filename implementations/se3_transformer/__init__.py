"""In-house SE(3)-Transformer (Fuchs et al. 2020, with NVIDIA's optimizations as switches).

Importing registers the ``se3t`` model family (``bench``); nothing here can fail at import:
optional libraries (DGL, cuEquivariance, the fused kernels) are imported where used.
"""

from . import bench  # noqa: F401 - registers the model family
