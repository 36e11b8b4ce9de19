"""The autograd engine's behaviour: accumulation, retain_graph, hw.grad (grad_outputs, allow_unused, create_graph and
second derivatives), grad modes, stop_gradient, detach, in-place changes, float16, refusals, to_static train steps,
and every device's gradients against the CPU's. Oracles: closed-form derivatives, central finite differences
(tests/gradcheck.py) and cpu:0's gradients."""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.nn import functional as F

from gradcheck import check, numeric


def leaf(values, dtype="float64", device=None):
    t = hw.to_tensor(np.asarray(values, dtype), device=device)
    t.stop_gradient = False
    return t


# --- accumulation and retain_graph ------------------------------------------------------------------------------
def test_gradients_accumulate_over_backward_calls_until_cleared():
    x = leaf([1.0, 2.0, 3.0])
    (x * x).sum().backward()
    (x * x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() + 3 * x.numpy() ** 2)
    x.clear_grad()
    assert x.grad is None
    hw.sin(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(x.numpy()))


def test_a_second_backward_needs_retain_graph():
    x = leaf([0.5, -1.5])
    y = (hw.exp(x) * x).sum()
    y.backward(retain_graph=True)
    y.backward()  # retained once: this second pass is allowed, and adds up
    np.testing.assert_allclose(x.grad.numpy(), 2 * (np.exp(x.numpy()) * (1 + x.numpy())))
    with pytest.raises(hw.InvalidArgumentError, match=r"retain_graph=True"):
        y.backward()


def test_a_non_scalar_backward_needs_its_gradient():
    x = leaf([1.0, 2.0])
    with pytest.raises(hw.InvalidArgumentError, match=r"not one element.*Fix: reduce it first"):
        (x * 2).backward()
    (x * 3).backward(hw.to_tensor(np.array([1.0, -1.0])))
    np.testing.assert_allclose(x.grad.numpy(), [3.0, -3.0])


# --- hw.grad ------------------------------------------------------------------------------------------------------
def test_grad_with_grad_outputs_returns_without_accumulating():
    x, w = leaf([[1.0, 2.0], [3.0, 4.0]]), leaf([0.5, -1.0])
    v = np.array([[1.0, 0.0], [2.0, -1.0]])
    gx, gw = hw.grad(x * w, [x, w], grad_outputs=hw.to_tensor(v))
    np.testing.assert_allclose(gx.numpy(), v * w.numpy())
    np.testing.assert_allclose(gw.numpy(), (v * x.numpy()).sum(0))
    assert x.grad is None and w.grad is None
    assert gx.stop_gradient and gw.stop_gradient  # no create_graph: plain values


def test_grad_of_an_input_not_used():
    a, b = leaf([1.0]), leaf([2.0])
    with pytest.raises(hw.InvalidArgumentError, match=r"inputs\[1\].*not used.*allow_unused=True"):
        hw.grad((a * 2).sum(), [a, b])
    ga, gb = hw.grad((a * 2).sum(), [a, b], allow_unused=True)
    assert gb is None and ga.numpy().tolist() == [2.0]


def test_grad_of_an_intermediate_stops_there():
    x = leaf([1.0, 2.0])
    h = x * x
    (gh,) = hw.grad((h * 3).sum(), h)
    np.testing.assert_allclose(gh.numpy(), [3.0, 3.0])
    assert x.grad is None


SECOND = {  # f, its second derivative (elementwise)
    "cube": (lambda x: x ** 3, lambda x: 6 * x),
    "tanh": (hw.tanh, lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2)),
    "sin": (hw.sin, lambda x: -np.sin(x)),
    "exp_div": (lambda x: hw.exp(x) / (x * x + 1.0),
                lambda x: np.exp(x) * ((x * x + 1) ** 2 - 4 * x * (x * x + 1) - 2 * (x * x + 1) + 8 * x * x)
                / (x * x + 1) ** 3),
}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_derivatives(name):
    f, d2 = SECOND[name]
    x = leaf([0.3, -0.7, 1.2])
    (g,) = hw.grad(f(x).sum(), x, create_graph=True)
    assert not g.stop_gradient
    (gg,) = hw.grad(g.sum(), x)
    np.testing.assert_allclose(gg.numpy(), d2(x.numpy()), rtol=1e-10)


