"""The primitives the ONNX import added (more math, bitwise ops, topk, scans, element and nd gathers and scatters,
conv_transpose2d, lrn, resize) and the nn converters (hwadapter/onnx/ops/nn.py), against independent oracles:
torch, plain Python loops, onnx's reference implementation and onnxruntime. On every device (ops without a device
kernel fall back to the CPU, counted)."""
from __future__ import annotations

import itertools
import math
import zlib

import numpy as np
import pytest

import hwadapter as hw
import hwadapter.nn.functional as F
from hwadapter import InvalidArgumentError, UnsupportedDTypeError
from hwadapter.api import reference

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

FLOATS = ["float16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8"]
TOL = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}


def rng_for(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def mk(arr, device):
    return hw.to_tensor(np.asarray(arr), device=device)


# --- unary math ---------------------------------------------------------------------------------------------------
_TORCH_UNARY = {"tan": torch.tan, "asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "sinh": torch.sinh,
                "cosh": torch.cosh, "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh}


@pytest.mark.parametrize("op", sorted(_TORCH_UNARY))
def test_unary_math_matches_torch_including_outside_the_domain(op, device):
    for dtype in ("float32", "float64"):
        x = np.array([-3.0, -1.0, -0.5, 0.0, 0.25, 0.999, 1.0, 1.5, 4.0, np.inf, np.nan], dtype)
        got = getattr(hw, op)(mk(x, device)).numpy()
        want = _TORCH_UNARY[op](torch.from_numpy(x.astype(np.float64))).numpy().astype(dtype)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want, rtol=TOL[dtype] * 10, atol=0, equal_nan=True)


def test_unary_math_casts_integers_to_float32_and_keeps_float16():
    assert hw.atan(hw.to_tensor(np.array([1, 2], np.int32))).dtype == hw.float32
    x = np.array([0.5, -0.25], np.float16)
    got = hw.tan(hw.to_tensor(x)).numpy()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, np.float16(np.tan(x.astype(np.float64))), rtol=1e-3)


# --- bitwise --------------------------------------------------------------------------------------------------------
def _python_bits(op, a, b, dtype):
    """op on Python ints, wrapped to dtype's width (an independent model of the machine ops)."""
    info = np.iinfo(dtype)
    bits = info.bits
    if op == "and":
        r = a & b
    elif op == "or":
        r = a | b
    elif op == "xor":
        r = a ^ b
    elif op == "left":
        r = 0 if b >= bits else a << b
    else:  # right: logical for unsigned, arithmetic (Python's >> on negative ints) for signed
        r = (a >> b) if b < bits else (0 if a >= 0 else -1)
    r &= (1 << bits) - 1
    return r - (1 << bits) if info.min < 0 and r >= 1 << (bits - 1) else r


@pytest.mark.parametrize("op, fn", [("and", hw.bitwise_and), ("or", hw.bitwise_or), ("xor", hw.bitwise_xor),
                                    ("left", hw.bitwise_left_shift), ("right", hw.bitwise_right_shift)])
def test_bitwise_binary_ops_match_python_ints(op, fn, device):
    for dtype in INTS:
        info = np.iinfo(dtype)
        rng = rng_for(op, dtype)
        a = rng.integers(info.min, info.max, 40, endpoint=True).astype(dtype)
        if op in ("left", "right"):
            b = rng.integers(0, info.bits, 40).astype(dtype)
        else:
            b = rng.integers(info.min, info.max, 40, endpoint=True).astype(dtype)
        got = fn(mk(a, device), mk(b, device)).numpy()
        want = np.array([_python_bits(op, int(x), int(y), dtype) for x, y in zip(a, b)], dtype)
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, want, err_msg=dtype)


def test_uint8_right_shift_is_logical_and_shifts_past_the_width_give_zero():
    x = hw.to_tensor(np.array([0x80, 0xFF, 7], np.uint8))
    assert hw.bitwise_right_shift(x, hw.to_tensor(np.array([7, 4, 8], np.uint8))).numpy().tolist() == [1, 15, 0]
    assert hw.bitwise_left_shift(x, hw.to_tensor(np.array([1, 4, 8], np.uint8))).numpy().tolist() == [0, 240, 0]


