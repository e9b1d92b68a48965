"""One definition per workload name: every backend derives what it runs from the same
``TPProblem``, and they agree on irreps, paths, weights and sizes."""

import pytest
from e3nn import o3

from equibench.workloads import TP_WORKLOADS, get_tp_workload


@pytest.mark.parametrize("name", list(TP_WORKLOADS))
def test_every_backend_describes_the_same_product(name):
    problem = TP_WORKLOADS[name]
    module = problem.e3nn_module()
    desc = problem.descriptor
    for ours, e3nn_irreps, text in ((desc.irreps_in1, module.irreps_in1, problem.irreps_in1),
                                    (desc.irreps_in2, module.irreps_in2, problem.irreps_in2),
                                    (desc.irreps_out, module.irreps_out, problem.irreps_out)):
        assert o3.Irreps(ours) == e3nn_irreps == o3.Irreps(text)
    assert desc.instructions == [tuple(i) for i in problem.instructions]
    assert desc.weight_numel == module.weight_numel == problem.weight_numel
    assert (desc.in1_dim, desc.in2_dim, desc.out_dim) == problem.dims
    assert [p.alpha for p in desc.paths] == [i.path_weight for i in module.instructions]
    try:
        from equibench.implementations.cuequivariance import polynomial
    except ImportError:
        return
    poly = polynomial(problem)
    assert [o.size for o in poly.inputs] == [problem.weight_numel, *problem.dims[:2]]
    assert [o.size for o in poly.outputs] == [problem.dims[2]]


def test_a_scaled_problem_keeps_its_paths():
    full, small = get_tp_workload("mace-large"), get_tp_workload("mace-large").scaled(1 / 16)
    assert small.instructions == full.instructions
    assert o3.Irreps(small.irreps_in1) == o3.Irreps("8x0e+8x1o+8x2e")
    assert [p.nnz for p in small.descriptor.paths] == [p.nnz for p in full.descriptor.paths]


def test_an_unknown_workload_names_the_valid_ones():
    with pytest.raises(ValueError, match="mace-large"):
        get_tp_workload("mace-huge")
