"""Kernel cases: every op of the set as the frontend hands it to kernels (op, numpy inputs, attrs), over many shapes
and dtypes; the oracle is hwadapter.plugin.reference. Shared by the conformance kit and tests/test_kernel_results.py."""
from __future__ import annotations

import itertools

import numpy as np

from hwadapter.plugin import shapes as rules  # the shape rules (pool_out)

FLOAT = ("float16", "float32", "float64")
INTEGER = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMERIC = INTEGER + FLOAT
ANY = ("bool",) + NUMERIC

_rng = np.random.default_rng(8)


def arr(shape, dtype="float32", low=1, high=4):
    """Values in [low, high): positive by default, so no op of the set warns or divides by zero."""
    return _rng.integers(low, high, size=shape).astype(dtype)


_UNARY_DTYPES = {  # the dtypes the frontend sends each unary kernel (it casts the rest first)
    **dict.fromkeys(("exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "erf", "sin", "cos", "gelu",
                     "floor", "ceil", "round"), FLOAT),
    **dict.fromkeys(("abs", "neg", "relu", "sign"), NUMERIC),
    "logical_not": ("bool",),
}
_BINARY_DTYPES = {
    **dict.fromkeys(("add", "sub", "mul", "pow", "maximum", "minimum", "mod"), NUMERIC),
    "div": FLOAT,
    **dict.fromkeys(("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"), ANY),
    **dict.fromkeys(("logical_and", "logical_or", "logical_xor"), ("bool",)),
}
_SHAPES = [(), (0,), (3,), (2, 3)]
_BROADCAST = [((), ()), ((3,), ()), ((), (2, 3)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((0, 3), (1, 3)),
              ((2, 3), (2, 3)), ((4, 1, 3), (2, 1))]


def _elementwise_cases():
    for op, dtypes in _UNARY_DTYPES.items():
        for dt, shape in itertools.product(dtypes, _SHAPES):
            yield op, [arr(shape, dt)], {}
    yield "gelu", [arr((2, 3))], {"approximate": True}
    for op, dtypes in _BINARY_DTYPES.items():
        for dt, (sx, sy) in itertools.product(dtypes, _BROADCAST):
            yield op, [arr(sx, dt), arr(sy, dt)], {}
    for dt, (sc, sx, sy) in itertools.product(ANY, [((), (), ()), ((2, 3), (3,), ()), ((2, 1), (1, 3), (2, 3)),
                                                     ((0, 1), (3,), (1, 3))]):
        yield "where", [arr(sc, "bool", 0, 2), arr(sx, dt), arr(sy, dt)], {}
    for src, dst in itertools.product(ANY, ANY):
        yield "cast", [arr((2, 3), src)], {"dtype": dst}
    yield "cast", [arr((), "float32")], {"dtype": "int8"}
    for dt in NUMERIC:
        bounds = (1, 2) if dt in INTEGER else (1.5, 2.5)
        for lo, hi in [(bounds[0], bounds[1]), (None, bounds[1]), (bounds[0], None), (None, None)]:
            yield "clip", [arr((2, 3), dt)], {"min": lo, "max": hi}


_AXES = {(): [(), None], (0, 3): [(0,), (1,), (0, 1), ()], (2, 3, 4): [(0,), (1, 2), (0, 2), (0, 1, 2), ()]}


def _reduction_cases():
    dtypes = {"sum": FLOAT + ("int64",), "prod": FLOAT + ("int64",), "mean": FLOAT, "max": ANY, "min": ANY}
    for op, dts in dtypes.items():
        for dt, (shape, axes), keep in itertools.product(dts, _AXES.items(), (False, True)):
            for axis in axes:
                axis = tuple(range(len(shape))) if axis is None else axis  # the frontend's form: a tuple
                if op in ("max", "min") and any(shape[a] == 0 for a in axis):
                    continue  # the frontend refuses an empty reduction of max/min before the kernel
                yield op, [arr(shape, dt, 1, 2 if op == "prod" else 4)], {"axis": axis, "keepdim": keep}
    for op, dt, keep in itertools.product(("argmax", "argmin"), ANY, (False, True)):
        for shape, axis in [((), None), ((5,), None), ((5,), 0), ((2, 3), None), ((2, 3), 0), ((2, 3), 1),
                            ((2, 3, 4), 2)]:
            yield op, [arr(shape, dt, 0, 9)], {"axis": axis, "keepdim": keep}


def _linalg_cases():
    shapes = [((2, 3), (3, 4)), ((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((5, 2, 3), (3, 4)),
              ((2, 1, 2, 3), (4, 3, 2)), ((0, 3), (3, 2)), ((2, 0), (0, 2))]
    for dt, (sx, sy) in itertools.product(NUMERIC, shapes):
        yield "matmul", [arr(sx, dt), arr(sy, dt)], {}
    for tx, ty in [(True, False), (False, True), (True, True)]:
        yield "matmul", [arr((4, 3) if tx else (3, 4)), arr((2, 5, 4) if ty else (2, 4, 5))], \
            {"transpose_x": tx, "transpose_y": ty}
        yield "matmul", [arr((3, 4) if tx else (4, 3)), arr((5, 3) if ty else (3, 5))], \
            {"transpose_x": tx, "transpose_y": ty}
        yield "matmul", [arr((3,)), arr((3,))], {"transpose_x": tx, "transpose_y": ty}


def _normalisation_cases():
    for op, dt in itertools.product(("softmax", "log_softmax"), FLOAT):
        for shape, axis in [((2, 3), 0), ((2, 3), 1), ((2, 3), -1), ((1,), 0), ((0, 3), 1), ((2, 3, 4), 1)]:
            yield op, [arr(shape, dt)], {"axis": axis}
        yield op, [arr((2, 3), dt)], {}
    for dt in FLOAT:
        for shape, begin in [((2, 3, 4), 2), ((2, 3, 4), 1), ((3, 4), 0), ((5,), 0), ((0, 4), 1)]:
            norm = shape[begin:]
            yield "layer_norm", [arr(shape, dt), arr(norm, dt), arr(norm, dt)], {"begin_axis": begin,
                                                                                 "epsilon": 1e-5}
        yield "layer_norm", [arr((2, 3), dt), arr((3,), dt), arr((3,), dt)], {}
        for shape, axis in [((2, 3, 4, 4), 1), ((2, 4, 4, 3), 3), ((2, 3), 1), ((2, 3, 5), 1), ((0, 3), 1)]:
            params = [arr((shape[axis],), dt) for _ in range(4)]
            yield "batch_norm", [arr(shape, dt), *params], {"epsilon": 1e-5, "channel_axis": axis}


def _conv_pool_cases():
    for dt in FLOAT:
        for xs, ws, attrs in [
            ((1, 3, 8, 8), (4, 3, 3, 3), {}),
            ((2, 4, 9, 7), (6, 2, 3, 2), {"stride": (2, 1), "padding": (1, 0, 2, 1), "dilation": (1, 2), "groups": 2}),
            ((1, 4, 5, 5), (4, 1, 3, 3), {"stride": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1),
                                          "groups": 4}),
            ((1, 2, 6, 6), (3, 2, 2, 2), {"stride": (3, 3), "padding": (0, 0, 0, 0), "dilation": (2, 2),
                                          "groups": 1}),
            ((0, 2, 4, 4), (3, 2, 2, 2), {}),
        ]:
            yield "conv2d", [arr(xs, dt), arr(ws, dt)], attrs
            yield "conv2d", [arr(xs, dt), arr(ws, dt), arr((ws[0],), dt)], attrs
    pools = [{}, {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": False},
             {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 0, 0, 1), "ceil_mode": True},
             {"kernel_size": (2, 2), "stride": (3, 3), "padding": (0, 0, 0, 0), "ceil_mode": True}]
    for attrs, shape in itertools.product(pools, [(1, 2, 7, 7), (2, 1, 8, 5), (1, 1, 4, 4)]):
        for dt in ANY:
            yield "max_pool2d", [arr(shape, dt, 0, 2 if dt == "bool" else 9)], attrs
        for dt in FLOAT:
            yield "avg_pool2d", [arr(shape, dt)], {**attrs, "exclusive": bool(attrs.get("ceil_mode"))}
    for size, shape in itertools.product([(1, 1), (2, 3), (4, 4), (5, 2)], [(1, 2, 4, 4), (2, 1, 5, 3)]):
        for dt in FLOAT:
            yield "adaptive_avg_pool2d", [arr(shape, dt)], {"output_size": size}
        for dt in NUMERIC:
            yield "adaptive_max_pool2d", [arr(shape, dt)], {"output_size": size}
    yield "adaptive_avg_pool2d", [arr((1, 2, 3, 3))], {}


def _movement_cases():
    for dt in ANY:
        x = arr((2, 3, 4), dt, 0, 2)
        yield "reshape", [x], {"shape": (4, 6)}
        yield "transpose", [x], {"perm": (2, 0, 1)}
        yield "concat", [x, x[:1].copy()], {"axis": 0}
        yield "split", [x], {"sections": (1, 2), "axis": 1}
        yield "slice", [x], {"axes": (0, 2), "starts": (1, 3), "ends": (2, None), "steps": (1, -2)}
        yield "gather", [x, np.array([1, 0, 1], np.int64)], {"axis": 0}
        yield "expand", [x[:, :1].copy()], {"shape": (5, 2, 3, 4)}
        yield "pad", [x], {"pads": ((1, 0), (0, 2), (1, 1)), "mode": "constant", "value": 0}
    x = arr((2, 3, 4))
    for shape in [(24,), (-1,), (2, -1), (1, 2, 1, 12), (3, 2, 4)]:
        yield "reshape", [x], {"shape": shape}
    yield "reshape", [arr((1,))], {"shape": ()}
    yield "reshape", [arr(())], {"shape": (1, 1)}
    yield "reshape", [arr((0, 3))], {"shape": (3, 0)}
    for perm in itertools.permutations(range(3)):
        yield "transpose", [x], {"perm": perm}
    yield "transpose", [arr((2, 0))], {"perm": (1, 0)}
    yield "transpose", [arr(())], {"perm": ()}  # 0-d stays 0-d
    for axis in (0, 1, 2, -1):
        parts = [arr(tuple(n if i == axis % 3 else s for i, s in enumerate(x.shape))) for n in (1, 0, 3)]
        yield "concat", parts, {"axis": axis}
        yield "concat", parts[:1], {"axis": axis}
    yield "concat", [x, x], {}
    for sections, axis in [((2,), 0), ((1, 1), 0), ((1, 0, 2), 1), ((4,), 2), ((2, 2), -1)]:
        yield "split", [x], {"sections": sections, "axis": axis}
    yield "split", [x], {"sections": (1, 1)}
    for axes, starts, ends, steps in [  # the kernels' form: absolute positions, None past position 0
            ((0,), (0,), (2,), (1,)), ((1,), (2,), (None,), (-1,)), ((1,), (0,), (3,), (2,)), ((2,), (3,), (0,), (-1,)),
            ((0, 1), (1, 0), (2, 3), (1, 1)), ((2,), (3,), (None,), (-2,)), ((1,), (0,), (0,), (1,))]:
        yield "slice", [x], {"axes": axes, "starts": starts, "ends": ends, "steps": steps}
    for index, axis in [((), 0), ((3,), 1), ((2, 2), 2), ((0,), 0), ((2, 1), -1)]:
        yield "gather", [x, _rng.integers(-2, 2, size=index).astype(np.int64)], {"axis": axis}
    yield "gather", [x, np.array([1, 0])], {}
    for src, dst in [((3,), (2, 3)), ((1, 3), (4, 2, 3)), ((), (2,)), ((2, 1), (2, 0)), ((1,), (1,)), ((), ())]:
        yield "expand", [arr(src)], {"shape": dst}
    for mode in ("constant", "reflect", "replicate", "circular"):
        yield "pad", [x], {"pads": ((0, 1), (1, 1), (2, 0)), "mode": mode, "value": 1.5}
        yield "pad", [x], {"pads": ((0, 0), (0, 0), (1, 3)), "mode": mode}
    yield "pad", [arr(())], {"pads": (), "mode": "constant", "value": 0.0}
    yield "pad", [arr((0, 2))], {"pads": ((1, 1), (0, 0))}


def _onnx_primitive_cases():
    """The ops the ONNX import added: more math, bitwise, topk, scans, element/nd gathers and scatters,
    conv_transpose2d, lrn, resize."""
    for op, dt, shape in itertools.product(("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"),
                                           FLOAT, _SHAPES):
        yield op, [arr(shape, dt, 0, 2)], {}
    for op, dt, (sx, sy) in itertools.product(("bitwise_and", "bitwise_or", "bitwise_xor"), ("bool",) + INTEGER,
                                              _BROADCAST):
        yield op, [arr(sx, dt, 0, 2 if dt == "bool" else 9), arr(sy, dt, 0, 2 if dt == "bool" else 9)], {}
    for op, dt, (sx, sy) in itertools.product(("left_shift", "right_shift"), INTEGER, _BROADCAST):
        yield op, [arr(sx, dt, 0, 100), arr(sy, dt, 0, 9)], {}
    for dt, shape in itertools.product(("bool",) + INTEGER, _SHAPES):
        yield "bitwise_not", [arr(shape, dt, 0, 2)], {}
    for dt in ANY:
        x = arr((3, 5), dt, 0, 2 if dt == "bool" else 9)
        for k, axis, largest in [(2, 1, True), (0, 0, False), (3, 0, True), (5, -1, False)]:
            yield "topk", [x], {"k": k, "axis": axis, "largest": largest, "sorted": True}
    yield "topk", [arr((2, 0, 3))], {"k": 0, "axis": 1, "largest": True, "sorted": False}
    for op, dt in itertools.product(("cumsum", "cumprod"), NUMERIC):
        for shape, axis in [((), 0), ((4,), 0), ((2, 3), 1), ((2, 3), -2), ((0, 3), 0), ((2, 3, 4), 2)]:
            for exclusive, reverse in itertools.product((False, True), repeat=2):
                yield op, [arr(shape, dt, 1, 3)], {"axis": axis, "exclusive": exclusive, "reverse": reverse}
    for dt in ANY:
        x = arr((3, 4), dt, 0, 2)
        idx = np.array([[0, -1, 2, 1], [3, 0, 0, 1]], np.int64)
        yield "gather_elements", [x, idx[:, :3] % 3], {"axis": 0}
        yield "gather_elements", [x, idx], {"axis": -1}
        yield "scatter_elements", [x, idx, arr((2, 4), dt, 0, 2)], {"axis": 1, "reduction": "none"}
        yield "gather_nd", [x, np.array([[0, 1], [2, -1]], np.int64)], {"batch_dims": 0}
        yield "gather_nd", [x, np.array([[1], [0], [2]], np.int64)], {"batch_dims": 0}
        yield "scatter_nd", [x, np.array([[0, 1], [2, 3]], np.int64), arr((2,), dt, 0, 2)], {"reduction": "none"}
        yield "scatter_nd", [x, np.array([[1]], np.int64), arr((1, 4), dt, 0, 2)], {"reduction": "none"}
    for reduction in ("add", "mul", "max", "min"):
        for dt in NUMERIC:
            x = arr((3, 4), dt)
            yield "scatter_elements", [x, np.array([[1, 1], [0, 2]], np.int64), arr((2, 2), dt)], \
                {"axis": 0, "reduction": reduction}
            yield "scatter_nd", [x, np.array([[1], [1]], np.int64), arr((2, 4), dt)], {"reduction": reduction}
    yield "gather_elements", [arr((2, 3, 4)), np.zeros((2, 0, 4), np.int64)], {"axis": 1}
    yield "gather_nd", [arr((2, 3, 4)), np.array([[[1], [0]], [[2], [2]]], np.int64)], {"batch_dims": 1}
    yield "gather_nd", [arr((2, 3, 4)), np.zeros((0, 2), np.int64)], {}
    for dt in FLOAT:
        for xs, ws, attrs in [
            ((1, 2, 3, 3), (2, 3, 3, 3), {}),
            ((2, 4, 3, 5), (4, 2, 2, 3), {"stride": (2, 3), "padding": (1, 0, 0, 2), "output_padding": (1, 2),
                                          "dilation": (1, 2), "groups": 2}),
            ((1, 1, 2, 2), (1, 1, 1, 1), {"stride": (1, 1), "padding": (0, 0, 0, 0), "output_padding": (3, 0),
                                          "dilation": (1, 1), "groups": 1}),
        ]:
            yield "conv_transpose2d", [arr(xs, dt), arr(ws, dt)], attrs
            yield "conv_transpose2d", [arr(xs, dt), arr(ws, dt), arr((ws[1] * attrs.get("groups", 1),), dt)], attrs
        for shape, size in [((2, 5, 3, 3), 3), ((1, 4, 2), 2), ((1, 3, 2, 2, 2), 5)]:
            yield "lrn", [arr(shape, dt)], {"size": size, "alpha": 1e-3, "beta": 0.75, "bias": 1.0}
    for mode, dt in [("nearest", d) for d in ANY] + [(m, d) for m in ("linear", "cubic") for d in FLOAT]:
        x = arr((1, 2, 3, 4), dt, 0, 2 if dt == "bool" else 9)
        for sizes, scales in [((1, 2, 6, 8), (1.0, 1.0, 2.0, 2.0)), ((1, 2, 2, 3), (1.0, 1.0, 2 / 3, 0.75)),
                              ((1, 2, 3, 4), (1.0, 1.0, 1.0, 1.0)), ((1, 2, 0, 4), (1.0, 1.0, 0.2, 1.0))]:
            yield "resize", [x], {"sizes": sizes, "scales": scales, "mode": mode}
        yield "resize", [x], {"sizes": (2, 2, 5, 5), "scales": (2.0, 1.0, 5 / 3, 1.25), "mode": mode,
                              "coordinate_transformation_mode": "tf_crop_and_resize",
                              "roi": (0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2), "extrapolation_value": 7.0}
        if mode != "nearest":
            yield "resize", [x], {"sizes": (1, 2, 2, 2), "scales": (1.0, 1.0, 0.6, 0.5), "mode": mode,
                                  "antialias": True}


def _training_cases():
    """The ops training adds: pooling gradients (ties after relu: inputs of many zeros; padding, ceil_mode,
    overlapping windows) and the fused optimizer updates (scalars 0-d and of shape (1,), a 0-d parameter)."""
    pools = [{}, {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": False},
             {"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 0, 0, 1), "ceil_mode": True},
             {"kernel_size": (3, 3), "stride": (1, 1), "padding": (1, 1, 1, 1), "ceil_mode": False}]
    for attrs, (n, c, h, w) in itertools.product(pools, [(1, 2, 7, 7), (2, 1, 8, 5)]):
        (kh, kw), (sh, sw) = attrs.get("kernel_size", (2, 2)), attrs.get("stride", (2, 2))
        pt, pb, pl, pr = attrs.get("padding", (0, 0, 0, 0))
        ceil = attrs.get("ceil_mode", False)
        out = (n, c, rules.pool_out(h, kh, sh, pt, pb, ceil), rules.pool_out(w, kw, sw, pl, pr, ceil))
        for dt in FLOAT:
            yield "max_pool2d_grad", [np.maximum(arr((n, c, h, w), dt, -3, 3), 0), arr(out, dt, -3, 4)], attrs
    for size, shape in itertools.product([(1, 1), (2, 3), (4, 4), (5, 2)], [(1, 2, 4, 4), (2, 1, 5, 3)]):
        for dt in FLOAT:
            x = np.maximum(arr(shape, dt, -2, 3), 0)
            yield "adaptive_max_pool2d_grad", [x, arr(shape[:2] + size, dt, -3, 4)], {"output_size": size}
    for dt, (shape, scalar) in itertools.product(FLOAT, [((2, 3), ()), ((4,), (1,)), ((), ()), ((), (1,))]):
        def number(v):
            return np.full(scalar, v, dt)
        p, g, state = arr(shape, dt, -3, 4), arr(shape, dt, -3, 4), arr(shape, dt, 0, 3)
        yield "sgd_update", [p, g, number(0.25)], {}
        yield "sgd_update", [p, g, number(0.5)], {"weight_decay": 0.125}
        yield "momentum_update", [p, g, state, number(0.25)], {}
        yield "momentum_update", [p, g, state, number(0.5)], {"momentum": 0.5, "use_nesterov": True,
                                                              "weight_decay": 0.25}
        adam = [p, g, state - 1, state, number(0.125), number(0.9 ** 3), number(0.999 ** 3)]
        yield "adam_update", adam, {}
        yield "adam_update", adam, {"beta1": 0.8, "beta2": 0.99, "epsilon": 1e-3, "weight_decay": 0.5}
        yield "adam_update", adam, {"weight_decay": 0.25, "decoupled": True}


def reference_cases():
    """(op, input arrays, attrs) as the frontend hands them to kernels: every op of the set, many shapes and dtypes."""
    yield from _elementwise_cases()
    yield from _reduction_cases()
    yield from _linalg_cases()
    yield from _normalisation_cases()
    yield from _conv_pool_cases()
    yield from _movement_cases()
    yield from _onnx_primitive_cases()
    yield from _training_cases()


# ---------------------------------------------------------------------------------------------------------------
# The kit's selection: a bounded set per op, plus special values and large arrays

#: Ops checked at +-inf, NaN and +-0 (float dtypes): IEEE semantics that numpy defines and kernels must keep.
SPECIAL_UNARY = ("neg", "abs", "relu", "sqrt", "exp", "log", "tanh", "sigmoid", "floor", "ceil")
SPECIAL_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum", "equal", "less", "greater")
_SPECIALS = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.5, 2.0])


def special_cases(op: str):
    """Float inputs made of +-inf, NaN, +-0 and plain numbers, every pair of them for a binary op."""
    for dt in FLOAT:
        x = _SPECIALS.astype(dt)
        if op in SPECIAL_UNARY:
            yield [x], {}
        elif op in SPECIAL_BINARY:
            yield [np.repeat(x, len(x)), np.tile(x, len(x))], {}


def large_cases(op: str):
    """One case over ~300k elements (or a 200x300x100 matrix product) for the common ops."""
    x = arr((300, 1001))
    if op in _UNARY_DTYPES:
        yield [x if op != "logical_not" else x > 2], {}
    elif op in ("add", "sub", "mul", "div", "maximum", "minimum", "less", "equal"):
        yield [x, arr((1001,))], {}
    elif op in ("sum", "max", "mean"):
        yield [x], {"axis": (1,), "keepdim": False}
    elif op == "matmul":
        yield [arr((200, 300)), arr((300, 100))], {}
    elif op == "transpose":
        yield [x], {"perm": (1, 0)}
    elif op == "softmax":
        yield [x], {"axis": 1}


_BY_OP: dict | None = None
#: Ops whose frontend function normalises a negative axis before dispatch: their kernels never see one.
_AXIS_NORMALISED = ("gather", "split")


def _as_dispatched(op: str, arrays, attrs) -> dict:
    """attrs as the frontend dispatches them (the reference kernels also take the frontend's inputs' shorthand)."""
    if op == "layer_norm" and "begin_axis" not in attrs:  # hw.nn.functional.layer_norm always passes both
        return {"begin_axis": arrays[0].ndim - 1, "epsilon": 1e-5, **attrs}
    axis = attrs.get("axis")
    if op in _AXIS_NORMALISED and isinstance(axis, int) and axis < 0:
        return {**attrs, "axis": axis + arrays[0].ndim}
    return attrs


def reference_pool(op: str) -> list:
    """[(input arrays, attrs)] of reference_cases for op, as the frontend dispatches them."""
    global _BY_OP
    if _BY_OP is None:
        _BY_OP = {}
        for name, arrays, attrs in reference_cases():
            _BY_OP.setdefault(name, []).append((arrays, _as_dispatched(name, arrays, attrs)))
    return _BY_OP.get(op, [])


def _key_dtype(op: str, arrays) -> np.dtype:
    return arrays[1 if op == "where" else 0].dtype if arrays else np.dtype("float32")


def cases_of(op: str, limit: int = 8, large: bool = True) -> list:
    """[(input arrays, attrs)] for op: of reference_cases, up to `limit` in float32 (evenly spread over its shapes and
    attributes: broadcast, empty, 0-d) and for every other dtype the one with the most axes (each dtype is a program
    to compile on most devices, so one each), then its special-value and large cases."""
    by_dtype: dict = {}
    for case in reference_pool(op):
        by_dtype.setdefault(_key_dtype(op, case[0]), []).append(case)
    main = np.dtype("float32") if np.dtype("float32") in by_dtype else next(iter(by_dtype), None)
    picked = []
    for dtype, pool in by_dtype.items():
        if dtype == main:
            picked += pool[::max(1, -(-len(pool) // limit))]
        else:
            picked.append(max(pool, key=lambda c: sum(a.ndim for a in c[0])))
    return picked + list(special_cases(op)) + (list(large_cases(op)) if large else [])
