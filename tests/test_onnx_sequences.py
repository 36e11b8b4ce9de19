"""ONNX sequences and optionals: lists of tensors known at conversion, handed in and back as lists of arrays (None for
an empty optional); each model checked against onnxruntime on the same inputs, on cpu and opencl:0."""
from __future__ import annotations

import numpy as np
import pytest

from hwadapter.api.errors import InvalidArgumentError
from hwadapter.onnx.node import UnsupportedOpError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import hwadapter.onnx as hwonnx  # noqa: E402
from hwadapter.onnx import backend  # noqa: E402

from onnx_oracle import DEVICES, agree  # noqa: E402
F, B, I = TensorProto.FLOAT, TensorProto.BOOL, TensorProto.INT64
RNG = np.random.default_rng(7)


def seq(name, elem=F, dims=None):
    return helper.make_tensor_sequence_value_info(name, elem, dims)


def opt(name, inner):
    return helper.make_value_info(name, helper.make_optional_type_proto(inner))


def ten(name, elem=F, dims=None):
    return helper.make_tensor_value_info(name, elem, dims)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def _floats(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# --- each op ------------------------------------------------------------------------------------------------------
def test_construct_at_length_and_a_sequence_output():
    model = _model([helper.make_node("SequenceConstruct", ["a", "b", "a"], ["s"]),
                    helper.make_node("Constant", [], ["minus1"], value_int=-1),
                    helper.make_node("SequenceAt", ["s", "minus1"], ["last"]),
                    helper.make_node("SequenceLength", ["s"], ["n"])],
                   [ten("a", F, [2, 3]), ten("b", F, [1, 3])],
                   [seq("s", F), ten("last", F, [2, 3]), ten("n", I, [])])
    got = agree(model, [{"a": _floats(2, 3), "b": _floats(1, 3)}]).run([_floats(2, 3), _floats(1, 3)])
    assert got[0][0] is not got[0][2]  # one tensor twice in a sequence: two arrays, no shared memory


def test_insert_and_erase_at_positions_fed_as_inputs_convert_per_value():
    model = _model([helper.make_node("SequenceInsert", ["s", "x", "p"], ["s2"]),
                    helper.make_node("SequenceErase", ["s2", "q"], ["s3"]),
                    helper.make_node("SequenceErase", ["s3"], ["s4"])],
                   [seq("s", F), ten("x", F, [2]), ten("p", I, []), ten("q", I, [])],
                   [seq("s3", F), seq("s4", F)])
    s = [_floats(2), _floats(3), _floats(1)]
    feeds = [{"s": s, "x": _floats(2), "p": np.array(p, np.int64), "q": np.array(q, np.int64)}
             for p, q in ((0, 1), (3, -1), (-2, 0), (1, 3))]
    loaded = agree(model, feeds)
    assert {"p", "q"} <= set(loaded.value_inputs)


def test_split_to_sequence_scalar_uneven_list_and_without_split():
    x = _floats(5, 4)
    model = _model([helper.make_node("SplitToSequence", ["x", "two"], ["s1"], axis=0),
                    helper.make_node("SplitToSequence", ["x", "sizes"], ["s2"], axis=1),
                    helper.make_node("SplitToSequence", ["x"], ["s3"], axis=-1, keepdims=0)],
                   [ten("x", F, [5, 4])], [seq("s1"), seq("s2"), seq("s3")],
                   [helper.make_tensor("two", I, [], [2]), helper.make_tensor("sizes", I, [2], [1, 3])], opset=11)
    agree(model, [{"x": x}])


@pytest.mark.parametrize("new_axis,axis", [(0, 0), (0, -1), (1, 0), (1, 2), (1, -1)])
def test_concat_from_sequence(new_axis, axis):
    model = _model([helper.make_node("SplitToSequence", ["x"], ["s"], axis=0),
                    helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=axis, new_axis=new_axis)],
                   [ten("x", F, [3, 2, 4])], [ten("y", F, ["a", "b", "c", "d"][:3 + new_axis])], opset=11)
    agree(model, [{"x": _floats(3, 2, 4)}])


