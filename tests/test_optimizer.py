"""hwadapter.optimizer against torch.optim on the same weights and batches: SGD, Momentum, Adam, AdamW, parameter
groups, gradient clipping, accumulation, state_dict round trips, to_static train steps (equal to eager), and bad
input."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import hwadapter as hw
from hwadapter import optimizer as opt
from hwadapter.api.errors import HwAdapterError, InvalidArgumentError, TracingError
from hwadapter.nn import functional as F

DEVICES = ["cpu:0"] + [d for d in ("opencl:0",) if d in hw.device.get_available_device()]
RNG = np.random.default_rng(7)
SHAPES = [(4, 5), (5,), (5, 3), (3,)]
INIT = [RNG.standard_normal(s) * 0.5 for s in SHAPES]
X = RNG.standard_normal((6, 8, 4))  # 6 batches of 8
Y = RNG.standard_normal((6, 8, 3))
TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-10, atol=1e-12)}

# name -> (hwadapter optimizer over params, torch optimizer over params)
CASES = {
    "sgd": (lambda ps: opt.SGD(0.1, parameters=ps, weight_decay=0.01),
            lambda ps: torch.optim.SGD(ps, 0.1, weight_decay=0.01)),
    "momentum": (lambda ps: opt.Momentum(0.05, 0.9, parameters=ps),
                 lambda ps: torch.optim.SGD(ps, 0.05, momentum=0.9)),
    "nesterov": (lambda ps: opt.Momentum(0.05, 0.8, parameters=ps, use_nesterov=True, weight_decay=0.02),
                 lambda ps: torch.optim.SGD(ps, 0.05, momentum=0.8, nesterov=True, weight_decay=0.02)),
    "adam": (lambda ps: opt.Adam(0.02, parameters=ps, weight_decay=0.01),
             lambda ps: torch.optim.Adam(ps, 0.02, weight_decay=0.01)),
    "adam_betas": (lambda ps: opt.Adam(0.01, beta1=0.8, beta2=0.99, epsilon=1e-6, parameters=ps),
                   lambda ps: torch.optim.Adam(ps, 0.01, betas=(0.8, 0.99), eps=1e-6)),
    "adamw": (lambda ps: opt.AdamW(0.02, parameters=ps), lambda ps: torch.optim.AdamW(ps, 0.02, weight_decay=0.01)),
}


def hw_params(dtype="float32", device="cpu:0", names=None):
    names = names or [None] * len(INIT)
    return [hw.create_parameter(s, dtype=dtype, initializer=a.astype(dtype), device=device, name=n)
            for s, a, n in zip(SHAPES, INIT, names)]


def hw_loss(ps, x, y):
    w1, b1, w2, b2 = ps
    return ((F.linear(hw.tanh(F.linear(x, w1, b1)), w2, b2) - y) ** 2).mean()


def torch_params(dtype="float32"):
    return [torch.tensor(a.astype(dtype), requires_grad=True) for a in INIT]


def torch_loss(ps, x, y):
    w1, b1, w2, b2 = ps
    return ((torch.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2).mean()


def batches(dtype, device, steps, start=0):
    return [(hw.to_tensor(X[i % 6].astype(dtype), device=device), hw.to_tensor(Y[i % 6].astype(dtype), device=device))
            for i in range(start, start + steps)]


def train_step(ps, o):
    """One train step of hw_loss over `ps` with optimizer `o` (forward, backward, step, clear), as a function."""
    def step(x, y):
        loss = hw_loss(ps, x, y)
        loss.backward()
        o.step()
        o.clear_grad()
        return loss
    return step


def run_hw(make, dtype="float32", device="cpu:0", steps=10, static=False, each=None, ps=None, start=0):
    """(losses, final weights) of `steps` train steps, eager or as one to_static step; `each(i, o)` runs between."""
    ps = ps or hw_params(dtype, device)
    o = make(ps)
    step = train_step(ps, o)
    fn = hw.jit.to_static(step) if static else step
    losses = []
    for i, (x, y) in enumerate(batches(dtype, device, steps, start)):
        losses.append(float(fn(x, y)))
        if each is not None:
            each(i, o)
    return np.array(losses), [p.numpy() for p in ps]


def run_torch(make, dtype="float32", steps=10, each=None, clip=None):
    ps = torch_params(dtype)
    o = make(ps)
    losses = []
    for i in range(steps):
        loss = torch_loss(ps, torch.tensor(X[i % 6].astype(dtype)), torch.tensor(Y[i % 6].astype(dtype)))
        o.zero_grad()
        loss.backward()
        if clip is not None:
            clip(ps)
        o.step()
        losses.append(loss.item())
        if each is not None:
            each(i, o)
    return np.array(losses), [p.detach().numpy() for p in ps]


def assert_same(a, b, dtype="float32"):
    (la, wa), (lb, wb) = a, b
    np.testing.assert_allclose(la, lb, **TOL[dtype])
    for x, y in zip(wa, wb):
        np.testing.assert_allclose(x, y, **TOL[dtype])


# --- against torch ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_eager_steps_match_torch(name, dtype):
    make, make_torch = CASES[name]
    assert_same(run_hw(make, dtype), run_torch(make_torch, dtype), dtype)


@pytest.mark.parametrize("name", ["sgd", "nesterov", "adam", "adamw"])
def test_to_static_train_step_equals_eager_and_torch(name):
    make, make_torch = CASES[name]
    eager, static = run_hw(make), run_hw(make, static=True)
    np.testing.assert_array_equal(static[0], eager[0])
    for a, b in zip(static[1], eager[1]):
        np.testing.assert_array_equal(a, b)
    assert_same(static, run_torch(make_torch))


def test_captured_step_is_one_graph_with_fused_updates_and_state_inputs():
    ps = hw_params()
    o = opt.Adam(0.01, parameters=ps)
    step = hw.jit.to_static(train_step(ps, o))
    (x, y), = batches("float32", "cpu:0", 1)
    graph = step.get_graph(x, y)
    ops = [n.op for n in graph.nodes]
    assert ops.count("adam_update") == 4
    # parameters, moments, powers of beta and the rate are state inputs, never constants baked in at trace time
    assert len(graph.inputs) == 2 + 4 + 4 * 4 + 1
    assert all(c.size <= 1 for c in graph.constants.values())  # only scalars such as beta, never a tensor of state
    step(x, y)
    assert step.cache_info()["traces"] == 1 and all(p.grad is None for p in ps)


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("name", ["momentum", "adamw"])
def test_state_made_by_a_first_step_inside_a_trace(dev, name):
    make, make_torch = CASES[name]
    assert_same(run_hw(make, device=dev, static=True), run_torch(make_torch))


@pytest.mark.parametrize("dev", DEVICES)
def test_lazy_state_made_eagerly_then_used_by_a_captured_step(dev):
    """Three eager steps make Adam's state; seven captured steps go on from it: torch's ten steps."""
    make, make_torch = CASES["adam"]
    ps = hw_params(device=dev)
    o = make(ps)
    data = batches("float32", dev, 10)
    step = train_step(ps, o)
    static = hw.jit.to_static(step)
    losses = [float(step(*data[i])) for i in range(3)] + [float(static(*data[i])) for i in range(3, 10)]
    assert_same((np.array(losses), [p.numpy() for p in ps]), run_torch(make_torch))


def test_a_schedule_stepping_between_calls_changes_the_captured_step():
    """StepDecay stepped after each call of a to_static step: torch's SGD with StepLR, and no retrace."""
    sched = opt.lr.StepDecay(0.2, step_size=2, gamma=0.5)
    static = run_hw(lambda ps: opt.SGD(sched, parameters=ps), static=True, each=lambda i, o: sched.step())

    def make_torch(ps):
        o = torch.optim.SGD(ps, 0.2)
        o.scheduler = torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)
        return o
    assert_same(static, run_torch(make_torch, each=lambda i, o: o.scheduler.step()))
    assert sched.last_epoch == 10 and sched() == pytest.approx(0.2 * 0.5 ** 5)
    constant = run_hw(lambda ps: opt.SGD(0.2, parameters=ps), static=True)
    assert np.abs(constant[1][0] - static[1][0]).max() > 1e-3  # the schedule did change the captured step