def test_softmax_hessian_vector_product_against_finite_differences():
    """d/dx of |J(x)^T c|^2 for softmax: a second derivative through a rule that reuses its forward's output,
    compared with central differences of the first derivative (itself checked against finite differences)."""
    c = hw.to_tensor(np.array([1.0, 2.0, -3.0, 0.5]))
    x0 = np.array([0.3, -0.7, 1.0, 0.1])

    def first(t):
        (g,) = hw.grad((F.softmax(t, -1) * c).sum(), t, create_graph=True)
        return (g * g).sum()
    x = leaf(x0)
    (got,) = hw.grad(first(x), x)

    def value(t):  # the same, forward only (hw.grad inside needs recording on)
        t = t.detach()
        t.stop_gradient = False
        with hw.enable_grad():
            return first(t)
    want, _ = numeric(value, [x0], [np.ones(())], 0, 1e-6)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-8)


def test_backward_of_create_graph_gradients_accumulates_second_derivatives():
    x = leaf([2.0])
    (g,) = hw.grad((x ** 3).sum(), x, create_graph=True)
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [12.0])


# --- grad modes ---------------------------------------------------------------------------------------------------
def test_no_grad_enable_grad_and_set_grad_enabled_as_context_managers():
    x = leaf([1.0])
    with hw.no_grad():
        assert not hw.is_grad_enabled() and (x * 2).stop_gradient
        with hw.enable_grad():
            assert not (x * 2).stop_gradient
        assert (x * 2).stop_gradient
    assert hw.is_grad_enabled()
    with hw.set_grad_enabled(False):
        assert (x * 2).stop_gradient
    assert hw.is_grad_enabled()
    hw.set_grad_enabled(False)  # a plain call sets the mode at once
    try:
        assert not hw.is_grad_enabled() and (x * 2).stop_gradient
    finally:
        hw.set_grad_enabled(True)
    assert hw.is_grad_enabled()


def test_grad_modes_as_decorators():
    x = leaf([1.0])

    @hw.no_grad()
    def nograd(t, depth=0):  # recursion: the inner call must not leave the outer one's mode behind
        return t * 2 if depth == 2 else nograd(t, depth + 1)

    @hw.no_grad
    def bare(t):
        return t * 2

    @hw.set_grad_enabled(False)
    def off(t):
        return t * 2
    assert hw.is_grad_enabled()  # defining a set_grad_enabled decorator changes nothing yet
    assert nograd(x).stop_gradient and bare(x).stop_gradient and off(x).stop_gradient
    assert hw.is_grad_enabled()
    with hw.no_grad():
        @hw.enable_grad()
        def on(t):
            return t * 2
        assert not on(x).stop_gradient
        assert not hw.is_grad_enabled()


def test_grad_mode_is_per_thread():
    seen = []
    with hw.no_grad():
        t = threading.Thread(target=lambda: seen.append(hw.is_grad_enabled()))
        t.start()
        t.join()
    assert seen == [True]


# --- stop_gradient, detach, leaves -------------------------------------------------------------------------------
def test_stop_gradient_defaults_and_integer_tensors():
    assert hw.to_tensor(np.ones(2)).stop_gradient and hw.ones([2]).stop_gradient
    i = hw.to_tensor(np.array([1, 2]))
    assert i.stop_gradient
    with pytest.raises(hw.UnsupportedDTypeError, match=r"int64.*only floating-point.*Fix:"):
        i.stop_gradient = False
    i.stop_gradient = True  # asking for what it already is is fine
    x = leaf([1.0])
    assert not x.stop_gradient and x.is_leaf
    y = x * 2
    assert not y.stop_gradient and not y.is_leaf
    frozen = hw.to_tensor(np.ones(1))
    assert (frozen * x).stop_gradient is False and (frozen * frozen).stop_gradient


def test_stop_gradient_cuts_the_graph():
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    w.stop_gradient = True
    (x * w).sum().backward()
    assert w.grad is None
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 4.0])


def test_detach_shares_values_and_drops_the_tape():
    x = leaf([1.0, 2.0])
    h = x * 3
    d = h.detach()
    assert d.stop_gradient and d.is_leaf and d.grad is None
    np.testing.assert_array_equal(d.numpy(), h.numpy())
    (h * d).sum().backward()  # d is a constant: only the h factor carries a gradient
    np.testing.assert_allclose(x.grad.numpy(), 3 * d.numpy())


# --- in-place changes ---------------------------------------------------------------------------------------------
def test_set_value_on_a_tensor_a_gradient_needs_names_the_op():
    x, w = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    y = x * w
    w.set_value(np.array([5.0, 6.0]))
    with pytest.raises(hw.InvalidArgumentError, match=r"op 'mul'.*changed in place.*Fix:"):
        y.sum().backward()


