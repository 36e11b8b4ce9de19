"""Graphs that branch and loop: cond and while_loop nodes (hwadapter.api.control) in the IR, plans and the reference
executor; hw.static.nn.cond / while_loop eagerly and under to_static, checked against numpy and against eager runs."""
from __future__ import annotations

import json

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import profiler
from hwadapter.api.errors import InvalidArgumentError, LoopLimitError, TracingError
from hwadapter.api.ir import Graph, Node, Value
from hwadapter.graph import partition
from hwadapter.graph.reference import run as reference_run
from control_models import Branchy, nested

F32, BOOL, I64 = np.dtype("float32"), np.dtype("bool"), np.dtype("int64")
DEVICES = ["cpu"] + (["opencl:0"] if hw.device.is_available("opencl") else [])


def _v(name, shape=(4,), dtype=F32):
    return Value(name, tuple(shape), np.dtype(dtype))


def _branches():
    """then: x * y; else: x + 10 (a constant of its own)."""
    then = Graph([Node("m", "mul", ("x", "y"), ("o",))], {"x": _v("x"), "y": _v("y"), "o": _v("o")}, ["x", "y"],
                 ["o"])
    other = Graph([Node("a", "add", ("x", "c"), ("o",))], {"x": _v("x"), "y": _v("y"), "c": _v("c"), "o": _v("o")},
                  ["x", "y"], ["o"], {"c": np.full(4, 10, F32)})
    return then, other


def cond_graph():
    """r = x * y if sum(x) > 0 else x + 10."""
    then, other = _branches()
    return Graph([Node("s", "sum", ("x",), ("s",), {"axis": (0,), "keepdim": False}),
                  Node("gt", "greater", ("s", "z"), ("p",)),
                  Node("c", "cond", ("p", "x", "y"), ("r",), {"then": then, "else": other})],
                 {"x": _v("x"), "y": _v("y"), "s": _v("s", ()), "z": _v("z", ()), "p": _v("p", (), BOOL),
                  "r": _v("r")}, ["x", "y"], ["r"], {"z": np.array(0, F32)})


def loop_graph(limit=None):
    """(i, x) -> while i < n: (i + 1, x * 2), n an input."""
    vals = {"i": _v("i", (), I64), "x": _v("x"), "n": _v("n", (), I64)}
    test = Graph([Node("lt", "less", ("i", "n"), ("p",))], {**vals, "p": _v("p", (), BOOL)}, ["i", "x", "n"], ["p"])
    body = Graph([Node("inc", "add", ("i", "one"), ("i2",)), Node("dbl", "add", ("x", "x"), ("x2",))],
                 {**vals, "one": _v("one", (), I64), "i2": _v("i2", (), I64), "x2": _v("x2")}, ["i", "x", "n"],
                 ["i2", "x2"], {"one": np.array(1, I64)})
    return Graph([Node("w", "while_loop", ("i", "x", "n"), ("io", "xo"),
                       {"cond": test, "body": body, "carried": 2, "max_iters": limit})],
                 {**vals, "io": _v("io", (), I64), "xo": _v("xo")}, ["i", "x", "n"], ["io", "xo"])


# --- the IR ------------------------------------------------------------------------------------------------------
def test_control_graphs_validate_and_round_trip_through_json_and_files(tmp_path):
    for g in (cond_graph(), loop_graph(7)):
        g.validate()
        back = Graph.from_json(json.loads(json.dumps(g.to_json())))
        assert back == g and back.hash() == g.hash() and back.signature() == g.signature()
        g.save(tmp_path / "g.json")
        assert Graph.load(tmp_path / "g.json") == g
    text = str(cond_graph())
    assert "cond(%p, %x, %y)" in text and "    then:" in text and "    else:" in text and "mul(%x, %y)" in text


def test_a_branch_change_changes_the_hash():
    g, h = cond_graph(), cond_graph()
    h.nodes[2].attrs["then"].nodes[0].op = "sub"
    assert g.hash() != h.hash() and g.signature() != h.signature()


