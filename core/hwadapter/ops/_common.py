"""Argument checks and dtype promotion shared by every op family (the bottom of the ops package)."""
from __future__ import annotations

import builtins
import difflib
import math
import functools
import inspect

import numpy as np

from ..api import dtypes as _dt
from ..dispatch.dispatcher import dispatch
from ..api.errors import HwAdapterError, InvalidArgumentError, UnsupportedDTypeError
from ..tensor import Tensor, _make
from ..api import shapes
from ..runtime.device import Device as _Device
from ..runtime.memory import check_fits

_FLOAT = frozenset(_dt.FLOATING)
_NUMERIC = frozenset(_dt.NUMERIC)
_INTEGER = frozenset(_dt.INTEGER)
_NUMBER = (bool, int, float, np.bool_, np.integer, np.floating)
_INT_RANGE = {d: (int(np.iinfo(d).min), int(np.iinfo(d).max)) for d in _dt.INTEGER}


def _scalar(value, like: Tensor, dtype=None, op: str = "") -> Tensor:
    """A 0-d tensor on `like`'s device (Python numbers are weakly typed: they take the tensor's dtype)."""
    dt = dtype or _dt.scalar_dtype(value, like._dtype, op or "op")
    bounds = _INT_RANGE.get(dt)
    if bounds is not None and not isinstance(value, float) and not bounds[0] <= value <= bounds[1]:
        raise InvalidArgumentError(
            f"{op or 'op'}: the Python int {shapes.show(value)} does not fit in {dt.name}, the dtype it takes next to "
            f"a {like._dtype.name} tensor (valid: {bounds[0]}..{bounds[1]}). Fix: cast the tensor to a wider dtype "
            f"first, e.g. x.astype('int64') or x.astype('float32')")
    if dt.kind == "f" and isinstance(value, int) and builtins.abs(value) > _FLOAT64_MAX:
        raise InvalidArgumentError(f"{op or 'op'}: the Python int {shapes.show(value)} is beyond every float dtype. "
                                   f"Fix: use a number within float64's range")
    dev = like._device
    # made once per (value, dtype, device) on a host-memory device (others keep their uploads in Device.constants;
    # a tracing device's are its graph's constants); a zero is keyed by its sign too (0.0 == -0.0, but 1 / x tells
    # them apart), a nan is never found (nan != nan)
    key = (value, type(value), dt, dev, value == 0 and math.copysign(1.0, value)) \
        if dev.__class__ is _Device and dev.host_memory else None
    if key is not None:
        hit = _SCALARS.get(key)
        if hit is not None:
            return hit
    with np.errstate(over="ignore"):  # beyond a float dtype's range is inf, as the arithmetic would make it
        arr = np.array(value, dtype=dt)
    t = _make(dev.constant(arr), dev)
    if key is not None:
        if len(_SCALARS) > 4096:
            _SCALARS.clear()
        _SCALARS[key] = t
    return t


_FLOAT64_MAX = float(np.finfo(np.float64).max)
#: The 0-d tensors `_scalar` made on real devices: tensors never change, so one serves every `x * 0.5`.
_SCALARS: dict = {}


def _tensor(op: str, x) -> Tensor:
    if isinstance(x, Tensor):
        return x
    raise InvalidArgumentError(f"{op}: expected a Tensor, got {type(x).__name__}. Fix: wrap it with hwadapter.to_tensor")


def _check(op: str, x: Tensor, allowed: frozenset, what: str) -> None:
    if x._dtype not in allowed:
        raise UnsupportedDTypeError(f"{op}: {what} inputs are required, got {x._dtype.name} on {x._device}. "
                                    f"Fix: cast first, e.g. x.astype('float32')")


def _op_dtype(op: str, dtype) -> np.dtype:
    try:
        return _dt.as_dtype(dtype)
    except UnsupportedDTypeError as err:
        raise UnsupportedDTypeError(f"{op}: {err}") from None


def cast(x, dtype):
    """x converted to `dtype` (float to int truncates toward zero)."""
    x = _tensor("cast", x)
    dt = _op_dtype("cast", dtype)
    if dt == x._dtype:
        return x
    return dispatch("cast", (x,), {"dtype": dt.name})


def index_int64(index: Tensor) -> Tensor:
    """An integer index tensor as int64. uint64 values beyond int64 are held at its largest (outside every axis, so
    the op's range check refuses them) rather than wrapped to negative indices, which would count from the end."""
    if index._dtype == _dt.uint64:
        index = dispatch("minimum", (index, _scalar(_INT64_MAX, index, _dt.uint64)), {})
    return index if index._dtype == _dt.int64 else cast(index, _dt.int64)


_INT64_MAX = int(np.iinfo(np.int64).max)


def _as_float(x: Tensor) -> Tensor:
    return x if x._dtype in _FLOAT else cast(x, _dt.DEFAULT_FLOAT)


def _promote(op: str, *xs):
    """Tensors (and Python numbers) brought to one device and one dtype."""
    tensors = [x for x in xs if isinstance(x, Tensor)]
    if not tensors:
        raise InvalidArgumentError(f"{op}: at least one input must be a Tensor. Fix: wrap one with "
                                   f"hwadapter.to_tensor")
    dt = _dt.result_type(*(t._dtype for t in tensors), op=op)
    out = []
    for x in xs:
        if isinstance(x, Tensor):
            out.append(x if x._dtype == dt else cast(x, dt))
        elif isinstance(x, (_NUMBER, np.generic)):
            v = plain_number(op, x, dt)  # numpy scalars are weak, like Python numbers
            out.append(_scalar(v, tensors[0], _dt.scalar_dtype(v, dt, op), op))
        else:
            raise InvalidArgumentError(f"{op}: cannot use {type(x).__name__} as an operand. Fix: use a Tensor or a "
                                       f"number")
    dt = _dt.result_type(*(t._dtype for t in out), op=op)
    return [t if t._dtype == dt else cast(t, dt) for t in out]


