"""The supported dtypes and type promotion, checked against a table written out here by hand (not computed by
the code under test): array API lattice within a kind and between signed and unsigned integers (uint8 + int8 ->
int16, uint16 + int16 -> int32, uint32 + int32 -> int64), uint64 with a signed integer an error, the float wins over
integers, and Python scalars are weak."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hwadapter as hw
from hwadapter import InvalidArgumentError, UnsupportedDTypeError
from hwadapter.api import dtypes

ORDER = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
         "float64"]
# Row dtype promoted with column dtype, in ORDER. Symmetric. "error": no dtype holds both (UnsupportedDTypeError).
EXPECTED = """
bool     bool    int8    int16   int32   int64   uint8   uint16  uint32  uint64  float16 float32 float64
int8     int8    int8    int16   int32   int64   int16   int32   int64   error   float16 float32 float64
int16    int16   int16   int16   int32   int64   int16   int32   int64   error   float16 float32 float64
int32    int32   int32   int32   int32   int64   int32   int32   int64   error   float16 float32 float64
int64    int64   int64   int64   int64   int64   int64   int64   int64   error   float16 float32 float64
uint8    uint8   int16   int16   int32   int64   uint8   uint16  uint32  uint64  float16 float32 float64
uint16   uint16  int32   int32   int32   int64   uint16  uint16  uint32  uint64  float16 float32 float64
uint32   uint32  int64   int64   int64   int64   uint32  uint32  uint32  uint64  float16 float32 float64
uint64   uint64  error   error   error   error   uint64  uint64  uint64  uint64  float16 float32 float64
float16  float16 float16 float16 float16 float16 float16 float16 float16 float16 float16 float32 float64
float32  float32 float32 float32 float32 float32 float32 float32 float32 float32 float32 float32 float64
float64  float64 float64 float64 float64 float64 float64 float64 float64 float64 float64 float64 float64
"""
TABLE = {}
for _line in EXPECTED.strip().splitlines():
    _row, *_cells = _line.split()
    for _col, _res in zip(ORDER, _cells):
        TABLE[_row, _col] = _res
PAIRS = sorted(TABLE)


def mk(arr, device):
    return hw.to_tensor(np.asarray(arr), device=device)


def test_supported_dtypes():
    assert [d.name for d in dtypes.ALL] == ORDER
    assert hw.float32 == np.dtype("float32") and hw.bool_ == np.dtype(bool) and hw.bool == np.dtype(bool)
    assert [d.name for d in dtypes.INTEGER] == ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                                                "uint64"]
    assert hw.uint16 == np.dtype("uint16") and hw.uint64 == np.dtype("uint64")
    assert [d.name for d in dtypes.FLOATING] == ["float16", "float32", "float64"]


def test_table_is_symmetric():
    assert all(TABLE[a, b] == TABLE[b, a] for a, b in PAIRS)


def test_result_type():
    for a, b in PAIRS:
        if TABLE[a, b] == "error":
            with pytest.raises(UnsupportedDTypeError, match="uint64.*Fix"):
                dtypes.result_type(np.dtype(a), np.dtype(b))
        else:
            assert dtypes.result_type(np.dtype(a), np.dtype(b)) == np.dtype(TABLE[a, b]), (a, b)


def test_ops_promote_by_the_table(device):
    """What the binary ops, where and concat really return, on every device."""
    for a, b in PAIRS:
        _ops_promote(a, b, device)


def _ops_promote(a, b, device):
    x, y = mk(np.ones(2, a), device), mk(np.zeros(2, b), device)
    if TABLE[a, b] == "error":
        for fn in (hw.equal, hw.maximum, lambda x, y: hw.concat([x, y])):
            with pytest.raises(UnsupportedDTypeError, match="cannot combine uint64"):
                fn(x, y)
        return
    expected = np.dtype(TABLE[a, b])
    assert hw.equal(x, y).dtype == np.dtype(bool)
    assert hw.concat([x, y]).dtype == expected
    assert hw.where(mk(np.array([True, False]), device), x, y).dtype == expected
    if expected != np.dtype(bool):
        out = hw.maximum(x, y)
        assert out.dtype == expected
        assert out.numpy().tolist() == [1, 1]
        assert hw.divide(x, mk(np.ones(2, b), device)).dtype == (expected if expected.kind == "f"
                                                                   else np.dtype("float32"))


def test_three_way_promotion():
    u8, i8, f16 = np.dtype("uint8"), np.dtype("int8"), np.dtype("float16")
    assert dtypes.result_type(u8, i8, f16) == f16
    assert dtypes.result_type(np.dtype(bool), u8, i8) == np.dtype("int16")
    assert dtypes.result_type(np.dtype("int32")) == np.dtype("int32")
    u64, i16, f32 = np.dtype("uint64"), np.dtype("int16"), np.dtype("float32")
    for order in ((u64, i16, f32), (u64, f32, i16), (f32, i16, u64)):  # a float present: uint64 and int16 never meet
        assert dtypes.result_type(*order) == f32
    for order in ((u64, u8, i16), (i16, u8, u64)):
        with pytest.raises(UnsupportedDTypeError, match="cannot combine uint64 with int16"):
            dtypes.result_type(*order)


# Python scalars are weak: they take the tensor's dtype when they are of the same kind.
SCALAR_CASES = [
    # (tensor dtype, scalar, result dtype)
    ("int8", 3, "int8"), ("uint8", 3, "uint8"), ("int16", -7, "int16"), ("int64", 2 ** 40, "int64"),
    ("int8", 1.5, "float32"), ("int64", 2.0, "float32"), ("uint8", 0.5, "float32"),
    ("float16", 3, "float16"), ("float16", 1.5, "float16"), ("float64", 1, "float64"), ("float32", 1e30, "float32"),
    ("bool", 2, "int64"), ("bool", 2.5, "float32"),
    ("int32", True, "int32"), ("float16", False, "float16"),
    ("int16", np.int64(3), "int16"), ("float16", np.float64(0.5), "float16"),
]


def test_python_scalars_are_weak(device):
    for tdt, scalar, expected in SCALAR_CASES:
        _weak(tdt, scalar, expected, device)


def _weak(tdt, scalar, expected, device):
    x = mk(np.ones(3, tdt), device)
    out = x + scalar
    assert out.dtype == np.dtype(expected)
    assert (scalar + x).dtype == np.dtype(expected)
    np.testing.assert_allclose(out.numpy().astype(np.float64), [1.0 + float(scalar)] * 3, rtol=1e-3)
    assert (x < scalar).dtype == np.dtype(bool)
    assert dtypes.scalar_dtype(scalar.item() if isinstance(scalar, np.generic) else scalar,
                               np.dtype(tdt)) == np.dtype(expected)


def test_scalar_that_does_not_fit_raises(device):
    for tdt, scalar in [("int8", 128), ("int8", -129), ("uint8", -1), ("uint8", 256), ("int16", 40000),
                        ("int32", 2 ** 31), ("int64", 2 ** 63)]:
        with pytest.raises(InvalidArgumentError, match=f"{scalar}.*{tdt}"):
            mk(np.ones(2, tdt), device) + scalar
    assert (mk(np.ones(1, "int8"), device) + 127).numpy().tolist() == [-128]  # the tensor's dtype wraps
    with np.errstate(all="raise"):  # a float scalar beyond float16's range is inf, quietly
        assert (mk(np.ones(1, "float16"), device) * 1e6).numpy().tolist() == [np.inf]


def test_bool_and_bool_scalar():
    b = hw.to_tensor([True, False])
    with pytest.raises(UnsupportedDTypeError, match="add"):
        b + True
    assert (b == True).numpy().tolist() == [True, False]  # noqa: E712
    assert hw.logical_and(b, True).numpy().tolist() == [True, False]


def test_docs_show_the_current_table():
    text = (Path(__file__).parents[1] / "docs" / "dtypes.md").read_text()
    assert dtypes.promotion_table() in text, "docs/dtypes.md is out of date: paste hwadapter.api.dtypes.promotion_table()"


def test_promotion_table_markdown():
    md = dtypes.promotion_table()
    lines = md.splitlines()
    assert len(lines) == 2 + len(ORDER)
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[1:] == ORDER
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        row = cells[0].strip("*")
        assert cells[1:] == [TABLE[row, col] for col in ORDER]


def test_as_dtype():
    for spelling, expected in [
        ("float32", "float32"), ("float", "float32"), ("double", "float64"), ("half", "float16"), ("int", "int64"),
        ("bool", "bool"), ("bool_", "bool"), (float, "float32"), (int, "int64"), (bool, "bool"), (np.uint8, "uint8"),
        (np.dtype("int16"), "int16"), (hw.int8, "int8"), ("i4", "int32"), ("f8", "float64"),
    ]:
        assert dtypes.as_dtype(spelling) == np.dtype(expected), spelling


def test_as_dtype_rejects():
    for bad in ["complex64", "bfloat16", "float128", "string", "nope", object, None, 3.5, ("i4", -1),
                np.dtype(">f4"), "datetime64"]:
        with pytest.raises(UnsupportedDTypeError, match="not supported"):
            dtypes.as_dtype(bad)


def test_as_dtype_rejects_values_that_numpy_reads_as_dtypes():
    """np.dtype(np.int8(5)) is int8 and np.dtype(np.array(...)) fails with numpy's text: a value is not a dtype."""
    for bad in [np.int8(5), np.float32(1.5), np.array([1, 0]), 3, True]:
        with pytest.raises(UnsupportedDTypeError, match="not supported.*Fix"):
            dtypes.as_dtype(bad)


