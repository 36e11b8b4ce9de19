"""Elementwise ops (unary, binary with broadcasting, where, cast, clip) against independent numpy oracles,
on every device, over every dtype an op accepts, with empty and 0-d shapes, and their error paths."""
from __future__ import annotations

import math
import warnings
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hwadapter as hw
from hwadapter import InvalidArgumentError, UnsupportedDTypeError

import oracles
from oracles import assert_close

ALL = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8"]
FLOATS = ["float16", "float32", "float64"]
NUMERIC = INTS + FLOATS
SHAPES = [(), (0,), (5,), (2, 3), (2, 0, 3)]
HYPO = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def rng_for(*key):
    """A generator seeded by the test's parameters (stable across runs, unlike hash())."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def mk(arr, device):
    return hw.to_tensor(np.asarray(arr), device=device)


def sample(dtype, shape, rng, domain="any"):
    """Random values of `dtype`: ints small enough not to overflow, floats in a range suited to the op."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return np.ones(shape, bool) if domain in ("positive", "nonzero") else rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        lo, hi = {"any": (-6, 7), "positive": (1, 9), "nonzero": (1, 7)}[domain]
        if dt.kind == "u":
            lo = max(lo, 0)
        out = rng.integers(lo, hi, shape).astype(dt)
        if domain == "nonzero" and dt.kind == "i":
            out = out * rng.choice(np.array([-1, 1], dt), shape)
        return out
    lo, hi = {"any": (-3.0, 3.0), "positive": (0.1, 4.0), "nonzero": (0.25, 3.0)}[domain]
    out = rng.uniform(lo, hi, shape)
    if domain == "nonzero":
        out *= rng.choice([-1.0, 1.0], shape)
    return out.astype(dt)


def float_result(dtype):
    """The dtype of a float-valued op: floats keep theirs, bool and integers give float32."""
    return np.dtype(dtype) if dtype in FLOATS else np.dtype("float32")


# --- unary -----------------------------------------------------------------------------------------------
# name -> (function, float64 oracle, input domain, dtype rule)
#   float: any dtype, integers and bool compute in float32; numeric: bool rejected, dtype kept;
#   rounding: bool rejected, integers returned unchanged; logical: anything, bool out.
UNARY = {
    "abs": (hw.abs, np.abs, "any", "numeric"),
    "neg": (hw.neg, lambda x: -x, "any", "numeric"),
    "exp": (hw.exp, np.exp, "any", "float"),
    "log": (hw.log, np.log, "positive", "float"),
    "sqrt": (hw.sqrt, np.sqrt, "positive", "float"),
    "rsqrt": (hw.rsqrt, lambda x: 1.0 / np.sqrt(x), "positive", "float"),
    "reciprocal": (hw.reciprocal, lambda x: 1.0 / x, "nonzero", "float"),
    "sigmoid": (hw.sigmoid, oracles.sigmoid, "any", "float"),
    "tanh": (hw.tanh, np.tanh, "any", "float"),
    "relu": (hw.relu, lambda x: np.where(x > 0, x, 0), "any", "numeric"),
    "erf": (hw.erf, oracles.erf, "any", "float"),
    "sin": (hw.sin, np.sin, "any", "float"),
    "cos": (hw.cos, np.cos, "any", "float"),
    "floor": (hw.floor, np.floor, "any", "rounding"),
    "ceil": (hw.ceil, np.ceil, "any", "rounding"),
    "round": (hw.round, oracles.round_half_even, "any", "rounding"),
    "sign": (hw.sign, np.sign, "any", "numeric"),
    "logical_not": (hw.logical_not, lambda x: x == 0, "any", "logical"),
    "gelu": (hw.gelu, oracles.gelu, "any", "float"),
    "gelu_tanh": (lambda x: hw.gelu(x, approximate=True), lambda x: oracles.gelu(x, True), "any", "float"),
}


