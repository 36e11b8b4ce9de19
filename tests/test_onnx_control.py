"""ONNX If, Loop and Scan imported as cond and while_loop nodes (or unrolled when their trip count is known), each
model checked against onnxruntime on the same inputs."""
from __future__ import annotations

import numpy as np
import pytest

from hwadapter.onnx.node import UnsupportedOpError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import hwadapter.onnx as hwonnx  # noqa: E402

from onnx_oracle import agree  # noqa: E402
F, B, I = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _branch(name, node_list, out):
    return helper.make_graph(node_list, name, [], [helper.make_tensor_value_info(out, F, [3])])


def if_model():
    """y = (x * w if c else x - w) + 1, the branches reading outer values by name."""
    then = _branch("then", [helper.make_node("Mul", ["x", "w"], ["t"])], "t")
    other = _branch("else", [helper.make_node("Sub", ["x", "w"], ["e"])], "e")
    nodes = [helper.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other),
             helper.make_node("Add", ["r", "one"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("c", B, []), helper.make_tensor_value_info("x", F, [3])],
                  [helper.make_tensor_value_info("y", F, [3])],
                  [helper.make_tensor("w", F, [3], [2.0, 3.0, 4.0]), helper.make_tensor("one", F, [], [1.0])])


def test_an_if_on_a_run_time_condition_is_one_cond_node_and_agrees_with_onnxruntime():
    model = if_model()
    x = np.array([1.0, -2.0, 5.0], np.float32)
    loaded = agree(model, [{"c": np.array(v), "x": x} for v in (True, False)])
    graph = loaded.graph({"c": (), "x": (3,)})
    assert [n.op for n in graph.nodes].count("cond") == 1


def doubling_model(with_count: bool):
    """x doubled while sum(x) < limit (and, with a trip count, at most m times): a loop that stops on its values."""
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "x_in"], ["x_out"]),
         helper.make_node("ReduceSum", ["x_out"], ["s"], keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["go"])],
        "body", [helper.make_tensor_value_info("i", I, []), helper.make_tensor_value_info("c", B, []),
                 helper.make_tensor_value_info("x_in", F, [2])],
        [helper.make_tensor_value_info("go", B, []), helper.make_tensor_value_info("x_out", F, [2])])
    inputs = [helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("limit", F, [])]
    if with_count:
        inputs.append(helper.make_tensor_value_info("m", I, []))
    nodes = [helper.make_node("Less", ["zero", "limit"], ["start"]),
             helper.make_node("Loop", ["m" if with_count else "", "start", "x"], ["y"], body=body)]
    return _model(nodes, inputs, [helper.make_tensor_value_info("y", F, [2])],
                  [helper.make_tensor("zero", F, [], [0.0])])


@pytest.mark.parametrize("with_count", [False, True])
def test_a_loop_that_stops_on_its_values_is_a_while_loop_and_agrees_with_onnxruntime(with_count):
    model = doubling_model(with_count)
    feeds = []
    for limit in (-1.0, 3.0, 100.0, 5000.0):
        feed = {"x": np.array([0.5, 1.0], np.float32), "limit": np.array(limit, np.float32)}
        if with_count:
            feed["m"] = np.array(4, np.int64)
        feeds.append(feed)
    loaded = agree(model, feeds)
    shapes = {"x": (2,), "limit": ()} | ({"m": ()} if with_count else {})
    assert [n.op for n in loaded.graph(shapes).nodes].count("while_loop") == 1


def scan_model(reverse: int, out_axis: int):
    """A running sum over x's rows (scan axis 0), in either direction, its partial sums stacked on `out_axis`."""
    v = helper.make_tensor_value_info
    body = helper.make_graph([helper.make_node("Add", ["acc", "row"], ["acc2"]),
                              helper.make_node("Identity", ["acc2"], ["part"])], "body",
                             [v("acc", F, [2]), v("row", F, [2])], [v("acc2", F, [2]), v("part", F, [2])])
    node = helper.make_node("Scan", ["init", "x"], ["total", "parts"], body=body, num_scan_inputs=1,
                            scan_input_directions=[reverse], scan_output_axes=[out_axis])
    parts = [4, 2] if out_axis == 0 else [2, 4]
    return _model([node], [v("init", F, [2]), v("x", F, [4, 2])], [v("total", F, [2]), v("parts", F, parts)])


@pytest.mark.parametrize("reverse, out_axis", [(0, 0), (1, 0), (0, 1), (1, -1)])
def test_a_scan_in_either_direction_agrees_with_onnxruntime(reverse, out_axis):
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    agree(scan_model(reverse, out_axis), [{"init": np.array([1.0, -1.0], np.float32), "x": x}], devices=["cpu"])


