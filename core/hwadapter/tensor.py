"""Tensor: a dense, C-contiguous, immutable array on a device."""
from __future__ import annotations

import math

import numpy as np

from .api import dtypes as _dt
from .dispatch import dispatcher
from .dispatch.dispatcher import transfer
from .api.config import config
from .api.errors import InvalidArgumentError, UnsupportedDTypeError
from .runtime import device as _device
from .runtime.memory import DeviceArray, contiguous_strides


class _op:
    """A Tensor operator or method that becomes the op function `name` of hwadapter.ops.api on first use."""

    __slots__ = ("name", "wrap", "owner", "attr")

    def __init__(self, name: str, wrap=None):
        self.name, self.wrap = name, wrap

    def __set_name__(self, owner, attr):
        self.owner, self.attr = owner, attr

    def __get__(self, obj, objtype=None):
        from .ops import api  # lazy: the op modules import this module, so a module-level import would be a cycle
        fn = getattr(api, self.name)
        if self.attr.startswith("__"):  # an operator takes no keywords: the op itself, without the keyword check
            fn = getattr(fn, "__wrapped__", fn)
        value = fn if self.wrap is None else self.wrap(fn)
        setattr(self.owner, self.attr, value)  # replaces this descriptor, so later calls reach the op directly
        return value.__get__(obj, objtype)


def _reflected(fn):
    """fn with its operands swapped, for `number + tensor` and the other reflected operators."""
    def reflected(self, other):
        return fn(other, self)
    reflected.__name__ = reflected.__qualname__ = f"reflected_{fn.__name__}"
    return reflected


class Tensor:
    """A dense array on a device. Ops return new tensors; tensors are never changed in place."""

    __slots__ = ("_data", "_device", "_dtype", "__weakref__")
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
                out = _make(transfer(out._data, out._device, dev), dev)
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


def _rebuild(array, device):
    return to_tensor(array, device=device)


def _device_data(dev, arr: np.ndarray):
    """A host array as `dev`'s data: the array itself on host-memory devices, else a device copy."""
    if dev.host_memory:
        return arr
    if dev.__class__ is not _device.Device:  # a tracing device (hwadapter.graph.trace): the array is a graph constant
        return dev.constant(arr)
    return DeviceArray.from_numpy(dev, arr)


dispatcher.bind_tensor(Tensor)
_make = dispatcher.wrap  # the one constructor of a Tensor over device data


def _host_array(data, dtype) -> np.ndarray:
    if isinstance(data, Tensor):
        arr = data.numpy()
    else:
        try:
            arr = np.asarray(data)
        except (ValueError, TypeError, OverflowError) as err:
            raise InvalidArgumentError(f"to_tensor: cannot make an array of {type(data).__name__}: {err}. Fix: pass "
                                       f"numbers, (regular) nested lists of numbers or an array") from None
    if dtype is not None:
        try:
            target = _dt.as_dtype(dtype)
        except UnsupportedDTypeError as err:
            raise UnsupportedDTypeError(f"to_tensor: {err}") from None
        if arr.dtype.kind not in "biuf" and arr.size:
            raise UnsupportedDTypeError(f"to_tensor: cannot convert data of dtype {arr.dtype} to {target.name}. "
                                        f"Fix: pass numbers")
        return _dt.fitted("to_tensor", arr, target)
    if arr.dtype.kind == "f" and not isinstance(data, np.ndarray) and arr.dtype == np.float64 \
            and not isinstance(data, (np.generic, Tensor)):
        arr = _dt.fitted("to_tensor", arr, _dt.DEFAULT_FLOAT)  # Python floats default to float32, as in paddle
    elif arr.dtype.kind in "iu" and arr.dtype not in _dt.ALL:  # uint16/32/64 (and other byte orders)
        if arr.dtype.kind == "u" and arr.dtype.itemsize == 8 and arr.size and arr.max() > np.iinfo(np.int64).max:
            raise UnsupportedDTypeError(f"to_tensor: {arr.dtype} values above {np.iinfo(np.int64).max} do not fit "
                                        f"in int64, the widest supported integer. Fix: convert to float64 first")
        arr = arr.astype(_dt.DEFAULT_INT)
    if arr.dtype not in _dt.ALL:
        if arr.size == 0 and arr.dtype.kind in "OUS":
            arr = arr.astype(_dt.DEFAULT_FLOAT)
        else:
            names = ", ".join(d.name for d in _dt.ALL)
            raise UnsupportedDTypeError(f"to_tensor: dtype {arr.dtype} is not supported; supported dtypes: {names}. "
                                        f"Fix: convert the data with .astype(...) or pass dtype=")
    return np.array(arr, order="C", copy=True)


def target_device(device):
    """The Device a new tensor goes to: `device`, else the current device."""
    return _device.get(device) if device is not None else _device.current()


def to_tensor(data, dtype=None, device=None) -> Tensor:
    """A tensor holding a copy of `data` (nested lists, numbers, numpy arrays, tensors) on `device`."""
    dev = target_device(device)
    arr = _host_array(data, dtype)
    return _make(_device_data(dev, arr), dev)


def from_dlpack(obj) -> Tensor:
    """A host-memory tensor sharing memory with a DLPack-capable CPU object (numpy, torch, ...)."""
    try:
        arr = np.from_dlpack(obj)
    except (TypeError, ValueError, RuntimeError, BufferError) as err:
        raise InvalidArgumentError(f"from_dlpack: cannot take {type(obj).__name__}: {err}. Fix: pass an object with "
                                   f"__dlpack__ in CPU memory (numpy, torch, ...)") from None
    if arr.dtype not in _dt.ALL:
        names = ", ".join(d.name for d in _dt.ALL)
        raise UnsupportedDTypeError(f"from_dlpack: dtype {arr.dtype} is not supported; supported dtypes: {names}. "
                                    f"Fix: convert it first")
    dev = _device.get(config.fallback_device)
    if not dev.host_memory:
        raise InvalidArgumentError(f"from_dlpack needs a host-memory fallback device, {dev} is not one. Fix: set "
                                   f"HWADAPTER_FALLBACK_DEVICE=cpu")
    return _make(np.ascontiguousarray(arr), dev)
