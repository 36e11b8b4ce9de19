"""The OpenCL plugin's subgraph level on hand-built graphs: claimed nodes, one compiled program per subgraph equal to
numpy, intermediates allocated once, and serialize / deserialize (JSON, no pickle) giving the same results, also in
a new process that compiles nothing. Skipped, saying why, without pyopencl or an OpenCL device.

On opencl:0, or the device HWADAPTER_TEST_OPENCL names (the plugin under another entry-point name: test_clone.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("pyopencl", reason="pyopencl is not installed: pip install -e plugins/opencl")

import hwadapter as hw  # noqa: E402
from hwadapter.graph import GraphBuilder, run  # noqa: E402
import graphgen  # noqa: E402
from hwadapter.conformance.graphs import mlp  # noqa: E402
from hwadapter.plugin import DeviceArray, pack_executable, unpack_executable  # noqa: E402
from hwadapter.runtime.device import get  # noqa: E402

DEV = os.environ.get("HWADAPTER_TEST_OPENCL", "opencl:0")

if not hw.device.is_available(DEV.partition(":")[0]):
    pytest.skip("no OpenCL device (install pocl-opencl-icd and pip install -e plugins/opencl)",
                allow_module_level=True)

RNG = np.random.default_rng(3)
FORMAT = "hwadapter-opencl-subgraph/2"


@pytest.fixture
def backend():
    dev = get(DEV)
    return dev.subgraph


def convnet():
    """The kit's fixed CNN graph, ending in an argmax."""
    return graphgen.convnet(argmax=True)


def inputs_for(graph):
    return [RNG.standard_normal(graph.values[n].shape).astype(graph.values[n].dtype) for n in graph.inputs]


def check(exe, graph, arrays):
    dev = get(DEV)
    outs = exe.run([DeviceArray.from_numpy(dev, a) for a in arrays])
    expected = run(graph, dict(zip(graph.inputs, arrays)), device="cpu")
    assert len(outs) == len(graph.outputs)
    for name, out in zip(graph.outputs, outs):
        assert out.shape == graph.values[name].shape and out.dtype == graph.values[name].dtype, name
        np.testing.assert_allclose(out.numpy(), expected[name].numpy(), rtol=1e-5, atol=1e-4, err_msg=name)
    return [o.numpy() for o in outs]


@pytest.mark.parametrize("build", [mlp, convnet])
def test_subgraph_claims_every_node_and_equals_numpy(backend, build):
    graph = build()
    assert backend.supported_nodes(graph) == {n.name for n in graph.nodes}
    exe = backend.compile(graph)
    check(exe, graph, inputs_for(graph))
    check(exe, graph, inputs_for(graph))  # runs again on the same intermediates


def test_intermediates_are_allocated_once(backend):
    graph = convnet()
    exe = backend.compile(graph)
    arrays = inputs_for(graph)
    check(exe, graph, arrays)
    alloc = get(DEV).allocator
    before = alloc.stats()["num_alloc_requests"]
    outs = exe.run([DeviceArray.from_numpy(get(DEV), a) for a in arrays])
    # per run: the inputs copied in above, and the two outputs; no intermediate, no im2col scratch
    assert alloc.stats()["num_alloc_requests"] - before == len(arrays) + len(outs)
    assert len(exe.memory) >= 4


