"""The OpenCL GEMM on CPU devices: its register micro-tile follows the device's own vector width and register file
(a tile sized for AVX-512 spills every FMA on an AVX2 host), and every such tiling computes numpy's product."""
from __future__ import annotations

import types

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.runtime.device import get

pytestmark = pytest.mark.skipif(not hw.device.is_available("opencl"), reason="no OpenCL device")
DEV = "opencl:0"

# (name, preferred float / double / long vector widths as drivers report them, vector bytes, vector registers)
CPUS = [("sse", 4, 2, 2, 16, 16), ("avx2", 8, 4, 4, 32, 16), ("avx512", 16, 8, 8, 64, 32)]


def _cpu_runtime(f32, f64, i64):
    device = types.SimpleNamespace(preferred_vector_width_float=f32, preferred_vector_width_double=f64,
                                   preferred_vector_width_long=i64, max_work_group_size=4096)
    return types.SimpleNamespace(is_cpu=True, device=device)


@pytest.mark.parametrize("name,f32,f64,i64,vector_bytes,registers", CPUS, ids=[c[0] for c in CPUS])
def test_cpu_gemm_tiles_use_the_devices_vectors_and_fit_its_registers(name, f32, f64, i64, vector_bytes, registers):
    from hwadapter_opencl.tuning.kernels import _gemm_config
    rt = _cpu_runtime(f32, f64, i64)
    for acc_size in (4, 8):
        for m, n in [(2048, 2048), (2048, 64), (16, 2048)]:
            cfg = _gemm_config(rt, m, n, acc_size)
            assert cfg["VW"] * acc_size == vector_bytes, (name, acc_size, cfg)
            live = cfg["RM"] * cfg["RN"] + cfg["RN"] + 1  # accumulators, a row of B, one broadcast of A
            assert live <= registers, f"{name}: a {cfg['RM']}x{cfg['RN']} micro-tile needs {live} vector registers"
            assert cfg["RM"] * cfg["RN"] >= 8, f"{name}: {cfg} leaves the FMA units idle"
            assert cfg["TM"] % cfg["RM"] == 0 and cfg["TN"] % (cfg["RN"] * cfg["VW"]) == 0, cfg


def test_this_devices_gemm_uses_its_preferred_vector_width():
    from hwadapter_opencl.tuning.kernels import _gemm_config
    rt = get(DEV).runtime
    if not rt.is_cpu:
        pytest.skip(f"{DEV} is not a CPU device")
    assert _gemm_config(rt, 1024, 1024, 4)["VW"] == rt.device.preferred_vector_width_float


# the tilings of SSE, AVX2 and AVX-512 hosts, for float32 and float64 accumulators
TILINGS = [("float32", 4, 16), ("float32", 8, 16), ("float32", 16, 32), ("float64", 4, 16), ("float64", 8, 32)]


@pytest.mark.parametrize("dtype,lanes,registers", TILINGS)
def test_gemm_with_each_cpu_tiling_equals_numpy(monkeypatch, dtype, lanes, registers):
    from hwadapter_opencl.tuning import kernels
    rt = get(DEV).runtime
    if not rt.is_cpu:
        pytest.skip(f"{DEV} is not a CPU device")
    if dtype == "float64" and not rt.fp64:
        pytest.skip(f"{DEV} has no float64")
    monkeypatch.setattr(kernels, "cpu_vectors", lambda rt, acc_size: (lanes, registers))
    rng = np.random.default_rng(lanes)
    kernels.plans(rt).clear()
    try:
        for sa, sb in [((100, 70), (70, 300)), ((5, 33), (33, 9)), ((2, 65, 129), (129, 257))]:
            a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
            got = hw.matmul(hw.to_tensor(a, device=DEV), hw.to_tensor(b, device=DEV)).numpy()
            np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4, err_msg=f"{sa} @ {sb}")
    finally:
        kernels.plans(rt).clear()


# --- few rows: kernels/gemv.cl ------------------------------------------------------------------------------------
GEMV_DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8"]
K, N = 301, 517  # odd and larger than any block, so every work item's last columns and the loop's tail are exercised


