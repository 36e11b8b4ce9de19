"""The program cache: compiled subgraphs kept on disk through the vendor's serialize/deserialize, in hwadapter.runtime.cache's
store (private directory, checksummed and HMAC'd entries, no pickles), so another process loads, not compiles."""
from __future__ import annotations

import dataclasses

from ..runtime import cache
from ..api.interfaces import API_VERSION

NAMESPACE = "programs"  # the cache's subdirectory of compiled subgraphs (`hwadapter cache info` counts it)


def graph_key(graph) -> str:
    """The subgraph's structural hash (its canonical text until the IR has one)."""
    return graph.hash() if hasattr(graph, "hash") else graph.signature()


def key_parts(device, graph) -> dict:
    """Everything a compiled subgraph depends on: graph, shapes, dtypes, device properties, plugin and its target."""
    props = device.properties()
    backend = device.subgraph
    target = backend.target() if hasattr(backend, "target") else None
    return {"kind": "subgraph", "graph": graph_key(graph),
            "inputs": [(list(graph.values[i].shape), graph.values[i].dtype.name) for i in graph.inputs],
            "outputs": [(list(graph.values[o].shape), graph.values[o].dtype.name) for o in graph.outputs],
            "device": device.type, "properties": dataclasses.asdict(props) if dataclasses.is_dataclass(props)
            else repr(props), "plugin": list(device.record.distribution), "api": list(API_VERSION),
            "backend": type(backend).__qualname__, "target": target}


def compile_subgraph(device, graph, store=None):
    """`device`'s compiled Executable for `graph`: loaded from the program cache, else compiled and stored (when the
    backend serialises). An entry that fails to deserialise is evicted and compiled again (cache.get_or_load)."""
    backend = device.subgraph
    built = {}

    def build() -> bytes:
        exe = backend.compile(graph)
        data = exe.serialize()
        if not data:
            raise _NotSerialisable(exe)
        built["exe"], built["data"] = exe, data
        return data

    def load(data: bytes):
        if built.get("data") is data:  # just compiled: no need to load what we hold
            return built["exe"]
        return backend.deserialize(data)

    store = store or cache.default()
    try:
        return store.get_or_load(NAMESPACE, key_parts(device, graph), build, load,
                                 f"{device}: subgraph of {len(graph.nodes)} nodes")
    except _NotSerialisable as no:
        return no.exe
    finally:
        built.clear()  # a logged load failure keeps load's frame (and so this dict) alive: hold no executable there


class _NotSerialisable(Exception):
    """The backend compiled the subgraph but cannot serialise it: use it, cache nothing."""

    def __init__(self, exe):
        super().__init__("not serialisable")
        self.exe = exe
