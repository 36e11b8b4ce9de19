"""The dtypes kernels may use, and how each is stored and computed."""

import numpy as np

from .errors import KernelError

DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "bool")
FLOATS = frozenset({"float16", "float32", "float64"})
UNSIGNED = frozenset({"uint8", "uint16", "uint32", "uint64"})
INTS = frozenset({"int8", "int16", "int32", "int64"}) | UNSIGNED
SHORT = {"float16": "f16", "float32": "f32", "float64": "f64", "int8": "i8", "int16": "i16",
         "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16", "uint32": "u32", "uint64": "u64", "bool": "b"}


def is_dtype(name) -> bool:
    """True if ``name`` spells a supported concrete dtype."""
    try:
        normalize(name)
    except KernelError:
        return False
    return True


def normalize(dtype) -> str:
    """Canonical dtype name for a string, numpy dtype or numpy scalar type."""
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = None
    if name not in DTYPES:
        raise KernelError(f"unsupported dtype {dtype!r}; supported: {', '.join(DTYPES)}")
    return name


def register(dtype: str) -> str:
    """The dtype values of ``dtype`` have while computed: float16 computes in float32."""
    return "float32" if dtype == "float16" else dtype


def to_numpy(dtype: str) -> np.dtype:
    """numpy dtype of a canonical dtype name."""
    return np.dtype(dtype)


def is_float(dtype: str) -> bool:
    """True for float16/32/64."""
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    """True for the integer dtypes (not bool)."""
    return dtype in INTS


def is_unsigned(dtype: str) -> bool:
    """True for the unsigned integer dtypes."""
    return dtype in UNSIGNED


def is_numeric(dtype: str) -> bool:
    """True for every dtype but bool."""
    return dtype != "bool"