def test_serialize_is_json_and_round_trips(backend):
    graph = mlp()
    exe = backend.compile(graph)
    arrays = inputs_for(graph)
    first = check(exe, graph, arrays)
    data = exe.serialize()
    target, back, binaries = unpack_executable(data, FORMAT, DEV)  # a JSON header and program binaries, no pickle
    assert back == graph and binaries and target == get(DEV).codegen.cache_key()
    assert json.loads(data.split(b"\n")[1])["format"] == FORMAT
    again = check(backend.deserialize(data), graph, arrays)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_a_new_process_runs_a_deserialised_subgraph_without_compiling(backend, tmp_path):
    graph = convnet()
    arrays = inputs_for(graph)
    (tmp_path / "exe.json").write_bytes(backend.compile(graph).serialize())
    np.savez(tmp_path / "inputs.npz", *arrays)
    expected = [o.numpy() for o in run(graph, dict(zip(graph.inputs, arrays)), device="cpu").values()]
    script = textwrap.dedent(f"""
        import numpy as np
        from hwadapter.plugin import DeviceArray
        from hwadapter.runtime.device import get
        dev = get({DEV!r})
        sb = dev.subgraph
        exe = sb.deserialize(open({str(tmp_path / "exe.json")!r}, "rb").read())
        data = np.load({str(tmp_path / "inputs.npz")!r})
        outs = exe.run([DeviceArray.from_numpy(dev, data[k]) for k in sorted(data.files)])
        np.savez({str(tmp_path / "outputs.npz")!r}, *[o.numpy() for o in outs])
        print(dev.runtime.builds)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "HWADAPTER_CACHE_DIR": str(tmp_path / "empty-cache")})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0"]  # every program came from the serialised binaries
    got = np.load(tmp_path / "outputs.npz")
    for i, exp in enumerate(expected):
        np.testing.assert_allclose(got[f"arr_{i}"], exp, rtol=1e-5, atol=1e-4)


def test_bad_input_and_damaged_data_are_clear_errors(backend):
    graph = mlp()
    exe = backend.compile(graph)
    dev = get(DEV)
    wrong = [DeviceArray.from_numpy(dev, np.zeros((9, 40), np.float32))] + \
        [DeviceArray.from_numpy(dev, a) for a in inputs_for(graph)[1:]]
    with pytest.raises(hw.InvalidArgumentError, match="'x' was compiled for"):
        exe.run(wrong)
    with pytest.raises(hw.InvalidArgumentError, match=f"{DEV}: cannot load a compiled subgraph"):
        backend.deserialize(b"\x80\x04pickle?")
    data = exe.serialize()
    with pytest.raises(hw.InvalidArgumentError, match="truncated or corrupted"):
        backend.deserialize(data[:-1] + bytes([data[-1] ^ 1]))
    _, graph, binaries = unpack_executable(data, FORMAT, DEV)
    elsewhere = pack_executable(FORMAT, {"device": "another"}, graph, binaries)
    with pytest.raises(hw.InvalidArgumentError, match="recompile"):
        backend.deserialize(elsewhere)


def fused_mlp():
    """mlp() after the fusion pass for this device: add + relu and the softmax's elementwise tail become "fused"
    nodes; returns (the unfused graph: the oracle, the fused one)."""
    from hwadapter.graph.passes import fuse
    b = GraphBuilder()
    x, w, bias = b.input("x", (8, 40)), b.input("w", (40, 70)), b.input("bias", (70,))
    h = b.op("relu", [b.op("add", [b.op("matmul", [x, w]), bias])])
    s = b.op("sum", [b.op("mul", [h, h])], axis=(1,), keepdim=False)
    graph = b.build([b.op("matmul", [h, b.input("w2", (70, 5))]), s])
    fused, _ = fuse(graph, {n.name: DEV for n in graph.nodes}, can_fuse=lambda device: True)
    return graph, fused


def check_against(exe, graph, oracle, arrays):
    """exe's outputs (graph's names) equal the reference executor's on cpu over the unfused `oracle`."""
    outs = exe.run([DeviceArray.from_numpy(get(DEV), a) for a in arrays])
    expected = run(oracle, dict(zip(oracle.inputs, arrays)), device="cpu")
    for name, out in zip(graph.outputs, outs):
        assert out.shape == oracle.values[name].shape and out.dtype == oracle.values[name].dtype, name
        np.testing.assert_allclose(out.numpy(), expected[name].numpy(), rtol=1e-5, atol=1e-4, err_msg=name)
    return [o.numpy() for o in outs]


