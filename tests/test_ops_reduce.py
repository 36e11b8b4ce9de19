"""Reductions (sum, mean, max, min, prod, argmax, argmin) over every dtype, axis form and keepdim, with empty
and 0-d inputs, on every device, against numpy computed in a wide type; and their error paths."""
from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hwadapter as hw
from hwadapter import InvalidArgumentError, UnsupportedDTypeError

from oracles import assert_close

ALL = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]
FLOATS = ["float16", "float32", "float64"]
# (shape, axis) cases: None / int / negative / tuple / empty tuple, over 0-d, empty and ordinary shapes
CASES = [((), None), ((), 0), ((), -1), ((0,), None), ((0,), 0), ((5,), None), ((5,), 0), ((5,), -1),
         ((2, 3), None), ((2, 3), 1), ((2, 3), -2), ((2, 3), (0, 1)), ((2, 3, 4), (0, 2)), ((2, 3, 4), (-1, 0)),
         ((2, 3, 4), [1]), ((2, 0, 3), 1), ((2, 0, 3), (0, 2)), ((2, 0, 3), None)]


def rng_for(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def mk(arr, device):
    return hw.to_tensor(np.asarray(arr), device=device)


def sample(dtype, shape, rng, op):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        lo, hi = (-2, 3) if op == "prod" else (-50, 51)
        return rng.integers(0 if dt.kind == "u" else lo, hi, shape).astype(dt)
    if op == "prod":
        return rng.uniform(0.5, 1.5, shape).astype(dt)
    return rng.uniform(-3, 3, shape).astype(dt)


def np_axis(axis, ndim):
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(a % ndim for a in axes) if ndim else None


def reduce_oracle(op, arr, axis, keepdim):
    """numpy in a wide type, cast to the result dtype hwadapter promises."""
    ax = np_axis(axis, arr.ndim)
    if op in ("sum", "prod"):
        wide = arr.astype(np.float64 if arr.dtype.kind == "f" else np.int64)
        out = (np.sum if op == "sum" else np.prod)(wide, axis=ax, keepdims=keepdim)
        return np.asarray(out).astype(arr.dtype if arr.dtype.kind == "f" else np.int64)
    if op == "mean":
        count = int(np.prod([arr.shape[a] for a in (range(arr.ndim) if ax is None else ax)]))
        with np.errstate(all="ignore"):  # sum / count: np.mean would warn about the mean of nothing
            out = np.sum(arr.astype(np.float64), axis=ax, keepdims=keepdim) / count
        return np.asarray(out).astype(arr.dtype if arr.dtype.kind == "f" else np.float32)
    out = (np.max if op == "max" else np.min)(arr, axis=ax, keepdims=keepdim)
    return np.asarray(out).astype(arr.dtype)


@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "prod"])
def test_reduction(op, device):
    """Every dtype, keepdim or not, over CASES; max/min of nothing raise."""
    for dtype in ALL:
        for keepdim in (False, True):
            _reduction(op, dtype, keepdim, device)


def _reduction(op, dtype, keepdim, device):
    fn = getattr(hw, op)
    rng = rng_for(op, dtype, keepdim)
    for shape, axis in CASES:
        arr = sample(dtype, shape, rng, op)
        x = mk(arr, device)
        empty = any(arr.shape[a] == 0 for a in (np_axis(axis, arr.ndim) or range(arr.ndim)))
        if op in ("max", "min") and empty:
            with pytest.raises(InvalidArgumentError, match=f"{op}.*empty"):
                fn(x, axis=axis, keepdim=keepdim)
            continue
        out = fn(x, axis=axis, keepdim=keepdim)
        expected = reduce_oracle(op, arr, axis, keepdim)
        rtol = 1e-2 if dtype == "float16" else None
        assert out.device == x.device
        assert_close(out.numpy(), expected, expected.dtype, rtol=rtol, err_msg=f"{op} {dtype} {shape} {axis}")


def test_empty_reductions_have_identities(device):
    e = mk(np.zeros((0, 3), np.float32), device)
    assert_close(hw.sum(e).numpy(), 0.0, "float32")
    assert_close(hw.prod(e).numpy(), 1.0, "float32")
    assert_close(hw.sum(e, axis=0).numpy(), [0, 0, 0], "float32")
    assert_close(hw.prod(mk(np.zeros((0,), np.int8), device)).numpy(), 1, "int64")
    assert_close(hw.mean(e).numpy(), np.nan, "float32")  # the mean of nothing is nan (and no warning)
    assert_close(hw.mean(e, axis=1).numpy(), np.zeros(0), "float32")
    assert_close(hw.max(e, axis=1).numpy(), np.zeros(0), "float32")  # reduces 3-long rows: none of them
    assert_close(hw.max(e, axis=()).numpy(), np.zeros((0, 3)), "float32")


def test_integer_sums_accumulate_in_int64(device):
    x = mk(np.full((300,), 100, np.int8), device)
    assert_close(hw.sum(x).numpy(), 30000, "int64")
    assert_close(hw.sum(mk(np.full((4,), 255, np.uint8), device)).numpy(), 1020, "int64")
    assert_close(hw.sum(mk(np.array([True, True, False]), device)).numpy(), 2, "int64")
    assert_close(hw.prod(mk(np.full((3,), 100, np.int16), device)).numpy(), 1000000, "int64")
    assert_close(hw.mean(mk(np.array([1, 2], np.int64), device)).numpy(), 1.5, "float32")
    assert_close(hw.sum(x, dtype="float32").numpy(), 30000.0, "float32")
    assert_close(hw.sum(mk(np.ones(3, np.float16), device), dtype="float64").numpy(), 3.0, "float64")


