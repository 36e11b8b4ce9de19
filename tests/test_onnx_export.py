"""hwadapter.jit.save / hwadapter.onnx.export: traced graphs written as ONNX that onnx.checker accepts and
onnxruntime runs to hwadapter's results (the networks of benchmarks/graph.py, and each op family)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import hwadapter as hw  # noqa: E402
import hwadapter.nn.functional as F  # noqa: E402
from hwadapter.api.ir import Graph, Node, Value  # noqa: E402
from hwadapter.graph import GraphBuilder, run  # noqa: E402
import hwadapter.onnx as hwonnx  # noqa: E402
from hwadapter.onnx import export  # noqa: E402

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "graph.py"


def _ort():
    return pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of the export tests (test extra)")


def _ort_run(model_or_path, feeds: dict) -> list:
    ort = _ort()
    data = model_or_path.SerializeToString() if hasattr(model_or_path, "SerializeToString") else str(model_or_path)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the model as written, not rewritten
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _bench_module():
    spec = importlib.util.spec_from_file_location("bench_graph", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _checked(path) -> "onnx.ModelProto":
    model = onnx.load(str(path))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version >= 17
    assert "fused" not in {n.op_type for n in model.graph.node}
    return model


# --- the networks of the graph benchmark -------------------------------------------------------------------------
@pytest.mark.parametrize("net", ["mlp", "cnn"])
def test_saved_benchmark_network_runs_in_onnxruntime_to_hwadapters_result(tmp_path, net):
    bench = _bench_module()
    forward, x = bench.mlp_model("cpu") if net == "mlp" else bench.cnn_model("cpu")[:2]
    path = hw.jit.save(forward, tmp_path / f"{net}.onnx", input_spec=[x])
    model = _checked(path)
    ops = {n.op_type for n in model.graph.node}
    assert ({"MatMul", "Add", "Relu"} <= ops if net == "mlp"
            else {"Conv", "Sqrt", "Div", "Relu", "MaxPool", "ReduceMean"} <= ops)
    expected = forward(x).numpy()
    (got,) = _ort_run(path, {model.graph.input[0].name: x.numpy()})
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    (back,) = hwonnx.load(path).run([x.numpy()])  # and hwadapter's importer reads its own export
    np.testing.assert_allclose(back, expected, rtol=1e-4, atol=1e-5)


def test_save_takes_shapes_and_dtypes_and_the_file_loads_back_into_hwadapter(tmp_path):
    w = hw.to_tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))

    def f(x):
        return F.softmax(F.relu(x @ w), axis=-1)
    path = hw.jit.save(f, tmp_path / "f.onnx", input_spec=[((2, 4), "float32")])
    model = _checked(path)
    assert [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == [2, 4]
    x = np.arange(8, dtype=np.float32).reshape(2, 4) / 8
    (got,) = _ort_run(path, {model.graph.input[0].name: x})
    np.testing.assert_allclose(got, f(hw.to_tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_graph_get_graph_returns_is_before_the_passes_so_no_fused_node():
    bench = _bench_module()
    _, x, block = bench.cnn_model("cpu")
    graph = hw.jit.get_graph(block, x)
    assert [n.op for n in graph.nodes] == ["conv2d", "batch_norm", "relu"]


# --- op families: a hand-built graph, run by hwadapter's reference executor and by onnxruntime -----------------
RNG = np.random.default_rng(7)


def _arr(shape, dtype="float32", low=-2.0, high=2.0):
    if np.dtype(dtype).kind == "f":
        return RNG.uniform(low, high, shape).astype(dtype)
    if np.dtype(dtype) == np.bool_:
        return RNG.integers(0, 2, shape).astype(bool)
    return RNG.integers(int(low) - 3, int(high) + 4, shape).astype(dtype)


def _check_graph(b: GraphBuilder, outputs, feeds: dict, rtol=1e-5, atol=1e-6):
    graph = b.build(outputs)
    model = export.to_model(graph)
    expected = run(graph, feeds, device="cpu")
    got = _ort_run(model, feeds)
    for name, g in zip(graph.outputs, got):
        e = expected[name].numpy()
        assert g.dtype == e.dtype and g.shape == e.shape, (name, g.dtype, e.dtype, g.shape, e.shape)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("op", ["abs", "neg", "exp", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu",
                                "erf", "sin", "cos", "floor", "ceil", "round", "sign", "log"])
def test_unary(op):
    b = GraphBuilder()
    x = b.input("x", (3, 5))
    low = 0.1 if op in ("sqrt", "rsqrt", "log") else -3.0
    feeds = {"x": _arr((3, 5), low=low, high=3.0)}
    if op == "round":
        feeds["x"][0, :4] = [0.5, 1.5, 2.5, -0.5]  # ties to even, on both sides
    _check_graph(b, b.op(op, [x]), feeds)


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu(approximate):
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    _check_graph(b, b.op("gelu", [x], approximate=approximate), {"x": _arr((4, 6), low=-4, high=4)})


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "mod", "equal",
                                "not_equal", "less", "less_equal", "greater", "greater_equal"])
def test_binary_float_with_broadcast(op):
    b = GraphBuilder()
    x, y = b.input("x", (2, 3, 4)), b.input("y", (3, 1))
    feeds = {"x": _arr((2, 3, 4)), "y": _arr((3, 1), low=0.5, high=2.0) * np.float32([[1], [-1], [1]])}
    if op == "pow":
        feeds["x"] = np.abs(feeds["x"]) + np.float32(0.1)
    _check_graph(b, b.op(op, [x, y]), feeds)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "mod", "maximum", "less"])
def test_binary_int(op):
    b = GraphBuilder()
    x, y = b.input("x", (3, 4), "int32"), b.input("y", (3, 4), "int32")
    y_val = _arr((3, 4), "int32", low=1, high=5)
    y_val[y_val == 0] = 1
    y_val[0] = -np.abs(y_val[0])  # numpy's mod takes the divisor's sign
    _check_graph(b, b.op(op, [x, y]), {"x": _arr((3, 4), "int32", low=-9, high=9), "y": y_val})


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_logical(op):
    b = GraphBuilder()
    x, y = b.input("x", (5,), "bool"), b.input("y", (5,), "bool")
    n = b.op("logical_not", [b.op(op, [x, y])])
    _check_graph(b, n, {"x": _arr((5,), "bool"), "y": _arr((5,), "bool")})


def test_where_cast_clip():
    b = GraphBuilder()
    x, y = b.input("x", (3, 4)), b.input("y", (3, 4))
    cond = b.op("greater", [x, y])
    out = b.op("clip", [b.op("where", [cond, x, y])], min=-0.5, max=1.0)
    lo = b.op("clip", [x], max=0.25)
    casts = [b.op("cast", [x], dtype=np.dtype("int32")), b.op("cast", [cond], dtype=np.dtype("float32"))]
    _check_graph(b, [out, lo, *casts], {"x": _arr((3, 4)), "y": _arr((3, 4))})


@pytest.mark.parametrize("op", ["sum", "prod", "max", "min", "mean"])
@pytest.mark.parametrize("axis,keepdim", [(None, False), (1, True), ((0, 2), False)])
def test_reductions(op, axis, keepdim):
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    _check_graph(b, b.op(op, [x], axis=axis, keepdim=keepdim), {"x": _arr((2, 3, 4), low=0.5, high=1.5)})


@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.parametrize("axis,keepdim", [(None, False), (None, True), (1, False), (-1, True)])
def test_arg_reductions(op, axis, keepdim):
    b = GraphBuilder()
    x = b.input("x", (3, 4))
    feeds = {"x": _arr((3, 4))}
    feeds["x"][1, 0] = feeds["x"][1, 2] = 9.0  # a tie: the lower index wins
    feeds["x"][2, 1] = feeds["x"][2, 3] = -9.0
    _check_graph(b, b.op(op, [x], axis=axis, keepdim=keepdim), feeds)


@pytest.mark.parametrize("tx,ty", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transposes_and_batches(tx, ty):
    b = GraphBuilder()
    xs, ys = ((2, 5, 3) if tx else (2, 3, 5)), ((4, 5) if ty else (5, 4))
    x, y = b.input("x", xs), b.input("y", ys)
    _check_graph(b, b.op("matmul", [x, y], transpose_x=tx, transpose_y=ty), {"x": _arr(xs), "y": _arr(ys)},
                 rtol=1e-5, atol=1e-5)


def test_softmax_log_softmax_layer_norm():
    b = GraphBuilder()
    x, w, bias = b.input("x", (2, 3, 8)), b.input("w", (8,)), b.input("b", (8,))
    outs = [b.op("softmax", [x], axis=1), b.op("log_softmax", [x], axis=-1),
            b.op("layer_norm", [x, w, bias], begin_axis=-1, epsilon=1e-5)]
    _check_graph(b, outs, {"x": _arr((2, 3, 8)), "w": _arr((8,)), "b": _arr((8,))}, atol=1e-5)


@pytest.mark.parametrize("channel_axis", [1, -1])
def test_batch_norm(channel_axis):
    b = GraphBuilder()
    c = 4
    shape = (2, c, 3, 3) if channel_axis == 1 else (2, 3, c)
    x = b.input("x", shape)
    params = [b.input(n, (c,)) for n in ("mean", "var", "w", "bias")]
    feeds = {"x": _arr(shape), "mean": _arr((c,)), "var": _arr((c,), low=0.5, high=1.5), "w": _arr((c,)),
             "bias": _arr((c,))}
    _check_graph(b, b.op("batch_norm", [x, *params], epsilon=1e-3, channel_axis=channel_axis), feeds, atol=1e-5)


@pytest.mark.parametrize("stride,padding,dilation,groups,act", [
    ((1, 1), (0, 0, 0, 0), (1, 1), 1, None), ((2, 1), (1, 2, 0, 1), (1, 1), 1, "relu"),
    ((1, 1), (1, 1, 1, 1), (2, 2), 2, "gelu"), ((1, 2), (2, 0, 1, 1), (1, 1), 4, "sigmoid"),
    ((1, 1), (1, 1, 1, 1), (1, 1), 1, "relu6"), ((2, 2), (1, 1, 1, 1), (1, 1), 2, "silu")])
def test_conv2d(stride, padding, dilation, groups, act):
    b = GraphBuilder()
    x, w, bias = b.input("x", (2, 4, 9, 8)), b.input("w", (8, 4 // groups, 3, 3)), b.input("b", (8,))
    out = b.op("conv2d", [x, w, bias], stride=stride, padding=padding, dilation=dilation, groups=groups,
               activation=act)
    _check_graph(b, out, {"x": _arr((2, 4, 9, 8)), "w": _arr((8, 4 // groups, 3, 3)), "b": _arr((8,))},
                 rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bias,act,ty", [(True, None, False), (True, "gelu", True), (False, "relu", False),
                                         (True, "silu", False), (True, "relu6", True), (True, "tanh", False)])
def test_a_fused_linear_layer_is_matmul_add_and_its_activation(bias, act, ty):
    """matmul with graph fusion's bias input and activation: MatMul, Add and the activation's ops, which onnxruntime
    runs to hwadapter's result."""
    b = GraphBuilder()
    x, w = b.input("x", (2, 3, 8)), b.input("w", (5, 8) if ty else (8, 5))
    ins = [x, w] + ([b.input("b", (5,))] if bias else [])
    out = b.op("matmul", ins, transpose_y=ty, activation=act)
    feeds = {"x": _arr((2, 3, 8)), "w": _arr((5, 8) if ty else (8, 5)), **({"b": _arr((5,))} if bias else {})}
    _check_graph(b, out, feeds, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("kernel,stride,padding,ceil", [((2, 2), (2, 2), (0, 0, 0, 0), False),
                                                         ((3, 3), (2, 2), (1, 1, 1, 1), False),
                                                         ((3, 3), (2, 2), (0, 0, 0, 0), True)])
def test_pools(op, kernel, stride, padding, ceil):
    b = GraphBuilder()
    x = b.input("x", (1, 2, 8, 8))
    _check_graph(b, b.op(op, [x], kernel_size=kernel, stride=stride, padding=padding, ceil_mode=ceil),
                 {"x": _arr((1, 2, 8, 8))})


@pytest.mark.parametrize("op", ["adaptive_avg_pool2d", "adaptive_max_pool2d"])
@pytest.mark.parametrize("size", [(1, 1), (2, 4)])
def test_adaptive_pools(op, size):
    b = GraphBuilder()
    x = b.input("x", (1, 3, 4, 8))
    _check_graph(b, b.op(op, [x], output_size=size), {"x": _arr((1, 3, 4, 8))})


def test_shape_ops():
    b = GraphBuilder()
    x, idx = b.input("x", (4, 6)), b.input("i", (3,), "int64")
    parts = b.op("split", [x], n_outputs=3, sections=(1, 2, 3), axis=1)
    outs = [b.op("reshape", [x], shape=(3, -1)), b.op("transpose", [x], perm=(1, 0)),
            b.op("concat", [x, x], axis=0), *parts,
            b.op("slice", [x], axes=(0, 1), starts=(3, 1), ends=(None, 5), steps=(-1, 2)),
            b.op("slice", [x], axes=(1,), starts=(4,), ends=(0,), steps=(-2,)),
            b.op("gather", [x, idx], axis=1), b.op("expand", [b.op("reshape", [x], shape=(4, 1, 6))], shape=(4, 2, 6)),
            b.op("pad", [x], pads=((1, 0), (2, 1)), mode="constant", value=1.5),
            b.op("pad", [x], pads=((1, 1), (2, 0)), mode="reflect"),
            b.op("pad", [x], pads=((0, 2), (1, 1)), mode="replicate")]
    _check_graph(b, outs, {"x": _arr((4, 6)), "i": np.array([5, -1, 0], np.int64)})


# --- what cannot be exported -----------------------------------------------------------------------------------
def test_an_op_without_an_onnx_form_is_a_clear_error_before_anything_is_written(tmp_path):
    from hwadapter.api.ir import Graph, Node, Value
    v = {"x": Value("x", (2,), np.dtype("float32")), "y": Value("y", (2,), np.dtype("float32"))}
    graph = Graph([Node("f0", "fused", ("x",), ("y",), {})], v, ["x"], ["y"])
    path = tmp_path / "m.onnx"
    with pytest.raises(export.ExportError, match=r"node 'f0' \(op 'fused'\).*before them"):
        export.save(graph, path)
    assert not path.exists()
    graph = Graph([Node("k", "my_kp_op", ("x",), ("y",), {})], v, ["x"], ["y"])
    with pytest.raises(hw.HwAdapterError, match="my_kp_op"):
        export.to_model(graph)


def test_integer_division_is_refused_not_approximated():
    b = GraphBuilder()
    x, y = b.input("x", (3,), "int32"), b.input("y", (3,), "int32")
    export.to_model(b.build(b.op("mod", [x, y])))  # integer mod exports: it is exact
    from hwadapter.api.ir import Graph, Node, Value
    v = {n: Value(n, (3,), np.dtype("int32")) for n in ("x", "y", "z")}
    with pytest.raises(export.ExportError, match="integer division"):
        export.to_model(Graph([Node("d", "div", ("x", "y"), ("z",), {})], v, ["x", "y"], ["z"]))


def test_save_with_a_bad_input_spec_says_what_to_pass(tmp_path):
    with pytest.raises(hw.HwAdapterError, match="input_spec"):
        hw.jit.save(lambda x: x, tmp_path / "m.onnx", input_spec=["not an input"])


def test_an_output_that_is_an_input_is_written_through_identity(tmp_path):
    path = hw.jit.save(lambda x: (F.relu(x), x), tmp_path / "m.onnx", input_spec=[((3,), "float32")])
    model = _checked(path)
    x = np.array([-1, 0, 2], np.float32)
    got = _ort_run(path, {model.graph.input[0].name: x})
    np.testing.assert_array_equal(got[0], [0, 0, 2])
    np.testing.assert_array_equal(got[1], x)


# --- the primitives added for ONNX import, exported back ---------------------------------------------------------
@pytest.mark.parametrize("op", ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"])
def test_unary_math(op):
    b = GraphBuilder()
    x = b.input("x", (2, 5))
    low, high = {"acosh": (1.1, 3.0), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "atanh": (-0.9, 0.9)}.get(op, (-1, 1))
    _check_graph(b, b.op(op, [x]), {"x": _arr((2, 5), low=low, high=high)})


@pytest.mark.parametrize("dtype", ["int32", "bool", "uint16", "uint64"])
def test_bitwise(dtype):
    b = GraphBuilder()
    x, y = b.input("x", (6,), dtype), b.input("y", (6,), dtype)
    outs = [b.op(op, [x, y]) for op in ("bitwise_and", "bitwise_or", "bitwise_xor")] + [b.op("bitwise_not", [x])]
    _check_graph(b, outs, {"x": _arr((6,), dtype, low=-20, high=20), "y": _arr((6,), dtype, low=-20, high=20)})


def test_shifts_of_unsigned_integers():
    b = GraphBuilder()
    x, y = b.input("x", (5,), "uint8"), b.input("y", (5,), "uint8")
    feeds = {"x": np.array([1, 3, 128, 255, 17], np.uint8), "y": np.array([0, 1, 1, 4, 7], np.uint8)}
    _check_graph(b, [b.op("left_shift", [x, y]), b.op("right_shift", [x, y])], feeds)


@pytest.mark.parametrize("largest", [True, False])
def test_topk(largest):
    b = GraphBuilder()
    x = b.input("x", (3, 6))
    feeds = {"x": np.round(_arr((3, 6)), 0)}  # rounded: ties, the lower index first
    _check_graph(b, list(b.op("topk", [x], n_outputs=2, k=3, axis=1, largest=largest, sorted=True)), feeds)


@pytest.mark.parametrize("exclusive,reverse", [(False, False), (True, False), (False, True), (True, True)])
def test_cumsum(exclusive, reverse):
    b = GraphBuilder()
    x = b.input("x", (3, 4))
    _check_graph(b, b.op("cumsum", [x], axis=1, exclusive=exclusive, reverse=reverse), {"x": _arr((3, 4))})


def test_gathers_and_scatters():
    b = GraphBuilder()
    x, i, u = b.input("x", (3, 4)), b.input("i", (2, 4), "int64"), b.input("u", (2, 4))
    j, v = b.input("j", (2, 1), "int64"), b.input("v", (2, 4))
    outs = [b.op("gather_elements", [x, i], axis=0), b.op("scatter_elements", [x, i, u], axis=0, reduction="add"),
            b.op("gather_nd", [x, j], batch_dims=0), b.op("scatter_nd", [x, j, v], reduction="none")]
    feeds = {"x": _arr((3, 4)), "i": np.array([[0, 2, 1, -1], [2, 0, 0, 1]], np.int64), "u": _arr((2, 4)),
             "j": np.array([[2], [0]], np.int64), "v": _arr((2, 4))}
    _check_graph(b, outs, feeds)


def test_lrn_and_conv_transpose():
    b = GraphBuilder()
    x, w, bias = b.input("x", (1, 4, 5, 5)), b.input("w", (4, 3, 3, 3)), b.input("b", (3,))
    outs = [b.op("lrn", [x], size=3, alpha=1e-3, beta=0.75, bias=1.0),
            b.op("conv_transpose2d", [x, w, bias], stride=(2, 2), padding=(1, 0, 0, 1), output_padding=(1, 0),
                 dilation=(1, 1), groups=1)]
    _check_graph(b, outs, {"x": _arr((1, 4, 5, 5)), "w": _arr((4, 3, 3, 3)), "b": _arr((3,))}, atol=1e-5)


def test_signed_shifts_and_cumprod_are_refused():
    b = GraphBuilder()
    x = b.input("x", (3,), "int32")
    with pytest.raises(export.ExportError, match="unsigned"):
        export.to_model(b.build(b.op("left_shift", [x, x])))
    b = GraphBuilder()
    x = b.input("x", (3,))
    with pytest.raises(export.ExportError, match="CumProd"):
        export.to_model(b.build(b.op("cumprod", [x], axis=0)))


# --- exports that must compute what eager computes, or be refused (issue 22) --------------------------------------
def _save_and_run(tmp_path, fn, *arrays) -> tuple:
    """(eager's result, onnxruntime's result of the saved export) of fn on these arrays."""
    expected = fn(*(hw.to_tensor(a) for a in arrays)).numpy()
    path = hw.jit.save(fn, tmp_path / "m.onnx", input_spec=list(arrays))
    model = _checked(path)
    (got,) = _ort_run(path, {i.name: a for i, a in zip(model.graph.input, arrays)})
    return expected, got


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_integer_pow_wraps_and_takes_negative_exponents_as_eager(tmp_path, dtype):
    info = np.iinfo(dtype)
    x = np.array([0, 2, 1, 3, info.max, info.min, 7, 2, 0], dtype)
    y = np.array([0, 1, 5, 40, 2, 3, 11, info.max, 3], dtype)
    if info.min < 0:  # 0 ** -1 was INT_MIN in onnxruntime; eager truncates 1 / x ** |y|: 1, +-1 or 0
        x = np.concatenate([x, np.array([0, 2, -1, -1, 1, -2], dtype)])
        y = np.concatenate([y, np.array([-1, -1, -3, -2, -5, info.min], dtype)])
    expected, got = _save_and_run(tmp_path, lambda a, b: a ** b, x, y)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"])
def test_integer_mod_by_zero_is_zero_as_eager_and_int_min_by_minus_one_does_not_trap(tmp_path, dtype):
    info = np.iinfo(dtype)
    x = np.array([5, 7, 0, info.max, info.min, 9], dtype)
    y = np.array([0, 3, 0, 0, 7, info.max], dtype)
    if info.min < 0:
        x = np.concatenate([x, np.array([info.min, -7, 7, -1], dtype)])
        y = np.concatenate([y, np.array([-1, 3, -3, 0], dtype)])
    expected, got = _save_and_run(tmp_path, lambda a, b: a % b, x, y)
    assert not expected[y == 0].any() and not got[y == 0].any()  # what eager defines x % 0 to be
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("dtype", ["uint32", "uint64"])
@pytest.mark.parametrize("op", ["max", "min"])
def test_unsigned_max_and_min_reductions_keep_every_value(tmp_path, dtype, op):
    """onnxruntime has no uint32/uint64 ReduceMax; widened to int64 (1.31.1) it lost values from 2^31 up (it compares
    the low halves of int64s as signed): the export folds elementwise Max/Min in the dtype itself."""
    x = np.full((3, 2, 3), 7, dtype)
    x[1, :, 2] = [2 ** 32 - 1, 3]
    x[2, :, 1] = [5, 2 ** 31]
    x[0, :, 0] = [2 ** 31 + 1, 2 ** 31 + 2]
    expected, got = _save_and_run(tmp_path, lambda a: getattr(hw, op)(a, axis=1), x)
    np.testing.assert_array_equal(expected, getattr(np, op)(x, axis=1))
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("name,fn,shapes", [
    ("relu", F.relu, [(4,)]), ("neg", lambda a: -a, [(4,)]), ("abs", hw.abs, [(4,)]),
    ("matmul", lambda a, b: a @ b, [(2, 3), (3, 2)]), ("minimum", hw.minimum, [(4,), (4,)]),
    ("maximum", hw.maximum, [(4,), (4,)]), ("sum", lambda a: hw.sum(a, axis=0), [(4,)]),
    ("where", lambda a, b: hw.where(a > b, a, b), [(4,), (4,)])])
@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "float16", "uint16", "uint32", "uint64"])
def test_types_onnx_or_onnxruntime_lack_are_computed_wider_and_cast_back(tmp_path, name, fn, shapes, dtype):
    """uint8 relu/neg/matmul and int16 min/max raised a raw InferenceError or were refused by onnxruntime."""
    lo, hi = (-4, 4) if np.dtype(dtype).kind != "u" else (0, 255)
    arrays = [np.linspace(lo, hi, int(np.prod(s))).astype(dtype).reshape(s) for s in shapes]
    arrays = [a if i == 0 else a[::-1].copy() for i, a in enumerate(arrays)]
    expected, got = _save_and_run(tmp_path, fn, *arrays)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got.astype(float), expected.astype(float), rtol=1e-3)


