"""The dtypes hwadapter supports and its promotion rules (Python array API standard)."""
from __future__ import annotations

import numpy as np

from .errors import UnsupportedDTypeError

bool_ = np.dtype("bool")
int8, int16, int32, int64 = (np.dtype(n) for n in ("int8", "int16", "int32", "int64"))
uint8 = np.dtype("uint8")
float16, float32, float64 = (np.dtype(n) for n in ("float16", "float32", "float64"))

ALL = (bool_, int8, int16, int32, int64, uint8, float16, float32, float64)
INTEGER = (int8, int16, int32, int64, uint8)
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
    try:
        d = np.dtype(dt) if dt is not None else None  # np.dtype(None) would be float64
    except (TypeError, ValueError, SyntaxError):
        d = None
    if d is None or d not in ALL:
        names = ", ".join(x.name for x in ALL)
        raise UnsupportedDTypeError(f"dtype {dt!r} is not supported; use one of: {names}")
    return d


def _category(d: np.dtype) -> str:
    return "b" if d == bool_ else ("f" if d.kind == "f" else "i")


def _promote_pair(a: np.dtype, b: np.dtype) -> np.dtype:
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
    if a.kind == b.kind:  # both signed (uint8 is the only unsigned type)
        return a if a.itemsize >= b.itemsize else b
    signed = a if a.kind == "i" else b  # uint8 with a signed type: the smallest signed type holding both
    return signed if signed.itemsize > 1 else int16


_TABLE = {(a, b): _promote_pair(a, b) for a in ALL for b in ALL}


def result_type(*dts: np.dtype) -> np.dtype:
    """Promote tensor dtypes by the array API standard's lattice."""
    out = dts[0]
    for d in dts[1:]:
        out = _TABLE[out, d]
    return out


def scalar_dtype(value, other: np.dtype) -> np.dtype:
    """The dtype a Python scalar takes next to a tensor: weak, it adopts the tensor's kind when it fits."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return other if other != bool_ else DEFAULT_INT
    if isinstance(value, float):
        return other if other.kind == "f" else DEFAULT_FLOAT
    raise UnsupportedDTypeError(f"cannot combine a tensor with a {type(value).__name__}; use a tensor or a Python number")


def promotion_table() -> str:
    """The promotion table as Markdown, for the docs."""
    head = "| | " + " | ".join(d.name for d in ALL) + " |"
    rows = [head, "|" + "---|" * (len(ALL) + 1)]
    for a in ALL:
        rows.append(f"| **{a.name}** | " + " | ".join(_TABLE[a, b].name for b in ALL) + " |")
    return "\n".join(rows)