def test_bitwise_not_of_integers_and_bool(device):
    assert hw.bitwise_not(mk(np.array([0, 5, -1], np.int8), device)).numpy().tolist() == [-1, -6, 0]
    assert hw.bitwise_not(mk(np.array([0, 250], np.uint8), device)).numpy().tolist() == [255, 5]
    assert hw.bitwise_not(mk(np.array([True, False]), device)).numpy().tolist() == [False, True]
    assert hw.bitwise_and(mk(np.array([True, True]), device), mk(np.array([True, False]), device)).numpy().tolist() \
        == [True, False]


def test_bitwise_ops_refuse_floats_and_shifts_refuse_bool():
    f = hw.to_tensor(np.ones(2, np.float32))
    with pytest.raises(UnsupportedDTypeError, match="bitwise_and: integer or bool"):
        hw.bitwise_and(f, f)
    with pytest.raises(UnsupportedDTypeError, match="bitwise_not"):
        hw.bitwise_not(f)
    b = hw.to_tensor(np.ones(2, bool))
    with pytest.raises(UnsupportedDTypeError, match="bitwise_left_shift: integer"):
        hw.bitwise_left_shift(b, b)


# --- topk -----------------------------------------------------------------------------------------------------------
def _topk_oracle(x, k, axis, largest):
    """Python's sort of (key, index) pairs along each lane: equal values by lower index."""
    moved = np.moveaxis(x, axis, -1)
    vals, idxs = np.empty(moved.shape[:-1] + (k,), x.dtype), np.empty(moved.shape[:-1] + (k,), np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        lane = moved[pos].tolist()
        order = sorted(range(len(lane)), key=lambda i: ((-lane[i] if largest else lane[i]), i))[:k]
        idxs[pos] = order
        vals[pos] = [lane[i] for i in order]
    return np.moveaxis(vals, -1, axis), np.moveaxis(idxs, -1, axis)


@pytest.mark.parametrize("dtype", ["float32", "int64", "uint8", "float16", "bool"])
def test_topk_matches_a_sort_with_ties_by_lower_index(dtype, device):
    for k, axis, largest in [(3, -1, True), (2, 0, False), (5, 1, True), (0, 1, False), (4, 2, False)]:
        x = rng_for(dtype, k, axis).integers(0, 2 if dtype == "bool" else 4, (3, 5, 4)).astype(dtype)  # many ties
        vals, idx = hw.topk(mk(x, device), k, axis=axis, largest=largest)
        want_v, want_i = _topk_oracle(x, k, axis, largest)
        assert idx.dtype == hw.int64 and vals.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(vals.numpy(), want_v)
        np.testing.assert_array_equal(idx.numpy(), want_i)


def test_topk_validates_its_arguments():
    x = hw.to_tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(InvalidArgumentError, match=r"topk: k = 4 is out of range \(valid: 0..3\)"):
        hw.topk(x, 4)
    with pytest.raises(InvalidArgumentError, match="topk: k must be an int"):
        hw.topk(x, 1.5)
    with pytest.raises(InvalidArgumentError, match="topk: x is 0-d"):
        hw.topk(hw.to_tensor(np.float32(1)), 1)
    with pytest.raises(InvalidArgumentError, match="largest must be True or False"):
        hw.topk(x, 1, largest="yes")


# --- cumsum, cumprod ------------------------------------------------------------------------------------------------
def _scan_oracle(x, axis, exclusive, reverse, product):
    moved = np.moveaxis(x, axis, -1)
    out = np.empty(moved.shape, np.float64 if x.dtype.kind == "f" else np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        lane = [int(v) if x.dtype.kind in "iu" else float(v) for v in moved[pos]]
        order = range(len(lane) - 1, -1, -1) if reverse else range(len(lane))
        acc = 1 if product else 0
        for i in order:
            if not exclusive:
                acc = acc * lane[i] if product else acc + lane[i]
            out[pos + (i,)] = acc
            if exclusive:
                acc = acc * lane[i] if product else acc + lane[i]
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_scans_match_python_loops(op, dtype, device):
    x = rng_for(op, dtype).integers(-3, 4, (3, 4, 2)).astype(dtype)
    for axis, exclusive, reverse in itertools.product((0, 1, -1), (False, True), (False, True)):
        got = getattr(hw, op)(mk(x, device), axis, exclusive=exclusive, reverse=reverse).numpy()
        want = _scan_oracle(x, axis % 3, exclusive, reverse, op == "cumprod")
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got, want.astype(dtype), rtol=1e-6)


def test_cumsum_defaults_match_torch_over_the_flattened_tensor_and_bools_count():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(hw.cumsum(hw.to_tensor(x)).numpy(), torch.cumsum(torch.tensor(x).flatten(), 0))
    got = hw.cumsum(hw.to_tensor(np.array([True, True, False])), axis=0)
    assert got.dtype == hw.int64 and got.numpy().tolist() == [1, 2, 2]
    np.testing.assert_array_equal(hw.cumprod(hw.to_tensor(x), dim=1).numpy(), torch.cumprod(torch.tensor(x), 1))


def test_float16_scans_accumulate_in_float32():
    x = np.full(4096, 1.0, np.float16)
    assert float(hw.cumsum(hw.to_tensor(x), axis=0).numpy()[-1]) == 4096.0  # float16 steps of 1 stop at 2048


# --- gather / scatter -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_along_axis_matches_torch_gather_with_negative_indices(axis, device):
    rng = rng_for("gather_elements", axis)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    shape = list(x.shape)
    shape[axis] = 6
    shape[(axis + 1) % 3] -= 1  # smaller than x on another axis: allowed
    idx = rng.integers(-x.shape[axis], x.shape[axis], shape)
    got = hw.take_along_axis(mk(x, device), idx, axis).numpy()
    want = torch.gather(torch.tensor(x), axis % 3, torch.tensor(idx % x.shape[axis])).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("reduce, torch_reduce", [("add", "sum"), ("mul", "prod"), ("amax", "amax"),
                                                   ("amin", "amin")])
def test_put_along_axis_matches_torch_scatter_reduce(reduce, torch_reduce, device):
    rng = rng_for("scatter_elements", reduce)
    x = rng.integers(-3, 4, (4, 5)).astype(np.float64)
    idx = rng.integers(0, 4, (6, 5))  # repeated indices combine
    v = rng.integers(-3, 4, (6, 5)).astype(np.float64)
    got = hw.put_along_axis(mk(x, device), idx, mk(v, device), 0, reduce=reduce).numpy()
    want = torch.tensor(x).scatter_reduce(0, torch.tensor(idx), torch.tensor(v), torch_reduce).numpy()
    np.testing.assert_array_equal(got, want)


def test_put_along_axis_assigns_and_validates():
    x = hw.to_tensor(np.zeros((2, 3), np.float32))
    got = hw.put_along_axis(x, np.array([[2, 0]]), 5.0, 1).numpy()
    assert got.tolist() == [[5, 0, 5], [0, 0, 0]]
    with pytest.raises(InvalidArgumentError, match="put_along_axis: reduce must be one of"):
        hw.put_along_axis(x, np.array([[0]]), 1.0, 1, reduce="sum")
    with pytest.raises(InvalidArgumentError, match="do not fit arr"):
        hw.take_along_axis(x, np.array([0, 1]), 1)
    with pytest.raises(InvalidArgumentError, match="gather_elements: index 3 is out of range for axis 1"):
        hw.take_along_axis(x, np.array([[3]]), 1)
    with pytest.raises(UnsupportedDTypeError, match="indices must hold integers"):
        hw.take_along_axis(x, np.array([[0.5]]), 1)


def _onnx_reference(op_type, inputs, **attrs):
    """Run one ONNX node on onnx's reference implementation."""
    names = [f"i{k}" for k in range(len(inputs))]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                                                          a.shape) for n, a in zip(names, inputs)],
                              [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[0]


@pytest.mark.parametrize("xs, idx, batch_dims", [
    ((3, 4, 5), [[0, 1], [2, -1], [1, 3]], 0), ((3, 4), [[[1], [0]], [[2], [2]]], 0), ((3, 4), [[2, 3]], 0),
    ((2, 3, 4), [[1, 2], [0, 0]], 1), ((2, 3, 4, 2), [[[1, 2]], [[0, 3]]], 1)])
def test_gather_nd_matches_onnx_reference(xs, idx, batch_dims):
    x = np.arange(math.prod(xs), dtype=np.float32).reshape(xs)
    idx = np.array(idx, np.int64)
    got = reference.KERNELS["gather_nd"](x, idx, batch_dims=batch_dims)
    np.testing.assert_array_equal(got, _onnx_reference("GatherND", [x, idx], batch_dims=batch_dims))


def test_gather_nd_frontend(device):
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    got = hw.gather_nd(mk(x, device), np.array([[1, 2], [0, -1]])).numpy()
    np.testing.assert_array_equal(got, np.stack([x[1, 2], x[0, -1]]))
    with pytest.raises(InvalidArgumentError, match="gather_nd: index of shape"):
        hw.gather_nd(mk(x, device), np.zeros((2, 4), np.int64))


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_matches_onnx_reference(reduction):
    rng = rng_for("scatter_nd", reduction)
    x = rng.integers(-3, 4, (4, 3, 2)).astype(np.float32)
    idx = np.array([[1, 2], [3, 0], [1, 2]] if reduction != "none" else [[1, 2], [3, 0]], np.int64)
    upd = rng.integers(-3, 4, (len(idx), 2)).astype(np.float32)
    got = reference.KERNELS["scatter_nd"](x, idx, upd, reduction=reduction)
    want = _onnx_reference("ScatterND", [x, idx, upd], **({} if reduction == "none" else {"reduction": reduction}))
    np.testing.assert_array_equal(got, want)


def test_scatter_nd_add_frontend_adds_repeated_coordinates(device):
    x = np.zeros((3, 2), np.float32)
    got = hw.scatter_nd_add(mk(x, device), np.array([[1], [1], [0]]), mk(np.ones((3, 2), np.float32), device))
    assert got.numpy().tolist() == [[1, 1], [2, 2], [0, 0]]


# --- conv_transpose2d, lrn ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("xs, ws, kw", [
    ((1, 2, 4, 4), (2, 3, 3, 3), {}),
    ((2, 4, 5, 3), (4, 2, 3, 2), {"stride": 2, "padding": 1, "groups": 2}),
    ((1, 3, 3, 4), (3, 2, 2, 3), {"stride": (3, 2), "padding": (1, 0), "output_padding": (2, 1), "dilation": (2, 1)}),
    ((2, 6, 2, 2), (6, 1, 3, 3), {"stride": 1, "padding": (2, 1), "dilation": 2, "groups": 6}),
])
def test_conv2d_transpose_matches_torch(xs, ws, kw, device):
    dtype = "float64" if len(kw) % 2 else "float32"
    rng = rng_for(xs, ws, dtype)
    x, w = rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)
    b = rng.standard_normal(ws[1] * kw.get("groups", 1)).astype(dtype)
    got = F.conv2d_transpose(mk(x, device), mk(w, device), mk(b, device), **kw).numpy()
    want = torch.nn.functional.conv_transpose2d(torch.tensor(x), torch.tensor(w), torch.tensor(b), **kw).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_conv2d_transpose_validates():
    x, w = hw.to_tensor(np.ones((1, 2, 3, 3), np.float32)), hw.to_tensor(np.ones((3, 1, 2, 2), np.float32))
    with pytest.raises(InvalidArgumentError, match="do not agree"):
        F.conv2d_transpose(x, w)
    w = hw.to_tensor(np.ones((2, 1, 2, 2), np.float32))
    with pytest.raises(InvalidArgumentError, match="output_padding"):
        F.conv2d_transpose(x, w, stride=2, output_padding=2)
    with pytest.raises(InvalidArgumentError, match="bias must have shape"):
        F.conv2d_transpose(x, w, bias=hw.to_tensor(np.ones(3, np.float32)))


