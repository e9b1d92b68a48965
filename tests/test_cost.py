"""The executed multiply-adds of our generated CPU kernels, counted in the generated source."""

import re

import pytest
from equibench.kernels.cpu_codegen import generate_cpu_source

from equibench.cost import executed_multiply_adds, tp_cost
from equibench.workloads import get_tp_workload

_CHANNEL_LOOP = re.compile(r"for \(int64_t u = 0; u < (\d+); \+\+u\) \{")


def _body(source: str, function: str) -> str:
    """The body of ``function``'s definition in the generated source."""
    start = re.search(rf"void {function}\([^;{{]*\) \{{", source).end()
    depth, end = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(source[end], 0)
        end += 1
    return source[start:end - 1]


def _defined(source: str, pattern: str) -> list[str]:
    """The functions defined in ``source`` whose names match ``pattern`` (a primitive and
    the pieces it is cut into)."""
    return sorted(set(re.findall(rf"void ({pattern})\([^;{{]*\) \{{", source)))


def _multiplications(code: str) -> int:
    """Floating-point multiplications ``code`` executes: `` * `` outside index brackets,
    times the trip counts of the channel loops around it."""
    total, trips, loop_depths, depth = 0, [1], [], 0
    for line in code.splitlines():
        total += re.sub(r"\[[^\]]*\]", "", line).count(" * ") * trips[-1]
        if loop := _CHANNEL_LOOP.search(line):
            trips.append(trips[-1] * int(loop.group(1)))
            loop_depths.append(depth)
        depth += line.count("{") - line.count("}")
        while loop_depths and depth <= loop_depths[-1]:
            loop_depths.pop()
            trips.pop()
    return total


@pytest.mark.parametrize("workload", ["mace-large", "mace-medium", "nequip-benzene-1parity"])
def test_executed_count_is_what_the_generated_code_multiplies(workload):
    problem = get_tp_workload(workload)
    source = generate_cpu_source(problem.descriptor, "f32")
    forward = sum(_multiplications(_body(source, name))
                  for name in _defined(source, r"row_fwd_\d+(?:_s\d+)?"))
    backward = sum(_multiplications(_body(source, name))
                   for name in _defined(source, r"row_bwd(?:_s\d+)?"))
    assert forward and backward
    assert executed_multiply_adds(problem, "forward") == forward
    assert executed_multiply_adds(problem, "backward") == forward + backward
    assert executed_multiply_adds(problem, "double_backward") is None


def test_uvw_paths_are_not_counted():
    """Their generated code is another algorithm, which the count does not describe."""
    assert executed_multiply_adds(get_tp_workload("DiffDock-L=1"), "forward") is None


def test_mace_large_executes_234_per_channel_against_645_nominal():
    problem = get_tp_workload("mace-large")
    channels, cg_terms = 128, 215  # M = alpha C . y: once per edge, one term per CG entry
    assert tp_cost(problem).forward_flops == 645 * channels
    assert executed_multiply_adds(problem, "forward") == 234 * channels + cg_terms