def test_set_lr_reaches_the_captured_step():
    """Rate 0.1, then 0 after the first step (nothing moves), then 0.3 from the fourth: torch setting its group's lr
    at the same points."""
    rates = {0: 0.0, 2: 0.3}

    def each(i, o):
        if i in rates:
            o.set_lr(rates[i])
            assert o.get_lr() == rates[i]

    def each_torch(i, o):
        if i in rates:
            o.param_groups[0]["lr"] = rates[i]
    assert_same(run_hw(lambda ps: opt.SGD(0.1, parameters=ps), steps=5, static=True, each=each),
                run_torch(lambda ps: torch.optim.SGD(ps, 0.1), steps=5, each=each_torch))


# --- groups, decay, clipping, accumulation ---------------------------------------------------------------------
def test_parameter_groups_scale_the_rate_and_override_decay():
    make = lambda ps: opt.Momentum(0.1, 0.9, parameters=[  # noqa: E731
        {"params": ps[:2]}, {"params": ps[2:], "learning_rate": 0.5, "weight_decay": 0.1, "momentum": 0.5}])
    make_torch = lambda ps: torch.optim.SGD([  # noqa: E731
        {"params": ps[:2]}, {"params": ps[2:], "lr": 0.05, "weight_decay": 0.1, "momentum": 0.5}], 0.1, momentum=0.9)
    assert_same(run_hw(make), run_torch(make_torch))


