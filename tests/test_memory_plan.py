"""The memory planner against an independent liveness walk: no two values that are alive together share a buffer,
every buffer is large enough for what it holds, and the planned peak never exceeds the naive one."""
from __future__ import annotations

import math

from hypothesis import given, settings

from graphgen import graphs
from hwadapter.graph import GraphBuilder
from hwadapter.graph.memory import plan_memory


def intervals(graph) -> dict:
    """value -> (first node index, last node index) it must stay alive for, found without the planner's code."""
    span = {}
    for i, node in enumerate(graph.nodes):
        for v in node.outputs:
            span[v] = [i, i]
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v in span:
                span[v][1] = max(span[v][1], i)
    for v in graph.outputs:
        if v in span:
            span[v][1] = len(graph.nodes)
    return span


def check(graph):
    plan = plan_memory(graph)
    span = intervals(graph)
    assert set(plan.buffers) == set(span)
    items = sorted(span)
    for x in range(len(items)):
        for y in range(x + 1, len(items)):
            a, b = items[x], items[y]
            if plan.buffers[a] == plan.buffers[b]:
                (a0, a1), (b0, b1) = span[a], span[b]
                assert a1 < b0 or b1 < a0, f"{a} {span[a]} and {b} {span[b]} share buffer {plan.buffers[a]}"
    for v, buf in plan.buffers.items():
        value = graph.values[v]
        assert plan.sizes[buf] >= math.prod(value.shape) * value.dtype.itemsize
    naive = sum(max(512, -(-math.prod(graph.values[v].shape) * graph.values[v].dtype.itemsize // 512) * 512)
                for v in span)
    assert plan.naive_peak == naive
    assert plan.planned_peak <= plan.naive_peak
    for v in graph.outputs:
        if v in span:
            assert plan.last_use[v] == len(graph.nodes)
    return plan


@settings(max_examples=60, deadline=None)
@given(graphs(max_nodes=16))
def test_no_two_live_values_share_a_buffer(graph):
    check(graph)


def test_a_chain_reuses_two_buffers():
    b = GraphBuilder()
    h = b.input("x", (256, 256))
    for _ in range(10):
        h = b.op("relu", [h])
    plan = check(b.build(h))
    assert len(plan.sizes) == 2  # ping-pong: a node never writes over its own input
    assert plan.planned_peak == 2 * 256 * 256 * 4 and plan.naive_peak == 10 * 256 * 256 * 4


def test_an_output_is_never_reused():
    b = GraphBuilder()
    x = b.input("x", (64, 64))
    first = b.op("relu", [x])
    h = first
    for _ in range(5):
        h = b.op("tanh", [h])
    graph = b.build([first, h])
    plan = check(graph)
    assert sum(1 for v, buf in plan.buffers.items() if buf == plan.buffers[first]) == 1
