"""Bad input gets hwadapter's error, naming the op and the fix, on every device; never Python's or numpy's.

A table of ops x bad attributes (integers that are not ints, values their dtype cannot hold, sizes no device has,
misspelt keywords), inputs on two devices, and a hypothesis fuzz with random junk attributes. conftest's autouse
fixture checks that no device memory leaks.
"""
from __future__ import annotations

import math
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hwadapter as hw
import hwadapter.nn.functional as F
from hwadapter import HwAdapterError, InvalidArgumentError, OutOfMemoryError
from hwadapter.ops import _common
from hwadapter.runtime import memory

NAN, INF, HUGE = math.nan, math.inf, 1 << 40


def _x(device, dtype="float32"):
    return hw.to_tensor(np.arange(12).reshape(3, 4).astype(dtype), device=device)


def _img(device):
    return hw.to_tensor(np.ones((1, 4, 5, 5), np.float32), device=device)


def _w(device):
    return hw.to_tensor(np.ones((2, 2, 3, 3), np.float32), device=device)


# (op named in the message, call(device)): each must raise an HwAdapterError whose message names the op and the fix.
BAD = {
    # integer attributes given as floats, strings, bools, junk
    "conv2d groups=2.5": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2.5)),
    "conv2d groups=True": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=True)),
    "conv2d groups=0": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=0)),
    "conv2d stride='22'": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, stride="22")),
    "conv2d stride=1.5": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, stride=1.5)),
    "conv2d stride=(1,2,3)": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, stride=(1, 2, 3))),
    "conv2d stride=0": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, stride=0)),
    "conv2d dilation='2'": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, dilation="2")),
    "conv2d padding=-1": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, padding=-1)),
    "conv2d padding=1.0": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, padding=1.0)),
    "conv2d padding='full'": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, padding="full")),
    "conv2d padding=1<<40": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, padding=HUGE)),
    "conv2d padding=1<<40 stride=1<<41": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, padding=HUGE,
                                                                      stride=HUGE * 2)),
    "conv2d data_format=3": ("conv2d", lambda d: F.conv2d(_img(d), _w(d), groups=2, data_format=3)),
    "max_pool2d kernel_size=2.5": ("max_pool2d", lambda d: F.max_pool2d(_img(d), 2.5)),
    "max_pool2d stride='2'": ("max_pool2d", lambda d: F.max_pool2d(_img(d), 2, stride="2")),
    "max_pool2d padding=[1,1,1]": ("max_pool2d", lambda d: F.max_pool2d(_img(d), 2, padding=[1, 1, 1])),
    "max_pool2d ceil_mode='no'": ("max_pool2d", lambda d: F.max_pool2d(_img(d), 2, ceil_mode="no")),
    "avg_pool2d exclusive='yes'": ("avg_pool2d", lambda d: F.avg_pool2d(_img(d), 2, exclusive="yes")),
    "adaptive_avg_pool2d output_size=0": ("adaptive_avg_pool2d", lambda d: F.adaptive_avg_pool2d(_img(d), 0)),
    "adaptive_max_pool2d output_size=1.5": ("adaptive_max_pool2d", lambda d: F.adaptive_max_pool2d(_img(d), 1.5)),
    "reshape [2.9, 6]": ("reshape", lambda d: hw.reshape(hw.zeros([12], device=d), [2.9, 6])),
    "reshape ['a', 6]": ("reshape", lambda d: hw.reshape(_x(d), ["a", 6])),
    "reshape None": ("reshape", lambda d: hw.reshape(_x(d), None)),
    "reshape 1<<70": ("reshape", lambda d: hw.reshape(_x(d), [1 << 70])),
    "reshape empty to 2**62 x 4": ("reshape", lambda d: hw.reshape(hw.zeros([0], device=d), [0, 1 << 62, 4])),
    "transpose [1.5, 0.2]": ("transpose", lambda d: hw.transpose(_x(d), [1.5, 0.2])),
    "transpose [True, False]": ("transpose", lambda d: hw.transpose(_x(d), [True, False])),
    "transpose 'ab'": ("transpose", lambda d: hw.transpose(_x(d), "ab")),
    "transpose [0, 0]": ("transpose", lambda d: hw.transpose(_x(d), [0, 0])),
    "flatten start_axis=0.5": ("flatten", lambda d: hw.flatten(_x(d), 0.5)),
    "squeeze axis=1.5": ("squeeze", lambda d: hw.squeeze(_x(d), 1.5)),
    "unsqueeze axis='a'": ("unsqueeze", lambda d: hw.unsqueeze(_x(d), "a")),
    "unsqueeze axis=[0, 0]": ("unsqueeze", lambda d: hw.unsqueeze(_x(d), [0, 0])),
    "concat axis=0.5": ("concat", lambda d: hw.concat([_x(d), _x(d)], 0.5)),
    "concat of a tensor": ("concat", lambda d: hw.concat(_x(d))),
    "concat of numbers": ("concat", lambda d: hw.concat([_x(d), 1])),
    "split 1.5": ("split", lambda d: hw.split(_x(d), 1.5)),
    "split ['a']": ("split", lambda d: hw.split(_x(d), ["a"])),
    "split [True, 2]": ("split", lambda d: hw.split(_x(d), [True, 2])),
    "split True": ("split", lambda d: hw.split(_x(d), True)),
    "split axis='0'": ("split", lambda d: hw.split(_x(d), 3, axis="0")),
    "slice axes=[0.5]": ("slice", lambda d: hw.slice(_x(d), [0.5], [0], [1])),
    "slice starts=['a']": ("slice", lambda d: hw.slice(_x(d), [0], ["a"], [1])),
    "slice strides=[1.5]": ("slice", lambda d: hw.slice(_x(d), [0], [0], [2], [1.5])),
    "slice repeated axis": ("slice", lambda d: hw.slice(_x(d), [0, 0], [0, 1], [2, 2])),
    "slice starts=3": ("slice", lambda d: hw.slice(_x(d), [0], 3, [1])),
    "gather index [0.5]": ("gather", lambda d: hw.gather(_x(d), [0.5, 1.2])),
    "gather index [True]": ("gather", lambda d: hw.gather(_x(d), [True, False])),
    "gather index 'a'": ("gather", lambda d: hw.gather(_x(d), "a")),
    "gather index ragged": ("gather", lambda d: hw.gather(_x(d), [[0], [0, 1]])),
    "gather axis=0.5": ("gather", lambda d: hw.gather(_x(d), [0], axis=0.5)),
    "expand ['a', 4]": ("expand", lambda d: hw.expand(_x(d), ["a", 4])),
    "expand 2.5": ("expand", lambda d: hw.expand(_x(d), 2.5)),
    "expand to 1<<40 rows": ("expand", lambda d: hw.expand(_x(d), [HUGE, 3, 4])),
    "broadcast_to [1.5]": ("broadcast_to", lambda d: hw.broadcast_to(_x(d), [3, 4.0])),
    "pad value='x'": ("pad", lambda d: hw.pad(_x(d), [1, 1], value="x")),
    "pad int8 value=1000": ("pad", lambda d: hw.pad(_x(d, "int8"), [1, 1], value=1000)),
    "pad int32 value=nan": ("pad", lambda d: hw.pad(_x(d, "int32"), [1, 1], value=NAN)),
    "pad float16 value=1e5": ("pad", lambda d: hw.pad(_x(d, "float16"), [1, 1], value=1e5)),
    "pad [1.5, 1]": ("pad", lambda d: hw.pad(_x(d), [1.5, 1])),
    "pad 'ab'": ("pad", lambda d: hw.pad(_x(d), "ab")),
    "pad mode=3": ("pad", lambda d: hw.pad(_x(d), [1, 1], mode=3)),
    "pad [1<<40, 0]": ("pad", lambda d: hw.pad(_x(d), [HUGE, 0])),
    # values the dtype cannot hold
    "full nan int32": ("full", lambda d: hw.full([2], NAN, "int32", device=d)),
    "full inf int64": ("full", lambda d: hw.full([2], INF, "int64", device=d)),
    "full 1e40 float16": ("full", lambda d: hw.full([2], 1e40, "float16", device=d)),
    "full 1e40 float32": ("full", lambda d: hw.full([2], 1e40, "float32", device=d)),
    "full -1 uint8": ("full", lambda d: hw.full([2], -1, "uint8", device=d)),
    "full 'x'": ("full", lambda d: hw.full([2], "x", device=d)),
    "full shape 2.5": ("full", lambda d: hw.full(2.5, 1, device=d)),
    "full_like int8 300": ("full_like", lambda d: hw.full_like(_x(d, "int8"), 300)),
    "to_tensor 300 int8": ("to_tensor", lambda d: hw.to_tensor([300], dtype="int8", device=d)),
    "to_tensor nan int32": ("to_tensor", lambda d: hw.to_tensor([1.0, NAN], dtype="int32", device=d)),
    "to_tensor 1e40 default float32": ("to_tensor", lambda d: hw.to_tensor([1e40], device=d)),
    "to_tensor 1e5 float16": ("to_tensor", lambda d: hw.to_tensor(np.array([1e5]), dtype="float16", device=d)),
    "arange int8 beyond": ("arange", lambda d: hw.arange(0, 300, dtype="int8", device=d)),
    "arange float16 beyond": ("arange", lambda d: hw.arange(65000, 70000, 1000, dtype="float16", device=d)),
    "arange 'a'": ("arange", lambda d: hw.arange("a", device=d)),
    "arange inf": ("arange", lambda d: hw.arange(0, INF, device=d)),
    "arange step 0": ("arange", lambda d: hw.arange(0, 1, 0, device=d)),
    "arange fractional step, int dtype": ("arange", lambda d: hw.arange(0, 5, 0.5, dtype="int64", device=d)),
    "arange bool dtype": ("arange", lambda d: hw.arange(0, 2, dtype="bool", device=d)),
    "clip min='a'": ("clip", lambda d: hw.clip(_x(d), "a")),
    "clip min=True": ("clip", lambda d: hw.clip(_x(d), True)),
    "clip min=nan": ("clip", lambda d: hw.clip(_x(d), NAN)),
    "clip min>max": ("clip", lambda d: hw.clip(_x(d), 3, 1)),
    "add 1<<70 int64": ("add", lambda d: _x(d, "int64") + (1 << 70)),
    "add 1<<1100 float32": ("add", lambda d: _x(d) + (1 << 1100)),
    "where 'a'": ("where", lambda d: hw.where(_x(d) > 1, "a", _x(d))),
    # sizes no device has: refused before anything is allocated
    "zeros 1<<40": ("zeros", lambda d: hw.zeros([HUGE], device=d)),
    "ones 1<<40 x 1<<40": ("ones", lambda d: hw.ones([HUGE, HUGE], device=d)),
    "zeros -1": ("zeros", lambda d: hw.zeros([-1], device=d)),
    "zeros 'a'": ("zeros", lambda d: hw.zeros("a", device=d)),
    "zeros 1<<70": ("zeros", lambda d: hw.zeros([1 << 70], device=d)),
    "rand 1<<40": ("rand", lambda d: hw.rand([HUGE], device=d)),
    "randn 2.5": ("randn", lambda d: hw.randn(2.5, device=d)),
    "arange 1<<62": ("arange", lambda d: hw.arange(0, 1 << 62, device=d)),
    "matmul to 1<<40 elements": ("matmul", lambda d: hw.matmul(hw.zeros([1 << 20, 1], device=d),
                                                              hw.zeros([1, 1 << 20], device=d))),
    # reductions and flags
    "sum axis=1.5": ("sum", lambda d: hw.sum(_x(d), 1.5)),
    "sum keepdim='yes'": ("sum", lambda d: hw.sum(_x(d), 0, keepdim="yes")),
    "sum dtype='complex64'": ("sum", lambda d: hw.sum(_x(d), dtype="complex64")),
    "mean axis=[0, 0]": ("mean", lambda d: hw.mean(_x(d), [0, 0])),
    "argmax axis='a'": ("argmax", lambda d: hw.argmax(_x(d), "a")),
    "argmin keepdim='no'": ("argmin", lambda d: hw.argmin(_x(d), 0, keepdim="no")),
    "max axis=5": ("max", lambda d: hw.max(_x(d), 5)),
    "softmax axis=0.5": ("softmax", lambda d: F.softmax(_x(d), 0.5)),
    "log_softmax axis='a'": ("log_softmax", lambda d: F.log_softmax(_x(d), "a")),
    "layer_norm normalized_shape=4.0": ("layer_norm", lambda d: F.layer_norm(_x(d), 4.0)),
    "layer_norm normalized_shape='a'": ("layer_norm", lambda d: F.layer_norm(_x(d), "a")),
    "layer_norm epsilon='x'": ("layer_norm", lambda d: F.layer_norm(_x(d), 4, epsilon="x")),
    "layer_norm epsilon=-1": ("layer_norm", lambda d: F.layer_norm(_x(d), 4, epsilon=-1.0)),
    "layer_norm epsilon beyond float32": ("layer_norm", lambda d: F.layer_norm(_x(d), 4, epsilon=1e167)),
    "batch_norm training='no'": ("batch_norm", lambda d: F.batch_norm(_img(d), None, None, training="no")),
    "batch_norm epsilon=nan": ("batch_norm", lambda d: F.batch_norm(_img(d), None, None, epsilon=NAN)),
    "gelu approximate='yes'": ("gelu", lambda d: hw.gelu(_x(d), "yes")),
    "matmul transpose_x='yes'": ("matmul", lambda d: hw.matmul(_x(d), _x(d), transpose_x="yes")),
    "cast 'complex64'": ("cast", lambda d: hw.cast(_x(d), "complex64")),
    "seed -1": ("seed", lambda d: hw.seed(-1)),
    "seed 1.5": ("seed", lambda d: hw.seed(1.5)),
    "getitem float": ("index", lambda d: _x(d)[1.5]),
    "getitem slice of floats": ("slice", lambda d: _x(d)[0.5:2]),
    "getitem float array": ("gather", lambda d: _x(d)[np.array([0.5])]),
    # more axes than a tensor has (numpy's 64): refused before any kernel runs, never blamed on the plugin
    "zeros of rank 65": ("zeros", lambda d: hw.zeros([1] * 65, device=d)),
    "full of rank 65": ("full", lambda d: hw.full([1] * 65, 2.0, device=d)),
    "reshape to rank 65": ("reshape", lambda d: _x(d).reshape([1] * 63 + [3, 4])),
    "unsqueeze to rank 65": ("unsqueeze", lambda d: hw.zeros([1] * 64, device=d).unsqueeze(0)),
    "x[None] to rank 65": ("indexing", lambda d: hw.zeros([1] * 64, device=d)[None]),
    "expand to rank 65": ("expand", lambda d: _x(d).expand([1] * 63 + [3, 4])),
    "gather to rank 65": ("gather", lambda d: hw.gather(_x(d), hw.zeros([1] * 64, "int64", device=d), axis=1)),
    # numpy's rules refuse it: the fix says what to use instead
    "matmul of a 0-d tensor": ("matmul", lambda d: hw.matmul(_x(d), hw.to_tensor(np.float32(2), device=d))),
    "0-d @ x": ("matmul", lambda d: hw.to_tensor(np.float32(2), device=d) @ _x(d)),
    # indices outside the axis, held by a tensor: checked by the kernels, which never read outside x
    "gather index 4 of 4": ("gather", lambda d: hw.gather(_x(d), hw.to_tensor([4], device=d), axis=1)),
    "gather index -4 of 3": ("gather", lambda d: hw.gather(_x(d), hw.to_tensor([-4], device=d))),
    "x[tensor] out of range": ("gather", lambda d: _x(d)[hw.to_tensor([0, 3], device=d)]),
    # other libraries' spellings
    "softmax dim=-1": ("softmax", lambda d: F.softmax(_x(d), dim=-1)),
    "sum dim=0": ("sum", lambda d: hw.sum(_x(d), dim=0)),
    "argmax keepdims=True": ("argmax", lambda d: hw.argmax(_x(d), 0, keepdims=True)),
    "transpose dims=": ("transpose", lambda d: hw.transpose(_x(d), dims=(1, 0))),
    "x.sum(dim=0)": ("sum", lambda d: _x(d).sum(dim=0)),
    "add out=": ("add", lambda d: hw.add(_x(d), _x(d), out=_x(d))),
    "reshape missing shape": ("reshape", lambda d: hw.reshape(_x(d))),
    "exp extra argument": ("exp", lambda d: hw.exp(_x(d), 2)),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_our_error_naming_the_op_and_the_fix(case, device):
    op, call = BAD[case]
    with pytest.raises(HwAdapterError) as info:
        call(device)
    message = str(info.value)
    assert op in message, f"{case}: the message does not name {op!r}: {message}"
    assert "Fix" in message or info.value.fix, f"{case}: the message gives no fix: {message}"
    assert "vendor" not in message, f"{case}: an input mistake blamed on a plugin: {message}"