# --- values that do not fit the dtype ---------------------------------------------------------------------------
NARROW = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float16", "float32"]


def _holds(values: np.ndarray, dtype: str) -> bool:
    """Oracle: Python's exact integers for integer targets, numpy's own rounding for float targets."""
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return all(np.isfinite(v) and info.min <= int(v) <= info.max for v in values.tolist())
    with np.errstate(over="ignore"):
        return bool(np.all(np.isfinite(values.astype(dt)) | ~np.isfinite(values)))


@settings(max_examples=200, deadline=None)
@given(values=st.one_of(hnp.arrays(np.int64, st.integers(0, 4)),
                        hnp.arrays(np.float64, st.integers(0, 4), elements=st.floats(width=64))),
       dtype=st.sampled_from(NARROW))
def test_to_tensor_refuses_what_the_dtype_cannot_hold(values, dtype):
    """Never numpy's silent wrap (int8 300 -> 44) or overflow to inf: the value fits, or it is our error."""
    if not _holds(values, dtype):
        with pytest.raises(InvalidArgumentError, match=f"to_tensor.*does not fit in {dtype}.*Fix"):
            hw.to_tensor(values, dtype=dtype)
        return
    with np.errstate(invalid="ignore"):
        expected = values.astype(dtype)
    np.testing.assert_array_equal(hw.to_tensor(values, dtype=dtype).numpy(), expected)


def test_python_floats_that_float32_cannot_hold_are_refused():
    """Python floats become float32 by default; 1e40 would be inf there."""
    with pytest.raises(InvalidArgumentError, match="1e\\+40.*float32.*Fix.*float64"):
        hw.to_tensor([1.0, 1e40])
    assert hw.to_tensor([1.0, 1e40], dtype="float64").numpy().tolist() == [1.0, 1e40]
    assert hw.to_tensor([np.inf, -np.inf]).numpy().tolist() == [np.inf, -np.inf]


def test_check_fits_messages():
    with pytest.raises(InvalidArgumentError, match="op: value nan does not fit in int32.*Fix: use a float dtype"):
        dtypes.check_fits("op", "value", float("nan"), np.dtype("int32"))
    with pytest.raises(InvalidArgumentError, match="-1 does not fit in uint8 \\(range 0..255\\).*int64"):
        dtypes.check_fits("op", "value", -1, np.dtype("uint8"))
    dtypes.check_fits("op", "value", 1 << 70, np.dtype("bool"))  # any number is a bool