def test_sequence_empty_then_inserts():
    model = _model([helper.make_node("SequenceEmpty", [], ["e"], dtype=I),
                    helper.make_node("SequenceInsert", ["e", "x"], ["s1"]),
                    helper.make_node("SequenceInsert", ["s1", "x", "zero"], ["s2"]),
                    helper.make_node("SequenceLength", ["e"], ["n"])],
                   [ten("x", I, [3])], [seq("e", I), seq("s2", I), ten("n", I, [])],
                   [helper.make_tensor("zero", I, [], [0])])
    got = agree(model, [{"x": np.arange(3, dtype=np.int64)}]).run([np.arange(3, dtype=np.int64)])
    assert got[0] == []


def test_sequence_map_over_a_sequence_and_a_tensor_with_two_outputs():
    body = helper.make_graph([helper.make_node("Add", ["e", "t"], ["sum"]), helper.make_node("Shape", ["e"], ["sh"])],
                             "body", [ten("e", F, None), ten("t", F, [3])], [ten("sum", F, None), ten("sh", I, [1])])
    model = _model([helper.make_node("SequenceMap", ["s", "t"], ["sums", "shapes"], body=body)],
                   [seq("s", F), ten("t", F, [3])], [seq("sums", F), seq("shapes", I)])
    t = _floats(3)
    agree(model, [{"s": [_floats(3), _floats(2, 3), _floats(4, 1, 3)], "t": t}, {"s": [], "t": t}])


def test_optional_wrap_has_element_and_get_element():
    ot = helper.make_tensor_type_proto(F, [2])
    model = _model([helper.make_node("Optional", ["x"], ["o"]),
                    helper.make_node("Optional", [], ["none"], type=ot),
                    helper.make_node("OptionalHasElement", ["o"], ["h1"]),
                    helper.make_node("OptionalHasElement", ["none"], ["h2"]),
                    helper.make_node("OptionalGetElement", ["o"], ["y"])],
                   [ten("x", F, [2])], [opt("o", ot), opt("none", ot), ten("h1", B, []), ten("h2", B, []),
                                        ten("y", F, [2])])
    got = agree(model, [{"x": _floats(2)}]).run([_floats(2)])
    assert got[1] is None and bool(got[2]) and not bool(got[3])


# --- at the model's boundary --------------------------------------------------------------------------------------
def add_to_each_model():
    """ys = [s_i + 1 for s_i in s], and n = len(s): a sequence input and a sequence output."""
    body = helper.make_graph([helper.make_node("Add", ["e", "one"], ["r"])], "body", [ten("e", F, None)],
                             [ten("r", F, None)], [helper.make_tensor("one", F, [], [1.0])])
    return _model([helper.make_node("SequenceMap", ["s"], ["ys"], body=body),
                   helper.make_node("SequenceLength", ["s"], ["n"])],
                  [seq("s", F, None)], [seq("ys", F), ten("n", I, [])])


def test_a_sequence_input_is_its_tensors_as_graph_inputs_converted_per_length_and_shapes():
    model = add_to_each_model()
    loaded = agree(model, [{"s": [_floats(2), _floats(3, 2)]}, {"s": [_floats(4)]}, {"s": []}])
    graph = loaded.graph({"s": [(2,), (3, 2)]})
    assert graph.inputs == ["s[0]", "s[1]"] and list(graph.constants[graph.outputs[-1]].shape) == []  # n: 2
    with pytest.raises(InvalidArgumentError, match="input 's' is a sequence of tensors.*known only when it runs"):
        loaded.graph()


def test_a_sequence_tensor_read_as_a_value_converts_per_value_of_that_tensor():
    """Reshape's shape taken with SequenceAt from a sequence input: the model converts per value of s[0]."""
    model = _model([helper.make_node("Constant", [], ["zero"], value_int=0),
                    helper.make_node("SequenceAt", ["s", "zero"], ["shape"]),
                    helper.make_node("Reshape", ["x", "shape"], ["y"])],
                   [seq("s", I, [2]), ten("x", F, [6])], [ten("y", F, ["a", "b"])])
    x = _floats(6)
    shapes = ([2, 3], [3, 2], [6, 1])
    loaded = agree(model, [{"s": [np.array(v, np.int64), np.array([1, 1], np.int64)], "x": x} for v in shapes])
    assert loaded.value_inputs == ["s[0]"]