def _lrn_oracle(x, size, alpha, beta, bias):
    """ONNX's definition, channel by channel: the window runs from c - floor((size-1)/2) to c + ceil((size-1)/2)."""
    out = np.empty_like(x, dtype=np.float64)
    c = x.shape[1]
    for ch in range(c):
        lo, hi = max(0, ch - (size - 1) // 2), min(c - 1, ch + math.ceil((size - 1) / 2))
        square_sum = (x[:, lo:hi + 1].astype(np.float64) ** 2).sum(axis=1)
        out[:, ch] = x[:, ch] / (bias + alpha / size * square_sum) ** beta
    return out


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_local_response_norm_matches_the_onnx_definition(size, device):
    x = rng_for("lrn", size).standard_normal((2, 6, 3, 3)).astype(np.float32)
    got = F.local_response_norm(mk(x, device), size, alpha=1e-2, beta=0.6, k=1.5).numpy()
    np.testing.assert_allclose(got, _lrn_oracle(x, size, 1e-2, 0.6, 1.5), rtol=1e-5, atol=1e-6)
    if size % 2:  # torch centres even windows the other way
        want = torch.nn.functional.local_response_norm(torch.tensor(x), size, alpha=1e-2, beta=0.6, k=1.5).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# --- resize kernel against onnxruntime -------------------------------------------------------------------------------
def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _resize_model(x, opset, scales=None, sizes=None, roi=None, **attrs):
    inits = [numpy_helper.from_array(np.array([] if roi is None else roi, np.float32), "roi")]
    names = ["x", "roi"]
    if scales is not None:
        inits.append(numpy_helper.from_array(np.array(scales, np.float32), "scales"))
        names.append("scales")
    else:
        inits.append(numpy_helper.from_array(np.array([], np.float32), "scales"))
        inits.append(numpy_helper.from_array(np.array(sizes, np.int64), "sizes"))
        names += ["scales", "sizes"]
    node = helper.make_node("Resize", names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # what this onnxruntime reads
    return model


_RESIZE_CASES = [  # (scales, sizes, attrs)
    ((1, 1, 1.7, 0.6), None, {"mode": "linear"}),
    (None, (1, 2, 7, 3), {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    (None, (1, 2, 1, 3), {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}),
    ((1, 1, 2.5, 1.5), None, {"mode": "cubic", "coordinate_transformation_mode": "asymmetric"}),
    ((1, 1, 0.5, 0.8), None, {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}),
    ((1, 1, 3.0, 2.0), None, {"mode": "nearest", "nearest_mode": "round_prefer_ceil",
                              "coordinate_transformation_mode": "half_pixel"}),
    (None, (1, 2, 3, 9), {"mode": "nearest", "nearest_mode": "floor",
                          "coordinate_transformation_mode": "align_corners"}),
    ((1, 1, 0.6, 0.4), None, {"mode": "nearest", "nearest_mode": "ceil"}),
    ((1, 1, 0.6, 0.3), None, {"mode": "linear", "antialias": 1}),
    ((1, 1, 1.6, 0.7), None, {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"}),
    (None, (1, 2, 3, 2), {"mode": "cubic", "antialias": 1, "exclude_outside": 1}),
]


@pytest.mark.parametrize("scales, sizes, attrs", _RESIZE_CASES)
def test_resize_converter_matches_onnxruntime(scales, sizes, attrs):
    from hwadapter.onnx import model as onnx_model
    x = rng_for(scales, sizes, sorted(attrs.items())).standard_normal((1, 2, 5, 4)).astype(np.float32)
    opset = 18 if "antialias" in attrs else 11 if "tf_half_pixel_for_nn" in attrs.values() else 13
    m = _resize_model(x, opset, scales, sizes, **attrs)
    want = _ort(m, {"x": x})[0]
    got = onnx_model.load(m).run({"x": x}, devices=["cpu"])[0]
    assert np.asarray(got).shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_tf_crop_and_resize_extrapolates_outside_the_roi():
    from hwadapter.onnx import model as onnx_model
    x = np.arange(20, dtype=np.float32).reshape(1, 1, 4, 5)
    m = _resize_model(x, 13, sizes=(1, 1, 3, 3), roi=(0, 0, -0.2, 0.5, 1, 1, 0.8, 1.3), mode="linear",
                      coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-7.0)
    want = _ort(m, {"x": x})[0]
    np.testing.assert_allclose(onnx_model.load(m).run({"x": x}, devices=["cpu"])[0], want, rtol=1e-5, atol=1e-5)


# --- nn converters against onnxruntime, for attributes the node cases leave out ---------------------------------------
def _single(op_type, inputs, consts=(), opset=13, outputs=1, **attrs):
    """A one-node model: `inputs` as graph inputs, `consts` as initializers (name, array)."""
    names = [f"x{k}" for k in range(len(inputs))]
    node = helper.make_node(op_type, names + [n for n, _ in consts], [f"y{k}" for k in range(outputs)], **attrs)
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
           for n, a in zip(names, inputs)]
    types = [helper.np_dtype_to_tensor_dtype(inputs[0].dtype), TensorProto.INT64]  # MaxPool's second: Indices
    outs = [helper.make_tensor_value_info(f"y{k}", types[k], None) for k in range(outputs)]
    inits = [numpy_helper.from_array(a, n) for n, a in consts]
    graph = helper.make_graph([node], "g", vis, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)  # what this onnxruntime reads
    return model, dict(zip(names, inputs))


def _check_against_ort(model, feeds, device="cpu", rtol=1e-5, atol=1e-5):
    from hwadapter.onnx import model as onnx_model
    want = _ort(model, feeds)
    got = onnx_model.load(model).run(feeds, devices=[device] if device == "cpu" else [device, "cpu"])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


R = np.random.default_rng(11)
X1 = R.standard_normal((2, 3, 11)).astype(np.float32)
X2 = R.standard_normal((2, 4, 9, 8)).astype(np.float32)


@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3], "pads": [1, 2], "strides": [2]},
    {"kernel_shape": [2], "auto_pad": "SAME_LOWER"},
    {"kernel_shape": [2], "dilations": [3], "pads": [2, 1]},
    {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_UPPER", "group": 3},
])
def test_conv_1d(attrs):
    group = attrs.get("group", 1)
    w = R.standard_normal((6, 3 // group, attrs["kernel_shape"][0])).astype(np.float32)
    _check_against_ort(*_single("Conv", [X1], [("w", w), ("b", R.standard_normal(6).astype(np.float32))], **attrs))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 2], "pads": [1, 0, 1, 1], "strides": [2, 3], "ceil_mode": 1},
    {"kernel_shape": [3, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]},
    {"kernel_shape": [2, 3], "dilations": [2, 1], "pads": [1, 1, 0, 1]},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2], "count_include_pad": 1, "ceil_mode": 1},
])
def test_pools_with_their_attributes(op, attrs):
    if op != "AveragePool":
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    if op == "LpPool" and "ceil_mode" in attrs:
        pytest.skip("onnxruntime's LpPool has no ceil_mode")
    _check_against_ort(*_single(op, [X2], opset=19 if op != "MaxPool" else 12, **attrs))


