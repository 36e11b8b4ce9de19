"""to_static converts Python control flow on tensors (hwadapter.dy2static): each function is checked against the same
function run eagerly (Python's own `if`, `while`, `for`, `break`, `continue`, `return` on concrete tensors), and
its graph against what the conversion must record (cond and while_loop nodes, or none for Python values)."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import nn
from hwadapter.api.errors import TracingError

F32 = np.float32
DEVICES = ["cpu"] + (["opencl:0"] if hw.device.is_available("opencl") else [])


def _ops(static, *args):
    return [n.op for n in hw.jit.get_graph(static, *args).nodes]


def _same(static, fn, *args):
    """The static function's results equal the eager function's, under no_grad."""
    with hw.no_grad():
        got, want = static(*args), fn(*args)
    got, want = (got, want) if isinstance(got, (tuple, list)) else ((got,), (want,))
    for g, w in zip(got, want):
        g, w = (np.asarray(v.numpy() if hasattr(v, "numpy") else v) for v in (g, w))
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


class Branchy(nn.Layer):
    """The issue's example, written with Python's `if`."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.relu = nn.Linear(4, 8), nn.Linear(8, 2), nn.ReLU()

    def forward(self, x):
        if x.mean() > 0.5:
            x = self.relu(self.fc1(x))
        else:
            x = self.fc1(x)
        return self.fc2(x)


@pytest.mark.parametrize("dev", DEVICES)
def test_the_issues_layer_takes_both_branches_with_one_cached_graph(dev):
    with hw.device_guard(dev):
        net = Branchy()
        static = hw.jit.to_static(net.forward)
        rng = np.random.default_rng(1)
        for shift in (1.0, -1.0, 0.9, 0.0):
            _same(static, net.forward, hw.to_tensor((rng.standard_normal((3, 4)) * 0.1 + shift).astype(F32)))
        info = static.cache_info()
        assert info["traces"] == 1 and [n.op for n in next(iter(info["graphs"].values())).nodes].count("cond") == 1


def test_to_static_on_the_layer_method_converts_it_too():
    net = Branchy()

    class Wrapped(Branchy):
        @hw.jit.to_static
        def forward(self, x):
            if x.mean() > 0.5:
                return self.fc2(self.relu(self.fc1(x)))
            return self.fc2(self.fc1(x))

    w = Wrapped()
    w.set_state_dict(net.state_dict())
    with hw.no_grad():
        for v in (1.0, 0.0):
            x = hw.to_tensor(np.full((2, 4), v, F32))
            np.testing.assert_allclose(w(x).numpy(), net(x).numpy(), rtol=1e-6)


def chain(x):
    if x.sum() > 10:
        y = x * 2
    elif x.sum() > 0:
        y = x + 1
    else:
        y = -x
    return y


def test_if_elif_else_on_tensors():
    static = hw.jit.to_static(chain)
    for v in (5.0, 1.0, -3.0):
        _same(static, chain, hw.to_tensor(np.full(3, v, F32)))
    assert static.cache_info()["traces"] == 1


def by_flag(x, flag):
    if flag:
        return x * 2
    return x - 1


def test_conditions_on_python_values_stay_python():
    static = hw.jit.to_static(by_flag)
    x = hw.to_tensor(np.ones(2, F32))
    for flag in (True, False):
        _same(static, by_flag, x, flag)
        assert "cond" not in _ops(static, x, flag)
    assert static.cache_info()["traces"] == 2  # one per Python value, as arguments are keyed by value


def sqrt_newton(a):
    x, it = a, 0
    while hw.abs(x * x - a).max() > 1e-4 and it < 50:
        x = 0.5 * (x + a / x)
        it += 1
    return x


def test_a_while_on_tensors_until_a_tolerance():
    static = hw.jit.to_static(sqrt_newton)
    for v in (2.0, 50.0, 1.0):
        a = hw.to_tensor(np.array([v, v + 1], F32))
        _same(static, sqrt_newton, a)
        np.testing.assert_allclose(static(a).numpy(), np.sqrt([v, v + 1]), rtol=1e-4)
    assert static.cache_info()["traces"] == 1 and "while_loop" in _ops(static, a)


def power_sum(x, n):
    s = x * 0.0
    for i in range(n):
        s = s + x ** 2 * i
    return s


