"""numpy's BLAS for the tuned kernels: its cblas_sgemm for C to call, run single-threaded while the device's own
threads (crew.c) share the work, and how that work is cut.

Why not BLAS's own threads: OpenBLAS splits each product evenly up front, waits for every thread at its end, and its
threads spin between products, so on a busy machine a descheduled thread holds back every product. With the crew a
descheduled thread holds back only the task it took.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading

#: products below this many multiply-adds run as one task: sharing them costs more than it saves
SPLIT_FLOPS = 1 << 21
#: the least a block of one product holds: each block's BLAS call packs the other operand again
ROWS, COLUMNS = 64, 256


def split(n: int, parts: int, least: int = 1) -> list:
    """[start, end) ranges cutting range(n) into at most `parts` pieces of at least `least` (the last may be less)."""
    step = max(least, -(-n // max(1, parts)))
    return [(a, min(n, a + step)) for a in range(0, n, step)]


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class SingleBlas:
    """While any kernel is inside, the BLAS libraries numpy loaded run one thread each (the crew parallelises)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._inside = 0
        self._saved: list = []
        self._libs = None

    def sgemm(self):
        """(address, ilp64) of the cblas_sgemm of the BLAS numpy loaded, for C code to call; None when there is none
        that threadpoolctl knows. ilp64: its integers are 64-bit (a "64_" symbol suffix)."""
        for lib in self._controllers():
            try:
                dll = ctypes.CDLL(lib.filepath)
            except OSError:
                continue
            for name in ("scipy_cblas_sgemm64_", "cblas_sgemm64_", "scipy_cblas_sgemm", "cblas_sgemm"):
                fn = getattr(dll, name, None)
                if fn is not None:
                    return ctypes.cast(fn, ctypes.c_void_p).value, name.endswith("64_")
        return None

    def _controllers(self) -> list:
        if self._libs is None:
            try:
                from threadpoolctl import ThreadpoolController  # lazy: it inspects every loaded library once
                self._libs = list(ThreadpoolController().select(user_api="blas").lib_controllers)
            except Exception:  # noqa: BLE001 - without it BLAS keeps its threads: slower under load, still right
                self._libs = []
        return self._libs

    @contextlib.contextmanager
    def __call__(self):
        with self._lock:
            if self._inside == 0:
                self._saved = [(lib, lib.get_num_threads()) for lib in self._controllers()]
                for lib, _ in self._saved:
                    lib.set_num_threads(1)
            self._inside += 1
        try:
            yield
        finally:
            with self._lock:
                self._inside -= 1
                if self._inside == 0:
                    for lib, n in self._saved:
                        lib.set_num_threads(n)


single_blas = SingleBlas()
