"""OpenCL devices for hwadapter: the reference plugin vendors copy.

The contract, small and first: this file (the Plugin), `runtime.py` (memory, copies, queues as streams, events) and
`codegen.py` (the compiler for kernel primitives: compile, load, launch). Every op of the set then runs on the
device. `subgraph.py` is the subgraph level (whole subgraphs as one program). Optional, each deletable with the kit
still passing: `tuning/` (launch batching, handwritten kernels and GEMM tuning) and `native.py` + `svm_device.c`
(shared virtual memory for native hosts such as the Paddle bridge); the imports below accept only their absence.
Found through its entry point (pyproject.toml), never imported by the core; it never names its own device type, so
registered under another entry-point name it runs unchanged.
"""
from __future__ import annotations

from hwadapter.plugin import Plugin

from .codegen import OpenCLCodegenBackend
from .runtime import OpenCLRuntime, Queue, devices

try:  # optional: launch batching and handwritten kernels; without them, the same results more slowly
    from .tuning import BatchedQueue, kernels as handwritten
except ModuleNotFoundError as err:
    if err.name != f"{__name__}.tuning":  # only a deleted tuning/ is expected; anything it lacks is a bug to see
        raise
    BatchedQueue = handwritten = None
try:  # optional: the device library for native hosts (the Paddle bridge) and the runtime that adopts their memory
    from .native import SharedRuntime, library as svm_library, shared as svm_shared
except ModuleNotFoundError as err:
    if err.name != f"{__name__}.native":
        raise
    SharedRuntime = svm_library = svm_shared = None

__all__ = ["OpenCLPlugin", "OpenCLRuntime", "OpenCLCodegenBackend"]
__version__ = "0.1.0"


class OpenCLPlugin(Plugin):
    """Every device of every OpenCL platform, as <type>:0..N-1."""

    api_version = (2, 1)

    def device_count(self) -> int:
        return len(devices())

    def create_runtime(self, index: int) -> OpenCLRuntime:
        name, queue = f"{self.name}:{index}", BatchedQueue or Queue
        if SharedRuntime is None:
            return OpenCLRuntime(index, name, queue=queue)
        # a host (Paddle) that loaded our native library shares its context: our kernels then run on its memory
        return SharedRuntime(index, name, svm_shared(self.name, index), queue=queue)

    if handwritten is not None:  # the op level comes with tuning/; without it the codegen backend runs every op
        def register_kernels(self, registrar) -> None:
            handwritten.register(registrar)

    def codegen_backend(self, device) -> OpenCLCodegenBackend:
        return OpenCLCodegenBackend(device.runtime)

    def subgraph_backend(self, device):
        from .subgraph import OpenCLSubgraphBackend  # lazy: only a partitioned graph needs it (or tuning/, its Plan)
        return OpenCLSubgraphBackend(device, handwritten)

    def native_library(self) -> str | None:
        """Its devices' shared virtual memory in C (svm_device.c), for native hosts such as the Paddle bridge; None
        without native.py."""
        return svm_library(self.name) if svm_library else None
