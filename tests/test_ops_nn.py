"""matmul, softmax, log_softmax, layer_norm, batch_norm, conv2d, pooling and linear against independent
oracles (tests/oracles.py), on every device, and their error paths."""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import hwadapter as hw
import hwadapter.nn.functional as F
from hwadapter import InvalidArgumentError, UnsupportedDTypeError

import oracles
from oracles import assert_close

INTS = ["int8", "int16", "int32", "int64", "uint8"]
FLOATS = ["float16", "float32", "float64"]


def rng_for(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def mk(arr, device):
    return hw.to_tensor(np.asarray(arr), device=device)


def rand(rng, shape, dtype="float32", lo=-2.0, hi=2.0):
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        return rng.integers(0 if dt.kind == "u" else -2, 3, shape).astype(dt)
    return rng.uniform(lo, hi, shape).astype(dt)


def float_tol(dtype, scale=1.0):
    return {"float16": 5e-3, "float32": 2e-5, "float64": 1e-10}[np.dtype(dtype).name] * scale


# --- matmul ----------------------------------------------------------------------------------------------
MATMUL_SHAPES = [
    ((2, 3), (3, 4)), ((3,), (3,)), ((3,), (3, 2)), ((2, 3), (3,)), ((4, 2, 3), (3, 5)), ((2, 3), (4, 3, 5)),
    ((2, 1, 2, 3), (3, 3, 2)), ((3,), (2, 3, 4)), ((2, 4, 3), (3,)), ((2, 0), (0, 3)), ((0, 3), (3, 2)),
    ((2, 3), (3, 0)), ((0, 2, 3), (3, 1)), ((1, 1), (1, 1)),
]


def test_matmul(device):
    for dtype in INTS + FLOATS:
        _matmul(dtype, device)


def _matmul(dtype, device):
    rng = rng_for("matmul", dtype)
    for sa, sb in MATMUL_SHAPES:
        a, b = rand(rng, sa, dtype), rand(rng, sb, dtype)
        out = hw.matmul(mk(a, device), mk(b, device))
        wide = np.float64 if dtype in FLOATS else np.int64
        expected = np.matmul(a.astype(wide), b.astype(wide)).astype(dtype)
        assert_close(out.numpy(), expected, dtype, rtol=float_tol(dtype, 4) if dtype in FLOATS else None,
                     err_msg=f"{sa} @ {sb}")


@pytest.mark.parametrize("tx", [False, True])
@pytest.mark.parametrize("ty", [False, True])
def test_matmul_transpose_flags(tx, ty, device):
    rng = rng_for("matmul_t", tx, ty)
    for sa, sb in [((2, 3), (3, 4)), ((5, 2, 3), (3, 4)), ((3,), (3, 2)), ((2, 3), (3,)), ((2, 0), (0, 3))]:
        a, b = rand(rng, sa), rand(rng, sb)
        xa = np.swapaxes(a, -1, -2).copy() if tx and a.ndim >= 2 else a
        xb = np.swapaxes(b, -1, -2).copy() if ty and b.ndim >= 2 else b
        out = hw.matmul(mk(xa, device), mk(xb, device), transpose_x=tx, transpose_y=ty)
        assert_close(out.numpy(), a.astype(np.float64) @ b.astype(np.float64), "float32")


def test_matmul_operator_and_mixed_dtypes(device):
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    b = np.linspace(-1, 1, 12).reshape(3, 4).astype(np.float32)
    assert_close((mk(a, device) @ mk(b, device)).numpy(), a @ b.astype(np.float64), "float32")
    assert_close(mk(a, device).matmul(mk(a.T.copy(), device)).numpy(), a @ a.T, "int32")


def test_matmul_errors(device):
    x = mk(np.ones((2, 3), np.float32), device)
    with pytest.raises(InvalidArgumentError, match="matmul.*inner"):
        hw.matmul(x, x)
    with pytest.raises(InvalidArgumentError, match="matmul.*broadcast"):
        hw.matmul(mk(np.ones((2, 2, 3), np.float32), device), mk(np.ones((3, 3, 4), np.float32), device))
    with pytest.raises(InvalidArgumentError, match="matmul.*1-D"):
        hw.matmul(mk(np.float32(1), device), x)
    with pytest.raises(UnsupportedDTypeError, match="matmul"):
        hw.matmul(mk(np.ones((2, 2), bool), device), mk(np.ones((2, 2), bool), device))
    with pytest.raises(InvalidArgumentError, match="matmul"):
        hw.matmul(x, np.ones((3, 2)))


# --- softmax / log_softmax ---------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax(op, device):
    for dtype in FLOATS + ["int32"]:
        _softmax(op, dtype, device)


def _softmax(op, dtype, device):
    fn, oracle = getattr(F, op), getattr(oracles, op)
    rng = rng_for(op, dtype)
    out_dt = dtype if dtype in FLOATS else "float32"
    for shape, axis in [((5,), -1), ((2, 3), 1), ((2, 3), 0), ((2, 3, 4), 1), ((2, 3, 4), -3), ((0, 3), -1),
                        ((3, 0), 0), ((), -1), ((), 0)]:
        arr = rand(rng, shape, dtype, -4, 4)
        out = fn(mk(arr, device), axis=axis)
        assert_close(out.numpy(), oracle(arr.astype(np.float64), axis=axis if arr.ndim else None), out_dt,
                     err_msg=f"{op} {shape} {axis}")


def test_softmax_is_stable_for_large_inputs(device):
    for dtype in FLOATS:
        _softmax_large(dtype, device)


def _softmax_large(dtype, device):
    big = 6e4 if dtype == "float16" else 1000.0  # near the top of float16's range
    arr = np.array([[big, big + 1, big - 1], [-big, -big, -big], [big, -big, 0.0]], dtype)
    with np.errstate(over="ignore"):  # -1.2e5 is -inf in float16
        expected = oracles.log_softmax(arr).astype(dtype)
    assert_close(F.softmax(mk(arr, device)).numpy(), oracles.softmax(arr), dtype)
    assert_close(F.log_softmax(mk(arr, device)).numpy(), expected, dtype)


def test_softmax_errors(device):
    x = mk(np.ones((2, 3), np.float32), device)
    with pytest.raises(InvalidArgumentError, match="softmax"):
        F.softmax(x, axis=2)
    with pytest.raises(InvalidArgumentError, match="log_softmax"):
        F.log_softmax(x, axis=-3)
    with pytest.raises(InvalidArgumentError, match="softmax"):
        F.softmax(np.ones(3))


# --- layer_norm / batch_norm ---------------------------------------------------------------------------------
def test_layer_norm(device):
    for dtype in FLOATS:
        _layer_norm(dtype, device)


def _layer_norm(dtype, device):
    rng = rng_for("layer_norm", dtype)
    for shape, norm in [((2, 5), 5), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 4)), ((4,), [4]), ((0, 3), 3)]:
        arr = rand(rng, shape, dtype)
        n = 1 if isinstance(norm, int) else len(norm)
        nshape = arr.shape[arr.ndim - n:]
        w, b = rand(rng, nshape, dtype), rand(rng, nshape, dtype)
        out = F.layer_norm(mk(arr, device), norm)
        assert_close(out.numpy(), oracles.layer_norm(arr, n), dtype, rtol=float_tol(dtype, 4))
        out = F.layer_norm(mk(arr, device), norm, mk(w, device), mk(b, device), epsilon=1e-3)
        assert_close(out.numpy(), oracles.layer_norm(arr, n, w, b, eps=1e-3), dtype, rtol=float_tol(dtype, 4),
                     atol=float_tol(dtype, 4))