def _expected_unary(name, arr):
    _, oracle, _, rule = UNARY[name]
    if rule == "numeric" and arr.dtype.kind in "iu":
        return oracle(arr.astype(np.int64)).astype(arr.dtype), arr.dtype  # wraps like the dtype (abs(-128))
    if rule == "rounding" and arr.dtype.kind in "iu":
        return arr.copy(), arr.dtype
    if rule == "logical":
        return oracle(arr), np.dtype(bool)
    out_dt = float_result(arr.dtype.name) if rule == "float" else arr.dtype
    return oracle(arr.astype(np.float64)), out_dt


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(name, device):
    """Every dtype (bool rejected where the op is arithmetic), 0-d, empty and ordinary shapes."""
    fn, _, domain, rule = UNARY[name]
    for dtype in ALL:
        rng = rng_for(name, dtype)
        for shape in SHAPES:
            arr = sample(dtype, shape, rng, domain)
            x = mk(arr, device)
            if dtype == "bool" and rule in ("numeric", "rounding"):
                with pytest.raises(UnsupportedDTypeError, match=name.split("_")[0]):
                    fn(x)
                continue
            out = fn(x)
            expected, out_dt = _expected_unary(name, arr)
            assert out.device == x.device
            assert_close(out.numpy(), expected, out_dt, err_msg=f"{name} {dtype} {shape}")


def test_unary_methods_and_operators(device):
    arr = np.array([[-1.5, 0.0, 2.25]], np.float32)
    x = mk(arr, device)
    assert_close((-x).numpy(), -arr, "float32")
    assert_close(abs(x).numpy(), np.abs(arr), "float32")
    assert_close(x.exp().numpy(), np.exp(arr), "float32")
    assert_close(x.abs().numpy(), np.abs(arr), "float32")
    assert_close(abs(x).sqrt().numpy(), np.sqrt(np.abs(arr)), "float32")
    assert_close((~mk([True, False], device)).numpy(), np.array([False, True]), "bool")


def test_round_is_half_to_even(device):
    arr = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, -3.7], np.float32)
    for dt in FLOATS:
        out = hw.round(mk(arr.astype(dt), device)).numpy()
        assert_close(out, [-2, -2, -0.0, 0, 2, 2, 4, 0, -4], dt)


def test_special_values(device):
    for dtype in FLOATS:
        _special_values(dtype, device)


def _special_values(dtype, device):
    """inf and nan are the semantics at the edges of each domain, and come without numpy warnings."""
    inf, nan = np.inf, np.nan
    x = mk(np.array([0.0, -1.0, inf, -inf, nan], dtype), device)
    big_expected = [0.0, math.exp(-80), math.exp(80) if dtype != "float16" else inf, inf]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_close(hw.log(x).numpy(), [-inf, nan, inf, nan, nan], dtype)
        assert_close(hw.sqrt(x).numpy(), [0, nan, inf, nan, nan], dtype)
        assert_close(hw.reciprocal(x).numpy(), [inf, -1, 0, -0.0, nan], dtype)
        assert_close(hw.rsqrt(x).numpy(), [inf, nan, 0, nan, nan], dtype)
        assert_close(hw.exp(x).numpy(), [1, math.exp(-1), inf, 0, nan], dtype)
        assert_close(hw.sigmoid(x).numpy(), [0.5, oracles.sigmoid(-1.0), 1, 0, nan], dtype)
        assert_close(hw.tanh(x).numpy(), [0, math.tanh(-1), 1, -1, nan], dtype)
        assert_close(hw.erf(x).numpy(), [0, math.erf(-1), 1, -1, nan], dtype)
        assert_close(hw.relu(x).numpy(), [0, 0, inf, 0, nan], dtype)
        assert_close(hw.sign(x).numpy(), [0, -1, 1, -1, nan], dtype)
        assert_close(hw.gelu(x).numpy(), [0, oracles.gelu(-1.0), inf, 0, nan], dtype, atol=1e-3)
        big = mk(np.array([-1e4, -80.0, 80.0, 1e4], dtype), device)
        assert_close(hw.exp(big).numpy(), big_expected, dtype)
        div = hw.divide(mk(np.array([1.0, -1.0, 0.0], dtype), device), mk(np.array([0.0, 0.0, 0.0], dtype), device))
        assert_close(div.numpy(), [inf, -inf, nan], dtype)


def test_sigmoid_tails_keep_relative_precision(device):
    """sigmoid(-20) is 2.06e-9, not 0: the tails are computed without cancellation."""
    for dtype in ("float32", "float64"):
        arr = np.array([-80.0, -40.0, -20.0, -5.0, 0.0, 5.0, 20.0, 40.0], dtype)
        assert_close(hw.sigmoid(mk(arr, device)).numpy(), oracles.sigmoid(arr), dtype, atol=0)


