"""Differential tests at special values: every op with a numpy oracle, on every way an op can run here.

The paths: cpu:0's numpy kernels, cpu:0 with `HWADAPTER_CPU_KERNELS=codegen` (the op set compiled from kernel
primitives by the C backend) and opencl:0 (kernel primitives in OpenCL C, and the handwritten kernels). The inputs are
made of +-inf, NaN, +-0, the dtype's extremes (finfo max/min/tiny, iinfo min/max) and a few plain numbers; each result
is compared with numpy (or a plain math-module oracle where numpy has no such function) with NaN == NaN and with the
sign of zero checked wherever numpy defines it: exactly for correctly rounded ops (+ - * / sqrt, casts, selections,
copies), within a few ulp for the APPROXIMATE ones (libm and OpenCL builtins).

Where numpy does not define the sign of a zero, it is not checked: numpy's maximum/minimum return the first operand on
a tie for float16 and the second for float32/64 (so relu(-0.0), clip and max/min reductions differ in numpy itself),
and a matrix product's zero depends on the accumulator's start. Reductions and pools take pairs of values, whose
result does not depend on the order of the additions. Float-to-int casts of NaN, inf or out-of-range values are
undefined in numpy (a RuntimeWarning and a platform value) and are not compared.
"""
from __future__ import annotations

import math
import os
import warnings
from builtins import slice as builtin_slice

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import UnsupportedDTypeError
from hwadapter.dispatch.dispatcher import dispatch
from hwadapter.plugin import reference
from hwadapter.runtime.device import get

import oracles

# The cpu numpy kernels are bare ufuncs (the hot path): on inf/nan inputs numpy warns as it computes, the
# compiled paths do not. The values are what is compared here, so the warnings are not shown.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