def test_an_op_onnx_cannot_type_is_an_export_error_naming_op_and_dtype():
    v = {n: Value(n, (3,), np.dtype("int64")) for n in ("x", "y")}
    with pytest.raises(export.ExportError, match=r"op 'erf'.*ONNX Erf does not take int64") as err:
        export.to_model(Graph([Node("e", "erf", ("x",), ("y",), {})], v, ["x"], ["y"]))
    assert err.value.fix


def test_an_error_of_onnx_checker_is_an_export_error_naming_the_node(monkeypatch):
    b = GraphBuilder()
    x = b.input("x", (3,))
    graph = b.build(b.op("relu", [x]))
    monkeypatch.setitem(export.WRITERS, "relu", lambda w, n: w.node("Relu", [n.inputs[0], n.inputs[0]], n.outputs))
    with pytest.raises(export.ExportError, match=r"node 'relu_0' \(op 'relu'\).*onnx.checker rejects"):
        export.to_model(graph)


def test_a_raw_error_in_a_writer_is_an_export_error_naming_the_node(monkeypatch):
    b = GraphBuilder()
    x = b.input("x", (3,))
    graph = b.build(b.op("relu", [x]))
    monkeypatch.setitem(export.WRITERS, "relu", lambda w, n: {}["missing"])
    with pytest.raises(export.ExportError, match=r"node 'relu_0' \(op 'relu'\).*KeyError"):
        export.to_model(graph)


