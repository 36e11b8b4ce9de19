"""Malformed ONNX nodes are hwadapter errors naming the node, never raw Python errors: every converter, with each
required input omitted (named ''), as a hostile or broken exporter writes it."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, defs, helper  # noqa: E402

import hwadapter as hw  # noqa: E402
import hwadapter.onnx as hwonnx  # noqa: E402
from hwadapter.api.errors import HwAdapterError  # noqa: E402
from hwadapter.onnx.ops import CONVERTERS, load_all  # noqa: E402

OPSET = 17


def _cases() -> list:
    """(op type, index of a required input) for every default-domain converter with a schema at OPSET."""
    load_all()
    cases = []
    for op in sorted(CONVERTERS):
        try:
            schema = defs.get_schema(op, OPSET)
        except Exception:  # noqa: BLE001 - not an op of this opset (newer, or another domain)
            continue
        required = [k for k, formal in enumerate(schema.inputs)
                    if formal.option != defs.OpSchema.FormalParameterOption.Optional]
        cases += [(op, k, len(schema.inputs)) for k in required]
    return cases


def _model(op: str, omitted: int, n_inputs: int):
    names = [f"i{j}" for j in range(n_inputs)]
    names[omitted] = ""
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in names if n]
    node = helper.make_node(op, names, ["y"], name="victim")
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]).SerializeToString()


def test_an_omitted_required_input_is_an_error_naming_the_node():
    cases = _cases()
    assert len(cases) > 150  # every converter with a schema, each required input
    raw = []
    for op, k, n in cases:
        try:
            hwonnx.load(_model(op, k, n)).graph()
        except HwAdapterError as err:
            if "victim" not in str(err):
                raw.append(f"{op} input {k}: {type(err).__name__} without the node's name: {err}")
        except Exception as err:  # noqa: BLE001 - what the test is for: anything else escapes raw
            raw.append(f"{op} input {k}: raw {type(err).__name__}: {err}")
    assert not raw, f"{len(raw)} of {len(cases)} omitted inputs escape as raw errors:\n" + "\n".join(raw[:30])


def _graph(nodes, inputs=("x",), inits=(), twice=None, dims=(2,)):
    if twice is not None:  # the node's attribute `twice` once more, of another value
        nodes[0].attribute.append(helper.make_attribute(twice, "other"))
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(dims)) for n in inputs]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    g = helper.make_graph(nodes, "g", vis, [out], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]).SerializeToString()


def _negative(name):
    t = helper.make_tensor(name, TensorProto.FLOAT, [2], [1.0, 2.0])
    t.dims[0] = -1  # numpy would take -1 as "the rest": the data would fit, the shape is still wrong
    return t


_node = helper.make_node
MALFORMED = {
    "two nodes write one value": (_graph([_node("Relu", ["x"], ["y"], name="a"), _node("Neg", ["x"], ["y"], name="b")]),
                                  r"'b'.*'y'.*'a' writes too"),
    "a node writes over a graph input": (_graph([_node("Relu", ["x"], ["x"], name="a"),
                                                 _node("Neg", ["x"], ["y"], name="b")]), r"'a'.*'x'.*graph input"),
    "an input declared twice": (_graph([_node("Relu", ["x"], ["y"], name="a")], inputs=("x", "x")), "twice"),
    "more inputs than the op takes": (_graph([_node("Relu", ["x", "x"], ["y"], name="a")]), r"'a'.*2 inputs.*at most 1"),
    "a Constant with two values": (_graph([_node("Constant", [], ["c"], name="k", value_float=1.0,
                                                 value_floats=[1.0, 2.0]), _node("Add", ["x", "c"], ["y"], name="a")]),
                                   r"'k'.*2 values"),
    "more outputs than the op makes": (_graph([_node("Relu", ["x"], ["y", "z"], name="a")]),
                                       r"'a'.*2 outputs.*at most 1"),
    "an attribute given twice": (_graph([_node("LeakyRelu", ["x"], ["y"], name="a", alpha=0.5)], twice="alpha"),
                                 r"'a'.*attribute 'alpha' 2 times"),
    "an initializer of negative shape": (_graph([_node("Add", ["x", "w"], ["y"], name="a")], inits=[_negative("w")]),
                                         r"initializer 'w'.*negative dimension"),
}


def test_a_negative_declared_input_dim_is_open_as_onnxruntime_reads_it():
    """Exporters write -1 for a dynamic dim; onnxruntime takes any size there, and so does hwadapter."""
    model = hwonnx.load(_graph([_node("Relu", ["x"], ["y"], name="a")], dims=[-3]))
    assert model.declared()["x"][0] == (None,)
    x = np.array([-1.0, 2.0, -3.0], np.float32)
    np.testing.assert_array_equal(model.run({"x": x})[0], np.maximum(x, 0))



@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_an_ambiguous_graph_is_refused_on_load_naming_the_node(case):
    data, match = MALFORMED[case]
    with pytest.raises(HwAdapterError, match=match) as err:
        hwonnx.load(data)
    assert "onnx.checker" in err.value.fix


# --- memory bombs: sizes are known before anything runs ------------------------------------------------------------
def _bomb(nodes, inits, inputs=()):
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "g", list(inputs), [out], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)]).SerializeToString()


def _t(name, value, dtype):
    from onnx import numpy_helper
    import numpy as np
    return numpy_helper.from_array(np.array(value, dtype), name)


BIG = [16384, 16384]  # 1 GiB of float32: more than the 128 MiB the tests say the machine has
BOMBS = {
    "ConstantOfShape": lambda: _bomb([_node("ConstantOfShape", ["s"], ["y"], name="bomb")], [_t("s", BIG, "int64")]),
    "Expand of constants": lambda: _bomb([_node("Expand", ["c", "s"], ["y"], name="bomb")],
                                         [_t("c", [1.0], "float32"), _t("s", BIG, "int64")]),
    "Range": lambda: _bomb([_node("Range", ["a", "b", "c"], ["y"], name="bomb")],
                           [_t("a", 0, "float32"), _t("b", 1 << 28, "float32"), _t("c", 1, "float32")]),
    "Expand at run time": lambda: _bomb([_node("Expand", ["x", "s"], ["y"], name="bomb")], [_t("s", BIG, "int64")],
                                        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])]),
}


@pytest.mark.parametrize("case", sorted(BOMBS))
def test_a_tiny_model_asking_for_more_memory_than_there_is_is_refused_naming_the_node(case, monkeypatch):
    import numpy as np
    from hwadapter import OutOfMemoryError
    from hwadapter.runtime import memory
    monkeypatch.setattr(memory, "host_memory", lambda: 1 << 27)
    monkeypatch.setattr(memory, "device_memory", lambda dev: 1 << 27)
    model = hwonnx.load(BOMBS[case]())
    feeds = [np.ones(1, np.float32)] if case == "Expand at run time" else []
    with pytest.raises(OutOfMemoryError, match=r"bomb.*1\.0 GiB.*128\.0 MiB"):
        model.run(feeds, devices=["cpu"])


@pytest.mark.parametrize("shape", [(-1, 2), (2.5,), ("a",)])
def test_a_given_input_shape_that_is_not_non_negative_ints_is_an_error_naming_the_input(shape):
    model = hwonnx.load(_graph([_node("Relu", ["x"], ["y"], name="a")], dims=["n"]))
    with pytest.raises(HwAdapterError, match=r"shape given for input 'x'"):
        model.graph({"x": shape})


@pytest.mark.parametrize("dev", ["cpu:0", "opencl:0"])
def test_a_value_a_kernel_refuses_at_run_time_names_the_onnx_node(dev):
    """Indices fed at run time are checked by the kernel; its error names the ONNX node (the plan step), on the
    first run and on the warm runs of the plan's generated function."""
    if dev not in hw.device.get_available_device():
        pytest.skip(f"{dev} is not available here")
    data = helper.make_tensor_value_info("data", TensorProto.FLOAT, [3, 2])
    idx = helper.make_tensor_value_info("idx", TensorProto.INT64, [2])
    node = helper.make_node("Gather", ["data", "idx"], ["y"], name="lookup_victim", axis=0)
    graph = helper.make_graph([node], "g", [data, idx], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = hwonnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]).SerializeToString())
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(model.run({"data": x, "idx": np.array([2, 0])}, [dev])[0], x[[2, 0]])
    for _ in range(2):
        with pytest.raises(HwAdapterError, match="lookup_victim") as err:
            model.run({"data": x, "idx": np.array([0, 7])}, [dev])
        assert "7" in str(err.value)
