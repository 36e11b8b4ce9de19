"""How an op runs as a kernel-primitive program: the one record the op set (primitives.py) and the device's kernels
(codegen.py) share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class PrimitiveOp:
    """How an op runs as a kernel-primitive program."""
    kernel: object                      # hwadapter_kp.Kernel
    inputs: tuple                       # the kernel's input params, in the op's input order
    attrs: Callable = lambda attrs, dtypes: attrs      # op attrs -> kernel attrs
    bind: Callable = lambda attrs, dtypes: {}           # type-variable bindings (e.g. the output dtype)
    outputs: tuple = field(default=())  # which outputs the op returns (default: the first)