# Every binary operator and its reflected form, as (op named, call(x, scalar)).
OPERATORS = {
    "+": ("add", lambda x, s: x + s), "r+": ("add", lambda x, s: s + x),
    "-": ("subtract", lambda x, s: x - s), "r-": ("subtract", lambda x, s: s - x),
    "*": ("multiply", lambda x, s: x * s), "r*": ("multiply", lambda x, s: s * x),
    "/": ("divide", lambda x, s: x / s), "r/": ("divide", lambda x, s: s / x),
    "**": ("pow", lambda x, s: x ** s), "r**": ("pow", lambda x, s: s ** x),
    "%": ("remainder", lambda x, s: x % s), "r%": ("remainder", lambda x, s: s % x),
    "<": ("less_than", lambda x, s: x < s), "r<": ("greater_than", lambda x, s: s < x),
    "==": ("equal", lambda x, s: x == s), "!=": ("not_equal", lambda x, s: x != s),
    "&": ("logical_and", lambda x, s: x & s), "|": ("logical_or", lambda x, s: x | s),
    "maximum": ("maximum", lambda x, s: hw.maximum(x, s)), "minimum": ("minimum", lambda x, s: hw.minimum(s, x)),
    "where": ("where", lambda x, s: hw.where(x > 1, s, x)),
}