@pytest.mark.parametrize("break_it, says", [
    (lambda g: setattr(g.nodes[2], "inputs", ("s", "x", "y")), "predicate must be a bool"),
    (lambda g: g.nodes[2].attrs["else"].values.update(o=_v("o", (5,))), "else graph"),
    (lambda g: g.nodes[2].attrs.pop("else"), "'else' (a graph) is missing"),
    (lambda g: g.nodes[2].attrs.update(then="x * y"), "not a graph"),
])
def test_a_malformed_cond_is_refused_naming_the_node(break_it, says):
    g = cond_graph()
    break_it(g)
    with pytest.raises(InvalidArgumentError, match="node 'c'") as err:
        g.validate()
    assert says in str(err.value)


def test_a_loop_body_that_changes_a_carried_shape_is_refused():
    g = loop_graph()
    body = g.nodes[0].attrs["body"]
    body.values["x2"] = _v("x2", (8,))
    body.nodes[1] = Node("dbl", "concat", ("x", "x"), ("x2",), {"axis": 0})
    with pytest.raises(InvalidArgumentError, match="carries"):
        g.validate()


# --- plans ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dev", DEVICES)
def test_a_planned_cond_takes_either_branch_as_numpy_does(dev):
    plan = partition(cond_graph(), [dev, "cpu"])
    y = np.full(4, 2, F32)
    for x in (np.arange(4, dtype=F32), -np.arange(4, dtype=F32), np.zeros(4, F32)):
        got = plan.run([x, y])[0].numpy()
        np.testing.assert_array_equal(got, x * y if x.sum() > 0 else x + 10)
    assert plan.how["c"] == "control"


@pytest.mark.parametrize("dev", DEVICES)
def test_a_planned_loop_runs_its_body_until_its_cond_is_false(dev):
    plan = partition(loop_graph(), [dev, "cpu"])
    x = np.arange(4, dtype=F32)
    for start, n in ((0, 3), (5, 2), (0, 0)):
        i, out = (t.numpy() for t in plan.run([np.array(start, I64), x, np.array(n, I64)]))
        steps = max(n - start, 0)
        assert i == max(start, n) and np.array_equal(out, x * 2 ** steps)


def test_the_reference_executor_runs_control_nodes_as_plans_do():
    x, y = np.arange(4, dtype=F32), np.full(4, 3, F32)
    for sign in (1, -1):
        want = partition(cond_graph(), ["cpu"]).run([sign * x, y])[0].numpy()
        got = reference_run(cond_graph(), {"x": sign * x, "y": y})["r"].numpy()
        np.testing.assert_array_equal(got, want)
    out = reference_run(loop_graph(), {"i": np.array(1, I64), "x": x, "n": np.array(4, I64)})
    assert out["io"].numpy() == 4 and np.array_equal(out["xo"].numpy(), x * 8)


def test_a_loop_past_its_limit_stops_with_an_error_naming_it():
    plan = partition(loop_graph(limit=5), ["cpu"])
    args = [np.array(0, I64), np.ones(4, F32), np.array(5, I64)]
    assert plan.run(args)[0].numpy() == 5  # exactly the limit: fine
    with pytest.raises(LoopLimitError, match="'w'.*5 iterations"):
        plan.run([args[0], args[1], np.array(6, I64)])
    hw.configure(max_loop_iters=3)
    try:
        with pytest.raises(LoopLimitError, match="max_loop_iters"):
            partition(loop_graph(), ["cpu"]).run(args)
    finally:
        hw.configure(max_loop_iters=1_000_000)


def test_the_profile_shows_the_predicate_read_and_the_branch_steps():
    plan = partition(cond_graph(), ["cpu"])
    x, y = np.arange(4, dtype=F32), np.ones(4, F32)
    plan.run([x, y])
    with profiler.profile() as prof:
        plan.run([x, y])
    names = {r["op"] for r in prof.table()}
    assert "read" in names and "mul" in names and "add" not in names  # the else branch did not run


