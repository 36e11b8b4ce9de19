"""The memory planner against an independent liveness walk: no two values that are alive together share a buffer
(an in-place output takes over the buffer of the input it is written over, where that input dies), every buffer is
large enough for what it holds, the planned peak never exceeds the naive one, and every in-place choice is judged
safe by rules written out here again: an elementwise node, an input of its shape and dtype that is made by a node,
read by none after it, and shares memory with no graph input, constant, output or value read later."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings

from graphgen import graphs
from hwadapter.graph import Graph, GraphBuilder, Node, Value
from hwadapter.graph.memory import plan_memory

#: Ops whose node may write its output over an input (elementwise, one output) ...
POINTWISE = {"relu", "tanh", "sigmoid", "neg", "abs", "exp", "log", "sqrt", "add", "sub", "mul", "div", "maximum",
             "minimum", "gelu", "where", "fused"}
#: ... and ops whose outputs never share their inputs' memory; any other op's outputs may (reshape does).
COMPUTE = POINTWISE | {"matmul", "conv2d", "sum", "mean", "max", "min", "max_pool2d", "softmax", "argmax",
                       "batch_norm", "avg_pool2d"}


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


def check(graph, writers=frozenset()):
    plan = plan_memory(graph, writers=writers)
    span = intervals(graph)
    assert set(plan.buffers) == set(span)
    assert set(plan.inplace) <= {n.outputs[0] for n in graph.nodes if n.name in writers}
    items = sorted(span)
    for x in range(len(items)):
        for y in range(x + 1, len(items)):
            a, b = items[x], items[y]
            if plan.buffers[a] == plan.buffers[b]:
                (a0, a1), (b0, b1) = span[a], span[b]
                handed = (a1 == b0 and plan.inplace.get(b) == a) or (b1 == a0 and plan.inplace.get(a) == b)
                assert a1 < b0 or b1 < a0 or handed, f"{a} {span[a]} and {b} {span[b]} share buffer {plan.buffers[a]}"
    check_in_place(graph, plan)
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


def shared(graph) -> dict:
    """value -> the values that may share its memory: joined through every op outside COMPUTE, transitively."""
    group = {v: {v} for v in graph.values}
    for n in graph.nodes:
        if n.op not in COMPUTE:
            joined = set().union(*(group[v] for v in (*n.inputs, *n.outputs)))
            for v in joined:
                group[v] = joined
    return group


def check_in_place(graph, plan, opaque=()):
    """Every in-place choice of `plan` is safe by the rules of this module's docstring."""
    made = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs}
    reads: dict = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            reads.setdefault(v, set()).add(i)
    ends = set(graph.inputs) | set(getattr(graph, "constants", None) or {}) | set(graph.outputs)
    group = shared(graph)
    for out, x in plan.inplace.items():
        i = made[out]
        node = graph.nodes[i]
        assert node.op in POINTWISE and node.outputs == (out,) and x in node.inputs, f"{node.name} is not pointwise"
        assert (graph.values[x].shape, graph.values[x].dtype) == (graph.values[out].shape, graph.values[out].dtype)
        assert x in made and x not in opaque, f"{node.name} writes over {x}, which no node of the plan made"
        assert plan.buffers[out] == plan.buffers[x]
        for v in group[x]:
            assert v not in ends, f"{node.name} writes over {x}, which shares memory with {v}, a graph input/output"
            assert max(reads.get(v, {-1})) <= i, f"{node.name} writes over {x}, but {v} is read after it"
            assert v == x or v not in node.inputs, f"{node.name} reads {v} beside {x}, which it writes over"
    return plan


def every(graph) -> set:
    return {n.name for n in graph.nodes}


@settings(max_examples=60, deadline=None)
@given(graphs(max_nodes=16))
def test_no_two_live_values_share_a_buffer(graph):
    check(graph)
    plan = check(graph, writers=every(graph))
    assert plan.planned_peak <= plan_memory(graph).planned_peak


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


def test_a_chain_runs_in_place_in_one_buffer():
    b = GraphBuilder()
    h = b.input("x", (256, 256))
    for _ in range(10):
        h = b.op("relu", [h])
    graph = b.build(h)
    plan = check(graph, writers=every(graph))
    # the first node reads the graph input (the caller's): it gets a buffer, which the other nine write over
    assert len(plan.sizes) == 1 and len(plan.inplace) == 9
    assert plan.planned_peak == 256 * 256 * 4 and plan.naive_peak == 10 * 256 * 256 * 4
    assert check(graph, writers={"relu_3"}).inplace == {"relu_3:0": "relu_2:0"}


def _builder():
    b = GraphBuilder()
    return b, b.input("x", (8, 8))


def test_not_in_place_when_the_input_is_read_later():
    b, x = _builder()
    a = b.op("exp", [x])
    t = b.op("tanh", [a])            # a is read again by the add: tanh must not write over it
    graph = b.build(b.op("add", [a, t]))
    plan = check(graph, writers=every(graph))
    assert t not in plan.inplace and plan.inplace[graph.outputs[0]] in (a, t)