@pytest.mark.parametrize("scalar", [np.longdouble(1), np.clongdouble(1), np.complex64(1), np.datetime64(1, "s")],
                         ids=lambda s: type(s).__name__)
def test_numpy_scalars_no_dtype_holds_are_refused_naming_the_op(scalar, device):
    """numpy's longdouble, complex and datetime scalars on either side of every operator: our error naming the op,
    the tensor's dtype and the scalar's type, with a fix; never 'cannot combine a tensor with a longdouble'."""
    x = _x(device)
    failures = []
    for case, (op, call) in OPERATORS.items():
        try:
            call(x, scalar)
            failures.append(f"{case}: accepted")
        except hw.UnsupportedDTypeError as err:
            text = str(err)
            if not (text.startswith(f"{op}:") and type(scalar).__name__ in text and "Fix:" in text):
                failures.append(f"{case}: {text}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("keyword, right", [("dim", "axis="), ("keepdims", "keepdim=")])
def test_other_libraries_keywords_name_ours(keyword, right, device):
    x = _x(device)
    with pytest.raises(InvalidArgumentError, match=f"argmax.*{keyword}.*Fix: use {right}"):
        hw.argmax(x, **{keyword: 0})
    with pytest.raises(InvalidArgumentError, match="softmax.*'dim'.*Fix: use axis="):
        F.softmax(x, dim=-1)


def test_operators_bypass_the_keyword_check():
    """x + y stays on the fast path: the operator is the op itself, the keyword check is for calls only."""
    x = hw.to_tensor([1.0])
    assert (x + x).item() == 2.0
    assert hw.Tensor.__add__ is hw.add.__wrapped__
    assert hw.Tensor.__getitem__ is hw.ops.api.getitem


def test_a_type_error_inside_an_op_is_not_renamed(monkeypatch):
    """The keyword check only explains calls that do not bind; an error inside the op is left as it is."""
    def boom(*args, **kwargs):
        raise TypeError("from inside")
    wrapped = _common.public(boom, "boom")
    with pytest.raises(TypeError, match="from inside"):
        wrapped(1)


# --- the values kernels receive -------------------------------------------------------------------------------
def test_values_reach_kernels_in_the_dtype(device):
    """What is accepted is exactly what numpy's cast gives (floats truncate toward zero, float16 rounds)."""
    assert hw.full([2], 65519, "float16", device=device).numpy().tolist() == [65504.0, 65504.0]
    assert hw.full([1], INF, "float16", device=device).numpy().tolist() == [INF]
    assert hw.full([1], -128.9, "int8", device=device).numpy().tolist() == [-128]
    assert hw.to_tensor([1.9, -2.9], dtype="int8", device=device).numpy().tolist() == [1, -2]
    assert hw.pad(_x(device, "uint8"), [1, 0], value=255.5).numpy()[0].tolist() == [255, 0, 1, 2, 3]
    assert hw.arange(-128, 128, 64, dtype="int8", device=device).numpy().tolist() == [-128, -64, 0, 64]
    assert hw.arange(0, 70000, 65000, dtype="float16", device=device).numpy().tolist() == \
        np.array([0, 65000], np.float16).tolist()


@settings(max_examples=150, deadline=None)
@given(value=st.one_of(st.integers(-(1 << 70), 1 << 70), st.floats(width=64)),
       dtype=st.sampled_from(["int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"]))
def test_full_refuses_exactly_what_its_dtype_cannot_hold(value, dtype):
    """Oracle: Python's exact arithmetic for integers, numpy's own rounding for floats."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        fits = math.isfinite(value) and np.iinfo(dt).min <= math.trunc(value) <= np.iinfo(dt).max
    else:
        with np.errstate(over="ignore"):
            fits = not math.isfinite(value) or abs(value) <= sys.float_info.max and bool(
                np.isfinite(np.asarray(float(value), dt)))
    if not fits:
        with pytest.raises(InvalidArgumentError, match=f"full.*{dtype}"):
            hw.full([1], value, dtype)
        return
    out = hw.full([1], value, dtype).numpy()
    expected = math.trunc(value) if dt.kind in "iu" else np.asarray(float(value), dt)
    np.testing.assert_array_equal(out, np.array([expected], dt))


# --- sizes that cannot exist ----------------------------------------------------------------------------------
def test_a_result_beyond_the_device_memory_is_refused_before_allocating(device, monkeypatch):
    """With the device said to have 64 MiB, a 256 MiB zeros is refused and no memory is taken on the host."""
    monkeypatch.setattr(memory, "device_memory", lambda dev: 1 << 26)
    x = _x(device)
    tracemalloc.start()
    try:
        for op, call in [("zeros", lambda: hw.zeros([1 << 26], device=device)),
                         ("pad", lambda: hw.pad(x, [0, 1 << 24])),
                         ("expand", lambda: hw.expand(x, [1 << 21, 3, 4])),
                         ("arange", lambda: hw.arange(1 << 26, device=device))]:
            with pytest.raises(OutOfMemoryError) as info:
                call()
            message = str(info.value)
            assert op in message and device in message and "MiB" in message and "Fix" in message, message
        assert tracemalloc.get_traced_memory()[1] < 1 << 22  # peak: nothing near the refused size
    finally:
        tracemalloc.stop()


# --- inputs on two devices ------------------------------------------------------------------------------------
MULTI_INPUT = {  # a and b: (3, 4) float32 tensors, on two devices
    "where": lambda a, b: hw.where(a > 0, a, b),
    "concat": lambda a, b: hw.concat([a, b]),
    "add": lambda a, b: a + b,
    "matmul": lambda a, b: hw.matmul(a, hw.transpose(b)),
    "linear": lambda a, b: F.linear(a, hw.transpose(b)),
    "conv2d": lambda a, b: F.conv2d(hw.reshape(a, [1, 1, 3, 4]), hw.reshape(b, [3, 1, 2, 2])),
    "conv2d bias": lambda a, b: F.conv2d(hw.reshape(a, [1, 1, 3, 4]), hw.ones([1, 1, 2, 2], device=a.device),
                                         bias=b[0, :1]),
    "layer_norm weight": lambda a, b: F.layer_norm(a, 4, weight=b[0]),
    "layer_norm bias": lambda a, b: F.layer_norm(a, 4, bias=b[0]),
    "batch_norm running_mean": lambda a, b: F.batch_norm(a, b[0], None),
    "gather": lambda a, b: hw.gather(a, hw.cast(b[0, :2], "int64")),
}


@pytest.mark.parametrize("op", list(MULTI_INPUT))
def test_inputs_on_two_devices_are_refused_naming_both(op, device):
    if device == "cpu:0":
        pytest.skip("needs a second device")
    a, b = _x("cpu:0"), _x(device)
    for first, second in ((a, b), (b, a)):
        with pytest.raises(HwAdapterError) as info:
            MULTI_INPUT[op](first, second)
        message = str(info.value)
        assert "cpu:0" in message and device in message and "Fix" in message, message


# --- fuzz: random junk attributes -----------------------------------------------------------------------------
# Ints stay small or far beyond any device: a fuzz must not allocate gigabytes that happen to fit.
_INTS = st.one_of(st.integers(-6, 6), st.sampled_from([1 << 40, 1 << 62, (1 << 63) - 1, 1 << 63, 1 << 64, -(1 << 63),
                                                       -(1 << 70)]))
_ATOMS = st.one_of(st.none(), st.booleans(), _INTS, st.floats(), st.text(max_size=3),
                   st.sampled_from([np.int32(2), np.float32(1.5), np.array([1, 0]), np.array(1.5), (), []]))
JUNK = st.one_of(_ATOMS, st.lists(_ATOMS, max_size=4), st.tuples(_INTS, _INTS),
                 st.lists(st.lists(_INTS, max_size=3), max_size=3))

FUZZ = {
    "reshape": lambda x, j: hw.reshape(x, j), "transpose": lambda x, j: hw.transpose(x, j),
    "flatten": lambda x, j: hw.flatten(x, j), "squeeze": lambda x, j: hw.squeeze(x, j),
    "unsqueeze": lambda x, j: hw.unsqueeze(x, j), "split": lambda x, j: hw.split(x, j),
    "split axis": lambda x, j: hw.split(x, 1, axis=j), "concat axis": lambda x, j: hw.concat([x, x], j),
    "slice axes": lambda x, j: hw.slice(x, j, [0], [1]), "slice starts": lambda x, j: hw.slice(x, [0], j, [2]),
    "slice ends": lambda x, j: hw.slice(x, [1], [0], j), "slice strides": lambda x, j: hw.slice(x, [0], [0], [3], j),
    "gather": lambda x, j: hw.gather(x, j), "gather axis": lambda x, j: hw.gather(x, [0], axis=j),
    "expand": lambda x, j: hw.expand(x, j), "pad": lambda x, j: hw.pad(x, j),
    "pad mode": lambda x, j: hw.pad(x, [1, 1], mode=j), "pad value": lambda x, j: hw.pad(x, [1, 0], value=j),
    "full shape": lambda x, j: hw.full(j, 1, device=x.device), "full value": lambda x, j: hw.full([2], j, "int8"),
    "full dtype": lambda x, j: hw.full([2], 1, j), "zeros": lambda x, j: hw.zeros(j, device=x.device),
    "arange end": lambda x, j: hw.arange(0, j, device=x.device), "arange step": lambda x, j: hw.arange(0, 4, j),
    "arange dtype": lambda x, j: hw.arange(0, 4, 1, j), "sum axis": lambda x, j: hw.sum(x, j),
    "sum keepdim": lambda x, j: hw.sum(x, 0, keepdim=j), "argmax": lambda x, j: hw.argmax(x, j),
    "clip min": lambda x, j: hw.clip(x, j), "clip max": lambda x, j: hw.clip(x, None, j),
    "softmax": lambda x, j: F.softmax(x, j), "layer_norm": lambda x, j: F.layer_norm(x, j),
    "layer_norm epsilon": lambda x, j: F.layer_norm(x, 3, epsilon=j),
    "conv2d stride": lambda x, j: F.conv2d(hw.reshape(x, [1, 1, 2, 3]), hw.ones([1, 1, 1, 1]), stride=j),
    "conv2d padding": lambda x, j: F.conv2d(hw.reshape(x, [1, 1, 2, 3]), hw.ones([1, 1, 1, 1]), padding=j),
    "conv2d dilation": lambda x, j: F.conv2d(hw.reshape(x, [1, 1, 2, 3]), hw.ones([1, 1, 1, 1]), dilation=j),
    "conv2d groups": lambda x, j: F.conv2d(hw.reshape(x, [1, 1, 2, 3]), hw.ones([1, 1, 1, 1]), groups=j),
    "max_pool2d": lambda x, j: F.max_pool2d(hw.reshape(x, [1, 1, 2, 3]), j),
    "avg_pool2d stride": lambda x, j: F.avg_pool2d(hw.reshape(x, [1, 1, 2, 3]), 1, stride=j),
    "adaptive_avg_pool2d": lambda x, j: F.adaptive_avg_pool2d(hw.reshape(x, [1, 1, 2, 3]), j),
    "getitem": lambda x, j: x[j], "cast": lambda x, j: hw.cast(x, j),
    "to_tensor": lambda x, j: hw.to_tensor(j, device=x.device),
    "to_tensor dtype": lambda x, j: hw.to_tensor([1, 2], dtype=j, device=x.device),
    "where": lambda x, j: hw.where(x > 1, j, x), "add": lambda x, j: x + j,
    "matmul": lambda x, j: hw.matmul(x, hw.transpose(x), transpose_x=j), "gelu": lambda x, j: hw.gelu(x, j),
    "seed": lambda x, j: hw.seed(j), "rand": lambda x, j: hw.rand(j),
    "astype": lambda x, j: x.astype(j), "to dtype": lambda x, j: x.to(dtype=j),
    "prod dtype": lambda x, j: hw.prod(x, dtype=j), "mean axis": lambda x, j: hw.mean(x, j),
    "ones_like dtype": lambda x, j: hw.ones_like(x, j), "full_like value": lambda x, j: hw.full_like(x, j),
    "flatten stop_axis": lambda x, j: hw.flatten(x, 0, j), "matmul operand": lambda x, j: hw.matmul(x, j),
    "batch_norm data_format": lambda x, j: F.batch_norm(x, None, None, data_format=j),
    "max_pool2d padding": lambda x, j: F.max_pool2d(hw.reshape(x, [1, 1, 2, 3]), 2, padding=j),
    "conv2d data_format": lambda x, j: F.conv2d(hw.reshape(x, [1, 1, 2, 3]), hw.ones([1, 1, 1, 1]), data_format=j),
    "maximum": lambda x, j: hw.maximum(x, j), "clip both": lambda x, j: hw.clip(x, j, j),
}


def test_junk_attributes_raise_only_our_errors(device):
    """Every op x random junk: it works, or raises an HwAdapterError; nothing else escapes (bounded in time)."""
    x = hw.to_tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)

    @settings(max_examples=1500 if device == "cpu:0" else 400, deadline=None, database=None)
    @given(op=st.sampled_from(sorted(FUZZ)), junk=JUNK)
    def fuzz(op, junk):
        try:
            out = FUZZ[op](x, junk)
        except HwAdapterError as err:
            assert str(err), op
            return
        assert out is None or isinstance(out, (hw.Tensor, list)), (op, junk, out)

    fuzz()


def _ops():
    """Every public op and nn.functional function, by name."""
    ops = [(name, getattr(hw, name)) for name in hw.ops.api.__all__]
    return ops + [(f"nn.functional.{name}", getattr(F, name)) for name in F.__all__]


@pytest.mark.parametrize("name, fn", _ops(), ids=[name for name, _ in _ops()])
def test_every_op_explains_a_foreign_keyword(name, fn):
    """One mechanism for all: a keyword the op does not take is our error naming the op and its parameters (torch's
    `dim`; `axis` for the ops that take paddle's `dim`, as cumprod does)."""
    import inspect
    foreign = "axis" if "dim" in inspect.signature(inspect.unwrap(fn)).parameters else "dim"
    with pytest.raises(InvalidArgumentError, match=f"{name.rsplit('.', 1)[-1]}: got an unexpected keyword "
                                                   f"argument '{foreign}'. Fix: .*\\("):
        fn(hw.to_tensor([1.0]), **{foreign: 0})