def test_adamw_apply_decay_param_fun_exempts_parameters_by_name():
    ps = hw_params(names=["w1", "b1", "w2", "b2"])
    make = lambda ps: opt.AdamW(0.02, parameters=ps, weight_decay=0.1,  # noqa: E731
                                apply_decay_param_fun=lambda n: n.startswith("w"))
    make_torch = lambda ps: torch.optim.AdamW([  # noqa: E731
        {"params": [ps[0], ps[2]]}, {"params": [ps[1], ps[3]], "weight_decay": 0.0}], 0.02, weight_decay=0.1)
    assert_same(run_hw(make, ps=ps), run_torch(make_torch))


@pytest.mark.parametrize("static", [False, True])
def test_clip_by_global_norm_matches_torch_clip_grad_norm(static):
    make = lambda ps: opt.SGD(0.5, parameters=ps, grad_clip=opt.ClipGradByGlobalNorm(0.05))  # noqa: E731
    clip = lambda ps: torch.nn.utils.clip_grad_norm_(ps, 0.05)  # noqa: E731
    assert_same(run_hw(make, static=static), run_torch(lambda ps: torch.optim.SGD(ps, 0.5), clip=clip))


def test_clip_by_norm_and_by_value_match_torch():
    def per_tensor(ps):
        for p in ps:
            torch.nn.utils.clip_grad_norm_([p], 0.02)
    by_norm = run_hw(lambda ps: opt.SGD(0.5, parameters=ps, grad_clip=opt.ClipGradByNorm(0.02)))
    assert_same(by_norm, run_torch(lambda ps: torch.optim.SGD(ps, 0.5), clip=per_tensor))
    by_value = run_hw(lambda ps: opt.Adam(0.01, parameters=ps, grad_clip=opt.ClipGradByValue(0.01)), static=True)
    clip = lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.01)  # noqa: E731
    assert_same(by_value, run_torch(lambda ps: torch.optim.Adam(ps, 0.01), clip=clip))
    lopsided = opt.ClipGradByValue(max=0.5, min=-0.1)
    (_, g), = lopsided([(None, hw.to_tensor(np.array([-1.0, 0.2, 3.0], "float32")))])
    np.testing.assert_array_equal(g.numpy(), np.array([-0.1, 0.2, 0.5], "float32"))