def test_layer_norm_of_integers_and_constant_rows(device):
    arr = np.array([[1, 2, 3, 4], [5, 5, 5, 5]], np.int32)
    out = F.layer_norm(mk(arr, device), 4)
    assert_close(out.numpy(), oracles.layer_norm(arr, 1), "float32", atol=1e-5)


def test_layer_norm_errors(device):
    x = mk(np.ones((2, 3), np.float32), device)
    with pytest.raises(InvalidArgumentError, match="layer_norm.*normalized_shape"):
        F.layer_norm(x, 2)
    with pytest.raises(InvalidArgumentError, match="layer_norm"):
        F.layer_norm(x, (4, 2, 3))
    with pytest.raises(InvalidArgumentError, match="layer_norm"):
        F.layer_norm(x, ())
    with pytest.raises(InvalidArgumentError, match="layer_norm.*weight"):
        F.layer_norm(x, 3, weight=mk(np.ones(4, np.float32), device))


def test_batch_norm(device):
    for dtype in FLOATS:
        _batch_norm(dtype, device)


def _batch_norm(dtype, device):
    rng = rng_for("batch_norm", dtype)
    for shape, fmt in [((2, 3, 4, 5), "NCHW"), ((2, 4, 5, 3), "NHWC"), ((4, 3), "NC"), ((2, 3, 5), "NCL"),
                       ((2, 5, 3), "NLC"), ((0, 3, 2, 2), "NCHW")]:
        arr = rand(rng, shape, dtype)
        axis = 1 if fmt.startswith("NC") else len(shape) - 1
        c = shape[axis]
        mean, var = rand(rng, (c,), dtype), rand(rng, (c,), dtype, 0.5, 2.0)
        w, b = rand(rng, (c,), dtype), rand(rng, (c,), dtype)
        out = F.batch_norm(mk(arr, device), mk(mean, device), mk(var, device), mk(w, device), mk(b, device),
                           epsilon=1e-4, data_format=fmt)
        assert_close(out.numpy(), oracles.batch_norm(arr, mean, var, w, b, 1e-4, axis), dtype,
                     rtol=float_tol(dtype, 4), atol=float_tol(dtype, 4))
        out = F.batch_norm(mk(arr, device), mk(mean, device), mk(var, device), data_format=fmt)
        assert_close(out.numpy(), oracles.batch_norm(arr, mean, var, None, None, 1e-5, axis), dtype,
                     rtol=float_tol(dtype, 4), atol=float_tol(dtype, 4))


