"""hwadapter.optimizer.lr against paddle.optimizer.lr (paddle is the oracle: the same schedules, stepped the same
way, give the same rates and state dicts), and its bad input."""
from __future__ import annotations

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import optimizer as opt
from hwadapter.api.errors import InvalidArgumentError
from hwadapter.optimizer import lr

paddle = pytest.importorskip("paddle")
plr = paddle.optimizer.lr

# name -> a schedule made from a module (hwadapter's lr or paddle's)
CASES = {
    "step": lambda m: m.StepDecay(0.5, step_size=3, gamma=0.3),
    "multistep": lambda m: m.MultiStepDecay(0.1, milestones=[2, 5, 9], gamma=0.5),
    "cosine": lambda m: m.CosineAnnealingDecay(0.1, T_max=5, eta_min=0.01),
    "cosine_zero_floor": lambda m: m.CosineAnnealingDecay(1.0, T_max=3),
    "warmup_float": lambda m: m.LinearWarmup(0.2, warmup_steps=4, start_lr=0.0, end_lr=0.2),
    "warmup_cosine": lambda m: m.LinearWarmup(m.CosineAnnealingDecay(0.1, T_max=6), warmup_steps=3,
                                              start_lr=0.01, end_lr=0.1),
    "warmup_step": lambda m: m.LinearWarmup(m.StepDecay(0.3, step_size=2), warmup_steps=2, start_lr=0.1,
                                            end_lr=0.3),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rates_and_state_match_paddle_step_by_step(name):
    make = CASES[name]
    ours, theirs = make(lr), make(plr)
    for _ in range(25):  # past several cosine periods and every milestone
        assert ours() == pytest.approx(theirs(), rel=1e-12, abs=1e-15)
        assert ours.last_epoch == theirs.last_epoch
        ours.step()
        theirs.step()
    assert_same_state(ours.state_dict(), theirs.state_dict())


def assert_same_state(ours: dict, theirs: dict):
    assert ours.keys() == theirs.keys()
    for key, value in ours.items():
        if isinstance(value, dict):
            assert_same_state(value, theirs[key])
        else:
            assert value == pytest.approx(theirs[key], rel=1e-12)


@pytest.mark.parametrize("name", ["step", "multistep", "cosine", "warmup_cosine"])
def test_step_to_an_epoch_matches_paddle(name):
    make = CASES[name]
    ours, theirs = make(lr), make(plr)
    for epoch in (7, 2, 11, 0, 4):
        ours.step(epoch)
        theirs.step(epoch)
        assert ours() == pytest.approx(theirs(), rel=1e-12, abs=1e-15)


def test_set_state_dict_resumes_and_reaches_the_optimizer():
    a = lr.LinearWarmup(lr.CosineAnnealingDecay(0.1, T_max=4), warmup_steps=2, start_lr=0.0, end_lr=0.1)
    for _ in range(5):
        a.step()
    state = a.state_dict()
    assert state["last_epoch"] == 5 and state["LinearWarmup_LR"]["last_epoch"] == 3
    b = lr.LinearWarmup(lr.CosineAnnealingDecay(0.1, T_max=4), warmup_steps=2, start_lr=0.0, end_lr=0.1)
    p = hw.create_parameter([2])
    o = opt.SGD(b, parameters=[p])
    o._lr_tensor(p)  # the device-side rate exists: loading the schedule must rewrite it
    b.set_state_dict(state)
    assert b() == a() and o.get_lr() == a()
    assert float(o._lr_tensor(p)) == pytest.approx(a(), rel=1e-7)
    for _ in range(6):
        a.step()
        b.step()
        assert b() == a() and float(o._lr_tensor(p)) == pytest.approx(a(), rel=1e-7)


def test_an_optimizer_reads_its_schedule():
    sched = lr.StepDecay(0.1, step_size=2, gamma=0.5)
    o = opt.Adam(sched, parameters=[hw.create_parameter([3])])
    seen = []
    for _ in range(5):
        seen.append(o.get_lr())
        sched.step()
    np.testing.assert_allclose(seen, [0.1, 0.1, 0.05, 0.05, 0.025])
    o.set_lr_scheduler(lr.MultiStepDecay(1.0, milestones=[1]))
    assert o.get_lr() == 1.0


@pytest.mark.parametrize("make, words", [
    (lambda: lr.StepDecay(-1.0, step_size=2), "learning_rate"),
    (lambda: lr.StepDecay(0.1, step_size=0), "step_size"),
    (lambda: lr.StepDecay(0.1, step_size=2, gamma=1.5), "gamma"),
    (lambda: lr.MultiStepDecay(0.1, milestones=[3, 2]), "milestones"),
    (lambda: lr.MultiStepDecay(0.1, milestones=[]), "milestones"),
    (lambda: lr.CosineAnnealingDecay(0.1, T_max=2.5), "T_max"),
    (lambda: lr.LinearWarmup(0.1, warmup_steps=2, start_lr=0.2, end_lr=0.1), "end_lr"),
    (lambda: lr.LinearWarmup("0.1", warmup_steps=2, start_lr=0.0, end_lr=0.1), "learning_rate"),
    (lambda: lr.StepDecay(0.1, step_size=2).step(1.5), "epoch"),
    (lambda: lr.StepDecay(0.1, step_size=2).set_state_dict({"last_epoch": 3}), "last_lr"),
    (lambda: lr.LinearWarmup(lr.StepDecay(0.1, 2), 2, 0.0, 0.1).set_state_dict({"last_epoch": 1, "last_lr": 0.1}),
     "LinearWarmup_LR"),
])
def test_bad_arguments_are_refused_with_a_fix(make, words):
    with pytest.raises(InvalidArgumentError, match=words) as err:
        make()
    assert "Fix:" in str(err.value)
