"""hwadapter_kp: kernel primitives written once, interpreted in numpy, rendered as C / OpenCL C / CUDA C."""

from .debug import DUMP_ENV, number_lines, source_hash
from .dialects import C, CUDA, OPENCL, CDialect, CUDADialect, Dialect, OpenCLDialect, Schedule, get_dialect
from .dsl import In, Out, ParamRef, apply, binary, cast, cycle_binary, init, read, read_broadcast, read_reduce
from .dsl import reduce, ternary, unary, write
from . import library
from .dtypes import DTYPES
from .errors import KernelError
from .fuse import FuseNode, fuse
from .functors import FUNCTORS, Functor, ops
from .interpreter import interpret
from .kernel import Kernel
from .layout import Layout
from .program import Launch, Program
from .reducers import REDUCERS, Reducer, reducers

any = apply  # Paddle's ElementwiseAny; shadows the builtin only inside this namespace


def kernel(fn=None, *, name=None, example_shapes=None):
    """Decorator: ``@kp.kernel`` or ``@kp.kernel(name=..., example_shapes={...})`` turns a function into a Kernel."""
    if fn is None:
        return lambda f: Kernel.from_function(f, name=name, example_shapes=example_shapes)
    return Kernel.from_function(fn, name=name, example_shapes=example_shapes)


__all__ = [
    "FuseNode", "fuse", "library", "C", "CUDA", "OPENCL", "CDialect", "CUDADialect", "DTYPES", "DUMP_ENV", "Dialect", "FUNCTORS", "Functor",
    "In", "Kernel", "KernelError", "Launch", "Layout", "OpenCLDialect", "Out", "ParamRef", "Program",
    "REDUCERS", "Reducer", "Schedule", "any", "apply", "binary", "cast", "cycle_binary", "get_dialect",
    "init", "interpret", "kernel", "number_lines", "ops", "read", "read_broadcast", "read_reduce", "reduce",
    "reducers", "source_hash", "ternary", "unary", "write",
]
