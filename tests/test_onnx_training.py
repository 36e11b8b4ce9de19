"""ONNX training ops against onnx's reference evaluator: BatchNormalization with training_mode=1 (batch statistics,
running averages) and the ai.onnx.preview.training optimizers past their first step (onnx's node cases only feed
T = 0), one converted graph serving every step; and the training ops still refused, each with its reason."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import hwadapter.onnx as hwonnx  # noqa: E402
from hwadapter.api.errors import InvalidArgumentError  # noqa: E402
from hwadapter.onnx.convert import UnsupportedOpError  # noqa: E402

TRAINING = "ai.onnx.preview.training"
RNG = np.random.default_rng(23)
_ELEM = {np.dtype(np.float16): TensorProto.FLOAT16, np.dtype(np.float32): TensorProto.FLOAT,
         np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.int64): TensorProto.INT64,
         np.dtype(np.int32): TensorProto.INT32, np.dtype(np.bool_): TensorProto.BOOL}


def _model(node, feeds: dict, out_dtypes, opsets=(("", 15),)):
    """A one-node model whose inputs are `feeds` ({name: array}, their dtypes and shapes), its first outputs of
    `out_dtypes` (shapes undeclared)."""
    inputs = [helper.make_tensor_value_info(n, _ELEM[a.dtype], a.shape) for n, a in feeds.items()]
    outputs = [helper.make_tensor_value_info(o, _ELEM[np.dtype(d)], None) for o, d in zip(node.output, out_dtypes)]
    graph = helper.make_graph([node], "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def _check(model, feeds: dict, rtol: float):
    """hwadapter's outputs equal onnx's reference evaluator's (values; dtypes as the operator's types say)."""
    got = hwonnx.load(model).run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.astype(np.float64), np.asarray(w, np.float64), rtol=rtol, atol=rtol * 1e-2)
    return got


# --- BatchNormalization, training_mode=1 ---------------------------------------------------------------------------
def _bn_feeds(shape, dtype=np.float32, param_dtype=None):
    c = shape[1]
    p = np.dtype(param_dtype or dtype)
    return {"x": (RNG.standard_normal(shape) * 3 + 1).astype(dtype), "s": RNG.standard_normal(c).astype(p),
            "b": RNG.standard_normal(c).astype(p), "mean": RNG.standard_normal(c).astype(p),
            "var": RNG.random(c).astype(p) + 0.5}


def _bn(**attrs):
    return helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y", "rmean", "rvar"],
                            name="bn", training_mode=1, **attrs)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5), (2, 2, 3, 2, 2)])
def test_batchnorm_training_normalises_with_the_batch_statistics_and_updates_the_running_ones(shape):
    feeds = _bn_feeds(shape)
    y, rmean, rvar = _check(_model(_bn(momentum=0.7, epsilon=1e-3), feeds, [np.float32] * 3), feeds, rtol=1e-5)
    axes = (0,) + tuple(range(2, len(shape)))
    x64 = feeds["x"].astype(np.float64)
    batch_var = x64.var(axis=axes)  # the population (biased) variance, for Y and the running average alike
    np.testing.assert_allclose(rvar, feeds["var"] * 0.7 + batch_var * 0.3, rtol=1e-5)
    assert y.dtype == rmean.dtype == rvar.dtype == np.float32


def test_batchnorm_training_with_only_y_and_float64_running_statistics():
    feeds = _bn_feeds((3, 4, 2), param_dtype=np.float64)
    feeds["s"], feeds["b"] = feeds["s"].astype(np.float32), feeds["b"].astype(np.float32)
    node = _bn()
    got = _check(_model(node, feeds, [np.float32, np.float64, np.float64]), feeds, rtol=1e-5)
    assert [g.dtype for g in got] == [np.float32, np.float64, np.float64]  # running outputs keep input_mean's type
    only_y = helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y"], training_mode=1)
    (y,) = hwonnx.load(_model(only_y, feeds, [np.float32])).run(feeds)
    np.testing.assert_array_equal(y, got[0])


def test_batchnorm_training_of_float16_takes_statistics_in_float32():
    feeds = _bn_feeds((8, 2, 16, 16), np.float16)
    feeds["x"] = (feeds["x"] * 40).astype(np.float16)  # squares past float16's range: float16 statistics overflow
    y, rmean, rvar = hwonnx.load(_model(_bn(), feeds, [np.float16] * 3)).run(feeds)
    x = feeds["x"].astype(np.float64)
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    want = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) * feeds["s"][:, None, None].astype(
        np.float64) + feeds["b"][:, None, None]
    assert y.dtype == np.float16 and np.isfinite(y).all()
    np.testing.assert_allclose(y, want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(rvar, feeds["var"] * 0.9 + var * 0.1, rtol=2e-3)


def test_batchnorm_refuses_training_outputs_it_cannot_convert_exactly():
    feeds = _bn_feeds((2, 3, 4))
    old = helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y", "m", "v", "sm", "sv"],
                           name="bn9")
    with pytest.raises(UnsupportedOpError, match=r"node 'bn9' \(BatchNormalization, opset 9\).*opset 14 on") as info:
        hwonnx.load(_model(old, feeds, [np.float32], opsets=(("", 9),))).graph()
    assert "opset 14" in info.value.fix
    inference = helper.make_node("BatchNormalization", ["x", "s", "b", "mean", "var"], ["y", "m", "v"], name="bn0")
    with pytest.raises(UnsupportedOpError, match="running-statistics outputs with training_mode=0"):
        hwonnx.load(_model(inference, feeds, [np.float32])).graph()


# --- optimizers ------------------------------------------------------------------------------------------------------
def _optimizer(op, names: str, shapes, dtype=np.float32, **attrs):
    """(node, feeds) for `op` over tensors of `shapes`: inputs R, T, then each of `names`' letters per tensor."""
    ins, feeds = ["R", "T"], {"R": np.array(0.1, dtype), "T": np.array(0, np.int64)}
    for letter in names:
        for k, shape in enumerate(shapes):
            name = f"{letter}{k}"
            ins.append(name)
            feeds[name] = RNG.standard_normal(shape).astype(dtype)
            if letter == "H":  # an accumulated square
                feeds[name] = np.abs(feeds[name])
    outs = [f"{letter}{k}_new" for letter in names if letter != "G" for k in range(len(shapes))]
    return helper.make_node(op, ins, outs, name="opt", domain=TRAINING, **attrs), feeds