def test_fused_nodes_are_claimed_compiled_and_equal_the_reference(backend):
    oracle, graph = fused_mlp()
    assert [n.op for n in graph.nodes] == ["matmul", "fused", "matmul"]
    assert backend.supported_nodes(graph) == {n.name for n in graph.nodes}
    exe = backend.compile(graph)
    assert [len(p.steps) for p in exe.plans] == [1, 1, 1]  # the fused node is one launch between the GEMMs
    arrays = inputs_for(graph)
    check_against(exe, graph, oracle, arrays)
    arrays[0] = -arrays[0]  # new values in a new input buffer: the patched kernel arguments follow
    check_against(exe, graph, oracle, arrays)


def test_a_subgraph_with_a_fused_node_round_trips(backend):
    oracle, graph = fused_mlp()
    exe = backend.compile(graph)
    arrays = inputs_for(graph)
    first = check_against(exe, graph, oracle, arrays)
    data = exe.serialize()
    _, back, binaries = unpack_executable(data, FORMAT, DEV)
    assert back == graph and len(binaries) == 2  # the GEMM's binary and the fused program's
    fused = next(n for n in back.nodes if n.op == "fused")
    assert fused.attrs == next(n for n in graph.nodes if n.op == "fused").attrs
    again = check_against(backend.deserialize(data), graph, oracle, arrays)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)


def test_the_partitioner_puts_a_fused_mlp_in_one_subgraph():
    oracle, _ = fused_mlp()
    plan = hw.graph.partition(oracle, devices=[DEV, "cpu"])
    assert [n.op for n in plan.graph.nodes].count("fused") == 1
    assert len(plan.subgraphs) == 1 and set(plan.subgraphs[0].nodes) == {n.name for n in plan.graph.nodes}
    arrays = inputs_for(oracle)
    got = plan.run([hw.to_tensor(a, device=DEV) for a in arrays])
    expected = run(oracle, dict(zip(oracle.inputs, arrays)), device="cpu")
    for name, out in zip(oracle.outputs, got):
        np.testing.assert_allclose(out.numpy(), expected[name].numpy(), rtol=1e-5, atol=1e-4, err_msg=name)


def conv_with(activation):
    b = GraphBuilder()
    x, w, bias = b.input("x", (2, 3, 9, 9)), b.input("w", (4, 3, 3, 3)), b.input("bias", (4,))
    y = b.op("conv2d", [x, w, bias], stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1,
             activation=activation)
    return b.build([b.op("max_pool2d", [y], kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0),
                         ceil_mode=False)])


@pytest.mark.parametrize("activation", ["relu", "sigmoid", "tanh", "gelu"])
def test_conv2d_with_an_activation_epilogue_is_claimed_and_applied(backend, activation):
    graph = conv_with(activation)
    assert backend.supported_nodes(graph) == {n.name for n in graph.nodes}
    check(backend.compile(graph), graph, inputs_for(graph))  # the CPU reference kernel applies it too


def test_conv2d_with_an_activation_the_gemm_lacks_is_not_claimed(backend):
    from dataclasses import replace
    graph = conv_with(None)
    conv = graph.nodes[0]
    graph.nodes[0] = replace(conv, attrs={**conv.attrs, "activation": "softplus"})  # no op set rule makes one
    assert backend.supported_nodes(graph) == {graph.nodes[1].name}


def test_intermediates_whose_lives_do_not_overlap_share_memory(backend):
    """A chain of 12 matmuls: each intermediate is dead once the next is computed, so the compiled subgraph holds
    two buffers for them, not eleven, and still computes the chain exactly as the CPU."""
    b = GraphBuilder()
    h = b.input("x", (64, 64))
    for i in range(12):
        h = b.op("relu", [b.op("matmul", [h, b.input(f"w{i}", (64, 64))])])
    graph = b.build([h])
    exe = backend.compile(graph)
    arrays = [(a * 0.2).astype(a.dtype) for a in inputs_for(graph)]
    check(exe, graph, arrays)
    held = {id(a) for a in exe.memory.values()}
    assert len(exe.memory) >= 11 and len(held) <= 3, (len(exe.memory), len(held))
    check(exe, graph, arrays)  # run again over the same shared buffers
