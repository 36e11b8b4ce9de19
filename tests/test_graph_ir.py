"""The graph IR's one JSON form and the compiled-subgraph byte format every plugin uses."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hwadapter import InvalidArgumentError
from hwadapter.graph import GraphBuilder
from hwadapter.plugin import Graph, pack_executable, unpack_executable


def _graph() -> Graph:
    g = GraphBuilder()
    x, w = g.input("x", (2, 6)), g.input("w", (6, 4), "float16")
    y = g.op("matmul", [g.op("cast", [x], dtype="float16"), w])
    s = g.op("slice", [y], axes=(1,), starts=(1,), ends=(3,), steps=(1,))
    parts = g.op("split", [y], n_outputs=2, sections=[1, 3], axis=1)
    return g.build([s, parts[1]])


def test_json_round_trip_keeps_tuples_lists_shapes_and_dtypes():
    graph = _graph()
    text = json.dumps(graph.to_json())  # plain JSON, nothing else
    back = Graph.from_json(json.loads(text))
    assert back == graph
    sl = next(n for n in back.nodes if n.op == "slice")
    assert sl.attrs["axes"] == (1,) and type(sl.attrs["axes"]) is tuple
    sp = next(n for n in back.nodes if n.op == "split")
    assert sp.attrs["sections"] == [1, 3] and type(sp.attrs["sections"]) is list
    assert back.values["w"].dtype == np.float16 and back.values["w"].shape == (6, 4)
    assert back.signature() == graph.signature()


def test_pack_and_unpack_return_the_graph_target_and_binaries():
    graph, blobs = _graph(), {"k1": b"\x00\x01binary", "k2": bytes(range(256))}
    data = pack_executable("fmt/1", {"device": "acme"}, graph, blobs)
    assert b"pickle" not in data
    target, back, binaries = unpack_executable(data, "fmt/1", "acme:0")
    assert target == {"device": "acme"} and back == graph and binaries == blobs


@pytest.mark.parametrize("damage", ["truncated", "flipped", "format", "header", "empty", "not_bytes"])
def test_damaged_executables_are_a_clear_error_naming_the_device(damage):
    data = pack_executable("fmt/1", {}, _graph(), {"k": b"0123456789"})
    bad = {"truncated": data[:-3], "flipped": data[:-1] + b"X", "format": data.replace(b"fmt/1", b"fmt/9"),
           "header": data[:30] + b"{" + data[31:], "empty": b"", "not_bytes": "text"}[damage]
    with pytest.raises(InvalidArgumentError, match="acme:0: cannot load a compiled subgraph") as err:
        unpack_executable(bad, "fmt/1", "acme:0")
    assert err.value.fix


# --- constants, validation, text, structural hash, subgraphs ------------------------------------------------------
from hwadapter.plugin import Node, Value  # noqa: E402


def _typed(name, shape, dtype="float32"):
    return Value(name, tuple(shape), np.dtype(dtype))


def _const_graph(names=("x", "w", "m", "y", "z"), scale=0.5, shape=(2, 3)) -> Graph:
    """x @ w -> m; m * c -> y; relu(y) -> z, with w and c constants; `names` renames every value."""
    x, w, m, y, z = names
    n, k = shape
    wa = np.arange(k * 4, dtype="float32").reshape(k, 4)
    values = {x: _typed(x, (n, k)), w: _typed(w, (k, 4)), m: _typed(m, (n, 4)), "c": _typed("c", ()),
              y: _typed(y, (n, 4)), z: _typed(z, (n, 4))}
    nodes = [Node(f"{m}_node", "matmul", (x, w), (m,), {}), Node(f"{y}_node", "mul", (m, "c"), (y,), {}),
             Node(f"{z}_node", "relu", (y,), (z,), {})]
    return Graph(nodes, values, [x], [z], {w: wa, "c": np.array(scale, "float32")})


def test_constants_round_trip_exactly_through_json():
    g = _const_graph()
    g.constants["odd"] = np.array([[np.nan, -0.0, np.inf]], "float16")
    g.constants["flags"] = np.array([True, False])
    g.values["odd"], g.values["flags"] = _typed("odd", (1, 3), "float16"), _typed("flags", (2,), "bool")
    back = Graph.from_json(json.loads(json.dumps(g.to_json())))
    assert back == g and set(back.constants) == set(g.constants)
    for k, a in g.constants.items():
        b = back.constants[k]
        assert b.dtype == a.dtype and b.shape == a.shape and b.tobytes() == a.tobytes()
    assert back.constants["c"].shape == ()  # 0-d stays 0-d
    assert Graph.from_json(_graph().to_json()).constants == {}  # graphs without constants: as before


def test_validate_accepts_a_good_graph_and_names_the_node_of_each_fault():
    assert _const_graph().validate() is not None

    def broken(change):
        g = _const_graph()
        change(g)
        with pytest.raises(InvalidArgumentError) as err:
            g.validate()
        return str(err.value)

    # a node reading a value made later: not topological
    msg = broken(lambda g: g.nodes.reverse())
    assert "node 'z_node' (relu, #0)" in msg and "later node" in msg
    # a value defined twice
    msg = broken(lambda g: g.nodes.append(Node("again", "relu", ("y",), ("z",), {})))
    assert "node 'again'" in msg and "already defined" in msg
    # an undefined input
    msg = broken(lambda g: setattr(g.nodes[1], "inputs", ("m", "nope")))
    assert "node 'y_node' (mul, #1)" in msg and "'nope'" in msg
    # a declared shape the op's rule disagrees with
    msg = broken(lambda g: g.values.__setitem__("m", _typed("m", (2, 5))))
    assert "node 'm_node' (matmul, #0)" in msg and "float32[2,5]" in msg and "float32[2,4]" in msg
    # a wrong dtype
    msg = broken(lambda g: g.values.__setitem__("z", _typed("z", (2, 4), "float64")))
    assert "node 'z_node'" in msg and "float64" in msg
    # inputs the op rejects
    msg = broken(lambda g: g.values.__setitem__("x", _typed("x", (2, 7))))
    assert "node 'm_node' (matmul, #0)" in msg and "rejects inputs (float32[2,7], float32[3,4])" in msg
    msg = broken(lambda g: g.values.__setitem__("w", _typed("w", (7, 4))))
    assert "constant 'w'" in msg  # the constant's array no longer matches its value
    msg = broken(lambda g: g.constants.__setitem__("c", np.zeros(3, "float32")))
    assert "constant 'c'" in msg
    msg = broken(lambda g: setattr(g, "outputs", ["ghost"]))
    assert "'ghost'" in msg


def test_text_form_lists_inputs_constants_and_one_line_per_node():
    text = str(_const_graph())
    lines = text.splitlines()
    assert lines[0] == "graph(%x : float32[2,3]) {"
    assert "  const %c : float32[] = 0.5" in lines
    assert any(line.startswith("  const %w : float32[3,4] = [0, 1, 2, 3, ...] (12 values)") for line in lines)
    assert "  %m = matmul(%x, %w) : float32[2,4]  # m_node" in lines
    assert "  %y = mul(%m, %c) : float32[2,4]  # y_node" in lines
    assert lines[-2:] == ["  return %z", "}"]
    sl = str(_graph())
    assert "slice(%matmul_1:0) {axes=(1,), starts=(1,), ends=(3,), steps=(1,)} : float16[2,2]" in sl


def test_hash_is_independent_of_names_and_depends_on_structure():
    base = _const_graph()
    renamed = _const_graph(names=("input", "weight", "t0", "t1", "out"))
    assert base.hash() == renamed.hash() and base.signature() != renamed.signature()
    assert base.hash() == Graph.from_json(base.to_json()).hash()  # stable across a round trip
    assert base.hash() != _const_graph(scale=0.25).hash()  # a constant's value
    assert base.hash() != _const_graph(shape=(3, 3)).hash()  # shapes
    other_attrs = _const_graph()
    other_attrs.nodes[0].attrs = {"transpose_x": False, "transpose_y": False}
    assert base.hash() != other_attrs.hash()  # attributes (even when equal to the defaults)
    swapped = _const_graph()
    swapped.nodes[1].inputs = ("c", "m")  # operand order
    assert base.hash() != swapped.hash()
    op = _const_graph()
    op.nodes[2].op = "sigmoid"
    assert base.hash() != op.hash()


def test_subgraph_keeps_constants_it_reads_as_constants():
    g = _const_graph()
    sub = g.subgraph(["y_node", "z_node"])
    assert sub.inputs == ["m"] and list(sub.constants) == ["c"] and sub.outputs == ["z"]
    assert "c" in sub.values and sub.validate() is sub
    head = g.subgraph(["m_node"])
    assert head.inputs == ["x"] and list(head.constants) == ["w"] and head.outputs == ["m"]
    np.testing.assert_array_equal(head.constants["w"], g.constants["w"])


def _fused(prefix: str, attr_sections) -> Graph:
    a, t, o = f"{prefix}a", f"{prefix}t", f"{prefix}o"
    inner = (("exp", (a,), t, {}), ("neg", (t,), o, {}))
    values = {"in": _typed("in", (4,)), "out": _typed("out", (4,)), "p0": _typed("p0", (1,)),
              "p1": _typed("p1", (3,))}
    nodes = [Node(f"{prefix}fused", "fused", ("in",), ("out",),
                  {"nodes": inner, "inputs": (a,), "outputs": (o,), "name": f"{prefix}kernel"}),
             Node(f"{prefix}split", "split", ("out",), ("p0", "p1"), {"sections": attr_sections, "axis": 0})]
    return Graph(nodes, values, ["in"], ["p0", "p1"])


def test_hash_renames_a_fused_nodes_own_values_and_tells_tuples_from_lists():
    assert _fused("x_", [1, 3]).hash() == _fused("other_", [1, 3]).hash()
    assert _fused("x_", [1, 3]).hash() != _fused("x_", (1, 3)).hash()  # kernels see a tuple and a list apart
    changed = _fused("x_", [1, 3])
    changed.nodes[0].attrs["nodes"] = (("exp", ("x_a",), "x_t", {}), ("exp", ("x_t",), "x_o", {}))
    assert changed.hash() != _fused("x_", [1, 3]).hash()


# --- input dtypes the frontend never emits (hwadapter.api.admit) --------------------------------------------------
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import hwadapter as hw  # noqa: E402
import hwadapter.nn.functional as F  # noqa: E402
from hwadapter.api import dtypes as _dt  # noqa: E402
from hwadapter.api.errors import HwAdapterError, UnsupportedDTypeError  # noqa: E402
from hwadapter.api.admit import ADMITS, refusal  # noqa: E402

REFUSED = [  # (op, input dtypes, what the message must say)
    ("add", ("float32", "bool"), "numeric (non-bool)"),
    ("add", ("float32", "float16"), "one dtype"),
    ("exp", ("bool",), "float"),
    ("exp", ("int32",), "float"),
    ("logical_and", ("float32", "float32"), "bool"),
    ("logical_not", ("int64",), "bool"),
    ("matmul", ("bool", "bool"), "numeric (non-bool)"),
    ("where", ("float32", "float32", "float32"), "input 0 must be bool"),
    ("where", ("bool", "float32", "int64"), "one dtype"),
    ("gather", ("float32", "int32"), "input 1 must be int64"),
    ("div", ("int32", "int32"), "float"),
    ("conv2d", ("float32", "float16"), "one dtype"),
    ("mean", ("int64",), "float"),
    ("right_shift", ("float32", "float32"), "integer"),
]


def _node_graph(op, kinds, out="float32"):
    """One node of `op` over inputs of dtypes `kinds` (shape (2, 3)), declaring a float32 output."""
    values = {f"i{k}": _typed(f"i{k}", (2, 3), d) for k, d in enumerate(kinds)}
    values["o"] = _typed("o", (2, 3), out)
    return Graph([Node("the_node", op, tuple(values)[:-1], ("o",), {})], values, list(values)[:-1], ["o"])


@pytest.mark.parametrize("op,kinds,what", REFUSED, ids=[f"{o}-{'-'.join(k)}" for o, k, _ in REFUSED])
def test_validate_refuses_input_dtypes_the_frontend_never_emits(op, kinds, what):
    with pytest.raises(InvalidArgumentError) as err:
        _node_graph(op, kinds).validate()
    msg = str(err.value)
    shown = ", ".join(f"{k}[2,3]" for k in kinds)
    assert f"node 'the_node' ({op}, #0)" in msg and f"{op} does not admit inputs ({shown})" in msg, msg
    assert what in msg and "Fix: cast" in msg and err.value.fix.startswith("cast"), msg


@pytest.mark.parametrize("op,kinds,what", REFUSED, ids=[f"{o}-{'-'.join(k)}" for o, k, _ in REFUSED])
def test_graph_builder_refuses_them_before_running_anything(op, kinds, what):
    b = GraphBuilder()
    inputs = [b.input(f"i{k}", (2, 3), d) for k, d in enumerate(kinds)]
    with pytest.raises(InvalidArgumentError) as err:
        b.op(op, inputs)
    msg = str(err.value)
    assert f"node '{op}_0' ({op})" in msg and what in msg and "Fix: cast" in msg and kinds[-1] in msg, msg


def test_ops_outside_the_table_admit_any_dtype():
    for op in ("cast", "copy", "reshape", "sum", "max", "argmax", "fused", "an_op_someone_adds_later"):
        assert op not in ADMITS and refusal(op, (np.dtype("bool"), np.dtype("float16"))) is None
    b = GraphBuilder()
    m = b.input("m", (2, 3), "bool")
    b.build([b.op("reshape", [m], shape=(3, 2)), b.op("sum", [m], axis=(1,), keepdim=False)]).validate()


#: The frontend functions a graph can record, with how many tensor inputs each takes.
UNARY_FNS = ["abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu", "erf", "sin", "cos",
             "floor", "ceil", "round", "sign", "logical_not", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
             "acosh", "atanh", "bitwise_not", "sum", "prod", "mean", "max", "min", "argmax", "argmin"]
BINARY_FNS = ["add", "subtract", "multiply", "divide", "pow", "maximum", "minimum", "remainder", "equal", "not_equal",
              "less_than", "less_equal", "greater_than", "greater_equal", "logical_and", "logical_or", "logical_xor",
              "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "matmul"]
DTYPES = [d.name for d in _dt.ALL]


def _traced(fn, *arrays):
    """The graph of `fn` over tensors of `arrays`, or None when the frontend itself refuses these dtypes (eagerly
    too); tracing validates the graph, so a refusal by the graph layer fails here."""
    tensors = [hw.to_tensor(a) for a in arrays]
    try:
        fn(*tensors)
    except (UnsupportedDTypeError, InvalidArgumentError):
        return None  # the frontend does not take these: nothing is emitted
    graph = hw.jit.get_graph(fn, *tensors)  # raises InvalidArgumentError "... does not admit ..." on a bad table
    assert graph.validate() is graph
    for n in graph.nodes:
        assert refusal(n.op, tuple(graph.values[i].dtype for i in n.inputs)) is None, n
    return graph


def _frontend(name):
    fn = getattr(hw, name, None)
    if fn is None:
        pytest.skip(f"hw.{name} is not in this frontend")
    return fn


@pytest.mark.parametrize("name", UNARY_FNS)
def test_every_dtype_a_unary_frontend_op_emits_validates(name):
    fn = _frontend(name)
    emitted = [d for d in DTYPES if _traced(lambda x: fn(x), np.ones((2, 3), d)) is not None]
    assert emitted  # the frontend takes some dtype


@pytest.mark.parametrize("name", BINARY_FNS)
def test_every_dtype_pair_a_binary_frontend_op_emits_validates(name):
    fn = _frontend(name)
    shape = (3, 3) if name == "matmul" else (2, 3)
    emitted = [(a, b) for a in DTYPES for b in DTYPES
               if _traced(lambda x, y: fn(x, y), np.ones(shape, a), np.ones(shape, b)) is not None]
    assert emitted


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(BINARY_FNS[:-1] + ["where", "clip", "cast", "concat", "gather"]),
       kinds=st.lists(st.sampled_from(DTYPES), min_size=3, max_size=3),
       scalar=st.sampled_from([None, 2, 1.5, True]))
def test_random_frontend_calls_emit_graphs_that_validate(name, kinds, scalar):
    a, b, c = (np.ones((2, 3), k) for k in kinds)
    if name == "where":
        _traced(lambda m, x, y: hw.where(m, x, y if scalar is None else scalar), a, b, c)
    elif name == "clip":
        _traced(lambda x: hw.clip(x, 0, 1 if scalar is None else scalar), a)
    elif name == "cast":
        _traced(lambda x: hw.cast(x, kinds[1]) + (0 if scalar is None else scalar), a)
    elif name == "concat":
        _traced(lambda x, y: hw.concat([x, y], axis=0), a, b)
    elif name == "gather":
        _traced(lambda x, i: hw.gather(x, i, axis=1), a, np.zeros(2, kinds[1]))
    else:
        fn = _frontend(name)
        if scalar is None:
            _traced(lambda x, y: fn(x, y), a, b)
        else:
            _traced(lambda x: fn(x, scalar), a)


@pytest.mark.parametrize("kind", DTYPES)
def test_nn_functions_emit_graphs_that_validate(kind):
    x = np.ones((1, 2, 4, 4), kind)
    w, v = np.ones((2, 2, 3, 3), kind), np.ones(2, kind)
    calls = [
        (lambda x: F.softmax(x, axis=1), [x]), (lambda x: F.log_softmax(x, axis=-1), [x]),
        (lambda x: F.gelu(x), [x]), (lambda x: F.gelu(x, approximate=True), [x]),
        (lambda x, w, b: F.conv2d(x, w, b, padding=1), [x, w, v]),
        (lambda x, m, s: F.batch_norm(x, m, s), [x, v, v]),
        (lambda x: F.layer_norm(x, (4,)), [x]),
        (lambda x: F.max_pool2d(x, 2), [x]), (lambda x: F.avg_pool2d(x, 2), [x]),
        (lambda x: F.adaptive_avg_pool2d(x, 1), [x]), (lambda x: F.adaptive_max_pool2d(x, 1), [x]),
    ]
    for fn, arrays in calls:
        try:
            _traced(fn, *arrays)
        except HwAdapterError as err:
            assert "does not admit" not in str(err), err
            raise
