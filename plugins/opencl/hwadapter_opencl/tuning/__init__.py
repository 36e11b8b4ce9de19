"""Optional: what makes the OpenCL plugin fast. Deleting this folder loses speed, not results.

Launch batching for CPU drivers (batching.py: the default queue submits kernels 64 at a time); handwritten kernels
(kernels.py, plans.py, kernels/*.cl) for the ops kernel primitives do not express: GEMM and GEMV tuned per device,
convolution, pooling and its gradients, argmax/argmin, data movement. Without it the ops written in kernel primitives
still run on the device (the codegen backend), those eighteen fall back to the CPU with the same results, and the
subgraph level compiles kernel-primitive nodes only. Its plans are subgraph.py's Plan and Step.
"""
from __future__ import annotations

from . import kernels
from .batching import BatchedQueue

__all__ = ["BatchedQueue", "kernels"]
