"""Data movement (reshape, transpose, concat, split, slice, gather, expand, pad, flatten, squeeze, unsqueeze,
__getitem__) on every device and dtype, against numpy indexing, with empty and 0-d shapes and error paths."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hwadapter as hw
from hwadapter import InvalidArgumentError, UnsupportedDTypeError
from hwadapter.api import shapes

from oracles import assert_close

ALL = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]
HYPO = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def mk(arr, device):
    return hw.to_tensor(np.asarray(arr), device=device)


def arange(shape, dtype="float32"):
    n = int(np.prod(shape, dtype=np.int64))
    if dtype == "bool":
        return (np.arange(n) % 3 == 0).reshape(shape)
    return (np.arange(n) % 100).astype(dtype).reshape(shape)


def same(out, expected):
    assert_close(out.numpy(), expected, np.asarray(expected).dtype)


# --- reshape / flatten / squeeze / unsqueeze ------------------------------------------------------------------
def test_reshape(device):
    for dtype in ALL:
        _reshape(dtype, device)


def _reshape(dtype, device):
    arr = arange((2, 3, 4), dtype)
    x = mk(arr, device)
    for target, expected in [((6, 4), (6, 4)), ((-1,), (24,)), ((4, -1), (4, 6)), ((0, -1), (2, 12)),
                             ((0, 0, 4), (2, 3, 4)), ((2, 3, 2, 2), (2, 3, 2, 2)), ([24], (24,)),
                             ((1, 24, 1), (1, 24, 1))]:
        same(hw.reshape(x, target), arr.reshape(expected))
    same(x.reshape((3, 8)), arr.reshape(3, 8))
    one = mk(arr.reshape(-1)[:1].reshape(()), device)
    same(hw.reshape(one, (1, 1)), arr.reshape(-1)[:1].reshape(1, 1))
    same(hw.reshape(mk(arr[:1, :1, :1], device), ()), arr[0, 0, 0])
    same(hw.reshape(one, (-1,)), arr.reshape(-1)[:1])
    empty = np.zeros((0, 3), dtype)
    same(hw.reshape(mk(empty, device), (0, 1, 3)), empty.reshape(0, 1, 3))
    same(hw.reshape(mk(empty, device), (-1, 3)), empty.reshape(-1, 3))
    same(hw.reshape(mk(empty, device), (0, 3)), empty)  # 0 copies the input's dimension (here 0)


def test_reshape_errors(device):
    x = mk(np.ones((2, 3), np.float32), device)
    with pytest.raises(InvalidArgumentError, match="reshape.*elements"):
        hw.reshape(x, (4, 2))
    with pytest.raises(InvalidArgumentError, match="reshape.*-1"):
        hw.reshape(x, (-1, -1))
    with pytest.raises(InvalidArgumentError, match="reshape.*negative"):
        hw.reshape(x, (-2, -3))
    with pytest.raises(InvalidArgumentError, match="reshape"):
        hw.reshape(x, (4, -1))
    with pytest.raises(InvalidArgumentError, match="reshape"):
        hw.reshape(mk(np.ones((0, 3)), device), (0, -1))
    with pytest.raises(InvalidArgumentError, match="reshape"):
        hw.reshape(np.ones(3), (3,))


def test_flatten(device):
    arr = arange((2, 3, 4, 5))
    x = mk(arr, device)
    same(hw.flatten(x), arr.reshape(-1))
    same(hw.flatten(x, 1), arr.reshape(2, -1))
    same(hw.flatten(x, 1, 2), arr.reshape(2, 12, 5))
    same(hw.flatten(x, -2, -1), arr.reshape(2, 3, 20))
    same(hw.flatten(x, 2, 2), arr)
    same(hw.flatten(mk(np.float32(3), device)), np.array([3.0], np.float32))
    same(hw.flatten(mk(np.zeros((2, 0, 3)), device), 1), np.zeros((2, 0)))
    with pytest.raises(InvalidArgumentError, match="flatten"):
        hw.flatten(x, 2, 1)
    with pytest.raises(InvalidArgumentError, match="flatten"):
        hw.flatten(x, 0, 4)


def test_squeeze_unsqueeze(device):
    arr = arange((1, 3, 1, 2))
    x = mk(arr, device)
    same(hw.squeeze(x), arr.reshape(3, 2))
    same(hw.squeeze(x, 0), arr.reshape(3, 1, 2))
    same(hw.squeeze(x, -2), arr.reshape(1, 3, 2))
    same(hw.squeeze(x, [0, 2]), arr.reshape(3, 2))
    same(hw.squeeze(x, 1), arr)  # a named axis that is not of size 1 is kept (paddle)
    same(hw.squeeze(mk(np.float32(2), device)), np.float32(2))
    same(hw.squeeze(mk(np.zeros((1, 0)), device)), np.zeros((0,)))
    with pytest.raises(InvalidArgumentError, match="squeeze"):
        hw.squeeze(x, 4)
    a = arange((3, 2))
    y = mk(a, device)
    same(hw.unsqueeze(y, 0), a[None])
    same(hw.unsqueeze(y, -1), a[..., None])
    same(hw.unsqueeze(y, 1), a[:, None])
    same(hw.unsqueeze(y, [0, 3]), a[None, :, :, None])
    same(hw.unsqueeze(y, (0, -1)), a[None, :, :, None])
    same(hw.unsqueeze(mk(np.float32(2), device), 0), np.array([2.0], np.float32))
    same(y.unsqueeze(2).squeeze(2), a)
    with pytest.raises(InvalidArgumentError, match="unsqueeze"):
        hw.unsqueeze(y, 3)
    with pytest.raises(InvalidArgumentError, match="unsqueeze"):
        hw.unsqueeze(y, -4)


# --- transpose ------------------------------------------------------------------------------------------------
def test_transpose(device):
    for dtype in ALL:
        _transpose(dtype, device)


def _transpose(dtype, device):
    arr = arange((2, 3, 4), dtype)
    x = mk(arr, device)
    for perm in [(0, 1, 2), (2, 0, 1), (1, 0, 2), (2, 1, 0), (-1, 0, 1), [0, 2, 1]]:
        same(hw.transpose(x, perm), np.transpose(arr, perm))
    same(hw.transpose(x), np.transpose(arr))
    same(x.T, arr.T)
    same(hw.transpose(mk(arr[0, 0, 0], device)), arr[0, 0, 0])
    same(hw.transpose(mk(np.zeros((0, 2), dtype), device), (1, 0)), np.zeros((2, 0), dtype))


def test_transpose_errors(device):
    x = mk(np.ones((2, 3, 4), np.float32), device)
    for perm in [(0, 1), (0, 1, 1), (0, 1, 5), (0, 1, 3), (-4, 0, 1), (0, 1, 2, 3)]:
        with pytest.raises(InvalidArgumentError, match="transpose"):
            hw.transpose(x, perm)


# --- concat / split ------------------------------------------------------------------------------------------------
def test_concat(device):
    for dtype in ALL:
        _concat(dtype, device)


def _concat(dtype, device):
    a, b, c = arange((2, 3), dtype), arange((2, 1), dtype), arange((2, 0), dtype)
    same(hw.concat([mk(a, device), mk(b, device), mk(c, device)], axis=1), np.concatenate([a, b, c], 1))
    same(hw.concat([mk(a, device), mk(a, device)], axis=-2), np.concatenate([a, a], 0))
    same(hw.concat([mk(a, device)]), a)
    same(hw.concat((mk(a[:0], device), mk(a, device))), a)


def test_concat_promotes(device):
    a = np.array([1, 2], np.int8)
    b = np.array([0.5], np.float32)
    same(hw.concat([mk(a, device), mk(b, device)]), np.array([1, 2, 0.5], np.float32))
    same(hw.concat([mk(a, device), mk(np.array([300], np.int16), device)]), np.array([1, 2, 300], np.int16))


def test_concat_errors(device):
    a = mk(np.ones((2, 3)), device)
    with pytest.raises(InvalidArgumentError, match="concat"):
        hw.concat([])
    with pytest.raises(InvalidArgumentError, match="concat.*differ"):
        hw.concat([a, mk(np.ones((3, 3)), device)], axis=1)
    with pytest.raises(InvalidArgumentError, match="concat"):
        hw.concat([a, mk(np.ones(3), device)])
    with pytest.raises(InvalidArgumentError, match="concat"):
        hw.concat([a, a], axis=2)
    with pytest.raises(InvalidArgumentError, match="concat"):
        hw.concat([mk(np.float32(1), device), mk(np.float32(2), device)])


def test_split(device):
    for dtype in ["bool", "int32", "float16", "float64"]:
        _split(dtype, device)


def _split(dtype, device):
    arr = arange((6, 4), dtype)
    x = mk(arr, device)
    for spec, axis, bounds in [(3, 0, [2, 4]), (2, 1, [2]), ([1, 2, 3], 0, [1, 3]), ([1, -1, 2], 0, [1, 4]),
                               ([0, 4], -1, [0]), ([-1], 0, []), (1, 0, []), ([2, 2], 1, [2])]:
        parts = hw.split(x, spec, axis)
        expected = np.split(arr, bounds, axis=axis)
        assert isinstance(parts, list) and len(parts) == len(expected)
        for p, e in zip(parts, expected):
            same(p, e)
    parts = hw.split(mk(np.zeros((0, 2), dtype), device), 2)
    assert [p.shape for p in parts] == [(0, 2), (0, 2)]


def test_split_errors(device):
    x = mk(np.ones((6, 4)), device)
    with pytest.raises(InvalidArgumentError, match="split"):
        hw.split(x, 4)
    with pytest.raises(InvalidArgumentError, match="split"):
        hw.split(x, 0)
    with pytest.raises(InvalidArgumentError, match="split"):
        hw.split(x, [1, 2])
    with pytest.raises(InvalidArgumentError, match="split"):
        hw.split(x, [-1, -1])
    with pytest.raises(InvalidArgumentError, match="split"):
        hw.split(x, [4, 4, -1])
    with pytest.raises(InvalidArgumentError, match="split"):
        hw.split(x, [7, -2])
    with pytest.raises(InvalidArgumentError, match="split"):
        hw.split(x, 2, axis=2)


# --- slice ------------------------------------------------------------------------------------------------------
def test_slice(device):
    for dtype in ["bool", "uint8", "int64", "float32"]:
        _slice(dtype, device)


def _slice(dtype, device):
    arr = arange((5, 6, 3), dtype)
    x = mk(arr, device)
    cases = [
        ([0], [1], [3], None, np.s_[1:3]),
        ([1], [-4], [-1], None, np.s_[:, -4:-1]),
        ([0, 2], [-100], [100], None, None),
        ([0, 1], [0, 1], [5, 100], [2, 2], np.s_[0:5:2, 1:100:2]),
        ([1], [5], [0], [-1], np.s_[:, 5:0:-1]),
        ([1], [-1], [-100], [-2], np.s_[:, -1:-100:-2]),
        ([0], [10], [20], None, np.s_[10:20]),
        ([0], [3], [1], None, np.s_[3:1]),
        ([-1], [1], [2], None, np.s_[:, :, 1:2]),
    ]
    for axes, starts, ends, strides, index in cases:
        if index is None:
            with pytest.raises(InvalidArgumentError, match="slice"):
                hw.slice(x, axes, starts, ends, strides)
            continue
        same(hw.slice(x, axes, starts, ends, strides), arr[index])


def test_slice_errors(device):
    x = mk(np.ones((4, 4)), device)
    with pytest.raises(InvalidArgumentError, match="slice.*stride"):
        hw.slice(x, [0], [0], [4], [0])
    with pytest.raises(InvalidArgumentError, match="slice.*same length"):
        hw.slice(x, [0, 1], [0], [4])
    with pytest.raises(InvalidArgumentError, match="slice"):
        hw.slice(x, [2], [0], [1])


# --- gather -----------------------------------------------------------------------------------------------------
def test_gather(device):
    for dtype in ALL:
        _gather(dtype, device)


def _gather(dtype, device):
    arr = arange((4, 3), dtype)
    x = mk(arr, device)
    same(hw.gather(x, [2, 0, 2]), arr[[2, 0, 2]])
    same(hw.gather(x, mk(np.array([1, -1], np.int32), device), axis=1), arr[:, [1, -1]])
    same(hw.gather(x, mk(np.array([3], np.uint8), device)), arr[[3]])
    same(hw.gather(x, mk(np.array(1, np.int64), device)), arr[1])
    same(hw.gather(x, mk(np.zeros(0, np.int64), device), axis=-1), arr[:, []])
    same(hw.gather(x, mk(np.array([[0, 1], [2, 3]], np.int64), device)), arr[np.array([[0, 1], [2, 3]])])
    same(hw.gather(mk(np.zeros((0, 3), dtype), device), [], axis=0), np.zeros((0, 3), dtype))


def test_gather_errors(device):
    x = mk(np.ones((4, 3)), device)
    with pytest.raises(UnsupportedDTypeError, match="gather"):
        hw.gather(x, mk(np.array([0.0]), device))
    with pytest.raises(UnsupportedDTypeError, match="gather"):
        hw.gather(x, mk(np.array([True]), device))
    with pytest.raises(InvalidArgumentError, match="gather.*4.*out of range"):
        hw.gather(x, [4])
    with pytest.raises(InvalidArgumentError, match="gather.*out of range"):
        hw.gather(x, [0, -5])
    with pytest.raises(InvalidArgumentError, match="gather"):
        hw.gather(x, [0], axis=2)
    with pytest.raises(InvalidArgumentError, match="gather"):
        hw.gather(mk(np.float32(1), device), [0])
    if device != "cpu:0":
        with pytest.raises(InvalidArgumentError, match="gather"):
            hw.gather(x, mk(np.array([0]), "cpu:0"))


# --- expand ------------------------------------------------------------------------------------------------------
def test_expand(device):
    for dtype in ["bool", "int8", "float16", "float32"]:
        _expand(dtype, device)


def _expand(dtype, device):
    arr = arange((3, 1), dtype)
    x = mk(arr, device)
    same(hw.expand(x, (3, 4)), np.broadcast_to(arr, (3, 4)))
    same(hw.expand(x, (2, 3, 4)), np.broadcast_to(arr, (2, 3, 4)))
    same(hw.expand(x, (2, -1, 4)), np.broadcast_to(arr, (2, 3, 4)))
    same(hw.expand(x, (-1, 1)), arr)
    same(hw.expand(x, (3, 0)), np.zeros((3, 0), dtype))
    same(hw.broadcast_to(x, [5, 3, 2]), np.broadcast_to(arr, (5, 3, 2)))
    s = mk(np.array(7, dtype), device)
    same(hw.expand(s, (2, 2)), np.full((2, 2), 7, dtype))
    same(x.expand((3, 2)), np.broadcast_to(arr, (3, 2)))


def test_expand_errors(device):
    x = mk(np.ones((3, 1)), device)
    for shape in [(4, 4), (3,), (-1, 3, 4), (3, -2), (2, 3, 0, 5)[:2]]:
        with pytest.raises(InvalidArgumentError, match="expand"):
            hw.expand(x, shape)


# --- pad -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad(mode, device):
    for dtype in ["bool", "uint8", "int32", "float16", "float64"]:
        _pad(mode, dtype, device)


def _pad(mode, dtype, device):
    arr = arange((3, 4, 5), dtype)
    x = mk(arr, device)
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    cases = [
        ([1, 2], [(0, 0), (0, 0), (1, 2)]),                       # from the last axis
        ([1, 0, 2, 1], [(0, 0), (2, 1), (1, 0)]),
        ([0, 1, 2, 1, 1, 2], [(0, 1), (2, 1), (1, 2)]),           # 2*ndim values: from the first axis
        ([0, 0], [(0, 0)] * 3),
    ]
    for pads, width in cases:
        out = hw.pad(x, pads, mode=mode)
        same(out, np.pad(arr, width, mode=np_mode))
    if mode == "constant":
        value = True if dtype == "bool" else 7
        same(hw.pad(x, [1, 1], value=value), np.pad(arr, [(0, 0), (0, 0), (1, 1)], constant_values=value))
        same(hw.pad(mk(np.zeros((0, 2), dtype), device), [1, 1, 0, 0]), np.zeros((2, 2), dtype))
        same(hw.pad(mk(np.array(5, dtype), device), []), np.array(5, dtype))


def test_pad_float_value_and_nchw_order(device):
    arr = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    out = hw.nn.functional.pad(mk(arr, device), [1, 2, 3, 0], value=-1.5)  # left, right, top, bottom
    same(out, np.pad(arr, [(0, 0), (0, 0), (3, 0), (1, 2)], constant_values=-1.5))


def test_pad_errors(device):
    x = mk(np.ones((3, 4)), device)
    with pytest.raises(InvalidArgumentError, match="pad.*even"):
        hw.pad(x, [1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="pad"):
        hw.pad(x, [1] * 6)
    with pytest.raises(InvalidArgumentError, match="pad.*negative"):
        hw.pad(x, [-1, 1])
    with pytest.raises(InvalidArgumentError, match="pad.*mode"):
        hw.pad(x, [1, 1], mode="symmetric")
    with pytest.raises(InvalidArgumentError, match="pad.*reflect"):
        hw.pad(x, [4, 0], mode="reflect")
    with pytest.raises(InvalidArgumentError, match="pad.*circular"):
        hw.pad(x, [5, 0], mode="circular")
    for mode in ("reflect", "replicate", "circular"):
        with pytest.raises(InvalidArgumentError, match=f"pad.*{mode}"):
            hw.pad(mk(np.ones((0, 3)), device), [1, 1, 0, 0], mode=mode)


# --- __getitem__ ---------------------------------------------------------------------------------------------------
@HYPO
@given(data=st.data(), dtype=st.sampled_from(["bool", "int16", "float32"]))
def test_getitem_basic_indexing_matches_numpy(data, dtype, device):
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
    index = data.draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True))
    arr = arange(shape, dtype)
    same(mk(arr, device)[index], arr[index])


def test_getitem_forms(device):
    arr = arange((4, 5, 3))
    x = mk(arr, device)
    same(x[1], arr[1])
    same(x[-1, 2], arr[-1, 2])
    same(x[1:3, ::2, -1], arr[1:3, ::2, -1])
    same(x[::-1], arr[::-1])
    same(x[..., 1], arr[..., 1])
    same(x[None, 1, ..., None], arr[None, 1, ..., None])
    same(x[[3, 0, 0]], arr[[3, 0, 0]])
    same(x[mk(np.array([2, -1]), device)], arr[[2, -1]])
    same(x[mk(np.array(2), device)], arr[2])
    same(x[np.int64(1), 2], arr[1, 2])
    same(x[10:], arr[10:])
    same(x[()], arr)
    s = mk(np.float32(3.5), device)
    same(s[()], np.float32(3.5))
    same(s[...], np.float32(3.5))
    same(s[None], np.array([3.5], np.float32))
    assert [t.item() for t in mk(np.array([1, 2, 3]), device)] == [1, 2, 3]


def test_getitem_errors(device):
    x = mk(arange((4, 5)), device)
    with pytest.raises(InvalidArgumentError, match="out of bounds"):
        x[4]
    with pytest.raises(InvalidArgumentError, match="out of bounds"):
        x[0, -6]
    with pytest.raises(InvalidArgumentError, match="too many indices"):
        x[0, 0, 0]
    with pytest.raises(InvalidArgumentError, match="ellipsis"):
        x[..., ...]
    with pytest.raises(InvalidArgumentError, match="step"):
        x[::0]
    with pytest.raises(InvalidArgumentError, match="boolean"):
        x[mk(np.array([True, False, True, False]), device)]
    with pytest.raises(InvalidArgumentError, match="boolean"):
        x[[True, False, True, False]]
    with pytest.raises(InvalidArgumentError):
        x[True]
    with pytest.raises(InvalidArgumentError, match="unsupported index"):
        x[1.5]
    with pytest.raises(InvalidArgumentError, match="unsupported index"):
        x["a"]
    with pytest.raises(InvalidArgumentError, match="gather.*out of range"):
        x[[7]]
    with pytest.raises(InvalidArgumentError, match="too many indices"):
        mk(np.float32(1), device)[0]


# --- slicing: the frontend's normalised bounds against numpy --------------------------------------------------
_BOUND = st.one_of(st.none(), st.integers(-12, 12), st.sampled_from([-(1 << 70), 1 << 70]))
_STEP = st.one_of(st.none(), st.integers(-4, 4).filter(bool), st.sampled_from([-(1 << 62), 1 << 62, 1 << 70]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_getitem_matches_numpy_for_any_basic_key(data, device):
    """Negative steps, starts before the axis and stops past it, ints, None and ... all give numpy's result."""
    shape = data.draw(st.lists(st.integers(0, 6), min_size=1, max_size=3).map(tuple))
    key = []
    for size in shape:  # one slice or int per axis, a None (new axis) before some
        key += [None] * data.draw(st.integers(0, 1))
        ints = st.integers(-size, size - 1) if size else st.nothing()
        key.append(data.draw(st.one_of(st.builds(slice, _BOUND, _BOUND, _STEP), ints)))
    if data.draw(st.booleans()):  # the trailing axes as ...
        key = key[:data.draw(st.integers(0, len(key)))] + [Ellipsis]
    key = tuple(key)
    arr = np.arange(math.prod(shape), dtype=np.int32).reshape(shape)
    out = hw.to_tensor(arr, device=device)[key]
    np.testing.assert_array_equal(out.numpy(), arr[key])
    assert out.shape == arr[key].shape