def test_the_backend_takes_and_gives_lists_and_none():
    model = add_to_each_model()
    s = [_floats(2, 2), _floats(1)]
    for dev in DEVICES:
        ys, n = backend.prepare(model, dev).run([s])
        assert isinstance(ys, list) and int(n) == 2
        for y, x in zip(ys, s):
            np.testing.assert_allclose(y, x + 1, rtol=1e-6)
    ot = helper.make_tensor_type_proto(F, [2])
    passthrough = _model([helper.make_node("Identity", ["o"], ["p"]),
                          helper.make_node("OptionalHasElement", ["o"], ["h"])],
                         [opt("o", ot)], [opt("p", ot), ten("h", B, [])])
    assert backend.run_model(passthrough, [None])[0] is None
    agree(passthrough, [{"o": None}, {"o": np.float32([1, 2])}])


def test_an_optional_sequence_input_and_its_inputs_checked():
    inner = helper.make_sequence_type_proto(helper.make_tensor_type_proto(F, [2]))
    model = _model([helper.make_node("OptionalHasElement", ["o"], ["h"])], [opt("o", inner)], [ten("h", B, [])])
    agree(model, [{"o": None}, {"o": []}, {"o": [_floats(2)]}])
    loaded = hwonnx.load(model)
    with pytest.raises(InvalidArgumentError, match=r"input 'o' is a ndarray; the model declares it an optional of a "
                                                   "sequence of tensors"):
        loaded.run([_floats(2)])
    with pytest.raises(InvalidArgumentError, match=r"input 'o\[0\]' has shape \(3,\), the model declares \(2,\)"):
        loaded.run([[_floats(3)]])
    with pytest.raises(InvalidArgumentError, match=r"input 'o\[1\]' is float64"):
        loaded.run([[_floats(2), np.zeros(2)]])


