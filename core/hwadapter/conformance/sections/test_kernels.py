"""Every op kernel the plugin registered, against the numpy oracle (hwadapter.plugin.reference): over the dtypes it
registered and the kit's shapes (broadcast, empty, 0-d, large) and special values (+-inf, NaN, +-0); each result of
the device's array type (a DeviceArray on the device, not a numpy array), with the shape and dtype of the op's rule."""
from __future__ import annotations

import pytest

from hwadapter.conformance import check
from hwadapter.conformance.cases import cases_of
from hwadapter.conformance.sections._target import params, usable
from hwadapter.plugin import reference

pytestmark = pytest.mark.usefixtures("kit_live_bytes")


def pytest_generate_tests(metafunc):
    if "op" in metafunc.fixturenames:
        metafunc.parametrize("op", params(metafunc.config, lambda dev: sorted(dev.kernels.ops()), _no_kernels))


def _no_kernels(dev) -> str:
    return (f"the {dev.type} plugin registers no op kernel (Plugin.register_kernels): this section checks op kernels "
            f"only")


def test_kernel(kit_dev, op):
    usable(op)
    if op not in reference.KERNELS:
        pytest.skip(f"{op!r} has no reference kernel to compare with")
    ran, declined, problems = check.run_cases(op, kit_dev, lambda dtypes: kit_dev.kernels.find(op, dtypes),
                                              cases_of(op))
    assert not problems, (f"the {kit_dev.type} plugin's {op} kernel got {len(problems)} of {ran} cases wrong:\n"
                          + "\n".join(problems[:8]) + f"\nReproduce: {check.reproduce(op, kit_dev)}")
    if not ran:
        pytest.skip(f"no case of the kit has dtypes the {op} kernel takes ({kit_dev.kernels.ops()[op]}); "
                    f"{declined} declined")