def test_set_value_after_backward_is_fine():
    x = leaf([1.0, 2.0])
    (x * x).sum().backward()
    with hw.no_grad():
        x.set_value(x - 0.5 * x.grad)
    np.testing.assert_allclose(x.numpy(), [0.0, 0.0])
    assert x.is_leaf and not x.stop_gradient


def test_in_place_add_on_a_non_leaf_keeps_gradients_right():
    x = leaf([1.0, 2.0])
    y = x * 3
    y.add_(x * x)  # y = 3x + x^2
    y.multiply_(x)  # y = 3x^2 + x^3
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * x.numpy() + 3 * x.numpy() ** 2)


def test_in_place_on_a_parameter_with_a_tracked_value_is_refused():
    p = hw.create_parameter([2], "float64", initializer=np.ones(2))
    x = leaf([1.0, 2.0])
    with pytest.raises(hw.InvalidArgumentError, match=r"leaf that needs a gradient.*hw.no_grad"):
        p.set_value(x * 2)


# --- dtypes -------------------------------------------------------------------------------------------------------
def test_float16_gradients_accumulate_in_float32():
    """x feeds two branches; its gradient's contributions add up in float32 and are stored as float16, within
    float16's tolerance of float64 finite differences."""
    x0 = np.array([0.5, 1.5, -2.0, 0.25])
    x = leaf(x0, "float16")
    y = (hw.tanh(x) * x).sum() + (x * x * 0.5).sum()
    y.backward()
    assert x.grad.dtype == hw.float16

    def f(t):
        return (hw.tanh(t) * t).sum() + (t * t * 0.5).sum()
    want, _ = numeric(f, [x0], [np.ones(())], 0, 1e-6)
    np.testing.assert_allclose(x.grad.numpy().astype(np.float64), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("how", ["backward", "grad"])
def test_float16_contributions_add_up_before_rounding(how):
    """Eight contributions of 2**-12 to one float16 element after one of 1 (backward meets the newest first): each
    rounded into a float16 sum the small ones vanish (1 + 2**-12 is 1 in float16); added up in float32 first they
    give 1 + 2**-9, which float16 holds exactly."""
    x = leaf([1.0], "float16")
    total = x * 2.0 ** -12
    for _ in range(7):
        total = total + x * 2.0 ** -12
    total = total + x * 1.0
    if how == "backward":
        total.sum().backward()
        g = x.grad
    else:
        (g,) = hw.grad(total.sum(), x)
    assert g.dtype == hw.float16 and float(g.numpy()[0]) == 1 + 2.0 ** -9


def test_integer_outputs_have_no_gradient():
    x = leaf([1.0, 2.0])
    for y in (hw.argmax(x), hw.cast(x, "int64").sum(), hw.greater_than(x, 1.5)):
        with pytest.raises(hw.UnsupportedDTypeError, match=r"no gradient; only floating-point"):
            y.backward()
        with pytest.raises(hw.UnsupportedDTypeError, match=r"no gradient"):
            hw.grad(y, x)


def test_grad_outputs_of_the_wrong_shape_or_count_are_refused():
    x = leaf([1.0, 2.0])
    y = x * 2
    with pytest.raises(hw.InvalidArgumentError, match=r"shape \[3\].*shape \[2\]"):
        hw.grad(y, x, grad_outputs=hw.to_tensor(np.ones(3)))
    with pytest.raises(hw.InvalidArgumentError, match=r"1 output\(s\) but 2 grad_outputs"):
        hw.grad(y, x, grad_outputs=[hw.to_tensor(np.ones(2))] * 2)
    with pytest.raises(hw.InvalidArgumentError, match=r"not a Tensor"):
        y.backward([1.0, 1.0])


def test_grad_of_a_tensor_that_needs_none_is_refused():
    x = hw.to_tensor(np.ones(2))
    with pytest.raises(hw.InvalidArgumentError, match=r"does not need a gradient.*stop_gradient = False"):
        (x * 2).sum().backward()
    with pytest.raises(hw.InvalidArgumentError, match=r"inputs\[0\].*stop_gradient=True"):
        hw.grad((leaf([1.0]) * 2).sum(), x)


# --- to_static ----------------------------------------------------------------------------------------------------
def _train_devices():
    return ["cpu:0"] + (["opencl:0"] if hw.device.is_available("opencl") else [])


@pytest.mark.parametrize("where", _train_devices())
def test_a_to_static_train_step_equals_the_eager_one(where):
    device = where
    rng = np.random.default_rng(0)
    w0, x0, y0 = (rng.standard_normal(s).astype("float32") for s in ((4, 3), (8, 4), (8, 3)))

    def make():
        return (hw.create_parameter([4, 3], initializer=w0, device=device),
                hw.create_parameter([3], initializer=np.zeros(3, "float32"), device=device, is_bias=True))

    def step(w, b, x, y):
        loss = ((F.linear(x, w, b) - y) ** 2).mean()
        loss.backward()
        with hw.no_grad():
            for p in (w, b):
                p.set_value(p - 0.1 * p.grad)
                p.clear_grad()
        return loss
    we, be = make()
    ws, bs = make()
    static = hw.jit.to_static(lambda x, y: step(ws, bs, x, y))
    x, y = hw.to_tensor(x0, device=device), hw.to_tensor(y0, device=device)
    for _ in range(4):
        eager_loss, static_loss = step(we, be, x, y), static(x, y)
        assert float(eager_loss) == float(static_loss)
    np.testing.assert_array_equal(ws.numpy(), we.numpy())
    np.testing.assert_array_equal(bs.numpy(), be.numpy())
    assert ws.grad is None and static.cache_info()["traces"] == 1


# --- every device against the CPU ---------------------------------------------------------------------------------
def _index(t):
    return hw.to_tensor(np.array([2, 0, 2, 1]), device=t.device)


DEVICE_CASES = {
    "elementwise": (lambda a, b: hw.tanh(a * b) + hw.exp(a) / (b * b + 1.0) - hw.relu(a - b), [(3, 4), (4,)]),
    "matmul": (lambda a, b: hw.matmul(a, b), [(2, 3, 4), (4, 5)]),
    "reductions": (lambda a: hw.sum(a, axis=1) + hw.mean(a, axis=-1) * hw.max(a, axis=1), [(3, 4)]),
    "softmax": (lambda a: F.softmax(a, -1) * F.log_softmax(a, 0), [(3, 4)]),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, [4], w, b), [(3, 4), (4,), (4,)]),
    "conv2d": (lambda a, w, b: F.conv2d(a, w, b, stride=2, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]),
    "pooling": (lambda a: F.max_pool2d(a, 2) * 2.0 + F.avg_pool2d(a, 3, 2, 1)[:, :, :3, :3], [(1, 2, 6, 6)]),
    "gather": (lambda a: hw.gather(a, _index(a), 1), [(3, 4)]),
    "movement": (lambda a: hw.concat([a[::2], hw.pad(a, [0, 0, 1, 1])[:, 1:5]], 0).transpose([1, 0]), [(3, 4)]),
}


