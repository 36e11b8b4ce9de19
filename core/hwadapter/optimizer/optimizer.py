"""The Optimizer base (paddle.optimizer.Optimizer's API): parameters and groups, the learning rate and the
per-parameter state as device tensors, step(), clear_grad(), state_dict().

Everything that changes between steps lives in tensors made by hwadapter.autograd.buffer (the learning rate, one
0-d tensor per parameter dtype and device; each parameter's accumulators; Adam's powers of beta) and is changed by
set_value under no_grad: inside hw.jit.to_static those are device state, read and written back on every call, so a
captured train step keeps training, and a schedule's new rate reaches it without a retrace."""
from __future__ import annotations

import numbers

import numpy as np

from .. import autograd
from ..api.errors import InvalidArgumentError, TracingError
from ..api.shapes import show
from ..dispatch.tensor import Tensor
from ..ops import api as ops
from ..trace import active as _tracing
from .clip import ClipGradBase
from .lr import LRScheduler, rate
from .params import make_groups

__all__ = ["Optimizer"]


def home(p: Tensor):
    """The real device of `p` (inside a trace, a parameter already updated has the tracing device)."""
    dev = p.device
    return getattr(dev, "base", dev)


class Optimizer:
    """Base of the optimizers: subclasses name their per-parameter state (`_accumulators`, made on a parameter's
    first step by `_initial`), pass their hyper-parameters as keywords (a parameter group may override each; they
    are checked by `_check_group`), and define `_update`."""

    _accumulators: tuple = ()

    def __init__(self, learning_rate=0.001, parameters=None, weight_decay=None, grad_clip=None, name=None,
                 **hyper):
        owner = type(self).__name__
        self._name = name
        self._learning_rate = self._check_lr(learning_rate)
        self._lr_value = learning_rate() if isinstance(learning_rate, LRScheduler) else float(learning_rate)
        if grad_clip is not None and not isinstance(grad_clip, ClipGradBase):
            fix = "pass hwadapter.optimizer.ClipGradByGlobalNorm(1.0) (or ClipGradByNorm, ClipGradByValue), or None"
            raise InvalidArgumentError(f"{owner}: grad_clip is a {type(grad_clip).__name__}, not a gradient "
                                       f"clipping. Fix: {fix}", fix=fix)
        self._grad_clip = grad_clip
        defaults = {"learning_rate": 1.0, "weight_decay": weight_decay, **hyper}
        self._param_groups = make_groups(owner, parameters, defaults)
        for group in self._param_groups:
            self._check_group(group)
        self._parameter_list = [p for g in self._param_groups for p in g["params"]]
        self._state: dict = {}  # id(parameter) -> {accumulator name: buffer}
        self._lr_tensors: dict = {}  # (dtype, device) -> 0-d buffer holding the current rate
        if isinstance(learning_rate, LRScheduler):
            learning_rate._follow(self)

    # --- checks ---------------------------------------------------------------------------------------------------
    def _check_lr(self, value):
        if isinstance(value, LRScheduler):
            return value
        if isinstance(value, Tensor):
            fix = "pass a float, or a schedule from hwadapter.optimizer.lr"
            raise InvalidArgumentError(f"{type(self).__name__}: learning_rate is a Tensor. Fix: {fix}", fix=fix)
        return rate(type(self).__name__, "learning_rate", value)

    def _check_group(self, group: dict) -> None:
        """Check a group's hyper-parameters in place: 'learning_rate' (a factor on the optimizer's rate, as in
        paddle), 'weight_decay' (None or a number >= 0) and the subclass's own."""
        owner = type(self).__name__
        group["learning_rate"] = rate(owner, "a parameter group's learning_rate (a factor)", group["learning_rate"])
        decay = group["weight_decay"]
        if decay is not None and (isinstance(decay, bool) or not isinstance(decay, numbers.Real)):
            fix = "pass a float (the L2 coefficient), or None"
            raise InvalidArgumentError(f"{owner}: weight_decay must be a number or None, not {show(decay)}. "
                                       f"Fix: {fix}", fix=fix)
        group["weight_decay"] = 0.0 if decay is None else rate(owner, "weight_decay", decay)

    # --- the learning rate ------------------------------------------------------------------------------------------
    def get_lr(self) -> float:
        """The current learning rate."""
        return self._learning_rate() if isinstance(self._learning_rate, LRScheduler) else self._lr_value

    def set_lr(self, value) -> None:
        """Set the learning rate (a float) for the following steps, captured ones included."""
        if isinstance(self._learning_rate, LRScheduler):
            fix = "step the schedule, or replace it with set_lr_scheduler()"
            raise InvalidArgumentError(f"{type(self).__name__}.set_lr: the learning rate follows a schedule "
                                       f"({type(self._learning_rate).__name__}). Fix: {fix}", fix=fix)
        self._write_lr(rate(type(self).__name__, "learning_rate", value))

    def set_lr_scheduler(self, scheduler) -> None:
        """Follow `scheduler` (an LRScheduler) from now on."""
        if not isinstance(scheduler, LRScheduler):
            fix = "pass a schedule from hwadapter.optimizer.lr"
            raise InvalidArgumentError(f"{type(self).__name__}.set_lr_scheduler: got a {type(scheduler).__name__}. "
                                       f"Fix: {fix}", fix=fix)
        self._learning_rate = scheduler
        scheduler._follow(self)
        self._write_lr(scheduler())

    def _write_lr(self, value: float) -> None:
        if _tracing() is not None:
            fix = "change the learning rate between calls of the to_static function"
            raise TracingError(f"{type(self).__name__}: the learning rate was changed inside a to_static trace, "
                               f"where it would change once, when traced. Fix: {fix}", fix=fix)
        self._lr_value = float(value)
        for t in self._lr_tensors.values():
            t.set_value(np.asarray(value, t.dtype))

    def _lr_tensor(self, p: Tensor) -> Tensor:
        """The rate as a 0-d tensor of p's dtype on p's device (made on first use, inside a trace too)."""
        dev = home(p)
        key = (p.dtype, dev)
        t = self._lr_tensors.get(key)
        if t is None:
            t = self._lr_tensors[key] = autograd.buffer(np.asarray(self.get_lr(), p.dtype), device=dev)
        return t

    # --- state --------------------------------------------------------------------------------------------------
    def _initial(self, p: Tensor, group: dict) -> dict:
        """The first value of each accumulator of p, as numpy arrays (subclasses)."""
        return {}

    def _state_of(self, p: Tensor, group: dict | None = None) -> dict:
        """p's accumulators as buffers on p's device (made on first use, inside a to_static trace too)."""
        state = self._state.get(id(p))
        if state is None:
            group = group if group is not None else self._group_of(p)
            dev = home(p)
            state = self._state[id(p)] = {k: autograd.buffer(v, device=dev)
                                          for k, v in self._initial(p, group).items()}
        return state

    def _group_of(self, p: Tensor) -> dict:
        return next(g for g in self._param_groups if any(q is p for q in g["params"]))

    def _labels(self) -> list:
        """(label, parameter): its name when every parameter has a distinct one, else param_<index>."""
        names = [p.name for p in self._parameter_list]
        if all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names):
            return list(zip(names, self._parameter_list))
        return [(f"param_{i}", p) for i, p in enumerate(self._parameter_list)]

    def state_dict(self) -> dict:
        """Every accumulator as a tensor ('<param>_<accumulator>'), and the schedule's state ('LR_Scheduler'): what
        hw.save writes and set_state_dict takes."""
        out = {}
        for label, p in self._labels():
            for acc, t in self._state.get(id(p), {}).items():
                out[f"{label}_{acc}"] = t
        if isinstance(self._learning_rate, LRScheduler):
            out["LR_Scheduler"] = self._learning_rate.state_dict()
        return out

    def set_state_dict(self, state_dict: dict) -> None:
        """Load what state_dict returned (tensors or arrays), into the same buffers (captured steps see it)."""
        owner = f"{type(self).__name__}.set_state_dict"
        if not isinstance(state_dict, dict):
            raise InvalidArgumentError(f"{owner}: expected a dict, got {type(state_dict).__name__}. Fix: pass what "
                                       f"state_dict() (or hw.load of it) returned", fix="pass a state dict")
        known = {f"{label}_{acc}": (p, acc) for label, p in self._labels() for acc in self._accumulators}
        unknown = sorted(k for k in state_dict if k not in known and k != "LR_Scheduler")
        if unknown:
            fix = "load the state of an optimizer of the same kind over the same parameters, in the same order"
            raise InvalidArgumentError(f"{owner}: {type(self).__name__} over these parameters has no entries "
                                       f"{unknown[:5]}{' ...' if len(unknown) > 5 else ''}. Fix: {fix}", fix=fix)
        loads = []  # every entry checked before any is loaded: a refused dict changes nothing
        for key, value in state_dict.items():
            if key == "LR_Scheduler":
                continue
            p, acc = known[key]
            target = self._state_of(p)[acc]  # made now if p has not stepped yet: its first value, as a step makes
            arr = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
            if tuple(arr.shape) != tuple(target.shape):
                fix = "load the state of an optimizer over parameters of the same shapes, in the same order"
                raise InvalidArgumentError(f"{owner}: {key!r} has shape {list(arr.shape)}, this optimizer's "
                                           f"{list(target.shape)}. Fix: {fix}", fix=fix)
            loads.append((target, arr))
        if "LR_Scheduler" in state_dict and isinstance(self._learning_rate, LRScheduler):
            self._learning_rate.set_state_dict(state_dict["LR_Scheduler"])
        for target, arr in loads:
            target.set_value(arr)

    set_dict = set_state_dict

    # --- stepping ---------------------------------------------------------------------------------------------------
    @autograd.no_grad()
    def step(self) -> None:
        """Update every parameter that has a gradient (parameters without one are skipped), clipping the
        gradients first when the optimizer has a grad_clip."""
        pairs = [(p, p.grad, g) for g in self._param_groups for p in g["params"] if p.grad is not None]
        if not pairs:
            return
        if self._grad_clip is not None:
            clipped = self._grad_clip([(p, grad) for p, grad, _ in pairs])
            pairs = [(p, grad, group) for (p, grad), (_, _, group) in zip(clipped, pairs)]
        for p, grad, group in pairs:
            if grad.dtype != p.dtype:  # float16 parameters' gradients add up in float32
                grad = ops.cast(grad, p.dtype)
            lr = self._lr_tensor(p)
            if group["learning_rate"] != 1.0:
                lr = ops.multiply(lr, group["learning_rate"])
            self._update(p, grad, lr, group)

    def _update(self, p: Tensor, grad: Tensor, lr: Tensor, group: dict) -> None:
        raise NotImplementedError

    def clear_grad(self, set_to_zero: bool = False) -> None:
        """Drop every parameter's gradient. Unlike paddle (whose default keeps zero tensors), hwadapter's default
        sets them to None, which frees their memory; set_to_zero=True keeps zeros of the same shape instead."""
        for p in self._parameter_list:
            p.clear_grad(set_to_zero)

    clear_gradients = clear_grad

    def __repr__(self):
        return (f"{type(self).__name__}(learning_rate={self.get_lr()}, {len(self._parameter_list)} parameters in "
                f"{len(self._param_groups)} group(s))")