def test_batch_norm_errors(device):
    x = mk(np.ones((2, 3, 4, 4), np.float32), device)
    m, v = mk(np.zeros(3, np.float32), device), mk(np.ones(3, np.float32), device)
    with pytest.raises(InvalidArgumentError, match="batch_norm.*running_mean"):
        F.batch_norm(x, mk(np.zeros(4, np.float32), device), v)
    with pytest.raises(InvalidArgumentError, match="batch_norm"):
        F.batch_norm(mk(np.ones(3, np.float32), device), m, v)
    with pytest.raises(InvalidArgumentError, match="batch_norm.*data_format"):
        F.batch_norm(x, m, v, data_format="CHWN")


# --- conv2d ------------------------------------------------------------------------------------------------
CONV_CASES = [
    # (x shape NCHW, weight shape, kwargs)
    ((2, 3, 6, 5), (4, 3, 3, 3), {}),
    ((1, 3, 7, 7), (2, 3, 3, 3), {"stride": 2}),
    ((1, 2, 7, 6), (2, 2, 3, 2), {"stride": (2, 1), "padding": 1}),
    ((1, 2, 6, 6), (3, 2, 3, 3), {"padding": (1, 2)}),
    ((1, 2, 6, 6), (3, 2, 3, 3), {"padding": (1, 0, 2, 1)}),
    ((1, 2, 7, 6), (3, 2, 3, 3), {"padding": "SAME"}),
    ((1, 2, 7, 6), (3, 2, 2, 2), {"padding": "SAME", "stride": 2}),
    ((1, 2, 7, 6), (3, 2, 3, 3), {"padding": "VALID"}),
    ((1, 2, 8, 8), (2, 2, 3, 3), {"dilation": 2}),
    ((1, 2, 8, 9), (2, 2, 3, 2), {"dilation": (2, 3), "padding": 2, "stride": 2}),
    ((1, 2, 7, 7), (2, 2, 3, 3), {"dilation": 2, "padding": "same"}),
    ((2, 4, 5, 5), (6, 2, 3, 3), {"groups": 2, "padding": 1}),
    ((1, 4, 5, 5), (4, 1, 3, 3), {"groups": 4}),
    ((1, 4, 5, 5), (8, 1, 1, 1), {"groups": 4}),
    ((0, 2, 5, 5), (3, 2, 3, 3), {}),
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    ((1, 2, 3, 3), (2, 2, 3, 3), {"stride": 4, "padding": 1}),
]