def test_gradients_add_up_until_clear_grad():
    ps = hw_params()
    o = opt.SGD(0.1, parameters=ps)
    (x1, y1), (x2, y2) = batches("float32", "cpu:0", 2)
    hw_loss(ps, x1, y1).backward()
    hw_loss(ps, x2, y2).backward()
    tp = torch_params()
    (torch_loss(tp, *map(torch.tensor, (X[0].astype("float32"), Y[0].astype("float32")))) +
     torch_loss(tp, *map(torch.tensor, (X[1].astype("float32"), Y[1].astype("float32"))))).backward()
    for p, t in zip(ps, tp):
        np.testing.assert_allclose(p.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-7)
    o.step()
    for p, t in zip(ps, tp):
        np.testing.assert_allclose(p.numpy(), (t - 0.1 * t.grad).detach().numpy(), rtol=1e-5, atol=1e-7)
    o.clear_grad(set_to_zero=True)
    assert all(p.grad is not None and not p.grad.numpy().any() for p in ps)
    o.clear_grad()
    assert all(p.grad is None for p in ps)


def test_parameters_without_a_gradient_are_skipped():
    """An unused parameter and a frozen one (stop_gradient=True, as a layer's trainable=False makes) get no
    gradient: step() leaves them and makes no state for them; unfrozen, the frozen one trains."""
    ps = hw_params()
    unused = hw.create_parameter([2], initializer=np.ones(2, "float32"))
    frozen = ps[3]
    frozen.stop_gradient = True
    o = opt.Adam(0.1, parameters=ps + [unused])
    (x, y), = batches("float32", "cpu:0", 1)
    hw_loss(ps, x, y).backward()
    assert frozen.grad is None
    o.step()
    np.testing.assert_array_equal(unused.numpy(), np.ones(2, "float32"))
    np.testing.assert_array_equal(frozen.numpy(), INIT[3].astype("float32"))
    keys = o.state_dict()
    assert "param_0_moment1" in keys and len(keys) == 12 and not any(k.startswith(("param_3", "param_4")) for k in keys)
    o.clear_grad()
    frozen.stop_gradient = False
    hw_loss(ps, x, y).backward()
    o.step()
    assert np.abs(frozen.numpy() - INIT[3]).max() > 1e-3 and len(o.state_dict()) == 16


# --- state ----------------------------------------------------------------------------------------------------------
def test_state_dict_round_trip_through_save_and_load_resumes_exactly(tmp_path):
    """Five steps, save weights and optimizer (Adam's moments and powers of beta, the schedule), load into fresh
    ones, five more: the same as ten steps without a break."""
    def make(ps):
        o = opt.Adam(opt.lr.CosineAnnealingDecay(0.05, T_max=4), parameters=ps)
        return o
    each = lambda i, o: o._learning_rate.step()  # noqa: E731
    whole = run_hw(make, steps=10, each=each)

    ps = hw_params()
    first = make(ps)
    run_hw(lambda _: first, steps=5, each=each, ps=ps)
    hw.save(first.state_dict(), tmp_path / "opt.hwopt")
    hw.save({str(i): p for i, p in enumerate(ps)}, tmp_path / "w.hwparams")
    ps2 = hw_params()
    for i, t in hw.load(tmp_path / "w.hwparams").items():
        ps2[int(i)].set_value(t)
    second = make(ps2)
    second.set_state_dict(hw.load(tmp_path / "opt.hwopt"))
    assert second.get_lr() == first.get_lr() and second._learning_rate.last_epoch == 5
    rest = run_hw(lambda _: second, steps=5, each=each, ps=ps2, start=5, static=True)
    np.testing.assert_array_equal(rest[0], whole[0][5:])
    for a, b in zip(rest[1], whole[1]):
        np.testing.assert_array_equal(a, b)