F = hw.nn.functional
FLOATS = ("float16", "float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
ALL = FLOATS + INTS + ("bool",)
MORE_INTS = ("int16", "int32")  # the code paths of int8 and int64 again: `make test-slow` (each dtype is new kernels)
RTOL = {"float16": 2e-3, "float32": 4e-6, "float64": 1e-13}  # last-bit differences of libm, PoCL and our rounding
# Ops whose float results may differ in the last bits (libm and OpenCL builtins, rsqrt, several roundings); every
# other op is correctly rounded (+ - * / sqrt, casts, selections, copies) and must agree exactly.
APPROXIMATE = {"exp", "log", "rsqrt", "sigmoid", "tanh", "erf", "gelu", "gelu_tanh", "sin", "cos", "pow", "softmax",
               "log_softmax", "layer_norm", "batch_norm"}
# Where numpy leaves a zero's sign open (see the module's docstring), or the op's formula does (y * 1 + 0).
NO_ZERO_SIGN = {"relu", "maximum", "minimum", "clip", "max", "min", "max_pool2d", "adaptive_max_pool2d", "matmul",
                "conv2d", "layer_norm", "batch_norm"}
_OPENCL = "opencl:0" in hw.device.get_available_device()
PATHS = ["cpu", "cpu-compiled"] + (["opencl:0"] if _OPENCL else [])


@pytest.fixture(scope="module", params=PATHS)
def path(request):
    """The device an op runs on; for cpu-compiled, cpu:0 with the primitive op set compiled by its C backend."""
    if request.param != "cpu-compiled":
        yield request.param
        return
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("HWADAPTER_CPU_KERNELS", "codegen")
            hw.device.reset_plugins()
            if get("cpu").codegen is None:
                pytest.skip(f"no CPU codegen: {get('cpu').codegen_unavailable}")
            yield "cpu"
    finally:
        hw.device.reset_plugins()  # the numpy kernels again, for the tests after this module


@pytest.fixture(params=[pytest.param(tuple(d for d in ALL if d not in MORE_INTS), id="dtypes"),
                        pytest.param(MORE_INTS, id="more-ints", marks=pytest.mark.slow)])
def dtypes(request):
    """The dtypes a test covers: all but MORE_INTS by default, those with -m slow."""
    return request.param


# --- inputs ------------------------------------------------------------------------------------------------------
def specials(dtype) -> np.ndarray:
    """The special values of a dtype, and a few plain numbers to combine them with."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        fi = np.finfo(dt)
        values = [np.inf, -np.inf, np.nan, 0.0, -0.0, fi.max, fi.min, fi.tiny, -fi.tiny, 1.0, -1.0, 0.5, -2.5]
    elif dt.kind == "b":
        values = [True, False]
    else:
        ii = np.iinfo(dt)
        values = sorted({int(ii.min), int(ii.max), 0, 1, 2, 3, int(ii.max) - 1} | ({-1, -2} if ii.min < 0 else set()))
    return np.array(values, dt)


def pairs(dtype) -> tuple:
    """(a, b), shape (n, n): every ordered pair of special values, a[i, j] = s[i], b[i, j] = s[j]."""
    s = specials(dtype)
    a, b = np.broadcast_arrays(s[:, None], s[None, :])
    return a.copy(), b.copy()


def rows(dtype) -> np.ndarray:
    """Every ordered pair of special values as the rows of an (n * n, 2) array."""
    a, b = pairs(dtype)
    return np.stack([a.ravel(), b.ravel()], axis=1)


def on(path, *arrays):
    return [hw.to_tensor(a, device=path) for a in arrays]


def quiet(fn, *args):
    """numpy without its inf/nan warnings: they are the values under test here."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(fn(*args))


# --- comparison --------------------------------------------------------------------------------------------------
def assert_agrees(got, want, op, inputs=(), what="", nan_sign=False):
    """Same dtype and shape; NaN where NaN; everything else equal, but for APPROXIMATE ops' finite floats, which may
    differ by the dtype's RTOL (no atol: a zero must be a zero); a zero's sign as the oracle's unless the op is in
    NO_ZERO_SIGN; and a NaN's sign too when nan_sign (copies, abs, neg)."""
    got, want = np.asarray(got), np.asarray(want)
    what = f"{op}{what}"
    assert got.dtype == want.dtype and got.shape == want.shape, \
        f"{what}: {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if got.dtype.kind != "f":
        ok = got == want
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        nan = np.isnan(w)
        with np.errstate(invalid="ignore"):
            rtol = RTOL[got.dtype.name] if op in APPROXIMATE else 0.0
            ok = np.where(nan, np.isnan(g), np.abs(g - w) <= rtol * np.abs(w))
        ok |= ~nan & (g == w)  # infinities (inf - inf is nan above)
        if op not in NO_ZERO_SIGN:
            ok &= ~((w == 0) & (np.signbit(g) != np.signbit(w)))
        if nan_sign:
            ok &= ~(nan & (np.signbit(g) != np.signbit(w)))
    if not ok.all():
        bad = [tuple(i) for i in np.argwhere(~ok)[:8]]
        shown = [f"{[np.asarray(a)[i].item() for a in inputs if np.shape(a) == got.shape]} -> "
                 f"{got[i].item()!r}, expected {want[i].item()!r}" for i in bad]
        raise AssertionError(f"{what}: {int((~ok).sum())} of {ok.size} differ:\n  " + "\n  ".join(shown))


def each(dtypes, check):
    """check(dtype) for every dtype; one failure report for all of them (and no tensor kept alive by a traceback)."""
    failures = []
    for dtype in dtypes:
        try:
            check(dtype)
        except AssertionError as err:
            failures.append(str(err))
    assert not failures, "\n".join(failures)


def as_float(x):
    """What the frontend hands a float op: floats as they are, other dtypes cast to float32."""
    return x if x.dtype.kind == "f" else x.astype(np.float32)


def in_float64(fn):
    """An oracle computed in float64 and rounded once to the input's float dtype."""
    return lambda x: quiet(lambda: fn(as_float(x).astype(np.float64)).astype(as_float(x).dtype))


def _erf(v):
    return math.erf(v) if not math.isnan(v) else v


def _gelu(v):
    """x Phi(x) = x/2 erfc(-x / sqrt 2); at -inf its limit, -0.0 (x Phi(x) < 0 for every x < 0)."""
    return -0.0 if v == -math.inf else 0.5 * v * math.erfc(-v / math.sqrt(2.0))


def _gelu_tanh(v):
    """The tanh form x/2 (1 + tanh u) = x / (1 + e^-2u); its limit at +-inf (inf, -0.0)."""
    if math.isnan(v) or math.isinf(v):
        return v if v != -math.inf else -0.0
    u = math.sqrt(2.0 / math.pi) * (v + 0.044715 * v ** 3) if abs(v) < 1e100 else math.copysign(math.inf, v)
    t = -2.0 * u
    return v * math.exp(-t) if t > 700 else v / (1.0 + math.exp(t))  # the first underflows where e^t would overflow


def elementwise(fn):
    return lambda x: np.array([fn(float(v)) for v in x.ravel()], np.float64).reshape(x.shape)


# --- unary -------------------------------------------------------------------------------------------------------
NUMERIC = FLOATS + INTS
UNARY = {  # op: (frontend, oracle, dtypes it accepts)
    "abs": (hw.abs, np.abs, NUMERIC),
    "neg": (hw.neg, np.negative, NUMERIC),
    "exp": (hw.exp, lambda x: np.exp(as_float(x)), ALL),
    "log": (hw.log, lambda x: np.log(as_float(x)), ALL),
    "sqrt": (hw.sqrt, lambda x: np.sqrt(as_float(x)), ALL),
    "rsqrt": (hw.rsqrt, lambda x: 1 / np.sqrt(as_float(x)), ALL),
    "reciprocal": (hw.reciprocal, lambda x: 1 / as_float(x), ALL),
    "sigmoid": (hw.sigmoid, in_float64(oracles.sigmoid), ALL),
    "tanh": (hw.tanh, lambda x: np.tanh(as_float(x)), ALL),
    "relu": (hw.relu, lambda x: np.maximum(x, np.zeros((), x.dtype)), NUMERIC),
    "erf": (hw.erf, in_float64(elementwise(_erf)), ALL),
    "gelu": (F.gelu, in_float64(elementwise(_gelu)), ALL),
    "gelu_tanh": (lambda t: F.gelu(t, approximate=True), in_float64(elementwise(_gelu_tanh)), ALL),
    "sin": (hw.sin, lambda x: np.sin(as_float(x)), ALL),
    "cos": (hw.cos, lambda x: np.cos(as_float(x)), ALL),
    "floor": (hw.floor, lambda x: np.floor(x) if x.dtype.kind == "f" else x, NUMERIC),  # integers are whole
    "ceil": (hw.ceil, lambda x: np.ceil(x) if x.dtype.kind == "f" else x, NUMERIC),
    "round": (hw.round, lambda x: np.rint(x) if x.dtype.kind == "f" else x, NUMERIC),
    "sign": (hw.sign, np.sign, NUMERIC),
    "logical_not": (hw.logical_not, np.logical_not, ALL),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(path, dtypes, op):
    each(dtypes, lambda dtype: _unary(path, op, dtype))


def _unary(path, op, dtype):
    fn, oracle, accepts = UNARY[op]
    x = specials(dtype)
    if dtype not in accepts:
        with pytest.raises(UnsupportedDTypeError, match=op.split("_")[0]):
            fn(*on(path, x))
        return
    assert_agrees(fn(*on(path, x)).numpy(), quiet(oracle, x), op, (x,), f"({dtype}) on {path}",
                  nan_sign=op in ("abs", "neg"))


# --- binary ------------------------------------------------------------------------------------------------------
def _int_pow(a, b):
    """Integer power wrapping in the dtype; a negative exponent gives 1 / a**|b| truncated toward zero, as C."""
    dt = a.dtype
    bits, signed = dt.itemsize * 8, dt.kind == "i"

    def one(x, y):
        if y < 0:
            return 1 if x == 1 else ((-1 if y % 2 else 1) if x == -1 else 0)
        r = pow(x, y, 1 << bits)
        return r - (1 << bits) if signed and r >= 1 << (bits - 1) else r
    return np.array([one(int(x), int(y)) for x, y in zip(a.ravel(), b.ravel())], dt).reshape(a.shape)


def _int_mod(a, b):
    return np.where(b == 0, 0, np.remainder(a, np.where(b == 0, 1, b))).astype(a.dtype)


BINARY = {  # op: (frontend, oracle, dtypes it accepts)
    "add": (hw.add, np.add, NUMERIC),
    "subtract": (hw.subtract, np.subtract, NUMERIC),
    "multiply": (hw.multiply, np.multiply, NUMERIC),
    "divide": (hw.divide, lambda a, b: np.divide(as_float(a), as_float(b)), NUMERIC),
    "pow": (hw.pow, lambda a, b: np.power(a, b) if a.dtype.kind == "f" else _int_pow(a, b), NUMERIC),
    "maximum": (hw.maximum, np.maximum, NUMERIC),
    "minimum": (hw.minimum, np.minimum, NUMERIC),
    "remainder": (hw.remainder, lambda a, b: np.remainder(a, b) if a.dtype.kind == "f" else _int_mod(a, b), NUMERIC),
    "equal": (hw.equal, np.equal, ALL),
    "not_equal": (hw.not_equal, np.not_equal, ALL),
    "less_than": (hw.less_than, np.less, ALL),
    "less_equal": (hw.less_equal, np.less_equal, ALL),
    "greater_than": (hw.greater_than, np.greater, ALL),
    "greater_equal": (hw.greater_equal, np.greater_equal, ALL),
    "logical_and": (hw.logical_and, np.logical_and, ALL),
    "logical_or": (hw.logical_or, np.logical_or, ALL),
    "logical_xor": (hw.logical_xor, np.logical_xor, ALL),
}


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary(path, dtypes, op):
    """Every ordered pair of special values, broadcast from a column and a row."""
    each(dtypes, lambda dtype: _binary(path, op, dtype))


def _binary(path, op, dtype):
    fn, oracle, accepts = BINARY[op]
    s = specials(dtype)
    col, row = s[:, None], s[None, :]
    if dtype not in accepts:
        with pytest.raises(UnsupportedDTypeError):
            fn(*on(path, col, row))
        return
    a, b = pairs(dtype)
    assert_agrees(fn(*on(path, col, row)).numpy(), quiet(oracle, a, b), op, (a, b), f"({dtype}) on {path}")


def test_where(path, dtypes):
    """A selection changes nothing it selects: not a zero's sign, not a NaN's."""
    each(dtypes, lambda dtype: _where(path, dtype))


def _where(path, dtype):
    a, b = pairs(dtype)
    cond = a > b
    got = hw.where(*on(path, cond, a, b)).numpy()
    assert_agrees(got, np.where(cond, a, b), "where", (a, b), f"({dtype}) on {path}", nan_sign=True)


def _ieee_pow(a, e):
    """IEEE 754's pow (C's): numpy's elementwise loop, the exponent an array of a's shape (numpy takes a single
    exponent of 0.5 for sqrt, whose sqrt(-inf) = nan and sqrt(-0) = -0 are not pow's)."""
    return quiet(np.power, a, np.full(a.shape, e, a.dtype))


def test_pow_with_a_number_a_0d_or_a_full_exponent_is_ieee_pow(path):
    """Every special base to every special exponent given three ways: a Python number, a 0-d tensor and a tensor of
    the base's shape (and `**`); each is IEEE pow on every path (pow(-inf, 0.5) was nan with a number on cpu)."""
    def check(dtype):
        base = specials(dtype)
        x = hw.to_tensor(base, device=path)
        for e in specials(dtype):
            want = _ieee_pow(base, e)
            full = hw.to_tensor(np.full(base.shape, e, base.dtype), device=path)
            zero_d = hw.to_tensor(np.asarray(e, base.dtype), device=path)
            for how, got in (("number", hw.pow(x, float(e))), ("**", x ** float(e)), ("0-d", hw.pow(x, zero_d)),
                             ("tensor", hw.pow(x, full))):
                assert_agrees(got.numpy(), want, "pow", (base,), f"({dtype}, exponent {e} as {how}) on {path}")
    each(FLOATS, check)


def test_float16_pow_is_float32_pow_rounded_once(path):
    """float16 pow is numpy's: the float32 pow, correctly rounded, rounded to float16 once; exactly, so that an ulp
    of float32 error cannot move a result across a float16 tie (pow(65504, 0.5) was 256 on opencl:0, not 255.9)."""
    rng = np.random.default_rng(7)
    a = np.concatenate([[65504, 65504, 2, 10, 255.9], rng.uniform(0, 300, 4000)]).astype(np.float16)
    b = np.concatenate([[0.5, 0.25, 0.5, 1.5, 2], rng.uniform(-4, 4, 4000)]).astype(np.float16)
    got = hw.pow(hw.to_tensor(a, device=path), hw.to_tensor(b, device=path)).numpy()
    want = quiet(np.power, a, b)
    wrong = (got.view(np.uint16) != want.view(np.uint16)) & ~(np.isnan(got) & np.isnan(want))
    assert not wrong.any(), f"{int(wrong.sum())} differ, e.g. {a[wrong][:4]} ** {b[wrong][:4]} -> {got[wrong][:4]}, " \
        f"not {want[wrong][:4]}"
    assert hw.pow(hw.to_tensor(np.float16([65504]), device=path), 0.5).numpy()[0] == np.float16(255.9)


# --- cast and clip -----------------------------------------------------------------------------------------------
def _defined(x, target):
    """Where numpy defines x.astype(target): float to int only for finite values whose truncation fits."""
    if x.dtype.kind != "f" or np.dtype(target).kind not in "iu":
        return np.ones(x.shape, bool)
    info = np.iinfo(target)
    with np.errstate(invalid="ignore"):
        t = np.trunc(x.astype(np.float64))
        return np.isfinite(t) & (t >= int(info.min)) & (t <= int(info.max))


def test_cast(path, dtypes):
    each(dtypes, lambda source: _cast(path, source))


def _cast(path, source):
    x = specials(source)
    if x.dtype.kind == "f":  # and the float16 rounding edges: the largest finite half, ties, the tiniest halves
        edges = [65504, 65519.99, 65520, 1 + 2.0 ** -11, 1 + 2.0 ** -11 + 2.0 ** -30, 2.0 ** -25, 2.0 ** -25 * 1.5,
                 -2.0 ** -24]
        x = np.concatenate([x, quiet(lambda: np.array(edges).astype(source))])
    for target in ALL:
        keep = _defined(x, target)
        got = hw.to_tensor(x, device=path).astype(target).numpy()
        assert_agrees(got[keep], quiet(lambda v: v.astype(target), x)[keep], "cast", (x[keep],),
                      f" {source} -> {target} on {path}", nan_sign=True)


def test_cast_float64_to_float16_rounds_once(path):
    """Through float32 the rounding would happen twice: 65519.99 would become inf, 1 + 2^-11 + 2^-40 would be 1.
    Every finite half, every midpoint between neighbours (a tie) and the doubles either side of each midpoint."""
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    halves = np.sort(halves[np.isfinite(halves)].astype(np.float64))
    mids = (halves[:-1] + halves[1:]) / 2
    edges = np.array([65519.99999999, -65519.99999999, 65520.0, 1 + 2.0 ** -11 + 2.0 ** -40, 2.0 ** -25 + 2.0 ** -60])
    x = np.concatenate([halves, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), edges])
    got = hw.to_tensor(x, device=path).astype("float16").numpy()
    want = quiet(lambda: x.astype(np.float16))
    wrong = got.view(np.uint16) != want.view(np.uint16)
    assert not wrong.any(), f"{int(wrong.sum())} wrong, e.g. {x[wrong][:4]} -> {got[wrong][:4]}, not {want[wrong][:4]}"


def _clip_oracle(x, lo, hi):
    """numpy's clip with the bounds as it takes them: rounded to a float dtype (beyond it: +-inf); for integers,
    rounded inward (min up, max down) and held to the dtype's range, as the frontend documents."""
    if x.dtype.kind == "f":
        lo = None if lo is None else quiet(lambda v: np.asarray(v).astype(x.dtype), lo)
        hi = None if hi is None else quiet(lambda v: np.asarray(v).astype(x.dtype), hi)
        return quiet(lambda: np.clip(x, lo, hi))
    info = np.iinfo(x.dtype)

    def held(bound, rounding):
        return None if bound is None else min(max(rounding(bound), int(info.min)), int(info.max))
    return np.clip(x.astype(object), held(lo, math.ceil), held(hi, math.floor)).astype(x.dtype)


# (min, max) per kind: beyond float16's and float32's range, at +-inf, inside; beyond and at the integers' ranges.
# Each bound is a constant of a compiled kernel, so a new pair is a new kernel: the long lists run with -m slow.
CLIP_BOUNDS = {"f": [(-1e6, 1e6), (-1e40, 1e300), (-math.inf, math.inf), (-2.5, 1.0)],
               "i": [(-3.5, 2.5), (2 ** 63, None), (-1000, 1000)]}
MORE_CLIP_BOUNDS = {"f": [(-1e40, None), (None, 1e40), (-1e300, 1e300), (-70000, 70000), (0.5, 0.5), (-3.5, 2.5),
                          (None, -1), (1e-50, 1e-40), (-1e-45, 1e-300), (65504.0, 65519.0)],
                    "i": [(-1e6, 1e6), (-1e40, None), (None, 1e40), (-2.5, 1.0), (0.5, 0.5), (None, -1),
                          (-2 ** 63, 2 ** 63 - 1), (None, -2 ** 63 - 1), (-129, 128), (-2 ** 31, 255)]}


@pytest.mark.parametrize("bounds", [pytest.param(CLIP_BOUNDS, id="bounds"),
                                    pytest.param(MORE_CLIP_BOUNDS, id="more-bounds", marks=pytest.mark.slow)])
def test_clip(path, dtypes, bounds):
    """Bounds inside, at and far beyond the dtype's range, for every numeric dtype."""
    each([d for d in dtypes if d in NUMERIC], lambda d: _clip(path, d, bounds["f" if d in FLOATS else "i"]))


def _clip(path, dtype, bounds):
    x = specials(dtype)
    for lo, hi in bounds:
        got = hw.clip(hw.to_tensor(x, device=path), lo, hi).numpy()
        assert_agrees(got, _clip_oracle(x, lo, hi), "clip", (x,), f"({dtype}, {lo}, {hi}) on {path}")


def test_clip_kernels_take_bounds_beyond_the_dtype(path):
    """The kernels themselves, not only the frontend (which rounds the bounds first), take a bound the dtype cannot
    hold as numpy's clip does: rounded to the dtype, beyond its range +-inf. The compiled ones once refused to build."""
    for dtype, lo, hi in (("float16", -1e6, 70000.0), ("float16", None, 1e40), ("float32", -1e300, 1e40),
                          ("float64", -1e300, 1e300)):
        x = specials(dtype)
        got = dispatch("clip", (hw.to_tensor(x, device=path),), {"min": lo, "max": hi}).numpy()
        assert_agrees(got, _clip_oracle(x, lo, hi), "clip", (x,), f" kernel ({dtype}, {lo}, {hi}) on {path}")


def _accumulated(np_fn):
    """sum/prod as the op set defines them: float16 accumulates in float32, integers and bool in int64 (Paddle's
    rule: numpy would give uint64 for uint8)."""
    def oracle(x, axis):
        if x.dtype == np.float16:
            return np_fn(x, axis=axis, dtype=np.float32).astype(np.float16)
        return np_fn(x, axis=axis, dtype=np.int64 if x.dtype.kind != "f" else x.dtype)
    return oracle


def _mean(x, axis):
    """The mean in the float dtype (integers and bool as float32), float16 accumulated in float32."""
    xf = as_float(x)
    return np.mean(xf, axis=axis, dtype=np.float32 if xf.dtype == np.float16 else xf.dtype).astype(xf.dtype)


REDUCTIONS = {"sum": (hw.sum, _accumulated(np.sum)), "prod": (hw.prod, _accumulated(np.prod)),
              "mean": (hw.mean, _mean), "max": (hw.max, np.max), "min": (hw.min, np.min),
              "argmax": (hw.argmax, np.argmax), "argmin": (hw.argmin, np.argmin)}


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
def test_reduction(path, dtypes, op):
    """Over every pair of special values, along the last axis and along the first (two kernels' layouts)."""
    each(dtypes, lambda dtype: _reduction(path, op, dtype))


def _reduction(path, op, dtype):
    fn, oracle = REDUCTIONS[op]
    x = rows(dtype)
    for arr, axis in ((x, 1), (np.ascontiguousarray(x.T), 0)):
        got = fn(hw.to_tensor(arr, device=path), axis=axis).numpy()
        inputs = (x[:, 0], x[:, 1])
        assert_agrees(got, quiet(oracle, arr, axis), op, inputs, f"({dtype}, axis={axis}) on {path}")


# --- softmax and normalisation -----------------------------------------------------------------------------------
def _in_compute_dtype(fn):
    """An oracle evaluated by numpy in the dtype the op computes in (float32 for float16), rounded once."""
    def oracle(x, *args):
        cd = np.float32 if x.dtype == np.float16 else x.dtype
        return quiet(lambda: fn(x.astype(cd), *args).astype(x.dtype))
    return oracle


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _log_softmax(x, axis):
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _layer_norm(x, axis):
    mu = x.mean(axis=axis, keepdims=True)
    d = x - mu
    return d / np.sqrt((d * d).mean(axis=axis, keepdims=True) + x.dtype.type(1e-5))


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "layer_norm"])
def test_normalisation(path, op):
    each(FLOATS, lambda dtype: _normalisation(path, op, dtype))


