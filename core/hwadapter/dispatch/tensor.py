"""Tensor: a dense, C-contiguous, immutable array on a device, and its one constructor, `wrap`.

It sits at the dispatch floor so that dispatch and the graph layer make and return tensors without importing the
frontend; the frontend's op functions become its operators and methods when hwadapter.ops.api is imported
(`bind_ops`), and hwadapter.tensor makes tensors from data."""
from __future__ import annotations

import math

import numpy as np

from ..api import dtypes as _dt
from ..api.config import config
from ..api.errors import InvalidArgumentError, UnsupportedDTypeError
from ..runtime import device as _device
from ..runtime.memory import contiguous_strides, to_device, transfer

_new = object.__new__


class _op:
    """A Tensor operator or method that is the op function `name` of hwadapter.ops.api: `bind_ops`, which that module
    calls when it is imported, puts the function in its place (this module cannot import the op modules: they import
    it)."""

    __slots__ = ("name", "wrap", "attr")

    def __init__(self, name: str, wrap=None):
        self.name, self.wrap = name, wrap

    def __set_name__(self, owner, attr):
        self.attr = attr

    def __get__(self, obj, objtype=None):
        raise AttributeError(f"Tensor.{self.attr}: hwadapter's op set is not loaded yet. Fix: import hwadapter and "
                             f"use any of its names (hwadapter.to_tensor, ...), which loads it")


def bind_ops(ops: dict) -> None:
    """Called once by hwadapter.ops.api: each operator and method of Tensor becomes its op function from `ops`."""
    for attr, marker in list(vars(Tensor).items()):
        if isinstance(marker, _op) and marker.name in ops:  # autograd's methods are bound by hwadapter.autograd
            fn = ops[marker.name]
            if attr.startswith("__"):  # an operator takes no keywords: the op itself, without the keyword check
                fn = getattr(fn, "__wrapped__", fn)
            setattr(Tensor, attr, fn if marker.wrap is None else marker.wrap(fn))


def _reflected(fn):
    """fn with its operands swapped, for `number + tensor` and the other reflected operators."""
    def reflected(self, other):
        return fn(other, self)
    reflected.__name__ = reflected.__qualname__ = f"reflected_{fn.__name__}"
    return reflected


#: Set by hwadapter.trace: read_grad(grad_state) -> the gradient to use (inside a to_static trace, a concrete one
#: becomes a state input of the graph, read afresh at each run, not a constant).
read_grad = None

class GradState:
    """A tensor's autograd state, made on first need (most tensors have none: `Tensor._ag` is None)."""

    __slots__ = ("stop", "grad", "node", "index", "version", "persistable", "parameter", "name")

    def __init__(self, stop: bool = True, node=None, index: int = 0):
        self.stop, self.grad, self.node, self.index = stop, None, node, index
        self.version, self.persistable, self.parameter, self.name = 0, False, False, None


