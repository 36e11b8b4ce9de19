"""The interpreter against plain numpy, for every functor and reduction.

Oracles here are written directly with numpy (and math.erf), never through
hwadapter_kp's own functor table: float16 is computed in float32 and rounded
once at the end, integer division/modulo follow numpy's // and %.
"""

import math

import numpy as np
import pytest

import hwadapter_kp as kp
from hwadapter_kp import library
from kp_corpus import values

ERF = np.vectorize(math.erf, otypes=[np.float64])

FLOAT_ORACLES = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x),
    "reciprocal": lambda x: 1 / x, "tanh": np.tanh, "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + ERF(x / np.sqrt(2))), "erf": ERF, "sin": np.sin, "cos": np.cos,
    "floor": np.floor, "ceil": np.ceil, "round": np.round,
}
NUMERIC_ORACLES = {"neg": np.negative, "abs": np.abs, "relu": lambda x: np.maximum(x, 0), "sign": np.sign}
BINARY_ORACLES = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
    "div": lambda a, b: a / b if a.dtype.kind == "f" else a // b, "pow": np.power, "mod": np.remainder,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
    "ge": np.greater_equal, "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor,
}
SHAPES = [(), (0,), (3, 4), (2, 0, 3), (2, 3, 4)]
BROADCASTS = [((3, 4), (4,)), ((2, 1, 3), (4, 1)), ((), (3,)), ((0, 3), (1, 3)), ((5,), ())]
TOL = {"float16": dict(rtol=2e-3, atol=1e-3), "float32": dict(rtol=1e-5, atol=1e-6),
       "float64": dict(rtol=1e-12, atol=1e-14)}


def oracle(fn, *arrays, out_dtype=None):
    """numpy reference: float16 computed in float32; result in ``out_dtype`` (default: the input dtype)."""
    dtype = arrays[0].dtype
    compute = [a.astype(np.float32) if a.dtype == np.float16 else a for a in arrays]
    with np.errstate(all="ignore"):
        result = np.asarray(fn(*compute))
    return result.astype(out_dtype or (dtype if result.dtype.kind == dtype.kind or dtype.kind == "f" else result.dtype))


def check(actual, expected):
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if actual.dtype.kind == "f":
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), equal_nan=True,
                                   **TOL[actual.dtype.name])
    else:
        np.testing.assert_array_equal(actual, expected)


def run(name, inputs, **attrs):
    return kp.interpret(library.get(name), inputs, **attrs)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("op", sorted(FLOAT_ORACLES))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_float_unary(op, dtype, shape):
    rng = np.random.default_rng(0)
    low = 0.1 if op in ("log", "sqrt", "rsqrt") else -3
    x = values(rng, shape, dtype, low, 3)
    if op == "round":
        x = (np.arange(x.size).reshape(shape) / 2 - 2).astype(dtype)   # exact .5 ties: half to even
    check(run(op, {"x": x})["out"], oracle(FLOAT_ORACLES[op], x))


@pytest.mark.parametrize("dtype", ["float16", "float32", "int8", "int32", "int64", "uint8", "uint16", "uint32",
                                   "uint64"])
@pytest.mark.parametrize("op", sorted(NUMERIC_ORACLES))
def test_numeric_unary(op, dtype):
    x = values(np.random.default_rng(1), (4, 5), dtype, -50, 50)
    check(run(op, {"x": x})["out"], oracle(NUMERIC_ORACLES[op], x))


def test_float_specials_propagate():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    check(run("relu", {"x": x})["out"], np.maximum(x, np.float32(0)))
    check(run("sign", {"x": x})["out"], np.sign(x))
    check(run("max", {"x": x, "y": np.float32(1)})["out"], np.maximum(x, np.float32(1)))
    check(run("min", {"x": np.float32(1), "y": x})["out"], np.minimum(np.float32(1), x))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint16",
                                   "uint32", "uint64"])
@pytest.mark.parametrize("op", sorted(BINARY_ORACLES))
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_binary(op, dtype, shapes):
    rng = np.random.default_rng(2)
    x, y = values(rng, shapes[0], dtype, -9, 9), values(rng, shapes[1], dtype, -9, 9)
    if op == "pow":
        x, y = (values(rng, shapes[0], dtype, 0, 3), values(rng, shapes[1], dtype, 0, 3))
    is_bool = op.startswith("logical") or op in ("eq", "ne", "lt", "le", "gt", "ge")
    expected = oracle(BINARY_ORACLES[op], x, y, out_dtype=np.bool_ if is_bool else None)
    check(run(op, {"x": x, "y": y})["out"], expected)


