"""The CPU plugin's work-claiming crew (tuning/crew.c) and the float32 matmul that shares it (tuning/matmul.py)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from hwadapter.plugin import InvalidArgumentError, reference

tuned_blas = pytest.importorskip("hwadapter_cpu.tuning.blas")
from hwadapter_cpu.tuning.blasconv import SPIN_NS, Transforms, spin_ns  # noqa: E402
from hwadapter_cpu.tuning.matmul import matmul_kernel  # noqa: E402
from hwadapter_cpu.tuning import rows  # noqa: E402


def test_blas_runs_single_threaded_inside_and_as_before_after(monkeypatch):
    """With numpy's own library for the kernels (HWADAPTER_CPU_BLAS=numpy; the default's private copy has one thread
    of its own, tests/test_cpu_blas.py): held to one thread while any kernel is inside."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    blas = threadpoolctl.ThreadpoolController().select(user_api="blas")
    if not blas.lib_controllers:
        pytest.skip("numpy's BLAS is not one threadpoolctl knows")
    monkeypatch.setenv("HWADAPTER_CPU_BLAS", "numpy")
    single = tuned_blas.SingleBlas()
    single.sgemm()
    assert not single.private
    before = [lib.get_num_threads() for lib in blas.lib_controllers]
    with single():
        with single():  # nested and concurrent kernels: the last to leave restores
            assert all(lib.get_num_threads() == 1 for lib in blas.lib_controllers)
        assert all(lib.get_num_threads() == 1 for lib in blas.lib_controllers)
    assert [lib.get_num_threads() for lib in blas.lib_controllers] == before


@pytest.mark.parametrize("xs, ys, tx, ty", [
    ((1, 2048), (2048, 1000), False, False),  # one row: column blocks
    ((300, 500), (500, 700), False, False),  # row blocks
    ((3, 5, 300), (300, 700), False, False),  # batch dims folded into rows
    ((200, 300), (500, 300), False, True), ((2, 64, 300), (64, 129), True, False),
    ((7,), (7, 3), False, False), ((2, 3, 4), (2, 4, 5), False, False), ((4, 8), (8, 2), False, False)])
def test_matmul_gives_the_references_products(xs, ys, tx, ty):
    from hwadapter.runtime.device import get
    matmul = matmul_kernel(Transforms(get("cpu")))
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal(xs).astype("float32"), rng.standard_normal(ys).astype("float32")
    want = reference.matmul(x.astype("float64"), y.astype("float64"), transpose_x=tx, transpose_y=ty)
    got = matmul(x, y, transpose_x=tx, transpose_y=ty)
    assert got.shape == want.shape and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    other = matmul(x.astype("float64"), y.astype("float64"), transpose_x=tx, transpose_y=ty)
    assert other.dtype == np.float64  # other dtypes: the reference


@pytest.mark.parametrize("ty", [True, False])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("n", [1000, 1001, 777])
def test_matmul_gives_bit_equal_columns_for_equal_columns_wherever_the_bands_cut(rows, n, ty):
    """Equal columns of the right operand give bit-equal output columns with few rows, whatever band (tasks.c's
    ranges of columns, 256 wide but the last) each falls in: the onnx light models' fills need it (AlexNet's 1000
    equal logits of 3.6e12 must stay equal for its uniform softmax), and BLAS called per band rounded the narrower last
    band's columns differently. The products still agree with float64 within float32's rounding."""
    from hwadapter.runtime.device import get
    from hwadapter_cpu.tuning.matmul import DOT_ROWS
    transforms = Transforms(get("cpu"))
    if transforms.lib() is None or transforms.crew() is None:
        pytest.skip("no native crew: matmul is the reference kernel")
    matmul, k = matmul_kernel(transforms), 4096
    rng = np.random.default_rng(rows * n)
    x = (np.abs(rng.standard_normal((rows, k))) * 1e6).astype("float32")  # huge activations, as AlexNet's
    distinct = (rng.standard_normal((3, k)) * 1e3).astype("float32")
    which = rng.integers(0, 3, n)  # each column of y one of three vectors, shuffled through every band
    y = distinct[which] if ty else np.ascontiguousarray(distinct[which].T)
    got = matmul(x, y, transpose_y=ty)
    want = x.astype("float64") @ (y.T if ty else y).astype("float64")
    scale = np.abs(x).astype("float64") @ np.abs(y.T if ty else y).astype("float64")
    assert np.all(np.abs(got - want) <= 1e-5 * scale)  # float32's rounding of k terms, summed in any order
    if rows <= DOT_ROWS:
        for v in range(3):
            cols = got[:, which == v]
            assert np.array_equal(cols, np.repeat(cols[:, :1], cols.shape[1], 1)), (v, np.ptp(cols, 1))


