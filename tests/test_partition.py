"""The partitioner's invariants on random graphs, device lists and support masks: every node assigned once, subgraphs
contiguous, convex and on one device, no cycle between them, copies exactly at device boundaries; the overrides; and
plan.run equal to the reference executor on the CPU."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hwadapter as hw
from graphgen import graphs, inputs_for
from hwadapter.graph import GraphBuilder, partitioner, run

HAVE_OPENCL = hw.device.is_available("opencl")
DEVICE_LISTS = [["cpu"]] + ([["opencl:0", "cpu"], ["opencl:0"], ["cpu", "opencl:0"]] if HAVE_OPENCL else [])
OPS = ["relu", "tanh", "sigmoid", "neg", "add", "mul", "sub", "maximum", "sum", "matmul", "concat", "slice"]


def masked(monkeypatch, lacks: dict):
    """Make devices lack ops: {device str: set of ops} (only ever less than the truth, so plans stay runnable)."""
    claimed, supports = partitioner.claimed, partitioner.supports

    def claimed_masked(device, graph):
        return {n for n in claimed(device, graph) if graph.node(n).op not in lacks.get(str(device), ())}

    def supports_masked(op, device, dtypes):
        return op not in lacks.get(str(device), ()) and supports(op, device, dtypes)
    monkeypatch.setattr(partitioner, "claimed", claimed_masked)
    monkeypatch.setattr(partitioner, "supports", supports_masked)


def reachable(graph, start: set, succ) -> set:
    seen, stack = set(), list(start)
    while stack:
        i = stack.pop()
        for s in succ[i]:
            if s not in seen:
                seen.add(s)
                stack.append(s)
    return seen


def check_invariants(original, plan, lacks=None):
    g = plan.graph
    names = [n.name for n in g.nodes]
    assert len(names) == len(set(names))
    real = [n for n in g.nodes if n.op != "copy"]
    assert sorted(n.name for n in real) == sorted(n.name for n in original.nodes)  # every node once
    assert set(plan.assignment) == set(names)
    # topological: each value made before it is read
    made = set(g.inputs) | set(getattr(g, "constants", {}))
    for n in g.nodes:
        assert all(v in made for v in n.inputs), n.name
        made |= set(n.outputs)
    assert all(o in made for o in g.outputs)
    # where each value lives
    home = {v: plan.input_devices[v] for v in g.inputs}
    for n in g.nodes:
        for o in n.outputs:
            home[o] = plan.assignment[n.name]
    copies = [n for n in g.nodes if n.op == "copy"]
    assert [c.name for c in copies] == plan.copies
    for c in copies:  # a copy sits on a boundary: it moves a value to another device, where it is read
        assert c.attrs["device"] == plan.assignment[c.name] != home[c.inputs[0]]
        assert any(c.outputs[0] in n.inputs for n in g.nodes)
    assert len({(c.inputs[0], c.attrs["device"]) for c in copies}) == len(copies)  # one copy per value and device
    for n in real:  # every boundary crossing goes through a copy
        for v in n.inputs:
            if v in getattr(g, "constants", {}):
                continue  # a constant is uploaded to each device that reads it, not copied
            assert home[v] == plan.assignment[n.name], f"{n.name} reads {v} from {home[v]} without a copy"
    # subgraphs: contiguous, one device, claimed, convex, and the contracted graph has no cycle
    index = {n.name: i for i, n in enumerate(g.nodes)}
    producer = {o: i for i, n in enumerate(g.nodes) for o in n.outputs}
    succ = [[] for _ in g.nodes]
    for i, n in enumerate(g.nodes):
        for v in n.inputs:
            if v in producer:
                succ[producer[v]].append(i)
    seen = set()
    for sg in plan.subgraphs:
        idx = sorted(index[name] for name in sg.nodes)
        assert idx == list(range(idx[0], idx[0] + len(idx)))
        assert all(plan.assignment[name] == sg.device for name in sg.nodes)
        assert all(plan.how[name] == "subgraph" for name in sg.nodes)
        assert not seen & set(sg.nodes)
        seen |= set(sg.nodes)
        members = set(idx)
        outside = reachable(g, members, succ) - members
        assert not reachable(g, outside, succ) & members, f"{sg.name} is not convex"
    unit = {}
    for i, n in enumerate(g.nodes):
        unit[i] = next((s.name for s in plan.subgraphs if n.name in s.nodes), n.name)
    edges = {(unit[p], unit[s]) for p in range(len(g.nodes)) for s in succ[p] if unit[p] != unit[s]}
    order = {u: k for k, u in enumerate(dict.fromkeys(unit.values()))}
    assert all(order[a] < order[b] for a, b in edges)  # the units' order is topological: no cycle between them
    for name, dev in plan.assignment.items():
        op = g.node(name).op
        if lacks and op in lacks.get(dev, ()) and plan.how[name] != "fallback":
            pytest.fail(f"{name} ({op}) went to {dev}, which lacks it")
    assert plan.memory.planned_peak <= plan.memory.naive_peak


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=graphs(), devs=st.sampled_from(DEVICE_LISTS), lacks=st.sets(st.sampled_from(OPS)),
       min_subgraph=st.integers(1, 4))
def test_invariants_on_random_graphs_and_support_masks(monkeypatch, graph, devs, lacks, min_subgraph):
    mask = {"opencl:0": lacks}
    with monkeypatch.context() as m:
        masked(m, mask)
        plan = hw.graph.partition(graph, devices=devs, min_subgraph=min_subgraph, passes=False)
    check_invariants(graph, plan, mask)
    assert all(len(s.nodes) >= min_subgraph for s in plan.subgraphs)


@settings(max_examples=25, deadline=None)
@given(graph=graphs())
def test_run_on_cpu_equals_the_reference_executor(graph):
    plan = hw.graph.partition(graph, devices=["cpu"], passes=False)
    check_invariants(graph, plan)
    arrays = inputs_for(graph)
    expected = run(graph, dict(zip(graph.inputs, arrays)), device="cpu")
    outs = plan.run([hw.to_tensor(a) for a in arrays])
    for name, out in zip(graph.outputs, outs):
        np.testing.assert_allclose(out.numpy(), expected[name].numpy(), rtol=1e-6, atol=1e-6)


def diamond():
    """a -> b -> c and a -> c: with b elsewhere, {a, c} in one subgraph would be a cycle through b's device."""
    bld = GraphBuilder()
    x = bld.input("x", (4, 6))
    a = bld.op("relu", [x])
    b = bld.op("tanh", [a])
    c = bld.op("add", [a, b])
    return bld.build(bld.op("sigmoid", [c]))