def test_erf_and_gelu_accuracy(device):
    for dtype in FLOATS:
        _erf_and_gelu_accuracy(dtype, device)


def _erf_and_gelu_accuracy(dtype, device):
    """erf and exact gelu to the dtype's rounding over small, medium and large arguments."""
    mags = np.array([1e-7, 1e-5, 1e-3, 0.05, 0.3, 0.7, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.5, 6.0, 10.0])
    arr = np.concatenate([mags, -mags]).astype(dtype)
    rtol = {"float16": 1e-3, "float32": 1e-6, "float64": 1e-13}[dtype]
    atol = {"float16": 1e-7, "float32": 0.0, "float64": 0.0}[dtype]  # float16's subnormal spacing is 6e-8
    assert_close(hw.erf(mk(arr, device)).numpy(), oracles.erf(arr), dtype, rtol=rtol, atol=atol)
    assert_close(hw.gelu(mk(arr, device)).numpy(), oracles.gelu(arr), dtype, rtol=rtol * 4, atol=atol)
    # the tanh form is a formula, not a function with a precise value: compare where it is well conditioned
    assert_close(hw.gelu(mk(arr, device), approximate=True).numpy(), oracles.gelu(arr, True), dtype,
                 rtol=rtol * 4, atol={"float16": 1e-4, "float32": 1e-7, "float64": 1e-14}[dtype])


def test_unary_errors(device):
    with pytest.raises(InvalidArgumentError, match="exp"):
        hw.exp([1.0, 2.0])
    with pytest.raises(InvalidArgumentError, match="abs"):
        hw.abs(np.ones(3))
    with pytest.raises(UnsupportedDTypeError, match="neg"):
        -mk([True], device)
    with pytest.raises(UnsupportedDTypeError, match="relu"):
        hw.relu(mk([True], device))
    with pytest.raises(InvalidArgumentError, match="gelu"):
        hw.gelu(3.0)


# --- binary ------------------------------------------------------------------------------------------------
# name -> (function, oracle on promoted arrays, kind, rhs domain)
#   arith: bool rejected, promoted dtype kept; div: bool rejected, integers -> float32;
#   compare: any dtype -> bool; logical: any dtype, non-zero is true -> bool.
def _int_pow(a, b):
    a, b = np.broadcast_arrays(a, b)
    return np.array([x ** y for x, y in zip(a.ravel().tolist(), b.ravel().tolist())], np.int64).reshape(a.shape)


BINARY = {
    "add": (hw.add, np.add, "arith", "any"),
    "subtract": (hw.subtract, np.subtract, "arith", "any"),
    "multiply": (hw.multiply, np.multiply, "arith", "any"),
    "divide": (hw.divide, lambda a, b: a.astype(np.float64) / b, "div", "nonzero"),
    "pow": (hw.pow, None, "arith", "pow"),
    "maximum": (hw.maximum, lambda a, b: np.where(a >= b, a, b), "arith", "any"),
    "minimum": (hw.minimum, lambda a, b: np.where(a <= b, a, b), "arith", "any"),
    "mod": (hw.mod, oracles.floor_mod, "arith", "nonzero"),
    "equal": (hw.equal, lambda a, b: a == b, "compare", "any"),
    "not_equal": (hw.not_equal, lambda a, b: a != b, "compare", "any"),
    "less_than": (hw.less_than, lambda a, b: a < b, "compare", "any"),
    "less_equal": (hw.less_equal, lambda a, b: a <= b, "compare", "any"),
    "greater_than": (hw.greater_than, lambda a, b: a > b, "compare", "any"),
    "greater_equal": (hw.greater_equal, lambda a, b: a >= b, "compare", "any"),
    "logical_and": (hw.logical_and, lambda a, b: (a != 0) & (b != 0), "logical", "any"),
    "logical_or": (hw.logical_or, lambda a, b: (a != 0) | (b != 0), "logical", "any"),
    "logical_xor": (hw.logical_xor, lambda a, b: (a != 0) ^ (b != 0), "logical", "any"),
}


