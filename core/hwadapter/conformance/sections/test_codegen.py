"""The codegen backend: the op set written in kernel primitives (hwadapter_kp), rendered in the backend's dialect,
compiled, loaded and launched on the device, against the numpy oracle. Skipped when the plugin has no codegen
backend."""
from __future__ import annotations

import numpy as np
import pytest

from hwadapter.conformance import check
from hwadapter.conformance.cases import reference_pool, special_cases
from hwadapter.conformance.sections._target import fail_if_unavailable, params

pytestmark = pytest.mark.usefixtures("kit_live_bytes")
# Compiling is the cost here (a second or more per program with an OpenCL compiler, cold): per op one float32 case,
# one case of another dtype (int32 or bool), and float32 special values where the kit has them.
OTHER = (np.dtype("int32"), np.dtype("bool"), np.dtype("int64"))


def _ops(dev):
    from hwadapter.runtime import codegen
    return sorted(codegen.op_set()) if dev.codegen is not None else [pytest.param(None, id="none")]


def pytest_generate_tests(metafunc):
    if "op" in metafunc.fixturenames:
        metafunc.parametrize("op", params(metafunc.config, _ops))


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
    fail_if_unavailable(op)
    if op is None:
        reason = kit_dev.codegen_unavailable
        pytest.skip(f"{kit_dev} has no codegen backend" + (f": {reason}" if reason else ""))
    kernel = kit_dev.primitive(op)
    assert kernel is not None, f"{kit_dev}: no kernel-primitive kernel for {op!r} though it has a codegen backend"
    cases = _selection(op)
    ran, declined, problems = check.run_cases(op, kit_dev, lambda dtypes: kernel, cases)
    assert not problems, f"{len(problems)} of {ran} cases wrong:\n" + "\n".join(problems[:8])
    if not ran:
        pytest.skip(f"{op}: every case declined ({declined})")