def plain_number(op: str, x, dtype: np.dtype):
    """A numpy scalar as the Python number it holds (x itself when it is one); a numpy scalar no tensor dtype holds
    (longdouble, complex, datetime) is refused naming `op` and the `dtype` of the tensor it meets."""
    if not isinstance(x, np.generic):
        return x
    v = x.item() if isinstance(x, _NUMBER) else x  # longdouble's item() is a longdouble: no Python number holds it
    if not isinstance(v, (bool, int, float)):
        raise _dt.unsupported_scalar(op, x, dtype)
    return v


def _check_shapes(op: str, *xs: Tensor) -> None:
    first = xs[0]._data.shape
    for x in xs[1:]:
        if x._data.shape != first:
            shapes.broadcast(op, *(t._data.shape for t in xs))
            return


# --- numbers that are attributes ---------------------------------------------------------------------------------
def number_arg(op: str, name: str, value):
    """`value` as a Python bool, int or float: Python and numpy numbers, one-element tensors; nothing else."""
    if isinstance(value, Tensor) and value.size == 1:
        value = value.item()
    if isinstance(value, np.generic) and isinstance(value, _NUMBER):
        value = value.item()
    if not isinstance(value, (bool, int, float)):
        raise InvalidArgumentError(f"{op}: {name} must be a number, not {shapes.show(value)} "
                                   f"({type(value).__name__}). Fix: pass a Python int or float")
    return value


def fill_value(op: str, name: str, value, dtype: np.dtype):
    """A number as `dtype` holds it (a Python bool, int or float), refused when `dtype` cannot hold it."""
    value = number_arg(op, name, value)
    _dt.check_fits(op, name, value, dtype)
    if dtype == _dt.bool_:
        return builtins.bool(value)
    return int(value) if dtype.kind in "iu" else float(value)


# --- sizes that cannot exist -------------------------------------------------------------------------------------
def check_size(op: str, shape: tuple, dtype: np.dtype, dev, staged: bool = False, what: str = "the result") -> None:
    """Refuse, before anything is allocated, a result (or `what` else the op allocates) larger than `dev`'s memory,
    and than the machine's RAM when it is made on the host first (`staged`): the device floor's check_fits; and a
    result of more axes than a tensor has."""
    shapes.check_rank(op, shape, what)
    check_fits(f"{op} on {dev}", shape, dtype, dev, staged=staged, what=what)


# --- keyword arguments -------------------------------------------------------------------------------------------
#: Other libraries' names for hwadapter's parameters (torch, numpy, paddle), for a misspelt keyword's hint.
_SPELLINGS = {
    "dim": ("axis", "perm"), "dims": ("perm", "axis"), "axes": ("axis", "perm"), "keepdims": ("keepdim",),
    "keepdim": ("keepdims",), "input": ("x",), "other": ("y",), "a": ("x",), "b": ("y",), "mat2": ("y",),
    "size": ("shape",), "value": ("fill_value",), "fill": ("fill_value",), "place": ("device",),
    "permutation": ("perm",), "a_min": ("min",), "a_max": ("max",), "eps": ("epsilon",), "indices": ("index",),
    "split_size_or_sections": ("num_or_sections",), "sections": ("num_or_sections",), "pad_width": ("pad",),
    "constant_values": ("value",), "start_dim": ("start_axis",), "end_dim": ("stop_axis",),
}


def _hint(unknown: str, params: list) -> str:
    """The parameter of `params` a misspelt or foreign keyword most likely means, as advice."""
    for name in _SPELLINGS.get(unknown, ()):
        if name in params:
            return f"use {name}= (hwadapter's name, as in paddle)"
    if unknown in ("out", "inplace"):
        return "hwadapter tensors are immutable; use the returned tensor"
    if unknown == "name":
        return "hwadapter ops take no name; leave it out"
    close = difflib.get_close_matches(unknown, params, n=1)
    return f"use {close[0]}=" if close else f"use one of its parameters: {', '.join(params)}"


def _call_error(name: str, signature: inspect.Signature, args: tuple, kwargs: dict) -> InvalidArgumentError | None:
    """What is wrong with calling op `name` this way, as our error; None when the call binds (the TypeError came
    from inside the op)."""
    params = list(signature.parameters)
    unknown = [k for k in kwargs if k not in signature.parameters]
    if unknown:
        return InvalidArgumentError(f"{name}: got an unexpected keyword argument {unknown[0]!r}. "
                                    f"Fix: {_hint(unknown[0], params)}; {name}{signature}")
    try:
        signature.bind(*args, **kwargs)
    except TypeError as err:
        return InvalidArgumentError(f"{name}: {err}. Fix: call it as {name}{signature}")
    return None


def public(fn, name: str):
    """Op `fn` as users call it, under `name`: a call Python would refuse (an unknown or misspelt keyword, such as
    torch's dim= for axis=, a missing or extra argument) raises InvalidArgumentError naming the op and the right
    spelling. Tensor operators bind to fn itself (op.__wrapped__): they cannot be called with keywords."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def op(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except HwAdapterError:
            raise
        except TypeError:
            error = _call_error(name, signature, args, kwargs)
            if error is None:
                raise
            raise error from None

    op.__name__ = op.__qualname__ = name
    return op


def make_public(namespace: dict, names) -> None:
    """Replace each function of `names` in a module's `namespace` with `public(fn, name)`."""
    for name in names:
        namespace[name] = public(namespace[name], name)
