"""The dtypes hwadapter supports and its promotion rules (Python array API standard)."""
from __future__ import annotations

import numpy as np

from .errors import InvalidArgumentError, UnsupportedDTypeError

bool_ = np.dtype("bool")
int8, int16, int32, int64 = (np.dtype(n) for n in ("int8", "int16", "int32", "int64"))
uint8, uint16, uint32, uint64 = (np.dtype(n) for n in ("uint8", "uint16", "uint32", "uint64"))
float16, float32, float64 = (np.dtype(n) for n in ("float16", "float32", "float64"))

ALL = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, float32, float64)
SIGNED = (int8, int16, int32, int64)
UNSIGNED = (uint8, uint16, uint32, uint64)
INTEGER = SIGNED + UNSIGNED
FLOATING = (float16, float32, float64)
NUMERIC = INTEGER + FLOATING
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"bool_": bool_, "float": float32, "int": int64, "half": float16, "double": float64})

DEFAULT_FLOAT = float32
DEFAULT_INT = int64


def as_dtype(dt) -> np.dtype:
    """Turn a name, numpy dtype or Python type into one of the supported dtypes."""
    if dt is float:
        return DEFAULT_FLOAT
    if dt is int:
        return DEFAULT_INT
    if dt is bool:
        return bool_
    if isinstance(dt, str) and dt in _BY_NAME:
        return _BY_NAME[dt]
    try:  # names, dtypes and scalar types only: np.dtype(None) would be float64, np.dtype(np.int8(5)) int8
        d = np.dtype(dt) if isinstance(dt, (str, np.dtype, type)) else None
    except (TypeError, ValueError, SyntaxError):
        d = None
    if d is None or d not in ALL:
        names = ", ".join(x.name for x in ALL)
        raise UnsupportedDTypeError(f"dtype {_cut(repr(dt))} is not supported. Fix: use one of: {names}")
    return d


