"""Training on the device: gradients of the op families a network uses (the vjp rules run on the device, through
its kernels, codegen backend or fallback) equal cpu:0's at the dtype's tolerance; and every fused backward kernel the
plugin registers (`<op>_vjp`, which autograd prefers to the op's rule) returns one gradient per input, of the
device's array type and the input's shape and dtype, equal to the rule's on cpu:0."""
from __future__ import annotations

import pytest

from hwadapter.conformance import gradients
from hwadapter.conformance.sections._target import params, usable

pytestmark = pytest.mark.usefixtures("kit_live_bytes")


def pytest_generate_tests(metafunc):
    if "vjp_op" in metafunc.fixturenames:
        metafunc.parametrize("vjp_op", params(metafunc.config, gradients.vjp_kernels, _no_fused))


def _no_fused(dev) -> str:
    return (f"the {dev.type} plugin registers no fused backward kernel (<op>_vjp): its gradients are the vjp rules "
            f"run on its kernels, checked by test_gradients")


@pytest.mark.parametrize("case", sorted(gradients.CASES))
def test_gradients(kit_dev, case):
    wrong = gradients.judge_case(case, str(kit_dev))
    assert not wrong, (f"{kit_dev}: the gradients of {case!r} differ from {gradients.REFERENCE}'s:\n"
                       + "\n".join(wrong) + f"\nReproduce: {gradients.reproduce_case(case, str(kit_dev))}")


def test_fused_backward_kernel(kit_dev, vjp_op):
    usable(vjp_op)
    cases = gradients.vjp_cases(vjp_op, kit_dev)
    if not cases:
        pytest.skip(f"no kit case of {gradients.forward_of(vjp_op)!r} has dtypes the {vjp_op} kernel takes "
                    f"({kit_dev.kernels.ops()[vjp_op]})")
    problems = []
    for arrays, cots, attrs in cases:
        try:
            wrong = gradients.judge_vjp(vjp_op, kit_dev, arrays, cots, attrs)
        except Exception as err:  # noqa: BLE001: whatever the kernel raised is the finding
            wrong = f"raised {type(err).__name__}: {' '.join(str(err).split())[:400]}"
        if wrong:
            problems.append(f"{vjp_op}{gradients.describe(arrays, cots, attrs)}: {wrong}")
    assert not problems, (f"the {kit_dev.type} plugin's fused backward kernel {vjp_op} got {len(problems)} of "
                          f"{len(cases)} cases wrong:\n" + "\n".join(problems[:8])
                          + f"\nReproduce: {gradients.reproduce_vjp(vjp_op, kit_dev)}")
