"""Every kernel result is checked: a plugin kernel that returns the wrong shape, dtype, array type, device or number
of outputs is a KernelExecutionError naming the op and the plugin, never a wrong tensor or a crash of the next op.

The results are checked against the op set's rules (hwadapter.api.meta); the rules themselves are checked here
against what the numpy reference kernels actually return, over many cases, so that the two cannot drift apart.
"""
from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.api.collectives import COLLECTIVE_OPS
from hwadapter.api.config import config
from hwadapter.conformance.cases import arr, reference_cases  # the kit's cases, moved there
from hwadapter.api.errors import KernelExecutionError
from hwadapter.api import meta, reference
from hwadapter.runtime.device import devices


def _as_meta(out) -> tuple:
    outs = out if isinstance(out, list) else [np.asarray(out)]  # a ufunc's numpy scalar is a 0-d result
    return tuple((o.shape, o.dtype) for o in outs)


def test_every_op_of_the_set_has_a_rule_and_every_rule_an_op():
    # the collective ops have rules (a trace shapes them) and no reference kernel: a communicator runs them
    assert set(meta.RULES) == set(reference.KERNELS) | set(COLLECTIVE_OPS)
    assert not set(COLLECTIVE_OPS) & set(reference.KERNELS)
    assert {op for op, _, _ in reference_cases()} == set(reference.KERNELS)


def test_the_rules_predict_what_the_reference_kernels_return():
    """For every case: the rule's (shape, dtype) of each output equals the reference kernel's result."""
    wrong, count = [], 0
    for op, arrays, attrs in reference_cases():
        count += 1
        got = _as_meta(reference.KERNELS[op](*arrays, **attrs))
        rule = meta.result_meta(op, tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), attrs)
        if rule != got:
            wrong.append(f"{op}({', '.join(f'{a.dtype}{list(a.shape)}' for a in arrays)}, {attrs}): reference "
                         f"{got}, rule {rule}")
    assert count > 1500
    assert not wrong, f"{len(wrong)} of {count} cases:\n" + "\n".join(wrong[:30])


@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "uint8"])
def test_sum_and_prod_of_a_small_integer_keep_its_dtype_as_the_compiled_kernels_do(op, dtype):
    """hw.sum(x, dtype="int32") hands the kernel int32: the result is int32 (paddle's, opencl:0's and codegen's)."""
    x = arr((2, 3), dtype, 0, 2)
    got = _as_meta(reference.KERNELS[op](x, axis=(0,), keepdim=False))
    assert got == meta.result_meta(op, (x.shape,), (x.dtype,), {"axis": (0,), "keepdim": False}) == \
        (((3,), np.dtype(dtype)),)


# ---------------------------------------------------------------------------------------------------------------
# Misbehaving kernels are caught at the op, naming the plugin

SITE = Path(__file__).parent / "plugins" / "badkern_site"  # not on sys.path: only these tests see its devices


@pytest.fixture
def bad(monkeypatch, reset_plugins):
    """The hwadapter-badkern distribution installed (badkern:0/1, badhost:0), every kernel right until a test sets
    a fault in bad.FAULTS; afterwards it is gone again and no device memory of it is left allocated."""
    monkeypatch.syspath_prepend(str(SITE))
    reset_plugins()
    import hwadapter_badkern
    monkeypatch.setattr(hwadapter_badkern, "FAULTS", {})
    yield hwadapter_badkern
    gc.collect()
    live = {str(d): d._allocator.allocated for d in devices.all() if d._allocator is not None}
    assert not any(live.values()), f"device memory left allocated: {live}"
    monkeypatch.undo()  # off sys.path before the rescan (reset_plugins' teardown)


def _fault(bad, op: str, fault: str) -> None:
    bad.FAULTS.clear()
    bad.FAULTS[op] = fault


A = np.arange(6, dtype=np.float32).reshape(2, 3) - 2


def _run(op: str, x):
    """op on x the way a user calls it (x + x for add)."""
    return {"add": lambda: x + x, "neg": lambda: -x, "exp": lambda: hw.exp(x),
            "sum": lambda: hw.sum(x, axis=1), "transpose": lambda: hw.transpose(x, [1, 0]),
            "split": lambda: hw.split(x, [1, 2], axis=1)}[op]()