def _normalisation(path, op, dtype):
    x = rows(dtype)
    oracle = _in_compute_dtype({"softmax": _softmax, "log_softmax": _log_softmax, "layer_norm": _layer_norm}[op])
    if op == "layer_norm":
        cases = [(F.layer_norm(hw.to_tensor(x, device=path), [2]).numpy(), oracle(x, 1))]
    else:
        fn = getattr(F, op)
        xt = np.ascontiguousarray(x.T)
        cases = [(fn(hw.to_tensor(x, device=path), axis=1).numpy(), oracle(x, 1)),
                 (fn(hw.to_tensor(xt, device=path), axis=0).numpy(), oracle(xt, 0))]
    for got, want in cases:
        assert_agrees(got, want, op, what=f"({dtype}) on {path}")


def test_batch_norm(path):
    """Special inputs with plain statistics, and special statistics with plain inputs (channel = column)."""
    each(FLOATS, lambda dtype: _batch_norm(path, dtype))


def _batch_norm(path, dtype):
    s = specials(dtype)
    n = s.size
    plain = np.linspace(-2, 2, n).astype(dtype)
    cases = [(np.stack([s, s[::-1]]), np.full(n, 0.5, dtype), np.full(n, 2.0, dtype)),
             (np.stack([plain, -plain]), s, np.abs(s))]
    for x, mean, var in cases:
        got = F.batch_norm(*on(path, x, mean, var)).numpy()
        want = _in_compute_dtype(lambda v, m, q: (v - m) / np.sqrt(q + v.dtype.type(1e-5)))(x, mean, var)
        assert_agrees(got, want, "batch_norm", (x,), f"({dtype}) on {path}")


