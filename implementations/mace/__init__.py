"""MACE (mace-torch) at the model level: e3nn, cuEquivariance, OpenEquivariance and the
equibench fused convolution, on QM9 and the synthetic oc20-like slabs; and MACE as the
potential of the md level, on structures from ASE or files.

Importing this package registers the family and imports nothing optional: mace-torch,
cuEquivariance, OpenEquivariance and the kernels are imported when a case is built, and
an import failure is reported through ``available``.
"""

from . import bench  # noqa: F401 - registers the family
