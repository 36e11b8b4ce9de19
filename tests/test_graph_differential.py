"""The issue's differential test: random graphs (elementwise, broadcast, reduce, matmul, conv2d + batch_norm with
constant parameters + activation, reshape, concat, slice), partitioned over random device priority lists with random
support masks and random passes on or off, then fused, planned (in place where safe) and run, equal the unoptimised
graph run node by node on the CPU (hwadapter.graph.reference.run, the oracle), twice, leaving the inputs alone; each
plan also keeps the partition invariants and its in-place choices pass test_memory_plan's independent check."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import hwadapter as hw
from hwadapter.graph import Graph, Node, Value, partitioner
from hwadapter.graph.reference import run as reference_run
from hwadapter.graph.passes import PASSES
from hwadapter.api.reference import KERNELS
from test_memory_plan import check_in_place

HAVE_OPENCL = hw.device.is_available("opencl")
DEVICES = ["cpu"] + (["opencl:0"] if HAVE_OPENCL else [])
UNARY = ["relu", "tanh", "sigmoid", "neg", "abs"]
BINARY = ["add", "sub", "maximum", "minimum", "mul"]
REDUCE = ["sum", "mean", "max"]
ACTIVATIONS = [None, "relu", "sigmoid", "tanh", "gelu"]
MASKABLE = sorted(set(UNARY + BINARY + REDUCE) | {"matmul", "conv2d", "batch_norm", "reshape", "concat", "slice"}
                  | {a for a in ACTIVATIONS if a})
ROWS, COLS = 4, 6
IMAGE = (1, 2, 3, 4)  # NCHW with ROWS * COLS elements, so a feature map reshapes into the dense values
#: Relative tolerance per dtype, against the largest magnitude the reference computed (reordered sums, folded BN).
TOLERANCE = {np.dtype(np.float32): 1e-4, np.dtype(np.float16): 1e-2}


class _Builder:
    """A graph by hand with constants: each node's output meta from running the reference kernel on the values."""

    def __init__(self, rng, dtype=np.float32):
        self.rng, self.dtype = rng, np.dtype(dtype)
        self.nodes, self.values, self.inputs, self.constants, self.probe = [], {}, [], {}, {}

    def input(self, name, shape):
        self.inputs.append(name)
        return self._value(name, self.rng.uniform(-1, 1, shape).astype(self.dtype))

    def const(self, array):
        name = f"c{len(self.constants)}"
        self.constants[name] = np.asarray(array, self.dtype)
        return self._value(name, self.constants[name])

    def op(self, op, inputs, **attrs):
        out = np.asarray(KERNELS[op](*(self.probe[i] for i in inputs), **attrs))
        name = f"{op}_{len(self.nodes)}"
        self.nodes.append(Node(name, op, tuple(inputs), (f"{name}:0",), attrs))
        return self._value(f"{name}:0", out)

    def _value(self, name, array):
        self.values[name], self.probe[name] = Value(name, array.shape, array.dtype), array
        return name

    def build(self, outputs) -> Graph:
        return Graph(list(self.nodes), dict(self.values), list(self.inputs), list(outputs),
                     constants=dict(self.constants))


