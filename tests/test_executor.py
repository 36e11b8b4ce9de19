"""The compiled executor against the reference executor (eager dispatch on the CPU) on cpu, opencl:0 and mixes; values
dropped at last use (the allocator's peak); per-step profiler events; the program cache across processes; the SVG."""
from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hwadapter as hw
from graphgen import convnet, graphs, inputs_for
from hwadapter.graph import Graph, GraphBuilder, Node, Value, run, svg
from hwadapter.graph import executor, programs
from hwadapter.graph.steps import Run
from hwadapter.runtime.device import get
from test_partition import OPS, check_invariants, masked

HAVE_OPENCL = hw.device.is_available("opencl")
needs_opencl = pytest.mark.skipif(not HAVE_OPENCL, reason="no OpenCL device (pocl-opencl-icd, plugins/opencl)")
ACCELERATORS = [f"{t}:0" for t in ("opencl", "cuda") if hw.device.is_available(t)]
MIXES = [["cpu"]] + [mix for acc in ACCELERATORS for mix in ([acc], [acc, "cpu"], ["cpu", acc])]


def loop(plan, inputs):
    """The plan's outputs from the executor's step loop (what profiled runs take), not its generated function."""
    bare = copy.copy(plan)
    bare.straight = None
    return executor.run(bare, inputs)


def mlp():
    b = GraphBuilder()
    x, w, bias = b.input("x", (8, 40)), b.input("w", (40, 70)), b.input("bias", (70,))
    h = b.op("relu", [b.op("add", [b.op("matmul", [x, w]), bias])])
    s = b.op("softmax", [h], axis=1)
    return b.build([s, b.op("argmax", [s], axis=1, keepdim=False), h])


def with_constants():
    """mlp() with its weight and bias as graph constants (what tracing captures)."""
    g = mlp()
    rng = np.random.default_rng(7)
    consts = {"w": rng.standard_normal((40, 70)).astype("float32"), "bias": rng.standard_normal(70).astype("float32")}
    return Graph(g.nodes, g.values, ["x"], g.outputs, constants=consts)