def test_for_over_a_tensor_range_is_a_loop_and_over_a_python_range_unrolls():
    static = hw.jit.to_static(power_sum)
    x = hw.to_tensor(np.array([1.0, 2.0], F32))
    for n in (0, 1, 4):
        _same(static, power_sum, x, hw.to_tensor(n))
    assert "while_loop" in _ops(static, x, hw.to_tensor(3))
    _same(static, power_sum, x, 3)
    assert "while_loop" not in _ops(static, x, 3)


def skips_and_stops(x, n):
    total = x * 0.0
    i = 0
    while i < n:
        i += 1
        if (x * i).sum() > 20:
            break
        if i % 2 == 0:
            continue
        total = total + x * i
    return total, i


def test_break_and_continue_in_a_tensor_loop():
    static = hw.jit.to_static(skips_and_stops)
    for xs in ([1.0, 1.0], [3.0, 2.0], [0.5, 0.1]):
        for n in (0, 3, 9):
            _same(static, skips_and_stops, hw.to_tensor(np.array(xs, F32)), hw.to_tensor(n))
    assert static.cache_info()["traces"] == 1


def early(x):
    for _ in range(2):
        x = x * 2
    if x.sum() < 0:
        return -x
    if x.max() > 100:
        return x * 0
    return x + 1


def test_early_returns_under_tensor_conditions():
    static = hw.jit.to_static(early)
    for xs in ([1.0, 2.0], [-1.0, -2.0], [50.0, 1.0]):
        _same(static, early, hw.to_tensor(np.array(xs, F32)))
    assert static.cache_info()["traces"] == 1


def guarded_return(x):
    total = x * 0
    try:
        if x.sum() > 0:
            return x * 2
        total = total - x
    finally:
        total = total + 1
    return total


def test_an_early_return_inside_try_and_finally():
    static = hw.jit.to_static(guarded_return)
    for v in (1.0, -1.0):
        _same(static, guarded_return, hw.to_tensor(np.full(2, v, F32)))
    assert static.cache_info()["traces"] == 1


def logic(x):
    if not (x.sum() > 0) or (x.max() > 5 and x.min() > 1):
        return x * 10
    return x


def test_and_or_not_on_tensors():
    static = hw.jit.to_static(logic)
    for xs in ([-1.0, 0.0], [6.0, 2.0], [6.0, 0.5], [1.0, 1.0]):
        _same(static, logic, hw.to_tensor(np.array(xs, F32)))


def helper_with_branch(x):
    if x.sum() > 0:
        return x * 3
    return x


@hw.jit.not_to_static
def opted_out(x):
    if x.sum() > 0:
        return x * 3
    return x


def test_called_functions_are_converted_unless_opted_out():
    def outer(x):
        return helper_with_branch(x) + 1

    static = hw.jit.to_static(outer)
    for v in (1.0, -1.0):
        _same(static, outer, hw.to_tensor(np.full(2, v, F32)))

    def outer_opted(x):
        return opted_out(x) + 1
    line = inspect.getsourcelines(opted_out)[1] + 2  # after its decorator
    with pytest.raises(TracingError, match=rf"test_dy2static.py:{line}"):
        hw.jit.to_static(outer_opted)(hw.to_tensor(np.ones(2, F32)))


def one_branch_only(x):
    if x.sum() > 0:
        y = x * 2
    return y


def test_a_variable_set_in_one_branch_only_is_an_error_at_the_users_line():
    line = inspect.getsourcelines(one_branch_only)[1] + 1
    with pytest.raises(TracingError, match=rf"test_dy2static.py:{line}: 'y' is assigned in only one branch"):
        hw.jit.to_static(one_branch_only)(hw.to_tensor(np.ones(2, F32)))


def bad_inside(x):
    if x.sum() > 0:
        return x + hw.ones([5])
    return x


def test_an_error_inside_a_converted_branch_names_the_users_file_and_line():
    line = inspect.getsourcelines(bad_inside)[1] + 2
    with pytest.raises(Exception) as err:
        hw.jit.to_static(bad_inside)(hw.to_tensor(np.ones(3, F32)))
    frames = [(f.filename, f.lineno) for f in __import__("traceback").extract_tb(err.value.__traceback__)]
    assert (__file__, line) in frames


def test_a_closure_and_the_functions_defaults_are_kept():
    scale = hw.to_tensor(np.array([2.0, 3.0], F32))

    def f(x, shift=1.0):
        if x.sum() > 0:
            x = x * scale
        return x + shift

    static = hw.jit.to_static(f)
    for v in (1.0, -1.0):
        _same(static, f, hw.to_tensor(np.full(2, v, F32)))
