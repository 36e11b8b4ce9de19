"""Adam and AdamW (paddle's names and update rules, PyTorch's numbers), one fused adam_update kernel per parameter;
the powers of beta (beta ** step) are per-parameter device state, as paddle keeps them."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError
from ..dispatch.dispatcher import dispatch
from ..ops import api as ops
from .lr import rate
from .optimizer import Optimizer

__all__ = ["Adam", "AdamW"]


def _beta(owner: str, name: str, value) -> float:
    value = rate(owner, name, value)
    if value >= 1:
        raise InvalidArgumentError(f"{owner}: {name} must be in [0, 1), not {value}. Fix: pass e.g. {name}=0.9",
                                   fix=f"pass {name} in [0, 1)")
    return value


class Adam(Optimizer):
    """m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2, param -= lr * m_hat / (sqrt(v_hat) + epsilon);
    weight_decay (a float) is L2: g = grad + weight_decay * param."""

    _accumulators = ("moment1", "moment2", "beta1_pow_acc", "beta2_pow_acc")
    _decoupled = False

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=None, weight_decay=None,
                 grad_clip=None, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, beta1=beta1, beta2=beta2,
                         epsilon=epsilon)

    def _check_group(self, group: dict) -> None:
        super()._check_group(group)
        owner = type(self).__name__
        group["beta1"] = _beta(owner, "beta1", group["beta1"])
        group["beta2"] = _beta(owner, "beta2", group["beta2"])
        group["epsilon"] = rate(owner, "epsilon", group["epsilon"])

    def _initial(self, p, group) -> dict:
        # the powers start at beta (beta ** 1, the first step's) and are multiplied by beta after each step
        return {"moment1": np.zeros(p.shape, p.dtype), "moment2": np.zeros(p.shape, p.dtype),
                "beta1_pow_acc": np.asarray(group["beta1"], p.dtype),
                "beta2_pow_acc": np.asarray(group["beta2"], p.dtype)}

    def _decay(self, p, group) -> float:
        return group["weight_decay"]

    def _update(self, p, grad, lr, group) -> None:
        state = self._state_of(p, group)
        m, v, b1, b2 = (state[k] for k in self._accumulators)
        attrs = {"beta1": group["beta1"], "beta2": group["beta2"], "epsilon": group["epsilon"],
                 "weight_decay": self._decay(p, group), "decoupled": self._decoupled}
        new_p, new_m, new_v = dispatch("adam_update", (p, grad, m, v, lr, b1, b2), attrs)
        p.set_value(new_p)
        m.set_value(new_m)
        v.set_value(new_v)
        b1.set_value(ops.multiply(b1, group["beta1"]))
        b2.set_value(ops.multiply(b2, group["beta2"]))


class AdamW(Adam):
    """Adam with decoupled weight decay: param *= 1 - lr * weight_decay before the Adam step (default 0.01, as
    paddle); apply_decay_param_fun(param.name) -> bool picks the parameters that decay (all when None)."""

    _decoupled = True

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, parameters=None, weight_decay=0.01,
                 apply_decay_param_fun=None, grad_clip=None, name=None):
        if apply_decay_param_fun is not None and not callable(apply_decay_param_fun):
            fix = "pass a function of a parameter's name returning True where it decays, or None"
            raise InvalidArgumentError(f"AdamW: apply_decay_param_fun is a {type(apply_decay_param_fun).__name__}. "
                                       f"Fix: {fix}", fix=fix)
        self._apply_decay_param_fun = apply_decay_param_fun
        super().__init__(learning_rate, beta1, beta2, epsilon, parameters, weight_decay, grad_clip, name)

    def _decay(self, p, group) -> float:
        fun = self._apply_decay_param_fun
        if fun is not None and not fun(p.name):
            return 0.0
        return group["weight_decay"]