# --- control flow -------------------------------------------------------------------------------------------------
def test_a_sequence_carried_through_an_unrolled_loop_grows_per_iteration():
    """s_i = s_(i-1) + [x * i], then concatenated: the Loop's trip count is an input, converted per value."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F), helper.make_node("Mul", ["x", "fi"], ["xi"]),
         helper.make_node("SequenceInsert", ["s_in", "xi"], ["s_out"]), helper.make_node("Identity", ["c"], ["c_out"])],
        "body", [ten("i", I, []), ten("c", B, []), seq("s_in", F)], [ten("c_out", B, []), seq("s_out", F)])
    model = _model([helper.make_node("SequenceEmpty", [], ["e"]),
                    helper.make_node("Loop", ["m", "", "e"], ["s"], body=body),
                    helper.make_node("ConcatFromSequence", ["s"], ["y"], axis=0, new_axis=1)],
                   [ten("m", I, []), ten("x", F, [3])], [seq("s", F), ten("y", F, ["m", 3])])
    x = _floats(3)
    loaded = agree(model, [{"m": np.array(k, np.int64), "x": x} for k in (1, 4)])
    assert "m" in loaded.value_inputs


def test_an_if_choosing_between_sequences_of_one_length_is_a_cond_node():
    def branch(name, op):
        return helper.make_graph([helper.make_node(op, ["x", "x"], ["t"]),
                                  helper.make_node("SequenceConstruct", ["t", "x"], ["out"])], name, [], [seq("out")])
    model = _model([helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                    helper.make_node("Less", ["total", "zero"], ["c"]),
                    helper.make_node("If", ["c"], ["s"], then_branch=branch("then", "Add"),
                                     else_branch=branch("else", "Mul"))],
                   [ten("x", F, [100])], [seq("s")], [helper.make_tensor("zero", F, [], [0.0])])
    x = _floats(100)
    loaded = agree(model, [{"x": x}, {"x": -x}])
    assert [n.op for n in loaded.graph({"x": (100,)}).nodes].count("cond") == 1


def _lengths_if(cond_input: bool):
    """An If whose branches give sequences of 1 and 2 tensors: its condition an input, or computed from x."""
    then = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["o"])], "then", [], [seq("o")])
    other = helper.make_graph([helper.make_node("SequenceConstruct", ["x", "x"], ["o"])], "else", [], [seq("o")])
    nodes = [helper.make_node("If", ["c"], ["s"], then_branch=then, else_branch=other, name="pick")]
    inputs = [ten("x", F, [100])]
    if cond_input:
        inputs.append(ten("c", B, []))
    else:
        nodes[:0] = [helper.make_node("ReduceSum", ["x"], ["t"], keepdims=0),
                     helper.make_node("Less", ["t", "zero"], ["c"])]
    return _model(nodes, inputs, [seq("s")], [helper.make_tensor("zero", F, [], [0.0])])


def test_an_if_giving_sequences_of_different_lengths_converts_per_value_of_its_condition_input():
    x = _floats(100)
    loaded = agree(_lengths_if(True), [{"x": x, "c": np.array(v)} for v in (True, False)])
    assert loaded.value_inputs == ["c"]


def test_an_if_giving_sequences_of_different_lengths_on_a_computed_condition_is_refused():
    with pytest.raises(UnsupportedOpError, match=r"'pick' \(If.*sequence of 1 tensor; else: a sequence of 2 tensors"):
        hwonnx.load(_lengths_if(False)).run([_floats(100)])


# --- misuse: clear errors naming the node ----------------------------------------------------------------------------
def test_a_sequence_fed_to_add_is_an_error_naming_the_node():
    graph = helper.make_graph([helper.make_node("SequenceConstruct", ["x"], ["s"]),
                               helper.make_node("Add", ["s", "x"], ["y"], name="adder")],
                              "g", [ten("x", F, [2])], [ten("y", F, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)  # checker refuses it
    with pytest.raises(InvalidArgumentError, match=r"'adder' \(Add.*input 0 \('s'\) is a sequence of 1 tensor"):
        backend.prepare(model)


def test_a_tensor_fed_where_a_sequence_is_needed_is_an_error_naming_the_node():
    graph = helper.make_graph([helper.make_node("SequenceLength", ["x"], ["n"], name="len")], "g",
                              [ten("x", F, [2])], [ten("n", I, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(InvalidArgumentError, match=r"'len' \(SequenceLength.*is a tensor; SequenceLength takes a seq"):
        backend.prepare(model)


def test_sequence_at_out_of_range_is_an_error_naming_the_node():
    model = _model([helper.make_node("SequenceAt", ["s", "p"], ["y"], name="at")],
                   [seq("s", F), ten("p", I, [])], [ten("y", F, [1])])
    loaded = hwonnx.load(model)
    np.testing.assert_array_equal(loaded.run([[np.float32([1]), np.float32([2])], np.array(-2)])[0], [1])
    for p in (2, -3):
        with pytest.raises(InvalidArgumentError, match=rf"'at' \(SequenceAt.*position {p} is out of range for a "
                                                       r"sequence of 2 tensors \(it must be in \[-2, 1\]\)"):
            loaded.run([[np.float32([1]), np.float32([2])], np.array(p)])


def test_an_empty_optional_read_is_an_error_naming_the_node():
    ot = helper.make_tensor_type_proto(F, [2])
    model = _model([helper.make_node("OptionalGetElement", ["o"], ["y"], name="get")], [opt("o", ot)],
                   [ten("y", F, [2])])
    loaded = hwonnx.load(model)
    np.testing.assert_array_equal(loaded.run([np.float32([1, 2])])[0], [1, 2])
    with pytest.raises(InvalidArgumentError, match=r"'get' \(OptionalGetElement.*is an empty optional"):
        loaded.run([None])


def test_a_loop_carrying_a_sequence_that_cannot_unroll_is_refused():
    body = helper.make_graph([helper.make_node("SequenceInsert", ["s_in", "x"], ["s_out"]),
                              helper.make_node("Identity", ["c"], ["c_out"])],
                             "body", [ten("i", I, []), ten("c", B, []), seq("s_in", F)],
                             [ten("c_out", B, []), seq("s_out", F)])
    model = _model([helper.make_node("SequenceEmpty", [], ["e"]),
                    helper.make_node("Loop", ["m", "", "e"], ["s"], body=body, name="grow")],
                   [ten("m", I, []), ten("x", F, [3])], [seq("s", F)])
    with pytest.raises(UnsupportedOpError, match=r"'grow' \(Loop.*loop-carried value 0 \('e'\) is a sequence of 0 "
                                                 r"tensors.*more than 64"):
        hwonnx.load(model).run([np.array(100, np.int64), _floats(3)])
