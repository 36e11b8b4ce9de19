"""The CPU reference plugin: host memory, numpy kernels for every op. Found through its entry point "cpu"."""
from __future__ import annotations

from hwadapter.plugin import Plugin, reference

from .runtime import CpuRuntime

__all__ = ["CpuPlugin", "CpuRuntime"]


class CpuPlugin(Plugin):
    """The host CPU as one device, cpu:0; also the designated fallback device."""

    def device_count(self) -> int:
        return 1

    def create_runtime(self, index: int) -> CpuRuntime:
        return CpuRuntime(index)

    def register_kernels(self, kernels) -> None:
        # The reference kernels accept every dtype the frontend lets through, so none are listed.
        for op, fn in reference.KERNELS.items():
            kernels.register(op, fn)
