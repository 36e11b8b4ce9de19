"""OpenCL devices for hwadapter: the reference plugin vendors copy.

Every level in one small package: `runtime.py` (memory, queues, events), `kernels.py` + `kernels/*.cl` (op
kernels), `codegen.py` (the compiler for kernel primitives), `subgraph.py` (whole subgraphs as one program).
Found through its entry point (pyproject.toml), never imported by the core; it never names its own device type, so
registered under another entry-point name it runs unchanged.
"""
from __future__ import annotations

from hwadapter.plugin import Plugin

from . import kernels, native
from .codegen import OpenCLCodegenBackend
from .runtime import OpenCLRuntime, devices

__all__ = ["OpenCLPlugin", "OpenCLRuntime", "OpenCLCodegenBackend"]
__version__ = "0.1.0"


class OpenCLPlugin(Plugin):
    """Every device of every OpenCL platform, as <type>:0..N-1."""

    api_version = (2, 0)

    def device_count(self) -> int:
        return len(devices())

    def create_runtime(self, index: int) -> OpenCLRuntime:
        # a host (Paddle) that loaded our native library shares its context: our kernels then run on its memory
        return OpenCLRuntime(index, f"{self.name}:{index}", native.shared(self.name, index))

    def native_library(self) -> str:
        """Its devices' shared virtual memory in C (svm_device.c), for native hosts such as the Paddle bridge."""
        return native.library(self.name)

    def register_kernels(self, registrar) -> None:
        kernels.register(registrar)

    def codegen_backend(self, device) -> OpenCLCodegenBackend:
        return OpenCLCodegenBackend(device.runtime)

    def subgraph_backend(self, device):
        from .subgraph import OpenCLSubgraphBackend
        return OpenCLSubgraphBackend(device)
