"""Optional: faster CPU kernels with the reference kernels' semantics. Deleting this folder loses speed, not results.

conv2d as BLAS products with Winograd and im2col transforms in C (blasconv.py), float32 matmul (matmul.py), both
shared by the device's threads in C (crew.c); float32 pooling and batch_norm in C (pool.py, norm.py); float32
optimizer updates in C (update.py); float32 softmax, log_softmax, layer_norm and batched products in C (rows.py); float32 linear and cubic resize as
products (resize.py);
compiled programs run in parts on the same threads (threads.py); freed host memory kept for the next run (memory.py);
one call from Python per kernel (calls.c), and a plan's runs of these kernels as one call each (segments.py, with
views.py's reshape and concat).
"""
from __future__ import annotations

from . import blasconv, memory, norm, pool, rows, threads, update, views
from .matmul import matmul_kernel
from .resize import resize_kernel


def register(kernels, compiled: frozenset) -> None:
    """Registers the faster kernels on `kernels`' device, except for the ops in `compiled` (those run as compiled
    kernel primitives)."""
    device = kernels.device
    memory.keep_freed_memory()
    # one crew per device: kernels registered again for it (a second registrar) reuse its Transforms and threads
    conv = blasconv.conv_kernel(device, transforms=threads.shared(device))
    threads.share(device, conv.transforms)  # compiled programs run on the same crew, whatever kernels register
    matmul = matmul_kernel(conv.transforms, rows.Rows(device))
    faster = {"conv2d": conv, "matmul": matmul, "resize": resize_kernel(matmul), **pool.kernels(device),
              **norm.kernels(device), **rows.kernels(device), **update.kernels(device), **views.kernels(device)}
    for op, fn in faster.items():
        if op not in compiled:
            kernels.register(op, fn)
