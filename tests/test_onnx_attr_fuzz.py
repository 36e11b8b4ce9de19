"""Seeded attribute fuzz: every ONNX converter, fed malformed attributes (wrong types, nonsense values, required ones
removed) and omitted inputs, converts and runs or raises a hwadapter error naming the node, never a raw Python
error; and the issue's examples and old or missing opsets, each on its own."""
from __future__ import annotations

import random

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import AttributeProto, TensorProto, defs, helper, numpy_helper  # noqa: E402

import hwadapter.onnx as hwonnx  # noqa: E402
from hwadapter.api.errors import HwAdapterError  # noqa: E402
from hwadapter.onnx.ops import CONVERTERS, load_all  # noqa: E402

SEED = 22
CASES_PER_OP = 60  # sampled (seeded) from each op's mutations when it has more: the run stays well under a minute
NAME = "victim"
LATEST = defs.onnx_opset_version()
_A = AttributeProto
#: Element types a formal input is given, in order of preference among those its type constraint allows.
_PREFERRED = [("tensor(float)", TensorProto.FLOAT, np.float32), ("tensor(int64)", TensorProto.INT64, np.int64),
              ("tensor(int32)", TensorProto.INT32, np.int32), ("tensor(bool)", TensorProto.BOOL, np.bool_),
              ("tensor(uint8)", TensorProto.UINT8, np.uint8), ("tensor(int8)", TensorProto.INT8, np.int8)]
_SHAPES = ([1, 2, 3, 3], [2, 3], [3], [1, 2, 4])


def _wrong_types(name: str) -> dict:
    """One value of each attribute type, keyed by type."""
    return {_A.INT: 3, _A.FLOAT: 0.5, _A.STRING: "x", _A.INTS: [1, 2], _A.FLOATS: [0.5, 1.5],
            _A.STRINGS: ["a", "b"], _A.TENSOR: numpy_helper.from_array(np.array([1.0], np.float32), name)}


#: Right-typed values no converter should take on trust.
_NONSENSE = {_A.INT: [-1, 0, 2 ** 40, -(2 ** 40)], _A.FLOAT: [float("nan"), float("-inf"), -1.0, 1e30],
             _A.INTS: [[], [-1, -1], [0, 0], [2 ** 40, 2 ** 40], [1] * 9], _A.FLOATS: [[], [float("nan")], [-1.0]],
             _A.STRING: ["bogus", ""], _A.STRINGS: [[], ["bogus"]]}


def _schema(op: str):
    """The op's newest schema that is not deprecated, and the opset to build it at."""
    schema = defs.get_schema(op, LATEST)
    if schema.deprecated:
        schema = defs.get_schema(op, schema.since_version - 1)
    return schema, max(schema.since_version, 7)


def _element(formal, schema, chosen: dict):
    """(elem type, numpy dtype) for a formal input: one per type constraint, the first preferred it allows."""
    if formal.type_str in chosen:
        return chosen[formal.type_str]
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}.get(
        formal.type_str, [formal.type_str])
    pick = next(((e, d) for s, e, d in _PREFERRED if s in allowed), (TensorProto.FLOAT, np.float32))
    chosen[formal.type_str] = pick
    return pick


#: Plausible values of required string attributes (a wrong one is among the mutations).
_STRINGS_GIVEN = {"direction": "LEFT", "equation": "ij,jk->ik"}


def _default_attrs(schema) -> dict:
    """{name: (value, type)} for the required attributes, by type (what a plausible model would give)."""
    guess = {_A.INT: 1, _A.FLOAT: 1.0, _A.STRING: "", _A.INTS: [1, 1], _A.FLOATS: [1.0], _A.STRINGS: []}
    return {n: (_STRINGS_GIVEN.get(n, guess[a.type]), a.type) for n, a in schema.attributes.items()
            if a.required and a.type in guess}


#: How a base model's inputs look: (shape of input 0, optional inputs given, integer inputs' values, float ones').
_LAYOUTS = [(shape, optional, ints, floats) for optional in (True, False) for shape in _SHAPES
            for ints in ("shape", "zero", "scalar", "count") for floats in ("same", "channel", "scalar")]


