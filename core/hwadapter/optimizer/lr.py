"""Learning-rate schedules with paddle.optimizer.lr's names and formulas: LRScheduler, StepDecay, MultiStepDecay,
CosineAnnealingDecay, LinearWarmup.

A schedule is plain Python (its value is a float); an optimizer given one keeps the rate on the device as a 0-d
tensor and the schedule writes each new value into it when it steps, so a to_static train step reads the new rate
on its next call without being traced again."""
from __future__ import annotations

import math
import numbers
import weakref

from ..api.errors import InvalidArgumentError, TracingError
from ..api.shapes import show
from ..trace import active as _tracing

__all__ = ["LRScheduler", "StepDecay", "MultiStepDecay", "CosineAnnealingDecay", "LinearWarmup"]


def rate(owner: str, name: str, value) -> float:
    """`value` checked as a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(f"{owner}: {name} must be a finite number >= 0, not {show(value)}. Fix: pass e.g. "
                                   f"{name}=0.1", fix=f"pass a number >= 0 as {name}")
    return float(value)


def positive_int(owner: str, name: str, value) -> int:
    """`value` checked as a positive int (an error naming `owner` and `name` else)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InvalidArgumentError(f"{owner}: {name} must be a positive int, not {show(value)}. Fix: pass e.g. "
                                   f"{name}=10", fix=f"pass a positive int as {name}")
    return int(value)


def _gamma(owner: str, value) -> float:
    value = rate(owner, "gamma", value)
    if value >= 1:
        raise InvalidArgumentError(f"{owner}: gamma must be < 1 (it decays the rate), not {value}. Fix: pass e.g. "
                                   f"gamma=0.1", fix="pass gamma < 1")
    return value


class LRScheduler:
    """Base of the schedules: `step()` moves to the next epoch (or step) and sets `last_lr` to `get_lr()`; calling
    the schedule gives `last_lr`. Subclasses define `get_lr()` from `base_lr` and `last_epoch`."""

    def __init__(self, learning_rate=0.1, last_epoch: int = -1, verbose: bool = False):
        self._optimizers = weakref.WeakSet()  # optimizers whose device-side rate follows this schedule
        name = type(self).__name__
        self.base_lr = self.last_lr = rate(name, "learning_rate", learning_rate)
        if isinstance(last_epoch, bool) or not isinstance(last_epoch, numbers.Integral) or last_epoch < -1:
            raise InvalidArgumentError(f"{name}: last_epoch must be an int >= -1, not {show(last_epoch)}. Fix: "
                                       f"leave it out (-1: not started)", fix="leave last_epoch out")
        self.last_epoch, self.verbose = int(last_epoch), bool(verbose)
        self.step()

    def __call__(self) -> float:
        """The rate of the current epoch."""
        return self.last_lr

    def step(self, epoch: int | None = None) -> None:
        """Move to the next epoch (or to `epoch`): call it after optimizer.step(), outside a to_static function."""
        if _tracing() is not None:
            fix = "call scheduler.step() between calls of the to_static function, not inside it"
            raise TracingError(f"{type(self).__name__}.step() inside a to_static trace would run once, when traced, "
                               f"and never again. Fix: {fix}", fix=fix)
        if epoch is None:
            self.last_epoch += 1
            self.last_lr = self.get_lr()
        else:
            if isinstance(epoch, bool) or not isinstance(epoch, numbers.Integral):
                raise InvalidArgumentError(f"{type(self).__name__}.step: epoch must be an int or None, not "
                                           f"{show(epoch)}. Fix: pass the epoch number, or nothing",
                                           fix="pass an int epoch, or nothing")
            self.last_epoch = int(epoch)
            closed = getattr(self, "_get_closed_form_lr", None)
            self.last_lr = closed() if closed is not None else self.get_lr()
        if self.verbose:
            print(f"Epoch {self.last_epoch}: {type(self).__name__} set learning rate to {self.last_lr}.")
        self._publish()

    def _publish(self) -> None:
        for opt in list(self._optimizers):
            opt._write_lr(self.last_lr)

    def _follow(self, optimizer) -> None:
        """Write every new rate into `optimizer`'s device-side rate from now on."""
        self._optimizers.add(optimizer)

    def get_lr(self) -> float:
        """The rate at `last_epoch`."""
        raise NotImplementedError(f"{type(self).__name__} must define get_lr()")

    def state_keys(self) -> None:
        """The attributes state_dict saves (paddle's hook): `self.keys`."""
        self.keys = ["last_epoch", "last_lr"]

    def state_dict(self) -> dict:
        """last_epoch and last_lr, as plain values (hw.save writes them)."""
        self.state_keys()
        return {k: getattr(self, k) for k in self.keys if hasattr(self, k)}

    def set_state_dict(self, state_dict: dict) -> None:
        """Restore what state_dict returned."""
        self.state_keys()
        if not isinstance(state_dict, dict):
            raise InvalidArgumentError(f"{type(self).__name__}.set_state_dict: expected a dict, got "
                                       f"{type(state_dict).__name__}. Fix: pass what state_dict() returned",
                                       fix="pass what state_dict() returned")
        missing = [k for k in self.keys if k not in state_dict]
        if missing:
            raise InvalidArgumentError(f"{type(self).__name__}.set_state_dict: the dict lacks {missing}. Fix: pass "
                                       f"what this schedule's state_dict() returned", fix="pass a schedule's state")
        for k in self.keys:
            value = state_dict[k]
            setattr(self, k, value.item() if hasattr(value, "item") else value)  # hw.load gives numbers back
        self.last_epoch, self.last_lr = int(self.last_epoch), float(self.last_lr)
        self._publish()

    set_dict = set_state_dict

    def __repr__(self):
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, last_lr={self.last_lr})"


