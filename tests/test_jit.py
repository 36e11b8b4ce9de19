"""hwadapter.jit: tracing into the IR, one trace per input signature, results equal to eager and numpy."""
from __future__ import annotations

import gc
import json
import weakref

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hwadapter as hw
from hwadapter.graph import Graph
from hwadapter.api import reference
from hwadapter.jit import _key

DEVICES = ["cpu:0"] + (["opencl:0"] if hw.device.is_available("opencl") else [])
RNG = np.random.default_rng(9)


def _arr(*shape):
    return RNG.standard_normal(shape).astype("float32")


def _gelu(x):
    return reference.KERNELS["gelu"](x)


# --- the issue's example: traced == eager == numpy ----------------------------------------------------------------
@pytest.mark.parametrize("dev", DEVICES)
def test_issue_example_equals_eager_and_numpy(dev):
    @hw.jit.to_static
    def block(x, w, b):
        return hw.nn.functional.gelu(x @ w + b).sum(axis=-1)

    xa, wa, ba = _arr(4, 8), _arr(8, 5), _arr(5)
    x, w, b = (hw.to_tensor(a, device=dev) for a in (xa, wa, ba))
    y = block(x, w, b)
    assert str(y.device) == dev and y.shape == (4,) and y.dtype == np.float32
    eager = block.__wrapped__(x, w, b).numpy()
    np.testing.assert_allclose(y.numpy(), eager, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y.numpy(), _gelu(xa @ wa + ba).sum(axis=-1), rtol=1e-4, atol=1e-4)
    g = hw.jit.get_graph(block, x, w, b)
    assert [n.op for n in g.nodes] == ["matmul", "add", "gelu", "sum"]
    assert g.inputs == ["x", "w", "b"] and g.values[g.outputs[0]].shape == (4,)


# --- the trace cache -----------------------------------------------------------------------------------------------
def test_one_trace_per_signature_shapes_dtypes_and_non_tensor_values():
    calls = []

    @hw.jit.to_static
    def f(x, k=1):
        calls.append(x.shape)
        return x * k

    a, b = hw.to_tensor(_arr(2, 3)), hw.to_tensor(_arr(2, 3))
    np.testing.assert_allclose(f(a).numpy(), a.numpy())
    np.testing.assert_allclose(f(b).numpy(), b.numpy())  # same signature: no new trace
    assert len(calls) == 1
    f(hw.to_tensor(_arr(3, 3)))  # new shape
    f(a.astype("float64"))  # new dtype
    np.testing.assert_allclose(f(a, k=3).numpy(), a.numpy() * 3, rtol=1e-6)  # new non-tensor value
    f(a, k=3)
    assert len(calls) == 4 and f.cache_info()["traces"] == 4
    f(a, k=3.0)  # 3 and 3.0 are equal but not the same argument: float is traced apart
    assert len(calls) == 5
    assert f.__name__ == "f" and f.__wrapped__ is not None  # functools.wraps


def test_unhashable_non_tensor_argument_is_a_clear_error():
    @hw.jit.to_static
    def f(x, table):
        return x

    with pytest.raises(hw.InvalidArgumentError, match="unhashable") as err:
        f(hw.to_tensor(_arr(2)), np.ones(3))
    assert "to_tensor" in err.value.fix
    f(hw.to_tensor(_arr(2)), [1, 2])  # a list of numbers is a key by value


def test_clear_cache_traces_again_and_sees_new_closure_values():
    w = hw.to_tensor(np.full((2,), 2.0, "float32"))

    @hw.jit.to_static
    def f(x):
        return x * w

    x = hw.to_tensor(np.ones(2, "float32"))
    assert f(x).numpy().tolist() == [2.0, 2.0]
    w = hw.to_tensor(np.full((2,), 5.0, "float32"))
    assert f(x).numpy().tolist() == [2.0, 2.0]  # captured at trace time (documented)
    f.clear_cache()
    assert f(x).numpy().tolist() == [5.0, 5.0]


# --- methods, closures, scalars, multiple outputs ------------------------------------------------------------------
class _Linear:
    def __init__(self, w, b):
        self.w, self.b = hw.to_tensor(w), hw.to_tensor(b)
        self.traces = 0

    @hw.jit.to_static
    def forward(self, x, relu=True):
        self.traces += 1
        y = x @ self.w + self.b
        return hw.nn.functional.relu(y) if relu else y


