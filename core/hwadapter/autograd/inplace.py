"""What changes a tensor: set_value and the in-place methods. Each counts a version, so that a gradient that still
needs the old value errors instead of being silently wrong; inside a to_static trace each is a state update."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError
from ..dispatch.tensor import GradState, Tensor, wrap
from ..trace import active as _tracing, is_symbolic, read_error
from ..ops import api as _ops
from ..tensor import to_tensor
from . import engine


def _value(self: Tensor, value, op: str) -> Tensor:
    """`value` as a tensor of self's shape and dtype, on self's device."""
    if not isinstance(value, Tensor):
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError) as err:
            raise InvalidArgumentError(f"{op}: cannot make an array of {type(value).__name__} ({err}). Fix: pass a "
                                       f"Tensor, a numpy array or numbers") from None
        value = to_tensor(np.broadcast_to(arr, self.shape) if arr.ndim == 0 else arr, dtype=self._dtype,
                          device=getattr(self._device, "base", self._device))
    if tuple(value.shape) != tuple(self.shape):
        raise InvalidArgumentError(f"{op}: the value has shape {list(value.shape)}, the tensor {list(self.shape)}. "
                                   f"Fix: pass a value of shape {list(self.shape)} (set_value never reshapes)")
    if value._dtype != self._dtype:
        value = _ops.cast(value, self._dtype)
    return value


def _check_leaf(self: Tensor, value: Tensor, op: str) -> None:
    ag = self._ag
    if ag is not None and not ag.stop and ag.node is None and engine.is_grad_enabled() and \
            value._ag is not None and value._ag.node is not None:
        raise InvalidArgumentError(
            f"{op}: this tensor is a leaf that needs a gradient (a parameter), and the new value was computed from "
            f"tensors that need gradients: the tape would lose the parameter. Fix: update parameters under "
            f"hw.no_grad() (optimizers do), or compute the value from detached tensors")


def set_value(self: Tensor, value) -> Tensor:
    """Replace this tensor's values (same shape; the value is cast to its dtype) in place; returns it."""
    value = _value(self, value, "set_value")
    _check_leaf(self, value, "set_value")
    tracer = _tracing()
    if tracer is not None and (is_symbolic(value) or is_symbolic(self)):
        if self._ag is None:
            self._ag = GradState()
        tracer.assign(self, value)
        self._ag.version += 1
        _take_grad_state(self, value)
        return self
    if tracer is not None:  # both concrete, inside a trace: this would run once, when traced, and never again
        raise read_error()
    if value._device is not self._device:
        raise InvalidArgumentError(f"set_value: the value is on {value._device}, the tensor on {self._device}. "
                                   f"Fix: move it first with .to('{self._device}')")
    self._data = value._data  # tensors never change their data, so sharing it is safe: this tensor now points away
    if self._ag is None:
        self._ag = GradState()
    self._ag.version += 1
    _take_grad_state(self, value)
    return self


def _take_grad_state(self: Tensor, value: Tensor) -> None:
    """A tensor that is not a leaf takes over the value's place on the tape (leaves, parameters, stay leaves)."""
    ag = self._ag
    if ag.node is None and not (ag.stop is False and engine.is_grad_enabled() and value._ag is not None):
        return
    vag = value._ag
    if vag is None or vag.node is None:
        ag.node, ag.index = None, 0
        ag.stop = ag.stop if vag is None else vag.stop
    else:
        ag.node, ag.index, ag.stop = vag.node, vag.index, vag.stop


def _snapshot(self: Tensor) -> Tensor:
    """This tensor as it is now, as another tensor object (so that the op computing its new value saves the old
    value, not the tensor that is about to change)."""
    snap = wrap(self._data, self._device)
    ag = self._ag
    if ag is not None:
        snap._ag = GradState(ag.stop, ag.node, ag.index)
    return snap


def _inplace(name: str, compute):
    def method(self, *args, **kwargs):
        return set_value(self, compute(_snapshot(self), *args, **kwargs))
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"In place: {name[:-1]}, as set_value of the result (counts a version)."
    return method


add_ = _inplace("add_", _ops.add)
subtract_ = _inplace("subtract_", _ops.subtract)
multiply_ = _inplace("multiply_", _ops.multiply)
scale_ = _inplace("scale_", lambda x, scale=1.0, bias=0.0: _ops.add(_ops.multiply(x, scale), bias))


def zero_(self: Tensor) -> Tensor:
    """In place: every element 0."""
    return set_value(self, _ops.zeros_like(self))


def fill_(self: Tensor, value) -> Tensor:
    """In place: every element `value`."""
    return set_value(self, _ops.full_like(self, value))


def detach(self: Tensor) -> Tensor:
    """The same values (sharing memory) with no tape: stop_gradient=True."""
    return wrap(self._data, self._device)


def clear_grad(self: Tensor, set_to_zero: bool = False) -> None:
    """Drop this tensor's gradient (to None; set_to_zero=True keeps a zero tensor instead)."""
    if self._ag is None or self._ag.grad is None:
        return
    engine.set_grad(self, _ops.zeros_like(self._ag.grad) if set_to_zero else None)