def test_a_loop_whose_scan_outputs_depend_on_run_time_values_is_refused_saying_why():
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "x_in"], ["x_out"]), helper.make_node("ReduceSum", ["x_out"], ["s"],
                                                                                 keepdims=0),
         helper.make_node("Less", ["s", "limit"], ["go"]), helper.make_node("Identity", ["x_out"], ["seen"])],
        "body", [helper.make_tensor_value_info("i", I, []), helper.make_tensor_value_info("c", B, []),
                 helper.make_tensor_value_info("x_in", F, [2])],
        [helper.make_tensor_value_info("go", B, []), helper.make_tensor_value_info("x_out", F, [2]),
         helper.make_tensor_value_info("seen", F, [2])])
    model = _model([helper.make_node("Loop", ["", "", "x"], ["y", "all"], body=body)],
                   [helper.make_tensor_value_info("x", F, [2]), helper.make_tensor_value_info("limit", F, [])],
                   [helper.make_tensor_value_info("y", F, [2]), helper.make_tensor_value_info("all", F, ["n", 2])])
    with pytest.raises(UnsupportedOpError, match="scan outputs' length depends on values known only when it runs"):
        hwonnx.load(model).run({"x": np.ones(2, np.float32), "limit": np.array(9.0, np.float32)}, ["cpu"])


def test_an_if_inside_a_loop_body_agrees_with_onnxruntime():
    """x doubled while sum(x) < 40, and each step an If adds 1 when the sum is odd-ish (sum mod 2 > 0.5)."""
    then = _branch("then", [helper.make_node("Add", ["x2", "one"], ["t"])], "t")
    other = _branch("else", [helper.make_node("Identity", ["x2"], ["e"])], "e")
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "x_in"], ["x2"]),
         helper.make_node("ReduceSum", ["x2"], ["s"], keepdims=0),
         helper.make_node("Mod", ["s", "two"], ["r"], fmod=1),
         helper.make_node("Greater", ["r", "half"], ["odd"]),
         helper.make_node("If", ["odd"], ["x_out"], then_branch=then, else_branch=other),
         helper.make_node("ReduceSum", ["x_out"], ["s2"], keepdims=0),
         helper.make_node("Less", ["s2", "forty"], ["go"])],
        "body", [helper.make_tensor_value_info("i", I, []), helper.make_tensor_value_info("c", B, []),
                 helper.make_tensor_value_info("x_in", F, [3])],
        [helper.make_tensor_value_info("go", B, []), helper.make_tensor_value_info("x_out", F, [3])])
    model = _model([helper.make_node("Loop", ["", "", "x"], ["y"], body=body)],
                   [helper.make_tensor_value_info("x", F, [3])], [helper.make_tensor_value_info("y", F, [3])],
                   [helper.make_tensor(n, F, [], [v]) for n, v in (("one", 1.0), ("two", 2.0), ("half", 0.5),
                                                                    ("forty", 40.0))])
    agree(model, [{"x": np.array(v, np.float32)} for v in ([0.5, 0.25, 0.0], [1.0, 2.0, 3.0], [30.0, 20.0, 1.0])])


@pytest.mark.parametrize("reverse, out_axis", [(0, 0), (1, 1)])
def test_a_scan_longer_than_the_unroll_limit_is_one_while_loop_and_agrees_with_onnxruntime(reverse, out_axis):
    from hwadapter.onnx.ops.control import UNROLL
    steps = UNROLL + 36
    v = helper.make_tensor_value_info
    body = helper.make_graph([helper.make_node("Mul", ["acc", "decay"], ["kept"]),
                              helper.make_node("Add", ["kept", "row"], ["acc2"]),
                              helper.make_node("Identity", ["acc2"], ["part"])], "body",
                             [v("acc", F, [2]), v("row", F, [2])], [v("acc2", F, [2]), v("part", F, [2])])
    node = helper.make_node("Scan", ["init", "x"], ["total", "parts"], body=body, num_scan_inputs=1,
                            scan_input_directions=[reverse], scan_output_axes=[out_axis],
                            scan_output_directions=[reverse])
    parts = [steps, 2] if out_axis == 0 else [2, steps]
    model = _model([node], [v("init", F, [2]), v("x", F, [steps, 2])], [v("total", F, [2]), v("parts", F, parts)],
                   [helper.make_tensor("decay", F, [], [0.9])])
    x = np.random.default_rng(4).standard_normal((steps, 2)).astype(np.float32)
    loaded = agree(model, [{"init": np.array([1.0, -1.0], np.float32), "x": x}])
    assert [n.op for n in loaded.graph({"init": (2,), "x": (steps, 2)}).nodes].count("while_loop") == 1
