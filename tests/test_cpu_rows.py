"""The CPU plugin's tuned row kernels (tuning/rows.c): float32 softmax, log_softmax and layer_norm over trailing axes
and batched products, against float64 numpy (the oracle), with the reference kernels' nan/inf results."""
from __future__ import annotations

import numpy as np
import pytest

from hwadapter.plugin import reference
from hwadapter.runtime.device import get

rows = pytest.importorskip("hwadapter_cpu.tuning.rows", reason="the CPU plugin's tuning/ is deleted")
from hwadapter_cpu.tuning.blasconv import Transforms  # noqa: E402
from hwadapter_cpu.tuning.matmul import matmul_kernel  # noqa: E402

F32 = np.dtype("float32")


@pytest.fixture(scope="module")
def kernels():
    device = get("cpu")
    found = rows.kernels(device)
    if not rows.Rows(device).ready():
        pytest.skip("rows.c could not be built here (no C compiler): the reference kernels run")
    return found


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (12, 197, 197), (2, 3, 1000), (5, 40000)])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_over_the_last_axis_equals_float64(kernels, op, shape):
    x = (np.random.default_rng(1).standard_normal(shape) * 4).astype(np.float32)
    got = kernels[op](x, axis=-1)
    want = getattr(reference, op)(x.astype(np.float64), -1)
    assert got.dtype == F32 and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6 if op == "log_softmax" else 1e-7)


def test_softmax_special_values_as_the_reference(kernels):
    x = np.array([[0.0, 1.0, np.nan], [0.0, np.inf, 1.0], [-np.inf, -np.inf, -np.inf], [-np.inf, 0.0, 1.0],
                  [1e30, -1e30, 0.0]], np.float32)
    for op in ("softmax", "log_softmax"):
        with np.errstate(all="ignore"):
            want = getattr(reference, op)(x, -1)
        got = kernels[op](x, axis=-1)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=op)  # nan where the reference's
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=op)  # infinities and zeros exactly


def test_other_axes_and_dtypes_are_the_references(kernels):
    x = np.random.default_rng(2).standard_normal((4, 5, 6))
    np.testing.assert_array_equal(kernels["softmax"](x, axis=-1), reference.softmax(x, -1))  # float64
    x32 = x.astype(np.float32)
    np.testing.assert_array_equal(kernels["softmax"](x32, axis=1), reference.softmax(x32, 1))


@pytest.mark.parametrize("shape, begin", [((197, 768), -1), ((2, 3, 64), -1), ((2, 3, 4, 5), 2), ((1, 7), -1)])
def test_layer_norm_equals_float64(kernels, shape, begin):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    w, b = (rng.standard_normal(shape[begin:]).astype(np.float32) for _ in range(2))
    got = kernels["layer_norm"](x, w, b, begin_axis=begin, epsilon=1e-5)
    want = reference.layer_norm(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), begin, 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5)
    x[0, ...] = np.nan
    assert np.isnan(kernels["layer_norm"](x, w, b, begin_axis=begin, epsilon=1e-5)[0]).all()


@pytest.mark.parametrize("xs, ys, tx, ty", [
    ((1, 12, 197, 64), (1, 12, 197, 64), False, True),  # attention's q k^T
    ((1, 12, 197, 197), (1, 12, 197, 64), False, False),  # and its p v
    ((3, 5, 7), (3, 7, 2), False, False), ((3, 7, 5), (3, 7, 2), True, False),
    ((4, 6), (3, 6, 5), False, False),  # a shared left operand
    ((2, 3, 4, 6), (1, 3, 6, 5), False, False), ((2, 1, 4, 6), (3, 6, 5), False, False),  # broadcast batches
    ((2, 3, 4, 6), (1, 1, 6, 5), False, False),
    ((1, 16384, 32), (1, 1, 32, 256), False, False), ((3, 300, 64), (1, 300, 64), False, True)])  # one right operand
def test_batched_products_equal_float64(xs, ys, tx, ty):
    device = get("cpu")
    matmul = matmul_kernel(Transforms(device), rows.Rows(device))
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ys).astype(np.float32)
    want = reference.matmul(x.astype(np.float64), y.astype(np.float64), transpose_x=tx, transpose_y=ty)
    got = matmul(x, y, transpose_x=tx, transpose_y=ty)
    assert got.shape == want.shape and got.dtype == F32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode, coord, antialias, exclude", [
    ("linear", "half_pixel", False, False), ("linear", "pytorch_half_pixel", False, False),
    ("linear", "align_corners", False, False), ("cubic", "half_pixel", False, True),
    ("linear", "asymmetric", True, False), ("cubic", "half_pixel_symmetric", True, False)])
@pytest.mark.parametrize("shape, sizes", [((1, 3, 16, 16), (1, 3, 128, 128)), ((2, 4, 13, 7), (2, 4, 5, 20)),
                                          ((1, 2, 1, 9), (1, 2, 3, 9))])
