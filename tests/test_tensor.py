"""Tensor: to_tensor, numpy(), .to(device), DLPack with numpy, repr, item, Python operators with scalars on
either side, comparisons, unary minus, slicing, and the errors of each."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import HwAdapterError, InvalidArgumentError, UnsupportedDTypeError

from oracles import assert_close


def mk(arr, device):
    return hw.to_tensor(np.asarray(arr), device=device)


# --- to_tensor ----------------------------------------------------------------------------------------------
TO_TENSOR_CASES = [
    (1, "int64", ()), (1.5, "float32", ()), (True, "bool", ()), ([1, 2, 3], "int64", (3,)),
    ([1.0, 2], "float32", (2,)), ([[True], [False]], "bool", (2, 1)), ([], "float32", (0,)),
    ([[], []], "float32", (2, 0)), (np.float64(2.5), "float64", ()), (np.int8(3), "int8", ()),
    (np.arange(6, dtype=np.uint8).reshape(2, 3), "uint8", (2, 3)), (np.zeros((0, 4), np.float16), "float16", (0, 4)),
    (np.array(7, np.int16), "int16", ()), (np.ones(3, np.uint16), "uint16", (3,)),
    (np.ones(2, np.uint32), "uint32", (2,)), (np.array([1, 2], ">u2"), "uint16", (2,)),
]


def test_to_tensor_infers_dtype_and_shape(device):
    for data, dtype, shape in TO_TENSOR_CASES:
        _infers(data, dtype, shape, device)


def _infers(data, dtype, shape, device):
    t = hw.to_tensor(data, device=device)
    assert t.dtype == np.dtype(dtype)
    assert t.shape == shape and t.ndim == len(shape) and t.size == int(np.prod(shape))
    assert str(t.device) == device and t.place == t.device
    np.testing.assert_array_equal(t.numpy(), np.asarray(data).astype(dtype))


def test_to_tensor_with_dtype_and_round_trip(device):
    for dtype in ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16",
                  "float32", "float64"]:
        _with_dtype(dtype, device)


def _with_dtype(dtype, device):
    data = [[0, 1, 2], [3, 4, 5]]
    t = hw.to_tensor(data, dtype=dtype, device=device)
    assert t.dtype == np.dtype(dtype)
    out = t.numpy()
    assert out.dtype == np.dtype(dtype) and out.flags.c_contiguous
    np.testing.assert_array_equal(out, np.array(data).astype(dtype))
    assert t.nbytes == 6 * np.dtype(dtype).itemsize
    assert t.strides == (3, 1) and t.is_contiguous() and t.numel() == 6
    assert hw.to_tensor(t).dtype == t.dtype  # a tensor keeps its dtype


def test_to_tensor_copies(device):
    src = np.arange(4, dtype=np.float32)
    t = mk(src, device)
    src[0] = 100
    assert t.numpy()[0] == 0
    out = t.numpy()
    out[1] = 100
    assert t.numpy()[1] == 1
    nc = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]  # non-contiguous input
    np.testing.assert_array_equal(mk(nc, device).numpy(), nc)
    u = hw.to_tensor(t, device=device)
    assert u is not t and u.numpy().tolist() == t.numpy().tolist()


def test_to_tensor_errors(device):
    for bad in ["abc", [1 + 2j], np.array([1 + 2j]), [[1, 2], [3]], {"a": 1}, [2 ** 70], object(),
                np.array(["x"])]:
        with pytest.raises((InvalidArgumentError, UnsupportedDTypeError), match="to_tensor"):
            hw.to_tensor(bad, device=device)
    with pytest.raises(UnsupportedDTypeError):
        hw.to_tensor([1, 2], dtype="complex64", device=device)
    with pytest.raises(UnsupportedDTypeError, match="to_tensor"):
        hw.to_tensor(["a"], dtype="float32", device=device)
    with pytest.raises(TypeError):
        hw.Tensor([1, 2])


def test_to_tensor_keeps_uint64_beyond_int64(device):
    t = hw.to_tensor(np.array([2 ** 63 + 1, 5], np.uint64), device=device)
    assert t.dtype == np.uint64 and t.numpy().tolist() == [2 ** 63 + 1, 5]
    with pytest.raises(InvalidArgumentError, match="does not fit in uint64"):
        hw.to_tensor([-1], dtype="uint64", device=device)
    # Python ints are int64 (numpy would make uint64 of these): beyond it, an error saying what to pass
    for big in (2 ** 63, [2 ** 63, 2 ** 64 - 1]):
        with pytest.raises(InvalidArgumentError, match="value 92233720368547758.. does not fit in int64.*uint64"):
            hw.to_tensor(big, device=device)
    held = hw.to_tensor([1, 2 ** 63 + 1], dtype="uint64", device=device)  # numpy's float64 of the list would round
    assert held.dtype == np.uint64 and held.numpy().tolist() == [1, 2 ** 63 + 1]
    with pytest.raises(InvalidArgumentError, match="does not fit in int64"):
        hw.to_tensor([[1], [2 ** 63 + 1]], dtype="int64", device=device)


# --- moving between devices -------------------------------------------------------------------------------------
def test_to_device_and_back(device):
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = hw.to_tensor(arr, device="cpu:0")
    d = t.to(device)
    assert str(d.device) == device
    assert d.to(device) is d  # nothing to do
    back = d.to("cpu:0")
    assert str(back.device) == "cpu:0"
    np.testing.assert_array_equal(back.numpy(), arr)
    np.testing.assert_array_equal(d.cpu().numpy(), arr)
    both = d.to(device, dtype="int32")
    assert both.dtype == np.int32 and str(both.device) == device
    e = hw.to_tensor(np.zeros((0, 2), np.int8), device=device).to("cpu:0")
    assert e.shape == (0, 2) and e.dtype == np.int8
    z = hw.to_tensor(np.float64(1.25), device="cpu:0").to(device)
    assert z.shape == () and z.item() == 1.25


def test_to_unknown_device_is_an_error():
    with pytest.raises(HwAdapterError):
        hw.to_tensor([1.0]).to("nosuchdevice:0")


# --- DLPack -----------------------------------------------------------------------------------------------------------
def test_dlpack_with_numpy():
    for dtype in ["bool", "int8", "int64", "uint8", "uint16", "uint64", "float16", "float32", "float64"]:
        _dlpack(dtype)


def _dlpack(dtype):
    arr = (np.arange(6) % 2).astype(dtype).reshape(2, 3)
    t = hw.to_tensor(arr, device="cpu:0")
    out = np.from_dlpack(t)
    assert out.dtype == np.dtype(dtype) and out.shape == (2, 3)
    np.testing.assert_array_equal(out, arr)
    back = hw.from_dlpack(arr)
    assert back.dtype == np.dtype(dtype) and str(back.device) == "cpu:0"
    np.testing.assert_array_equal(back.numpy(), arr)
    assert t.__dlpack_device__() == arr.__dlpack_device__()


def test_from_dlpack_shares_memory_and_handles_strides():
    src = np.arange(4, dtype=np.float32)
    t = hw.from_dlpack(src)
    src[0] = 42.0
    assert t.numpy()[0] == 42.0
    strided = np.arange(12, dtype=np.int32).reshape(3, 4)[:, 1::2]
    np.testing.assert_array_equal(hw.from_dlpack(strided).numpy(), strided)
    np.testing.assert_array_equal(hw.from_dlpack(np.zeros((0, 3))).numpy(), np.zeros((0, 3)))
    np.testing.assert_array_equal(hw.from_dlpack(np.array(3.0)).numpy(), np.array(3.0))
    assert (hw.from_dlpack(src) + 1).numpy()[0] == 43.0


def test_dlpack_errors(device):
    with pytest.raises(UnsupportedDTypeError, match="from_dlpack"):
        hw.from_dlpack(np.ones(2, np.complex64))
    t = mk(np.ones(3, np.float32), device)
    if device != "cpu:0":  # memory that is not the host's cannot be handed out
        with pytest.raises(InvalidArgumentError, match="cpu"):
            np.from_dlpack(t)
        np.testing.assert_array_equal(np.from_dlpack(t.cpu()), np.ones(3))


# --- Python protocol ---------------------------------------------------------------------------------------------
def test_repr(device):
    t = mk(np.array([[1.5, 2.0]], np.float32), device)
    r = repr(t)
    assert "shape=[1, 2]" in r and "dtype=float32" in r and f"device={device}" in r and "1.5" in r
    assert "dtype=bool" in repr(mk(np.array(True), device))
    assert "shape=[0, 3]" in repr(mk(np.zeros((0, 3), np.int8), device))
    assert "shape=[]" in repr(mk(np.float16(2), device))


def test_item_and_conversions(device):
    assert mk(np.float32(2.5), device).item() == 2.5
    assert isinstance(mk(np.array([7], np.int16), device).item(), int)
    assert mk(np.array([[True]]), device).item() is True
    assert float(mk(np.array([1.5]), device)) == 1.5
    assert int(mk(np.array(3.9), device)) == 3
    assert bool(mk(np.array([0.0]), device)) is False
    assert mk(np.array([[1, 2], [3, 4]]), device).tolist() == [[1, 2], [3, 4]]
    assert len(mk(np.zeros((4, 2)), device)) == 4
    assert [0, 10, 20][mk(np.array(1), device)] == 10  # __index__
    with pytest.raises(InvalidArgumentError, match="item"):
        mk(np.zeros(2), device).item()
    with pytest.raises(InvalidArgumentError, match="item"):
        mk(np.zeros(0), device).item()
    with pytest.raises(InvalidArgumentError, match="ambiguous"):
        bool(mk(np.zeros(2), device))
    with pytest.raises(TypeError):
        len(mk(np.float32(1), device))
    with pytest.raises(TypeError):
        [0, 1][mk(np.array(1.0), device)]


def test_pickle(device):
    t = mk(np.arange(3, dtype=np.int16), device)
    u = pickle.loads(pickle.dumps(t))
    assert u.dtype == np.int16 and str(u.device) == device and u.numpy().tolist() == [0, 1, 2]


def test_tensors_are_hashable_and_immutable(device):
    t = mk(np.array([1.0, 2.0]), device)
    assert len({t, t}) == 1
    u = t + 1
    assert t.numpy().tolist() == [1.0, 2.0] and u.numpy().tolist() == [2.0, 3.0]
    with pytest.raises(AttributeError):
        t.foo = 1


# --- operators with Python scalars on both sides ---------------------------------------------------------------------
OPS = [
    ("+", lambda a, b: a + b), ("-", lambda a, b: a - b), ("*", lambda a, b: a * b), ("/", lambda a, b: a / b),
    ("**", lambda a, b: a ** b), ("%", lambda a, b: a % b),
]


@pytest.mark.parametrize("sym,op", OPS, ids=[o[0] for o in OPS])
def test_operators_with_scalars(sym, op, device):
    """tensor OP scalar and scalar OP tensor for int and float scalars, against Python arithmetic."""
    for dtype in ["int32", "int64", "float16", "float32", "float64"]:
        for scalar in [3, 2.5, -2]:
            _with_scalar(sym, op, scalar, dtype, device)


def _with_scalar(sym, op, scalar, dtype, device):
    arr = np.array([1, 2, 4, 5], dtype)
    t = mk(arr, device)
    is_int = dtype.startswith("int")
    for left in (False, True):
        if sym == "**" and is_int and not left and scalar == -2:
            continue  # integer powers with negative exponents: test_ops_elementwise
        out = op(scalar, t) if left else op(t, scalar)
        wide = [float(v) for v in arr.tolist()]
        expected = [op(scalar, v) if left else op(v, scalar) for v in wide]
        if is_int and isinstance(scalar, float) or sym == "/":
            out_dt = dtype if not is_int else "float32"
        else:
            out_dt = dtype
        if out_dt.startswith("int"):
            expected = [int(np.floor(e)) if sym in "%" else int(e) for e in expected]
        assert_close(out.numpy(), np.array(expected), out_dt, err_msg=f"{'s' if left else 't'} {sym}")


def test_comparisons_with_scalars(device):
    arr = np.array([1, 2, 3], np.int32)
    t = mk(arr, device)
    for got, expected in [(t < 2, arr < 2), (2 < t, 2 < arr), (t <= 2, arr <= 2), (2 >= t, 2 >= arr),
                          (t == 2, arr == 2), (2 == t, arr == 2), (t != 2, arr != 2), (t > 1.5, arr > 1.5),
                          (1.5 > t, arr < 1.5), (t == t, arr == arr), (t >= mk(arr[::-1].copy(), device),
                                                                        arr >= arr[::-1])]:
        assert got.dtype == np.dtype(bool)
        np.testing.assert_array_equal(got.numpy(), expected)


def test_unary_minus_abs_and_logic_operators(device):
    arr = np.array([-1.5, 0.0, 2.0], np.float32)
    t = mk(arr, device)
    assert_close((-t).numpy(), -arr, "float32")
    assert_close((-(-t)).numpy(), arr, "float32")
    assert_close(abs(t).numpy(), np.abs(arr), "float32")
    ints = mk(np.array([-3, 4], np.int8), device)
    assert_close((-ints).numpy(), [3, -4], "int8")
    b = mk(np.array([True, False]), device)
    c = mk(np.array([True, True]), device)
    assert_close((b & c).numpy(), [True, False], "bool")
    assert_close((b | c).numpy(), [True, True], "bool")
    assert_close((b ^ c).numpy(), [False, True], "bool")
    assert_close((~b).numpy(), [False, True], "bool")
    with pytest.raises(UnsupportedDTypeError, match="neg"):
        -b


def test_matmul_operator_and_numpy_operands(device):
    a = mk(np.eye(2, dtype=np.float32), device)
    assert_close((a @ a).numpy(), np.eye(2), "float32")
    with pytest.raises(InvalidArgumentError):
        a + np.ones(2)
    with pytest.raises(InvalidArgumentError):
        np.ones(2, np.float32) + a
    with pytest.raises(InvalidArgumentError):
        a @ np.eye(2)


def test_slicing(device):
    arr = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    t = mk(arr, device)
    np.testing.assert_array_equal(t[1].numpy(), arr[1])
    np.testing.assert_array_equal(t[:, 1:, ::2].numpy(), arr[:, 1:, ::2])
    np.testing.assert_array_equal(t[..., -1].numpy(), arr[..., -1])
    np.testing.assert_array_equal(t[0, 2, 3].numpy(), arr[0, 2, 3])
    assert t[0, 2, 3].item() == 11.0
    assert str(t[0].device) == device


def test_scalar_operand_errors(device):
    t = mk(np.ones(2, np.float32), device)
    for bad in ("a", None, [1, 2], 1 + 2j, object()):
        with pytest.raises(InvalidArgumentError):
            t + bad
        with pytest.raises(InvalidArgumentError):
            t < bad


# --- creation ------------------------------------------------------------------------------------------------------
def test_creation(device):
    z = hw.zeros((2, 3), device=device)
    assert z.dtype == np.float32 and z.shape == (2, 3) and str(z.device) == device and not z.numpy().any()
    assert hw.ones(4, dtype="int8", device=device).numpy().tolist() == [1] * 4
    assert hw.full([2], 7, device=device).dtype == np.int64
    assert hw.full((), True, device=device).numpy().tolist() is True
    assert hw.full((1,), 2.5, device=device).dtype == np.float32
    assert hw.full((2,), np.int16(3), device=device).dtype == np.int64
    assert hw.full((0, 3), 1.0, dtype="float16", device=device).shape == (0, 3)
    x = hw.to_tensor(np.ones((2, 2), np.int16), device=device)
    assert hw.zeros_like(x).dtype == np.int16 and hw.ones_like(x, "float64").dtype == np.float64
    assert hw.full_like(x, 5).numpy().tolist() == [[5, 5], [5, 5]]
    assert str(hw.zeros_like(x).device) == device
    assert hw.arange(5, device=device).numpy().tolist() == [0, 1, 2, 3, 4]
    r = hw.arange(1, 2, 0.25)
    assert r.numpy().tolist() == [1.0, 1.25, 1.5, 1.75] and r.dtype == np.float32
    assert hw.arange(5, 0, -2, dtype="int8").numpy().tolist() == [5, 3, 1]
    hw.seed(3)
    a = hw.rand((2, 2), device=device).numpy()
    hw.seed(3)
    assert (a == hw.rand((2, 2), device=device).numpy()).all() and ((a >= 0) & (a < 1)).all()
    assert hw.randn(3, dtype="float64").dtype == np.float64


def test_creation_errors():
    with pytest.raises(InvalidArgumentError, match="full.*1000.*int8"):
        hw.full((2,), 1000, dtype="int8")
    with pytest.raises(InvalidArgumentError, match="ones.*shape"):  # the op the user called, not full
        hw.ones(-1)
    with pytest.raises(InvalidArgumentError, match="zeros.*shape"):
        hw.zeros((2, "a"))
    with pytest.raises(InvalidArgumentError, match="full"):
        hw.full((2,), "x")
    with pytest.raises(InvalidArgumentError, match="arange.*step"):
        hw.arange(0, 10, 0)
    with pytest.raises(InvalidArgumentError, match="rand.*shape"):
        hw.rand(2.5)
    with pytest.raises(UnsupportedDTypeError, match="randn"):
        hw.randn((2,), dtype="int32")
    with pytest.raises(UnsupportedDTypeError, match="zeros|full"):
        hw.zeros((2,), dtype="complex64")