# --- matmul, conv2d, pooling ---------------------------------------------------------------------------------------
def test_matmul_and_conv2d_of_special_products(path, dtypes):
    """A column times a row (k = 1): each result is one product, x * y, in the dtype."""
    each([d for d in dtypes if d in NUMERIC], lambda dtype: _special_products(path, dtype))


def _special_products(path, dtype):
    s = specials(dtype)
    a, b = pairs(dtype)
    want = quiet(np.multiply, a, b)
    got = hw.matmul(*on(path, s[:, None], s[None, :])).numpy()
    assert_agrees(got, want, "matmul", (a, b), f"({dtype}) on {path}")
    if dtype in FLOATS:  # 1x1 convolution: output channel j at pixel i is x_i * w_j
        x, w = s.reshape(1, 1, 1, -1), s.reshape(-1, 1, 1, 1)
        got = F.conv2d(*on(path, x, w)).numpy()[0, :, 0, :]
        assert_agrees(got, want.T, "conv2d", (b, a), f"({dtype}) on {path}")


def _pair_plane(dtype):
    """(1, 1, n, 2n): row i holds every pair (s_i, s_j) side by side, so (1, 2) windows see one pair each."""
    a, b = pairs(dtype)
    return np.stack([a, b], axis=-1).reshape(1, 1, a.shape[0], -1), a, b


