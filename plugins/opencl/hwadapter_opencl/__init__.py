"""OpenCL devices for hwadapter: the reference plugin vendors copy.

Every level in one small package: `runtime.py` (memory, queues, events), `kernels.py` + `kernels/*.cl` (op
kernels), `codegen.py` (the compiler for kernel primitives), `subgraph.py` (whole subgraphs as one program).
Found through its entry point "opencl" (pyproject.toml), never imported by the core.
"""
from __future__ import annotations

from hwadapter.plugin import Plugin

from . import kernels
from .codegen import OpenCLCodegenBackend, backend_for
from .runtime import OpenCLRuntime, devices

__all__ = ["OpenCLPlugin", "OpenCLRuntime", "OpenCLCodegenBackend"]
__version__ = "0.1.0"


class OpenCLPlugin(Plugin):
    """Every device of every OpenCL platform, as opencl:0..N-1."""

    def device_count(self) -> int:
        return len(devices())

    def create_runtime(self, index: int) -> OpenCLRuntime:
        return OpenCLRuntime(index)

    def register_kernels(self, registrar) -> None:
        kernels.register(registrar)

    def codegen_backend(self, runtime: OpenCLRuntime) -> OpenCLCodegenBackend:
        return backend_for(runtime)

    def subgraph_backend(self, runtime: OpenCLRuntime):
        from .subgraph import OpenCLSubgraphBackend
        return OpenCLSubgraphBackend(runtime)
