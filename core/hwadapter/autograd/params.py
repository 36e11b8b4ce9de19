"""Parameters and buffers: the tensors a model owns and trains, and the state to_static keeps on the device."""
from __future__ import annotations

import math

import numpy as np

from ..api import dtypes as _dt
from ..api import shapes
from ..api.errors import InvalidArgumentError
from ..dispatch.tensor import GradState, Tensor
from ..ops import creation
from ..tensor import to_tensor


def fans(shape: tuple) -> tuple:
    """(fan_in, fan_out) as paddle computes them: [in, out] for a matrix, [out, in, k...] for a kernel."""
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def xavier_uniform(shape: tuple, dtype) -> np.ndarray:
    """Glorot uniform, paddle's default for weights (nn.initializer.XavierUniform with its defaults)."""
    fan_in, fan_out = fans(shape)
    limit = math.sqrt(6.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
    return creation._rng.uniform(-limit, limit, shape).astype(dtype)


def create_parameter(shape, dtype="float32", initializer=None, device=None, name=None, is_bias: bool = False):
    """A trainable tensor (stop_gradient=False, persistable): `initializer` is a callable (shape, dtype) -> array,
    an array, or None (zeros for a bias, else Xavier uniform)."""
    dims = shapes.int_list("create_parameter", "shape", shape, low=0, scalar_ok=True)
    dt = _dt.as_dtype(dtype)
    if dt.kind != "f":
        raise InvalidArgumentError(f"create_parameter: a parameter must be floating-point, not {dt.name}. Fix: pass "
                                   f"dtype='float32'")
    if initializer is None:
        arr = np.zeros(dims, dt) if is_bias else xavier_uniform(dims, dt)
    elif callable(initializer):
        arr = np.asarray(initializer(dims, dt))
    else:
        arr = np.asarray(initializer)
    if tuple(arr.shape) != dims:
        raise InvalidArgumentError(f"create_parameter: the initial value has shape {list(arr.shape)}, the parameter "
                                   f"{list(dims)}. Fix: give an initializer of that shape")
    t = to_tensor(arr.astype(dt, copy=False), device=device)
    return mark_parameter(t, name)


def mark_parameter(t: Tensor, name=None) -> Tensor:
    """Make `t` a parameter (trainable, persistable) in place; returns it."""
    if t._dtype.kind != "f":
        raise InvalidArgumentError(f"a parameter must be floating-point, not {t._dtype.name}. Fix: cast it first")
    ag = t._ag if t._ag is not None else GradState()
    ag.stop, ag.persistable, ag.parameter, ag.name = False, True, True, name
    t._ag = ag
    return t


def buffer(value, device=None, dtype=None) -> Tensor:
    """A persistable tensor that is not trained (running statistics, optimizer state, counters): inside to_static
    it is device state, read and written back each call, never a constant."""
    t = value if isinstance(value, Tensor) and dtype is None and device is None else \
        to_tensor(value, dtype=dtype, device=device)
    if t._ag is None:
        t._ag = GradState()
    t._ag.persistable = True
    return t