def test_pooling_over_pairs(path, dtypes):
    each(dtypes, lambda dtype: _pooling(path, dtype))


def _pooling(path, dtype):
    plane, a, b = _pair_plane(dtype)
    x, n = hw.to_tensor(plane, device=path), a.shape[0]
    for op, got in (("max_pool2d", F.max_pool2d(x, (1, 2), (1, 2))),
                    ("adaptive_max_pool2d", F.adaptive_max_pool2d(x, (n, n)))):
        assert_agrees(got.numpy()[0, 0], quiet(np.maximum, a, b), op, (a, b), f"({dtype}) on {path}")
    if dtype in FLOATS:  # the mean of two, in float32 for float16
        cd = np.float32 if dtype == "float16" else a.dtype
        want = quiet(lambda: np.mean(np.stack([a, b]), axis=0, dtype=cd).astype(dtype))
        for op, got in (("avg_pool2d", F.avg_pool2d(x, (1, 2), (1, 2))),
                        ("adaptive_avg_pool2d", F.adaptive_avg_pool2d(x, (n, n)))):
            assert_agrees(got.numpy()[0, 0], want, op, (a, b), f"({dtype}) on {path}")


# --- data movement: bit for bit ------------------------------------------------------------------------------------
def test_data_movement_keeps_every_bit(path, dtypes):
    """NaN, -0.0 and the extremes are copied, never computed: the bytes must be numpy's."""
    each(dtypes, lambda dtype: _data_movement(path, dtype))