def test_not_in_place_over_a_graph_input_output_or_constant():
    b, x = _builder()
    c = b.input("c", (8, 8))
    first = b.op("relu", [x])                 # x is the caller's
    second = b.op("tanh", [first])            # first is a graph output
    third = b.op("add", [c, b.op("exp", [second])])
    graph = b.build([first, third])
    graph.inputs.remove(c)                    # c is a weight: a constant of the graph
    graph.constants[c] = np.ones((8, 8), np.float32)
    plan = check(graph, writers=every(graph))
    assert first not in plan.inplace and second not in plan.inplace
    assert plan.inplace[third] != "c" and plan.inplace[third] == "exp_2:0"
    assert plan_memory(graph).inplace == {}  # no writers: nothing in place


def test_not_in_place_over_memory_an_alias_still_holds():
    b, x = _builder()
    a = b.op("exp", [x])
    view = b.op("reshape", [a], shape=(64,))     # may be a's memory (it is on cpu and opencl)
    t = b.op("tanh", [a])                        # a dies here, but the view lives on
    graph = b.build([b.op("add", [b.op("reshape", [t], shape=(64,)), view])])
    plan = check(graph, writers=every(graph))
    assert t not in plan.inplace


def test_in_place_through_a_view_whose_memory_is_dead():
    b, x = _builder()
    view = b.op("reshape", [b.op("exp", [x])], shape=(64,))
    graph = b.build(b.op("tanh", [view]))        # exp's output and its view both die at tanh
    plan = check(graph, writers=every(graph))
    assert plan.inplace == {graph.outputs[0]: view}


def test_not_in_place_over_a_view_of_a_graph_input():
    b, x = _builder()
    graph = b.build(b.op("tanh", [b.op("reshape", [x], shape=(64,))]))
    assert check(graph, writers=every(graph)).inplace == {}


def test_not_in_place_across_shapes_dtypes_and_opaque_values():
    b, x = _builder()
    a, row = b.op("exp", [x]), b.op("exp", [b.input("r", (8,))])
    wide = b.op("add", [row, a])                 # row is (8,): only a has the output's shape
    less = b.op("less", [b.op("neg", [wide]), x])  # bool output: no float32 input to write over
    graph = b.build([less])
    plan = check(graph, writers=every(graph))
    assert plan.inplace.get(wide) == a and less not in plan.inplace
    sub = plan_memory(graph, writers=every(graph), opaque={a})
    assert wide not in sub.inplace               # a subgraph program's output is never written over


def test_a_multi_output_or_reducing_node_is_never_in_place():
    x = Value("x", (4, 4), np.dtype(np.float32))
    values = {"x": x, "e": Value("e", (4, 4), x.dtype), "o1": Value("o1", (4, 4), x.dtype),
              "o2": Value("o2", (4, 4), x.dtype), "s": Value("s", (4, 1), x.dtype)}
    fused = Node("f", "fused", ("e",), ("o1", "o2"), {"nodes": (("exp", ("a",), "o1", ()), ("neg", ("o1",), "o2", ())),
                                                      "inputs": ("a",), "outputs": ("o1", "o2"), "name": "k"})
    graph = Graph([Node("n", "exp", ("x",), ("e",), {}), fused], values, ["x"], ["o1", "o2"])
    assert check(graph, writers={"f"}).inplace == {}
    reduce = Node("f", "fused", ("e",), ("s",), {"nodes": (("reduce_sum", ("a",), "s", (("axes", (1,)),
                                                                                       ("keepdims", True))),),
                                                 "inputs": ("a",), "outputs": ("s",), "name": "k"})
    graph = Graph([Node("n", "exp", ("x",), ("e",), {}), reduce], values, ["x"], ["s"])
    assert check(graph, writers={"f"}).inplace == {}


def test_share_gives_values_whose_lives_do_not_overlap_one_slot():
    """hwadapter.plugin.share (what subgraph backends plan their intermediates with): a value takes the smallest
    free slot large enough, a slot is free after its last reader's step, and overlapping lives never share."""
    from hwadapter.plugin import share
    lives = {"a": (0, 1, 100), "b": (1, 2, 50), "c": (2, 3, 80), "d": (3, 4, 100), "e": (2, 2, 400)}
    where, slots = share(lives)
    for x, (f1, l1, _) in lives.items():
        for y, (f2, l2, _) in lives.items():
            if x < y and where[x] == where[y]:
                assert l1 < f2 or l2 < f1, (x, y)  # never two live values in one slot
    assert all(slots[where[v]] >= n for v, (_, _, n) in lives.items())
    assert where["c"] == where["a"]  # a's last reader (step 1) came before c's first step (2); b was too small
    assert where["d"] == where["e"]  # the smallest free slot large enough: e's, free after step 2
    assert len(slots) == 3 and sum(slots) < sum(n for _, _, n in lives.values())