@pytest.mark.parametrize("size, start, stop, step", [(10, -4, None, -1), (3, -4, None, -1), (3, -10, -20, -1),
                                                      (20, 1, -5, -1), (5, 7, None, -2), (0, 0, None, -1)])
def test_slice_of_an_empty_range_is_empty(size, start, stop, step, device):
    """hw.slice(x, [0], [start], [stop], [step]) is numpy's x[start:stop:step]; the issue's [10, 20] case too."""
    arr = np.arange(size * 2).reshape(size, 2)
    out = hw.slice(hw.to_tensor(arr, device=device), [0], [start], [stop], [step])
    np.testing.assert_array_equal(out.numpy(), arr[start:stop:step])
    np.testing.assert_array_equal(hw.to_tensor(arr, device=device)[start:stop:step].numpy(), arr[start:stop:step])


@pytest.mark.parametrize("start, stop, step", [(0, 1 << 70, None), (-(1 << 70), 3, None), (1 << 70, None, -1),
                                               (-(1 << 70), 1 << 70, 2), (None, None, 1 << 70), (1, None, -(1 << 64)),
                                               (1 << 63, -(1 << 63) - 1, -3), (2, 1 << 70, 1 << 63)])
def test_slice_bounds_beyond_int64_clamp_as_pythons(start, stop, step, device):
    """Bounds and steps of any size, as the docs say (out-of-range bounds clamp): hw.slice and x[...] give numpy's
    x[start:stop:step]; they were refused beyond int64."""
    arr = np.arange(14).reshape(7, 2)
    x = hw.to_tensor(arr, device=device)
    np.testing.assert_array_equal(x[start:stop:step].numpy(), arr[start:stop:step])
    out = hw.slice(x, [0], [start], [stop], None if step is None else [step])
    np.testing.assert_array_equal(out.numpy(), arr[start:stop:step])


@given(size=st.integers(0, 8), start=_BOUND, stop=_BOUND, step=_STEP)
def test_slice_bounds_are_in_the_kernels_form(size, start, stop, step):
    """What kernels receive: the same elements as Python's slice, start in range, stop in range or None."""
    lo, hi, st_ = shapes.slice_bounds(size, start, stop, step)
    expected = list(range(size))[start:stop:step]
    assert list(range(size))[lo:hi:st_] == expected
    if expected:
        assert 0 <= lo < size and (hi is None and st_ < 0 or 0 <= hi <= size)
    else:
        assert (lo, hi, st_) == (0, 0, 1)
