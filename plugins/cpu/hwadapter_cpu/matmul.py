"""float32 matmul for the CPU through the crew (crew.py): row blocks of one product, or column blocks when there are
few rows, each a single-threaded BLAS call; everything else through the reference kernel.

Why not numpy's own call: OpenBLAS's threads spin after each product and took a core from the convolutions that
followed (a quarter of ResNet-50's CPU time once went to them after its one Gemm)."""
from __future__ import annotations

from functools import partial

import numpy as np

from hwadapter.plugin import reference

from .crew import single_blas

SPLIT_FLOPS = 1 << 21  # below this many multiply-adds one task does it all
ROWS, COLUMNS = 64, 256  # the least a block holds: each block's call packs the other operand again


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
        if a.shape[-1] != k:  # the reference names the mismatch
            return reference.matmul(x, y, transpose_x, transpose_y)
        a2 = np.ascontiguousarray(a).reshape(rows, k)
        out = np.empty((*a.shape[:-1], n), np.float32)
        o2 = out.reshape(rows, n)
        parts = 2 * crew.threads
        if rows * k * n < SPLIT_FLOPS:
            tasks = [partial(np.matmul, a2, b, out=o2)]
        elif rows >= 2 * ROWS:
            step = max(ROWS, -(-rows // parts))
            tasks = [partial(np.matmul, a2[r:r + step], b, out=o2[r:r + step]) for r in range(0, rows, step)]
        else:
            step = max(COLUMNS, -(-n // parts))
            tasks = [partial(_columns, a2, b, o2, c, min(n, c + step)) for c in range(0, n, step)]
        with single_blas():
            crew.run(tasks)
        return out
    matmul.__name__ = matmul.__qualname__ = "matmul"
    return matmul