def test_methods_trace_per_instance_with_their_weights_as_constants():
    wa, ba, xa = _arr(3, 4), _arr(4), _arr(2, 3)
    m1, m2 = _Linear(wa, ba), _Linear(-wa, ba)
    x = hw.to_tensor(xa)
    np.testing.assert_allclose(m1.forward(x).numpy(), np.maximum(xa @ wa + ba, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m2.forward(x).numpy(), np.maximum(xa @ -wa + ba, 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m1.forward(x, relu=False).numpy(), xa @ wa + ba, rtol=1e-5, atol=1e-6)
    m1.forward(x)
    assert (m1.traces, m2.traces) == (2, 1)
    g = hw.jit.get_graph(m1.forward, x)
    assert g.inputs == ["x"] and len(g.constants) == 2
    assert any(np.array_equal(c, wa) for c in g.constants.values())
    assert _Linear.forward.__name__ == "forward"


def test_closure_tensors_and_tensors_made_inside_become_constants():
    wa = _arr(3, 3)
    w = hw.to_tensor(wa)

    def f(x):
        return (x @ w) + hw.ones((3,)) + w  # w used twice: one constant

    x = hw.to_tensor(_arr(3, 3))
    g = hw.jit.get_graph(f, x)
    assert g.inputs == ["x"]
    consts = list(g.constants.values())
    assert sum(np.array_equal(c, wa) for c in consts) == 1 and any(np.array_equal(c, np.ones(3)) for c in consts)
    np.testing.assert_allclose(hw.jit.to_static(f)(x).numpy(), f(x).numpy(), rtol=1e-6)


def test_python_scalars_are_constants_of_the_tensors_dtype():
    def f(x):
        return (x * 2 + 0.5) / 4

    x = hw.to_tensor(np.arange(4, dtype="float64"))
    g = hw.jit.get_graph(f, x)
    assert sorted(float(c) for c in g.constants.values()) == [0.5, 2.0, 4.0]
    assert all(c.dtype == np.float64 and c.shape == () for c in g.constants.values())
    np.testing.assert_array_equal(hw.jit.to_static(f)(x).numpy(), (np.arange(4.0) * 2 + 0.5) / 4)


@pytest.mark.parametrize("dev", DEVICES)
def test_multiple_outputs_tuple_list_and_split(dev):
    @hw.jit.to_static
    def f(x):
        a, b = hw.split(x, 2, axis=1)
        return (a.exp(), [b.sum(), x])

    xa = _arr(3, 4)
    x = hw.to_tensor(xa, device=dev)
    out = f(x)
    assert isinstance(out, tuple) and isinstance(out[1], list)
    np.testing.assert_allclose(out[0].numpy(), np.exp(xa[:, :2]), rtol=1e-5)
    np.testing.assert_allclose(out[1][0].numpy(), xa[:, 2:].sum(), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[1][1].numpy(), xa)
    assert all(str(t.device) == dev for t in (out[0], out[1][0], out[1][1]))


# --- control flow ----------------------------------------------------------------------------------------------------
def test_shape_dependent_control_flow_is_traced_per_shape():
    @hw.jit.to_static
    def f(x):
        y = x
        for _ in range(len(x)):  # unrolled: one multiply per row
            y = y * 2
        if x.ndim == 2 and x.shape[1] > 2:
            y = y.sum(axis=1)
        return y

    a, b = _arr(3, 4), _arr(2, 2)
    np.testing.assert_allclose(f(hw.to_tensor(a)).numpy(), (a * 8).sum(axis=1), rtol=1e-5)
    np.testing.assert_allclose(f(hw.to_tensor(b)).numpy(), b * 4, rtol=1e-6)
    g = hw.jit.get_graph(f, hw.to_tensor(a))
    assert [n.op for n in g.nodes] == ["mul", "mul", "mul", "sum"]


def _value_if(x):
    if x.sum() > 0:  # VALUE-IF-LINE
        return x
    return -x


def _line(marker: str) -> int:
    return next(i for i, text in enumerate(open(__file__), 1) if marker in text and "_line(" not in text)


@pytest.mark.parametrize("read", ["bool", "float", "int", "item", "numpy", "index"])
def test_reading_values_while_tracing_is_a_tracing_error_naming_the_line(read):
    def f(x):
        s = x.sum()
        if read == "bool":
            return x if bool(s) else -x  # READ-LINE
        if read == "float":
            return x * float(s)  # READ-LINE
        if read == "int":
            return x * int(s)  # READ-LINE
        if read == "item":
            return x * s.item()  # READ-LINE
        if read == "numpy":
            return x * s.numpy()  # READ-LINE
        return x[s.astype("int64")]  # READ-LINE

    with pytest.raises(hw.TracingError) as err:
        hw.jit.to_static(f)(hw.to_tensor(_arr(3)))
    message = str(err.value)
    lines = [i for i, text in enumerate(open(__file__), 1) if "# READ-LINE" in text]
    assert any(f"{__file__}:{n} " in message for n in lines), message
    assert "hw.where" in err.value.fix and "hw.static.nn.cond" in err.value.fix


def test_a_value_dependent_if_is_converted_and_one_a_lambda_hides_names_the_user_line():
    static = hw.jit.to_static(_value_if)
    for sign in (1.0, -1.0):
        x = hw.to_tensor(np.full(3, sign, "float32"))
        np.testing.assert_allclose(static(x).numpy(), _value_if(x).numpy())
    assert static.cache_info()["traces"] == 1
    pick = lambda x: x if bool(x.sum() > 0) else -x  # noqa: E731  LAMBDA-LINE: no source to convert
    with pytest.raises(hw.TracingError, match=rf"test_jit.py:{_line('LAMBDA-LINE')} ") as err:
        hw.jit.to_static(pick)(hw.to_tensor(_arr(3)))
    assert "Python bool" in str(err.value) and isinstance(err.value, hw.HwAdapterError)


def test_where_is_the_traceable_choice():
    @hw.jit.to_static
    def f(x):
        return hw.where(x > 0, x, x * 0.1)

    xa = _arr(5)
    np.testing.assert_allclose(f(hw.to_tensor(xa)).numpy(), np.where(xa > 0, xa, xa * np.float32(0.1)), rtol=1e-6)


def test_symbolic_tensors_print_without_values_and_nested_to_static_inlines():
    seen = []

    @hw.jit.to_static
    def inner(x):
        return x + 1

    @hw.jit.to_static
    def outer(x):
        seen.append(repr(x))
        return inner(x) * 2

    x = hw.to_tensor(_arr(2))
    np.testing.assert_allclose(outer(x).numpy(), (x.numpy() + 1) * 2, rtol=1e-6)
    assert "traced %x" in seen[0] and inner.cache_info()["traces"] == 0
    assert [n.op for n in hw.jit.get_graph(outer, x).nodes] == ["add", "mul"]


def test_mixing_devices_is_still_an_error_while_tracing():
    if "opencl:0" not in DEVICES:
        pytest.skip("needs a second device")
    w = hw.to_tensor(_arr(2), device="opencl:0")

    def f(x):
        return x + w

    with pytest.raises(hw.InvalidArgumentError, match="different devices"):
        hw.jit.get_graph(f, hw.to_tensor(_arr(2)))


def test_returning_no_tensor_is_a_tracing_error():
    with pytest.raises(hw.TracingError, match="must return a tensor"):
        hw.jit.get_graph(lambda x: x.shape[0], hw.to_tensor(_arr(2)))


# --- the traced graph as IR ------------------------------------------------------------------------------------------
def test_traced_graph_is_valid_prints_and_round_trips_through_json():
    w = hw.to_tensor(_arr(4, 4))

    def f(x, b):
        return hw.nn.functional.relu(x @ w + b) * 3

    g = hw.jit.get_graph(f, hw.to_tensor(_arr(2, 4)), hw.to_tensor(_arr(4)))
    assert g.validate() is g
    text = str(g)
    assert "graph(%x : float32[2,4], %b : float32[4])" in text
    assert "= matmul(%x, %c0) : float32[2,4]" in text and "const %c0 : float32[4,4]" in text
    back = Graph.from_json(json.loads(json.dumps(g.to_json())))
    assert back == g and back.hash() == g.hash()
    np.testing.assert_array_equal(back.constants["c0"], w.numpy())


def test_same_function_traced_twice_hashes_alike_and_other_shapes_do_not():
    def f(x):
        return (x * x).mean(axis=0)

    a = hw.jit.get_graph(f, hw.to_tensor(_arr(3, 2)))
    b = hw.jit.get_graph(f, hw.to_tensor(_arr(3, 2)))
    c = hw.jit.get_graph(f, hw.to_tensor(_arr(4, 2)))
    assert a.hash() == b.hash() != c.hash()


@pytest.mark.parametrize("dev", DEVICES)
def test_reference_executor_path_gives_the_same_results(dev, monkeypatch):
    """hw.jit.executor runs graphs through the reference executor when hwadapter.graph has no partition."""
    import hwadapter.graph as graph_pkg
    w = hw.to_tensor(_arr(4, 3), device=dev)

    def f(x):
        return hw.nn.functional.gelu(x @ w * 0.5).sum(axis=0), x

    x = hw.to_tensor(_arr(2, 4), device=dev)
    g = hw.jit.get_graph(f, x)
    expected = [t.numpy() for t in f(x)]
    monkeypatch.delattr(graph_pkg, "partition")
    assert getattr(graph_pkg, "partition", None) is None
    out = hw.jit.executor(g, x.device)([x])
    assert [str(t.device) for t in out] == [dev, dev]
    for got, want in zip(out, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_many_retraces_are_announced_once(caplog):
    @hw.jit.to_static
    def f(x, step):
        return x + step

    x = hw.to_tensor(np.zeros(2, "float32"))
    with caplog.at_level("WARNING", logger="hwadapter"):
        for step in range(20):
            assert f(x, step).numpy().tolist() == [step, step]
    warned = [r for r in caplog.records if "traced 16 times" in r.getMessage()]
    assert len(warned) == 1 and "as tensors" in warned[0].getMessage()


@pytest.mark.parametrize("dev", DEVICES)
def test_warm_calls_run_the_generated_plan_and_equal_eager(dev):
    """Every call after the first runs the plan's generated function; each equals eager on new input values."""
    ws = [hw.to_tensor(_arr(16, 16) / 4, device=dev) for _ in range(3)]

    @hw.jit.to_static
    def mlp(x):
        for w in ws:
            x = hw.nn.functional.relu(x @ w + 0.1)
        return x, x.sum(axis=-1)

    for k in range(3):
        xa = _arr(2, 16)
        x = hw.to_tensor(xa, device=dev)
        ys = mlp(x)
        for y, e in zip(ys, mlp.__wrapped__(x)):
            assert str(y.device) == dev
            np.testing.assert_allclose(y.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ys[1].numpy(), ys[0].numpy().sum(-1), rtol=1e-5, atol=1e-5)
    (entry,) = {id(e): e for e in mlp._cache.values()}.values()
    plan = entry.runner.__self__  # the Plan's bound run
    assert plan.straight.source.startswith("def plan(staged):")


def test_a_concrete_index_tensor_in_a_traced_gather_becomes_a_constant():
    data = np.arange(20, dtype=np.float32).reshape(5, 4)
    index = hw.to_tensor(np.array([4, 0, 2]))

    @hw.jit.to_static
    def pick(x):
        return hw.gather(x, index, axis=0) * 2.0

    np.testing.assert_array_equal(pick(hw.to_tensor(data)).numpy(), data[[4, 0, 2]] * 2)


@pytest.mark.skipif(not hw.device.is_available("opencl"), reason="needs a second device (opencl:0)")
def test_an_eager_gather_with_the_index_on_another_device_is_refused():
    x = hw.to_tensor(np.ones((3, 2), np.float32), device="opencl:0")
    with pytest.raises(hw.InvalidArgumentError, match="gather"):
        hw.gather(x, hw.to_tensor(np.array([0, 1])), axis=0)


class _Scale:
    def __init__(self):
        self.w = hw.to_tensor(np.float32(3.0))

    @hw.jit.to_static
    def f(self, x):
        return x * self.w


def test_a_method_of_a_temporary_instance_runs_on_it():
    """`Scale().f(x)`: the instance would die before the call if the bound method held it only weakly."""
    x = hw.to_tensor(_arr(2, 2))
    for _ in range(3):  # traced on the first, the trace cache on the others; each instance new
        np.testing.assert_allclose(_Scale().f(x).numpy(), x.numpy() * 3.0, rtol=1e-6)
    m = _Scale()
    m.f(x)
    m.f(x)
    assert m.f.cache_info()["traces"] == 1  # a lasting instance keeps its traces
    assert hw.jit.get_graph(m.f, x).inputs == ["x"]


@pytest.mark.parametrize("spec", [None, "x", 3, [((-1, 3), "float32")], [((2, 3), "float128")], [((2.5,), "float32")],
                                  [object()]])
def test_save_with_a_bad_input_spec_says_what_it_must_be(tmp_path, spec):
    pytest.importorskip("onnx")
    with pytest.raises(hw.errors.InvalidArgumentError, match="input_spec") as err:
        hw.jit.save(lambda x: x + 1, str(tmp_path / "f.onnx"), input_spec=spec)
    assert err.value.fix


def test_a_function_that_catches_the_tracing_error_is_refused_not_traced_wrong():
    """`try: if x.sum() > 0: ... except Exception:` would swallow the TracingError and record the handler's branch
    for every later call; the trace is refused instead."""
    def f(x):
        try:
            if float(x.sum()) > 0:
                return x * 1.0
        except Exception:  # noqa: BLE001 - what a user writes, and what the trace must not take for an answer
            pass
        return -x

    g = hw.jit.to_static(f)
    x = hw.to_tensor(np.array([1.0, 2.0], np.float32))
    with pytest.raises(hw.errors.TracingError, match="caught this error"):
        g(x)


@settings(max_examples=25, deadline=None)
@given(threshold=st.floats(-3, 3), catch=st.sampled_from([Exception, RuntimeError, hw.errors.TracingError]),
       values=st.lists(st.floats(-2, 2, width=32), min_size=1, max_size=4))
def test_traced_functions_that_catch_errors_around_value_branches_refuse_or_match_eager(threshold, catch, values):
    def f(x):
        try:
            branch = bool(x.max() > threshold)
        except catch:
            branch = False
        return x * 2.0 if branch else x - 1.0

    x = hw.to_tensor(np.array(values, np.float32))
    try:
        traced = hw.jit.to_static(f)(x).numpy()
    except hw.errors.TracingError:
        return  # refused: fine
    np.testing.assert_array_equal(traced, f(x).numpy())


# --- the trace cache: keyed by what a number is, and bounded ------------------------------------------------------
def test_nan_argument_is_traced_once_and_signed_zeros_twice():
    """A float argument is keyed by its bits: nan equals no nan (so a dict key by value retraced every call), and
    0.0 == -0.0 (so one trace served both, although x / s tells them apart)."""
    @hw.jit.to_static
    def f(x, s):
        return x / s

    x = hw.to_tensor(np.ones(2, "float32"))
    for _ in range(5):
        assert np.isnan(f(x, float("nan")).numpy()).all()
    assert f.cache_info()["traces"] == 1
    with np.errstate(divide="ignore"):
        for s in (0.0, -0.0, np.float32(-0.0)):
            np.testing.assert_array_equal(f(x, s).numpy(), np.float32(1) / np.float32(s))
    assert f.cache_info()["traces"] == 4  # nan, 0.0, -0.0 and the float32 -0.0 (another type)
    assert _key("f", "a", complex(0, -0.0)) != _key("f", "a", complex(0, 0.0))
    assert _key("f", "a", float("nan")) == _key("f", "a", float("nan"))


@pytest.mark.parametrize("dev", DEVICES)
def test_trace_cache_keeps_the_most_recently_called_and_frees_the_rest(dev, caplog):
    """With cache_size=3, ten signatures keep three traces (the most recently called), warn once, and the dropped
    traces are freed: their graphs are garbage and, on a device with its own memory, their constants given back."""
    big = 1 << 16

    @hw.jit.to_static(cache_size=3)
    def f(x, k):
        return x + hw.full((big,), float(k), "float32").to(dev)[:2]  # a constant of `big` floats per trace

    x = hw.to_tensor(np.zeros(2, "float32"), device=dev)
    f(x, 0)
    stats = hw.device.memory_stats(dev)
    graphs = [weakref.ref(g) for g in f.cache_info()["graphs"].values()]
    with caplog.at_level("WARNING", logger="hwadapter"):
        for k in range(1, 10):
            assert f(x, k).numpy().tolist() == [k, k]
            assert f(x, 1).numpy().tolist() == [1, 1]  # kept: called after every other trace
            graphs += [weakref.ref(g) for g in f.cache_info()["graphs"].values()]
    info = f.cache_info()
    assert info["traces"] == 3 and info["dropped"] == 7 and info["cache_size"] == 3
    assert len([r for r in caplog.records if "cache_size" in r.getMessage()]) == 1
    del info
    gc.collect()
    assert len({id(r()) for r in graphs if r() is not None}) == 3
    if "allocated_bytes" in stats:
        assert hw.device.memory_stats(dev)["allocated_bytes"] <= stats["allocated_bytes"] + 2 * big * 4 + 4096
    assert f(x, 1).numpy().tolist() == [1, 1] and f.cache_info()["dropped"] == 7


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_cache_size_must_be_a_positive_int(bad):
    with pytest.raises(hw.errors.InvalidArgumentError, match="cache_size"):
        hw.jit.to_static(lambda x: x, cache_size=bad)


# --- a seeded fuzz of jit.save's arguments -------------------------------------------------------------------------
class _Affine:
    def __init__(self):
        self.w = hw.to_tensor(np.full(3, 2, "float32"))

    @hw.jit.to_static
    def f(self, x):
        return x * self.w + 1


def _save_pool(tmp_path):
    """jit.save's arguments, good and bad: functions, paths, input specs and names."""
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")

    def raises(x):
        raise ValueError("the user's own bug")

    def two(x, y):
        return x + y

    fns = {"plain": lambda x: hw.nn.functional.relu(x) + 1, "static": hw.jit.to_static(lambda x: x * 2),
           "method": _Affine().f, "two args": two, "raises": raises, "returns an int": lambda x: 3,
           "returns None": lambda x: None, "returns a list": lambda x: [x, x + 1], "not callable": 42,
           "a string": "relu", "returns its input": lambda x: x, "a class": _Affine}
    paths = [tmp_path / "m.onnx", str(tmp_path / "s.onnx"), tmp_path / "adir", tmp_path / "afile" / "m.onnx",
             "/nonexistent/m.onnx", "", None, 123, b"/tmp/bytes.onnx", "/proc/m.onnx", tmp_path / "nul\0.onnx"]
    specs = [None, [], [((2, 3), "float32")], [((2, 3), "float32")] * 2, [((-1, 3), "float32")],
             [((10 ** 6, 10 ** 6), "float32")], [((2 ** 70,), "float32")], [((2, 3), "complex64")],
             [((2, 3), "nope")], [(("a", 3), "float32")], [((2.5, 3), "float32")], [((1,) * 70, "float32")],
             [hw.to_tensor(np.ones((2, 3), "float32"))], [np.ones((2, 3), "int32")], ["str"], [((2, 3),)],
             {"x": ((2, 3), "float32")}, ((3,), "float32"), [((3,), "float32")], [((), "float32")],
             [np.ones((2, 3), dtype=object)], [((2, 3), None)], [(True, "float32")]]
    names = [None, "m", 123, "", "a" * 5000, "bad\0name", "ünï"]
    return fns, paths, specs, names


def _same_in_onnxruntime(path, fn, spec, rng):
    """The saved model, run by onnxruntime on random inputs of the spec, gives what `fn` gives eagerly."""
    ort = pytest.importorskip("onnxruntime")
    examples = [hw.jit._example(s, i) for i, s in enumerate(spec)]
    arrays = [np.asarray(rng.standard_normal(e.shape) * 4).astype(e.dtype) for e in examples]
    eager = fn(*[hw.to_tensor(a) for a in arrays])
    eager = [t.numpy() for t in (eager if isinstance(eager, (list, tuple)) else [eager])]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {i.name: a for i, a in zip(session.get_inputs(), arrays)})
    for g, e in zip(got, eager, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)


def test_seeded_fuzz_of_jit_save_arguments(tmp_path):
    """Random mixes of jit.save's arguments: each writes a model onnx's checker accepts and onnxruntime computes
    like eager, or raises a hwadapter error; never another exception."""
    pytest.importorskip("onnx")
    import onnx
    rng = np.random.default_rng(2222)
    fns, paths, specs, names = _save_pool(tmp_path)
    keys = list(fns)
    failures, outcomes = [], {"saved": 0, "refused": 0}
    for case in range(150):
        which = keys[rng.integers(len(keys))]
        fn, path = fns[which], paths[rng.integers(len(paths))]
        spec, name = specs[rng.integers(len(specs))], names[rng.integers(len(names))]
        what = f"fn={which}, path={path!r}, input_spec={str(spec)[:80]}, name={str(name)[:20]!r}"
        try:
            got = hw.jit.save(fn, path, input_spec=spec, name=name)
        except BaseException as err:  # noqa: BLE001 - what the fuzz looks for
            own = which == "raises" and str(err) == "the user's own bug"  # the function's own error, unchanged
            if own or (isinstance(err, hw.errors.HwAdapterError) and str(err).strip()):
                outcomes["refused"] += 1
            else:
                failures.append(f"{what}: raised {type(err).__name__}: {str(err)[:200]}")
            continue
        outcomes["saved"] += 1
        onnx.checker.check_model(onnx.load(got))
        _same_in_onnxruntime(got, fns[which], spec, rng)
    assert not failures, f"{len(failures)} of 150 cases:\n" + "\n".join(failures[:15])
    assert outcomes["saved"] >= 5 and outcomes["refused"] >= 50, outcomes