def test_float16_sums_are_accurate(device):
    arr = np.full((2048,), 1.0, np.float16)
    arr[0] = 1024
    assert_close(hw.sum(mk(arr, device)).numpy(), 3071.0, "float16", rtol=1e-3)
    assert_close(hw.mean(mk(arr, device)).numpy(), 3071.0 / 2048, "float16", rtol=1e-3)


def test_nan_propagates_through_max_and_min(device):
    x = mk(np.array([[1.0, np.nan], [2.0, 3.0]], np.float32), device)
    assert_close(hw.max(x, axis=1).numpy(), [np.nan, 3.0], "float32")
    assert_close(hw.min(x).numpy(), np.nan, "float32")
    assert_close(hw.sum(x, axis=0).numpy(), [3.0, np.nan], "float32")


def test_keepdims_alias_and_methods(device):
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = mk(arr, device)
    assert hw.sum(x, axis=1, keepdims=True).shape == (2, 1)
    assert_close(x.sum(axis=0).numpy(), arr.sum(axis=0), "float32")
    assert_close(x.mean(1, True).numpy(), arr.mean(axis=1, keepdims=True), "float32")
    assert_close(x.max().numpy(), 5.0, "float32")
    assert_close(x.min(axis=-1).numpy(), [0.0, 3.0], "float32")
    assert_close(x.prod(axis=[0]).numpy(), arr.prod(axis=0), "float32")
    assert_close(hw.sum(x, axis=np.int64(1)).numpy(), arr.sum(axis=1), "float32")


# --- argmax / argmin ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_reduction(op, device):
    for dtype in ALL:
        for keepdim in (False, True):
            _arg_reduction(op, dtype, keepdim, device)


def _arg_reduction(op, dtype, keepdim, device):
    fn = getattr(hw, op)
    npfn = getattr(np, op)
    rng = rng_for(op, dtype, keepdim)
    for shape, axis in [((), None), ((), 0), ((), -1), ((6,), None), ((6,), 0), ((2, 3), None), ((2, 3), 1),
                        ((2, 3), -2), ((2, 3, 4), 2), ((3, 0), 0)]:
        arr = sample(dtype, shape, rng, "sum")
        if arr.size > 2:  # ties: the first index wins
            arr.flat[1] = arr.flat[-1] = arr.max() if op == "argmax" else arr.min()
        out = fn(mk(arr, device), axis=axis, keepdim=keepdim)
        ax = None if axis is None or arr.ndim == 0 else axis % arr.ndim
        expected = np.asarray(npfn(arr, axis=ax, keepdims=keepdim))
        if arr.ndim == 0:
            expected = expected.reshape(())
        assert_close(out.numpy(), expected.astype(np.int64), "int64", err_msg=f"{op} {dtype} {shape} {axis}")


def test_arg_reduction_of_empty_and_errors(device):
    e = mk(np.zeros((0, 3), np.float32), device)
    for op in ("argmax", "argmin"):
        with pytest.raises(InvalidArgumentError, match=f"{op}.*empty"):
            getattr(hw, op)(e)
        with pytest.raises(InvalidArgumentError, match=f"{op}.*empty"):
            getattr(hw, op)(e, axis=0)
        with pytest.raises(InvalidArgumentError, match=op):
            getattr(hw, op)(mk(np.ones((2, 3)), device), axis=2)
        with pytest.raises(InvalidArgumentError, match=op):
            getattr(hw, op)(mk(np.ones((2, 3)), device), axis=(0, 1))
    assert_close(hw.argmax(mk(np.array([np.nan, 1.0], np.float32), device)).numpy(), 0, "int64")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), op=st.sampled_from(["sum", "mean", "max", "min", "prod"]), keepdim=st.booleans(),
       dtype=st.sampled_from(["int32", "float64"]))
def test_reduction_any_axes(data, op, keepdim, dtype, device):
    """Any shape and any subset of axes (in any order, negative or not) reduces like numpy."""
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=1, max_side=3))
    axes = data.draw(st.one_of(st.none(), st.lists(st.integers(0, max(len(shape) - 1, 0)), unique=True)
                               .map(lambda a: tuple(i - len(shape) if i % 2 and len(shape) else i for i in a))))
    arr = sample(dtype, shape, np.random.default_rng(0), op)
    out = getattr(hw, op)(mk(arr, device), axis=axes, keepdim=keepdim)
    assert_close(out.numpy(), reduce_oracle(op, arr, axes, keepdim), rtol=1e-12)


def test_reduction_errors(device):
    x = mk(np.ones((2, 3), np.float32), device)
    for op in ("sum", "mean", "max", "min", "prod"):
        fn = getattr(hw, op)
        with pytest.raises(InvalidArgumentError, match=f"{op}.*out of range"):
            fn(x, axis=2)
        with pytest.raises(InvalidArgumentError, match=f"{op}.*out of range"):
            fn(x, axis=-3)
        with pytest.raises(InvalidArgumentError, match=f"{op}.*repeated"):
            fn(x, axis=(1, -1))
        with pytest.raises(InvalidArgumentError, match=op):
            fn(x, axis=1.0)
        with pytest.raises(InvalidArgumentError, match=op):
            fn(x.numpy())
    with pytest.raises(InvalidArgumentError, match="max.*empty"):
        hw.max(mk(np.zeros((0,), np.int32), device))
    with pytest.raises(InvalidArgumentError, match="min.*empty"):
        hw.min(mk(np.zeros((2, 0), np.float32), device), axis=1)
    with pytest.raises(UnsupportedDTypeError, match="sum"):
        hw.sum(x, dtype="complex64")