def _conv_expected(a, w, bias, kw):
    stride = kw.get("stride", 1)
    stride = (stride, stride) if isinstance(stride, int) else stride
    dil = kw.get("dilation", 1)
    dil = (dil, dil) if isinstance(dil, int) else dil
    pad = kw.get("padding", 0)
    if isinstance(pad, str):
        if pad.upper() == "VALID":
            pad = (0, 0, 0, 0)
        else:
            pad = oracles.same_padding(a.shape[2], w.shape[2], stride[0], dil[0]) + \
                oracles.same_padding(a.shape[3], w.shape[3], stride[1], dil[1])
    elif isinstance(pad, int):
        pad = (pad,) * 4
    elif len(pad) == 2:
        pad = (pad[0], pad[0], pad[1], pad[1])
    return oracles.conv2d(a, w, bias, stride, pad, dil, kw.get("groups", 1))


def test_conv2d(device):
    """Stride, padding (int, pair, 4 values, SAME, VALID), dilation, groups (depthwise too), bias, empty batch."""
    for case, (xs, ws, kw) in enumerate(CONV_CASES):
        for with_bias in (False, True):
            rng = rng_for("conv", case, with_bias)
            a, w = rand(rng, xs), rand(rng, ws)
            bias = rand(rng, (ws[0],)) if with_bias else None
            out = F.conv2d(mk(a, device), mk(w, device), None if bias is None else mk(bias, device), **kw)
            assert_close(out.numpy(), _conv_expected(a, w, bias, kw), "float32", rtol=1e-4, atol=1e-5,
                         err_msg=f"{xs} {ws} {kw} bias={with_bias}")


def test_conv2d_dtypes(device):
    for dtype in ["float16", "float64", "int32"]:
        rng = rng_for("conv_dt", dtype)
        a, w, bias = rand(rng, (1, 2, 5, 5), dtype), rand(rng, (3, 2, 3, 3), dtype), rand(rng, (3,), dtype)
        out = F.conv2d(mk(a, device), mk(w, device), mk(bias, device), padding=1)
        out_dt = dtype if dtype in FLOATS else "float32"
        assert_close(out.numpy(), oracles.conv2d(a, w, bias, (1, 1), (1, 1, 1, 1)), out_dt,
                     rtol=float_tol(out_dt, 10), atol=float_tol(out_dt, 10))


def test_conv2d_nhwc(device):
    rng = rng_for("conv_nhwc")
    a, w, bias = rand(rng, (2, 6, 5, 4)), rand(rng, (6, 2, 3, 3)), rand(rng, (6,))
    out = F.conv2d(mk(a, device), mk(w, device), mk(bias, device), stride=2, padding=1, groups=2,
                   data_format="NHWC")
    expected = oracles.conv2d(a.transpose(0, 3, 1, 2), w, bias, (2, 2), (1, 1, 1, 1), groups=2).transpose(0, 2, 3, 1)
    assert_close(out.numpy(), expected, "float32", rtol=1e-4, atol=1e-5)


