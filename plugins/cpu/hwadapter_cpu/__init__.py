"""The CPU reference plugin: host memory, the reference numpy kernels for every op, and a C compiler backend.

A vendor's template: this file, runtime.py and codegen.py are the contract. native.py (with host_device.c) serves
native hosts such as the Paddle bridge. tuning/ holds faster kernels and may be deleted: the plugin then runs the
reference kernels, with the same results, and still passes the conformance kit.
"""
from __future__ import annotations

from hwadapter.plugin import Plugin, cpu_kernels, primitive_ops, reference

from . import native
from .runtime import CpuRuntime

try:  # optional: the faster kernels; a vendor who deletes tuning/ keeps a plugin that runs and passes the kit
    from .tuning import register as register_tuned
    from .tuning.threads import Threads
except ModuleNotFoundError as err:
    if err.name != f"{__name__}.tuning":  # only a deleted tuning/ is expected; anything it lacks is a bug to see
        raise
    register_tuned = Threads = None

__all__ = ["CpuPlugin", "CpuRuntime"]


class CpuPlugin(Plugin):
    """The host CPU as one device, cpu:0; also the designated fallback device."""

    api_version = (2, 1)

    def device_count(self) -> int:
        return 1

    def create_runtime(self, index: int) -> CpuRuntime:
        return CpuRuntime(index)

    def register_kernels(self, kernels) -> None:
        # HWADAPTER_CPU_KERNELS=codegen: the ops written in kernel primitives run as compiled C, not in numpy
        codegen = cpu_kernels() == "codegen" and kernels.device.codegen is not None
        compiled = primitive_ops() if codegen else frozenset()
        # The reference kernels accept every dtype the frontend lets through, so none are listed.
        for op, fn in reference.KERNELS.items():
            if op not in compiled:
                kernels.register(op, fn)
        if register_tuned is not None:
            register_tuned(kernels, compiled)

    def native_library(self) -> str:
        """Host memory in C (host_device.c), for native hosts such as the Paddle bridge."""
        return native.library(self.name)

    def codegen_backend(self, device):
        from .codegen import CpuCodegenBackend  # lazy: it probes the C compiler, only when first needed
        backend = CpuCodegenBackend()
        if Threads is not None:  # programs run in parts on the device's threads; without tuning/, on the caller's
            backend.threads = Threads(device)
        return backend
