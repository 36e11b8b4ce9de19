"""Every kernel result is checked: a plugin kernel that returns the wrong shape, dtype, array type, device or number
of outputs is a KernelExecutionError naming the op and the plugin, never a wrong tensor or a crash of the next op.

The results are checked against the op set's rules (hwadapter.ops.meta); the rules themselves are checked here
against what the numpy reference kernels actually return, over many cases, so that the two cannot drift apart.
"""
from __future__ import annotations

import gc
import itertools
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.config import config
from hwadapter.errors import KernelExecutionError
from hwadapter.ops import meta, reference
from hwadapter.runtime.device import devices

FLOAT = ("float16", "float32", "float64")
INTEGER = ("int8", "int16", "int32", "int64", "uint8")
NUMERIC = INTEGER + FLOAT
ANY = ("bool",) + NUMERIC

_rng = np.random.default_rng(8)


def arr(shape, dtype="float32", low=1, high=4):
    """Values in [low, high): positive by default, so no op of the set warns or divides by zero."""
    return _rng.integers(low, high, size=shape).astype(dtype)


# ---------------------------------------------------------------------------------------------------------------
# The rules against the reference kernels

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
    for src, dst in [((3,), (2, 3)), ((1, 3), (4, 2, 3)), ((), (2,)), ((2, 1), (2, 0)), ((1,), (1,))]:
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


def reference_cases():
    """(op, input arrays, attrs) as the frontend hands them to kernels: every op of the set, many shapes and dtypes."""
    yield from _elementwise_cases()
    yield from _reduction_cases()
    yield from _linalg_cases()
    yield from _normalisation_cases()
    yield from _conv_pool_cases()
    yield from _movement_cases()
    yield from _onnx_primitive_cases()


def _as_meta(out) -> tuple:
    outs = out if isinstance(out, list) else [np.asarray(out)]  # a ufunc's numpy scalar is a 0-d result
    return tuple((o.shape, o.dtype) for o in outs)


def test_every_op_of_the_set_has_a_rule_and_every_rule_an_op():
    assert set(meta.RULES) == set(reference.KERNELS)
    assert {op for op, _, _ in reference_cases()} == set(reference.KERNELS)


def test_the_rules_predict_what_the_reference_kernels_return():
    """For every case: the rule's (shape, dtype) of each output equals the reference kernel's result."""
    wrong, count = [], 0
    for op, arrays, attrs in reference_cases():
        count += 1
        got = _as_meta(reference.KERNELS[op](*arrays, **attrs))
        rule = meta.result_meta(op, tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), attrs)
        if rule != got:
            wrong.append(f"{op}({', '.join(f'{a.dtype}{list(a.shape)}' for a in arrays)}, {attrs}): reference "
                         f"{got}, rule {rule}")
    assert count > 1500
    assert not wrong, f"{len(wrong)} of {count} cases:\n" + "\n".join(wrong[:30])


@pytest.mark.parametrize("op", ["sum", "prod"])
@pytest.mark.parametrize("dtype", ["bool", "int8", "int16", "int32", "uint8"])
def test_sum_and_prod_of_a_small_integer_keep_its_dtype_as_the_compiled_kernels_do(op, dtype):
    """hw.sum(x, dtype="int32") hands the kernel int32: the result is int32 (paddle's, opencl:0's and codegen's)."""
    x = arr((2, 3), dtype, 0, 2)
    got = _as_meta(reference.KERNELS[op](x, axis=(0,), keepdim=False))
    assert got == meta.result_meta(op, (x.shape,), (x.dtype,), {"axis": (0,), "keepdim": False}) == \
        (((3,), np.dtype(dtype)),)


# ---------------------------------------------------------------------------------------------------------------
# Misbehaving kernels are caught at the op, naming the plugin

SITE = Path(__file__).parent / "plugins" / "badkern_site"  # not on sys.path: only these tests see its devices


@pytest.fixture
def bad(monkeypatch, reset_plugins):
    """The hwadapter-badkern distribution installed (badkern:0/1, badhost:0), every kernel right until a test sets
    a fault in bad.FAULTS; afterwards it is gone again and no device memory of it is left allocated."""
    monkeypatch.syspath_prepend(str(SITE))
    reset_plugins()
    import hwadapter_badkern
    monkeypatch.setattr(hwadapter_badkern, "FAULTS", {})
    yield hwadapter_badkern
    gc.collect()
    live = {str(d): d._allocator.allocated for d in devices.all() if d._allocator is not None}
    assert not any(live.values()), f"device memory left allocated: {live}"
    monkeypatch.undo()  # off sys.path before the rescan (reset_plugins' teardown)