def test_conv2d_errors(device):
    x = mk(np.ones((1, 4, 5, 5), np.float32), device)
    w = mk(np.ones((4, 2, 3, 3), np.float32), device)
    with pytest.raises(InvalidArgumentError, match="conv2d.*groups"):
        F.conv2d(x, w, groups=1)
    with pytest.raises(InvalidArgumentError, match="conv2d.*groups"):
        F.conv2d(x, w, groups=3)
    with pytest.raises(InvalidArgumentError, match="conv2d.*groups"):
        F.conv2d(x, w, groups=0)
    with pytest.raises(InvalidArgumentError, match="conv2d.*groups"):
        F.conv2d(x, mk(np.ones((3, 2, 3, 3), np.float32), device), groups=2)
    with pytest.raises(InvalidArgumentError, match="conv2d.*weight"):
        F.conv2d(x, mk(np.ones((4, 4, 3), np.float32), device))
    with pytest.raises(InvalidArgumentError, match="conv2d.*4-D"):
        F.conv2d(mk(np.ones((4, 5, 5), np.float32), device), w, groups=2)
    with pytest.raises(InvalidArgumentError, match="conv2d.*larger"):
        F.conv2d(x, mk(np.ones((4, 2, 7, 7), np.float32), device), groups=2)
    with pytest.raises(InvalidArgumentError, match="conv2d.*padding"):
        F.conv2d(x, w, groups=2, padding="FULL")
    with pytest.raises(InvalidArgumentError, match="conv2d.*padding"):
        F.conv2d(x, w, groups=2, padding=-1)
    with pytest.raises(InvalidArgumentError, match="conv2d.*padding"):
        F.conv2d(x, w, groups=2, padding=(1, 2, 3))
    with pytest.raises(InvalidArgumentError, match="conv2d.*stride"):
        F.conv2d(x, w, groups=2, stride=0)
    with pytest.raises(InvalidArgumentError, match="conv2d.*dilation"):
        F.conv2d(x, w, groups=2, dilation=(1, 0))
    with pytest.raises(InvalidArgumentError, match="conv2d.*bias"):
        F.conv2d(x, w, mk(np.ones(3, np.float32), device), groups=2)
    with pytest.raises(InvalidArgumentError, match="conv2d.*data_format"):
        F.conv2d(x, w, groups=2, data_format="HWCN")


# --- pooling -----------------------------------------------------------------------------------------------------
POOL_CASES = [
    # (x shape, kernel, stride, padding, ceil_mode)
    ((2, 3, 6, 6), 2, None, 0, False),
    ((1, 2, 7, 5), 3, 2, 1, False),
    ((1, 2, 7, 5), 3, 2, 1, True),
    ((1, 2, 5, 5), 2, 2, 1, True),  # the last ceil-mode window would start in the padding: dropped
    ((1, 1, 6, 7), (2, 3), (1, 2), (1, 0), False),
    ((1, 1, 6, 7), (3, 2), (2, 1), (1, 0, 1, 1), True),
    ((1, 2, 7, 6), 3, 2, "SAME", False),
    ((1, 2, 7, 6), 3, 1, "VALID", False),
    ((1, 1, 5, 5), 5, 1, 0, False),
    ((0, 2, 4, 4), 2, 2, 0, False),
    ((1, 1, 4, 5), 2, 3, 0, True),
]