# --- found by tests/test_export_fuzz.py: onnxruntime's own forms of these drop nan, saturate or reassociate -------
NAN_X = np.array([[1.0, np.nan, 3.0, -np.inf], [np.inf, 2.0, np.nan, 5.0], [np.nan, np.inf, 0.0, np.inf]], np.float32)


@pytest.mark.parametrize("name,fn", [
    ("max", lambda t: hw.max(t, axis=1)), ("min", lambda t: hw.min(t, axis=0)), ("max_all", hw.max),
    ("argmax", lambda t: hw.argmax(t, axis=1)), ("argmin", lambda t: hw.argmin(t, axis=-1)),
    ("topk", lambda t: hw.topk(t, 3, axis=-1)[1]), ("topk_smallest", lambda t: hw.topk(t, 4, largest=False)[0]),
    ("max_pool", lambda t: F.max_pool2d(hw.reshape(t, [1, 1, 3, 4]), 2)),
    ("global_max_pool", lambda t: F.adaptive_max_pool2d(hw.reshape(t, [1, 1, 3, 4]), 1)),
    ("gelu", F.gelu), ("clip_without_a_bound", lambda t: hw.clip(t, None, 2.0))])
def test_nan_and_inf_give_eagers_results(tmp_path, name, fn):
    expected, got = _save_and_run(tmp_path, fn, NAN_X)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)  # nan where eager has nan, nowhere else