def conv_bn_relu():
    """conv2d with constant weights + inference batch_norm (constant statistics) + relu + an elementwise tail and a
    reduction: what the passes fold (batch_norm into the weights) and fuse (epilogue, chains)."""
    rng = np.random.default_rng(5)
    consts = {"w": rng.standard_normal((6, 3, 3, 3)).astype("float32"),
              "mean": rng.standard_normal(6).astype("float32"), "var": rng.uniform(0.5, 2, 6).astype("float32"),
              "gamma": rng.standard_normal(6).astype("float32"), "beta": rng.standard_normal(6).astype("float32")}
    b = GraphBuilder()
    x = b.input("x", (2, 3, 10, 10))
    w, *params = [b.input(k, a.shape) for k, a in consts.items()]
    h = b.op("conv2d", [x, w], stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    h = b.op("relu", [b.op("batch_norm", [h, *params], epsilon=1e-5, channel_axis=1)])
    y = b.op("add", [b.op("mul", [h, h]), h])
    g = b.build([b.op("sum", [y], axis=(2, 3), keepdim=False)])
    return Graph(g.nodes, g.values, ["x"], g.outputs, constants=consts)


def reference(graph, arrays):
    expected = run(graph, dict(zip(graph.inputs, arrays)), device="cpu")
    return [expected[o].numpy() for o in graph.outputs]


def assert_same(outs, expected, graph):
    assert len(outs) == len(expected)
    for out, exp, name in zip(outs, expected, graph.outputs):
        assert out.shape == graph.values[name].shape and out.dtype == graph.values[name].dtype, name
        np.testing.assert_allclose(out.numpy(), exp, rtol=1e-5, atol=1e-4, err_msg=name)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.mark.parametrize("passes", [False, True], ids=["raw", "passes"])
@pytest.mark.parametrize("devs", MIXES, ids=lambda d: "+".join(d))
@pytest.mark.parametrize("build", [mlp, convnet, with_constants, conv_bn_relu])
def test_plan_run_equals_the_reference_executor(build, devs, passes):
    graph = build()
    arrays = inputs_for(graph, 1)
    plan = hw.graph.partition(graph, devices=devs, passes=passes)
    if not passes:
        check_invariants(graph, plan)
    expected = reference(graph, arrays)
    assert_same(plan.run([hw.to_tensor(a) for a in arrays]), expected, graph)
    assert_same(plan.run(dict(zip(graph.inputs, arrays))), expected, graph)  # arrays by name: a second run


@needs_opencl
@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(graph=graphs(max_nodes=8), lacks=st.sets(st.sampled_from(OPS)), min_subgraph=st.integers(1, 3),
       passes=st.booleans())
def test_random_graphs_on_opencl_and_cpu_mixes(monkeypatch, graph, lacks, min_subgraph, passes):
    """Partitioned (and with passes: folded, fused), planned execution equals eager execution on the CPU."""
    arrays = inputs_for(graph, 2)
    with monkeypatch.context() as m:
        masked(m, {"opencl:0": lacks})
        plan = hw.graph.partition(graph, devices=["opencl:0", "cpu"], min_subgraph=min_subgraph, passes=passes)
    if not passes:
        check_invariants(graph, plan, {"opencl:0": lacks})
    xs = [hw.to_tensor(a, device="opencl:0") for a in arrays]
    outs = plan.run(xs)
    assert all(str(o.device) == "opencl:0" for o in outs)  # on the inputs' device
    assert_same(outs, reference(graph, arrays), graph)


@needs_opencl
def test_outputs_go_to_the_requested_device():
    graph = mlp()
    arrays = inputs_for(graph)
    plan = hw.graph.partition(graph, devices=["opencl:0"], passes=False)
    assert {str(o.device) for o in plan.run(arrays, device="cpu")} == {"cpu:0"}
    assert {str(o.device) for o in plan.run([hw.to_tensor(a) for a in arrays])} == {"cpu:0"}
    assert {str(o.device) for o in plan.run(arrays, device="opencl:0")} == {"opencl:0"}


def test_bad_inputs_are_named():
    graph = mlp()
    plan = hw.graph.partition(graph, devices=["cpu"], passes=False)
    with pytest.raises(hw.errors.InvalidArgumentError, match="'x'"):
        plan.run([np.zeros((3, 40), "float32")] + inputs_for(graph)[1:])
    with pytest.raises(hw.errors.InvalidArgumentError, match="missing inputs"):
        plan.run({"x": np.zeros((8, 40), "float32")})


def test_a_wrong_kernel_result_is_named(monkeypatch):
    graph = mlp()
    plan = hw.graph.partition(graph, devices=["cpu"], passes=False)
    arrays = inputs_for(graph)
    plan.run(arrays)
    for run in (executor.run, loop):  # the generated function and the step loop say the same
        bad = plan.replaced("relu_2", lambda x: x[:4])  # a buggy kernel: the wrong shape
        with pytest.raises(hw.errors.KernelExecutionError, match=r"relu_2.*\[4, 70\].*\[8, 70\]"):
            run(bad, arrays)
        bad = plan.replaced("relu_2", lambda x: 1 / 0)
        with pytest.raises(hw.errors.KernelExecutionError, match="relu_2.*ZeroDivisionError"):
            run(bad, arrays)


def chain(ops=("relu", "tanh")):
    """x -> 12 elementwise ops on (256, 256) float32, alternating `ops`."""
    b = GraphBuilder()
    h = x = b.input("x", (256, 256))
    for k in range(12):
        h = b.op(ops[k % 2], [h])
    return b.build(h), x


@needs_opencl
def test_values_are_dropped_at_last_use_so_the_allocator_peak_is_lower():
    graph, x = chain()
    dev = get("opencl:0")
    hw.device.empty_cache()  # blocks cached by earlier tests (a ResNet's) would serve these requests in other sizes
    xt = hw.to_tensor(inputs_for(graph)[0], device=dev)
    plan = hw.graph.partition(graph, devices=["opencl:0"], min_subgraph=10 ** 6, passes=False)
    apart = hw.graph.partition(graph, devices=["opencl:0"], min_subgraph=10 ** 6, passes={"inplace", "fuse"})
    for p in (plan, apart):
        p.run([xt])  # warm: kernels compiled
    run(graph, {x: xt}, device=dev)
    alloc = dev.allocator

    def peak(fn):
        base = alloc.allocated
        alloc.reset_peak()
        out = fn()
        hw.device.synchronize() if hasattr(hw.device, "synchronize") else None
        result = alloc.peak_allocated - base
        del out
        return result
    naive = peak(lambda: run(graph, {x: xt}, device=dev))
    planned = peak(lambda: plan.run([xt]))
    reused = peak(lambda: apart.run([xt]))
    one = 256 * 256 * 4
    assert naive >= 12 * one
    assert planned == one < reused <= 3 * one < naive  # in place: the first op's block, written over 11 times
    assert plan.memory.naive_peak == 12 * one and plan.memory.planned_peak == one and len(plan.memory.inplace) == 11
    assert apart.memory.planned_peak == 2 * one and not apart.memory.inplace
    assert "11 nodes in place" in plan.summary() and "inplace" in apart.summary()
    assert_same(plan.run([xt]), reference(graph, [xt.numpy()]), graph)


def test_in_place_on_the_cpu_lowers_numpy_peak_memory():
    """cpu tensors are numpy's (no caching allocator): numpy's allocations are traced by tracemalloc instead."""
    import tracemalloc
    graph, x = chain(("exp", "tanh"))  # numpy ufuncs on the cpu: their kernels take out=
    xs = inputs_for(graph)[0] * 0.1
    plan = hw.graph.partition(graph, devices=["cpu"], passes=False)
    apart = hw.graph.partition(graph, devices=["cpu"], passes={"inplace", "fuse"})
    assert len(plan.memory.inplace) == 11 and not apart.memory.inplace
    xt, before = hw.to_tensor(xs), xs.copy()
    for p in (plan, apart, plan, apart):  # the step loop, then the generated function
        np.testing.assert_allclose(p.run([xt])[0].numpy(), reference(graph, [xs])[0], rtol=1e-6)

    def peak(fn):
        tracemalloc.start()
        try:
            out = fn()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
            del out
    one = 256 * 256 * 4
    planned, reused = peak(lambda: plan.run([xt])), peak(lambda: apart.run([xt]))
    assert planned < 1.5 * one <= 2 * one <= reused
    np.testing.assert_array_equal(xt.numpy(), before)  # the graph input is the caller's: never written


@pytest.mark.parametrize("where", ["cpu"] + ACCELERATORS)
def test_in_place_runs_equal_the_reference_and_leave_inputs_alone(where):
    """Fused chains, broadcasts, views and values read twice: planned in place where safe, run twice."""
    b = GraphBuilder()
    x, y, row = b.input("x", (64, 32)), b.input("y", (64, 32)), b.input("row", (32,))
    a = b.op("exp", [b.op("mul", [x, y])])
    view = b.op("reshape", [a], shape=(32, 64))
    t = b.op("tanh", [b.op("add", [a, row])])
    s = b.op("sub", [t, b.op("neg", [t])])            # t read twice by one node
    m = b.op("maximum", [b.op("reshape", [view], shape=(64, 32)), s])
    graph = b.build([m, b.op("relu", [b.op("mul", [m, m])])])
    arrays = inputs_for(graph, 3)
    copies = [a.copy() for a in arrays]
    expected = reference(graph, arrays)
    plan = hw.graph.partition(graph, devices=[where], passes=False, min_subgraph=10 ** 6)
    # not add_3 over exp_1 (its views live on to maximum_8), nor mul_9 over maximum_8 (a graph output); maximum_8
    # writes over reshape_7, a view of exp_1 whose every alias is dead; the cpu's relu kernel takes no out=
    want = {"exp_1:0": "mul_0:0", "tanh_4:0": "add_3:0", "sub_6:0": "tanh_4:0", "maximum_8:0": "reshape_7:0"}
    assert plan.memory.inplace == (want if where == "cpu" else {**want, "relu_10:0": "mul_9:0"})
    tensors = [hw.to_tensor(a, device=where) for a in arrays]
    for _ in range(3):  # the step loop, then the generated function
        assert_same(plan.run(tensors), expected, graph)
    for t_, a_ in zip(tensors, copies):
        np.testing.assert_array_equal(t_.numpy(), a_)


@pytest.mark.parametrize("where", ACCELERATORS)
def test_a_fused_chain_runs_in_place(where):
    b = GraphBuilder()
    x, w, bias = b.input("x", (16, 32)), b.input("w", (32, 32)), b.input("bias", (32,))
    h = b.op("relu", [b.op("add", [b.op("matmul", [x, w]), bias])])
    graph = b.build(b.op("mul", [h, b.op("tanh", [h])]))
    plan = hw.graph.partition(graph, devices=[where], min_subgraph=10 ** 6)
    (fused,) = [n for n in plan.graph.nodes if n.op == "fused"]
    assert plan.memory.inplace == {fused.outputs[0]: "matmul_0:0"}
    arrays = inputs_for(graph, 4)
    for _ in range(3):
        assert_same(plan.run([hw.to_tensor(a, device=where) for a in arrays]), reference(graph, arrays), graph)


def test_a_plan_is_resolved_once_and_running_it_changes_nothing_in_it():
    """The memory plan's in-place writes are the steps' `out=`, and two runs leave every piece of the plan as built."""
    graph, x = chain(("exp", "tanh"))
    plan = hw.graph.partition(graph, devices=["cpu"], passes=False)
    assert len(plan.memory.inplace) == 11
    inplace = {st.outs[0] for st in plan.schedule.steps if st.into is not None}
    assert len(inplace) == 11 and plan.straight.source.count("out=") == 11
    assert all(isinstance(st.run, Run) for st in plan.schedule.steps)

    def data(p):
        return (copy.deepcopy(p.memory), dict(p.assignment), dict(p.how), list(p.subgraphs), p.schedule.steps,
                p.schedule.slots, dict(p.schedule.constants), p.schedule.inputs, p.schedule.outputs, p.straight,
                p.graph.to_json())
    before = data(plan)
    xs = inputs_for(graph)[0]
    for run in (executor.run, loop, executor.run):
        assert_same(run(plan, [xs]), reference(graph, [xs]), graph)
    assert data(plan) == before


def test_each_step_is_reported_to_the_profiler():
    graph = mlp()
    plan = hw.graph.partition(graph, devices=["cpu"], passes=False)
    arrays = inputs_for(graph)
    plan.run(arrays)
    with hw.profiler.profile() as prof:
        plan.run(arrays)
    steps = [e for e in prof.events if e.kind == "step"]
    assert [e.name for e in steps] == [n.name for n in plan.graph.nodes]
    assert all(e.device == "cpu:0" and e.seconds >= 0 for e in steps)
    assert {e.args["op"] for e in steps} == {n.op for n in graph.nodes}


@needs_opencl
def test_a_subgraph_step_is_one_event():
    graph = mlp()
    plan = hw.graph.partition(graph, devices=["opencl:0"], passes=False)
    plan.run(inputs_for(graph))
    with hw.profiler.profile() as prof:
        plan.run(inputs_for(graph))
    steps = [e for e in prof.events if e.kind == "step"]
    assert [(e.name, e.device, e.route) for e in steps] == [("subgraph_0", "opencl:0", "subgraph")]


# --- the program cache -------------------------------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import hwadapter as hw
    from hwadapter.graph import GraphBuilder
    from hwadapter.runtime.device import get
    backend = type(get("opencl:0").subgraph)
    calls = {"deserialize": 0}
    original = backend.deserialize
    def counting(self, data):
        calls["deserialize"] += 1
        return original(self, data)
    backend.deserialize = counting
    b = GraphBuilder()
    x, w = b.input("x", (8, 40)), b.input("w", (40, 70))
    g = b.build(b.op("relu", [b.op("matmul", [x, w])]))
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(g.values[n].shape).astype("float32") for n in g.inputs]
    out = hw.graph.partition(g, devices=["opencl:0"], passes=False).run(xs)[0].numpy()
    ok = bool(np.allclose(out, np.maximum(xs[0] @ xs[1], 0), atol=1e-4))
    print(json.dumps({"deserialize": calls["deserialize"], "ok": ok}))