def _operands(rng, dtype, *shapes):
    """Random arrays: floats in [-1, 1), integers small (unsigned ones non-negative)."""
    dt = np.dtype(dtype)
    lo = 0 if dt.kind in "ub" else -3
    return [(rng.uniform(-1, 1, s) if dt.kind == "f" else rng.integers(lo, 4, s)).astype(dt) for s in shapes]


def _product(a, b, tx=False, ty=False):
    """numpy's product in float64 (floats) or int64 wrapped into the dtype, as numpy's integer matmul wraps."""
    dt = a.dtype
    wide = np.float64 if dt.kind == "f" else np.int64
    a, b = a.astype(wide), b.astype(wide)
    out = (np.swapaxes(a, -1, -2) if tx else a) @ (np.swapaxes(b, -1, -2) if ty else b)
    return out if dt.kind == "f" else out.astype(dt)


def _assert_product(got, want, dtype, msg):
    dt = np.dtype(dtype)
    assert got.shape == want.shape and got.dtype == dt, f"{msg}: {got.shape} {got.dtype}"
    if dt.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=msg)
    else:
        tol = {"float16": 3e-3, "float32": 1e-5, "float64": 1e-12}[dt.name]
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol * np.sqrt(K), err_msg=msg)


def _kernel_of(op, shapes, dtype, attrs) -> str:
    """The name of the last kernel the op's plan on DEV launches."""
    from hwadapter_opencl.tuning import kernels
    return kernels.plan(op, get(DEV).runtime, shapes, (np.dtype(dtype),) * len(shapes), attrs).steps[-1].name


def _gemv_cases(m):
    """(x shape, y shape, transpose_x, transpose_y): plain, each transpose, both, batch axes broadcast both ways."""
    return [((m, K), (K, N), False, False), ((K, m), (K, N), True, False), ((m, K), (N, K), False, True),
            ((K, m), (N, K), True, True), ((3, 1, m, K), (4, K, N), False, False), ((m, K), (2, N, K), False, True),
            ((2, K, m), (K, N), True, False)]


@pytest.mark.parametrize("dtype", GEMV_DTYPES)
def test_products_of_few_rows_take_gemv_and_equal_numpy(dtype):
    rt = get(DEV).runtime
    if dtype == "float64" and not rt.fp64:
        pytest.skip(f"{DEV} has no float64")
    rng = np.random.default_rng(3)
    cases = [((K,), (K, N), False, False)] + [c for m in (1, 2, 3) for c in _gemv_cases(m)]
    for xs, ys, tx, ty in cases:
        msg = f"{dtype} {xs} @ {ys} transpose_x={tx} transpose_y={ty}"
        attrs = {"transpose_x": tx, "transpose_y": ty}
        assert _kernel_of("matmul", (xs, ys), dtype, attrs) == "gemv", msg
        a, b = _operands(rng, dtype, xs, ys)
        got = hw.matmul(hw.to_tensor(a, device=DEV), hw.to_tensor(b, device=DEV), **attrs).numpy()
        _assert_product(got, _product(a, b, tx and a.ndim > 1, ty), dtype, msg)


