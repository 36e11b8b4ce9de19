"""Graph passes (hwadapter.graph.passes): each one computes what the unoptimised graph computes, run node by node on
the reference executor (numpy for the folded batch norm), on cpu and on opencl:0 where it is available."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hwadapter as hw
from hwadapter.dispatch.dispatcher import dispatch
from hwadapter.api.errors import InvalidArgumentError
from hwadapter.graph import GraphBuilder
from hwadapter.graph.reference import run as reference_run
from hwadapter.graph.reference import run_fused
from hwadapter.graph.passes import (PassReport, conv_epilogues, conv_residual, cse, dce, fold, fold_batch_norm,
                                    fold_pad, fuse, infer, linear_epilogues, optimize)
from hwadapter.api import reference
from hwadapter.tensor import to_tensor

folding = importlib.import_module("hwadapter.graph.passes.fold")  # the module (the package exports its fold pass)
DEVICES = ["cpu"] + (["opencl:0"] if hw.device.is_available("opencl") else [])
_rng = np.random.default_rng(9)


def rand(*shape, dtype="float32"):
    return _rng.standard_normal(shape).astype(dtype)


def with_constants(graph, arrays: dict):
    """`graph` with these inputs turned into constants (weights, as tracing captures them)."""
    graph.inputs = [i for i in graph.inputs if i not in arrays]
    graph.constants = {**graph.constants, **{k: np.asarray(v) for k, v in arrays.items()}}
    return graph


def execute(graph, inputs: dict, device: str) -> dict:
    """Node by node through dispatch, fused nodes through their own kernel: outputs by name as numpy arrays."""
    env = {k: to_tensor(v, device=device) for k, v in {**inputs, **graph.constants}.items()}
    for n in graph.nodes:
        ins = tuple(env[i] for i in n.inputs)
        out = run_fused(n, ins) if n.op == "fused" else dispatch(n.op, ins, n.attrs)
        env.update(zip(n.outputs, out if isinstance(out, tuple) else (out,)))
    return {o: env[o].numpy() for o in graph.outputs}


def oracle(graph, inputs: dict) -> dict:
    """The unoptimised graph on the reference executor, on cpu."""
    return {k: v.numpy() for k, v in reference_run(graph, inputs, "cpu").items()}


def assert_same(got: dict, want: dict, rtol=1e-4, atol=1e-5):
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].shape == want[k].shape and got[k].dtype == want[k].dtype, k
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=atol, err_msg=k)


def ops_of(graph) -> list:
    return [n.op for n in graph.nodes]


# --- infer -----------------------------------------------------------------------------------------------------
def test_infer_completes_missing_values_from_the_op_rules():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.op("sum", [b.op("exp", [x])], axis=(1,), keepdim=True)
    graph = b.build(y)
    want = graph.values[y]
    del graph.values[y]
    new, report = infer(graph)
    assert new.values[y] == want and "1 values completed" in report.note


def test_infer_names_the_node_whose_declared_output_disagrees():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.op("relu", [x])
    graph = b.build(y)
    graph.values[y] = type(graph.values[y])(y, (3, 2), np.dtype("float32"))
    with pytest.raises(InvalidArgumentError, match=r"node 'relu_0' \(relu\).*float32\[3, 2\].*float32\[2, 3\].*Fix:"):
        infer(graph)


def test_infer_names_the_node_that_cannot_take_its_inputs():
    b = GraphBuilder()
    x, w = b.input("x", (2, 3)), b.input("w", (3, 4))
    graph = b.build(b.op("matmul", [x, w]))
    graph.values["w"] = type(graph.values["w"])("w", (5, 4), np.dtype("float32"))
    with pytest.raises(InvalidArgumentError, match=r"node 'matmul_0' \(matmul\) cannot take its inputs"):
        infer(graph)


# --- fold, cse, dce --------------------------------------------------------------------------------------------
def constant_chain():
    b = GraphBuilder()
    x, a, c = b.input("x", (2, 3)), b.input("a", (3, 2)), b.input("c", (6,))
    at = b.op("transpose", [a], perm=(1, 0))           # constant: folds
    s = b.op("add", [at, b.op("reshape", [c], shape=(2, 3))])  # a chain of constants: folds through
    y = b.op("mul", [x, b.op("exp", [s])])
    graph = b.build([y, s])                            # a folded value that is an output stays one, by name
    return with_constants(graph, {"a": rand(3, 2), "c": rand(6)})


@pytest.mark.parametrize("dev", DEVICES)
def test_fold_turns_constant_chains_into_constants(dev):
    graph = constant_chain()
    inputs = {"x": rand(2, 3)}
    folded, report = fold(graph)
    assert ops_of(folded) == ["mul"] and report == PassReport("fold", 5, 1, "4 nodes folded into constants")
    assert "a" not in folded.constants and folded.outputs == graph.outputs
    assert_same(execute(folded, inputs, dev), oracle(graph, inputs))


def test_fold_leaves_a_result_much_larger_than_its_inputs_to_run():
    b = GraphBuilder()
    x, c = b.input("x", (512, 512)), b.input("c", ())
    graph = with_constants(b.build(b.op("add", [x, b.op("expand", [c], shape=(512, 512))])), {"c": np.float32(2)})
    assert ops_of(fold(graph)[0]) == ["expand", "add"]


def test_evaluate_is_the_one_folder_and_refuses_before_running_what_exceeds_its_limit(monkeypatch):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (t,) = folding.evaluate("transpose", {"perm": (1, 0)}, [x], expected=[((3, 2), np.float32)])
    np.testing.assert_array_equal(t, x.T)
    assert folding.evaluate("transpose", {"perm": (1, 0)}, [x], expected=[((2, 3), np.float32)]) is None
    assert folding.evaluate("transpose", {"perm": (1, 0)}, [x], expected=[((3, 2), np.float64)]) is None
    assert folding.evaluate("no_such_op", {}, [x]) is None              # a device-only op: left to run
    ran = []
    monkeypatch.setitem(folding.KERNELS, "expand", lambda *a, **k: ran.append(1) or reference.expand(*a, **k))
    big = [((1 << 12, 1 << 12), np.float32)]
    assert folding.evaluate("expand", {"shape": big[0][0]}, [np.float32(1)], big, limit=1 << 20) is None and not ran
    assert folding.evaluate("expand", {"shape": (4,)}, [np.float32(1)], [((4,), np.float32)], limit=64)[0].shape == (4,)
    assert ran == [1]


@pytest.mark.parametrize("dev", DEVICES)
def test_cse_merges_repeated_nodes_and_equal_constants(dev):
    b = GraphBuilder()
    x, w1, w2 = b.input("x", (2, 3)), b.input("w1", (3,)), b.input("w2", (3,))
    p, q = b.op("mul", [x, w1]), b.op("mul", [x, w2])  # equal once w1 and w2 are found equal
    r1, r2 = b.op("tanh", [p]), b.op("tanh", [q])
    graph = with_constants(b.build([b.op("sub", [r1, r2]), r2]), {"w1": np.ones(3, "f4"), "w2": np.ones(3, "f4")})
    merged, report = cse(graph)
    # the second tanh produces a graph output: it stays (outputs are named), the second mul goes
    assert ops_of(merged) == ["mul", "tanh", "tanh", "sub"] and report.nodes_after == 4
    assert len(merged.constants) == 1
    inputs = {"x": rand(2, 3)}
    assert_same(execute(merged, inputs, dev), oracle(graph, inputs))


@pytest.mark.parametrize("dev", DEVICES)
def test_dce_drops_what_no_output_needs(dev):
    b = GraphBuilder()
    x, w = b.input("x", (2, 3)), b.input("w", (3,))
    dead = b.op("exp", [b.op("mul", [x, w])])
    y = b.op("relu", [x])
    b.op("neg", [dead])
    graph = with_constants(b.build(y), {"w": rand(3)})
    pruned, report = dce(graph)
    assert ops_of(pruned) == ["relu"] and (report.nodes_before, report.nodes_after) == (4, 1)
    assert pruned.inputs == ["x"] and not pruned.constants and set(pruned.values) == {"x", y}
    inputs = {"x": rand(2, 3)}
    assert_same(execute(pruned, inputs, dev), oracle(graph, inputs))


# --- fold_batch_norm -------------------------------------------------------------------------------------------
def conv_bn(bias: bool, groups=1, dtype="float32"):
    b = GraphBuilder()
    x = b.input("x", (2, 4, 7, 7), dtype)
    names = ["w"] + (["b"] if bias else [])
    ins = [x, b.input("w", (6, 4 // groups, 3, 3), dtype)] + ([b.input("b", (6,), dtype)] if bias else [])
    y = b.op("conv2d", ins, stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=groups)
    stats = [b.input(n, (6,), dtype) for n in ("mean", "var", "scale", "shift")]
    out = b.op("batch_norm", [y] + stats, epsilon=1e-3, channel_axis=1)
    arrays = {"w": rand(6, 4 // groups, 3, 3, dtype=dtype), "mean": rand(6, dtype=dtype),
              "var": (np.abs(rand(6)) + 0.5).astype(dtype), "scale": rand(6, dtype=dtype),
              "shift": rand(6, dtype=dtype)}
    if bias:
        arrays["b"] = rand(6, dtype=dtype)
    return with_constants(b.build(out), {k: arrays[k] for k in names + ["mean", "var", "scale", "shift"]}), arrays


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("bias,groups", [(True, 1), (False, 1), (True, 2)])
def test_batch_norm_folds_into_the_convolution_as_numpy_computes_it(dev, bias, groups):
    graph, p = conv_bn(bias, groups)
    folded, report = fold_batch_norm(graph)
    assert ops_of(folded) == ["conv2d"] and report.nodes_after == 1 and folded.outputs == graph.outputs
    assert set(folded.constants) == {"conv2d_0.bn_weight", "conv2d_0.bn_bias"}
    x = rand(2, 4, 7, 7)
    conv = reference.conv2d(x, p["w"], p.get("b"), padding=(1, 1, 1, 1), groups=groups).astype(np.float64)
    c = (slice(None), None, None)
    want = (conv - p["mean"][c]) / np.sqrt(p["var"][c] + 1e-3) * p["scale"][c] + p["shift"][c]  # numpy's batch norm
    got = execute(folded, {"x": x}, dev)[graph.outputs[0]]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_batch_norm_stays_when_its_statistics_are_inputs_or_the_conv_output_is_read_elsewhere():
    graph, _ = conv_bn(True)
    graph.inputs.append("var")
    del graph.constants["var"]
    assert ops_of(fold_batch_norm(graph)[0]) == ["conv2d", "batch_norm"]
    graph, _ = conv_bn(True)
    graph.outputs.append("conv2d_0:0")
    assert ops_of(fold_batch_norm(graph)[0]) == ["conv2d", "batch_norm"]


def conv_scale_shift(scale_shape, shift_shape, scale_first=True, dtype="float32"):
    """conv2d -> batch_norm -> mul by a constant -> add of a constant (Caffe's Scale after BatchNorm, as Inception-v2's
    export writes it), the constants' shapes given; the constant is mul's first operand when not `scale_first`."""
    graph, arrays = conv_bn(True, dtype=dtype)
    b = GraphBuilder()
    x = b.input("x", (2, 4, 7, 7), dtype)
    y = b.op("conv2d", [x] + [b.input(n, arrays[n].shape, dtype) for n in ("w", "b")], stride=(1, 1),
             padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    y = b.op("batch_norm", [y] + [b.input(n, (6,), dtype) for n in ("mean", "var", "scale", "shift")], epsilon=1e-3,
             channel_axis=1)
    k = b.input("k", scale_shape, dtype)
    y = b.op("mul", [y, k] if scale_first else [k, y])
    out = b.op("add", [y, b.input("c", shift_shape, dtype)])
    arrays["k"], arrays["c"] = rand(*scale_shape, dtype=dtype), rand(*shift_shape, dtype=dtype)
    return with_constants(b.build(out), dict(arrays)), arrays


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("scale_shape,shift_shape,scale_first", [((6, 1, 1), (6, 1, 1), True),
                                                                 ((1, 6, 1, 1), (), False), ((), (1, 1, 1), True)])
def test_a_per_channel_scale_and_shift_after_a_batch_norm_fold_into_the_convolution(dev, scale_shape, shift_shape,
                                                                                    scale_first):
    graph, p = conv_scale_shift(scale_shape, shift_shape, scale_first)
    folded, report = fold_batch_norm(graph)
    assert ops_of(folded) == ["conv2d"] and folded.outputs == graph.outputs
    assert "1 batch_norms and 2 per-channel scales or shifts" in report.note
    x = rand(2, 4, 7, 7)
    conv = reference.conv2d(x, p["w"], p["b"], padding=(1, 1, 1, 1)).astype(np.float64)
    c = (slice(None), None, None)
    bn = (conv - p["mean"][c]) / np.sqrt(p["var"][c] + 1e-3) * p["scale"][c] + p["shift"][c]
    want = bn * p["k"].astype(np.float64) + p["c"].astype(np.float64)  # numpy's broadcasting
    np.testing.assert_allclose(execute(folded, {"x": x}, dev)[graph.outputs[0]], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["spatial", "batch", "other dtype", "read twice"])
def test_a_scale_that_is_not_per_channel_or_not_the_convolutions_alone_stays(case):
    """What would change the result or lose a value if folded: a constant varying along the image or the batch, one
    whose dtype would promote, a conv output read elsewhere."""
    shapes = {"spatial": (6, 7, 1), "batch": (2, 1, 1, 1)}
    graph, _ = conv_scale_shift(shapes.get(case, (6, 1, 1)), (6, 1, 1))
    if case == "other dtype":
        graph.constants["k"] = graph.constants["k"].astype("float64")
    if case == "read twice":
        graph.outputs.append(graph.nodes[1].outputs[0])
    assert "mul" in ops_of(fold_batch_norm(graph)[0])


# --- fold_pad --------------------------------------------------------------------------------------------------
def pad_conv(pads, value=0.0, mode="constant", padding=(1, 0, 1, 0), read_twice=False):
    b = GraphBuilder()
    x = b.input("x", (2, 3, 9, 8))
    p = b.op("pad", [x], pads=pads, mode=mode, value=value)
    y = b.op("conv2d", [p, b.input("w", (4, 3, 3, 3))], stride=(2, 2), padding=padding, dilation=(1, 1), groups=1)
    outs = [y, b.op("relu", [p])] if read_twice else [y]
    return with_constants(b.build(outs), {"w": rand(4, 3, 3, 3)})


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("pads", [((0, 0), (0, 0), (0, 1), (0, 1)), ((0, 0), (0, 0), (2, 1), (3, 0))])
def test_a_zero_pad_folds_into_the_convolutions_padding(dev, pads):
    graph = pad_conv(pads)
    folded, report = fold_pad(graph)
    assert ops_of(folded) == ["conv2d"] and report.nodes_after == 1 and folded.outputs == graph.outputs
    (pt, pb), (pl, pr) = pads[2], pads[3]
    assert folded.nodes[0].attrs["padding"] == (1 + pt, pb, 1 + pl, pr)
    x = rand(2, 3, 9, 8)
    x[0, 0, 0, 0] = np.nan  # it reaches the same outputs either way
    assert_same(execute(folded, {"x": x}, dev), oracle(graph, {"x": x}))


@pytest.mark.parametrize("kw", [dict(value=1.0), dict(value=-0.0), dict(mode="reflect"), dict(read_twice=True),
                                dict(pads=((0, 0), (1, 0), (1, 1), (1, 1)))])
def test_a_pad_that_is_not_zero_padding_of_the_image_stays(kw):
    pads = kw.pop("pads", ((0, 0), (0, 0), (1, 1), (1, 1)))
    graph = pad_conv(pads, **kw)
    assert "pad" in ops_of(fold_pad(graph)[0])


# --- optimize and its switches ---------------------------------------------------------------------------------
def test_optimize_runs_every_pass_in_order_and_each_can_be_switched_off():
    graph = constant_chain()
    _, reports = optimize(graph)
    assert [r.name for r in reports] == ["infer", "fold", "cse", "dce", "fold_batch_norm", "fold_pad"]
    off, reports = optimize(graph, disable={"fold"})
    assert reports[1] == PassReport("fold", 5, 5, "disabled") and len(off.nodes) == 5
    bn, _ = conv_bn(True)
    assert ops_of(optimize(bn)[0]) == ["conv2d"]
    assert ops_of(optimize(bn, disable={"fold_batch_norm"})[0]) == ["conv2d", "batch_norm"]
    with pytest.raises(InvalidArgumentError, match="unknown passes.*'folding'"):
        optimize(graph, disable={"folding"})


# --- fuse: elementwise chains ----------------------------------------------------------------------------------
#: these tests are about chains: the matmul's bias and GELU stay separate nodes (linear_epilogue's tests are below)
CHAINS_ONLY = frozenset({"linear_epilogue"})


def mlp_block():
    b = GraphBuilder()
    x, w, bias = b.input("x", (4, 8)), b.input("w", (8, 5)), b.input("b", (5,))
    h = b.op("add", [b.op("matmul", [x, w]), bias])
    g = b.op("gelu", [h], approximate=False)
    s = b.op("sum", [b.op("mul", [g, g])], axis=(1,), keepdim=False)
    return b.build([s, g]), {"x": rand(4, 8), "w": rand(8, 5), "b": rand(5)}


@pytest.mark.parametrize("dev", DEVICES)
def test_an_elementwise_chain_with_a_trailing_reduction_runs_as_one_fused_node(dev):
    graph, inputs = mlp_block()
    fused, where = fuse(graph, {n.name: dev for n in graph.nodes}, lambda d: True, disable=CHAINS_ONLY)
    assert ops_of(fused) == ["matmul", "fused"]
    node = fused.nodes[1]
    assert node.outputs == ("gelu_2:0", "sum_4:0") and where[node.name] == dev  # gelu is read outside: an output
    assert len(node.attrs["nodes"]) == 4 and node.attrs["name"].startswith("fused_")
    assert_same(execute(fused, inputs, dev), oracle(graph, inputs))
    assert infer(fused)[0].values == fused.values  # the "fused" op's rule agrees with what the chain declared


@pytest.mark.parametrize("dev", DEVICES)
def test_a_fused_node_is_one_compiled_kernel_on_a_device_with_a_codegen_backend(dev):
    from hwadapter.runtime.fused import FusedKernel, fused_kernel
    from hwadapter.runtime.device import devices
    graph, inputs = mlp_block()
    fused, _ = fuse(graph, {n.name: dev for n in graph.nodes}, lambda d: True, disable=CHAINS_ONLY)
    node, device = fused.nodes[1], devices.get(dev)
    kernel = fused_kernel(device, node.attrs)
    assert isinstance(kernel, FusedKernel) == (device.codegen is not None)
    assert dev == "cpu" or device.codegen is not None  # opencl:0 compiles it
    h = rand(4, 5)
    outs = kernel(*(to_tensor(a, device=dev)._data for a in (h, inputs["b"])))
    g = reference.gelu(h + inputs["b"])
    np.testing.assert_allclose(outs[0].numpy() if dev != "cpu" else outs[0], g, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(outs[1].numpy() if dev != "cpu" else outs[1], (g * g).sum(axis=1), rtol=1e-5)


def test_a_fused_node_is_interpreted_on_a_host_device_without_codegen():
    import types
    from hwadapter.runtime.fused import fused_kernel
    graph, inputs = mlp_block()
    fused, _ = fuse(graph, {n.name: "cpu" for n in graph.nodes}, lambda d: True, disable=CHAINS_ONLY)
    from hwadapter.runtime.signature import BoundedCache
    host = types.SimpleNamespace(codegen=None, host_memory=True, codegen_unavailable="no compiler",
                                 fused=BoundedCache(8))
    h = rand(4, 5)
    g, s = fused_kernel(host, fused.nodes[1].attrs)(h, inputs["b"])
    np.testing.assert_allclose(g, reference.gelu(h + inputs["b"]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(s, (g * g).sum(axis=1), rtol=1e-5)
    device = types.SimpleNamespace(codegen=None, host_memory=False, codegen_unavailable="no compiler",
                                   fused=BoundedCache(8))
    with pytest.raises(InvalidArgumentError, match="no codegen backend .no compiler.*Fix:"):
        fused_kernel(device, fused.nodes[1].attrs)


def test_fusion_never_crosses_devices_and_respects_can_fuse():
    graph, _ = mlp_block()
    names = [n.name for n in graph.nodes]
    split = {n: ("cpu" if k < 3 else "opencl:0") for k, n in enumerate(names)}  # add, gelu on cpu; mul, sum not
    fused, where = fuse(graph, split, lambda d: True, disable=CHAINS_ONLY)
    assert ops_of(fused) == ["matmul", "fused", "fused"]
    assert sorted(where[n.name] for n in fused.nodes if n.op == "fused") == ["cpu", "opencl:0"]
    assert ops_of(fuse(graph, split, lambda d: d == "opencl:0", disable=CHAINS_ONLY)[0]) == ["matmul", "add", "gelu", "fused"]
    assert ops_of(fuse(graph, split, lambda d: True, disable={"fuse"})[0]) == ops_of(graph)


@pytest.mark.parametrize("dev", DEVICES)
def test_an_intermediate_narrower_than_the_chain_is_not_fused_into_a_wrong_shape(dev):
    b = GraphBuilder()
    x, v = b.input("x", (2, 3)), b.input("v", (3,))
    e = b.op("exp", [v])                 # (3,), read outside the chain
    y = b.op("mul", [x, e])              # (2, 3)
    graph = b.build([b.op("tanh", [y]), e])
    fused, _ = fuse(graph, {n.name: dev for n in graph.nodes}, lambda d: True)
    inputs = {"x": rand(2, 3), "v": rand(3)}
    assert_same(execute(fused, inputs, dev), oracle(graph, inputs))


# --- fuse: linear layers (matmul + bias + activation) ----------------------------------------------------------
def linear(act: str | None, bias=True, form="op", rows=(2, 6, 8), n=12):
    """x @ W (+ b) then an activation written as `form`: "op" (one activation op), "torch" (GELU as torch exports it:
    (y * (erf(y / sqrt 2) + 1)) * 0.5), "hf" (0.5 * y first, and y * 1 / sqrt 2)."""
    b = GraphBuilder()
    x, w = b.input("x", rows), b.input("w", (rows[-1], n))
    y = b.op("matmul", [x, w])
    if bias:
        y = b.op("add", [y, b.input("b", (n,))])
    consts = {"w": rand(rows[-1], n), **({"b": rand(n)} if bias else {})}
    if act is not None and form == "op":
        y = b.op(act, [y])
    elif act == "gelu":
        for name, value in (("half", 0.5), ("one", 1.0), ("root", 2 ** 0.5), ("inv", 2 ** -0.5)):
            b.input(name, ())
            consts[name] = np.float32(value)
        scaled = b.op("div", [y, "root"]) if form == "torch" else b.op("mul", [y, "inv"])
        a = b.op("add", [b.op("erf", [scaled]), "one"])
        y = b.op("mul", [b.op("mul", [y, a]), "half"]) if form == "torch" else \
            b.op("mul", [b.op("mul", ["half", y]), a])
    return with_constants(b.build(y), consts)


@pytest.mark.parametrize("act,bias,form", [("gelu", True, "op"), ("gelu", True, "torch"), ("gelu", True, "hf"),
                                           ("relu", True, "op"), (None, True, "op"), ("tanh", False, "op"),
                                           ("gelu", False, "torch")])
def test_a_linear_layer_becomes_one_matmul_with_its_bias_and_activation(act, bias, form):
    """On a device whose matmul declares every activation (as the reference kernel does), each form folds."""
    graph = linear(act, bias, form)
    reports = []
    fused, where = fuse(graph, {n.name: "cpu" for n in graph.nodes}, lambda d: True, reports=reports,
                        linear=lambda dev, dtypes: reference.CONV_ACTIVATIONS)
    assert ops_of(fused) == ["matmul"] and fused.outputs == graph.outputs
    node = fused.nodes[0]
    assert len(node.inputs) == 2 + bias and node.attrs.get("activation") == act
    assert "1 biases and activations folded into matmul" in [r.note for r in reports if r.name == "linear_epilogue"]
    inputs = {"x": rand(2, 6, 8)}
    assert_same(execute(fused, inputs, "cpu"), oracle(graph, inputs), rtol=1e-5, atol=1e-5)
    assert infer(fused)[0].values[fused.outputs[0]] == graph.values[graph.outputs[0]]


@pytest.mark.parametrize("case", ["bias is a matrix", "output read twice", "erf chain read outside", "other device",
                                  "not declared", "wrong constant"])
def test_what_would_change_the_result_stays_unfused(case):
    graph = linear("gelu", True, "torch")
    where, linear_kinds = {n.name: "cpu" for n in graph.nodes}, None
    if case == "bias is a matrix":  # a broadcast add of a (6, 12) tensor is no per-column bias
        graph.values["b"] = type(graph.values["b"])("b", (6, 12), np.dtype("f4"))
        graph.constants["b"] = rand(6, 12)
    elif case == "output read twice":
        graph.outputs.append(graph.nodes[0].outputs[0])
    elif case == "erf chain read outside":
        graph.outputs.append(next(n for n in graph.nodes if n.op == "erf").outputs[0])
    elif case == "other device":
        where[graph.nodes[0].name] = "opencl:0"
    elif case == "not declared":
        linear_kinds = lambda dev, dtypes: frozenset()  # noqa: E731 - a device whose matmul declares none
    elif case == "wrong constant":
        graph.constants["half"] = np.float32(0.25)
    kwargs = {"linear": linear_kinds or (lambda dev, dtypes: reference.CONV_ACTIVATIONS)}
    fused, _ = fuse(graph, where, lambda d: False, **kwargs)
    if case == "bias is a matrix":  # nor is the GELU after it folded alone: the add stays between them
        assert ops_of(fused)[0] == "matmul" and len(fused.nodes[0].inputs) == 2 and "add" in ops_of(fused)
    elif case in ("erf chain read outside", "wrong constant"):  # the bias still folds; the activation does not
        assert fused.nodes[0].op == "matmul" and len(fused.nodes[0].inputs) == 3 and "erf" in ops_of(fused)
        assert fused.nodes[0].attrs.get("activation") is None
    else:
        assert ops_of(fused)[:2] == ["matmul", "add"] and len(fused.nodes[0].inputs) == 2
    inputs = {"x": rand(2, 6, 8)}
    if case != "other device":
        assert_same(execute(fused, inputs, "cpu"), oracle(graph, inputs), rtol=1e-5, atol=1e-5)


def test_the_cpus_matmul_takes_only_the_activations_it_applies_bit_for_bit():
    """The CPU's tuned matmul declares ReLU and ReLU6 (its C sigmoid, tanh and GELU are a few ulp from numpy's): a
    GELU after a linear layer stays unfused there, its bias still folds, and the result is the unfused graph's."""
    kinds = linear_epilogues("cpu")
    assert {"relu", "relu6"} <= kinds
    graph = linear("gelu", True, "op")
    fused, _ = fuse(graph, {n.name: "cpu" for n in graph.nodes}, lambda d: False)
    if "gelu" not in kinds:
        assert ops_of(fused) == ["matmul", "gelu"] and len(fused.nodes[0].inputs) == 3
    inputs = {"x": rand(2, 6, 8)}
    np.testing.assert_array_equal(execute(fused, inputs, "cpu")[graph.outputs[0]],
                                  execute(graph, inputs, "cpu")[graph.outputs[0]])


