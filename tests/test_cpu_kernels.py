"""The CPU plugin's tuned kernels (conv2d, max_pool2d, avg_pool2d, batch_norm) against the reference kernels, the
semantics' oracle."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hwadapter.plugin import reference

blasconv = pytest.importorskip("hwadapter_cpu.tuning.blasconv")
pool = pytest.importorskip("hwadapter_cpu.tuning.pool")
threads = pytest.importorskip("hwadapter_cpu.tuning.threads")

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


def test_is_the_cpu_devices_kernel_and_keeps_its_epilogues():
    import hwadapter as hw
    from hwadapter.runtime.device import get
    kernel = get("cpu").kernels.find("conv2d", (np.dtype("float32"),) * 2)
    assert kernel.__name__ == "conv2d" and kernel.epilogues == reference.CONV_ACTIVATIONS
    x = hw.to_tensor(np.ones((1, 2, 5, 5), "float32"))
    w = hw.to_tensor(np.ones((3, 2, 3, 3), "float32"))
    y = hw.nn.functional.conv2d(x, w, padding=1)
    assert y.numpy()[0, 0, 2, 2] == 18 and y.numpy()[0, 0, 0, 0] == 8


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
    if dtype.startswith("float") and draw(st.booleans()):  # ties of -0 and +0, infinities
        x.flat[rng.integers(0, x.size, x.size // 2)] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf], dtype), x.size // 2)
    return x, dict(kernel_size=(kh, kw), stride=stride, padding=padding, ceil_mode=draw(st.booleans()))


def _pool_kernels():
    from hwadapter.runtime.device import get
    return pool.kernels(get("cpu"))  # float32 through pool.c (numpy where it cannot be compiled)


POOLS = _pool_kernels()


@settings(max_examples=200, deadline=None)
@given(pools())
def test_max_pool_matches_the_reference_kernel(case):
    x, attrs = case
    want = reference.KERNELS["max_pool2d"](x, **attrs)
    for got in (pool.max_pool2d(x, **attrs), POOLS["max_pool2d"](x, **attrs)):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)  # which of a tie of -0 and +0 wins, numpy's max leaves open


@settings(max_examples=200, deadline=None)
@given(pools(), st.booleans())
def test_avg_pool_matches_the_reference_kernel(case, exclusive):
    x, attrs = case
    if x.dtype.kind != "f":
        x = x.astype("float32")
    want = reference.KERNELS["avg_pool2d"](x, **attrs, exclusive=exclusive)
    got = POOLS["avg_pool2d"](x, **attrs, exclusive=exclusive)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=TOL[x.dtype.name], atol=TOL[x.dtype.name])


@settings(max_examples=150, deadline=None)
@given(pools(), st.integers(0, 2 ** 16))
def test_max_pool_grad_matches_the_reference_kernel(case, seed):
    """pool.c's max_pool2d_grad: the same element of each window (first maximum, nan, -inf windows, padding) and
    overlapping windows summed exactly as the reference."""
    x, attrs = case
    (kh, kw), (pt, pb, pl, pr) = attrs["kernel_size"], attrs["padding"]
    assume(max(pt, pb) <= kh // 2 and max(pl, pr) <= kw // 2)  # what max_pool2d lets through
    x = x.astype("float32")
    out = reference.KERNELS["max_pool2d"](x, **attrs)
    g = np.random.default_rng(seed).standard_normal(out.shape).astype("float32")
    want = reference.KERNELS["max_pool2d_grad"](x, g, **attrs)
    got = POOLS["max_pool2d_grad"](x, g, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_pool_c_keeps_nan_and_gives_each_windows_exact_value():
    from hwadapter.runtime.device import get
    if pool.library(get("cpu"))() is None:
        pytest.skip("pool.c could not be compiled here: numpy pools")
    x = np.arange(2 * 3 * 9 * 9, dtype="float32").reshape(2, 3, 9, 9)
    x[0, 0, 0, 0] = np.nan
    got = POOLS["max_pool2d"](x, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1, 1, 1))
    assert np.isnan(got[0, 0, 0, 0]) and got[1, 2, 3, 3] == x[1, 2, 7, 7]
    assert POOLS["avg_pool2d"](x[1:], kernel_size=(9, 9), stride=(1, 1))[0, :, 0, 0].tolist() == \
        [float(np.float32(x[1, c].sum()) / 81) for c in range(3)]


@pytest.mark.parametrize("kernel,stride,padding,ceil", [((3, 3), (2, 2), (0, 0, 0, 0), False),
                                                        ((3, 3), (2, 2), (1, 1, 1, 1), True),
                                                        ((3, 3), (1, 1), (1, 1, 1, 1), False),
                                                        ((2, 2), (2, 2), (0, 0, 0, 0), False),
                                                        ((5, 4), (2, 1), (2, 1, 0, 3), True),
                                                        ((1, 16), (1, 2), (0, 0, 8, 7), False)])
def test_max_pools_of_plain_planes_take_rows_first_and_match_the_reference_bit_for_bit(kernel, stride, padding, ceil):
    """pool.c's rows-first max (planes without nan or -0: there any order gives the reference's value): rows wider
    than several vectors and narrower than one, +0 ties, infinities and windows in the padding; planes with nan or
    -0 beside them in the same call keep the ordered path."""
    rng = np.random.default_rng(11)
    x = np.maximum(rng.standard_normal((2, 6, 111, 37)), 0).astype("float32")  # ReLU's output: ties of +0
    x[..., :5] = rng.standard_normal((2, 6, 111, 5)).astype("float32")
    x[0, 1, 3, 4], x[1, 2, 50, 20] = np.inf, -np.inf
    x[1, 4, 7, 7], x[1, 5, 9, 9] = np.nan, -0.0  # two planes on the ordered path
    attrs = dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil)
    for shape in ((2, 6, 111, 37), (2, 6, 20, 9)):
        part = np.ascontiguousarray(x[..., :shape[2], :shape[3]])
        want = reference.KERNELS["max_pool2d"](part, **attrs)
        got = POOLS["max_pool2d"](part, **attrs)
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("kernel,stride,padding,ceil", [((3, 3), (1, 1), (1, 1, 1, 1), False),
                                                        ((3, 3), (2, 2), (0, 0, 0, 0), True),
                                                        ((3, 3), (2, 2), (1, 1, 1, 1), False),
                                                        ((5, 2), (1, 2), (2, 1, 0, 1), True)])
def test_pools_large_enough_for_the_crew_match_the_reference(kernel, stride, padding, ceil):
    """Planes shared among the crew's threads (enough outputs for several of threads.py's parts): each plane's windows
    exactly the reference's, with zeros of both signs, nan and infinities among the inputs."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 40, 45, 47)).astype("float32")
    x.flat[rng.integers(0, x.size, x.size // 4)] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf, np.nan],
                                                                         "float32"), x.size // 4)
    attrs = dict(kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil)
    want = reference.KERNELS["max_pool2d"](x, **attrs)
    assert want.size >= 2 * threads.UNITS_PER_PART  # shared among the threads
    got = POOLS["max_pool2d"](x, **attrs)
    np.testing.assert_array_equal(got, want)  # which of a tie of -0 and +0 wins, numpy's max leaves open
    for exclusive in (True, False):
        np.testing.assert_allclose(POOLS["avg_pool2d"](x, **attrs, exclusive=exclusive),
                                   reference.KERNELS["avg_pool2d"](x, **attrs, exclusive=exclusive), rtol=1e-5,
                                   atol=1e-5)


def _device_conv():
    """The tuned conv2d (tuning/blasconv.py), built for cpu:0 here."""
    from hwadapter.runtime.device import get
    return blasconv.conv_kernel(get("cpu"))


@settings(max_examples=150, deadline=None)
@given(cases())
def test_the_tuned_form_matches_the_reference_kernel(case):
    """The device's kernel: float32 convolutions (dense, grouped, depthwise) run in C and BLAS, every other dtype
    the reference kernel."""
    x, w, bias, attrs = case
    shape = reference.KERNELS["conv2d"](x, w, bias, **attrs).shape
    residual = np.random.default_rng(x.size).standard_normal(shape).astype(x.dtype) if x.size % 2 else None
    want = reference.KERNELS["conv2d"](x, w, bias, residual, **attrs)
    got = DEVICE_CONV(x, w, bias, residual, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = TOL[x.dtype.name]
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


DEVICE_CONV = _device_conv()
RESNET_LAYERS = [  # (batch, in channels, size, out channels, kernel, stride, padding): every kind in a ResNet-50
    (1, 64, 56, 64, 3, 1, 1), (2, 64, 56, 256, 1, 1, 0), (1, 256, 56, 128, 1, 2, 0), (1, 128, 28, 128, 3, 2, 1),
    (1, 512, 7, 512, 3, 1, 1), (1, 3, 224, 64, 7, 2, 3), (3, 20, 13, 70, 3, 1, 1)]


@pytest.mark.parametrize("n, c, size, o, k, stride, pad", RESNET_LAYERS)
def test_the_c_kernel_runs_resnet_layers_as_the_reference(n, c, size, o, k, stride, pad):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((n, c, size, size)).astype("float32")
    w = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype("float32")
    b = rng.standard_normal(o).astype("float32")
    attrs = dict(stride=(stride, stride), padding=(pad,) * 4, activation="relu")
    out = (size + 2 * pad - k) // stride + 1
    r = rng.standard_normal((n, o, out, out)).astype("float32")  # a fused residual, added before the relu
    got = DEVICE_CONV(x, w, b, r, **attrs)
    want = reference.KERNELS["conv2d"](*(a.astype("float64") for a in (x, w, b, r)), **attrs)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n, c, h, w, o", [(1, 1024, 1, 1, 1000), (2, 70, 1, 2, 33), (1, 5, 2, 2, 300)])
@pytest.mark.parametrize("activation", [None, "relu", "sigmoid", "gelu"])
def test_a_1x1_conv_over_few_pixels_runs_as_dot_products_like_the_reference(n, c, h, w, o, activation):
    """A classifier written as a 1x1 conv over a pooled image (tasks.c's dot products, not a BLAS band per image),
    with its bias, a residual and each kind of activation, equal columns of the weight giving equal channels."""
    rng = np.random.default_rng(n * c + o)
    x = rng.standard_normal((n, c, h, w)).astype("float32")
    wt = (rng.standard_normal((o, c, 1, 1)) / np.sqrt(c)).astype("float32")
    wt[1] = wt[0]
    b = rng.standard_normal(o).astype("float32")
    b[1] = b[0]
    assert blasconv._few_pixels(x.shape, wt.shape, (1, 1), (0, 0, 0, 0), 1)
    for residual in (None, rng.standard_normal((n, o, h, w)).astype("float32")):
        got = DEVICE_CONV(x, wt, b, residual, activation=activation)
        want = reference.KERNELS["conv2d"](*(a.astype("float64") for a in (x, wt, b)),
                                           None if residual is None else residual.astype("float64"),
                                           activation=activation)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        if residual is None:
            np.testing.assert_array_equal(got[:, 0], got[:, 1])


def test_the_c_kernel_refuses_a_residual_of_another_shape_before_reading_it():
    from hwadapter.plugin import InvalidArgumentError
    x, w = np.ones((1, 4, 6, 6), "float32"), np.ones((8, 4, 3, 3), "float32")
    with pytest.raises(InvalidArgumentError, match="the residual input has shape"):
        DEVICE_CONV(x, w, np.zeros(8, "float32"), np.ones((1, 8, 2, 2), "float32"))


def test_the_device_kernel_runs_float32_in_c_not_numpy(monkeypatch):
    monkeypatch.setattr(blasconv.reference, "conv2d", lambda *a, **k: pytest.fail("the reference ran for float32"))
    x = np.ones((1, 8, 12, 12), "float32")
    got = _device_conv()(x, np.ones((16, 8, 3, 3), "float32"), padding=(1, 1, 1, 1))
    assert got[0, 0, 5, 5] == 72 and got[0, 0, 0, 0] == 32


@pytest.mark.parametrize("mode", ["numpy", "codegen"])
def test_either_setting_registers_the_one_tuned_conv2d_and_matmul(monkeypatch, mode):
    """HWADAPTER_CPU_KERNELS=codegen compiles the kernel-primitive ops (batch_norm among them); conv2d and matmul
    stay the tuned ones."""
    from hwadapter.runtime.device import get
    from hwadapter_cpu import CpuPlugin
    monkeypatch.setenv("HWADAPTER_CPU_KERNELS", mode)
    registered = {}

    class Registrar:
        device = get("cpu")

        def register(self, op, fn, dtypes=None):
            registered[op] = fn
    CpuPlugin().register_kernels(Registrar())
    assert registered["conv2d"].__module__ == "hwadapter_cpu.tuning.blasconv" and registered["conv2d"].prepack
    assert registered["matmul"].__module__ == "hwadapter_cpu.tuning.matmul"
    assert registered["conv2d"].residual and registered["conv2d"].epilogues == reference.CONV_ACTIVATIONS
    compiled = mode == "codegen" and get("cpu").codegen is not None
    assert ("batch_norm" in registered) is not compiled


def test_calls_from_several_threads_at_once_each_get_their_own_result():
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(5)
    cases = [(rng.standard_normal((1, 32, 20, 20)).astype("float32"),
              rng.standard_normal((48, 32, 3, 3)).astype("float32")) for _ in range(8)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda xw: DEVICE_CONV(*xw, padding=(1, 1, 1, 1)), cases * 3))
    for (x, w), g in zip(cases * 3, got):
        np.testing.assert_allclose(g, reference.KERNELS["conv2d"](x, w, padding=(1, 1, 1, 1)), rtol=1e-4, atol=1e-3)


norm = pytest.importorskip("hwadapter_cpu.tuning.norm")


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 4), st.integers(0, 2 ** 16), st.sampled_from(["float32", "float64", "float16"]), st.booleans())
def test_batch_norm_is_bit_identical_to_the_reference_kernel(ndim, seed, dtype, special):
    """norm.c computes each element in the reference's order and precision: bit for bit, nan and inf included."""
    from hwadapter.runtime.device import get
    if norm.library(get("cpu"))() is None:
        pytest.skip("norm.c could not be compiled here: the reference kernel serves")
    kernel = norm.kernels(get("cpu"))["batch_norm"]
    rng = np.random.default_rng(seed)
    shape = tuple(rng.integers(1, 6, ndim))
    axis = int(rng.integers(-ndim, ndim))
    x = (rng.standard_normal(shape) * 10).astype(dtype)
    if special:
        x.flat[rng.integers(0, x.size, 3)] = [np.nan, np.inf, -0.0]
    c = shape[axis]
    mean, weight, bias = (rng.standard_normal(c).astype(dtype) for _ in range(3))
    var = (rng.random(c) * 3).astype(dtype)
    want = reference.KERNELS["batch_norm"](x, mean, var, weight, bias, 1e-3, axis)
    got = kernel(x, mean, var, weight, bias, epsilon=1e-3, channel_axis=axis)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