def test_integer_division_by_zero_and_floor_semantics():
    x = np.array([7, -7, 7, -7, 5, -128], np.int8)
    y = np.array([2, 2, -2, -2, 0, -1], np.int8)
    with np.errstate(all="ignore"):
        check(run("div", {"x": x, "y": y})["out"], x // y)
        check(run("mod", {"x": x, "y": y})["out"], x % y)


def test_float_mod_takes_divisor_sign():
    x = np.array([5.5, -5.5, 5.5, -5.5, 0.0, -0.0, 3.0], np.float32)
    y = np.array([2.0, 2.0, -2.0, -2.0, -3.0, 3.0, 0.0], np.float32)
    with np.errstate(all="ignore"):
        expected = np.remainder(x, y)
    got = run("mod", {"x": x, "y": y})["out"]
    check(got, expected)
    assert np.array_equal(np.signbit(got[:6]), np.signbit(expected[:6]))


def test_integer_pow_negative_exponent_truncates():
    x = np.array([2, 1, -1, -1, 0, 3], np.int32)
    y = np.array([-1, -5, -3, -2, 2, 4], np.int32)
    check(run("pow", {"x": x, "y": y})["out"], np.array([0, 1, -1, 1, 0, 81], np.int32))


def test_logical_not_and_truthiness():
    x = np.array([0.0, 2.0, np.nan, -1.0], np.float32)
    check(run("logical_not", {"x": x})["out"], np.logical_not(x))
    check(run("logical_and", {"x": x, "y": x})["out"], np.logical_and(x, x))


@pytest.mark.parametrize("dtype", ["float16", "bool", "int64"])
def test_identity(dtype):
    x = values(np.random.default_rng(3), (2, 3), dtype)
    check(kp.interpret(kp.fuse([("identity", ["x"], "y", {})], ["x"], ["y"]), {"x": x})["y"], x)


def test_where_broadcasts():
    rng = np.random.default_rng(3)
    cond, x, y = values(rng, (3, 1), "bool"), values(rng, (4,), "float32"), values(rng, (3, 4), "float32")
    check(run("where", {"cond": cond, "x": x, "y": y})["out"], np.where(cond, x, y))


@pytest.mark.parametrize("src", ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint16", "uint64",
                                 "bool"])
@pytest.mark.parametrize("dst", ["float16", "float32", "float64", "int8", "int32", "int64", "uint8", "uint32", "uint64",
                                 "bool"])
def test_cast(src, dst):
    x = values(np.random.default_rng(4), (3, 4), src, 0, 100)
    check(run("cast", {"x": x}, dtypes={"U": dst})["out"], x.astype(dst))


def test_clip():
    x = values(np.random.default_rng(5), (10,), "float32")
    check(run("clip", {"x": x}, min=-1.0, max=0.5)["out"], np.clip(x, -1.0, 0.5))
    xi = values(np.random.default_rng(5), (10,), "int32")
    check(run("clip", {"x": xi}, max=1)["out"], np.minimum(xi, 1))


def test_clip_bounds_beyond_the_dtype():
    """A bound the dtype cannot hold is taken as numpy's clip takes it, not refused: a float bound rounds to the dtype
    (beyond its range: +-inf); an integer bound beyond the integer range is held to it (no element lies beyond)."""
    x = np.array([-np.inf, -65504, -1, -0.0, 0.5, 65504, np.inf, np.nan], np.float16)
    check(run("clip", {"x": x}, min=-1e6, max=70000.0)["out"], x)
    check(run("clip", {"x": x}, min=1e40)["out"], np.where(np.isnan(x), x, np.float16(np.inf)))
    xi = np.array([-128, -1, 0, 127], np.int8)
    check(run("clip", {"x": xi}, min=-1000, max=1000)["out"], xi)
    check(run("clip", {"x": xi}, min=2 ** 70)["out"], np.full(4, 127, np.int8))