def _data_movement(path, dtype):
    a, b = pairs(dtype)
    x = hw.to_tensor(a, device=path)
    cases = {
        "transpose": (hw.transpose(x, [1, 0]), a.T),
        "reshape": (hw.reshape(x, [-1]), a.reshape(-1)),
        "concat": (hw.concat([x, hw.to_tensor(b, device=path)], axis=1), np.concatenate([a, b], axis=1)),
        "split": (hw.split(x, [1, a.shape[0] - 1], axis=0)[1], a[1:]),
        "slice": (x[::-2, 1::3], a[::-2, 1::3]),
        "gather": (hw.gather(x, [-1, 0, 1], axis=0), a[[-1, 0, 1]]),
        "expand": (hw.expand(hw.to_tensor(a[:1], device=path), [3, a.shape[1]]), np.repeat(a[:1], 3, axis=0)),
        "pad": (hw.pad(x, [1, 2, 0, 1]), np.pad(a, [(1, 2), (0, 1)])),
    }
    for v in ((math.nan, -0.0, math.inf, -math.inf) if dtype in FLOATS else ()):  # special padding values
        cases[f"pad value={v}"] = (hw.pad(x, [0, 0, 2, 1], value=v),
                                   np.pad(a, [(0, 0), (2, 1)], constant_values=np.asarray(v, dtype)))
    for op, (got, want) in cases.items():
        got = got.numpy()
        assert got.dtype == want.dtype and got.shape == want.shape, f"{op}({dtype}) on {path}"
        assert (got.view(np.uint8) == np.ascontiguousarray(want).view(np.uint8)).all(), \
            f"{op}({dtype}) on {path}: {got} != {want}"


