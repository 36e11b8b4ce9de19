"""hwadapter.autograd: gradients by vjp rules over hwadapter's own ops (paddle's names: backward, grad, no_grad).

Importing it binds Tensor's autograd methods (backward, clear_grad, detach, set_value, the in-place ones)."""
from __future__ import annotations

from ..dispatch import tensor as _tensor
from . import rules_collective, rules_control, rules_math, rules_nn, rules_shape  # noqa: F401  the rules register
from .engine import (backward, enable_grad, grad, is_grad_enabled, no_grad, set_grad_enabled,  # noqa: F401
                     tensor_backward)
from .inplace import (add_, clear_grad, detach, fill_, multiply_, scale_, set_value, subtract_,  # noqa: F401
                      zero_)
from .opvjp import op_vjp  # noqa: F401
from .params import buffer, create_parameter, mark_parameter  # noqa: F401
from .registry import RULES, differentiable  # noqa: F401

__all__ = ["backward", "grad", "no_grad", "enable_grad", "is_grad_enabled", "set_grad_enabled", "create_parameter",
           "buffer", "differentiable", "op_vjp"]

_tensor.bind_ops({"backward": tensor_backward, "clear_grad": clear_grad, "detach": detach, "set_value": set_value,
                  "zero_": zero_, "fill_": fill_, "add_": add_, "subtract_": subtract_, "multiply_": multiply_,
                  "scale_": scale_})