def _value(dt, shape, ints: str, floats: str, rng):
    """A constant input's value: floats like input 0, per channel or scalar; integers as its shape, zeros, a scalar
    or a small count."""
    if np.dtype(dt).kind == "f":
        size = {"same": shape, "channel": [shape[1] if len(shape) > 1 else shape[0]], "scalar": []}[floats]
        return rng.normal(size=size).astype(dt)
    value = {"shape": np.array(shape), "zero": np.zeros(1), "scalar": np.array(2), "count": np.array([2])}[ints]
    return value.astype(dt)


def _model(op: str, schema, opset: int, layout, attrs: dict, omit: int | None, rng):
    """A one-node model of `op` named NAME: input 0 a graph input (a constant when it is not a float), the others
    constants; input `omit` named ''."""
    shape, optional, ints, floats = layout
    chosen, inputs, inits, names = {}, [], [], []
    for k, formal in enumerate(schema.inputs):
        is_optional = formal.option == defs.OpSchema.FormalParameterOption.Optional
        if is_optional and not optional and k != omit:
            names.append("")
            continue
        reps = 2 if formal.option == defs.OpSchema.FormalParameterOption.Variadic else 1
        for r in range(reps):
            elem, dt = _element(formal, schema, chosen)
            name = f"i{k}_{r}"
            names.append(name)
            if k == 0 and np.dtype(dt).kind == "f":
                inputs.append(helper.make_tensor_value_info(name, elem, shape))
            else:
                value = rng.normal(size=shape).astype(dt) if k == 0 else _value(dt, shape, ints, floats, rng)
                inits.append(numpy_helper.from_array(value, name))
    while names and not names[-1]:
        names.pop()
    if omit is not None and omit < len(names):
        names[omit] = ""
    n_out = max(1, len(schema.outputs)) if schema.outputs[-1].option != defs.OpSchema.FormalParameterOption.Variadic \
        else 2
    outputs = [f"y{j}" for j in range(n_out)]
    node = helper.make_node(op, names, outputs, name=NAME)
    node.attribute.extend(helper.make_attribute(k, v, attr_type=t) for k, (v, t) in attrs.items())
    # outputs declared float: hwadapter takes an output's dtype from the graph, the declaration only as a tensor's
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
                                                    for o in outputs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _outcome(model) -> str:
    """'' when the model converts and runs, or fails with a hwadapter error naming the node; else what escaped."""
    try:
        m = hwonnx.load(model)
        shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in model.graph.input}
        feed = {n: np.ones(s, np.float32) if model.graph.input[k].type.tensor_type.elem_type == TensorProto.FLOAT
                else np.ones(s, _np_of(model.graph.input[k])) for k, (n, s) in enumerate(shapes.items())}
        with np.errstate(all="ignore"):
            m.run(feed)
    except HwAdapterError as err:
        text = str(err)
        if NAME not in text and "the model" not in text:
            return f"{type(err).__name__} without the node's name: {text[:160]}"
        if "failed unexpectedly" in text:  # the last-resort net caught it: a check is missing at its root
            return f"caught only by the last-resort net: {text[:200]}"
        return ""
    except Exception as err:  # noqa: BLE001 - what the test is for: anything else escapes raw
        return f"raw {type(err).__name__}: {' '.join(str(err).split())[:160]}"
    return ""


def _np_of(vi):
    return helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)


def _base(op: str, schema, opset: int):
    """The first layout whose model of `op` converts with the required attributes only (the first one when none
    does: the mutations are checked all the same)."""
    attrs = _default_attrs(schema)
    for layout in _LAYOUTS:
        try:
            hwonnx.load(_model(op, schema, opset, layout, attrs, None, np.random.default_rng(SEED))).graph()
            return layout
        except Exception:  # noqa: BLE001 - the search only picks a base: the mutations are what is checked
            continue
    return _LAYOUTS[0]


def _mutations(schema, n_inputs: int) -> list:
    """(label, attrs, omitted input) for every mutation of the op's attributes and inputs."""
    base = _default_attrs(schema)
    out = []
    for name, a in sorted(schema.attributes.items()):
        if a.type not in _wrong_types(name):
            continue
        for t, value in _wrong_types(name).items():
            if t != a.type:
                out.append((f"{name}={_shown(value)}", {**base, name: (value, t)}, None))
        for value in _NONSENSE.get(a.type, []):
            out.append((f"{name}={_shown(value)}", {**base, name: (value, a.type)}, None))
        if name in base:
            out.append((f"without {name}", {k: v for k, v in base.items() if k != name}, None))
    for k in range(n_inputs):
        out.append((f"input {k} omitted", base, k))
    return out


