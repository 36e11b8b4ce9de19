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
    from hwadapter_opencl.kernels import _gemm_config
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
    from hwadapter_opencl.kernels import _gemm_config
    rt = get(DEV).runtime
    if not rt.is_cpu:
        pytest.skip(f"{DEV} is not a CPU device")
    assert _gemm_config(rt, 1024, 1024, 4)["VW"] == rt.device.preferred_vector_width_float


# the tilings of SSE, AVX2 and AVX-512 hosts, for float32 and float64 accumulators
TILINGS = [("float32", 4, 16), ("float32", 8, 16), ("float32", 16, 32), ("float64", 4, 16), ("float64", 8, 32)]


@pytest.mark.parametrize("dtype,lanes,registers", TILINGS)
def test_gemm_with_each_cpu_tiling_equals_numpy(monkeypatch, dtype, lanes, registers):
    from hwadapter_opencl import kernels
    rt = get(DEV).runtime
    if not rt.is_cpu:
        pytest.skip(f"{DEV} is not a CPU device")
    if dtype == "float64" and not rt.fp64:
        pytest.skip(f"{DEV} has no float64")
    monkeypatch.setattr(kernels, "cpu_vectors", lambda rt, acc_size: (lanes, registers))
    rng = np.random.default_rng(lanes)
    rt.plans.clear()
    try:
        for sa, sb in [((100, 70), (70, 300)), ((5, 33), (33, 9)), ((2, 65, 129), (129, 257))]:
            a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
            got = hw.matmul(hw.to_tensor(a, device=DEV), hw.to_tensor(b, device=DEV)).numpy()
            np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4, err_msg=f"{sa} @ {sb}")
    finally:
        rt.plans.clear()