def test_a_step_after_a_cond_never_writes_over_what_a_branch_handed_out():
    """A branch may hand out its own constant (or its input): the outer plan must not write in place over the
    cond's result (neg here, whose input dies there and shares no graph input), or the constant changes run by
    run."""
    then = Graph([], {"x": _v("x"), "k": _v("k")}, ["x"], ["k"], {"k": np.full(4, 7, F32)})
    other = Graph([], {"x": _v("x")}, ["x"], ["x"])
    g = Graph([Node("d", "add", ("x", "x"), ("x2",)),
               Node("s", "sum", ("x2",), ("s",), {"axis": (0,), "keepdim": False}),
               Node("gt", "greater", ("s", "z"), ("p",)),
               Node("c", "cond", ("p", "x2"), ("r",), {"then": then, "else": other}),
               Node("n", "neg", ("r",), ("o",))],
              {"x": _v("x"), "x2": _v("x2"), "s": _v("s", ()), "z": _v("z", ()), "p": _v("p", (), BOOL),
               "r": _v("r"), "o": _v("o")}, ["x"], ["o"], {"z": np.array(0, F32)})
    plan = partition(g, ["cpu"])
    for _ in range(3):
        np.testing.assert_array_equal(plan.run([np.ones(4, F32)])[0].numpy(), np.full(4, -7, F32))
        np.testing.assert_array_equal(plan.run([-np.ones(4, F32)])[0].numpy(), np.full(4, 2, F32))


# --- hw.static.nn eagerly ------------------------------------------------------------------------------------------
def test_eager_cond_and_while_loop_are_python_control_flow():
    x = hw.to_tensor(np.arange(3, dtype=F32))
    assert np.array_equal(hw.static.nn.cond(x.sum() > 1, lambda: x * 2, lambda: x).numpy(), np.arange(3) * 2)
    assert hw.static.nn.cond(True, None, None) is None
    i, s = hw.static.nn.while_loop(lambda i, s: i < 4, lambda i, s: [i + 1, s + i], [hw.to_tensor(0),
                                                                                   hw.to_tensor(0)])
    assert i.numpy() == 4 and s.numpy() == 6


@pytest.mark.parametrize("call, says", [
    (lambda: hw.static.nn.cond(hw.to_tensor([1.0]), lambda: 1, lambda: 2), "bool tensor of one element"),
    (lambda: hw.static.nn.while_loop(lambda i: i < 3, lambda i: [i, i], [hw.to_tensor(0)]), "must return 1 values"),
    (lambda: hw.static.nn.while_loop(lambda i: i < 3, lambda i: i + 1, []), "non-empty"),
    (lambda: hw.static.nn.while_loop(lambda i: i < 3, lambda i: i, [hw.to_tensor(0)], max_iters=4), "4 iterations"),
])
def test_eager_misuse_is_a_clear_error_naming_this_file(call, says):
    with pytest.raises((InvalidArgumentError, LoopLimitError), match=says) as err:
        call()
    assert "test_control_flow.py" in str(err.value)


# --- under to_static -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dev", DEVICES)
def test_one_trace_takes_both_branches_and_matches_eager(dev):
    with hw.device_guard(dev):
        net = Branchy()
        static = hw.jit.to_static(net.forward)
        rng = np.random.default_rng(0)
        with hw.no_grad():
            for shift in (1.0, -1.0, 2.0, 0.0):
                x = hw.to_tensor((rng.standard_normal((3, 4)) + shift).astype(F32))
                np.testing.assert_allclose(static(x).numpy(), net(x).numpy(), rtol=1e-6, atol=1e-6)
        info = static.cache_info()
        assert info["traces"] == 1
        (graph,) = info["graphs"].values()
        assert [n.op for n in graph.nodes].count("cond") == 1


def test_a_traced_loop_until_a_tolerance_matches_numpy():
    @hw.jit.to_static
    def newton(a):
        def more(x, it):
            return (hw.abs(x * x - a).max() > 1e-5) & (it < 50)
        return hw.static.nn.while_loop(more, lambda x, it: [0.5 * (x + a / x), it + 1], [a, hw.to_tensor(0)])

    with hw.no_grad():
        for v in (2.0, 30.0, 1.0):
            a = np.array([v, v + 3], F32)
            x, it = newton(hw.to_tensor(a))
            np.testing.assert_allclose(x.numpy(), np.sqrt(a), rtol=1e-6)
            assert 0 <= it.numpy() < 50
    assert newton.cache_info()["traces"] == 1


