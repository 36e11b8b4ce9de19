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