_ORACLE = {"add": lambda a: a + a, "neg": lambda a: -a, "exp": np.exp, "sum": lambda a: a.sum(axis=1),
           "transpose": lambda a: a.T, "split": lambda a: [a[:, :1], a[:, 1:]]}


def _assert_right(op: str, got, a=A):
    want = _ORACLE[op](a)
    if op == "split":
        assert len(got) == 2
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-6)
        return
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def _raises_naming_the_plugin(op: str, plugin: str, run, *parts, wrong_result=True):
    """run() raises KernelExecutionError naming the op, the plugin, its distribution, the fix and each of `parts`
    (what was due and what came back); the message is returned."""
    with pytest.raises(KernelExecutionError) as info:
        run()
    msg = str(info.value)
    for part in (f"'{op}'", f"'{plugin}' plugin", "hwadapter-badkern 0.1", "report it to the vendor of", *parts,
                 *(["returned", "expected", "bug in the plugin, not in your program"] if wrong_result else [])):
        assert part in msg, f"{part!r} not in: {msg}"
    return msg


# (op, fault, what the message says was due, what it says came back), on badkern:0 (DeviceArrays)
DEVICE_FAULTS = [
    ("add", "shape", "shape (2, 3) and dtype float32", "shape (7,)"),
    ("add", "dtype", "shape (2, 3) and dtype float32", "dtype float64"),
    ("add", "numpy", "DeviceArray on badkern:0 of shape (2, 3)", "numpy.ndarray of shape (2, 3)"),
    ("add", "none", "DeviceArray on badkern:0 of shape (2, 3)", "returned None"),
    ("add", "device", "DeviceArray on badkern:0", "DeviceArray on badkern:1"),
    ("neg", "shape", "shape (2, 3) and dtype float32", "shape (7,)"),
    ("neg", "dtype", "dtype float32", "dtype float64"),
    ("neg", "none", "DeviceArray on badkern:0", "returned None"),
    ("neg", "hostile", "DeviceArray on badkern:0", "returned a Hostile (<Hostile object>)"),
    ("exp", "numpy", "DeviceArray on badkern:0", "numpy.ndarray"),
    ("sum", "shape", "shape (2,) and dtype float32", "shape (3,)"),
    ("sum", "dtype", "shape (2,) and dtype float32", "dtype float64"),
    ("sum", "list", "DeviceArray on badkern:0 of shape (2,)", "a list of 1"),
    ("sum", "device", "DeviceArray on badkern:0", "DeviceArray on badkern:1"),
    ("transpose", "none", "shape (3, 2)", "returned None"),
    ("split", "count", "a list of 2", "a list of 1"),
    ("split", "shape", "a list of 2: [a DeviceArray on badkern:0 of shape (2, 1)", "shape (3,)"),
    ("split", "none", "a list of 2", "[None, a DeviceArray on badkern:0 of shape (2, 2)"),
]


@pytest.mark.parametrize("warm", [False, True], ids=["first-call", "warm"])
@pytest.mark.parametrize("op,fault,due,got", DEVICE_FAULTS, ids=[f"{c[0]}-{c[1]}" for c in DEVICE_FAULTS])
def test_a_wrong_device_kernel_result_is_an_error_naming_the_plugin_and_the_next_op_works(bad, op, fault, due, got,
                                                                                         warm):
    """The first call (route resolution) and a warm call (the inline checks of dispatch_unary/binary) alike."""
    x = hw.to_tensor(A, device="badkern:0")
    if warm:
        _assert_right(op, _run(op, x))
    _fault(bad, op, fault)
    _raises_naming_the_plugin(op, "badkern", lambda: _run(op, x), "badkern:0", due, got)
    bad.FAULTS.clear()
    _assert_right(op, _run(op, x))  # the device and the route are still fine
    _assert_right(op, _run(op, hw.to_tensor(A + 1, device="badkern:0")), A + 1)


HOST_FAULTS = [
    ("add", "shape", "numpy.ndarray (C-contiguous) of shape (2, 3) and dtype float32", "shape (7,)"),
    ("add", "dtype", "dtype float32", "dtype float64"),
    ("add", "none", "numpy.ndarray", "returned None"),
    ("add", "hostile", "numpy.ndarray", "returned a Hostile (<Hostile object>)"),
    ("add", "strided", "C-contiguous", "numpy.ndarray of shape (2, 3)"),
    ("neg", "strided", "C-contiguous", "numpy.ndarray of shape (2, 3)"),
    ("sum", "list", "numpy.ndarray (C-contiguous) of shape (2,)", "a list of 1"),
    ("split", "count", "a list of 2", "a list of 1"),
    ("transpose", "dtype", "shape (3, 2) and dtype float32", "dtype float64"),
]