class StepDecay(LRScheduler):
    """base_lr * gamma ** (epoch // step_size)."""

    def __init__(self, learning_rate, step_size, gamma=0.1, last_epoch=-1, verbose=False):
        self.step_size = positive_int("StepDecay", "step_size", step_size)
        self.gamma = _gamma("StepDecay", gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)


class MultiStepDecay(LRScheduler):
    """base_lr * gamma ** (the number of milestones reached)."""

    def __init__(self, learning_rate, milestones, gamma=0.1, last_epoch=-1, verbose=False):
        ok = isinstance(milestones, (list, tuple)) and milestones and all(
            isinstance(m, numbers.Integral) and not isinstance(m, bool) for m in milestones)
        if not ok or any(a >= b for a, b in zip(milestones, milestones[1:])):
            raise InvalidArgumentError(f"MultiStepDecay: milestones must be a non-empty increasing list of ints, not "
                                       f"{show(milestones)}. Fix: pass e.g. milestones=[30, 60]",
                                       fix="pass an increasing list of ints")
        self.milestones = [int(m) for m in milestones]
        self.gamma = _gamma("MultiStepDecay", gamma)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        reached = next((i for i, m in enumerate(self.milestones) if self.last_epoch < m), len(self.milestones))
        return self.base_lr * self.gamma ** reached


class CosineAnnealingDecay(LRScheduler):
    """Cosine from base_lr down to eta_min over T_max epochs (paddle's recursive form; `step(epoch)` uses the closed
    form eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2)."""

    def __init__(self, learning_rate, T_max, eta_min=0, last_epoch=-1, verbose=False):  # noqa: N803 paddle's name
        self.T_max = positive_int("CosineAnnealingDecay", "T_max", T_max)
        self.eta_min = rate("CosineAnnealingDecay", "eta_min", eta_min)
        super().__init__(learning_rate, last_epoch, verbose)

    def get_lr(self) -> float:
        t, e = self.T_max, self.last_epoch
        if e == 0:
            return self.base_lr
        if (e - 1 - t) % (2 * t) == 0:
            return self.last_lr + (self.base_lr - self.eta_min) * (1 - math.cos(math.pi / t)) / 2
        return (1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t)) * \
            (self.last_lr - self.eta_min) + self.eta_min

    def _get_closed_form_lr(self) -> float:
        return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2


class LinearWarmup(LRScheduler):
    """start_lr rising linearly to end_lr over warmup_steps, then `learning_rate` (a number, or a schedule stepped
    from 0 at the end of the warm-up)."""

    def __init__(self, learning_rate, warmup_steps, start_lr, end_lr, last_epoch=-1, verbose=False):
        if not isinstance(learning_rate, LRScheduler):
            learning_rate = rate("LinearWarmup", "learning_rate", learning_rate)
        self.learning_rate = learning_rate
        self.warmup_steps = positive_int("LinearWarmup", "warmup_steps", warmup_steps)
        self.start_lr = rate("LinearWarmup", "start_lr", start_lr)
        self.end_lr = rate("LinearWarmup", "end_lr", end_lr)
        if self.end_lr <= self.start_lr:
            raise InvalidArgumentError(f"LinearWarmup: end_lr ({self.end_lr}) must be greater than start_lr "
                                       f"({self.start_lr}). Fix: warm up from a smaller start_lr",
                                       fix="pass start_lr < end_lr")
        super().__init__(start_lr, last_epoch, verbose)

    def get_lr(self) -> float:
        if self.last_epoch < self.warmup_steps:
            return (self.end_lr - self.start_lr) * float(self.last_epoch) / float(self.warmup_steps) + self.start_lr
        if isinstance(self.learning_rate, LRScheduler):
            self.learning_rate.step(self.last_epoch - self.warmup_steps)
            return self.learning_rate()
        return self.learning_rate

    def state_dict(self) -> dict:
        state = super().state_dict()
        if isinstance(self.learning_rate, LRScheduler):
            state["LinearWarmup_LR"] = self.learning_rate.state_dict()
        return state

    def set_state_dict(self, state_dict: dict) -> None:
        if isinstance(self.learning_rate, LRScheduler):
            inner = state_dict.get("LinearWarmup_LR") if isinstance(state_dict, dict) else None
            if inner is None:
                raise InvalidArgumentError("LinearWarmup.set_state_dict: the dict lacks 'LinearWarmup_LR' (the "
                                           "wrapped schedule's state). Fix: pass what state_dict() returned",
                                           fix="pass what state_dict() returned")
            self.learning_rate.set_state_dict(inner)
        super().set_state_dict(state_dict)

    set_dict = set_state_dict