def _cut(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _category(d: np.dtype) -> str:
    return "b" if d == bool_ else ("f" if d.kind == "f" else "i")


def _promote_pair(a: np.dtype, b: np.dtype) -> np.dtype | None:
    """a and b promoted; None where no dtype holds both (uint64 with a signed integer)."""
    if a == b:
        return a
    ca, cb = _category(a), _category(b)
    if ca == "b":
        return b
    if cb == "b":
        return a
    if ca == cb == "f":
        return a if a.itemsize >= b.itemsize else b
    if ca == "f":  # mixed int/float is left to implementations by the standard: the float wins
        return a
    if cb == "f":
        return b
    if a.kind == b.kind:  # both signed or both unsigned: the wider
        return a if a.itemsize >= b.itemsize else b
    signed, unsigned = (a, b) if a.kind == "i" else (b, a)
    # the standard's rule: the smallest signed type wider than the unsigned one (uint8 + int8 -> int16, uint16 +
    # int16 -> int32, uint32 + int32 -> int64); none is wider than uint64, and the standard leaves that pair to
    # implementations: numpy's float64 would round values above 2^53, so it is an error here (result_type)
    wider = next((s for s in SIGNED if s.itemsize > unsigned.itemsize), None)
    if wider is None:
        return None
    return wider if wider.itemsize >= signed.itemsize else signed


_TABLE = {(a, b): _promote_pair(a, b) for a in ALL for b in ALL}


def result_type(*dts: np.dtype, op: str = "op") -> np.dtype:
    """Promote tensor dtypes by the array API standard's lattice; uint64 with a signed integer is an error."""
    if len(dts) > 2:  # a float wins over every integer, whatever order they come in (a pair's table says so)
        floats = [d for d in dts if d.kind == "f"]
        dts = floats or dts
    out = dts[0]
    for d in dts[1:]:
        joined = _TABLE[out, d]
        if joined is None:
            raise UnsupportedDTypeError(
                f"{op}: cannot combine uint64 with {(d if out == uint64 else out).name}: no integer dtype holds both "
                f"(the array API standard leaves this pair to implementations; numpy's float64 would round values "
                f"above 2^53). Fix: cast one side first, e.g. x.astype('int64') when its values are below 2^63, or "
                f"both to float64")
        out = joined
    return out


def scalar_dtype(value, other: np.dtype, op: str = "op") -> np.dtype:
    """The dtype a Python scalar takes next to a tensor of `other`: weak, it adopts the tensor's kind when it fits."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return other if other != bool_ else DEFAULT_INT
    if isinstance(value, float):
        return other if other.kind == "f" else DEFAULT_FLOAT
    raise unsupported_scalar(op, value, other)


def unsupported_scalar(op: str, value, other: np.dtype) -> UnsupportedDTypeError:
    """The error for a scalar of a type no tensor holds (numpy's longdouble, complex, ...) next to an `other` tensor."""
    kind = f"numpy {type(value).__name__}" if isinstance(value, np.generic) else type(value).__name__
    fix = "pass float(value), rounded to float64" if isinstance(value, np.floating) else \
        "pass value.real if its imaginary part is 0" if isinstance(value, np.complexfloating) else \
        "pass a Python int, float or bool"
    return UnsupportedDTypeError(f"{op}: cannot combine a {other.name} tensor with a {kind} scalar "
                                 f"({_cut(repr(value))}): no supported dtype holds it. Fix: {fix}")


def value_range(d: np.dtype) -> tuple:
    """(lowest, highest) finite value of a numeric dtype; (False, True) for bool."""
    if d == bool_:
        return (False, True)
    info = np.iinfo(d) if d.kind in "iu" else np.finfo(d)
    return (int(info.min), int(info.max)) if d.kind in "iu" else (float(info.min), float(info.max))


def _wider(d: np.dtype) -> str:
    """Advice for a value `d` cannot hold."""
    wider = "int64" if d.kind in "iu" and d.itemsize < 8 else "uint64 for integers up to 2^64 - 1, or float64" \
        if d == int64 else "float64" if d != float64 else None
    return f"use a dtype that holds it (e.g. {wider}), or bring the value into range first" if wider else \
        "bring the value into range first"


def _does_not_fit(op: str, what: str, value, d: np.dtype) -> InvalidArgumentError:
    lo, hi = value_range(d)
    text = _cut(repr(value))
    span = f"{lo}..{hi}" if d.kind in "iu" else f"{lo:g}..{hi:g}"
    finite = isinstance(value, int) or value - value == 0  # nan and inf are not
    fix = _wider(d) if finite else "use a float dtype (e.g. float32), or replace the nan or inf first"
    return InvalidArgumentError(f"{op}: {what} {text} does not fit in {d.name} (range {span}). Fix: {fix}")


def check_fits(op: str, what: str, value, d: np.dtype) -> None:
    """Refuse a Python number that `d` cannot hold: nan, inf or out of range for an integer dtype, a finite value
    that would round to inf for a float dtype. Floats are truncated toward zero for integers, as cast does."""
    if d == bool_ or isinstance(value, (bool, np.bool_)):
        return
    lo, hi = value_range(d)
    if d.kind in "iu":
        if value != value or value in (float("inf"), float("-inf")) or not lo <= int(value) <= hi:
            raise _does_not_fit(op, what, value, d)
    elif value == value and abs(value) != float("inf") and not _rounds_finite(value, d):
        raise _does_not_fit(op, what, value, d)


_FLOAT64_MAX = float(np.finfo(np.float64).max)


def _rounds_finite(value, d: np.dtype) -> bool:
    if abs(value) > _FLOAT64_MAX:  # an int beyond every float
        return False
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.asarray(float(value), dtype=d)))


def fitted(op: str, arr: np.ndarray, d: np.dtype) -> np.ndarray:
    """A C-contiguous copy of host array `arr` as dtype `d`, refusing values `d` cannot hold (see check_fits)."""
    if d.kind in "iu" and arr.size and not np.can_cast(arr.dtype, d, "safe"):
        _check_integer_range(op, arr, d)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.array(arr, dtype=d, order="C")
    if d.kind == "f" and arr.size and arr.dtype.kind in "iuf" and not np.can_cast(arr.dtype, d, "safe"):
        grown = np.isinf(out) & np.isfinite(arr)
        if grown.any():
            raise _does_not_fit(op, "value", arr[grown].flat[0].item(), d)
    return out


def _check_integer_range(op: str, arr: np.ndarray, d: np.dtype) -> None:
    if arr.dtype.kind == "f" and not np.isfinite(arr).all():
        raise _does_not_fit(op, "value", arr[~np.isfinite(arr)].flat[0].item(), d)
    if arr.dtype.kind in "iuf":
        lo, hi = value_range(d)
        for v in (arr.min().item(), arr.max().item()):
            if not lo <= int(v) <= hi:
                raise _does_not_fit(op, "value", v, d)


def _cell(d: np.dtype | None) -> str:
    return d.name if d is not None else "error"


def promotion_table() -> str:
    """The promotion table as Markdown, for the docs."""
    head = "| | " + " | ".join(d.name for d in ALL) + " |"
    rows = [head, "|" + "---|" * (len(ALL) + 1)]
    for a in ALL:
        rows.append(f"| **{a.name}** | " + " | ".join(_cell(_TABLE[a, b]) for b in ALL) + " |")
    return "\n".join(rows)
