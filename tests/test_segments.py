"""Segments (hwadapter.graph.segments, the CPU's tuning/segments.py): runs of kernel steps run as one call. Against the
same plan with segments off (HWADAPTER_SEGMENTS=0, each kernel called from Python) and the float64 reference: every
value, the arena reused along the run, outputs that outlive later runs, threads running one plan at once, profiling
and fault injection still seeing each step, and a refused setting."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.graph import Graph, GraphBuilder, partition
from hwadapter.graph import reference as graph_reference
from hwadapter.graph.steps import Run
from hwadapter.runtime.device import get

blasconv = pytest.importorskip("hwadapter_cpu.tuning.blasconv")


def fire():
    """A SqueezeNet fire module and its head: conv (implicit product), max pool, two expand convs, their concat, an
    elementwise chain (fused: a compiled program), a 1x1 conv over one pixel after a global pool, a reshape and a
    softmax, and a dilated 3x3 conv of 4608 taps over 121 pixels (BLAS products of patches shared by blocks of
    channels: two phases and their scratch); weights and biases constant."""
    rng = np.random.default_rng(3)
    b = GraphBuilder()
    x = b.input("x", (1, 8, 23, 23))
    consts = {}

    def const(name, shape, scale=1.0):
        consts[name] = (rng.standard_normal(shape) * scale).astype("float32")
        b.input(name, shape)
        return name

    def conv(v, o, c, k, pad, act="relu", dilation=1):
        n = len(consts)
        return b.op("conv2d", [v, const(f"w{n}", (o, c, k, k), 1 / np.sqrt(c * k * k)), const(f"b{n}", (o,))],
                    stride=(1, 1), padding=(pad,) * 4, dilation=(dilation,) * 2, groups=1, activation=act)

    h = conv(x, 24, 8, 3, 1)
    h = b.op("mul", [h, b.op("sigmoid", [b.op("add", [h, h])])])  # an elementwise chain: a compiled program
    h = b.op("max_pool2d", [h], kernel_size=(3, 3), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=True)
    s = conv(h, 8, 24, 1, 0)
    e = b.op("concat", [conv(s, 16, 8, 1, 0), conv(s, 16, 8, 3, 1)], axis=1)
    p = b.op("avg_pool2d", [e], kernel_size=(11, 11), stride=(11, 11), padding=(0, 0, 0, 0), ceil_mode=False,
             exclusive=True)
    logits = b.op("reshape", [conv(p, 10, 32, 1, 0, act=None)], shape=(1, 10))
    out = b.op("softmax", [logits], axis=1)
    wide = conv(conv(e, 512, 32, 1, 0), 128, 512, 3, 2, dilation=2)  # many taps, few pixels: patches, products
    g = b.build([out, e, wide])
    return Graph(g.nodes, g.values, ["x"], g.outputs, constants=consts)


def _plan(graph, monkeypatch, segments: bool):
    monkeypatch.setenv("HWADAPTER_SEGMENTS", "1" if segments else "0")
    return partition(graph, devices=["cpu"])


def _x(seed=0):
    return np.random.default_rng(seed).standard_normal((1, 8, 23, 23)).astype("float32")


def test_a_fire_module_runs_as_segments_equal_to_its_kernels_called_one_by_one(monkeypatch):
    g = fire()
    plan, alone = _plan(g, monkeypatch, True), _plan(g, monkeypatch, False)
    kinds = [st.run for st in plan.schedule.steps]
    assert Run.SEGMENT in kinds and len(kinds) < len(alone.schedule.steps)
    inside = {p.run for st in plan.schedule.steps if st.run is Run.SEGMENT for p in st.call.parts}
    assert Run.PROGRAM in inside or get("cpu").codegen is None  # the fused chain runs inside too
    assert len(plan.schedule.steps) <= 2  # every step but the reshape of the input's tail is inside one
    seg = next(st for st in plan.schedule.steps if st.run is Run.SEGMENT)
    concat = next(p.name for p in seg.call.parts if p.op == "concat")
    assert concat not in seg.call.call.names  # the expand convs wrote their halves in place: nothing to copy
    assert Run.SEGMENT not in [st.run for st in alone.schedule.steps]
    x = _x()
    got, want = plan.run([x]), alone.run([x])
    for a, b in zip(got, want):  # the same C, the same order of sums: bit for bit
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    ref = graph_reference.run(g, {"x": x})
    for name, a in zip(g.outputs, got):
        np.testing.assert_allclose(a.numpy(), ref[name], rtol=1e-4, atol=1e-5)


def test_a_segments_arena_reuses_the_memory_of_values_no_longer_read(monkeypatch):
    """Six convolutions one after the other: each value dies once the next conv has read it, so the arena holds
    about two of them, not six; the result is the reference's."""
    rng = np.random.default_rng(4)
    b, consts = GraphBuilder(), {}
    v = b.input("x", (1, 8, 23, 23))
    for k in range(6):
        consts[f"w{k}"] = (rng.standard_normal((8, 8, 3, 3)) / 8).astype("float32")
        v = b.op("conv2d", [v, b.input(f"w{k}", (8, 8, 3, 3))], stride=(1, 1), padding=(1, 1, 1, 1),
                 dilation=(1, 1), groups=1, activation="relu")
    g = b.build([v])
    g = Graph(g.nodes, g.values, ["x"], g.outputs, constants=consts)
    plan = _plan(g, monkeypatch, True)
    (seg,) = plan.schedule.steps
    one = 8 * 23 * 23 * 4
    assert seg.run is Run.SEGMENT and seg.call.call.size <= 2 * -(-one // 64) * 64
    x = _x()
    np.testing.assert_allclose(plan.run([x])[0].numpy(), graph_reference.run(g, {"x": x})[g.outputs[0]], rtol=1e-4,
                               atol=1e-5)


def test_outputs_of_one_run_survive_the_next_and_threads_may_run_one_plan_at_once(monkeypatch):
    plan = _plan(fire(), monkeypatch, True)
    xs = [_x(seed) for seed in range(6)]
    first = [o.numpy().copy() for o in plan.run([xs[0]])]
    kept = plan.run([xs[0]])
    plan.run([xs[1]])
    for a, b in zip(kept, first):
        np.testing.assert_array_equal(a.numpy(), b)
    want = [[o.numpy() for o in plan.run([x])] for x in xs]
    got = [None] * len(xs)

    def work(i):
        for _ in range(5):
            got[i] = [o.numpy() for o in plan.run([xs[i]])]
    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            np.testing.assert_array_equal(a, b)


def test_the_profiler_sees_every_step_of_a_segment_and_a_fault_injected_into_one_is_found(monkeypatch):
    plan = _plan(fire(), monkeypatch, True)
    parts = [p for st in plan.schedule.steps if st.run is Run.SEGMENT for p in st.call.parts]
    with hw.profiler.profile() as prof:
        plan.run([_x()])
    seen = {e.name for e in prof.events if e.kind == "step"}
    assert {p.name for p in parts} <= seen
    pool = next(p.name for p in parts if p.op == "max_pool2d")
    bad = plan.replaced(pool, lambda x, **_: x[:, :, :2])  # a buggy kernel: the wrong shape
    with pytest.raises(hw.KernelExecutionError, match=pool):
        bad.run([_x()])


def test_a_failing_record_names_its_step(monkeypatch):
    plan = _plan(fire(), monkeypatch, True)
    seg = next(st for st in plan.schedule.steps if st.run is Run.SEGMENT)
    call = seg.call.call
    monkeypatch.setattr(call, "run", lambda program, arena, inputs: 2)  # the second record failed
    with pytest.raises(hw.KernelExecutionError, match=f"plan step {call.names[1]!r} could not allocate"):
        plan.run([_x()])


def test_a_setting_other_than_0_or_1_is_refused(monkeypatch):
    monkeypatch.setenv("HWADAPTER_SEGMENTS", "yes")
    with pytest.raises(hw.InvalidArgumentError, match="HWADAPTER_SEGMENTS"):
        partition(fire(), devices=["cpu"])