""")


def child(cache_dir) -> dict:
    import json
    env = dict(os.environ, HWADAPTER_CACHE_DIR=str(cache_dir))
    proc = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def program_entries(cache_dir) -> list:
    return sorted((cache_dir / programs.NAMESPACE).glob("*/*.bin"))


@needs_opencl
def test_a_second_process_loads_the_compiled_subgraph(cache_dir):
    first = child(cache_dir)
    assert first == {"deserialize": 0, "ok": True}
    assert len(program_entries(cache_dir)) == 1
    second = child(cache_dir)
    assert second == {"deserialize": 1, "ok": True}
    assert len(program_entries(cache_dir)) == 1


@needs_opencl
def test_a_corrupted_entry_is_rebuilt(cache_dir):
    child(cache_dir)
    (entry,) = program_entries(cache_dir)
    data = bytearray(entry.read_bytes())
    data[-10] ^= 0xFF  # a flipped bit in the payload: the checksum refuses it
    entry.write_bytes(bytes(data))
    assert child(cache_dir) == {"deserialize": 0, "ok": True}  # compiled again
    assert child(cache_dir) == {"deserialize": 1, "ok": True}  # and stored again


@needs_opencl
def test_an_entry_that_fails_to_load_is_evicted_and_rebuilt(cache_dir, caplog):
    graph = mlp()
    dev = get("opencl:0")
    from hwadapter.graph.schedule import extract
    sub = extract(graph, [n.name for n in graph.nodes])
    from hwadapter.runtime import cache
    store = cache.default()
    store.put(programs.NAMESPACE, programs.key_parts(dev, sub), b"not an executable")
    exe = programs.compile_subgraph(dev, sub, store)
    arrays = inputs_for(graph)
    from hwadapter.plugin import DeviceArray
    outs = dict(zip(sub.outputs, (o.numpy() for o in exe.run([DeviceArray.from_numpy(dev, a) for a in arrays]))))
    for name, expected in zip(graph.outputs, reference(graph, arrays)):
        np.testing.assert_allclose(outs[name], expected, rtol=1e-5, atol=1e-5)
    assert store.get(programs.NAMESPACE, programs.key_parts(dev, sub)).startswith(b"HWADAPTER-EXECUTABLE")
    assert "failed to load" in caplog.text
    del outs, exe
    caplog.clear()  # the logged load error's traceback reaches get_or_load's frame, which holds the executable


@needs_opencl
def test_the_key_changes_with_shape_device_properties_and_plugin_version(monkeypatch):
    dev = get("opencl:0")
    graph = mlp()
    sub = graph.subgraph([n.name for n in graph.nodes])
    parts = programs.key_parts(dev, sub)
    b = GraphBuilder()
    x, w, bias = b.input("x", (4, 40)), b.input("w", (40, 70)), b.input("bias", (70,))
    h = b.op("relu", [b.op("add", [b.op("matmul", [x, w]), bias])])
    s = b.op("softmax", [h], axis=1)
    other = b.build([s, b.op("argmax", [s], axis=1, keepdim=False), h])
    assert programs.key_parts(dev, other.subgraph([n.name for n in other.nodes])) != parts
    record = type(dev.record)
    monkeypatch.setattr(record, "distribution", property(lambda self: ("hwadapter-opencl", "99.0")))
    assert programs.key_parts(dev, sub)["plugin"] == ["hwadapter-opencl", "99.0"] != parts["plugin"]
    assert parts["properties"]["name"]


# --- the picture -------------------------------------------------------------------------------------------------

def _plan_for_picture():
    devs = ["opencl:0", "cpu"] if HAVE_OPENCL else ["cpu"]
    return hw.graph.partition(mlp(), devices=devs, pin={"softmax": "cpu"}, passes=False)


def test_svg_without_graphviz_is_valid_xml_with_one_element_per_node(tmp_path, monkeypatch):
    monkeypatch.setattr(svg.shutil, "which", lambda name: None)
    plan = _plan_for_picture()
    path = plan.save_svg(tmp_path / "plan.svg")
    root = ET.parse(path).getroot()
    ns = "{http://www.w3.org/2000/svg}"
    nodes = [g for g in root.iter(f"{ns}g") if g.get("class") == "node"]
    assert sorted(g.get("id") for g in nodes) == sorted(f"node-{n.name}" for n in plan.graph.nodes)
    colours = svg.colours(plan)
    for g in nodes:
        name = g.get("id")[len("node-"):]
        shape = next(iter(g))
        assert shape.get("fill") == colours[plan.assignment[name]]
        assert g.get("data-device") == plan.assignment[name]
    assert len([g for g in root.iter(f"{ns}g") if g.get("class") == "subgraph"]) == len(plan.subgraphs)
    copies = [g for g in nodes if g.get("data-op") == "copy"]
    assert len(copies) == len(plan.copies) and all(next(iter(g)).tag == f"{ns}polygon" for g in copies)


def test_svg_through_graphviz(tmp_path, monkeypatch):
    plan = _plan_for_picture()
    dot = svg.to_dot(plan)
    statements = re.findall(r'^\s*"([^"]+)" \[label=', dot, re.M)
    assert sorted(statements) == sorted(n.name for n in plan.graph.nodes)
    assert dot.count("subgraph \"cluster_") == len(plan.subgraphs)
    if svg.shutil.which("dot") is None:  # no Graphviz here: a stand-in dot that echoes a marker
        fake = tmp_path / "dot"
        fake.write_text("#!/bin/sh\ncat > /dev/null\necho '<svg xmlns=\"http://www.w3.org/2000/svg\">"
                        "<g class=\"graph\"/></svg>'\n")
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        text = svg.render(plan)
        assert '<g class="graph"/>' in text
        return
    root = ET.parse(plan.save_svg(tmp_path / "plan.svg")).getroot()
    titles = [t.text for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "node"
              for t in g.iter("{http://www.w3.org/2000/svg}title")]
    assert sorted(t for t in titles if t in plan.assignment) == sorted(n.name for n in plan.graph.nodes)


@pytest.mark.parametrize("devs", MIXES[:2], ids=lambda d: "+".join(d))
def test_an_output_that_is_a_constant_or_an_input(devs):
    f32 = np.dtype("float32")
    values = {k: Value(k, (3,), f32) for k in ("x", "c", "y")}
    graph = Graph([Node("n", "relu", ("x",), ("y",), {})], values, ["x"], ["y", "c", "x"],
                  constants={"c": np.arange(3, dtype=f32)})
    x = np.array([-1, 2, 3], f32)
    plan = hw.graph.partition(graph, devices=devs)
    outs = plan.run([x], device=devs[0])
    assert {str(o.device) for o in outs} == {str(get(devs[0]))}
    for out, exp in zip(outs, [np.maximum(x, 0), np.arange(3, dtype=f32), x]):
        np.testing.assert_array_equal(out.numpy(), exp)


# --- the generated function (a warm run) and host chains for small fused nodes --------------------------------------
@settings(max_examples=12, deadline=None)
@given(graph=graphs(max_nodes=10), passes=st.booleans(), dev=st.sampled_from(["cpu"] + ACCELERATORS[:1]))
def test_the_generated_function_equals_the_step_loop_and_the_reference(graph, passes, dev):
    """The plan's generated function (every run) and the executor's step loop (profiled runs) agree with the
    reference executor."""
    arrays = inputs_for(graph, 3)
    plan = hw.graph.partition(graph, devices=[dev, "cpu"], passes=passes)
    expected = reference(graph, arrays)
    xs = [hw.to_tensor(a, device=dev) for a in arrays]
    assert plan.straight.source.startswith("def plan(staged):")
    assert_same(plan.run(xs), expected, graph)
    assert_same(loop(plan, xs), expected, graph)
    assert_same(plan.run(dict(zip(graph.inputs, arrays)), device="cpu"), expected, graph)


def test_a_step_failing_in_the_generated_function_is_named():
    graph = mlp()
    plan = hw.graph.partition(graph, devices=["cpu"], passes=False)
    arrays = inputs_for(graph)
    plan.run(arrays)

    def flaky(x):
        raise ZeroDivisionError("flaky kernel")
    bad = plan.replaced("relu_2", flaky)  # a segment holding it runs its steps one by one
    k = [st.name for st in bad.schedule.steps].index("relu_2")
    assert f"k{k}(" in bad.straight.source and bad.schedule.steps[k].call is flaky
    assert all(st.call is not flaky for st in plan.schedule.steps)  # the original plan is unchanged
    with pytest.raises(hw.errors.KernelExecutionError, match=r"'relu_2' \(op 'relu'\) failed on cpu.*flaky kernel"):
        bad.run(arrays)
    bad = plan.replaced("relu_2", lambda x: x[:4])  # a wrong shape, found by the generated function's check
    with pytest.raises(hw.errors.KernelExecutionError, match=r"relu_2.*\[4, 70\].*\[8, 70\]"):
        bad.run(arrays)
    assert_same(plan.run(arrays), reference(graph, arrays), graph)


def _chain(shape):
    b = GraphBuilder()
    x, bias = b.input("x", shape), b.input("bias", shape[-1:])
    h = b.op("relu", [b.op("add", [x, bias])])
    y = b.op("sum", [b.op("mul", [h, b.op("sigmoid", [h])])], axis=(1,), keepdim=True)
    return b.build([y, h])


@pytest.mark.parametrize("limit, route", [(1 << 20, "fused (numpy)"), (8, "fused")])
def test_a_small_fused_chain_on_cpu_runs_as_numpy_calls(monkeypatch, limit, route):
    from hwadapter.graph import hostchain
    if get("cpu").codegen is None:
        pytest.skip(f"no CPU codegen: every chain runs as numpy calls ({get('cpu').codegen_unavailable})")
    # outputs above the limit: the compiled program
    monkeypatch.setattr(hostchain, "NUMPY_UP_TO", dict.fromkeys(hostchain.NUMPY_UP_TO, limit))
    graph = _chain((3, 50))
    arrays = inputs_for(graph, 4)
    plan = hw.graph.partition(graph, devices=["cpu"])
    expected = reference(graph, arrays)
    assert_same(plan.run(arrays), expected, graph)
    assert_same(plan.run(arrays), expected, graph)  # the generated function: with route "fused (numpy)", inlined
    steps = [st for st in plan.schedule.steps if st.op == "fused"]
    assert steps and {st.label for st in steps} == {route}
    inlined = re.search(r"^    t\d+_\d+ = k\d+_\d+\(", plan.straight.source, re.M) is not None
    assert inlined == (route == "fused (numpy)")  # the chain's numpy calls are written out in the function


def test_the_decision_table_sends_chains_numpy_runs_slowly_to_the_compiled_program():
    """By default (hostchain.NUMPY_UP_TO) a small chain of vectorised numpy calls runs as numpy calls, the same chain
    with erf's series (gelu) compiled, and a large one compiled; each equal to the reference executor."""
    from hwadapter.graph import hostchain
    if get("cpu").codegen is None:
        pytest.skip(f"no CPU codegen: every chain runs as numpy calls ({get('cpu').codegen_unavailable})")
    small, large = (3, 50), (4, hostchain.NUMPY_UP_TO["vectorised"])
    cases = [(small, "sigmoid", "fused (numpy)"), (small, "gelu", "fused"), (large, "relu", "fused")]
    for shape, fn, route in cases:
        b = GraphBuilder()
        x, bias = b.input("x", shape), b.input("b", shape[1:])
        graph = b.build([b.op("mul", [b.op(fn, [b.op("add", [x, bias])]), x])])
        arrays = inputs_for(graph, 5)
        plan = hw.graph.partition(graph, devices=["cpu"])
        assert_same(plan.run(arrays), reference(graph, arrays), graph)
        assert {st.label for st in plan.schedule.steps if st.op == "fused"} == {route}, (shape, fn)


