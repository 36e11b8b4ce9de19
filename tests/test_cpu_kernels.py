"""The CPU plugin's own kernels (conv2d, max_pool2d) against the reference kernels, the semantics' oracle."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwadapter.plugin import reference

conv = pytest.importorskip("hwadapter_cpu.conv")
pool = pytest.importorskip("hwadapter_cpu.pool")

TOL = {"float16": 1e-2, "float32": 1e-4, "float64": 1e-10}


@st.composite
def cases(draw):
    """Random convolutions: groups (dense, grouped, depthwise), strides, dilations, asymmetric padding, epilogues."""
    dtype = draw(st.sampled_from(sorted(TOL)))
    groups = draw(st.sampled_from([1, 2, 3]))
    depthwise = draw(st.booleans())
    cg = 1 if depthwise else draw(st.integers(1, 3))
    c = cg * groups
    o = groups if depthwise else groups * draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride, dilation = draw(st.tuples(st.integers(1, 3), st.integers(1, 3))), draw(
        st.tuples(st.integers(1, 2), st.integers(1, 2)))
    padding = draw(st.tuples(*[st.integers(0, 2)] * 4))
    h = draw(st.integers((kh - 1) * dilation[0] + 1, 9))
    w = draw(st.integers((kw - 1) * dilation[1] + 1, 9))
    n = draw(st.integers(1, 2))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    x = rng.standard_normal((n, c, h, w)).astype(dtype)
    wt = rng.standard_normal((o, cg, kh, kw)).astype(dtype)
    bias = rng.standard_normal(o).astype(dtype) if draw(st.booleans()) else None
    act = draw(st.sampled_from([None, *sorted(reference.CONV_ACTIVATIONS)]))
    return x, wt, bias, dict(stride=stride, padding=padding, dilation=dilation, groups=groups, activation=act)


@settings(max_examples=150, deadline=None)
@given(cases())
def test_matches_the_reference_kernel(case):
    x, w, bias, attrs = case
    want = reference.KERNELS["conv2d"](x, w, bias, **attrs)
    got = conv.conv2d(x, w, bias, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = TOL[x.dtype.name]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


def test_is_the_cpu_devices_kernel_and_keeps_its_epilogues():
    import hwadapter as hw
    from hwadapter.runtime.device import get
    kernel = get("cpu").kernels.find("conv2d", (np.dtype("float32"),) * 2)
    assert kernel.__name__ == "conv2d" and kernel.epilogues == reference.CONV_ACTIVATIONS
    x = hw.to_tensor(np.ones((1, 2, 5, 5), "float32"))
    w = hw.to_tensor(np.ones((3, 2, 3, 3), "float32"))
    y = hw.nn.functional.conv2d(x, w, padding=1)
    assert y.numpy()[0, 0, 2, 2] == 18 and y.numpy()[0, 0, 0, 0] == 8
    assert conv.conv2d.epilogues == reference.CONV_ACTIVATIONS


@st.composite
def pools(draw):
    """Random max pools: every dtype, strides, asymmetric padding below the kernel size, ceil mode."""
    dtype = draw(st.sampled_from(["float16", "float32", "float64", "int8", "int32", "uint8", "bool"]))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = draw(st.tuples(st.integers(1, 3), st.integers(1, 3)))
    padding = (draw(st.integers(0, kh - 1)), draw(st.integers(0, kh - 1)), draw(st.integers(0, kw - 1)),
               draw(st.integers(0, kw - 1)))
    h, w = draw(st.integers(max(1, kh - padding[0] - padding[1]), 10)), draw(
        st.integers(max(1, kw - padding[2] - padding[3]), 10))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    x = (rng.standard_normal((draw(st.integers(1, 2)), draw(st.integers(1, 3)), h, w)) * 50).astype(dtype)
    if dtype.startswith("float") and draw(st.booleans()):
        x.flat[0] = np.nan
    return x, dict(kernel_size=(kh, kw), stride=stride, padding=padding, ceil_mode=draw(st.booleans()))


@settings(max_examples=200, deadline=None)
@given(pools())
def test_max_pool_matches_the_reference_kernel(case):
    x, attrs = case
    want = reference.KERNELS["max_pool2d"](x, **attrs)
    got = pool.max_pool2d(x, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shapes", [((64, 147), (1, 147, 3136)), ((100, 300), (3, 300, 50)), ((17, 5000), (1, 5000, 90))])
def test_workers_split_a_product_into_row_blocks_with_the_same_result(shapes):
    """Blocks of rows of the left matrix, any count and remainder, batched right operands: np.matmul's result."""
    from hwadapter_cpu.workers import Workers
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal(s).astype("float32") for s in shapes)
    got = Workers(2).matmul(a, b)
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-4)
    assert Workers(1).matmul(a, b).shape == got.shape


def test_the_device_conv_runs_large_products_on_workers_and_matches_the_reference():
    from hwadapter_cpu.workers import Workers
    calls = []

    class Counting(Workers):
        def matmul(self, a, b):
            calls.append(a.shape)
            return super().matmul(a, b)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 64, 28, 28)).astype("float32")
    w = rng.standard_normal((96, 64, 3, 3)).astype("float32")
    b = rng.standard_normal(96).astype("float32")
    got = conv.kernel(Counting(2))(x, w, b, padding=(1, 1, 1, 1), activation="relu")
    want = reference.KERNELS["conv2d"](x, w, b, padding=(1, 1, 1, 1), activation="relu")
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert calls == [(96, 576)]
