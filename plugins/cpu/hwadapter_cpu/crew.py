"""Work-claiming threads for the CPU kernels in Python: the calling thread and the crew's take tasks in turn from one
list, while BLAS runs single-threaded. matmul uses it, and conv2d where numpy's BLAS cannot be called from C (else
conv2d's tasks run on the native crew, crew.c, which works the same way without the GIL: handing the GIL between
threads cost 50-100 us per call here).

Why not BLAS's own threads: OpenBLAS splits each product evenly up front, waits for every thread at its end, and its
threads spin between products. On the 2-core test machine with other work running, ResNet-50 took 813 ms that way
against 207 ms with one thread and 183 ms with this crew (same run; onnxruntime 206 ms). Here a descheduled thread
holds back only the task it took, and a helper that starts after the work is done finds nothing left to do.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor


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


class Crew:
    """`threads` - 1 helper threads (started on first use) that share task lists with the calling thread."""

    def __init__(self, threads: int | None = None, name: str = "hwadapter-cpu"):
        self.threads = max(1, threads or cores())
        self._name = name
        self._pool = None
        self._lock = threading.Lock()

    def run(self, tasks: list) -> None:
        """Call every task once; returns when all are done. The first exception raised by a task is raised here."""
        if len(tasks) <= 1 or self.threads == 1:
            for task in tasks:
                task()
            return
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix=self._name)
        claim = iter(range(len(tasks)))  # next() on it is atomic under the GIL: each task is taken once
        left, failed, done, lock = [len(tasks)], [], threading.Event(), threading.Lock()

        def work():
            for i in claim:
                try:
                    tasks[i]()
                except BaseException as err:  # noqa: BLE001 - handed to the caller below
                    failed.append(err)
                with lock:
                    left[0] -= 1
                    if left[0] == 0:
                        done.set()

        for _ in range(min(self.threads - 1, len(tasks) - 1)):
            self._pool.submit(work)
        work()
        done.wait()  # only for tasks other threads took and are running, never for a helper yet to start
        if failed:
            raise failed[0]


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