@pytest.mark.skipif(not HAVE_OPENCL, reason="no OpenCL device")
def test_no_subgraph_closes_a_cycle_through_another_device(monkeypatch):
    graph = diamond()
    masked(monkeypatch, {"opencl:0": {"tanh"}})
    plan = hw.graph.partition(graph, devices=["opencl:0", "cpu"], min_subgraph=1, passes=False)
    check_invariants(graph, plan, {"opencl:0": {"tanh"}})
    assert plan.assignment["tanh_1"] == "cpu:0"
    together = [s for s in plan.subgraphs if "relu_0" in s.nodes and "add_2" in s.nodes]
    assert not together, "relu and add around the CPU's tanh were put in one subgraph"
    assert len(plan.copies) == 2  # relu's output to the cpu, tanh's back


def test_clusters_refuse_a_merge_that_makes_a_cycle():
    graph = diamond()
    preds, succs = partitioner._edges(graph)
    groups = partitioner.clusters(graph, ["d", None, "d", "d"], succs)
    owner = {i: k for k, g in enumerate(groups) for i in g}
    assert owner[0] != owner[2]  # relu and add are separated by tanh
    assert owner[2] == owner[3]
    assert partitioner.clusters(graph, ["d", "d", "d", "d"], succs) == [{0, 1, 2, 3}]


