"""The CPU reference plugin: host memory, numpy kernels for every op, and a C compiler backend.

Found through its entry point "cpu" like any vendor plugin. Eager ops use the numpy kernels (a few µs per
op); the C backend (OpenMP) runs everything written in kernel primitives that has no numpy kernel:
custom `kp.register_op` ops and fused programs. float32 conv2d and matmul are BLAS products shared by the device's
own threads (blasconv.py, matmul.py, crew.py). `HWADAPTER_CPU_KERNELS=codegen` drops the numpy kernels of the
primitive-expressible ops so those run compiled too, and runs float32 conv2d and matmul in C (compiled.py).
"""
from __future__ import annotations

from hwadapter.plugin import Plugin, cpu_kernels, primitive_ops, reference

from . import blasconv, compiled, native, norm, pool
from .crew import Crew
from .matmul import matmul_kernel
from .runtime import CpuRuntime

__all__ = ["CpuPlugin", "CpuRuntime"]


class CpuPlugin(Plugin):
    """The host CPU as one device, cpu:0; also the designated fallback device."""

    api_version = (2, 0)

    def device_count(self) -> int:
        return 1

    def create_runtime(self, index: int) -> CpuRuntime:
        return CpuRuntime(index)

    def register_kernels(self, kernels) -> None:
        codegen = cpu_kernels() == "codegen" and kernels.device.codegen is not None
        # The reference kernels accept every dtype the frontend lets through, so none are listed.
        skip = primitive_ops() if codegen else frozenset()
        for op, fn in reference.KERNELS.items():
            if op not in skip:
                kernels.register(op, fn)
        # the reference's semantics, faster: conv2d as BLAS products with C transforms around them (all in C, with
        # float32 matmul, under HWADAPTER_CPU_KERNELS=codegen), float32 pooling and batch_norm in C (pool.c, norm.c)
        crew = Crew(name=str(kernels.device))  # one set of threads for the device's conv2d and matmul
        default = {"conv2d": blasconv.conv_kernel(kernels.device, crew), "matmul": matmul_kernel(crew)}
        for op, fn in (compiled.kernels(kernels.device) if codegen else default).items():
            kernels.register(op, fn)
        c_kernels = {**pool.kernels(kernels.device), **({} if codegen else norm.kernels(kernels.device))}
        for op, fn in c_kernels.items():  # batch_norm is a primitive op: under codegen, its compiled form serves
            kernels.register(op, fn)

    def native_library(self) -> str:
        """Host memory in C (host_device.c), for native hosts such as the Paddle bridge."""
        return native.library(self.name)

    def codegen_backend(self, device):
        from .codegen import CpuCodegenBackend  # lazy: it probes the C compiler, only when first needed
        return CpuCodegenBackend()