def test_gelu_tanh_keeps_relative_precision_in_the_negative_tail(path):
    """x / (1 + e^-2u), not x/2 (1 + tanh u): 1 + tanh u cancels to 0 in float32 long before the result underflows."""
    x = np.array([-3.0, -5.0, -7.0, -9.0], np.float32)
    got = F.gelu(hw.to_tensor(x, device=path), approximate=True).numpy()
    assert_agrees(got, in_float64(elementwise(_gelu_tanh))(x), "gelu_tanh", (x,), f" tail on {path}")


def test_compiled_path_runs_compiled(path):
    """cpu-compiled must run the primitive op set through the C backend, or the comparisons above prove nothing."""
    x = hw.to_tensor(np.array([1.0, -np.inf], np.float32), device=path)
    with hw.profiler.profile() as prof:
        F.gelu(x, approximate=True)
    routes = {r["route"] for r in prof.table()}
    compiled = os.environ.get("HWADAPTER_CPU_KERNELS") == "codegen"
    assert ("codegen" in routes) == (compiled or path.startswith("opencl")), routes


# --- slice with negative steps and out-of-range bounds ---------------------------------------------------------------
def _slice_cases(size, seed):
    """Random (start, end, step): bounds from well before the axis to well past it, or None; steps of both signs."""
    rng = np.random.default_rng(seed)
    bounds = [None, *range(-2 * size - 3, 2 * size + 4)]
    for _ in range(60):
        start, end = (bounds[i] for i in rng.integers(0, len(bounds), 2))
        yield start, end, int(rng.choice([-7, -3, -2, -1, 1, 2, 3, 11]))