def _fault(bad, op: str, fault: str) -> None:
    bad.FAULTS.clear()
    bad.FAULTS[op] = fault


A = np.arange(6, dtype=np.float32).reshape(2, 3) - 2


def _run(op: str, x):
    """op on x the way a user calls it (x + x for add)."""
    return {"add": lambda: x + x, "neg": lambda: -x, "exp": lambda: hw.exp(x),
            "sum": lambda: hw.sum(x, axis=1), "transpose": lambda: hw.transpose(x, [1, 0]),
            "split": lambda: hw.split(x, [1, 2], axis=1)}[op]()


_ORACLE = {"add": lambda a: a + a, "neg": lambda a: -a, "exp": np.exp, "sum": lambda a: a.sum(axis=1),
           "transpose": lambda a: a.T, "split": lambda a: [a[:, :1], a[:, 1:]]}


def _assert_right(op: str, got, a=A):
    want = _ORACLE[op](a)
    if op == "split":
        assert len(got) == 2
        for g, w in zip(got, want):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-6)
        return
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def _raises_naming_the_plugin(op: str, plugin: str, run, *parts, wrong_result=True):
    """run() raises KernelExecutionError naming the op, the plugin, its distribution, the fix and each of `parts`
    (what was due and what came back); the message is returned."""
    with pytest.raises(KernelExecutionError) as info:
        run()
    msg = str(info.value)
    for part in (f"'{op}'", f"'{plugin}' plugin", "hwadapter-badkern 0.1", "report it to the vendor of", *parts,
                 *(["returned", "expected", "bug in the plugin, not in your program"] if wrong_result else [])):
        assert part in msg, f"{part!r} not in: {msg}"
    return msg


# (op, fault, what the message says was due, what it says came back), on badkern:0 (DeviceArrays)
DEVICE_FAULTS = [
    ("add", "shape", "shape (2, 3) and dtype float32", "shape (7,)"),
    ("add", "dtype", "shape (2, 3) and dtype float32", "dtype float64"),
    ("add", "numpy", "DeviceArray on badkern:0 of shape (2, 3)", "numpy.ndarray of shape (2, 3)"),
    ("add", "none", "DeviceArray on badkern:0 of shape (2, 3)", "returned None"),
    ("add", "device", "DeviceArray on badkern:0", "DeviceArray on badkern:1"),
    ("neg", "shape", "shape (2, 3) and dtype float32", "shape (7,)"),
    ("neg", "dtype", "dtype float32", "dtype float64"),
    ("neg", "none", "DeviceArray on badkern:0", "returned None"),
    ("neg", "hostile", "DeviceArray on badkern:0", "returned a Hostile (<Hostile object>)"),
    ("exp", "numpy", "DeviceArray on badkern:0", "numpy.ndarray"),
    ("sum", "shape", "shape (2,) and dtype float32", "shape (3,)"),
    ("sum", "dtype", "shape (2,) and dtype float32", "dtype float64"),
    ("sum", "list", "DeviceArray on badkern:0 of shape (2,)", "a list of 1"),
    ("sum", "device", "DeviceArray on badkern:0", "DeviceArray on badkern:1"),
    ("transpose", "none", "shape (3, 2)", "returned None"),
    ("split", "count", "a list of 2", "a list of 1"),
    ("split", "shape", "a list of 2: [a DeviceArray on badkern:0 of shape (2, 1)", "shape (3,)"),
    ("split", "none", "a list of 2", "[None, a DeviceArray on badkern:0 of shape (2, 2)"),
]


@pytest.mark.parametrize("warm", [False, True], ids=["first-call", "warm"])
@pytest.mark.parametrize("op,fault,due,got", DEVICE_FAULTS, ids=[f"{c[0]}-{c[1]}" for c in DEVICE_FAULTS])
def test_a_wrong_device_kernel_result_is_an_error_naming_the_plugin_and_the_next_op_works(bad, op, fault, due, got,
                                                                                         warm):
    """The first call (route resolution) and a warm call (the inline checks of dispatch_unary/binary) alike."""
    x = hw.to_tensor(A, device="badkern:0")
    if warm:
        _assert_right(op, _run(op, x))
    _fault(bad, op, fault)
    _raises_naming_the_plugin(op, "badkern", lambda: _run(op, x), "badkern:0", due, got)
    bad.FAULTS.clear()
    _assert_right(op, _run(op, x))  # the device and the route are still fine
    _assert_right(op, _run(op, hw.to_tensor(A + 1, device="badkern:0")), A + 1)


