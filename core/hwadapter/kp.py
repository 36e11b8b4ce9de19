"""`from hwadapter import kp`: the kernel-primitive language (hwadapter_kp) plus `register_op` for all devices."""
from __future__ import annotations

from hwadapter_kp import *  # noqa: F401,F403
from hwadapter_kp import __all__ as _kp_all

from .dispatch.dispatcher import dispatch
from .api.errors import InvalidArgumentError
from .runtime.codegen import PrimitiveOp, register
from .runtime.device import devices


def register_op(name: str, kernel, inputs=None, outputs=None):
    """Make a kernel an op on every device with a codegen backend; returns a function taking and returning Tensors.

    `inputs` names the kernel's input parameters in call order (default: all, in declaration order);
    `outputs` names the outputs returned (default: the first). Keyword arguments become kernel attributes.
    """
    in_names = tuple(inputs or (p.name for p in kernel.params if p.kind == "in"))
    register(name, PrimitiveOp(kernel, in_names, outputs=tuple(outputs or ())))
    devices.forget_routes(name)  # a route resolved before (fallback, or an older kernel) must not outlive it

    def op(*tensors, **attrs):
        if len(tensors) != len(in_names):
            raise InvalidArgumentError(f"{name}: takes {len(in_names)} tensors ({', '.join(in_names)}), "
                                       f"got {len(tensors)}")
        return dispatch(name, tensors, attrs)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = kernel.__doc__ or f"The kernel-primitive op {name!r}."
    return op


__all__ = list(_kp_all) + ["register_op"]