def _binary_inputs(name, dtype, shapes, rng):
    _, _, kind, domain = BINARY[name]
    a = sample(dtype, shapes[0], rng)
    if name == "pow":
        a = sample(dtype, shapes[0], rng, "positive" if dtype in FLOATS else "any")
        b = rng.integers(0, 4, shapes[1]).astype(dtype) if dtype in INTS else sample(dtype, shapes[1], rng)
    elif name == "mod" and dtype in FLOATS:  # multiples of 1/4 and 1/2: every remainder is exact
        a = (rng.integers(-24, 25, shapes[0]) / 4).astype(dtype)
        b = (rng.choice([-5, -3, -2, -1, 1, 2, 3, 5], shapes[1]) / 2).astype(dtype)
    else:
        b = sample(dtype, shapes[1], rng, domain)
    if kind == "compare" and a.size and b.size and dtype != "bool":  # some ties
        b.flat[0] = a.flat[0] if b.shape == a.shape else b.flat[0]
    return a, b


def _expected_binary(name, a, b):
    _, oracle, kind, _ = BINARY[name]
    dt = a.dtype
    if kind in ("compare", "logical"):
        return oracle(a, b), np.dtype(bool)
    if kind == "div":
        return oracle(a, b), float_result(dt.name)
    if name == "pow":
        if dt.kind in "iu":
            return _int_pow(a, b).astype(dt), dt
        return np.power(a.astype(np.float64), b.astype(np.float64)), dt
    if dt.kind in "iu":
        return np.asarray(oracle(a.astype(np.int64), b.astype(np.int64))).astype(dt), dt
    return oracle(a.astype(np.float64), b.astype(np.float64)), dt


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary(name, device):
    """Every dtype (bool rejected for arithmetic), with broadcasting, 0-d and empty operands."""
    fn, _, kind, _ = BINARY[name]
    cases = [((), ()), ((4,), (4,)), ((2, 3), (3,)), ((3, 1), (1, 4)), ((0, 3), (1, 3)), ((2, 1, 3), ())]
    for dtype in ALL:
        rng = rng_for(name, dtype)
        for shapes in cases:
            a, b = _binary_inputs(name, dtype, shapes, rng)
            x, y = mk(a, device), mk(b, device)
            if dtype == "bool" and kind in ("arith", "div"):
                with pytest.raises(UnsupportedDTypeError, match=fn.__name__):
                    fn(x, y)
                continue
            out = fn(x, y)
            expected, out_dt = _expected_binary(name, a, b)
            assert out.device == x.device
            assert_close(out.numpy(), expected, out_dt, err_msg=f"{name} {dtype} {shapes}")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, min_side=0, max_side=3),
       name=st.sampled_from(["add", "subtract", "multiply", "divide", "maximum", "less_than", "logical_xor"]),
       dtype=st.sampled_from(["int32", "float32", "float64"]))
def test_binary_broadcasting(shapes, name, dtype, device):
    """Any pair of broadcastable shapes (size-0 and 0-d included) broadcasts like numpy."""
    rng = np.random.default_rng(0)
    a, b = _binary_inputs(name, dtype, shapes.input_shapes, rng)
    fn = BINARY[name][0]
    out = fn(mk(a, device), mk(b, device))
    expected, out_dt = _expected_binary(name, a, b)
    assert out.shape == shapes.result_shape
    assert_close(out.numpy(), expected, out_dt)


def test_binary_mixed_dtypes(device):
    """Values are those of the promoted inputs (dtype rules themselves: test_dtypes.py)."""
    for pair in [("int8", "float32"), ("uint8", "int8"), ("int32", "int64"), ("float16", "float64"),
                 ("bool", "int16"), ("uint8", "float16"), ("bool", "float32")]:
        _mixed(pair, device)


def _mixed(pair, device):
    da, db = pair
    rng = np.random.default_rng(1)
    a, b = sample(da, (2, 3), rng), sample(db, (3,), rng, "nonzero")
    x, y = mk(a, device), mk(b, device)
    out_dt = hw.dtypes.result_type(np.dtype(da), np.dtype(db))
    assert_close(hw.add(x, y).numpy(), a.astype(np.float64) + b.astype(np.float64), out_dt)
    assert_close(hw.multiply(y, x).numpy(), a.astype(np.float64) * b.astype(np.float64), out_dt)
    assert_close(hw.less_than(x, y).numpy(), a.astype(np.float64) < b.astype(np.float64), "bool")
    assert_close(hw.divide(x, y).numpy(), a.astype(np.float64) / b.astype(np.float64), float_result(out_dt.name))


def test_integer_division_gives_float32(device):
    out = hw.divide(mk(np.array([7, -7, 1], np.int64), device), mk(np.array([2, 2, 3], np.int64), device))
    assert_close(out.numpy(), [3.5, -3.5, 1 / 3], "float32")


