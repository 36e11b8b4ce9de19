"""hw.jit.save of graphs that branch and loop: cond nodes written as ONNX If, while_loop nodes as Loop, run by
onnxruntime (the oracle) on inputs that take each branch and loop a different number of times, against eager
hwadapter, and read back by hwadapter.onnx.load."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of the export tests (test extra)")

import hwadapter as hw  # noqa: E402
import hwadapter.nn.functional as F  # noqa: E402
import hwadapter.onnx as hwonnx  # noqa: E402
from hwadapter.api.errors import LoopLimitError  # noqa: E402
from hwadapter.api.ir import Graph, Node, Value  # noqa: E402
from hwadapter.graph import run as hw_run  # noqa: E402
from hwadapter.onnx import export  # noqa: E402
from control_models import Branchy, nested  # noqa: E402

F32, F16, I8, I64, BOOL = (np.dtype(n) for n in ("float32", "float16", "int8", "int64", "bool"))


def _session(model_or_path):
    data = model_or_path.SerializeToString() if hasattr(model_or_path, "SerializeToString") else str(model_or_path)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the model as written
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def _checked(model_or_path, *ops) -> "onnx.ModelProto":
    """The model, checked by onnx.checker, at the exporter's opset and an IR version onnxruntime 1.31 reads (<= 13),
    holding the control ops `ops` somewhere (in the main graph or a subgraph)."""
    model = onnx.load(str(model_or_path)) if not hasattr(model_or_path, "graph") else model_or_path
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 18 and model.ir_version <= 13
    found = _op_types(model.graph)
    assert set(ops) <= found, (ops, found)
    return model


def _op_types(graph) -> set:
    found = set()
    for node in graph.node:
        found.add(node.op_type)
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                found |= _op_types(attr.g)
    return found


def _same(got, want, rtol=1e-6, atol=1e-6):
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _agree(path, fn, cases, rtol=1e-6, atol=1e-6):
    """Each case (a list of arrays, the function's arguments) run by onnxruntime and by the model read back into
    hwadapter gives what eager fn gives."""
    sess, back = _session(path), hwonnx.load(path)
    names = [i.name for i in sess.get_inputs()]
    for args in cases:
        want = fn(*(hw.to_tensor(a) for a in args))
        want = [t.numpy() for t in (want if isinstance(want, (list, tuple)) else [want])]
        for got in (sess.run(None, dict(zip(names, args))), back.run(list(args))):
            assert len(got) == len(want)
            for g, e in zip(got, want):
                _same(g, e, rtol, atol)


# --- traced functions ----------------------------------------------------------------------------------------------


def test_a_layer_with_a_data_dependent_branch_runs_in_onnxruntime_as_eagerly(tmp_path):
    net = Branchy()
    with hw.no_grad():
        path = hw.jit.save(net.forward, tmp_path / "branchy.onnx", input_spec=[((3, 4), "float32")])
    model = _checked(path, "If", "MatMul", "Relu")
    # the layer's parameters are state inputs of the traced graph, so inputs of the model: fed by their shapes
    params = {tuple(p.shape): p.numpy() for p in net.parameters()}
    assert len(params) == 4
    names = [i.name for i in model.graph.input]
    sess, back = _session(path), hwonnx.load(path)
    rng = np.random.default_rng(0)
    taken = set()
    with hw.no_grad():
        for shift in (1.0, -1.0, 2.0, 0.0):
            x = (rng.standard_normal((3, 4)) + shift).astype(F32)
            feeds = [x] + [params[tuple(d.dim_value for d in i.type.tensor_type.shape.dim)]
                           for i in model.graph.input[1:]]
            want = net(hw.to_tensor(x)).numpy()
            taken.add(bool(x.mean() > 0.5))
            (got,) = sess.run(None, dict(zip(names, feeds)))
            _same(got, want, 1e-5, 1e-6)
            (again,) = back.run(feeds)
            _same(again, want, 1e-5, 1e-6)
    assert taken == {True, False}


def newton(a):
    """sqrt(a) by Newton's iteration, until |x*x - a| <= 1e-5 (at most 50 steps): (x, the steps taken)."""
    def more(x, it):
        return (hw.abs(x * x - a).max() > 1e-5) & (it < 50)
    return hw.static.nn.while_loop(more, lambda x, it: [0.5 * (x + a / x), it + 1], [a, hw.to_tensor(0)])


def test_newtons_iteration_to_a_tolerance_loops_as_often_as_eagerly(tmp_path):
    path = hw.jit.save(newton, tmp_path / "newton.onnx", input_spec=[((2,), "float32")])
    model = _checked(path, "Loop")
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    assert loop.input[0] == ""  # no trip count: max_iters is an error limit, not a number of iterations
    cases = [[np.array(v, F32)] for v in ([1.0, 1.0], [2.0, 5.0], [30.0, 33.0], [1e4, 0.25])]
    steps = {int(newton(hw.to_tensor(a))[1].numpy()) for (a,) in cases}
    assert 0 in steps and len(steps) == len(cases)  # none, and each case a different count
    _agree(path, newton, cases)


def test_a_cond_nested_in_a_loop_nested_in_a_cond(tmp_path):
    path = hw.jit.save(nested, tmp_path / "nested.onnx", input_spec=[((2,), "float32"), ((), "int64")])
    model = _checked(path, "If", "Loop")
    (top,) = [n for n in model.graph.node if n.op_type == "If"]
    then = next(a.g for a in top.attribute if a.name == "then_branch")
    (loop,) = [n for n in then.node if n.op_type == "Loop"]
    assert "If" in {n.op_type for n in loop.attribute[0].g.node}  # the cond in the body: an If in the Loop's body
    x = np.array([1.0, 2.0], F32)
    _agree(path, nested, [[x, np.array(n, I64)] for n in (0, 1, 4, 5, -2)])


def test_a_branch_returning_its_input_or_a_constant(tmp_path):
    seven = np.full(3, 7, I8)

    def pick(x, p):
        return hw.static.nn.cond(p, lambda: x, lambda: hw.to_tensor(seven))
    path = hw.jit.save(pick, tmp_path / "pick.onnx", input_spec=[((3,), "int8"), ((1,), "bool")])
    _checked(path, "If")
    x = np.array([1, -2, 3], I8)
    _agree(path, pick, [[x, np.array([True])], [x, np.array([False])]])


def test_narrow_dtypes_in_branches_and_bodies_compute_as_eagerly(tmp_path):
    """int8 products wrap and float16 gelu is computed in float32 inside a branch or a body, as in the main graph."""
    def half(x, y):
        return hw.static.nn.cond(x.sum() > 0, lambda: x * y - x, lambda: F.gelu(y))

    def wrap(x, y):  # the counter is int32 of shape (1,): the loop's condition is a one-element vector
        return hw.static.nn.while_loop(lambda a, i: i < 3, lambda a, i: [a * y, i + 1],
                                       [x, hw.to_tensor(np.array([0], np.int32))])

    p1 = hw.jit.save(half, tmp_path / "half.onnx", input_spec=[((3,), "float16"), ((3,), "float16")])
    _checked(p1, "If", "Erf")
    y = np.array([0.5, -1, 2], F16)
    _agree(p1, half, [[np.array(v, F16), y] for v in ([1, 2, 3], [-1, -2, -3])], rtol=1e-3, atol=1e-3)
    p2 = hw.jit.save(wrap, tmp_path / "wrap.onnx", input_spec=[((3,), "int8"), ((3,), "int8")])
    _checked(p2, "Loop")
    _agree(p2, wrap, [[np.array([1, -2, 3], I8), np.array([100, 3, -5], I8)]])


def test_max_iters_is_not_a_trip_count_onnxruntime_loops_until_the_condition_fails(tmp_path):
    """hwadapter raises LoopLimitError past max_iters, which no ONNX op can do: the model loops on, it never hands
    out the values at the limit as if the loop had ended."""
    def count(x, n):
        return hw.static.nn.while_loop(lambda v: v.sum() < n, lambda v: v + 1.0, [x], max_iters=3)[0]

    path = hw.jit.save(count, tmp_path / "count.onnx", input_spec=[((2,), "float32"), ((), "float32")])
    model = _checked(path, "Loop")
    (loop,) = [n for n in model.graph.node if n.op_type == "Loop"]
    assert loop.input[0] == "" and "max_iters (3)" in loop.doc_string and "LoopLimitError" in loop.doc_string
    x = np.zeros(2, F32)
    static = hw.jit.to_static(count)
    _same(_session(path).run(None, {"x": x, "n": np.array(4, F32)})[0], static(hw.to_tensor(x),
                                                                                hw.to_tensor(np.float32(4))).numpy())
    with pytest.raises(LoopLimitError, match="3 iterations"):
        static(hw.to_tensor(x), hw.to_tensor(np.float32(10)))
    (got,) = _session(path).run(None, {"x": x, "n": np.array(10, F32)})
    np.testing.assert_array_equal(got, [5, 5])  # five iterations, as a loop without a limit: not cut off at three


# --- hand-built graphs -----------------------------------------------------------------------------------------------
def _v(name, shape=(4,), dtype=F32):
    return Value(name, tuple(shape), np.dtype(dtype))


def clashing_cond():
    """r = y - x if sum(x) > 0 else x * 10: each branch names its inputs (y, x), swapped against the outer (x, y), and
    defines values named as outer ones (s, p, r, z)."""
    vals = {"y": _v("y"), "x": _v("x"), "s": _v("s"), "r": _v("r"), "z": _v("z")}
    then = Graph([Node("s", "sub", ("x", "y"), ("s",)), Node("r", "add", ("s", "z"), ("r",))], vals, ["y", "x"],
                 ["r"], {"z": np.zeros(4, F32)})
    other = Graph([Node("m", "mul", ("y", "z"), ("p",))], {**vals, "p": _v("p")}, ["y", "x"], ["p"],
                  {"z": np.full(4, 10, F32)})
    return Graph([Node("s", "sum", ("x",), ("s",), {"axis": (0,), "keepdim": False}),
                  Node("gt", "greater", ("s", "z"), ("p",)),
                  Node("c", "cond", ("p", "x", "y"), ("r",), {"then": then, "else": other})],
                 {"x": _v("x"), "y": _v("y"), "s": _v("s", ()), "z": _v("z", ()), "p": _v("p", (), BOOL),
                  "r": _v("r")}, ["x", "y"], ["r"], {"z": np.array(0, F32)}).validate()


def flag_loop():
    """(go, x, n) -> while go: x = x * 2, go = sum(x) < n; the cond graph gives its input unchanged, the body reads
    the outer n and defines values named as outer ones (x2 is also the loop's result's name)."""
    vals = {"go": _v("go", (), BOOL), "x": _v("x"), "n": _v("n", ())}
    test = Graph([], vals, ["go", "x", "n"], ["go"])
    body = Graph([Node("d", "add", ("x", "x"), ("x2",)), Node("s", "sum", ("x2",), ("t",), {"axis": None}),
                  Node("l", "less", ("t", "n"), ("go2",))],
                 {**vals, "x2": _v("x2"), "t": _v("t", ()), "go2": _v("go2", (), BOOL)}, ["go", "x", "n"],
                 ["go2", "x2"])
    return Graph([Node("w", "while_loop", ("go", "x", "n"), ("g_out", "x2"),
                       {"cond": test, "body": body, "carried": 2, "max_iters": None})],
                 {**vals, "g_out": _v("g_out", (), BOOL), "x2": _v("x2")}, ["go", "x", "n"], ["x2", "g_out"]
                 ).validate()


def _graph_agrees(graph, cases, tmp_path):
    model = export.to_model(graph)
    _checked(model)
    sess = _session(model)
    path = tmp_path / "g.onnx"
    onnx.save(model, str(path))
    back = hwonnx.load(path)
    for feeds in cases:
        want = hw_run(graph, feeds, device="cpu")
        for got in (sess.run(None, feeds), back.run(feeds)):
            for name, g in zip(graph.outputs, got):
                _same(g, want[name].numpy())


def test_branch_names_that_clash_with_outer_names_are_renamed(tmp_path):
    x, y = np.arange(4, dtype=F32) - 1, np.full(4, 3, F32)
    _graph_agrees(clashing_cond(), [{"x": x, "y": y}, {"x": -x - 2, "y": y}], tmp_path)


def test_a_loop_whose_cond_gives_its_input_and_whose_body_reads_an_outer_value(tmp_path):
    x = np.ones(4, F32)
    cases = [{"go": np.array(go), "x": x, "n": np.array(n, F32)} for go, n in ((True, 50), (True, 1), (False, 50))]
    _graph_agrees(flag_loop(), cases, tmp_path)


def test_an_imported_onnx_loop_exports_again(tmp_path):
    """ONNX Loop (no trip count, a computed condition) -> hwadapter while_loop -> ONNX Loop: onnxruntime runs both
    models alike."""
    h, T = onnx.helper, onnx.TensorProto
    body = h.make_graph([h.make_node("Mul", ["v_in", "k"], ["v_out"]), h.make_node("ReduceSum", ["v_out"], ["s"]),
                         h.make_node("Less", ["s", "limit"], ["c_out"])], "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c_in", T.BOOL, []),
                         h.make_tensor_value_info("v_in", T.FLOAT, [3])],
                        [h.make_tensor_value_info("c_out", T.BOOL, []),
                         h.make_tensor_value_info("v_out", T.FLOAT, [3])],
                        [onnx.numpy_helper.from_array(np.float32(2), "k")])
    graph = h.make_graph([h.make_node("Loop", ["", "go", "v"], ["v_final"], body=body)], "loop",
                         [h.make_tensor_value_info(n, t, s) for n, t, s in
                          (("go", T.BOOL, []), ("v", T.FLOAT, [3]), ("limit", T.FLOAT, []))],
                         [h.make_tensor_value_info("v_final", T.FLOAT, [3])])
    original = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    original.ir_version = 9
    converted = hwonnx.load(original).graph({"go": (), "v": (3,), "limit": ()})
    assert "while_loop" in [n.op for n in converted.nodes]
    again = export.to_model(converted)
    _checked(again, "Loop")
    names = [i.name for i in again.graph.input]
    for go, limit in ((True, 100.0), (True, 1.0), (False, 100.0)):
        feeds = {"go": np.array(go), "v": np.array([1, 2, 3], F32), "limit": np.array(limit, F32)}
        (want,) = _session(original).run(None, feeds)
        (got,) = _session(again).run(None, {n: feeds[n] for n in names})
        _same(got, want)