def _shown(value) -> str:
    return "a tensor" if isinstance(value, TensorProto) else repr(value)


def _converted_ops() -> list:
    load_all()
    ops = []
    for op in sorted(CONVERTERS):
        try:
            _schema(op)
        except Exception:  # noqa: BLE001 - no default-domain schema (an op of another domain): nothing to build
            continue
        ops.append(op)
    return ops


def test_every_converter_refuses_malformed_attributes_and_inputs_with_an_error_naming_the_node():
    rng_cases = random.Random(SEED)
    ops = _converted_ops()
    assert len(ops) > 150, "the converter registry lists fewer ops than expected: the fuzz would prove little"
    escaped, total = [], 0
    for op in ops:
        schema, opset = _schema(op)
        rng = np.random.default_rng(SEED)
        layout = _base(op, schema, opset)
        cases = _mutations(schema, len(schema.inputs))
        cases = rng_cases.sample(cases, min(CASES_PER_OP, len(cases)))
        for label, attrs, omit in cases:
            total += 1
            problem = _outcome(_model(op, schema, opset, layout, attrs, omit, rng))
            if problem:
                escaped.append(f"{op} {label}: {problem}")
    assert total > 1500
    assert not escaped, f"{len(escaped)} of {total} fuzz cases escape:\n" + "\n".join(escaped[:60])


# --- the examples, each on its own ------------------------------------------------------------------------
def _one(op: str, shape, attrs: dict, opset: int = 17, inits=()):
    node = helper.make_node(op, ["x"] + [t.name for t in inits], ["y"], name=NAME, **attrs)  # types inferred
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("op, shape, attrs, says", [
    ("Flatten", [2, 3], {"axis": [1, 2]}, "attribute 'axis' is a list of ints ([1, 2]); it must be an int"),
    ("Celu", [2, 3], {"alpha": "x"}, "attribute 'alpha' is a string ('x'); it must be a float"),
    ("MaxPool", [1, 1, 4, 4], {"kernel_shape": 3}, "attribute 'kernel_shape' is an int (3); it must be a list of ints"),
    ("LRN", [1, 3, 4, 4], {}, "attribute 'size' is missing"),
    ("LRN", [1, 3, 4, 4], {"size": 0}, "attribute 'size' is 0; it must be at least 1"),
    ("MaxPool", [1, 1, 4, 4], {"kernel_shape": [-2, 2]}, "attribute 'kernel_shape' is [-2, 2]"),
    ("MaxPool", [1, 1, 4, 4], {"kernel_shape": [2, 2], "strides": [0, 1]}, "attribute 'strides' is [0, 1]"),
    ("Flatten", [2, 3], {"axis": 5}, "attribute 'axis' is 5; it must be between -2 and 2"),
    ("DepthToSpace", [1, 4, 2, 2], {"blocksize": 2, "mode": "XYZ"}, "attribute 'mode' is 'XYZ'; it must be one of"),
])
def test_a_malformed_attribute_is_an_error_naming_the_node_the_attribute_and_what_it_must_be(op, shape, attrs, says):
    with pytest.raises(HwAdapterError) as info:
        hwonnx.load(_one(op, shape, attrs)).graph()
    text = str(info.value)
    assert f"node '{NAME}' ({op}, opset 17)" in text and says in text, text
    assert info.value.fix


@pytest.mark.parametrize("opsets, says", [
    ([("", 1)], "default-domain opset is 1; hwadapter converts opset 7 and newer"),
    ([("", 6)], "default-domain opset is 6"),
    ([("ai.onnx.ml", 3)], "imports no opset of the default onnx domain"),
    ([], "imports no opset of the default onnx domain"),
])
def test_an_old_or_missing_default_opset_is_refused_on_load(opsets, says):
    model = _one("Relu", [2], {})
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid(d, v) for d, v in opsets)
    with pytest.raises(HwAdapterError) as info:
        hwonnx.load(model)
    assert says in str(info.value) and info.value.fix


def test_opset_7_is_taken():
    model = _one("Relu", [2], {}, opset=7)
    out = hwonnx.load(model).run([np.array([-1.0, 2.0], np.float32)])
    np.testing.assert_array_equal(out[0], [0.0, 2.0])