class Tensor:
    """A dense array on a device. Ops return new tensors; only set_value and the in-place methods (autograd's, which
    count versions) change one."""

    __slots__ = ("_data", "_device", "_dtype", "_ag", "__weakref__")
    __array_priority__ = 100  # numpy defers `ndarray + Tensor` to Tensor.__radd__

    def __init__(self, *args, **kwargs):
        raise TypeError("create tensors with hwadapter.to_tensor(...), zeros, ones, full or arange")

    # --- metadata -------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._dtype

    @property
    def device(self):
        return self._device

    place = device  # paddle's name

    @property
    def ndim(self) -> int:
        return len(self._data.shape)

    @property
    def size(self) -> int:
        return math.prod(self._data.shape)

    def numel(self) -> int:
        """Number of elements."""
        return self.size

    @property
    def nbytes(self) -> int:
        return self.size * self._dtype.itemsize

    @property
    def strides(self) -> tuple:
        """Element strides (always C-contiguous)."""
        return contiguous_strides(self._data.shape)

    def is_contiguous(self) -> bool:
        return True

    # --- autograd state (hwadapter.autograd computes with it) -------------------------------------------------
    @property
    def stop_gradient(self) -> bool:
        """True (the default) when no gradient flows to this tensor; False for parameters and their results."""
        ag = self._ag
        return ag is None or ag.stop

    @stop_gradient.setter
    def stop_gradient(self, value) -> None:
        if not isinstance(value, (bool, np.bool_)):
            raise InvalidArgumentError(f"stop_gradient must be True or False, not {value!r}. Fix: pass a bool")
        if not value and self._dtype.kind != "f":
            raise UnsupportedDTypeError(f"stop_gradient=False on a {self._dtype.name} tensor: only floating-point "
                                        f"tensors have gradients. Fix: cast it first, e.g. x.astype('float32')")
        ag = self._ag
        if ag is None:
            if value:
                return
            ag = self._ag = GradState()
        elif not value and ag.node is not None:
            return  # a result of ops on tensors that need gradients already has one
        ag.stop = bool(value)

    @property
    def grad(self):
        """The gradient accumulated by backward() (a Tensor of this shape), or None."""
        ag = self._ag
        if ag is None or ag.grad is None:
            return None
        return ag.grad if read_grad is None else read_grad(ag)

    @property
    def is_leaf(self) -> bool:
        """True unless this tensor is the result of ops on tensors that need gradients."""
        ag = self._ag
        return ag is None or ag.node is None

    @property
    def persistable(self) -> bool:
        """True for parameters and buffers: state that to_static keeps on the device across calls."""
        ag = self._ag
        return ag is not None and ag.persistable

    @persistable.setter
    def persistable(self, value) -> None:
        if self._ag is None:
            self._ag = GradState()
        self._ag.persistable = bool(value)

    @property
    def is_parameter(self) -> bool:
        """True for tensors made by create_parameter (what layers train)."""
        ag = self._ag
        return ag is not None and ag.parameter

    @property
    def inplace_version(self) -> int:
        """How many times set_value or an in-place method changed this tensor."""
        ag = self._ag
        return 0 if ag is None else ag.version

    @property
    def name(self):
        ag = self._ag
        return None if ag is None else ag.name

    # --- host and device movement -----------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A new host copy of the data."""
        data = self._data
        return data.copy() if isinstance(data, np.ndarray) else data.numpy()

    def __array__(self, dtype=None, copy=None):
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype, copy=False)

    def tolist(self):
        return self.numpy().tolist()

    def item(self):
        """The value of a one-element tensor as a Python number."""
        if self.size != 1:
            raise InvalidArgumentError(f"item() needs a tensor with one element, this one has shape {self.shape}. "
                                       f"Fix: index one element first, e.g. x[0].item(), or use .tolist()")
        return self.numpy().reshape(()).item()

    def to(self, device=None, dtype=None) -> "Tensor":
        """This tensor on another device and/or as another dtype (a no-op when nothing changes)."""
        out = self
        if dtype is not None and _dt.as_dtype(dtype) != self._dtype:
            out = out.astype(dtype)
        if device is not None:
            dev = _device.get(device)
            if dev is not out._device and dev is not getattr(out._device, "base", None):  # traced: already there
                out = wrap(transfer(out._data, out._device, dev), dev)
        return out

    def cpu(self) -> "Tensor":
        """This tensor on the fallback (CPU) device."""
        return self.to(config.fallback_device)

    def __dlpack__(self, stream=None, **kwargs):
        if not isinstance(self._data, np.ndarray):
            raise InvalidArgumentError(f"__dlpack__ is only supported for host-memory devices; this tensor is on "
                                       f"{self._device}. Fix: call .cpu() first")
        return self._data.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self):
        if not isinstance(self._data, np.ndarray):
            raise InvalidArgumentError(f"__dlpack_device__: tensor is on {self._device}, not host memory. Fix: call "
                                       f".cpu() first")
        return self._data.__dlpack_device__()

    # --- Python protocol ------------------------------------------------------------------------
    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __bool__(self):
        if self.size != 1:
            raise InvalidArgumentError(f"the truth value of a tensor with {self.size} elements is ambiguous. Fix: "
                                       f"reduce it first, e.g. hwadapter.max(x) or bool((x != 0).sum())")
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __index__(self):
        if self._dtype.kind not in "iu":
            raise UnsupportedDTypeError(f"only integer tensors can be used as an index, not {self._dtype.name}. Fix: "
                                        f"cast it, e.g. x.astype('int64')")  # a TypeError too, as Python expects
        return int(self.item())

    __hash__ = object.__hash__  # identity: __eq__ is elementwise, not a key comparison

    def __repr__(self):
        if getattr(self._data, "symbolic", False):  # being traced (hwadapter.jit): it has no values to show
            return f"Tensor(shape={list(self.shape)}, dtype={self._dtype.name}, device={self._device}, " \
                   f"traced %{self._data.name})"
        body = np.array2string(self.numpy(), separator=", ", prefix="       ")
        return f"Tensor(shape={list(self.shape)}, dtype={self._dtype.name}, device={self._device},\n       {body})"

    def __reduce__(self):
        return (_rebuild, (self.numpy(), str(self._device)))

    # --- operators: the op functions of hwadapter.ops.api ---------------------------------------------------
    __add__, __radd__ = _op("add"), _op("add", _reflected)
    __sub__, __rsub__ = _op("subtract"), _op("subtract", _reflected)
    __mul__, __rmul__ = _op("multiply"), _op("multiply", _reflected)
    __truediv__, __rtruediv__ = _op("divide"), _op("divide", _reflected)
    __pow__, __rpow__ = _op("pow"), _op("pow", _reflected)
    __mod__, __rmod__ = _op("remainder"), _op("remainder", _reflected)
    __matmul__, __rmatmul__ = _op("matmul"), _op("matmul", _reflected)
    __neg__ = _op("neg")
    __abs__ = _op("abs")
    __eq__ = _op("equal")
    __ne__ = _op("not_equal")
    __lt__ = _op("less_than")
    __le__ = _op("less_equal")
    __gt__ = _op("greater_than")
    __ge__ = _op("greater_equal")
    __and__ = _op("logical_and")
    __or__ = _op("logical_or")
    __xor__ = _op("logical_xor")
    __invert__ = _op("logical_not")
    __getitem__ = _op("getitem")
    T = _op("transpose", property)

    # --- methods: x.sum(...) is hwadapter.sum(x, ...) -------------------------------------------------------
    add = _op("add")
    subtract = _op("subtract")
    multiply = _op("multiply")
    divide = _op("divide")
    pow = _op("pow")
    maximum = _op("maximum")
    minimum = _op("minimum")
    remainder = _op("remainder")
    equal = _op("equal")
    not_equal = _op("not_equal")
    logical_not = _op("logical_not")
    abs = _op("abs")
    neg = _op("neg")
    exp = _op("exp")
    log = _op("log")
    sqrt = _op("sqrt")
    rsqrt = _op("rsqrt")
    reciprocal = _op("reciprocal")
    sigmoid = _op("sigmoid")
    tanh = _op("tanh")
    relu = _op("relu")
    erf = _op("erf")
    sin = _op("sin")
    cos = _op("cos")
    floor = _op("floor")
    ceil = _op("ceil")
    round = _op("round")
    sign = _op("sign")
    cast = _op("cast")
    astype = _op("astype")
    clip = _op("clip")
    sum = _op("sum")
    prod = _op("prod")
    mean = _op("mean")
    max = _op("max")
    min = _op("min")
    argmax = _op("argmax")
    argmin = _op("argmin")
    matmul = _op("matmul")
    reshape = _op("reshape")
    flatten = _op("flatten")
    squeeze = _op("squeeze")
    unsqueeze = _op("unsqueeze")
    transpose = _op("transpose")
    split = _op("split")
    gather = _op("gather")
    expand = _op("expand")
    broadcast_to = _op("broadcast_to")

    # --- autograd: hwadapter.autograd binds these --------------------------------------------------------------
    backward = _op("backward")
    clear_grad = _op("clear_grad")
    clear_gradient = _op("clear_grad")  # paddle's older name
    detach = _op("detach")
    set_value = _op("set_value")
    zero_ = _op("zero_")
    fill_ = _op("fill_")
    add_ = _op("add_")
    subtract_ = _op("subtract_")
    multiply_ = _op("multiply_")
    scale_ = _op("scale_")


def wrap(data, dev) -> Tensor:
    """Device data as a Tensor on `dev`: the one constructor (dispatch's warm paths write the same three fields)."""
    t = _new(Tensor)
    t._data, t._device, t._dtype, t._ag = data, dev, data.dtype, None
    return t


def unwrap(x):
    """(data, Device) of a tensor, or None for anything else."""
    return (x._data, x._device) if isinstance(x, Tensor) else None


def _rebuild(array, device):
    """An unpickled tensor: the host array on `device` again."""
    dev = _device.get(device)
    return wrap(to_device(array, dev), dev)
