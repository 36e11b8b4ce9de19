"""Gradients through graph control flow: a train step captured by to_static whose model branches or loops on its
values (cond and while_loop nodes, differentiated by autograd/rules_control.py) gives the gradients of the same step
run eagerly (Python control flow on the tape) and of float64 finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import nn

F32 = np.float32
DEVICES = ["cpu"] + (["opencl:0"] if hw.device.is_available("opencl") else [])


class Branchy(nn.Layer):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.relu = nn.Linear(4, 8), nn.Linear(8, 1), nn.ReLU()

    def forward(self, x):
        if x.mean() > 0.5:
            x = self.relu(self.fc1(x))
        else:
            x = self.fc1(x) * 2.0
        return self.fc2(x)


def _grads(net) -> list:
    return [p.grad.numpy().copy() for p in net.parameters()]


@pytest.mark.parametrize("dev", DEVICES)
def test_a_captured_train_step_through_a_branch_has_the_eager_gradients(dev):
    with hw.device_guard(dev):
        net = Branchy()

        @hw.jit.to_static
        def step(x):
            loss = (net(x) ** 2).mean()
            loss.backward()
            return loss

        rng = np.random.default_rng(3)
        for shift in (1.0, 0.0, 1.0):
            x = hw.to_tensor((rng.standard_normal((3, 4)) * 0.1 + shift).astype(F32))
            net.clear_gradients()
            (net(x) ** 2).mean().backward()
            want = _grads(net)
            net.clear_gradients()
            step(x)
            for g, w in zip(_grads(net), want):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        assert step.cache_info()["traces"] == 1


def _settle(a, w, it_max):
    """Numpy float64 twin of `settle` below, for finite differences."""
    x, it = a * w, 0
    while (x * x).sum() > 0.05 and it < it_max:
        x = x * 0.7 + 0.01 * w
        it += 1
    return (x * w).sum()


def test_a_loop_until_a_tolerance_has_the_gradients_of_finite_differences():
    w = hw.create_parameter([3], "float32")
    start = np.array([0.5, -0.3, 0.8])
    w.set_value(hw.to_tensor(start.astype(F32)))

    def settle(a):
        x, it = a * w, 0
        while (x * x).sum() > 0.05 and it < 30:
            x = x * 0.7 + 0.01 * w
            it += 1
        return (x * w).sum()

    @hw.jit.to_static
    def step(a):
        loss = settle(a)
        loss.backward()
        return loss

    for a in ([2.0, 1.0, -1.5], [0.1, 0.1, 0.1], [5.0, -4.0, 3.0]):
        w.clear_grad()
        loss = step(hw.to_tensor(np.array(a, F32)))
        eps, av = 1e-6, np.array(a)
        fd = [(_settle(av, start + eps * e, 30) - _settle(av, start - eps * e, 30)) / (2 * eps) for e in np.eye(3)]
        np.testing.assert_allclose(w.grad.numpy(), fd, rtol=2e-4, atol=1e-6)
        np.testing.assert_allclose(loss.numpy(), _settle(av, start, 30), rtol=1e-5)
    graph = next(iter(step.cache_info()["graphs"].values()))
    assert step.cache_info()["traces"] == 1 and [n.op for n in graph.nodes].count("while_loop") >= 2


def test_while_loop_gradients_reach_its_start_and_the_values_it_reads():
    """y = x * c^n with n the iterations until |y| > 10: dy/dx = c^n, dy/dc = n x c^(n-1)."""
    x = hw.create_parameter([1], "float32")
    c = hw.create_parameter([1], "float32")

    @hw.jit.to_static
    def step():
        y = hw.static.nn.while_loop(lambda v: hw.abs(v).sum() < 10.0, lambda v: [v * c], [x * 1.0])[0]
        y.sum().backward()
        return y

    for xv, cv in ((1.0, 3.0), (0.5, 2.0), (-2.0, 1.5)):
        x.set_value(hw.to_tensor(np.array([xv], F32)))
        c.set_value(hw.to_tensor(np.array([cv], F32)))
        x.clear_grad(), c.clear_grad()
        y = step().numpy()[0]
        n = 0
        while abs(xv * cv ** n) < 10:
            n += 1
        assert y == pytest.approx(xv * cv ** n, rel=1e-5)
        assert x.grad.numpy()[0] == pytest.approx(cv ** n, rel=1e-5)
        assert c.grad.numpy()[0] == pytest.approx(n * xv * cv ** (n - 1), rel=1e-5)


def test_a_model_with_a_data_dependent_loop_trains_as_it_does_eagerly():
    def build():
        layer = nn.Linear(2, 2)
        layer.weight.set_value(hw.to_tensor(np.array([[0.3, -0.2], [0.1, 0.4]], F32)))
        layer.bias.set_value(hw.to_tensor(np.zeros(2, F32)))
        return layer

    def run(layer, x):
        h = layer(x)
        k = 0
        while hw.abs(h).max() < 1.0 and k < 5:
            h = layer(h) + x
            k += 1
        return (h ** 2).mean()

    eager_layer, static_layer = build(), build()
    eager_opt = hw.optimizer.SGD(0.05, parameters=eager_layer.parameters())
    static_opt = hw.optimizer.SGD(0.05, parameters=static_layer.parameters())

    @hw.jit.to_static
    def step(x):
        loss = run(static_layer, x)
        loss.backward()
        static_opt.step()
        static_opt.clear_grad()
        return loss

    x = hw.to_tensor(np.array([[0.2, 0.1], [0.05, -0.1]], F32))
    losses = []
    for _ in range(6):
        want = run(eager_layer, x)
        want.backward()
        eager_opt.step()
        eager_opt.clear_grad()
        got = step(x)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
        losses.append(float(got.numpy()))
    np.testing.assert_allclose(static_layer.weight.numpy(), eager_layer.weight.numpy(), rtol=1e-5, atol=1e-7)
    assert losses[-1] < losses[0]