def test_clusters_see_a_cycle_through_a_group_formed_earlier():
    """Two d-groups can each be convex and still depend on each other through a third group: a -> x -> (b ... c),
    c -> y -> d. Merging a with d must see the path a -> x -> b, c (b's group) -> y -> d (found by hypothesis)."""
    b = GraphBuilder()
    x0 = b.input("x0", (4, 6))
    c = b.op("add", [x0, x0])                       # 0: d
    a = b.op("reshape", [x0], shape=(3, 8))        # 1: d
    x = b.op("relu", [a])                          # 2: other
    b2 = b.op("reshape", [x], shape=(4, 6))        # 3: d, joins c's group through add
    b.op("add", [c, b2])                           # 4: d
    y = b.op("relu", [b.op("reshape", [c], shape=(3, 8))])   # 5: d, 6: other
    d = b.op("reshape", [y], shape=(4, 6))         # 7: d
    graph = b.build([d, "add_4:0"])
    preds, succs = partitioner._edges(graph)
    key = ["d" if n.op != "relu" else None for n in graph.nodes]
    groups = partitioner.clusters(graph, key, succs)
    partitioner._order(groups, preds)  # raises when the groups form a cycle
    owner = {i: k for k, g in enumerate(groups) for i in g}
    assert owner[1] != owner[7]


@pytest.mark.skipif(not HAVE_OPENCL, reason="no OpenCL device")
def test_pin_and_forbid(monkeypatch):
    graph = diamond()
    plan = hw.graph.partition(graph, devices=["opencl:0", "cpu"], pin={"tanh": "cpu"}, passes=False)
    assert plan.assignment["tanh_1"] == "cpu:0" and plan.how["tanh_1"] == "pinned"
    assert plan.assignment["relu_0"] == "opencl:0"
    plan = hw.graph.partition(graph, devices=["opencl:0", "cpu"], forbid={"add_2": "opencl:0"}, passes=False)
    assert plan.assignment["add_2"] == "cpu:0"
    check_invariants(graph, plan)
    with pytest.raises(hw.errors.InvalidArgumentError, match="relu_0"):
        hw.graph.partition(graph, devices=["cpu"], forbid={"relu": ["cpu"]}, passes=False)


@pytest.mark.skipif(not HAVE_OPENCL, reason="no OpenCL device")
def test_min_subgraph_leaves_small_regions_to_kernels():
    graph = diamond()
    plan = hw.graph.partition(graph, devices=["opencl:0"], min_subgraph=10, passes=False)
    assert plan.subgraphs == [] and plan.copies == []
    plan = hw.graph.partition(graph, devices=["opencl:0"], min_subgraph=2, passes=False)
    assert [len(s.nodes) for s in plan.subgraphs] == [4]


@pytest.mark.skipif(not HAVE_OPENCL, reason="no OpenCL device")
def test_nodes_no_listed_device_runs_go_to_the_fallback_device(monkeypatch):
    graph = diamond()
    masked(monkeypatch, {"opencl:0": set(OPS)})
    plan = hw.graph.partition(graph, devices=["opencl:0"], passes=False)
    assert set(plan.assignment.values()) == {"cpu:0"}
    assert sorted(plan.fallbacks) == sorted(n.name for n in graph.nodes)
    assert all(plan.how[n.name] == "fallback" for n in graph.nodes)
    assert "fallbacks: 4" in plan.summary()


def test_summary_names_devices_copies_and_memory():
    plan = hw.graph.partition(diamond(), devices=["cpu"], passes=False)
    text = plan.summary()
    assert "cpu:0" in text and "copies: 0" in text
    assert f"planned {plan.memory.planned_peak} bytes vs naive {plan.memory.naive_peak}" in text
    assert "passes: off" in text