@pytest.mark.parametrize("order", [0, 1])
def test_maxpool_indices_with_storage_order(order):
    x = R.integers(0, 4, (2, 3, 5, 6)).astype(np.float32)  # ties: the first position wins
    _check_against_ort(*_single("MaxPool", [x], opset=12, outputs=2, kernel_shape=[2, 3], strides=[2, 2],
                                pads=[1, 0, 0, 1], storage_order=order))


def test_maxpool_1d_with_dilation_and_indices():
    _check_against_ort(*_single("MaxPool", [X1], opset=12, outputs=2, kernel_shape=[3], dilations=[2],
                                pads=[1, 1]))


@pytest.mark.parametrize("attrs", [{"alpha": 0.5, "beta": 2.0, "transA": 1}, {"transB": 1, "beta": 0.0},
                                   {"alpha": -1.5}])
def test_gemm(attrs):
    a = R.standard_normal((4, 3) if attrs.get("transA") else (3, 4)).astype(np.float32)
    b = R.standard_normal((5, 4) if attrs.get("transB") else (4, 5)).astype(np.float32)
    c = R.standard_normal((1, 5)).astype(np.float32)
    _check_against_ort(*_single("Gemm", [a, b], [("c", c)], **attrs))


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset, axis", [(11, 1), (11, -1), (11, 0), (13, 1), (13, -2)])
def test_softmax_family_coerces_to_2d_before_opset_13(op, opset, axis):
    x = R.integers(0, 3, (2, 3, 4)).astype(np.float32)
    _check_against_ort(*_single(op, [x], opset=opset, axis=axis))