def _reduce_oracle(op, x, axis, keepdims):
    acc = np.int64 if x.dtype.kind in "iub" and op in ("sum", "prod") else None
    compute = x.astype(np.float32) if x.dtype == np.float16 else x
    fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min, "mean": np.mean}[op]
    kwargs = {"dtype": acc} if acc else {}
    result = np.asarray(fn(compute, axis=axis, keepdims=keepdims, **kwargs))
    return result.astype(acc or x.dtype)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int32", "bool"])
@pytest.mark.parametrize("op", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (-1, True), ((0, 2), False),
                                           ((1,), True), ((), False)], ids=str)
def test_reductions(op, dtype, axis, keepdims):
    x = values(np.random.default_rng(6), (3, 4, 2), dtype, 0, 3)
    if op == "mean" and dtype not in ("float16", "float32", "float64"):
        with pytest.raises(kp.KernelError, match="mean"):
            run(f"reduce_{op}", {"x": x}, axis=axis, keepdims=keepdims)
        return
    got = run(f"reduce_{op}", {"x": x}, axis=axis, keepdims=keepdims)["out"]
    check(got, _reduce_oracle(op, x, axis, keepdims))


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
@pytest.mark.parametrize("op", ["sum", "prod", "mean"])
def test_reductions_over_empty_extent(op):
    x = np.zeros((3, 0), np.float32)
    with np.errstate(all="ignore"):
        check(run(f"reduce_{op}", {"x": x}, axis=1)["out"], _reduce_oracle(op, x, 1, False))


def test_max_over_empty_extent_is_an_error():
    with pytest.raises(kp.KernelError, match="empty"):
        run("reduce_max", {"x": np.zeros((3, 0), np.float32)}, axis=1)
    assert run("reduce_max", {"x": np.zeros((0, 3), np.float32)}, axis=1)["out"].shape == (0,)


def test_reduction_on_0d_input():
    x = np.array(2.5, np.float32)
    check(run("reduce_sum", {"x": x})["out"], np.sum(x))


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_and_log_softmax(dtype, axis):
    x = values(np.random.default_rng(7), (3, 4, 5), dtype, -30, 30)
    x64 = x.astype(np.float64)
    check(run("softmax", {"x": x}, axis=axis)["out"], _softmax(x64, axis).astype(dtype))
    check(run("log_softmax", {"x": x}, axis=axis)["out"], np.log(_softmax(x64, axis)).astype(dtype))


def test_softmax_is_stable_for_huge_logits():
    x = np.array([[1000.0, 1000.0, -1000.0]], np.float32)
    check(run("softmax", {"x": x})["out"], np.array([[0.5, 0.5, 0.0]], np.float32))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("begin", [1, 2])
@pytest.mark.parametrize("affine", [False, True])
def test_layer_norm(dtype, begin, affine):
    rng = np.random.default_rng(8)
    x = values(rng, (2, 3, 4), dtype)
    wdt = "float32" if dtype == "float16" else dtype
    w, b = values(rng, x.shape[begin:], wdt), values(rng, x.shape[begin:], wdt)
    inputs = {"x": x, **({"weight": w, "bias": b} if affine else {})}
    got = run("layer_norm", inputs, begin_norm_axis=begin, epsilon=1e-4)
    x64 = x.astype(np.float64)
    axes = tuple(range(begin, 3))
    mu, var = x64.mean(axis=axes, keepdims=True), x64.var(axis=axes, keepdims=True)
    y = (x64 - mu) / np.sqrt(var + 1e-4)
    if affine:
        y = y * w + b
    check(got["out"], y.astype(dtype))
    check(got["mean"], mu.reshape(x.shape[:begin]).astype(wdt))
    check(got["variance"], var.reshape(x.shape[:begin]).astype(wdt))


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4, 5)], ids=str)
def test_batch_norm(dtype, shape):
    rng = np.random.default_rng(9)
    x = values(rng, shape, dtype)
    m, v = values(rng, (3,), "float32"), values(rng, (3,), "float32", 0.5, 2)
    w, b = values(rng, (3,), "float32"), values(rng, (3,), "float32")
    got = run("batch_norm", {"x": x, "running_mean": m, "running_var": v, "weight": w, "bias": b}, epsilon=1e-3)
    bc = (1, 3) + (1,) * (len(shape) - 2)
    y = (x.astype(np.float64) - m.reshape(bc)) / np.sqrt(v.reshape(bc) + 1e-3) * w.reshape(bc) + b.reshape(bc)
    check(got["out"], y.astype(dtype))