def test_mod_is_floor_mod(device):
    """The result has the sign of the divisor, as Python's %."""
    for dtype in ["int8", "int32", "int64", "float16", "float32", "float64"]:
        a = np.array([7, -7, 7, -7, 0, 6], dtype)
        b = np.array([3, 3, -3, -3, 5, -3], dtype)
        out = hw.mod(mk(a, device), mk(b, device))
        assert_close(out.numpy(), [1, 2, -2, -1, 0, 0], dtype)
        assert_close(hw.remainder(mk(a, device), 4).numpy(), [3, 1, 3, 1, 0, 2], dtype)
        assert_close((mk(a, device) % -4).numpy(), [-1, -3, -1, -3, 0, -2], dtype)


def test_integer_pow_negative_exponent(device):
    """An integer to a negative integer power is 1 / x**n truncated toward zero (never an error)."""
    base = mk(np.array([1, -1, -1, 2, -3, 5], np.int32), device)
    exp = mk(np.array([-1, -1, -2, -1, -2, -3], np.int32), device)
    assert_close(hw.pow(base, exp).numpy(), [1, -1, 1, 0, 0, 0], "int32")
    assert_close((mk(np.array([2, 3], np.int64), device) ** 2).numpy(), [4, 9], "int64")


def test_maximum_minimum_propagate_nan(device):
    for dtype in FLOATS:
        a = mk(np.array([np.nan, 1.0, 2.0], dtype), device)
        b = mk(np.array([0.0, np.nan, 1.0], dtype), device)
        assert_close(hw.maximum(a, b).numpy(), [np.nan, np.nan, 2.0], dtype)
        assert_close(hw.minimum(a, b).numpy(), [np.nan, np.nan, 1.0], dtype)


def test_comparisons_with_nan(device):
    a = mk(np.array([np.nan, 1.0], np.float32), device)
    assert_close(hw.equal(a, a).numpy(), [False, True], "bool")
    assert_close(hw.not_equal(a, a).numpy(), [True, False], "bool")
    assert_close(hw.less_equal(a, a).numpy(), [False, True], "bool")


def test_binary_errors(device):
    x = mk(np.ones((2, 3), np.float32), device)
    with pytest.raises(InvalidArgumentError, match="add.*broadcast"):
        hw.add(x, mk(np.ones(4, np.float32), device))
    with pytest.raises(InvalidArgumentError, match="mul"):
        hw.multiply(x, mk(np.ones((3, 2), np.int32), device))
    with pytest.raises(UnsupportedDTypeError, match="add"):
        mk([True], device) + mk([False], device)
    with pytest.raises(UnsupportedDTypeError, match="div"):
        hw.divide(mk([True], device), mk([True], device))
    with pytest.raises(UnsupportedDTypeError, match="mod"):
        hw.mod(mk([True], device), mk([True], device))
    with pytest.raises(InvalidArgumentError, match="add"):
        hw.add(x, "1")
    with pytest.raises(InvalidArgumentError, match="add"):
        hw.add(x, np.ones((2, 3)))
    with pytest.raises(InvalidArgumentError, match="add"):
        hw.add(1, 2)
    with pytest.raises(InvalidArgumentError, match="sub"):
        hw.subtract(x, None)
    with pytest.raises(InvalidArgumentError, match="greater"):
        hw.greater_than(x, mk(np.ones((4, 1, 2)), device))
    if device != "cpu:0":
        with pytest.raises(InvalidArgumentError, match="different devices"):
            hw.add(x, mk(np.ones((2, 3), np.float32), "cpu:0"))


def test_python_scalar_that_does_not_fit_is_an_error(device):
    x = mk(np.array([1, 2], np.int8), device)
    with pytest.raises(InvalidArgumentError, match="add.*1000.*int8"):
        x + 1000
    with pytest.raises(InvalidArgumentError, match="mul"):
        -1 * mk(np.array([1], np.uint8), device)
    with pytest.raises(InvalidArgumentError, match="add"):
        mk(np.array([1], np.int64), device) + 2 ** 70
    assert_close((x + 100).numpy(), [101, 102], "int8")
    assert_close((x + 200.0).numpy(), [201, 202], "float32")