def _conv_block(draw, b, image):
    """conv2d (+ bias) (+ inference batch_norm with constant parameters) (+ activation) on a feature map."""
    c = IMAGE[1]
    bias = [b.const(b.rng.uniform(-0.5, 0.5, c))] if draw(st.booleans()) else []
    y = b.op("conv2d", [image, b.const(b.rng.uniform(-0.5, 0.5, (c, c, 3, 3))), *bias], stride=(1, 1),
             padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    if draw(st.booleans()):
        params = [b.rng.uniform(-0.5, 0.5, c), b.rng.uniform(0.5, 1.5, c), b.rng.uniform(0.5, 1.5, c),
                  b.rng.uniform(-0.5, 0.5, c)]
        y = b.op("batch_norm", [y, *(b.const(p) for p in params)], epsilon=1e-5, channel_axis=1)
    act = draw(st.sampled_from(ACTIVATIONS))
    return b.op(act, [y]) if act else y


@st.composite
def graphs(draw, max_steps: int = 14) -> Graph:
    """A random float32 or float16 graph over (4, 6) values and (1, 2, 3, 4) feature maps mixing every kind of op the
    issue names; inputs in [-1, 1] and `mul` by a tanh keep magnitudes bounded, so float error stays relative."""
    dtype = draw(st.sampled_from([np.float32, np.float16]))
    b = _Builder(np.random.default_rng(draw(st.integers(0, 2**16))), dtype)
    full = [b.input("x0", (ROWS, COLS)), b.input("x1", (ROWS, COLS))]
    w, row = b.input("w", (COLS, COLS)), b.input("row", (COLS,))
    maps, cols, made = [b.input("img", IMAGE)], [], []
    for _ in range(draw(st.integers(1, max_steps))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "broadcast", "reduce", "matmul", "conv", "flatten",
                                     "reshape", "concat"]))
        a = draw(st.sampled_from(full))
        if kind == "unary":
            out = b.op(draw(st.sampled_from(UNARY)), [a])
        elif kind == "binary":
            op, other = draw(st.sampled_from(BINARY)), draw(st.sampled_from(full))
            out = b.op(op, [a, b.op("tanh", [other]) if op == "mul" else other])
        elif kind == "broadcast":
            out = b.op(draw(st.sampled_from(["add", "sub", "maximum"])), [a, draw(st.sampled_from(cols + [row]))])
        elif kind == "reduce":
            cols.append(b.op(draw(st.sampled_from(REDUCE)), [a], axis=(1,), keepdim=True))
            made.append(cols[-1])
            continue
        elif kind == "matmul":
            out = b.op("matmul", [a, w])
        elif kind == "conv":
            maps.append(_conv_block(draw, b, draw(st.sampled_from(maps))))
            made.append(maps[-1])
            continue
        elif kind == "flatten":
            out = b.op("reshape", [draw(st.sampled_from(maps))], shape=(ROWS, COLS))
        elif kind == "reshape":
            mid = b.op(draw(st.sampled_from(UNARY)), [b.op("reshape", [a], shape=(3, 8))])
            out = b.op("reshape", [mid], shape=(ROWS, COLS))
        else:
            both = b.op("concat", [a, draw(st.sampled_from(full))], axis=1)
            start = draw(st.integers(0, COLS))
            out = b.op("slice", [both], axes=(1,), starts=(start,), ends=(start + COLS,), steps=(1,))
        full.append(out)
        made.append(out)
    outs = draw(st.lists(st.sampled_from(made), min_size=1, max_size=3, unique=True))
    read = {v for n in b.nodes for v in n.inputs}
    # every leaf is an output: no dead node, which test_a_subgraph_with_only_dead_outputs_runs covers on its own
    return b.build(outs + [v for v in made if v not in read and v not in outs])


def mask(monkeypatch, refused: dict) -> None:
    """Make devices refuse ops ({device str: ops}): only ever less than the truth, so every plan stays runnable."""
    claimed, supports = partitioner.claimed, partitioner.supports
    monkeypatch.setattr(partitioner, "claimed", lambda device, graph: {
        n for n in claimed(device, graph) if graph.node(n).op not in refused.get(str(device), ())})
    monkeypatch.setattr(partitioner, "supports", lambda op, device, dtypes:
                        op not in refused.get(str(device), ()) and supports(op, device, dtypes))


def check_invariants(plan, refused: dict) -> None:
    """Every node assigned once; subgraphs on one device, with no cycle between them; copies only at boundaries."""
    g, constants = plan.graph, set(plan.graph.constants)
    names = [n.name for n in g.nodes]
    assert len(names) == len(set(names)) and set(plan.assignment) == set(names)
    home = {v: plan.input_devices[v] for v in g.inputs}
    for n in g.nodes:
        assert all(v in home or v in constants for v in n.inputs), f"{n.name} reads a value before it is made"
        home.update(dict.fromkeys(n.outputs, plan.assignment[n.name]))
        if n.op == "copy":
            assert n.attrs["device"] == plan.assignment[n.name] != home[n.inputs[0]], f"{n.name} crosses no boundary"
        else:
            crossing = [v for v in n.inputs if v not in constants and home[v] != plan.assignment[n.name]]
            assert not crossing, f"{n.name} on {plan.assignment[n.name]} reads {crossing} without a copy"
        if n.op in refused.get(plan.assignment[n.name], ()) and plan.how[n.name] != "fallback":
            raise AssertionError(f"{n.name} ({n.op}) went to {plan.assignment[n.name]}, which refuses it")
    assert [n.name for n in g.nodes if n.op == "copy"] == plan.copies
    unit = {n: n for n in names}
    for sg in plan.subgraphs:
        assert {plan.assignment[n] for n in sg.nodes} == {sg.device}
        assert all(unit[n] == n for n in sg.nodes), f"a node of {sg.name} is in another subgraph too"
        unit.update(dict.fromkeys(sg.nodes, sg.name))
    producer = {o: unit[n.name] for n in g.nodes for o in n.outputs}
    edges = {(producer[v], unit[n.name]) for n in g.nodes for v in n.inputs if v in producer}
    _assert_acyclic({(a, c) for a, c in edges if a != c}, set(unit.values()))