def test_a_loop_nested_in_a_branch_and_a_branch_in_a_loop_trace_and_run():
    static = hw.jit.to_static(nested)
    xs = np.array([1.0, 2.0], F32)
    x = hw.to_tensor(xs)
    with hw.no_grad():
        for n in (0, 1, 4, 5):
            want = xs * 0.0
            if n > 0:
                want = xs.copy()
                for i in range(n):
                    want = want + xs if i % 2 == 0 else want - 1.0
            np.testing.assert_allclose(static(x, hw.to_tensor(n)).numpy(), want)
            np.testing.assert_allclose(nested(x, hw.to_tensor(n)).numpy(), want)  # eagerly too
    assert static.cache_info()["traces"] == 1


def test_branches_of_different_shapes_are_an_error_at_the_users_line():
    @hw.jit.to_static
    def f(x):
        return hw.static.nn.cond(x.sum() > 0, lambda: x, lambda: hw.concat([x, x]))

    with pytest.raises(TracingError, match=r"test_control_flow.py:\d+.*output 0 is float32\[2\] from true_fn"):
        f(hw.to_tensor(np.ones(2, F32)))


def test_a_traced_loop_that_never_ends_stops_at_the_limit_naming_the_users_line():
    @hw.jit.to_static
    def spin(x):
        return hw.static.nn.while_loop(lambda v: v.sum() > -1.0, lambda v: v + 1.0, [x], max_iters=20)[0]

    with pytest.raises(LoopLimitError, match=r"test_control_flow.py:\d+.*20 iterations"):
        spin(hw.to_tensor(np.zeros(2, F32)))


def test_a_body_that_changes_a_loop_variables_shape_is_an_error_at_the_users_line():
    @hw.jit.to_static
    def grow(x):
        return hw.static.nn.while_loop(lambda v: v.sum() < 10.0, lambda v: hw.concat([v, v]), [x])[0]

    with pytest.raises(TracingError, match=r"test_control_flow.py:\d+.*loop variable 0 enters as float32\[2\]"):
        grow(hw.to_tensor(np.ones(2, F32)))


@pytest.mark.skipif(len(DEVICES) < 2, reason="needs a second device (opencl:0)")
def test_a_branch_reading_a_tensor_of_another_device_is_an_error_at_the_users_line():
    other = hw.to_tensor(np.ones(2, F32), device="opencl:0")

    @hw.jit.to_static
    def f(x):
        return hw.static.nn.cond(x.sum() > 0, lambda: x + other, lambda: x)  # OTHER-DEVICE

    line = next(i for i, text in enumerate(open(__file__), 1) if "# OTHER-DEVICE" in text and "next(" not in text)
    with pytest.raises(InvalidArgumentError, match=rf"test_control_flow.py:{line}: op 'add': inputs are on different"):
        f(hw.to_tensor(np.ones(2, F32), device="cpu"))


@pytest.mark.skipif(len(DEVICES) < 2, reason="needs a second device (opencl:0)")
def test_a_branch_is_partitioned_like_any_graph_and_its_device_claims_it():
    then = Graph([Node("m", "mul", ("x", "y"), ("t",)), Node("e", "exp", ("t",), ("u",)),
                  Node("a", "add", ("u", "x"), ("o",))],
                 {"x": _v("x"), "y": _v("y"), "t": _v("t"), "u": _v("u"), "o": _v("o")}, ["x", "y"], ["o"])
    g = Graph([Node("c", "cond", ("p", "x", "y"), ("r",), {"then": then, "else": _branches()[1]})],
              {"p": _v("p", (), BOOL), "x": _v("x"), "y": _v("y"), "r": _v("r")}, ["p", "x", "y"], ["r"])
    plan = partition(g, ["opencl:0", "cpu"])
    step = plan.schedule.steps[0]
    assert step.op == "cond" and set(step.call.then.plan.how.values()) == {"subgraph"}
    x, y = np.arange(4, dtype=F32) / 4, np.full(4, 2, F32)
    np.testing.assert_allclose(plan.run([np.array(True), x, y])[0].numpy(), np.exp(x * y) + x, rtol=1e-5)


def test_the_plans_picture_names_the_branches(tmp_path):
    text = open(partition(cond_graph(), ["cpu"]).save_svg(tmp_path / "plan.svg")).read()
    assert "cond: then 1, else 1" in text