def test_a_fused_linear_layer_has_no_gradient_and_says_so():
    import hwadapter.autograd.rules_nn as rules
    node = type("N", (), {"attrs": {"activation": "gelu"}, "inputs": (None, None, None), "needs": (True, True, True)})
    with pytest.raises(InvalidArgumentError, match="matmul with a fused bias or activation.*Fix"):
        rules._matmul(node, None)


# --- fuse: conv2d epilogues ------------------------------------------------------------------------------------
@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("act", ["relu", "sigmoid", "tanh", "gelu"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv2d_with_an_activation_epilogue_is_conv_then_activation(dev, act, dtype):
    x, w, b = (to_tensor(a, device=dev) for a in (rand(2, 3, 6, 6, dtype=dtype), rand(4, 3, 3, 3, dtype=dtype),
                                                   rand(4, dtype=dtype)))
    attrs = dict(stride=(1, 1), padding=(1, 0, 1, 0), dilation=(1, 1), groups=1)
    got = dispatch("conv2d", (x, w, b), {**attrs, "activation": act}).numpy()
    want = dispatch(act, (dispatch("conv2d", (x, w, b), attrs),), {}).numpy()
    tol = 2e-3 if dtype == "float16" else 1e-5
    np.testing.assert_allclose(got.astype("f8"), want.astype("f8"), rtol=tol, atol=tol)
    assert act in conv_epilogues(dev, (dtype, dtype, dtype))


@pytest.mark.parametrize("dev", DEVICES)
def test_conv_bn_relu_becomes_one_conv2d_with_an_epilogue(dev):
    graph, _ = conv_bn(True)
    b_out = graph.outputs[0]
    graph.nodes.append(type(graph.nodes[0])("relu_9", "relu", (b_out,), ("relu_9:0",), {}))
    graph.values["relu_9:0"] = type(graph.values[b_out])("relu_9:0", graph.values[b_out].shape, np.dtype("f4"))
    graph.outputs = ["relu_9:0"]  # the same graph with a relu after the batch norm
    opt, _ = optimize(graph)
    fused, _ = fuse(opt, {n.name: dev for n in opt.nodes}, lambda d: True)
    assert ops_of(fused) == ["conv2d"] and fused.nodes[0].attrs["activation"] == "relu"
    inputs = {"x": rand(2, 4, 7, 7)}
    assert_same(execute(fused, inputs, dev), oracle(graph, inputs), rtol=1e-4, atol=1e-4)


def test_no_epilogue_where_the_device_conv_does_not_declare_it():
    graph, _ = conv_bn(True)
    opt, _ = optimize(graph)
    opt.nodes.append(type(opt.nodes[0])("sig", "sigmoid", (opt.outputs[0],), ("sig:0",), {}))
    opt.values["sig:0"] = type(opt.values[opt.outputs[0]])("sig:0", opt.values[opt.outputs[0]].shape, np.dtype("f4"))
    opt.outputs = ["sig:0"]
    where = {n.name: "cpu" for n in opt.nodes}
    assert ops_of(fuse(opt, where, lambda d: False, epilogues=lambda d, t: frozenset({"relu"}))[0]) == \
        ["conv2d", "sigmoid"]
    assert ops_of(fuse(opt, {**where, "sig": "opencl:0"}, lambda d: False)[0]) == ["conv2d", "sigmoid"]
    assert ops_of(fuse(opt, where, lambda d: False)[0]) == ["conv2d"]


def conv_then(tail: str, extra_reader=False):
    """conv2d(x) + bias, then `tail`: "relu6" (clip to [0, 6]), "clip" (to [0, 5]: no epilogue), "silu" (its sigmoid
    and mul, the conv's output read by both, as torch exports SiLU); extra_reader: the conv's output is also an
    output (nothing may fold)."""
    b = GraphBuilder()
    x = b.input("x", (2, 4, 9, 9))
    y = b.op("conv2d", [x, b.input("w", (6, 4, 3, 3)), b.input("b", (6,))], stride=(1, 1), padding=(1, 1, 1, 1),
             dilation=(1, 1), groups=1)
    if tail == "silu":
        out = b.op("mul", [b.op("sigmoid", [y]), y])
    else:
        out = b.op("clip", [y], min=0.0, max=6.0 if tail == "relu6" else 5.0)
    graph = b.build([out, y] if extra_reader else out)
    return with_constants(graph, {"w": rand(6, 4, 3, 3), "b": rand(6)})


@pytest.mark.parametrize("tail", ["relu6", "silu"])
def test_relu6_and_silu_fold_into_the_cpu_conv2d_and_give_the_unfused_result(tail):
    graph = conv_then(tail)
    fused, where = fuse(graph, {n.name: "cpu" for n in graph.nodes}, lambda d: False)
    assert ops_of(fused) == ["conv2d"] and fused.nodes[0].attrs["activation"] == tail
    assert set(where) == {n.name for n in fused.nodes}
    assert set(fused.values) == {v for n in fused.nodes for v in (*n.inputs, *n.outputs)}  # the sigmoid's is gone
    inputs = {"x": 4 * rand(2, 4, 9, 9)}  # values past 6 and below 0: both of relu6's bounds are met
    assert_same(execute(fused, inputs, "cpu"), oracle(graph, inputs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", ["clip to 5", "read twice", "other device", "not declared"])
def test_a_clip_or_silu_stays_unfused_where_it_is_not_exactly_the_epilogue(case):
    graph = conv_then("relu6" if case != "clip to 5" else "clip", extra_reader=case == "read twice")
    where = {n.name: "cpu" for n in graph.nodes}
    kw = {}
    if case == "other device":
        where[next(n.name for n in graph.nodes if n.op == "clip")] = "opencl:0"
    if case == "not declared":
        kw["epilogues"] = lambda d, t: frozenset({"relu"})
    assert "clip" in ops_of(fuse(graph, where, lambda d: False, **kw)[0])
    silu = conv_then("silu", extra_reader=True)  # the conv's output read a third time: no SiLU epilogue
    assert ops_of(fuse(silu, {n.name: "cpu" for n in silu.nodes}, lambda d: False)[0]) == \
        ["conv2d", "sigmoid", "mul"]


@pytest.mark.parametrize("act", ["relu6", "silu"])
def test_the_cpu_conv2d_applies_relu6_and_silu_as_the_unfused_ops_do(act):
    x, w, b = rand(2, 3, 8, 8) * 4, rand(5, 3, 3, 3), rand(5)
    attrs = dict(stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    got = dispatch("conv2d", tuple(to_tensor(a) for a in (x, w, b)), {**attrs, "activation": act}).numpy()
    y = reference.conv2d(x.astype("f8"), w.astype("f8"), b.astype("f8"), **attrs).astype("f4")
    want = np.clip(y, 0, 6) if act == "relu6" else y * reference.sigmoid(y)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert act in conv_epilogues("cpu")


# --- fuse: residual adds into conv2d --------------------------------------------------------------------------
def residual_block(bias=True, shortcut_shape=(2, 6, 7, 7), relu=True, swap=False):
    """conv2d(x) + shortcut (then relu), ResNet's block end; the shortcut is computed after the conv."""
    b = GraphBuilder()
    x, s = b.input("x", (2, 4, 7, 7)), b.input("s", shortcut_shape)
    ins = [x, b.input("w", (6, 4, 3, 3))] + ([b.input("b", (6,))] if bias else [])
    y = b.op("conv2d", ins, stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1)
    t = b.op("tanh", [s])
    out = b.op("add", [t, y] if swap else [y, t])
    graph = b.build(b.op("relu", [out]) if relu else out)
    return with_constants(graph, {"w": rand(6, 4, 3, 3), **({"b": rand(6)} if bias else {})})


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("swap", [False, True])
def test_a_residual_add_and_relu_fold_into_the_conv_where_its_kernel_takes_them(dev, swap):
    graph = residual_block(swap=swap)
    where = {n.name: dev for n in graph.nodes}
    reports = []
    fused, assignment = fuse(graph, where, lambda d: False, reports=reports)
    inputs = {"x": rand(2, 4, 7, 7), "s": rand(2, 6, 7, 7)}
    assert_same(execute(fused, inputs, dev), oracle(graph, inputs), rtol=1e-4, atol=1e-4)
    if conv_residual(dev):  # the CPU's conv2d declares it; a device whose kernel does not keeps the add
        conv = next(n for n in fused.nodes if n.op == "conv2d")
        assert ops_of(fused) == ["tanh", "conv2d"] and len(conv.inputs) == 4
        assert conv.attrs["activation"] == "relu" and set(assignment) == {n.name for n in fused.nodes}
        assert reports[0].name == "conv_residual" and "1 residual adds" in reports[0].note
    else:
        assert "add" in ops_of(fused)


@pytest.mark.parametrize("case", ["no bias", "broadcast", "read twice", "other device", "disabled", "not declared"])
def test_a_residual_add_stays_an_add_where_it_is_not_exactly_out_plus_residual(case):
    graph = residual_block(bias=case != "no bias", shortcut_shape=(6, 1, 1) if case == "broadcast" else (2, 6, 7, 7),
                           relu=False)
    where = {n.name: "cpu" for n in graph.nodes}
    kw = {}
    if case == "read twice":  # the conv's own output is also a graph output
        graph.outputs = graph.outputs + [next(n for n in graph.nodes if n.op == "conv2d").outputs[0]]
    if case == "other device":
        where[next(n.name for n in graph.nodes if n.op == "add")] = "opencl:0"
    if case == "disabled":
        kw["disable"] = {"conv_residual"}
    if case == "not declared":
        kw["residual"] = lambda d, t: False
    fused, _ = fuse(graph, where, lambda d: False, **kw)
    assert "add" in ops_of(fused)


def test_the_reference_and_cpu_conv2d_add_the_residual_before_the_activation():
    x, w, b, r = rand(1, 3, 5, 5), rand(4, 3, 3, 3), rand(4), rand(1, 4, 3, 3)
    want = np.maximum(reference.conv2d(x, w, b) + r, 0)
    np.testing.assert_allclose(reference.conv2d(x, w, b, r, activation="relu"), want, rtol=1e-5, atol=1e-5)
    got = dispatch("conv2d", tuple(to_tensor(a) for a in (x, w, b, r)), {"activation": "relu"}).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    with pytest.raises(InvalidArgumentError, match="the residual input has shape"):
        dispatch("conv2d", tuple(to_tensor(a) for a in (x, w, b, rand(1, 4, 5, 5))), {})


# --- random graphs: every pass together equals the unoptimised graph -------------------------------------------
SHAPES = [(2, 3), (3,), (1, 3), (2, 1)]
UNARY = ["exp", "tanh", "sigmoid", "neg", "abs", "relu", "sin"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]


@st.composite
def random_graphs(draw):
    """A random graph over 2-3 inputs (some of them constants): elementwise, broadcast, where, reductions, matmul,
    reshape, transpose and concat, with repeated and dead nodes."""
    b = GraphBuilder()
    pool = [b.input(f"in{k}", SHAPES[draw(st.integers(0, 3))]) for k in range(draw(st.integers(2, 3)))]
    constants = {n: rand(*b._values[n].shape) for n in pool[1:] if draw(st.booleans())}
    for _ in range(draw(st.integers(2, 9))):
        kind = draw(st.sampled_from(["unary", "binary", "binary", "where", "reduce", "matmul", "shape", "repeat"]))
        a = draw(st.sampled_from(pool))
        shape = b._values[a].shape
        try:
            if kind == "unary":
                pool.append(b.op(draw(st.sampled_from(UNARY)), [a]))
            elif kind == "binary":
                pool.append(b.op(draw(st.sampled_from(BINARY)), [a, draw(st.sampled_from(pool))]))
            elif kind == "where":
                other = draw(st.sampled_from(pool))
                pool.append(b.op("where", [b.op("greater", [a, other]), a, other]))
            elif kind == "reduce" and shape:
                axis = (draw(st.integers(0, len(shape) - 1)),)
                pool.append(b.op(draw(st.sampled_from(["sum", "max", "mean"])), [a], axis=axis,
                                 keepdim=draw(st.booleans())))
            elif kind == "matmul" and shape and shape[-1] == 3:
                w = b.input(f"w{len(pool)}", (3, 2))
                constants[w] = rand(3, 2)
                pool.append(b.op("matmul", [a, w]))
            elif kind == "shape" and len(shape) == 2:
                op = draw(st.sampled_from(["transpose", "concat", "reshape"]))
                if op == "transpose":
                    pool.append(b.op("transpose", [a], perm=(1, 0)))
                elif op == "concat":
                    pool.append(b.op("concat", [a, draw(st.sampled_from(pool))], axis=0))
                else:
                    pool.append(b.op("reshape", [a], shape=(shape[0] * shape[1],)))
            elif kind == "repeat" and len(b._nodes):
                node = b._nodes[draw(st.integers(0, len(b._nodes) - 1))]
                out = b.op(node.op, list(node.inputs), **node.attrs)
                if b._values[out].dtype.kind == "f":  # a repeated comparison is bool: the frontend never feeds
                    pool.append(out)                  # a bool to exp or adds it to a float without a cast
        except Exception:  # operands that do not broadcast: draw again
            continue
    outputs = draw(st.lists(st.sampled_from(pool[-4:]), min_size=1, max_size=3, unique=True))
    graph = with_constants(b.build(outputs), constants)
    inputs = {n: rand(*b._values[n].shape) for n in graph.inputs}
    return graph, inputs


@pytest.mark.parametrize("dev", DEVICES)
@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=random_graphs(), split=st.booleans())
def test_random_graphs_optimised_and_fused_compute_what_they_did(dev, case, split):
    graph, inputs = case
    want = oracle(graph, inputs)
    opt, reports = optimize(graph)
    assert [r.name for r in reports][0] == "infer" and len(opt.nodes) <= len(graph.nodes)
    assert_same(execute(opt, inputs, dev), want)
    where = {n.name: (("cpu" if k % 2 else dev) if split else dev) for k, n in enumerate(opt.nodes)}
    fused, where = fuse(opt, where, lambda d: True)
    assert set(where) == {n.name for n in fused.nodes}
    for n in fused.nodes:  # a fused node keeps its outputs' names and types
        assert all(o in opt.values and opt.values[o] == fused.values[o] for o in n.outputs)
    if not split:
        assert_same(execute(fused, inputs, dev), want)


def test_chains_on_two_devices_never_depend_on_each_other_both_ways():
    """relu -> mul on one device, tanh -> add on another, each chain reading the other's first node: fusing both
    would make two fused nodes that wait for each other (found by tests/test_graph_differential.py)."""
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    r = b.op("relu", [x])
    t = b.op("tanh", [x])
    a = b.op("add", [r, t])
    m = b.op("mul", [r, t])
    graph = b.build([a, m])
    where = {"relu_0": "opencl:0", "mul_3": "opencl:0", "tanh_1": "cpu:0", "add_2": "cpu:0"}
    fused, _ = fuse(graph, where, lambda device: True)
    ops = [n.op for n in fused.nodes]
    assert ops.count("fused") == 1, ops  # one of the two chains, never both
    data = np.random.default_rng(3).standard_normal((4, 6)).astype(np.float32)
    got, want = reference_run(fused, {"x": data}), reference_run(graph, {"x": data})
    for name in graph.outputs:
        np.testing.assert_allclose(got[name].numpy(), want[name].numpy(), rtol=1e-6)


@pytest.mark.parametrize("devices", [["cpu"], ["opencl:0", "cpu"]])
def test_a_fused_float16_chain_rounds_each_step_as_the_ops_one_by_one(devices):
    """A fused chain computes in float32 registers; each float16 result is rounded as the unfused op writes it, so
    fusing never changes a float16 result (it did by 1-2 ulp in 789 of 4096 elements of exp(x - y))."""
    from hwadapter.graph.builder import GraphBuilder
    b = GraphBuilder()
    x, y = b.input("x", (64, 64), "float16"), b.input("y", (64, 64), "float16")
    out = b.op("exp", [b.op("sub", [b.op("mul", [x, y]), y])])
    g = b.build([out])
    rng = np.random.default_rng(0)
    data = [rng.standard_normal((64, 64)).astype("float16") for _ in range(2)]
    fused = hw.graph.partition(g, devices=devices)
    assert any(n.op == "fused" for n in fused.graph.nodes)
    got = fused.run(data)[0].numpy()
    want = hw.graph.partition(g, devices=devices, passes=False).run(data)[0].numpy()
    np.testing.assert_array_equal(got, want)
