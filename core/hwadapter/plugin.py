"""The public plugin API: everything a device plugin may import from hwadapter.

A plugin subclasses `Plugin`, returns a `Runtime` per device, and provides at least one level:
op kernels (`register_kernels`), a `SubgraphBackend`, or a `CodegenBackend`. The interfaces live in
`hwadapter.api.interfaces`; this module adds the helpers every plugin would otherwise write again.
"""
from __future__ import annotations

from .api import dtypes
from .api.collectives import DONE, REDUCE_OPS, Collectives, Communicator, Work, poll  # the communication level (2.1)
from .api.config import cpu_kernels
from .api.errors import (CollectiveError, CompileError, DeviceUnavailableError, DiskFullError, HwAdapterError,
                         InvalidArgumentError, KernelNotFoundError, OutOfMemoryError, UnsupportedDTypeError)
from .api.ir import Graph, Node, Value, pack_executable, unpack_executable  # what subgraph backends get
from .runtime.fused import node_primitive  # a node's kernel-primitive program, "fused" nodes included
from .api.interfaces import (API_VERSION, CodegenBackend, DeviceProperties, Event, Executable, HostBufferRuntime,
                             HostEvent, HostStream, KernelRegistrar, Plugin, Program, Runtime, Stream,
                             SubgraphBackend, SynchronousRuntime)
from .api import meta  # the (shape, dtype) of every op's outputs: what the dispatcher checks results against
from .api import reference  # numpy kernels: every op's semantics
from .api import shapes  # shape rules, to size outputs
from .runtime import codegen
from .runtime.codegen import load_source  # a plugin's hand-written source, compiled through the disk cache
from .runtime.diskroom import check_room, no_room  # compilers that write files: a full disk said as such
from .runtime.memory import DeviceArray, contiguous_strides
from .runtime.native import NATIVE_API_VERSION, NATIVE_INCLUDE, NativePlugin, NativeRuntime
from .runtime.native_build import build_library  # a plugin's C device library for native hosts (native_library)
from .runtime.sharing import share  # intermediates of a compiled subgraph sharing memory where their lives allow
from .runtime.signature import BoundedCache, freeze, signature  # launch-plan caches


def primitive_ops() -> frozenset:
    """The ops written in kernel primitives: they run on every device with a codegen backend."""
    return frozenset(codegen.op_set())


__all__ = ["API_VERSION", "Plugin", "Runtime", "SynchronousRuntime", "HostBufferRuntime", "Stream", "Event", "HostStream",
           "HostEvent", "DeviceProperties", "KernelRegistrar", "CodegenBackend", "Program", "SubgraphBackend",
           "Executable", "NativePlugin", "NativeRuntime", "NATIVE_API_VERSION", "NATIVE_INCLUDE", "DeviceArray", "contiguous_strides",
           "BoundedCache", "freeze", "signature", "Graph", "Node", "Value", "pack_executable", "unpack_executable",
           "node_primitive", "load_source", "build_library", "share", "DiskFullError", "check_room", "no_room",
           "reference", "shapes", "meta", "dtypes", "primitive_ops", "cpu_kernels", "CompileError", "DeviceUnavailableError", "HwAdapterError",
           "InvalidArgumentError", "KernelNotFoundError", "OutOfMemoryError", "UnsupportedDTypeError",
           "Collectives", "Communicator", "Work", "DONE", "REDUCE_OPS", "CollectiveError", "poll"]