def test_batch_norm_with_spatial_0_before_opset_9():
    x = R.standard_normal((2, 3, 4)).astype(np.float32)
    params = [(n, R.uniform(0.5, 1.5, (3, 4)).astype(np.float32)) for n in ("s", "b", "m", "v")]
    model, feeds = _single("BatchNormalization", [x], params, opset=7, spatial=0, epsilon=1e-3)
    s, b, m, v = (p for _, p in params)
    want = (x - m) / np.sqrt(v + 1e-3) * s + b
    from hwadapter.onnx import model as onnx_model
    np.testing.assert_allclose(onnx_model.load(model).run(feeds, devices=["cpu"])[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset, mode, scales", [(9, "nearest", [1, 1, 2, 3]), (9, "linear", [1, 1, 2, 1.5]),
                                                 (10, "linear", [1, 1, 1.5, 2]), (10, "nearest", [1, 2, 2, 1])])
def test_upsample_and_opset_10_resize(opset, mode, scales):
    op = "Upsample" if opset == 9 else "Resize"
    _check_against_ort(*_single(op, [X2], [("scales", np.array(scales, np.float32))], opset=opset, mode=mode))


def test_conv_transpose_with_output_shape_and_auto_pad():
    x = R.standard_normal((1, 2, 3, 4)).astype(np.float32)
    w = R.standard_normal((2, 3, 3, 3)).astype(np.float32)
    _check_against_ort(*_single("ConvTranspose", [x], [("w", w)], strides=[2, 2], output_shape=[7, 9]))
    _check_against_ort(*_single("ConvTranspose", [x], [("w", w)], strides=[2, 3], auto_pad="SAME_UPPER"))
    x1 = R.standard_normal((1, 2, 5)).astype(np.float32)
    _check_against_ort(*_single("ConvTranspose", [x1], [("w", w[:, :, 0].copy())], strides=[2], pads=[1, 0],
                                output_padding=[1]))