UPDATES = pytest.importorskip("hwadapter_cpu.tuning.update")


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 60), st.sampled_from([0.0, 0.01, 0.1]), st.booleans(), st.booleans(),
       st.integers(0, 2 ** 16))
def test_update_c_is_bit_identical_to_the_reference_updates(n, t, wd, flag, scalar, seed):
    """update.c's float32 sgd/momentum/adam steps equal the reference kernels bit for bit (the same arithmetic in the
    same order, no fused multiply-add), for L2 and decoupled (AdamW) decay and Nesterov momentum."""
    from hwadapter.runtime.device import get
    rng = np.random.default_rng(seed)
    p, g, m = (rng.standard_normal(n).astype("float32") for _ in range(3))
    v = np.abs(rng.standard_normal(n)).astype("float32")
    lr = np.array(rng.uniform(1e-4, 1), "float32").reshape(() if scalar else (1,))
    b1p, b2p = np.array(0.9 ** t, "float32"), np.array(0.999 ** t, "float32")
    fast = UPDATES.kernels(get("cpu"))
    pairs = [(fast["adam_update"](p, g, m, v, lr, b1p, b2p, weight_decay=wd, decoupled=flag),
              reference.KERNELS["adam_update"](p, g, m, v, lr, b1p, b2p, weight_decay=wd, decoupled=flag)),
             (fast["momentum_update"](p, g, m, lr, momentum=0.9, use_nesterov=flag, weight_decay=wd),
              reference.KERNELS["momentum_update"](p, g, m, lr, momentum=0.9, use_nesterov=flag, weight_decay=wd)),
             ([fast["sgd_update"](p, g, lr, weight_decay=wd)], [reference.KERNELS["sgd_update"](p, g, lr,
                                                                                              weight_decay=wd)])]
    for got, want in pairs:
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