def device_grads(device, name, dtype="float32"):
    fn, shapes = DEVICE_CASES[name]
    rng = np.random.default_rng(1)
    ts = [leaf(rng.standard_normal(s), dtype, device) for s in shapes]
    out = fn(*ts)
    cot = hw.to_tensor(rng.standard_normal(out.shape).astype(dtype), device=device)
    return [g.numpy() for g in hw.grad(out, ts, grad_outputs=cot)]


def test_the_device_cases_are_right_on_cpu():
    for name, (fn, shapes) in DEVICE_CASES.items():
        rng = np.random.default_rng(1)
        check(fn, *[rng.standard_normal(s) for s in shapes])


@pytest.mark.parametrize("name", sorted(DEVICE_CASES))
def test_every_device_matches_the_cpu(device, name):
    for got, want in zip(device_grads(device, name), device_grads("cpu:0", name)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} on {device}")


CLONES = Path(__file__).parent / "fixtures" / "clone"


@pytest.fixture(scope="module")
def clone_devices():
    """The reference plugins again under other entry-point names (tests/fixtures/clone: host = the CPU plugin,
    clone = the OpenCL plugin), beside the originals in this process."""
    paths = [str(CLONES / "cpu"), str(CLONES / "opencl")]
    sys.path[:0] = paths
    hw.device.reset_plugins()
    try:
        yield [d for d in ("host:0", "clone:0") if hw.device.is_available(d.split(":")[0])]
    finally:
        for p in paths:
            sys.path.remove(p)
        hw.device.reset_plugins()


def test_the_clone_plugins_match_the_cpu(clone_devices):
    assert "host:0" in clone_devices
    for device in clone_devices:
        for name in DEVICE_CASES:
            for got, want in zip(device_grads(device, name), device_grads("cpu:0", name)):
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{name} on {device}")