def test_converted_nn_ops_run_on_every_device(device):
    """A Conv + BatchNormalization + MaxPool + LRN + Gemm + Softmax chain, on each device (fallback where needed)."""
    from hwadapter.onnx import model as onnx_model
    x = R.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w = R.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bn = [R.uniform(0.5, 1.5, 4).astype(np.float32) for _ in range(4)]
    fc = R.standard_normal((10, 16)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("MaxPool", ["n"], ["p"], kernel_shape=[3, 3], strides=[3, 3]),
             helper.make_node("LRN", ["p"], ["l"], size=3),
             helper.make_node("Flatten", ["l"], ["f"]),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["g"], transB=1),
             helper.make_node("Softmax", ["g"], ["y"], axis=1)]
    fcb = R.standard_normal(10).astype(np.float32)
    inits = [numpy_helper.from_array(a, n) for n, a in zip(("w", "s", "b", "m", "v", "fc", "fcb"), [w, *bn, fc, fcb])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 7
    want = _ort(model, {"x": x})[0]
    got = onnx_model.load(model).run({"x": x}, devices=[device] if device == "cpu" else [device, "cpu"])[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_maxpool_then_maxunpool_round_trip():
    from hwadapter.onnx import model as onnx_model
    x = R.standard_normal((2, 3, 6, 4)).astype(np.float32)
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    want = _ort(model, {"x": x})[0]
    np.testing.assert_array_equal(onnx_model.load(model).run({"x": x}, devices=["cpu"])[0], want)
