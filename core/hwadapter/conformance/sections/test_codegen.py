"""The codegen backend: the op set written in kernel primitives (hwadapter_kp), rendered in the backend's dialect,
compiled, loaded and launched on the device, against the numpy oracle. Skipped when the plugin has no codegen
backend."""
from __future__ import annotations

import numpy as np
import pytest

from hwadapter.conformance import check
from hwadapter.conformance.cases import reference_pool, special_cases
from hwadapter.conformance.sections._target import params, usable
from hwadapter.plugin import primitive_ops

pytestmark = pytest.mark.usefixtures("kit_live_bytes")
# Compiling is the cost here (a second or more per program with an OpenCL compiler, cold): per op one float32 case,
# one case of another dtype (int32 or bool), and float32 special values where the kit has them.
OTHER = (np.dtype("int32"), np.dtype("bool"), np.dtype("int64"))


def _ops(dev) -> list:
    return sorted(primitive_ops()) if dev.codegen is not None else []


def _no_codegen(dev) -> str:
    reason = dev.codegen_unavailable
    return f"{dev} has no codegen backend" + (f": {reason}" if reason else "")


def pytest_generate_tests(metafunc):
    if "op" in metafunc.fixturenames:
        metafunc.parametrize("op", params(metafunc.config, _ops, _no_codegen))


def _selection(op: str) -> list:
    """The richest float32 case (most broadcasting, most axes), the first of another dtype (often 0-d), float32
    special values."""
    pool = [c for c in reference_pool(op) if c[0] and all(a.size for a in c[0])]
    f32 = [c for c in pool if c[0][-1].dtype == np.float32]
    richest = max(f32, key=lambda c: (len({a.shape for a in c[0]}), max(a.ndim for a in c[0])), default=None)
    other = [c for c in pool if c[0][-1].dtype in OTHER]
    specials = [c for c in special_cases(op) if c[0][0].dtype == np.float32]
    return ([richest] if richest else []) + other[:1] + specials


def test_primitive_op(kit_dev, op):
    usable(op)
    kernel = kit_dev.primitive(op)
    assert kernel is not None, (f"{kit_dev} has a codegen backend but no kernel-primitive program for {op!r}: "
                                f"Plugin.codegen_backend must give a backend that compiles every op written in kernel "
                                f"primitives (hwadapter.plugin.primitive_ops())")
    cases = _selection(op)
    ran, declined, problems = check.run_cases(op, kit_dev, lambda dtypes: kernel, cases)
    assert not problems, (f"the {kit_dev.type} codegen backend's {op} program (hwadapter_kp source in its dialect, "
                          f"compiled, loaded, launched) got {len(problems)} of {ran} cases wrong:\n"
                          + "\n".join(problems[:8]) + f"\nReproduce: {check.reproduce(op, kit_dev, program=True)}")
    if not ran:
        pytest.skip(f"{op}: the program declined every case ({declined}) with UnsupportedDTypeError or "
                    f"KernelNotFoundError")