@pytest.mark.parametrize("name,fn,x", [
    ("log_softmax", lambda t: F.log_softmax(t, axis=-1),  # eager subtracts the max: inf - inf is nan
     np.array([[-np.inf, -np.inf, -np.inf], [np.inf, 1, 2], [1, 2, -np.inf]])),
    ("lrn", lambda t: F.local_response_norm(t, 3),  # onnxruntime's running sum makes inf - inf of a passed inf
     np.array([1.0, np.inf, 2.0, -3.0, 4.0, 5.0], np.float32).reshape(1, 6, 1, 1)),
    ("batch_norm", lambda t: F.batch_norm(t, hw.ones([4]), hw.full([4], 4.0), hw.full([4], np.inf), hw.ones([4])),
     np.array([np.inf, -np.inf, 1.0, 2.0], np.float32).reshape(1, 4, 1, 1))])
def test_formulas_with_infinities_give_eagers_results(tmp_path, name, fn, x):
    expected, got = _save_and_run(tmp_path, fn, x)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("name,fn", [("max_pool_padded", lambda t: F.max_pool2d(t, 2, padding=1)),
                                     ("global_max_pool", lambda t: F.adaptive_max_pool2d(t, 1))])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_max_pool_of_only_minus_inf_is_minus_inf_in_float64_too(tmp_path, name, fn, dtype):
    """onnxruntime's max pools start from the lowest finite value, and have no float64 global pool."""
    x = np.full((1, 2, 2, 2), -np.inf, dtype)
    x[0, 1, 0, 0] = 5.0
    expected, got = _save_and_run(tmp_path, fn, x)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("name,fn", [("sum", lambda t: hw.sum(t, axis=0)), ("prod", lambda t: hw.prod(t)),
                                     ("sum_keepdim", lambda t: hw.sum(t, axis=1, keepdim=True))])