# --- where ---------------------------------------------------------------------------------------------------
def test_where(device):
    rng = np.random.default_rng(3)
    for dtype in ALL:
        for cs, xs, ys in [((4,), (4,), (4,)), ((2, 3), (3,), (2, 1)), ((), (2,), ()), ((0, 3), (3,), (1, 3)),
                           ((2, 1), (1, 3), (2, 3)), ((), (), ())]:
            c, a, b = rng.integers(0, 2, cs).astype(bool), sample(dtype, xs, rng), sample(dtype, ys, rng)
            out = hw.where(mk(c, device), mk(a, device), mk(b, device))
            assert_close(out.numpy(), np.where(c, a, b), dtype, err_msg=f"{dtype} {cs} {xs} {ys}")


def test_where_condition_and_operand_kinds(device):
    c = np.array([1, 0, 3], np.int32)  # non-zero is true
    a = np.array([1.5, 2.5, 3.5], np.float32)
    b = np.array([10, 20, 30], np.int64)
    out = hw.where(mk(c, device), mk(a, device), mk(b, device))
    assert_close(out.numpy(), [1.5, 20, 3.5], "float32")
    cond = mk(c != 0, device)
    assert_close(hw.where(cond, mk(a, device), 0).numpy(), [1.5, 0, 3.5], "float32")
    assert_close(hw.where(cond, 7, mk(b, device)).numpy(), [7, 20, 7], "int64")
    assert_close(hw.where(cond, 1.0, 2.0).numpy(), [1, 2, 1], "float32")
    assert_close(hw.where(cond, 1, 2).numpy(), [1, 2, 1], "int64")
    assert_close(hw.where(cond, True, False).numpy(), [True, False, True], "bool")
    assert_close(hw.where(cond, 1, 2.5).numpy(), [1, 2.5, 1], "float32")
    assert hw.where(cond, 1, 2).device == cond.device


def test_where_errors(device):
    c = mk(np.array([True, False]), device)
    with pytest.raises(InvalidArgumentError, match="where"):
        hw.where(c, mk(np.ones(3), device), mk(np.ones(3), device))
    with pytest.raises(InvalidArgumentError, match="where"):
        hw.where(np.array([True]), 1.0, 2.0)
    with pytest.raises(InvalidArgumentError, match="where"):
        hw.where(c, "a", 2.0)


# --- cast -----------------------------------------------------------------------------------------------------
def _cast_source(src, dst, rng):
    nonneg = "uint8" in (src, dst) or dst == "bool"
    if src == "bool":
        return rng.integers(0, 2, 12).astype(bool)
    if src in INTS:
        lo = 0 if nonneg else -100
        return rng.integers(lo, 101, 12).astype(src)
    vals = rng.integers(0 if nonneg else -100, 101, 12) + rng.choice([0.0, 0.25, 0.5, 0.75], 12)
    vals[:2] = [0.0, 0.75]
    return vals.astype(src)


def _cast_oracle(arr, dst):
    if dst == "bool":
        return arr != 0
    if np.dtype(dst).kind in "iu" and arr.dtype.kind == "f":
        return np.array([math.trunc(float(v)) for v in arr], np.int64).astype(dst)  # toward zero
    return np.array(arr.tolist(), np.float64 if arr.dtype.kind == "f" else np.int64).astype(dst)


@pytest.mark.parametrize("src", ALL)
def test_cast(src, device):
    """To every dtype: float to int truncates toward zero, anything to bool is `!= 0`; 0-d and empty too."""
    rng = np.random.default_rng(7)
    for dst in ALL:
        arr = _cast_source(src, dst, rng)
        out = hw.cast(mk(arr, device), dst)
        assert_close(out.numpy(), _cast_oracle(arr, dst), dst, err_msg=f"{src}->{dst}")
        assert_close(hw.cast(mk(arr[3], device), dst).numpy(), _cast_oracle(arr[3:4], dst)[0], dst)
        assert hw.cast(mk(arr[:0].reshape(0, 3)[:, :0], device), dst).shape == (0, 0)