@needs_opencl
def test_a_step_whose_outputs_nobody_reads_is_generated_as_a_bare_call():
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    b.op("add", [x, x])  # dead (passes off, so no DCE): its subgraph has no outputs
    graph = b.build([b.op("relu", [x])])
    plan = hw.graph.partition(graph, devices=["opencl:0"], passes=False, min_subgraph=1, pin={"relu": "cpu"})
    assert [s.nodes for s in plan.subgraphs] == [("add_0",)]
    arrays = inputs_for(graph)
    for _ in range(3):  # the loop, then the generated function twice
        assert_same(plan.run(arrays), [np.maximum(arrays[0], 0)], graph)
    assert re.search(r"^    k\d+\(v\d+\)$", plan.straight.source, re.M)


def test_an_in_place_program_is_compiled_without_restrict():
    """An output written over an input aliases it: the program a step runs in place declares no buffer restrict."""
    from dataclasses import replace

    import hwadapter_kp as kp
    fused = kp.fuse((("exp", ("a",), "t", ()), ("add", ("t", "b"), "o", ())), ("a", "b"), ("o",), "inplace_probe")
    program = fused.specialize_for({"a": np.zeros((4, 8), np.float32), "b": np.zeros(8, np.float32)})
    for dialect in (kp.C, kp.OPENCL, kp.CUDA):
        plain, aliased = program.source(dialect), program.source(replace(dialect, restrict=False))
        assert "restrict" in plain and "restrict" not in aliased
        assert aliased.replace(" ", "") == plain.replace("__restrict__", "").replace("restrict", "").replace(" ", "")
    if HAVE_OPENCL:
        graph, _ = chain()
        plan = hw.graph.partition(graph, devices=["opencl:0"], passes=False, min_subgraph=10 ** 6)
        plan.run(inputs_for(graph))
        loaded = get("opencl:0").primitive("tanh")._loaded
        assert any(isinstance(k, tuple) and k[1] == "aliased" for k in loaded)  # the in-place steps' variant


@pytest.mark.parametrize("devices", [["cpu"], ["opencl:0", "cpu"]])
def test_a_split_into_one_piece_is_still_a_list_to_the_executor(devices):
    """split is multi-output even with one section: its kernel returns a one-item list (the ONNX importer makes these)."""
    from hwadapter.graph.builder import GraphBuilder
    from hwadapter.graph.reference import run as reference_run
    b = GraphBuilder()
    x = b.input("x", (4, 3))
    y = b.op("relu", [b.op("split", [x], n_outputs=1, sections=(4,), axis=0)])
    g = b.build([y])
    data = np.arange(-6, 6, dtype="float32").reshape(4, 3)
    got = hw.graph.partition(g, devices=devices).run([data])[0].numpy()
    np.testing.assert_array_equal(got, np.maximum(data, 0))
    np.testing.assert_array_equal(reference_run(g, {"x": data})[y].numpy(), np.maximum(data, 0))