def test_row_blocks_up_to_the_gemm_threshold_equal_numpy():
    """Rows past the first block (a partial last block: 9 = 8 + 1 = 2 * 4 + 1), GEMV_ROWS, and one row more (GEMM)."""
    from hwadapter_opencl.tuning.kernels import GEMV_ROWS
    rng = np.random.default_rng(4)
    for m in (5, 9, GEMV_ROWS, GEMV_ROWS + 1):
        for xs, ys, tx, ty in _gemv_cases(m)[:5]:
            attrs = {"transpose_x": tx, "transpose_y": ty}
            msg = f"{xs} @ {ys} transpose_x={tx} transpose_y={ty}"
            assert _kernel_of("matmul", (xs, ys), "float32", attrs) == ("gemv" if m <= GEMV_ROWS else "gemm"), msg
            a, b = _operands(rng, "float32", xs, ys)
            got = hw.matmul(hw.to_tensor(a, device=DEV), hw.to_tensor(b, device=DEV), **attrs).numpy()
            _assert_product(got, _product(a, b, tx, ty), "float32", msg)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_convolutions_with_few_output_channels_add_the_bias_per_row_and_apply_the_epilogue(dtype):
    """conv2d's GEMM has one row per output channel of a group: with a bias per row (and per group) and an activation
    on the store, as kernels/gemm.cl, against the numpy reference."""
    from hwadapter.dispatch.dispatcher import dispatch
    from hwadapter.api import reference
    if dtype == "float64" and not get(DEV).runtime.fp64:
        pytest.skip(f"{DEV} has no float64")
    rng = np.random.default_rng(5)
    for ws, groups in [((3, 4, 3, 3), 1), ((2, 2, 3, 3), 2), ((4, 1, 1, 1), 4)]:  # 3, 1, 1 rows per group
        x, w, bias = _operands(rng, dtype, (2, 4, 13, 11), ws, (ws[0],))
        pad = ws[-1] // 2
        for activation in (None, "relu", "sigmoid", "tanh", "gelu"):
            attrs = {"stride": (1, 1), "padding": (pad,) * 4, "dilation": (1, 1), "groups": groups,
                     "activation": activation}
            msg = f"{dtype} conv2d {ws} groups={groups} activation={activation}"
            assert _kernel_of("conv2d", (x.shape, ws, bias.shape), dtype, attrs) == "gemv", msg
            got = dispatch("conv2d", tuple(hw.to_tensor(v, device=DEV) for v in (x, w, bias)), attrs).numpy()
            want = reference.conv2d(*(v.astype(np.float64) for v in (x, w, bias)), **attrs)
            tol = 3e-3 if dtype == "float16" else 1e-5
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol, err_msg=msg)


def test_the_gpu_gemv_configuration_runs_here_too(monkeypatch):
    """GPUs get one column per work item in groups of 64 (scalar code, VW = 1): checked on this device."""
    from hwadapter_opencl.tuning import kernels
    rt = get(DEV).runtime
    if rt.device.max_work_group_size < 64:
        pytest.skip(f"{DEV} allows only {rt.device.max_work_group_size} work items per group")
    monkeypatch.setattr(rt, "is_cpu", False)
    kernels.plans(rt).clear()
    try:
        assert kernels._gemv_config(rt, 3, 4) == dict(ROWS=3, VW=1, RN=1, WG=64)
        rng = np.random.default_rng(6)
        for dtype in ("float32", "float16", "int32"):
            for xs, ys, tx, ty in _gemv_cases(1)[:3] + _gemv_cases(9)[4:6]:
                attrs = {"transpose_x": tx, "transpose_y": ty}
                msg = f"{dtype} {xs} @ {ys} transpose_x={tx} transpose_y={ty}"
                assert _kernel_of("matmul", (xs, ys), dtype, attrs) == "gemv", msg
                a, b = _operands(rng, dtype, xs, ys)
                got = hw.matmul(hw.to_tensor(a, device=DEV), hw.to_tensor(b, device=DEV), **attrs).numpy()
                _assert_product(got, _product(a, b, tx, ty), dtype, msg)
    finally:
        kernels.plans(rt).clear()


@pytest.mark.parametrize("name,f32,f64,i64,vector_bytes,registers", CPUS, ids=[c[0] for c in CPUS])
def test_cpu_gemv_blocks_fit_the_registers(name, f32, f64, i64, vector_bytes, registers):
    from hwadapter_opencl.tuning.kernels import GEMV_ROWS, _gemv_config
    rt = _cpu_runtime(f32, f64, i64)
    for acc_size in (4, 8):
        for m in range(1, GEMV_ROWS + 1):
            cfg = _gemv_config(rt, m, acc_size)
            assert cfg["VW"] * acc_size == vector_bytes and cfg["WG"] == 1, (name, m, cfg)
            live = cfg["ROWS"] * cfg["RN"] + cfg["ROWS"] + 1  # accumulators, broadcasts of A, a vector of B
            assert live <= registers, f"{name}: a {cfg['ROWS']}x{cfg['RN']} block needs {live} vector registers"
            assert 1 <= cfg["ROWS"] <= min(m, 8) and cfg["ROWS"] * cfg["RN"] >= min(m, 4), (name, m, cfg)
