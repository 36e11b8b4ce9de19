"""SGD and Momentum (paddle's names and update rules), each one fused kernel per parameter: sgd_update and
momentum_update (hwadapter.api.reference holds their definitions)."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError
from ..api.shapes import flag
from ..dispatch.dispatcher import dispatch
from .lr import rate
from .optimizer import Optimizer

__all__ = ["SGD", "Momentum"]


class SGD(Optimizer):
    """param -= lr * (grad + weight_decay * param)."""

    def __init__(self, learning_rate=0.001, parameters=None, weight_decay=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name)

    def _update(self, p, grad, lr, group) -> None:
        p.set_value(dispatch("sgd_update", (p, grad, lr), {"weight_decay": group["weight_decay"]}))


class Momentum(Optimizer):
    """velocity = momentum * velocity + g (g = grad + weight_decay * param); param -= lr * velocity, or with
    use_nesterov param -= lr * (g + momentum * velocity). PyTorch's SGD(momentum=..., dampening=0) is the same."""

    _accumulators = ("velocity",)

    def __init__(self, learning_rate=0.001, momentum=0.9, parameters=None, use_nesterov=False, weight_decay=None,
                 grad_clip=None, name=None):
        super().__init__(learning_rate, parameters, weight_decay, grad_clip, name, momentum=momentum,
                         use_nesterov=use_nesterov)

    def _check_group(self, group: dict) -> None:
        super()._check_group(group)
        group["momentum"] = rate("Momentum", "momentum", group["momentum"])
        group["use_nesterov"] = flag("Momentum", "use_nesterov", group["use_nesterov"])
        if group["use_nesterov"] and not group["momentum"]:
            raise InvalidArgumentError("Momentum: use_nesterov needs a momentum > 0. Fix: pass momentum=0.9, or "
                                       "use_nesterov=False", fix="pass momentum > 0")

    def _initial(self, p, group) -> dict:
        return {"velocity": np.zeros(p.shape, p.dtype)}

    def _update(self, p, grad, lr, group) -> None:
        velocity = self._state_of(p, group)["velocity"]
        attrs = {"momentum": group["momentum"], "use_nesterov": group["use_nesterov"],
                 "weight_decay": group["weight_decay"]}
        new_p, new_v = dispatch("momentum_update", (p, grad, velocity, lr), attrs)
        p.set_value(new_p)
        velocity.set_value(new_v)