@pytest.mark.parametrize("src", ["float16", "float32", "float64"])
def test_cast_of_out_of_range_floats_to_narrow_ints_wraps_as_numpy(src, device):
    """C leaves float -> uint8 undefined out of range (x86 wraps, CUDA saturates); every device wraps, as numpy does
    here, for values whose truncation fits in int32."""
    x = np.array([-1.607, -200.5, -0.5, 3.9, 255.0, 300.7, -129.9, 40000.0], src)
    for dst in ("uint8", "int8", "int16"):
        with np.errstate(invalid="ignore"):
            want = x.astype(np.int64).astype(dst)
        np.testing.assert_array_equal(hw.cast(mk(x, device), dst).numpy(), want, err_msg=f"{src}->{dst}")


def test_cast_dtype_spellings(device):
    x = mk(np.array([1.7, -2.2], np.float64), device)
    for spelling, dt in [("float32", "float32"), (hw.float16, "float16"), (np.int32, "int32"), (float, "float32"),
                         (int, "int64"), (bool, "bool"), ("half", "float16"), ("double", "float64"),
                         ("bool", "bool"), (np.dtype("uint8"), "uint8"), ("uint16", "uint16"), (np.uint64, "uint64")]:
        assert hw.cast(x, spelling).dtype == np.dtype(dt)
    assert x.astype("int32").numpy().tolist() == [1, -2]
    assert x.to(dtype="float32").dtype == np.float32
    for bad in ("complex64", "bfloat16", "not-a-dtype", object, ("i4", -1)):
        with pytest.raises(UnsupportedDTypeError):
            hw.cast(x, bad)


# --- clip -------------------------------------------------------------------------------------------------
def test_clip(device):
    rng = np.random.default_rng(5)
    for dtype, shape in [(d, s) for d in NUMERIC for s in [(), (0,), (7,), (2, 3)]]:
        arr = sample(dtype, shape, rng)
        x = mk(arr, device)
        lo, hi = (0, 4) if dtype == "uint8" else (-2, 3)
        for a, b in [(lo, hi), (None, hi), (lo, None), (None, None), (lo, lo)]:
            expected = arr.astype(np.float64)
            if a is not None:
                expected = np.where(expected < a, a, expected)
            if b is not None:
                expected = np.where(expected > b, b, expected)
            assert_close(hw.clip(x, a, b).numpy(), expected, dtype, err_msg=f"clip {a} {b}")


def test_clip_bounds_beyond_the_dtype_and_nan(device):
    x = mk(np.array([-128, 0, 127], np.int8), device)
    assert_close(hw.clip(x, -1000, 1000).numpy(), [-128, 0, 127], "int8")
    assert_close(hw.clip(x, min=-5).numpy(), [-5, 0, 127], "int8")
    f = mk(np.array([np.nan, -5.0, 5.0], np.float32), device)
    assert_close(hw.clip(f, -1.0, 1.0).numpy(), [np.nan, -1, 1], "float32")
    assert_close(f.clip(max=0.5).numpy(), [np.nan, -5, 0.5], "float32")
    assert_close(hw.clip(x, mk(np.int64(-3), device), mk(np.array([2.5]), device)).numpy(), [-3, 0, 2], "int8")


def test_clip_errors(device):
    with pytest.raises(UnsupportedDTypeError, match="clip"):
        hw.clip(mk([True, False], device), 0, 1)
    with pytest.raises(InvalidArgumentError, match="clip.*min"):
        hw.clip(mk([1.0], device), 2.0, 1.0)
    with pytest.raises(InvalidArgumentError, match="clip"):
        hw.clip([1.0], 0.0, 1.0)


@pytest.mark.parametrize("lo, hi", [(-1e5, 1e5), (1e5, None), (None, -1e5), (65510, None), (-1e39, 1e39),
                                    (1 << 1100, None), (-(1 << 1100), 3)])
def test_clip_bounds_beyond_float16_agree_on_every_device(lo, hi, device):
    """Bounds are rounded to the dtype in the frontend, so compiled kernels never get a constant they cannot
    hold. Oracle: clip in float64, then round to float16."""
    arr = np.array([-np.inf, -65504, -1, 1, 60000, np.inf, np.nan], np.float16)
    big = 1e308  # Python ints beyond float64 clip like infinities
    lo64 = None if lo is None else max(min(lo, big), -big)
    hi64 = None if hi is None else max(min(hi, big), -big)
    expected = np.clip(arr.astype(np.float64), -np.inf if lo64 is None else lo64, np.inf if hi64 is None else hi64)
    with np.errstate(over="ignore"):
        expected = expected.astype(np.float16)
    assert_close(hw.clip(mk(arr, device), lo, hi).numpy(), expected, "float16")