_OPTIMIZERS = [
    ("Adagrad", "XGH", {"norm_coefficient": 0.01, "decay_factor": 0.3, "epsilon": 1e-4}),
    ("Adam", "XGVH", {"norm_coefficient": 0.01, "norm_coefficient_post": 0.02, "alpha": 0.8, "beta": 0.9,
                      "epsilon": 1e-4}),
    ("Momentum", "XGV", {"norm_coefficient": 0.01, "alpha": 0.9, "beta": 0.5, "mode": "standard"}),
    ("Momentum", "XGV", {"norm_coefficient": 0.01, "alpha": 0.9, "beta": 0.5, "mode": "nesterov"}),
]


@pytest.mark.parametrize("op, names, attrs", _OPTIMIZERS, ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_an_optimizer_step_matches_the_reference_at_every_step_count_with_one_converted_graph(op, names, attrs,
                                                                                            dtype):
    # two tensors at float32; one at float64, since onnx's reference rounds Adam's multi-tensor results to float32
    shapes = [(3,), (2, 4)] if dtype == np.float32 else [(2, 4)]
    node, feeds = _optimizer(op, names, shapes, dtype, **attrs)
    model = _model(node, feeds, [dtype] * len(node.output), opsets=((TRAINING, 1),))  # imports no default-domain opset
    hwonnx.load(model).graph()  # T is read at run time: the graph needs no value of it
    for step in (0, 1, 5):  # T = 0 skips the bias correction (Adam) and uses beta = 1 (Momentum)
        feeds["T"] = np.array(step, np.int64)
        # at float64, 1e-7: onnx's reference reads attributes as numpy float32 scalars, so its 1 - alpha is rounded
        # to float32 (hwadapter's is exact: the float32 attribute's value, subtracted in float64)
        got = _check(model, feeds, rtol=1e-5 if dtype == np.float32 else 1e-7)
        assert all(g.dtype == dtype for g in got)


def test_an_optimizer_takes_a_float64_rate_for_float32_tensors_and_omitted_trailing_outputs():
    node, feeds = _optimizer("Adam", "XGVH", [(4,)], alpha=0.5, beta=0.75)
    feeds["R"], feeds["T"] = np.array(0.05, np.float64), np.array(3, np.int64)
    del node.output[1:]  # X_new only
    (x_new,) = hwonnx.load(_model(node, feeds, [np.float32], opsets=((TRAINING, 1),))).run(feeds)
    g, v, h, x = feeds["G0"], feeds["V0"], feeds["H0"], feeds["X0"]
    v_new, h_new = 0.5 * v + 0.5 * g, 0.75 * h + 0.25 * g * g
    rate = 0.05 * np.sqrt(1 - 0.75 ** 3) / (1 - 0.5 ** 3)
    np.testing.assert_allclose(x_new, x - rate * v_new / (np.sqrt(h_new) + 1e-6), rtol=1e-5)


@pytest.mark.parametrize("mutate, error, says", [
    (lambda n, f: n.input.pop(), UnsupportedOpError, "it has 5 inputs; Adam takes R, T and then 4 lists"),
    (lambda n, f: f.update(X0=f["X0"].astype(np.int32)), UnsupportedOpError, "its X is int32"),
    (lambda n, f: f.update(V0=f["V0"].astype(np.float64)), UnsupportedOpError, "input 'V0' (a V) is float64"),
    (lambda n, f: f.update(R=np.ones(2, np.float32)), UnsupportedOpError, "its input R has shape (2,)"),
    (lambda n, f: f.update(T=np.array(1, np.int32)), UnsupportedOpError, "its input T is int32"),
    (lambda n, f: n.output.append("extra"), UnsupportedOpError, "it has 4 outputs; Adam makes at most 3 here"),
    (lambda n, f: n.input.__setitem__(3, ""), UnsupportedOpError, "an input its conversion needs is omitted"),
])
def test_a_malformed_optimizer_node_is_an_error_naming_the_node(mutate, error, says):
    node, feeds = _optimizer("Adam", "XGVH", [(3,)])
    mutate(node, feeds)
    feeds = {k: v for k, v in feeds.items() if k in node.input}
    with pytest.raises(error) as info:
        hwonnx.load(_model(node, feeds, [np.float32], opsets=((TRAINING, 1),))).graph()
    assert "node 'opt' (Adam, opset 1)" in str(info.value) and says in str(info.value), str(info.value)
    assert info.value.fix


def test_momentum_s_attributes_are_required_and_checked():
    node, feeds = _optimizer("Momentum", "XGV", [(3,)], alpha=0.9, beta=1.0, norm_coefficient=0.0, mode="heavy")
    with pytest.raises(InvalidArgumentError, match="attribute 'mode' is 'heavy'; it must be one of 'standard', "):
        hwonnx.load(_model(node, feeds, [np.float32] * 2, opsets=((TRAINING, 1),))).graph()
    del node.attribute[:]
    with pytest.raises(InvalidArgumentError, match="node 'opt' \\(Momentum, opset 1\\): attribute '.*' is missing"):
        hwonnx.load(_model(node, feeds, [np.float32] * 2, opsets=((TRAINING, 1),))).graph()


# --- what stays refused ------------------------------------------------------------------------------------------
def test_gradient_is_refused_on_load_with_its_reason():
    node = helper.make_node("Gradient", ["x"], ["dy_dx"], name="grad", domain=TRAINING, xs=["x"], y="y")
    square = helper.make_node("Mul", ["x", "x"], ["y"])
    graph = helper.make_graph([square, node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("dy_dx", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(TRAINING, 1)])
    with pytest.raises(UnsupportedOpError, match=f"Gradient \\(domain {TRAINING}, opset 1; first at node 'grad'\\): "
                                                 "it differentiates the part of the model's graph"):
        hwonnx.load(model)


def test_training_dropout_with_a_non_zero_ratio_is_refused_and_with_ratio_0_is_the_identity():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], name="drop")
    feeds = {"x": x, "r": np.array(0.5, np.float32), "t": np.array(True)}
    model = _model(node, feeds, [np.float32, np.bool_], opsets=(("", 13),))
    with pytest.raises(UnsupportedOpError, match="non-zero ratio drops at random, and hwadapter has no random"):
        hwonnx.load(model).run(feeds)
    y, mask = hwonnx.load(model).run({**feeds, "r": np.array(0.0, np.float32)})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == np.bool_ and mask.all()