# --- what cannot be written: refused naming the node, before anything is written ---------------------------------
def test_an_op_without_onnx_form_inside_a_body_names_the_path_and_writes_nothing(tmp_path):
    def shifts(x, n):
        def body(i, a):
            return [i + 1, hw.static.nn.cond(i > 1, lambda: hw.bitwise_left_shift(a, x), lambda: a)]
        return hw.static.nn.while_loop(lambda i, a: i < n, body, [hw.to_tensor(0), x])[1]

    target = tmp_path / "shifts.onnx"
    with pytest.raises(export.ExportError, match=r"op 'while_loop'\), its body graph: node '\w+' \(op 'cond'\), its "
                                                 r"then graph: node '\w+' \(op 'left_shift'\): ONNX BitShift") as err:
        hw.jit.save(shifts, target, input_spec=[((3,), "int32"), ((), "int64")])
    assert err.value.fix and not target.exists()


def test_a_pass_made_node_in_a_branch_is_refused_before_writing():
    g = clashing_cond()
    then = g.nodes[2].attrs["then"]
    then.nodes[1] = Node("f", "fused", ("s", "z"), ("r",), {})
    with pytest.raises(export.ExportError, match=r"node 'c' \(op 'cond'\), its then graph: node 'f' \(op 'fused'\): "
                                                 r"cannot export op\(s\) 'fused': a node made by the graph passes"):
        export.to_model(g)