def test_set_state_dict_refuses_what_does_not_fit():
    ps = hw_params()
    o = opt.Momentum(0.1, parameters=ps)
    with pytest.raises(InvalidArgumentError, match="param_1_velocity.*shape \\[3\\].*\\[5\\].*Fix:"):
        o.set_state_dict({"param_0_velocity": np.ones((4, 5), "float32"), "param_1_velocity": np.zeros(3, "float32")})
    assert not o._state[id(ps[0])]["velocity"].numpy().any()  # a refused dict loads nothing
    with pytest.raises(InvalidArgumentError, match="param_0_moment1.*Fix:"):
        o.set_state_dict({"param_0_moment1": np.zeros((4, 5), "float32")})
    with pytest.raises(InvalidArgumentError, match="Fix:"):
        o.set_state_dict([1, 2])


# --- bad input --------------------------------------------------------------------------------------------------------
def test_parameters_that_cannot_be_trained_are_refused_with_a_fix():
    w = hw.create_parameter([2, 2])
    frozen = hw.to_tensor(np.ones(2, "float32"))
    ints = hw.to_tensor(np.ones(2, "int64"))
    derived = w * 2
    cases = [([frozen], "stop_gradient=True and is not a parameter"), ([derived], "not a leaf"), ([ints], "int64"),
             ([w, 3.0], "parameters\\[1\\] is a float"), ([], "empty"), (None, "None"), (w, "not a list"),
             ([w, w], "twice"), ([{"params": [w]}, w], "mixes"), ([{"params": [w], "beta1": 0.5}], "beta1"),
             ([{"weight": [w]}], "weight"), ([{"params": []}], "empty")]
    for params, words in cases:
        with pytest.raises(InvalidArgumentError, match=words) as err:
            opt.SGD(0.1, parameters=params)
        assert "Fix:" in str(err.value)


@pytest.mark.parametrize("make, words", [
    (lambda ps: opt.SGD(-0.1, parameters=ps), "learning_rate"),
    (lambda ps: opt.SGD(hw.to_tensor(0.1), parameters=ps), "Tensor"),
    (lambda ps: opt.SGD(0.1, parameters=ps, weight_decay="l2"), "weight_decay"),
    (lambda ps: opt.SGD(0.1, parameters=ps, grad_clip=1.0), "grad_clip"),
    (lambda ps: opt.Momentum(0.1, momentum=-1, parameters=ps), "momentum"),
    (lambda ps: opt.Momentum(0.1, momentum=0, use_nesterov=True, parameters=ps), "use_nesterov"),
    (lambda ps: opt.Adam(0.1, beta1=1.0, parameters=ps), "beta1"),
    (lambda ps: opt.Adam(0.1, beta2=float("nan"), parameters=ps), "beta2"),
    (lambda ps: opt.AdamW(0.1, parameters=ps, apply_decay_param_fun="w"), "apply_decay_param_fun"),
    (lambda ps: opt.ClipGradByGlobalNorm(0), "clip_norm"),
    (lambda ps: opt.ClipGradByValue(1.0, min=2.0), "min"),
])
def test_bad_hyper_parameters_are_refused_with_a_fix(make, words):
    with pytest.raises(HwAdapterError, match=words) as err:
        make(hw_params())
    assert "Fix:" in str(err.value)


def test_rate_changes_inside_a_trace_and_set_lr_under_a_schedule_are_refused():
    ps = hw_params()
    sched = opt.lr.StepDecay(0.1, step_size=1)
    o = opt.SGD(sched, parameters=ps)
    with pytest.raises(InvalidArgumentError, match="schedule"):
        o.set_lr(0.5)

    @hw.jit.to_static
    def bad(x, y):
        loss = hw_loss(ps, x, y)
        loss.backward()
        o.step()
        sched.step()
        return loss
    with pytest.raises(TracingError, match="between calls"):
        bad(*batches("float32", "cpu:0", 1)[0])
    o.clear_grad()
