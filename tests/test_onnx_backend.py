"""hwadapter.onnx.backend (onnx.backend.base.Backend) and OnnxModel on small hand-built models, against numpy.

An unsupported op is named with its opset and node when the model is prepared, before anything runs; control flow
(If/Loop/Scan) and non-tensor values are refused clearly; local functions are inlined; wrong inputs are refused
naming the input; supports_device answers for every plugin device type and onnx's "CPU"/"CUDA"; outputs come back
in the model's order, also when an output is an input, a constant or listed twice.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import hwadapter as hw
from hwadapter.api.errors import InvalidArgumentError, UnsupportedDTypeError
from hwadapter.onnx import backend, load
from hwadapter.onnx.convert import UnsupportedOpError
from hwadapter.onnx.ops import CONVERTERS, VALUE_INPUTS, load_all

folding = importlib.import_module("hwadapter.graph.passes.fold")  # the module (the package exports its fold pass)

F = TensorProto.FLOAT
RNG = np.random.default_rng(3)


def model(nodes, inputs, outputs, inits=(), opset=17, functions=()):
    """A model of `nodes`; inputs/outputs as (name, elem type, shape) triples; inits as {name: array}."""
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs],
                          [numpy_helper.from_array(a, n) for n, a in dict(inits).items()])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(f.domain, 1) for f in functions]
    return helper.make_model(g, opset_imports=list({o.domain: o for o in opsets}.values()), functions=list(functions))


def add_relu():
    """(s, r) = (x + y, relu(x)); two inputs, two outputs."""
    return model([helper.make_node("Add", ["x", "y"], ["s"], name="add"),
                  helper.make_node("Relu", ["x"], ["r"], name="relu")],
                 [("x", F, [2, 3]), ("y", F, [2, 3])], [("s", F, [2, 3]), ("r", F, [2, 3])])


def xy():
    return RNG.standard_normal((2, 3)).astype(np.float32), RNG.standard_normal((2, 3)).astype(np.float32)


# --- devices -------------------------------------------------------------------------------------------------------

def test_supports_device_for_onnx_names_and_every_plugin_type():
    assert backend.supports_device("CPU") and backend.supports_device("cpu") and backend.supports_device("cpu:0")
    assert backend.supports_device("CUDA") == hw.device.is_available("cuda")
    assert backend.supports_device("CUDA:0") == hw.device.is_available("cuda")
    for dev in hw.device.get_available_device():
        kind = dev.partition(":")[0]
        assert backend.supports_device(dev) and backend.supports_device(kind) and backend.supports_device(kind.upper())
    for bad in ("TPU", "nosuchdevice:0", "cpu:99", "", "opencl:x"):
        assert backend.supports_device(bad) is False


def test_prepare_on_an_unavailable_device_is_a_clear_error():
    with pytest.raises(hw.errors.HwAdapterError, match="nosuch"):
        backend.prepare(add_relu(), "nosuch:0")


@pytest.mark.parametrize("kind", [d.partition(":")[0] for d in hw.device.get_available_device()
                                  if not d.startswith("testdev")])
def test_run_model_on_every_device_type_in_the_model_s_output_order(kind):
    x, y = xy()
    s, r = backend.run_model(add_relu(), [x, y], device=kind.upper())
    np.testing.assert_allclose(s, x + y, rtol=1e-6)
    np.testing.assert_array_equal(r, np.maximum(x, 0))


# --- BackendRep.run ------------------------------------------------------------------------------------------------

def test_rep_run_returns_outputs_in_the_model_s_order_for_lists_and_dicts():
    m = add_relu()
    m.graph.output.reverse()  # r first: not the nodes' order
    rep = backend.prepare(m, "CPU")
    x, y = xy()
    for inputs in ([x, y], (x, y), {"y": y, "x": x}):
        r, s = rep.run(inputs)
        np.testing.assert_array_equal(r, np.maximum(x, 0))
        np.testing.assert_allclose(s, x + y, rtol=1e-6)


def test_rep_run_takes_a_single_array_for_a_single_input():
    rep = backend.prepare(model([helper.make_node("Relu", ["x"], ["r"])], [("x", F, [4])], [("r", F, [4])]))
    x = RNG.standard_normal(4).astype(np.float32)
    (r,) = rep.run(x)
    np.testing.assert_array_equal(r, np.maximum(x, 0))


def test_outputs_that_are_inputs_constants_or_repeated():
    c = np.arange(6, dtype=np.float32).reshape(2, 3)
    m = model([helper.make_node("Add", ["x", "c"], ["s"], name="add")],
              [("x", F, [2, 3])], [("s", F, [2, 3]), ("x", F, [2, 3]), ("c", F, [2, 3]), ("s", F, [2, 3])],
              inits={"c": c})
    x = xy()[0]
    for dev in ("cpu", *[d for d in hw.device.get_available_device() if d.startswith("opencl")]):
        s, xo, co, s2 = backend.run_model(m, [x], device=dev)
        np.testing.assert_allclose(s, x + c, rtol=1e-6)
        np.testing.assert_array_equal(s2, s)
        np.testing.assert_array_equal(xo, x)
        np.testing.assert_array_equal(co, c)
        xo[...] = 0
        assert x.any(), "an output that is an input is a copy: writing it does not change the caller's array"


def test_a_model_of_only_constants_and_identity():
    c = np.float32([1, 2, 3])
    m = model([helper.make_node("Identity", ["c"], ["i"]), helper.make_node("Identity", ["x"], ["xi"])]
              if "Identity" in _converters() else [], [("x", F, [3])],
              [("c", F, [3]), ("x", F, [3])], inits={"c": c})
    x = np.float32([4, 5, 6])
    co, xo = backend.run_model(m, [x])
    np.testing.assert_array_equal(co, c)
    np.testing.assert_array_equal(xo, x)


def _converters():
    from hwadapter.onnx.ops import load_all
    return load_all()


# --- wrong inputs --------------------------------------------------------------------------------------------------

def test_wrong_input_count_dtype_shape_and_names_are_refused_naming_the_input():
    rep = backend.prepare(add_relu())
    x, y = xy()
    with pytest.raises(InvalidArgumentError, match=r"takes 2 inputs \['x', 'y'\], got 1"):
        rep.run([x])
    with pytest.raises(InvalidArgumentError, match=r"takes 2 inputs"):
        rep.run([x, y, y])
    with pytest.raises(InvalidArgumentError, match=r"input 'y' is float64, the model declares float32") as e:
        rep.run([x, y.astype(np.float64)])
    assert "astype('float32')" in e.value.fix
    with pytest.raises(InvalidArgumentError, match=r"input 'x' has shape \(3, 2\), the model declares \(2, 3\)"):
        rep.run([x.reshape(3, 2), y])
    with pytest.raises(InvalidArgumentError, match=r"input 'x' has shape \(6,\)"):
        rep.run([x.reshape(6), y])
    with pytest.raises(InvalidArgumentError, match="no input 'z'"):
        rep.run({"x": x, "z": y})
    with pytest.raises(InvalidArgumentError, match="input 'y' is missing"):
        rep.run({"x": x})
    with pytest.raises(InvalidArgumentError, match="input 'x'"):
        rep.run([[["not", "numbers"]], y])


def test_open_dims_take_any_size_and_each_signature_converts_once():
    m = load(model([helper.make_node("Relu", ["x"], ["r"])], [("x", F, ["batch", 3])], [("r", F, ["batch", 3])]))
    for n in (1, 5, 1):
        x = RNG.standard_normal((n, 3)).astype(np.float32)
        np.testing.assert_array_equal(m.run([x])[0], np.maximum(x, 0))
    assert len(m._conversions) == 2
    assert len(m._runs) == 2  # a run finds its plan by the input shapes and devices: planned once per signature
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_array_equal(m.run([x], devices="cpu")[0], np.maximum(x, 0))
    assert len(m._runs) == 2  # "cpu" and ("cpu",) name the same devices: the same plan


# --- unsupported ---------------------------------------------------------------------------------------------------

def test_an_unsupported_op_is_named_with_opset_and_node_before_anything_runs():
    m = model([helper.make_node("Relu", ["x"], ["h"], name="first"),
               helper.make_node("NoSuchOp", ["h"], ["y"], name="the_culprit")],
              [("x", F, [2])], [("y", F, [2])], opset=18)
    for call in (lambda: load(m), lambda: backend.prepare(m, "CPU")):
        with pytest.raises(UnsupportedOpError, match=r"NoSuchOp \(domain ai\.onnx, opset 18; first at node "
                                                     r"'the_culprit'\)"):
            call()


def test_an_op_of_another_domain_is_named_with_its_domain():
    m = model([helper.make_node("FusedThing", ["x"], ["y"], name="n0", domain="com.example")],
              [("x", F, [2])], [("y", F, [2])])
    m.opset_import.append(helper.make_opsetid("com.example", 3))
    with pytest.raises(UnsupportedOpError, match=r"FusedThing \(domain com\.example, opset 3; first at node 'n0'\)"):
        load(m)


def test_every_unsupported_op_is_listed_at_once():
    m = model([helper.make_node("NoSuchA", ["x"], ["h"], name="a"), helper.make_node("NoSuchB", ["h"], ["y"])],
              [("x", F, [2])], [("y", F, [2])])
    with pytest.raises(UnsupportedOpError, match="NoSuchA.*NoSuchB"):
        load(m)


def _branch(name, op):
    return helper.make_graph([helper.make_node(op, ["x"], ["o"])], name, [],
                             [helper.make_tensor_value_info("o", F, [2])])


def test_an_op_without_a_converter_inside_a_branch_is_listed_naming_its_node():
    then = helper.make_graph([helper.make_node("NoSuchOp", ["x"], ["o"], name="deep")], "t", [],
                             [helper.make_tensor_value_info("o", F, [2])])
    node = helper.make_node("If", ["c"], ["y"], name="branchy", then_branch=then, else_branch=_branch("e", "Neg"))
    m = model([node], [("c", TensorProto.BOOL, []), ("x", F, [2])], [("y", F, [2])])
    with pytest.raises(UnsupportedOpError, match=r"NoSuchOp \(domain ai\.onnx, opset 17; first at node 'deep'\)"):
        load(m)


@pytest.mark.parametrize("op", ["Loop", "Scan"])
def test_a_body_that_does_not_fit_its_node_is_refused_naming_the_node(op):
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("c_in", TensorProto.BOOL, [])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, [])])
    node = helper.make_node(op, ["n", "c", "x"] if op == "Loop" else ["x"], ["y"], name="looper", body=body,
                            **({"num_scan_inputs": 1} if op == "Scan" else {}))
    m = model([node], [("n", TensorProto.INT64, []), ("c", TensorProto.BOOL, []), ("x", F, [2])],
              [("y", F, [2])], opset=16)
    with pytest.raises(InvalidArgumentError, match=r"'looper'"):
        backend.prepare(m).run([np.array(2, np.int64), np.array(True), np.ones(2, np.float32)])


def test_a_node_with_a_subgraph_attribute_is_refused_even_if_its_op_converts():
    m = model([helper.make_node("Relu", ["x"], ["y"], name="odd", extra=_branch("b", "Neg"))],
              [("x", F, [2])], [("y", F, [2])])
    with pytest.raises(UnsupportedOpError, match=r"'odd'.*subgraph"):
        load(m)


def test_an_input_of_a_dtype_hwadapter_lacks_is_named():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", TensorProto.BFLOAT16, [2])],
              [("y", TensorProto.BFLOAT16, [2])])
    with pytest.raises(UnsupportedDTypeError, match="graph input 'x' has element type BFLOAT16"):
        backend.prepare(m)


def test_map_inputs_and_sequences_of_sequences_are_refused_as_not_tensors():
    """Sequences of tensors convert (tests/test_onnx_sequences.py); maps and nested sequences do not."""
    as_map = helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(F, [2]))
    nested = helper.make_sequence_type_proto(helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [2])))
    for tp, kind in ((as_map, "a map"), (nested, "a sequence of sequences")):
        g = helper.make_graph([helper.make_node("Identity", ["s"], ["n"])], "g", [helper.make_value_info("s", tp)],
                              [helper.make_value_info("n", tp)])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        with pytest.raises(UnsupportedOpError, match=f"graph input 's' is {kind}"):
            backend.prepare(m).run([[]])


def test_legacy_broadcasting_of_old_opsets_is_refused_with_the_upgrade():
    m = model([helper.make_node("Add", ["x", "y"], ["z"], name="old_add", broadcast=1)],
              [("x", F, [2, 3]), ("y", F, [3])], [("z", F, [2, 3])], opset=5)
    with pytest.raises(UnsupportedOpError, match=r"'old_add' \(Add, opset 5\).*broadcast") as e:
        backend.prepare(m)
    assert "convert_version" in e.value.fix


def test_a_node_reading_an_undefined_value_is_named():
    m = model([helper.make_node("Relu", ["nowhere"], ["y"], name="lost")], [("x", F, [2])], [("y", F, [2])])
    with pytest.raises(InvalidArgumentError, match=r"'lost'.*'nowhere'"):
        backend.prepare(m)


def test_an_output_nothing_makes_is_named():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2]), ("ghost", F, [2])])
    with pytest.raises(InvalidArgumentError, match="'ghost'"):
        backend.prepare(m)


# --- local functions -----------------------------------------------------------------------------------------------

def test_a_local_function_is_inlined():
    fn = helper.make_function("my.funcs", "AddRelu", ["a", "b"], ["o"],
                              [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Relu", ["t"], ["o"])],
                              [helper.make_opsetid("", 17)])
    m = model([helper.make_node("AddRelu", ["x", "y"], ["z"], domain="my.funcs", name="call")],
              [("x", F, [2, 3]), ("y", F, [2, 3])], [("z", F, [2, 3])], functions=[fn])
    x, y = xy()
    (z,) = backend.run_model(m, [x, y])
    np.testing.assert_allclose(z, np.maximum(x + y, 0), rtol=1e-6)


def test_a_local_function_using_an_unsupported_op_names_it():
    fn = helper.make_function("my.funcs", "Weird", ["a"], ["o"], [helper.make_node("NoSuchOp", ["a"], ["o"])],
                              [helper.make_opsetid("", 17)])
    m = model([helper.make_node("Weird", ["x"], ["z"], domain="my.funcs", name="call")],
              [("x", F, [2])], [("z", F, [2])], functions=[fn])
    with pytest.raises(UnsupportedOpError, match="NoSuchOp"):
        load(m)


def test_load_accepts_what_onnx_saves(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(add_relu(), path)
    x, y = xy()
    s, r = load(path).run({"x": x, "y": y})
    np.testing.assert_allclose(s, x + y, rtol=1e-6)


def test_an_input_of_undeclared_rank_takes_any_shape():
    vi = helper.make_tensor_value_info("x", F, None)  # no shape at all: not even the rank
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [vi],
                          [helper.make_tensor_value_info("y", F, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    rep = backend.prepare(m)
    for shape in ((3,), (2, 4), ()):
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_array_equal(rep.run([x])[0], np.maximum(x, 0))
    with pytest.raises(InvalidArgumentError, match="'x' has no declared shape") as e:
        load(m).graph()
    assert "input_shapes" in e.value.fix
    assert load(m, input_shapes={"x": (5,)}).graph().values["x"].shape == (5,)


# --- constants and input values at conversion ---------------------------------------------------------------------
def reshape_by_input():
    """y = reshape(x, s + 0): the target shape is computed from a (small) graph input."""
    return model([helper.make_node("Add", ["s", "zero"], ["t"]), helper.make_node("Reshape", ["x", "t"], ["y"])],
                 [("x", F, [2, 3]), ("s", TensorProto.INT64, [2])], [("y", F, None)],
                 {"zero": np.zeros(2, np.int64)})


def test_a_shape_fed_as_an_input_converts_per_its_value_as_an_explicit_result():
    rep = backend.prepare(reshape_by_input())            # no value yet: prepare leaves the conversion to the run
    conv = rep.model.conversion()
    assert conv.graph is None and conv.need.input == "s" and "input 1 ('t')" in conv.need.message
    with pytest.raises(UnsupportedOpError, match="computed from graph input 's', whose value must be known"):
        rep.model.graph()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for shape in ((3, 2), (6, 1), (3, 2)):
        (y,) = rep.run([x, np.array(shape, np.int64)])
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert rep.model.value_inputs == ["s"] and not rep.model._runs  # a plan per value: never looked up by shape
    graph = rep.model.graph(values={"s": np.array((3, 2), np.int64)})
    assert graph.inputs == ["x"] and [n.op for n in graph.nodes] == ["reshape"]


def test_the_importer_folds_with_the_graph_layers_one_folder(monkeypatch):
    folded = []
    for op in ("transpose", "expand"):
        kernel = folding.KERNELS[op]
        monkeypatch.setitem(folding.KERNELS, op, lambda *a, _k=kernel, _op=op, **kw: folded.append(_op) or _k(*a, **kw))
    w = RNG.standard_normal((3, 4)).astype(np.float32)
    m = model([helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
               helper.make_node("Expand", ["two", "shape"], ["c"]),
               helper.make_node("MatMul", ["x", "wt"], ["p"]), helper.make_node("Add", ["p", "c"], ["y"])],
              [("x", F, [2, 4])], [("y", F, [2, 3])], {"w": w, "two": np.float32([2]), "shape": np.array([2, 3], np.int64)})
    graph = load(m).graph()
    assert sorted(folded) == ["expand", "transpose"] and [n.op for n in graph.nodes] == ["matmul", "add"]
    x = RNG.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(backend.prepare(m).run([x])[0], x @ w.T + 2, rtol=1e-5)


def test_every_input_a_converter_reads_by_value_is_declared():
    """An input read with ctx.require_const (or tensor.ints) must be in VALUE_INPUTS, so that convert asks for its
    value before the converter runs (a literal index in the converter or a module function it calls)."""
    load_all()

    def indices(fn, depth=1) -> set:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        out = set()
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            name = call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")
            pos = {"require_const": 1, "ints": 2}.get(name)
            if pos is not None and len(call.args) > pos and isinstance(call.args[pos], ast.Constant):
                out.add(call.args[pos].value)
            helper_fn = fn.__globals__.get(call.func.id) if isinstance(call.func, ast.Name) else None
            if depth and inspect.isfunction(helper_fn) and helper_fn.__module__ == fn.__module__:
                out |= indices(helper_fn, depth - 1)
        return out

    missing = {}
    for op_type, fn in CONVERTERS.items():
        declared = VALUE_INPUTS.get(op_type, ())
        if callable(declared):
            continue
        undeclared = indices(fn) - set(declared)
        if undeclared:
            missing[op_type] = sorted(undeclared)
    assert not missing, f"converters reading these inputs' values without declaring them (values=...): {missing}"