def _assert_acyclic(edges: set, units: set) -> None:
    """Kahn's algorithm over the units (nodes and subgraphs): every unit must come out, else there is a cycle."""
    waiting = {u: sum(1 for _, c in edges if c == u) for u in units}
    ready, done = [u for u, k in waiting.items() if not k], 0
    while ready:
        u, done = ready.pop(), done + 1
        for a, c in edges:
            if a == u:
                waiting[c] -= 1
                if not waiting[c]:
                    ready.append(c)
    assert done == len(units), "the subgraphs form a cycle through another device"


def _scale(graph, arrays) -> float:
    """The largest magnitude of any value the reference computes (the tolerance is relative to it)."""
    every = [o for n in graph.nodes for o in n.outputs]
    whole = Graph(graph.nodes, graph.values, graph.inputs, every, constants=graph.constants)
    got = reference_run(whole, dict(zip(graph.inputs, arrays)), "cpu")
    return max([1.0] + [float(np.nanmax(np.abs(t.numpy()))) for t in got.values()])


devices_lists = st.lists(st.sampled_from(DEVICES), min_size=1, max_size=len(DEVICES), unique=True)
refusals = st.fixed_dictionaries({d: st.frozensets(st.sampled_from(MASKABLE), max_size=6) for d in DEVICES})
pass_choices = st.one_of(st.booleans(), st.frozensets(st.sampled_from(sorted(PASSES))))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(graph=graphs(), devs=devices_lists, refused=refusals, passes=pass_choices, min_subgraph=st.integers(1, 3))
def test_partitioned_fused_planned_run_equals_the_reference(monkeypatch, graph, devs, refused, passes, min_subgraph):
    with monkeypatch.context() as m:
        mask(m, refused)
        plan = hw.graph.partition(graph, devices=devs, min_subgraph=min_subgraph, passes=passes)
    check_invariants(plan, refused)
    rng = np.random.default_rng(len(graph.nodes))
    arrays = [rng.uniform(-1, 1, graph.values[v].shape).astype(graph.values[v].dtype) for v in graph.inputs]
    inside = {n for sg in plan.subgraphs for n in sg.nodes}
    check_in_place(plan.graph, plan.memory, opaque={v for n in plan.graph.nodes if n.name in inside for v in n.outputs})
    event(f"{len(plan.memory.inplace)} nodes in place")
    expected = reference_run(graph, dict(zip(graph.inputs, arrays)), "cpu")
    tensors = [hw.to_tensor(a) for a in arrays]
    scale = _scale(graph, arrays)
    for _ in range(2):  # the step loop, then the generated function: in-place steps leave nothing stale behind
        got = plan.run(tensors)
        assert len(got) == len(graph.outputs)
        for name, out in zip(graph.outputs, got):
            want, have = expected[name].numpy(), out.numpy()
            tol = TOLERANCE[want.dtype]
            assert str(out.device) == "cpu:0" and have.shape == want.shape and have.dtype == want.dtype, name
            np.testing.assert_allclose(have, want, rtol=tol, atol=tol * scale, err_msg=f"output {name}")
    for t, a in zip(tensors, arrays):  # graph inputs are the caller's: never written over
        np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.skipif(not HAVE_OPENCL, reason="needs opencl:0 (a device with a subgraph backend)")
def test_a_subgraph_with_only_dead_outputs_runs():
    b = _Builder(np.random.default_rng(0))
    x = b.input("x", (ROWS, COLS))
    b.op("add", [x, x])  # dead: nothing reads it and it is no output
    g = b.build([b.op("relu", [x])])
    plan = hw.graph.partition(g, devices=["opencl:0"], passes=False, min_subgraph=1, pin={"relu": "cpu"})
    assert [s.nodes for s in plan.subgraphs] == [("add_0",)]
    for _ in range(2):  # the first run goes through the step loop, the second through the generated function
        got = plan.run([hw.to_tensor(b.probe[x])])[0].numpy()
        np.testing.assert_array_equal(got, np.maximum(b.probe[x], 0))