def _native_crew():
    """blasconv's library (crew.c is part of it) and a new native crew of two helpers, or a skip naming why."""
    import ctypes
    from hwadapter.runtime.device import get
    lib = Transforms(get("cpu")).lib()
    if lib is None:
        pytest.skip("no C compiler: the native crew is not built")
    task = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)
    lib.hwa_crew_run.restype = None
    lib.hwa_crew_run.argtypes = [ctypes.c_void_p, task, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    return lib, task, lib.hwa_crew_new(2, 200_000, 200_000)


def test_the_native_crew_runs_every_range_once_across_runs_and_callers():
    """Runs posted back to back from three threads at once (a run that finds the crew busy runs alone): every range
    of every run is done exactly once, and by more than one thread."""
    lib, task_type, crew = _native_crew()
    done, threads, lock, late = {}, set(), threading.Lock(), []

    def record(_params, a, b):
        with lock:
            done[a] = done.get(a, 0) + 1
            threads.add(threading.get_ident())
        if a % 7 == 0:
            time.sleep(0.0005)  # some ranges take longer: the others are claimed meanwhile
    task = task_type(record)

    def caller(c):
        for r in range(60):
            base = (c * 60 + r) * 1000
            ranges = np.array([(base + i, base + i + 1) for i in range(9)], np.int64)
            lib.hwa_crew_run(crew, task, None, ranges.ctypes.data, len(ranges))
            with lock:
                if not all(done.get(base + i) == 1 for i in range(9)):  # all done when the call returns
                    late.append(base)
    callers = [threading.Thread(target=caller, args=(c,)) for c in range(3)]
    for t in callers:
        t.start()
    for t in callers:
        t.join(60)
    assert not any(t.is_alive() for t in callers)
    assert not late and len(done) == 3 * 60 * 9 and set(done.values()) == {1}
    assert len(threads) > 3  # the crew's helpers took ranges, not only the three callers


def test_a_helper_on_the_callers_cpu_moves_off_it_and_stays_free_to_move():
    """hwa_leave_cpu (a helper woken onto its caller's CPU, or spinning there, moves to another): the thread is on
    another CPU afterwards and may again run on every CPU it could before; with no other CPU allowed it stays."""
    import ctypes
    import os
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    if len(allowed) < 2:
        pytest.skip(f"{len(allowed)} CPU(s) for this process: there is no other CPU to move to")
    lib = _native_crew()[0]
    lib.hwa_leave_cpu.restype, lib.hwa_leave_cpu.argtypes = None, [ctypes.c_int]
    getcpu = ctypes.CDLL(None).sched_getcpu
    seen = {}

    def probe():
        first = min(allowed)
        os.sched_setaffinity(0, {first})  # this thread only: one CPU, nowhere to go
        lib.hwa_leave_cpu(first)
        seen["alone"] = (getcpu(), os.sched_getaffinity(0))
        os.sched_setaffinity(0, allowed)
        cpu = getcpu()
        lib.hwa_leave_cpu(cpu)
        seen["moved"] = (cpu, getcpu(), os.sched_getaffinity(0))
        lib.hwa_leave_cpu(-1)  # no caller's CPU known: nothing to do
    thread = threading.Thread(target=probe)
    thread.start()
    thread.join(30)
    assert seen["alone"] == (min(allowed), {min(allowed)})
    was, now, mask = seen["moved"]
    assert now != was and now in allowed and mask == allowed


@pytest.mark.parametrize("text, want", [(None, SPIN_NS), ("0", 0), ("2.5", 2_500_000)])
def test_the_crews_spin_comes_from_hwadapter_cpu_spin_ms(monkeypatch, text, want):
    if text is None:
        monkeypatch.delenv("HWADAPTER_CPU_SPIN_MS", raising=False)
    else:
        monkeypatch.setenv("HWADAPTER_CPU_SPIN_MS", text)
    assert spin_ns() == want


@pytest.mark.parametrize("text", ["abc", "-1", "nan", "inf"])
def test_a_bad_hwadapter_cpu_spin_ms_is_an_error_naming_it(monkeypatch, text):
    monkeypatch.setenv("HWADAPTER_CPU_SPIN_MS", text)
    with pytest.raises(InvalidArgumentError, match="HWADAPTER_CPU_SPIN_MS=.* milliseconds"):
        spin_ns()


@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu", "relu6", "sigmoid", "tanh"])
@pytest.mark.parametrize("xs, ys, ty", [
    ((1, 2048), (2048, 1000), False),  # one row: tasks.c's dot products, column bands
    ((3, 300), (1000, 300), True),  # few rows, transposed right operand
    ((300, 500), (500, 700), False),  # row bands
    ((8, 600), (600, 2000), False),  # column bands
    ((2, 3, 300), (300, 700), False),  # batch dimensions folded into rows
    ((64, 256), (256, 256), False),  # numpy's threaded call, then the epilogue on the crew
    ((4, 8), (8, 2), False),  # tiny: the reference
    ((2, 3, 4, 5), (2, 3, 5, 6), False)])  # batched: rows.c, then the epilogue on the crew
def test_a_fused_linear_epilogue_is_the_unfused_add_and_activation(xs, ys, ty, act):
    """matmul with a fused bias and activation (graph fusion's linear layer) on every path the tuned kernel takes,
    against the reference's product, add and activation in float64; nan and infinities in the bias pass as the unfused
    add's."""
    from hwadapter.runtime.device import get
    transforms = Transforms(get("cpu"))
    matmul = matmul_kernel(transforms, rows.Rows(get("cpu")))
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal(xs).astype("float32"), rng.standard_normal(ys).astype("float32")
    n = ys[-2] if ty else ys[-1]
    bias = rng.standard_normal(n).astype("float32")
    bias[:3] = np.array([np.nan, np.inf, -np.inf], np.float32)[:n]
    with np.errstate(invalid="ignore", over="ignore"):
        want = reference.matmul(x.astype("float64"), y.astype("float64"), bias.astype("float64"), transpose_y=ty,
                                activation=act)
        got = matmul(x, y, bias, transpose_y=ty, activation=act)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    if act is None:  # no bias: the activation alone
        np.testing.assert_allclose(matmul(x, y, transpose_y=ty, activation="relu"),
                                   np.maximum(reference.matmul(x, y, transpose_y=ty), 0), rtol=1e-4, atol=1e-3)
    with pytest.raises(InvalidArgumentError, match="fused bias has shape"):
        matmul(x, y, bias[:-1], transpose_y=ty, activation=act)
    # bit for bit the unfused add and activation after the same kernel's product: a to_static step equals eager
    unfused = matmul(x, y, transpose_y=ty) + bias
    with np.errstate(invalid="ignore", over="ignore"):
        np.testing.assert_array_equal(got, unfused if act is None else reference.conv_epilogue(act)(unfused))
    np.testing.assert_array_equal(matmul(x, y, False, ty), matmul(x, y, transpose_y=ty))  # the older positional form


TASK = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>
/* counts[a] += 1, then b microseconds of work: ranges (a, b) */
void count_task(const int64_t *p, int64_t a, int64_t b) {
  __atomic_add_fetch((int64_t *)(intptr_t)p[0] + a, 1, __ATOMIC_RELAXED);
  struct timespec t, n;
  clock_gettime(CLOCK_MONOTONIC, &t);
  do clock_gettime(CLOCK_MONOTONIC, &n);
  while ((n.tv_sec - t.tv_sec) * 1000000000 + n.tv_nsec - t.tv_nsec < b * 1000);
}
"""


def test_calls_back_to_back_each_run_every_range_once(tmp_path):
    """Segments hand the crew one call after another with no Python between: a helper that finished the last range
    of one call must not claim a range of the next under the old call's number (it ran a range twice, and the caller
    went on while it ran: a wrong result or a crash). crew.c built with pauses that open that window every time (the
    helper last to finish, the caller slow to post), a call of two ranges then one of three: each range once."""
    import ctypes
    import shutil
    import subprocess
    from pathlib import Path
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    crew = Path(rows.__file__).with_name("crew.c")
    (tmp_path / "task.c").write_text(TASK)
    lib = tmp_path / "crew.so"
    subprocess.run([cc, "-O2", "-shared", "-fPIC", "-std=c99", "-DCREW_TEST_PAUSE_NS=100000", str(crew),
                    str(tmp_path / "task.c"), "-o", str(lib), "-lpthread"], check=True, capture_output=True)
    so = ctypes.CDLL(str(lib))
    so.hwa_crew_new.restype, so.hwa_crew_new.argtypes = ctypes.c_void_p, [ctypes.c_int64] * 3
    so.hwa_crew_run.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64]
    c = so.hwa_crew_new(1, 10 ** 9, 10 ** 9)  # one helper, watching (not sleeping) throughout
    task = ctypes.cast(so.count_task, ctypes.c_void_p).value
    counts = np.zeros(8, np.int64)
    params = np.array([counts.ctypes.data], np.int64)
    first = np.array([(0, 0), (1, 300)], np.int64)  # the caller takes range 0; the helper 1, and finishes last
    second = np.array([(2, 0), (3, 0), (4, 0)], np.int64)
    for _ in range(3):
        so.hwa_crew_run(c, task, params.ctypes.data, first.ctypes.data, 2)
        so.hwa_crew_run(c, task, params.ctypes.data, second.ctypes.data, 3)
    assert counts[:5].tolist() == [3, 3, 3, 3, 3]