def _pool_pads(shape, kernel, stride, padding):
    k = (kernel, kernel) if isinstance(kernel, int) else kernel
    s = k if stride is None else ((stride, stride) if isinstance(stride, int) else stride)
    if isinstance(padding, str):
        p = (0, 0, 0, 0) if padding == "VALID" else \
            oracles.same_padding(shape[2], k[0], s[0], 1) + oracles.same_padding(shape[3], k[1], s[1], 1)
    elif isinstance(padding, int):
        p = (padding,) * 4
    elif len(padding) == 2:
        p = (padding[0], padding[0], padding[1], padding[1])
    else:
        p = tuple(padding)
    return k, s, p


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8", "bool"])
def test_max_pool2d(dtype, device):
    for case, (shape, kernel, stride, padding, ceil) in enumerate(POOL_CASES):
        rng = rng_for("maxpool", case, dtype)
        arr = rng.integers(0, 2, shape).astype(bool) if dtype == "bool" else rand(rng, shape, dtype, -3, 3)
        if dtype in ("int32", "uint8"):
            arr = rng.integers(0 if dtype == "uint8" else -50, 50, shape).astype(dtype)
        out = F.max_pool2d(mk(arr, device), kernel, stride, padding, ceil_mode=ceil)
        k, s, p = _pool_pads(shape, kernel, stride, padding)
        assert_close(out.numpy(), oracles.pool2d(arr, k, s, p, ceil, "max").astype(dtype), dtype,
                     err_msg=str(POOL_CASES[case]))


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32"])
def test_avg_pool2d(dtype, device):
    for case, (shape, kernel, stride, padding, ceil) in enumerate(POOL_CASES):
        for exclusive in (True, False):
            rng = rng_for("avgpool", case, dtype, exclusive)
            arr = rand(rng, shape, dtype, -3, 3) if dtype in FLOATS else rng.integers(-9, 10, shape).astype(dtype)
            out = F.avg_pool2d(mk(arr, device), kernel, stride, padding, ceil_mode=ceil, exclusive=exclusive)
            k, s, p = _pool_pads(shape, kernel, stride, padding)
            out_dt = dtype if dtype in FLOATS else "float32"
            assert_close(out.numpy(), oracles.pool2d(arr, k, s, p, ceil, "avg", exclusive), out_dt,
                         err_msg=f"{POOL_CASES[case]} exclusive={exclusive}")


def test_pool_nhwc(device):
    rng = rng_for("pool_nhwc")
    arr = rand(rng, (2, 5, 6, 3))
    nchw = arr.transpose(0, 3, 1, 2)
    out = F.max_pool2d(mk(arr, device), 3, 2, 1, data_format="NHWC")
    assert_close(out.numpy(), oracles.pool2d(nchw, (3, 3), (2, 2), (1,) * 4).transpose(0, 2, 3, 1), "float32")
    out = F.avg_pool2d(mk(arr, device), 2, data_format="NHWC")
    assert_close(out.numpy(), oracles.pool2d(nchw, (2, 2), (2, 2), (0,) * 4, kind="avg").transpose(0, 2, 3, 1),
                 "float32")
    out = F.adaptive_avg_pool2d(mk(arr, device), (2, 4), data_format="NHWC")
    assert_close(out.numpy(), oracles.adaptive_pool2d(nchw, (2, 4)).transpose(0, 2, 3, 1), "float32")


@pytest.mark.parametrize("kind", ["avg", "max"])
def test_adaptive_pool2d(kind, device):
    for dtype in ["float32", "float16", "float64", "int32"]:
        _adaptive(kind, dtype, device)


def _adaptive(kind, dtype, device):
    fn = F.adaptive_avg_pool2d if kind == "avg" else F.adaptive_max_pool2d
    rng = rng_for("adaptive", kind, dtype)
    for shape, size in [((2, 3, 5, 7), 1), ((1, 2, 5, 7), (2, 3)), ((1, 2, 6, 6), 3), ((1, 1, 4, 4), 4),
                        ((1, 1, 3, 2), (5, 4)), ((0, 2, 4, 4), 2)]:
        arr = rand(rng, shape, dtype, -3, 3) if dtype in FLOATS else rng.integers(-9, 10, shape).astype(dtype)
        out = fn(mk(arr, device), size)
        hw_size = (size, size) if isinstance(size, int) else size
        out_dt = "float32" if kind == "avg" and dtype not in FLOATS else dtype
        assert_close(out.numpy(), oracles.adaptive_pool2d(arr, hw_size, kind).astype(out_dt), out_dt,
                     err_msg=f"{shape} {size}")


