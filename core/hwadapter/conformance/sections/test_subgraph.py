"""The subgraph backend: the nodes it claims are given to it by the partitioner, compiled subgraphs equal the
reference executor's results, and serialize / deserialize round-trips. Skipped when the plugin has no subgraph
backend."""
from __future__ import annotations

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.conformance.graphs import convnet, mlp
from hwadapter.graph import run
from hwadapter.plugin import DeviceArray

pytestmark = pytest.mark.usefixtures("kit_live_bytes")


GRAPHS = {"mlp": mlp, "convnet": lambda: convnet(argmax=True)}


@pytest.fixture
def backend(kit_dev):
    sb = kit_dev.subgraph
    if sb is None:
        pytest.skip(f"{kit_dev} has no subgraph backend")
    return sb


def _inputs(graph):
    rng = np.random.default_rng(3)
    return [rng.standard_normal(graph.values[n].shape).astype(graph.values[n].dtype) for n in graph.inputs]


def _expected(graph, arrays) -> list:
    outs = run(graph, dict(zip(graph.inputs, arrays)), device="cpu")
    return [outs[name].numpy() for name in graph.outputs]


def _same(got: list, want: list, graph) -> None:
    assert len(got) == len(want), f"{len(got)} outputs where the graph has {len(want)} ({graph.outputs})"
    for name, g, w in zip(graph.outputs, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, \
            f"output {name}: {g.dtype}{list(g.shape)} where {w.dtype}{list(w.shape)} is expected"
        close = np.isclose(g, w, rtol=1e-4, atol=1e-4, equal_nan=True)
        if not close.all():
            bad = np.argwhere(~close)
            where = tuple(int(i) for i in bad[0])
            raise AssertionError(f"output {name}: {len(bad)} of {w.size} values differ from hwadapter's reference "
                                 f"executor's by more than rtol=atol=1e-4, the first at {where}: got {g[where]!r}, "
                                 f"expected {w[where]!r}")


def _run(exe, dev, arrays) -> list:
    outs = exe.run([DeviceArray.from_numpy(dev, a) for a in arrays])
    bad = [type(o).__name__ for o in outs if not isinstance(o, DeviceArray) or o.device is not dev]
    assert not bad, f"Executable.run returned {bad} where DeviceArrays on {dev} are expected"
    return [o.numpy() for o in outs]


def _claimed(backend, graph) -> set:
    claimed = set(backend.supported_nodes(graph))
    unknown = claimed - {n.name for n in graph.nodes}
    assert not unknown, f"supported_nodes() names nodes the graph does not have: {sorted(unknown)}"
    return claimed


@pytest.mark.parametrize("name", GRAPHS)
def test_claims_are_honoured_by_the_partitioner(backend, kit_dev, name):
    graph = GRAPHS[name]()
    claimed = _claimed(backend, graph)
    if not claimed:
        pytest.skip(f"the backend claims no node of the {name} graph")
    plan = hw.graph.partition(graph, devices=[str(kit_dev), "cpu"], passes=False)
    elsewhere = sorted(n for n in claimed if str(plan.assignment.get(n)) != str(kit_dev))
    assert not elsewhere, f"claimed nodes the partitioner put elsewhere: {elsewhere}"
    arrays = _inputs(graph)
    got = plan.run([hw.to_tensor(a, device=str(kit_dev)) for a in arrays])
    _same([g.numpy() for g in got], _expected(graph, arrays), graph)


@pytest.mark.parametrize("name", GRAPHS)
def test_compiled_subgraph_equals_the_reference(backend, kit_dev, name):
    graph = GRAPHS[name]()
    claimed = _claimed(backend, graph)
    if len(claimed) < len(graph.nodes):
        pytest.skip(f"the backend claims {len(claimed)} of the {len(graph.nodes)} nodes of {name}: checked through "
                    f"the partitioner only")
    exe = backend.compile(graph)
    arrays = _inputs(graph)
    _same(_run(exe, kit_dev, arrays), _expected(graph, arrays), graph)
    _same(_run(exe, kit_dev, arrays), _expected(graph, arrays), graph)  # a second run on the same executable


def test_serialize_round_trip(backend, kit_dev):
    graph = mlp()
    if len(_claimed(backend, graph)) < len(graph.nodes):
        pytest.skip("the backend does not claim the whole mlp graph")
    exe = backend.compile(graph)
    arrays = _inputs(graph)
    first = _run(exe, kit_dev, arrays)
    data = exe.serialize()
    if data is None:
        pytest.skip("Executable.serialize() returns None: the backend's compiled subgraphs are not cached")
    assert isinstance(data, bytes), f"serialize() returned {type(data).__name__}, not bytes"
    again = _run(backend.deserialize(data), kit_dev, arrays)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b, err_msg="the deserialised executable computes otherwise")