@pytest.mark.parametrize("op,fault,due,got", HOST_FAULTS, ids=[f"{c[0]}-{c[1]}" for c in HOST_FAULTS])
def test_a_wrong_host_kernel_result_is_an_error_naming_the_plugin(bad, op, fault, due, got):
    x = hw.to_tensor(A, device="badhost:0")
    _fault(bad, op, fault)
    _raises_naming_the_plugin(op, "badhost", lambda: _run(op, x), "badhost:0", due, got)
    bad.FAULTS.clear()
    _assert_right(op, _run(op, x))


def test_an_array_larger_than_its_memory_block_is_refused(bad):
    """A DeviceArray whose block cannot hold its shape would let the next kernel read past the allocation."""
    a = np.ones((16, 16), np.float32)
    x = hw.to_tensor(a, device="badkern:0")
    _fault(bad, "transpose", "short")
    _raises_naming_the_plugin("transpose", "badkern", lambda: hw.transpose(x, [1, 0]), "shape (16, 16)")
    bad.FAULTS.clear()
    np.testing.assert_array_equal(hw.transpose(x, [1, 0]).numpy(), a.T)


def test_a_broadcast_and_a_0d_result_are_checked_on_the_warm_path(bad):
    x = hw.to_tensor(A, device="badkern:0")
    row = hw.to_tensor(A[0], device="badkern:0")
    np.testing.assert_array_equal((x + row).numpy(), A + A[0])  # warm the route
    _fault(bad, "add", "shape")
    _raises_naming_the_plugin("add", "badkern", lambda: x + row, "shape (2, 3)", "shape (7,)")
    s = hw.to_tensor(np.float32(2), device="badhost:0")
    bad.FAULTS.clear()
    assert (s + s).shape == () and float((s + s).numpy()) == 4.0
    _fault(bad, "add", "dtype")
    _raises_naming_the_plugin("add", "badhost", lambda: s + s, "shape () and dtype float32", "dtype float64")


@pytest.fixture
def badkern_fallback(bad, monkeypatch):
    """badkern as the fallback device: testdev:0's ops without a kernel (exp) run on badkern:0."""
    monkeypatch.setattr(config, "fallback_device", "badkern")
    devices.forget_routes()
    yield bad
    devices.forget_routes()


@pytest.mark.parametrize("fault,got", [("shape", "shape (7,)"), ("dtype", "dtype float64"), ("numpy", "numpy.ndarray"),
                                       ("none", "returned None")])
def test_a_wrong_result_of_the_fallback_device_names_the_fallback_plugin(badkern_fallback, testdev, fault, got):
    x = hw.to_tensor(A, device=testdev)
    _fault(badkern_fallback, "exp", fault)
    msg = _raises_naming_the_plugin("exp", "badkern", lambda: hw.exp(x), "fallback on badkern:0", got)
    assert "for testdev:0" in msg and "'testdev' plugin" not in msg
    badkern_fallback.FAULTS.clear()
    np.testing.assert_allclose(hw.exp(x).numpy(), np.exp(A), rtol=1e-6)
    assert hw.profiler.fallback_count("exp", "testdev:0") == 2


def test_a_failing_fallback_kernel_is_blamed_on_the_fallback_plugin(badkern_fallback, testdev):
    x = hw.to_tensor(A, device=testdev)
    _fault(badkern_fallback, "exp", "raise")
    msg = _raises_naming_the_plugin("exp", "badkern", lambda: hw.exp(x), "badkern:0 (the fallback device, running "
                                    "it for testdev:0)", "RuntimeError: exp: the kernel broke", wrong_result=False)
    assert "'testdev' plugin" not in msg


def test_a_right_result_of_the_fallback_device_is_accepted_and_copied_back(bad):
    """badkern has no mul: cpu:0 runs it, its result passes the check there and comes back to badkern:0."""
    x = hw.to_tensor(A, device="badkern:0")
    y = x * x
    assert y.device == x.device and hw.profiler.fallback_count("mul", "badkern:0") == 1
    np.testing.assert_array_equal(y.numpy(), A * A)
