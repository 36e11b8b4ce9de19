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
