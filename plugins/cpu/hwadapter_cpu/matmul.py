"""float32 matmul for the CPU through the crew (crew.py): row blocks of one product, or column blocks when there are
few rows, each a single-threaded BLAS call; everything else through the reference kernel.

Why not numpy's own call: OpenBLAS's threads spin after each product and took a core from the convolutions that
followed (a quarter of ResNet-50's CPU time once went to them after its one Gemm)."""
from __future__ import annotations

from functools import partial

import numpy as np

from hwadapter.plugin import reference

from .crew import COLUMNS, ROWS, SPLIT_FLOPS, single_blas, split

#: OpenBLAS's own one-thread bound (65536 * GEMM_MULTITHREAD_THRESHOLD, 4 by default) in multiply-adds
TINY = 1 << 18


def _columns(a, b, out, lo, hi):
    out[:, lo:hi] = np.matmul(a, b[:, lo:hi])  # few rows: the block's result is small, copied into place


def matmul_kernel(crew):
    """matmul sharing `crew`: float32 products with a 2-D right operand split into blocks, the rest as given."""
    def matmul(x, y, transpose_x=False, transpose_y=False):
        if not (x.dtype == y.dtype == np.float32 and x.ndim >= 2 and y.ndim == 2 and x.size and y.size):
            return reference.matmul(x, y, transpose_x, transpose_y)
        a = np.swapaxes(x, -1, -2) if transpose_x else x
        b = y.T if transpose_y else y
        (k, n), rows = b.shape, a.size // a.shape[-1]
        # a mismatch: the reference names it; a tiny product: OpenBLAS runs it on one thread itself, no crew needed
        if a.shape[-1] != k or rows * k * n <= TINY:
            return reference.matmul(x, y, transpose_x, transpose_y)
        a2 = np.ascontiguousarray(a).reshape(rows, k)
        out = np.empty((*a.shape[:-1], n), np.float32)
        o2 = out.reshape(rows, n)
        parts = 2 * crew.threads
        if rows * k * n < SPLIT_FLOPS:
            tasks = [partial(np.matmul, a2, b, out=o2)]
        elif rows >= 2 * ROWS:
            tasks = [partial(np.matmul, a2[r:z], b, out=o2[r:z]) for r, z in split(rows, parts, ROWS)]
        else:
            tasks = [partial(_columns, a2, b, o2, c, z) for c, z in split(n, parts, COLUMNS)]
        with single_blas():
            crew.run(tasks)
        return out
    matmul.__name__ = matmul.__qualname__ = "matmul"
    return matmul
