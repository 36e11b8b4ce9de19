"""The CPU device's worker threads: a large product is split into row blocks that they take in turn, each block a
single-threaded BLAS call.

Why not BLAS's own threads: OpenBLAS splits a product evenly over its threads and spins waiting for the slowest,
so on a busy machine (two cores, other processes) one descheduled thread stalls the whole product - ResNet-50 took
2.5-3x onnxruntime's time with two OpenBLAS threads and 0.8-1.0x with these workers, on the same loaded host. Blocks
taken in turn let the thread that does run do more of the work, as onnxruntime's thread pool does.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MIN_FLOPS = 1 << 22  # below this, one BLAS call on this thread is faster than handing blocks out
BLOCKS_PER_WORKER = 4
TILE_ROWS = 32  # a multiple of the row tile of OpenBLAS's and MKL's sgemm/dgemm kernels (4 to 16 rows)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Workers:
    """Threads (one per core this process may use) that run the row blocks of large BLAS products."""

    def __init__(self, count: int | None = None):
        self.count = count or _cores()
        self._pool = None
        self._blas = None
        self._lock = threading.Lock()

    def matmul(self, a, b):
        """a (M, K) @ b (N, K, P) -> (N, M, P), as np.matmul, with row blocks of a run on the workers."""
        m, k = a.shape
        n, _, p = b.shape
        if self.count < 2 or m < 16 or 2 * m * k * p * n < MIN_FLOPS:
            return np.matmul(a, b)
        out = np.empty((n, m, p), np.result_type(a, b))
        # blocks of whole BLAS tiles: rows left over in a partial tile take another code path, whose summation
        # order differs in the last bit (a model whose output channels must agree exactly would see it)
        step = -(-m // (BLOCKS_PER_WORKER * self.count) // TILE_ROWS) * TILE_ROWS
        pool = self._executor()
        with self._one_blas_thread():
            blocks = [pool.submit(np.matmul, a[i:i + step], b, out=out[:, i:i + step]) for i in range(0, m, step)]
            for block in blocks:
                block.result()
        return out

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.count, thread_name_prefix="hwadapter-cpu")
        return self._pool

    def _one_blas_thread(self):
        """BLAS limited to one thread while the blocks run (each worker is one thread of the product)."""
        if self._blas is None:
            from threadpoolctl import ThreadpoolController  # finds the BLAS libraries loaded: once, ~1 ms
            self._blas = ThreadpoolController()
        return self._blas.limit(limits=1, user_api="blas")