def test_pool_errors(device):
    x = mk(np.ones((1, 1, 4, 4), np.float32), device)
    with pytest.raises(InvalidArgumentError, match="max_pool2d.*padding"):
        F.max_pool2d(x, 2, padding=2)
    with pytest.raises(InvalidArgumentError, match="avg_pool2d.*larger"):
        F.avg_pool2d(x, 5)
    with pytest.raises(InvalidArgumentError, match="max_pool2d.*kernel_size"):
        F.max_pool2d(x, 0)
    with pytest.raises(InvalidArgumentError, match="avg_pool2d.*stride"):
        F.avg_pool2d(x, 2, stride=-1)
    with pytest.raises(InvalidArgumentError, match="max_pool2d.*4-D"):
        F.max_pool2d(mk(np.ones((4, 4), np.float32), device), 2)
    with pytest.raises(InvalidArgumentError, match="adaptive_avg_pool2d.*output_size"):
        F.adaptive_avg_pool2d(x, 0)
    with pytest.raises(InvalidArgumentError, match="adaptive_max_pool2d.*empty"):
        F.adaptive_max_pool2d(mk(np.ones((1, 1, 0, 4), np.float32), device), 1)
    with pytest.raises(InvalidArgumentError, match="max_pool2d.*data_format"):
        F.max_pool2d(x, 2, data_format="NWHC")


# --- linear --------------------------------------------------------------------------------------------------------
def test_linear(device):
    for dtype in FLOATS:
        _linear(dtype, device)


def _linear(dtype, device):
    rng = rng_for("linear", dtype)
    for xs in [(2, 3), (4, 2, 3), (3,), (0, 3)]:
        a, w, b = rand(rng, xs, dtype), rand(rng, (3, 5), dtype), rand(rng, (5,), dtype)
        out = F.linear(mk(a, device), mk(w, device), mk(b, device))
        expected = a.astype(np.float64) @ w.astype(np.float64) + b.astype(np.float64)
        assert_close(out.numpy(), expected, dtype, rtol=float_tol(dtype, 4), atol=float_tol(dtype, 4))
        assert_close(F.linear(mk(a, device), mk(w, device)).numpy(), a.astype(np.float64) @ w, dtype,
                     rtol=float_tol(dtype, 4), atol=float_tol(dtype, 4))
    with pytest.raises(InvalidArgumentError, match="matmul"):
        F.linear(mk(np.ones((2, 4), dtype), device), mk(np.ones((3, 5), dtype), device))


def test_activations_in_functional(device):
    arr = np.array([-2.0, -0.5, 0.0, 0.5, 2.0], np.float32)
    x = mk(arr, device)
    assert_close(F.relu(x).numpy(), np.maximum(arr, 0), "float32")
    assert_close(F.gelu(x).numpy(), oracles.gelu(arr), "float32")
    assert_close(F.gelu(x, approximate=True).numpy(), oracles.gelu(arr, True), "float32")
    assert_close(F.sigmoid(x).numpy(), oracles.sigmoid(arr), "float32")
    assert_close(F.tanh(x).numpy(), np.tanh(arr), "float32")
    assert_close(F.pad(x, [1, 2]).numpy(), np.pad(arr, (1, 2)), "float32")


def test_docs_describe_every_op():
    """docs/ops.md names every public op of hwadapter and hwadapter.nn.functional."""
    import re
    from pathlib import Path
    from hwadapter.ops import api
    text = (Path(__file__).parents[1] / "docs" / "ops.md").read_text()
    named = set(re.findall(r"`([a-z_0-9]+)[(`]", text))
    missing = [n for n in list(api.__all__) + list(F.__all__) if n not in named]
    assert not missing, f"docs/ops.md does not describe {missing}"
