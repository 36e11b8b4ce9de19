"""tuning/blas.py: which OpenBLAS kernels the CPU's products run on, and the private copy that runs them (checked
against numpy's own product)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from hwadapter.plugin import InvalidArgumentError

blas = pytest.importorskip("hwadapter_cpu.tuning.blas")

AVX512 = frozenset(blas.AVX512_FLAGS)


def test_a_cpu_with_avx512_leaves_an_avx2_core_for_skylakex():
    assert blas.better_core("haswell", AVX512 | {"avx2", "fma"}) == "SkylakeX"
    assert blas.better_core("Zen", AVX512) == "SkylakeX"


@pytest.mark.parametrize("core, flags", [
    ("skylakex", AVX512),  # OpenBLAS already runs AVX-512 kernels
    ("cooperlake", AVX512),
    ("haswell", frozenset({"avx2", "fma"})),  # no AVX-512: Haswell's are the best it admits
    ("haswell", AVX512 - {"avx512bw"}),  # SkylakeX's kernels need every one of its flags
])
def test_the_core_stands(core, flags):
    assert blas.better_core(core, flags) == core


def test_the_setting_is_checked():
    assert blas.blas_setting({}) == "auto"
    assert blas.blas_setting({"HWADAPTER_CPU_BLAS": "numpy"}) == "numpy"
    with pytest.raises(InvalidArgumentError, match="HWADAPTER_CPU_BLAS='mkl'") as raised:
        blas.blas_setting({"HWADAPTER_CPU_BLAS": "mkl"})
    assert "auto" in raised.value.fix and "numpy" in raised.value.fix


def _openblas():
    libs = [lib for lib in blas.single_blas._controllers() if lib.internal_api == "openblas"]
    if not libs:
        pytest.skip("numpy's BLAS is not OpenBLAS: there is no core type to choose")
    return libs[0].filepath


def _sgemm(dll):
    found = blas.cblas_sgemm(dll)
    if found is None:
        pytest.skip("this OpenBLAS has no cblas_sgemm")
    return found


@pytest.mark.parametrize("core, needs", [("Haswell", {"avx2", "fma"}), ("SkylakeX", AVX512)])
def test_a_private_copy_runs_the_core_asked_on_one_thread_and_multiplies_right(core, needs):
    if not needs <= blas.cpu_flags():
        pytest.skip(f"this CPU has no {' '.join(sorted(needs - blas.cpu_flags()))}: {core}'s kernels cannot run here")
    path = _openblas()
    dll = blas.private_openblas(path, core)
    assert dll is not None and blas.corename(dll) == core.lower()
    assert dll._name != path  # another library than numpy's, which keeps its own core
    threads = getattr(dll, "scipy_openblas_get_num_threads64_", None) or getattr(dll, "openblas_get_num_threads")
    assert threads() == 1
    fn, ilp64 = _sgemm(dll)
    integer = ctypes.c_int64 if ilp64 else ctypes.c_int
    fn.argtypes = [ctypes.c_int] * 3 + [integer] * 3 + [ctypes.c_float, ctypes.c_void_p, integer, ctypes.c_void_p,
                                                        integer, ctypes.c_float, ctypes.c_void_p, integer]
    rng = np.random.default_rng(0)
    m, k, n = 70, 300, 45
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, np.float32)
    fn(101, 111, 111, m, n, k, 1.0, a.ctypes.data, k, b.ctypes.data, n, 0.0, c.ctypes.data, n)
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4)


def test_the_kernels_take_a_private_copy_and_leave_numpys_threads_alone(monkeypatch):
    """auto: a private copy (one thread of its own), so numpy's library keeps its threads inside a kernel; numpy:
    numpy's own library, set to one thread while a kernel is inside."""
    fresh = blas.SingleBlas()  # the BLAS libraries loaded now (torch's or scipy's may have joined numpy's)
    libs = fresh._controllers()
    if not libs or libs[0].internal_api != "openblas":
        pytest.skip("the first BLAS loaded is not OpenBLAS: there is no private copy to make")
    before = libs[0].get_num_threads()
    monkeypatch.setenv("HWADAPTER_CPU_BLAS", "numpy")
    plain = fresh.sgemm()
    assert plain[0] == ctypes.cast(_sgemm(ctypes.CDLL(libs[0].filepath))[0], ctypes.c_void_p).value
    with fresh():
        assert libs[0].get_num_threads() == 1
    assert libs[0].get_num_threads() == before
    monkeypatch.setenv("HWADAPTER_CPU_BLAS", "auto")
    mine = blas.SingleBlas()
    private = mine.sgemm()
    assert mine.private and private is not None and private[0] != plain[0] and private[1] == plain[1]
    with mine():
        assert libs[0].get_num_threads() == before  # numpy's threads untouched