def test_resize_of_the_last_two_axes_equals_the_reference(mode, coord, antialias, exclude, shape, sizes):
    """As products with interpolation matrices (tuning/resize.py), against the reference kernel in float64."""
    from hwadapter_cpu.tuning.resize import resize_kernel
    device = get("cpu")
    resize = resize_kernel(matmul_kernel(Transforms(device), rows.Rows(device)))
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    scales = tuple(o / i for o, i in zip(sizes, shape))
    kw = dict(mode=mode, coordinate_transformation_mode=coord, exclude_outside=exclude, antialias=antialias)
    got = resize(x, sizes, scales, **kw)
    want = reference.resize(x.astype(np.float64), sizes, scales, **kw)
    assert got.shape == tuple(sizes) and got.dtype == F32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    x[0, 0, 0, 0] = np.nan  # a nan spreads to what the reference's blends it into
    np.testing.assert_array_equal(np.isnan(resize(x, sizes, scales, **kw)),
                                  np.isnan(reference.resize(x, sizes, scales, **kw)))


@pytest.mark.parametrize("shape, perm", [((1, 16384, 256), (0, 2, 1)), ((3, 70, 33), (0, 2, 1)), ((64, 48), (1, 0)),
                                         ((2, 3, 5, 7), (0, 3, 1, 2)), ((2, 3, 5, 7), (2, 3, 0, 1)),
                                         ((2, 1, 5, 7), (0, 3, 2, 1)), ((2, 3, 4), (1, 0, 2)), ((4, 1), (1, 0)),
                                         ((1, 3, 8, 7, 7), (0, 2, 1, 3, 4)), ((2, 3, 5, 4, 8), (0, 2, 1, 3, 4)),
                                         ((3, 4, 32), (1, 0, 2)), ((2, 5, 1, 3, 20), (2, 3, 0, 1, 4))])
@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
def test_transpose_equals_numpys(kernels, shape, perm, dtype):
    x = np.arange(int(np.prod(shape))).astype(dtype).reshape(shape)
    got = kernels["transpose"](x, perm)
    assert got.flags.c_contiguous
    np.testing.assert_array_equal(got, np.transpose(x, perm))


@pytest.mark.parametrize("bounds", [(0.0, 6.0), (None, 6.0), (-1.5, None), (None, None)])
def test_a_large_clip_equals_the_reference_nan_and_signed_zero_included(kernels, bounds):
    x = (np.random.default_rng(6).standard_normal(1 << 17) * 8).astype(np.float32)
    x[:6] = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0]
    lo, hi = bounds
    got, want = kernels["clip"](x, lo, hi), reference.clip(x, lo, hi)
    np.testing.assert_array_equal(got.view(np.uint32)[2:], want.view(np.uint32)[2:])  # bit for bit, -0.0 included
    assert np.isnan(got[:2]).all() and np.isnan(want[:2]).all()


@pytest.mark.parametrize("kernel, stride, padding, ceil", [((1280, 1280), (1280, 1280), (0, 0, 0, 0), True),
                                                           ((7, 7), (1, 1), (0, 0, 0, 0), False),
                                                           ((9, 9), (2, 2), (1, 1, 1, 1), True)])
def test_an_average_pool_of_one_window_over_the_whole_image_is_its_mean(kernel, stride, padding, ceil):
    """EfficientNet's AvgPool2d(1280, ceil_mode=True) over 7 x 7: the tuned avg_pool2d against the reference."""
    from hwadapter_cpu.tuning import pool
    avg = pool.kernels(get("cpu"))["avg_pool2d"]
    x = np.random.default_rng(7).standard_normal((1, 5, 7, 7)).astype(np.float32)
    got = avg(x, kernel, stride, padding, ceil, True)
    want = reference.KERNELS["avg_pool2d"](x.astype(np.float64), kernel, stride, padding, ceil, True)
    assert got.shape == want.shape == (1, 5, 1, 1) and got.dtype == F32
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape, axis, keepdim", [((1, 1000, 13, 13), (2, 3), True), ((2, 3, 7), -1, False),
                                                  ((4, 5), None, False), ((1, 2048, 1, 1), (2, 3), True),
                                                  ((3, 40, 33), (1, 2), False), ((6, 9), 1, True)])
def test_a_mean_over_trailing_axes_equals_the_references(kernels, shape, axis, keepdim):
    """rows.c's mean (a global average pool): within a few ulp of the reference's, its shape and dtype exactly, nan
    and infinities as the reference's, a row of zeros keeping their sign."""
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    got, want = kernels["mean"](x, axis, keepdim), reference.mean(x.astype(np.float64), axis, keepdim)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    flat = x.reshape(-1)
    flat[:4] = [np.nan, np.inf, -np.inf, 1.0]
    x2 = np.zeros(shape, np.float32) * -1.0  # -0.0 everywhere
    for a in (x, x2):
        got, want = kernels["mean"](a, axis, keepdim), reference.mean(a, axis, keepdim)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.signbit(got[np.isfinite(got) & (got == 0)]),
                                      np.signbit(want[np.isfinite(want) & (want == 0)]))


def test_a_large_relu_is_numpys_maximum_with_zero_nan_and_signed_zero_included(kernels):
    x = (np.random.default_rng(9).standard_normal(1 << 15) * 4).astype(np.float32)
    x[:6] = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0]
    got, want = kernels["relu"](x), np.maximum(x, np.float32(0))
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
