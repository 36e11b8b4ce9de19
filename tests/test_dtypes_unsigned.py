"""uint16, uint32 and uint64 on cpu:0 and opencl:0, against numpy as the oracle: promotion, casts (wraparound
between integers, truncation of floats), arithmetic, comparisons, reductions, bitwise ops and shifts over each
dtype's whole range."""
from __future__ import annotations

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import InvalidArgumentError, UnsupportedDTypeError
from hwadapter.api import dtypes

UNSIGNED = ["uint16", "uint32", "uint64"]
INTEGERS = ["int8", "int16", "int32", "int64", "uint8"] + UNSIGNED
DEVICES = ["cpu:0"] + [d for d in ("opencl:0",) if d in hw.device.get_available_device()]
N = 257  # odd, so no kernel's vector width divides it


def values(dtype: str, n: int = N, seed: int = 0) -> np.ndarray:
    """Random values over the dtype's whole range, with its extremes and 0 and 1 among them."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    out = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    out[:4] = [info.min, info.max, 0, 1]
    return out


def mk(a, device):
    return hw.to_tensor(np.asarray(a), device=device)


def same(t, expected):
    """t's dtype and values are numpy's `expected`, exactly."""
    expected = np.asarray(expected)
    assert t.dtype == expected.dtype, (t.dtype, expected.dtype)
    np.testing.assert_array_equal(t.numpy(), expected)


# --- promotion --------------------------------------------------------------------------------------------------
def test_integer_promotion_is_numpys_where_the_standard_defines_it():
    """numpy promotes integer pairs by the array API lattice (uint16 + int16 -> int32, uint32 + int32 -> int64), except
    uint64 with a signed type (float64), which hwadapter refuses."""
    for a in INTEGERS + ["bool"]:
        for b in INTEGERS + ["bool"]:
            da, db = np.dtype(a), np.dtype(b)
            if {da.kind, db.kind} == {"u", "i"} and np.dtype("uint64") in (da, db):
                with pytest.raises(UnsupportedDTypeError, match="uint64.*Fix"):
                    dtypes.result_type(da, db)
                continue
            assert dtypes.result_type(da, db) == np.promote_types(da, db), (a, b)


def test_uint64_with_a_signed_tensor_is_refused_naming_the_op_and_the_fix():
    u, i = mk(np.array([1], np.uint64), "cpu:0"), mk(np.array([1], np.int64), "cpu:0")
    for fn in (hw.add, hw.maximum, hw.equal):
        with pytest.raises(UnsupportedDTypeError, match=r"cannot combine uint64 with int64.*Fix: cast"):
            fn(u, i)
    with pytest.raises(UnsupportedDTypeError, match="concat"):
        hw.concat([u, i])
    same(u + i.astype("uint64"), np.array([2], np.uint64))  # the fix works
    same(u.astype("float64") + i.astype("float64"), np.array([2.0]))


@pytest.mark.parametrize("dev", DEVICES)
def test_mixed_signs_promote_and_compute_like_numpy(dev):
    for a, b in [("uint16", "int16"), ("uint16", "int8"), ("uint32", "int32"), ("uint32", "int16"),
                 ("uint8", "uint64"), ("uint16", "uint32")]:
        x, y = values(a, 64, 1), values(b, 64, 2)
        same(hw.add(mk(x, dev), mk(y, dev)), np.add(x, y))
        same(hw.less_than(mk(x, dev), mk(y, dev)), np.less(x, y))


@pytest.mark.parametrize("dtype", UNSIGNED)
def test_python_scalars_are_weak_and_checked(dtype):
    x = mk(np.array([1, np.iinfo(dtype).max], dtype), "cpu:0")
    same(x + 3, np.array([1, np.iinfo(dtype).max], dtype) + np.array(3, dtype))  # wraps in the tensor's dtype
    same(x * np.iinfo(dtype).max, np.array([1, np.iinfo(dtype).max], dtype) * np.iinfo(dtype).max)
    with pytest.raises(InvalidArgumentError, match=f"-1 does not fit in {dtype}"):
        x + -1
    with pytest.raises(InvalidArgumentError, match=f"does not fit in {dtype}"):
        x + (np.iinfo(dtype).max + 1)
    assert (x * 0.5).dtype == np.float32


# --- casts ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dev", DEVICES)
def test_casts_between_integers_wrap_as_numpys(dev):
    """Every integer pair, both ways, over the source's whole range: the low bits, as numpy's astype (and C)."""
    for src in INTEGERS:
        x = values(src, 64, 3)
        t = mk(x, dev)
        for dst in INTEGERS + ["bool"]:
            if UNSIGNED.count(src) + UNSIGNED.count(dst):
                same(t.astype(dst), x.astype(dst))


@pytest.mark.parametrize("dev", DEVICES)
def test_casts_to_and_from_floats(dev):
    for dtype in UNSIGNED:
        hi = np.iinfo(dtype).max
        x = values(dtype, 64, 4)
        for f in ("float16", "float32", "float64"):
            with np.errstate(over="ignore"):
                same(mk(x, dev).astype(f), x.astype(f))  # rounded to nearest; beyond float16's range, inf
        # in-range floats truncate toward zero, up to the largest float below 2^bits
        top = float(np.nextafter(np.float64(hi) + 1, 0)) if dtype != "uint64" else 2.0 ** 64 - 2048
        f = np.array([0.0, 0.99, 1.5, 255.9, 65535.5, top, 2.0 ** 63 + 4096], np.float64)
        f = f[f <= top]
        same(mk(f, dev).astype(dtype), f.astype(dtype))
        f32 = f.astype(np.float32)
        f32 = f32[f32.astype(np.float64) <= top]
        same(mk(f32, dev).astype(dtype), f32.astype(dtype))


# --- arithmetic, comparisons, reductions ---------------------------------------------------------------------------
ARITH = [(hw.add, np.add), (hw.subtract, np.subtract), (hw.multiply, np.multiply), (hw.maximum, np.maximum),
         (hw.minimum, np.minimum), (hw.remainder, np.remainder), (hw.bitwise_and, np.bitwise_and),
         (hw.bitwise_or, np.bitwise_or), (hw.bitwise_xor, np.bitwise_xor)]
COMPARE = [(hw.equal, np.equal), (hw.not_equal, np.not_equal), (hw.less_than, np.less),
           (hw.less_equal, np.less_equal), (hw.greater_than, np.greater), (hw.greater_equal, np.greater_equal)]


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_binary_ops_wrap_and_compare_like_numpy(dev, dtype):
    x, y = values(dtype, seed=5), values(dtype, seed=6)
    y[::7] = x[::7]  # ties for the comparisons
    y[5] = 0  # x % 0 == 0, as numpy
    tx, ty = mk(x, dev), mk(y, dev)
    with np.errstate(all="ignore"):
        for ours, theirs in ARITH + COMPARE:
            same(ours(tx, ty), theirs(x, y))
        same(hw.add(tx, mk(y[:1].reshape(()), dev)), x + y[0])  # broadcast
        small = (y % 9).astype(dtype)
        same(hw.pow(mk(x % 7, dev), mk(small, dev)), np.power(x % 7, small))  # wraps in the dtype
        same(hw.bitwise_left_shift(tx, mk(small, dev)), np.left_shift(x, small))
        same(hw.bitwise_right_shift(tx, mk(small, dev)), np.right_shift(x, small))  # logical


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_unary_ops_and_where_clip_like_numpy(dev, dtype):
    x = values(dtype, seed=7)
    t = mk(x, dev)
    with np.errstate(all="ignore"):
        same(hw.neg(t), np.negative(x))  # wraps: -1 is the largest value
        same(hw.abs(t), x)
        same(hw.nn.functional.relu(t), x)
        same(hw.sign(t), np.sign(x))
        same(hw.bitwise_not(t), np.invert(x))
        same(hw.where(mk(x % 2 == 0, dev), t, mk(x[::-1].copy(), dev)), np.where(x % 2 == 0, x, x[::-1]))
        lo, hi = int(np.iinfo(dtype).max // 4), int(np.iinfo(dtype).max // 2)
        same(hw.clip(t, lo, hi), np.clip(x, lo, hi).astype(dtype))


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_reductions_like_numpy(dev, dtype):
    x = values(dtype, 6 * 43, seed=8).reshape(6, 43)
    t = mk(x, dev)
    same(hw.max(t, axis=1), x.max(axis=1))
    same(hw.min(t, axis=0), x.min(axis=0))
    same(hw.argmax(t, axis=1), x.argmax(axis=1))
    same(hw.argmin(t), np.array(x.argmin()))
    # sum and prod accumulate in int64 as for every integer, except uint64, which int64 cannot hold: in uint64
    acc = np.uint64 if dtype == "uint64" else np.int64
    with np.errstate(over="ignore"):
        same(hw.sum(t, axis=1), x.sum(axis=1, dtype=acc))
        same(hw.prod(t, axis=0), x.prod(axis=0, dtype=acc))
        same(hw.sum(t, axis=1, dtype=dtype), x.sum(axis=1, dtype=dtype))  # asked for: wraps in the dtype
        same(hw.cumsum(t, axis=1), x.cumsum(axis=1, dtype=dtype))
    same(hw.topk(t, 3, axis=1)[0], np.sort(x, axis=1)[:, ::-1][:, :3])


@pytest.mark.parametrize("dev", DEVICES)
@pytest.mark.parametrize("dtype", UNSIGNED)
def test_matmul_and_data_movement_like_numpy(dev, dtype):
    a, b = values(dtype, 5 * 7, seed=9).reshape(5, 7), values(dtype, 7 * 3, seed=10).reshape(7, 3)
    with np.errstate(over="ignore"):
        same(hw.matmul(mk(a, dev), mk(b, dev)), a @ b)  # products and sums wrap in the dtype
    t = mk(a, dev)
    same(hw.transpose(t, [1, 0]), a.T)
    same(hw.concat([t, t[:2]]), np.concatenate([a, a[:2]]))
    same(hw.gather(t, mk(np.array([4, 0, 2]), dev)), a[[4, 0, 2]])
    same(t[1:4, ::2], a[1:4, ::2])
    same(hw.nn.functional.pad(t, [1, 2], value=7), np.pad(a, ((0, 0), (1, 2)), constant_values=7))


# --- unsigned indices ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dev", DEVICES)
def test_unsigned_indices_gather_and_beyond_int64_are_out_of_range(dev):
    """An index is int64 inside; a uint64 one above 2^63 is out of range, never wrapped to a negative index (which
    would count from the end and pick an element)."""
    x = mk(np.arange(10.0, dtype=np.float32), dev)
    for dtype in UNSIGNED:
        same(hw.gather(x, mk(np.array([9, 0, 3], dtype), dev)), np.array([9.0, 0.0, 3.0], np.float32))
    with pytest.raises(InvalidArgumentError, match="out of range"):
        hw.gather(x, mk(np.array([2 ** 64 - 1], np.uint64), dev)).numpy()
    logits = mk(np.zeros((2, 3), np.float32), dev)
    with pytest.raises(InvalidArgumentError, match="out of range|class"):  # -100 is ignore_index: not that either
        hw.nn.functional.cross_entropy(logits, mk(np.array([0, 2 ** 64 - 100], np.uint64), dev)).numpy()


@pytest.mark.parametrize("dev", DEVICES)
def test_onnx_one_hot_of_uint64_indices_beyond_int64_is_all_off(dev):
    from onnx import TensorProto, helper
    from hwadapter.onnx import backend
    depth = helper.make_tensor("depth", TensorProto.INT64, [], [4])
    graph = helper.make_graph([helper.make_node("OneHot", ["i", "depth", "v"], ["y"])], "one_hot",
                              [helper.make_tensor_value_info("i", TensorProto.UINT64, [5]),
                               helper.make_tensor_value_info("v", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 4])], [depth])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    i = np.array([0, 3, 4, 2 ** 64 - 1, 2 ** 63], np.uint64)  # the last two would be -1 and int64's min as int64
    (y,) = backend.prepare(model, dev).run([i, np.array([0.0, 1.0], np.float32)])
    np.testing.assert_array_equal(y, (i[:, None] == np.arange(4, dtype=np.uint64)).astype(np.float32))


# --- beyond the ops: ONNX, saving ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dev", DEVICES)
def test_onnx_div_and_mod_of_uint64_are_exact_over_the_whole_range(dev):
    """ONNX Div truncates; uint64 has no float that holds it, so the converter corrects a float64 quotient exactly
    (Python's integers are the oracle)."""
    from onnx import TensorProto, helper
    from hwadapter.onnx import backend
    vi = [helper.make_tensor_value_info(n, TensorProto.UINT64, [None]) for n in "abqr"]
    graph = helper.make_graph([helper.make_node("Div", ["a", "b"], ["q"]), helper.make_node("Mod", ["a", "b"], ["r"])],
                              "div", vi[:2], vi[2:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(11)
    a = values("uint64", 600, 12)
    b = np.concatenate([values("uint64", 200, 13), rng.integers(1, 1000, 200, dtype=np.uint64),
                        rng.integers(1, 2 ** 40, 200, dtype=np.uint64)])
    b[b == 0] = 3
    q, r = backend.prepare(model, dev).run([a, b])
    assert q.dtype == r.dtype == np.uint64
    assert q.tolist() == [x // y for x, y in zip(a.tolist(), b.tolist())]
    assert r.tolist() == [x % y for x, y in zip(a.tolist(), b.tolist())]


def test_save_and_load_keep_unsigned_tensors(tmp_path):
    data = {d: mk(values(d, 9, 14), "cpu:0") for d in UNSIGNED}
    hw.save(data, tmp_path / "u.hwa")
    back = hw.load(tmp_path / "u.hwa")
    for d, t in data.items():
        same(back[d], t.numpy())