HOST_FAULTS = [
    ("add", "shape", "numpy.ndarray (C-contiguous) of shape (2, 3) and dtype float32", "shape (7,)"),
    ("add", "dtype", "dtype float32", "dtype float64"),
    ("add", "none", "numpy.ndarray", "returned None"),
    ("add", "hostile", "numpy.ndarray", "returned a Hostile (<Hostile object>)"),
    ("add", "strided", "C-contiguous", "numpy.ndarray of shape (2, 3)"),
    ("neg", "strided", "C-contiguous", "numpy.ndarray of shape (2, 3)"),
    ("sum", "list", "numpy.ndarray (C-contiguous) of shape (2,)", "a list of 1"),
    ("split", "count", "a list of 2", "a list of 1"),
    ("transpose", "dtype", "shape (3, 2) and dtype float32", "dtype float64"),
]


@pytest.mark.parametrize("op,fault,due,got", HOST_FAULTS, ids=[f"{c[0]}-{c[1]}" for c in HOST_FAULTS])
def test_a_wrong_host_kernel_result_is_an_error_naming_the_plugin(bad, op, fault, due, got):
    x = hw.to_tensor(A, device="badhost:0")
    _fault(bad, op, fault)
    _raises_naming_the_plugin(op, "badhost", lambda: _run(op, x), "badhost:0", due, got)
    bad.FAULTS.clear()
    _assert_right(op, _run(op, x))


def test_an_array_larger_than_its_memory_block_is_refused(bad):
    """A DeviceArray whose block cannot hold its shape would let the next kernel read past the allocation."""
    a = np.ones((16, 16), np.float32)
    x = hw.to_tensor(a, device="badkern:0")
    _fault(bad, "transpose", "short")
    _raises_naming_the_plugin("transpose", "badkern", lambda: hw.transpose(x, [1, 0]), "shape (16, 16)")
    bad.FAULTS.clear()
    np.testing.assert_array_equal(hw.transpose(x, [1, 0]).numpy(), a.T)


def test_a_broadcast_and_a_0d_result_are_checked_on_the_warm_path(bad):
    x = hw.to_tensor(A, device="badkern:0")
    row = hw.to_tensor(A[0], device="badkern:0")
    np.testing.assert_array_equal((x + row).numpy(), A + A[0])  # warm the route
    _fault(bad, "add", "shape")
    _raises_naming_the_plugin("add", "badkern", lambda: x + row, "shape (2, 3)", "shape (7,)")
    s = hw.to_tensor(np.float32(2), device="badhost:0")
    bad.FAULTS.clear()
    assert (s + s).shape == () and float((s + s).numpy()) == 4.0
    _fault(bad, "add", "dtype")
    _raises_naming_the_plugin("add", "badhost", lambda: s + s, "shape () and dtype float32", "dtype float64")


@pytest.fixture
def badkern_fallback(bad, monkeypatch):
    """badkern as the fallback device: testdev:0's ops without a kernel (exp) run on badkern:0."""
    monkeypatch.setattr(config, "fallback_device", "badkern")
    devices.forget_routes()
    yield bad
    devices.forget_routes()


@pytest.mark.parametrize("fault,got", [("shape", "shape (7,)"), ("dtype", "dtype float64"), ("numpy", "numpy.ndarray"),
                                       ("none", "returned None")])
def test_a_wrong_result_of_the_fallback_device_names_the_fallback_plugin(badkern_fallback, testdev, fault, got):
    x = hw.to_tensor(A, device=testdev)
    _fault(badkern_fallback, "exp", fault)
    msg = _raises_naming_the_plugin("exp", "badkern", lambda: hw.exp(x), "fallback on badkern:0", got)
    assert "for testdev:0" in msg and "'testdev' plugin" not in msg
    badkern_fallback.FAULTS.clear()
    np.testing.assert_allclose(hw.exp(x).numpy(), np.exp(A), rtol=1e-6)
    assert hw.profiler.fallback_count("exp", "testdev:0") == 2


def test_a_failing_fallback_kernel_is_blamed_on_the_fallback_plugin(badkern_fallback, testdev):
    x = hw.to_tensor(A, device=testdev)
    _fault(badkern_fallback, "exp", "raise")
    msg = _raises_naming_the_plugin("exp", "badkern", lambda: hw.exp(x), "badkern:0 (the fallback device, running "
                                    "it for testdev:0)", "RuntimeError: exp: the kernel broke", wrong_result=False)
    assert "'testdev' plugin" not in msg


def test_a_right_result_of_the_fallback_device_is_accepted_and_copied_back(bad):
    """badkern has no mul: cpu:0 runs it, its result passes the check there and comes back to badkern:0."""
    x = hw.to_tensor(A, device="badkern:0")
    y = x * x
    assert y.device == x.device and hw.profiler.fallback_count("mul", "badkern:0") == 1
    np.testing.assert_array_equal(y.numpy(), A * A)