def test_int64_sums_and_products_wrap_as_eager(tmp_path, name, fn):
    m = np.iinfo(np.int64).max
    expected, got = _save_and_run(tmp_path, fn, np.array([[m, 5, 3], [m, -7, 11], [2, 3, 1]], np.int64))
    np.testing.assert_array_equal(got, expected)


def test_the_mean_of_nothing_is_nan_as_eager(tmp_path):
    expected, got = _save_and_run(tmp_path, lambda t: hw.mean(t, axis=1), np.zeros((2, 0), np.float32))
    assert np.isnan(expected).all()
    np.testing.assert_array_equal(got, expected)


def test_a_float16_formula_is_computed_in_float32_and_rounded_once(tmp_path):
    """x * x overflows float16 above 256: eager's lrn squares in float32."""
    x = np.array([300.0, -500.0, 2.0, 1000.0], np.float16).reshape(1, 4, 1, 1)
    expected, got = _save_and_run(tmp_path, lambda t: F.local_response_norm(t, 3, alpha=1e-4), x)
    assert np.isfinite(expected).all()
    np.testing.assert_allclose(got.astype(np.float32), expected.astype(np.float32), rtol=2e-3)


@pytest.mark.parametrize("form", ["torch", "hf"])
def test_an_imported_linear_layer_with_erf_gelu_runs_fused_to_onnxruntimes_result(form):
    """MatMul, Add of a bias and GELU written with Erf (torch's export at opset 17, or Hugging Face's 0.5 * x first):
    on cpu the bias folds into the matmul (its GELU stays a chain: the CPU's matmul takes only the activations it
    applies bit for bit), and the model gives onnxruntime's result."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")]
    for name, value in (("half", 0.5), ("one", 1.0), ("root", 2 ** 0.5), ("inv", 2 ** -0.5)):
        inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["y"])]
    if form == "torch":
        nodes += [helper.make_node("Div", ["y", "root"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["y", "a"], ["m"]),
                  helper.make_node("Mul", ["m", "half"], ["out"])]
    else:
        nodes += [helper.make_node("Mul", ["half", "y"], ["h"]), helper.make_node("Mul", ["y", "inv"], ["d"]),
                  helper.make_node("Erf", ["d"], ["e"]), helper.make_node("Add", ["one", "e"], ["a"]),
                  helper.make_node("Mul", ["h", "a"], ["out"])]
    graph = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 7, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 7, 32])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    x = rng.standard_normal((2, 7, 16)).astype(np.float32)
    m = hwonnx.load(model)
    plan = m.plan(["cpu"], {"x": x.shape})
    first = plan.graph.nodes[0]
    assert (first.op, len(first.inputs)) == ("matmul", 3)
    np.testing.assert_allclose(m.run({"x": x})[0], _ort_run(model, {"x": x})[0], rtol=1e-5, atol=1e-5)