def test_slice_matches_numpy_for_any_bounds_and_step(device):
    """hw.slice and x[s:e:k] against numpy, bounds before, inside and past the axis, both step signs."""
    for size in (0, 1, 2, 5, 10):
        arr = np.arange(size * 3, dtype=np.float32).reshape(size, 3)
        x = hw.to_tensor(arr, device=device)
        for start, end, step in [(-4, None, -1), (-40, None, -1), (-11, -20, -1), (20, 11, -1),
                                 *_slice_cases(size, size)]:
            want = arr[start:end:step]
            got = hw.slice(x, [0], [start], [end], [step]).numpy()
            assert got.shape == want.shape and (got == want).all(), f"slice[{start}:{end}:{step}] of {size}"
            got = x[start:end:step].numpy()
            assert got.shape == want.shape and (got == want).all(), f"x[{start}:{end}:{step}] of {size}"


def test_reference_slice_kernel_reads_bounds_as_positions():
    """The numpy kernel takes (start, end, step) as range() positions, as the OpenCL plan does: given slice.indices()'s
    form of an empty negative-step slice, start -1 (before the axis), it selects nothing; a Python slice would read -1
    as the last element and return the whole axis reversed."""
    arr = np.arange(10.0)
    for start, end, step in [(-40, None, -1), (-11, -20, -2), *_slice_cases(10, 7)]:
        s, e, st = builtin_slice(start, end, step).indices(10)
        for kernel_end in {e, None if e < 0 else e}:
            got = reference.KERNELS["slice"](arr, axes=(0,), starts=(s,), ends=(kernel_end,), steps=(st,))
            assert got.tolist() == arr[start:end:step].tolist(), f"[{s}:{kernel_end}:{st}] for [{start}:{end}:{step}]"


def test_slice_start_before_the_axis_with_a_negative_step_is_empty(device):
    """The issue's case: slice(starts=[-40], ends=[None], strides=[-1]) selects nothing, as numpy's x[-40::-1]."""
    arr = np.arange(200, dtype=np.float32).reshape(10, 20)
    x = hw.to_tensor(arr, device=device)
    assert hw.slice(x, [0], [-40], [None], [-1]).shape == (0, 20)
    assert hw.slice(x, [0], [-4], [None], [-1]).numpy().tolist() == arr[-4::-1].tolist()
    assert x[-4::-1].shape == (7, 20)
    assert hw.to_tensor(arr[:2], device=device)[-4::-1].shape == (0, 20)
