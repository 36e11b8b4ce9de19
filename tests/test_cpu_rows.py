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
    ((2, 3, 4, 6), (1, 1, 6, 5), False, False)])
def test_batched_products_equal_float64(xs, ys, tx, ty):
    device = get("cpu")
    matmul = matmul_kernel(Transforms(device), rows.Rows(device))
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ys).astype(np.float32)
    want = reference.matmul(x.astype(np.float64), y.astype(np.float64), tx, ty)
    got = matmul(x, y, tx, ty)
    assert got.shape == want.shape and got.dtype == F32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
