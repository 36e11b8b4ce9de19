"""The CPU reference plugin: host memory, numpy kernels for every op, and a C compiler backend.

Found through its entry point "cpu" like any vendor plugin. Eager ops use the numpy kernels (a few µs per
op); the C backend (OpenMP) runs everything written in kernel primitives that has no numpy kernel:
custom `kp.register_op` ops and fused programs. `HWADAPTER_CPU_KERNELS=codegen` drops the numpy kernels
of the primitive-expressible ops so those run compiled too.
"""
from __future__ import annotations

import os

from hwadapter.plugin import Plugin, reference

from .runtime import CpuRuntime

__all__ = ["CpuPlugin", "CpuRuntime"]

# Ops the op set also writes in kernel primitives; in codegen mode the compiled programs replace their numpy kernels.
PRIMITIVE_OPS = frozenset({
    "abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu", "gelu", "erf", "sin", "cos",
    "floor", "ceil", "round", "sign", "logical_not", "add", "sub", "mul", "div", "pow", "maximum", "minimum", "mod",
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and", "logical_or",
    "logical_xor", "where", "cast", "clip", "sum", "mean", "max", "min", "prod", "softmax", "log_softmax",
    "layer_norm", "batch_norm"})


class CpuPlugin(Plugin):
    """The host CPU as one device, cpu:0; also the designated fallback device."""

    def __init__(self):
        self._backend = None

    def device_count(self) -> int:
        return 1

    def create_runtime(self, index: int) -> CpuRuntime:
        return CpuRuntime(index)

    def register_kernels(self, kernels) -> None:
        mode = os.environ.get("HWADAPTER_CPU_KERNELS", "numpy")
        # The reference kernels accept every dtype the frontend lets through, so none are listed.
        for op, fn in reference.KERNELS.items():
            if mode == "codegen" and op in PRIMITIVE_OPS and self.codegen_backend(None).available() is None:
                continue
            kernels.register(op, fn)

    def codegen_backend(self, runtime):
        if self._backend is None:
            from .codegen import CpuCodegenBackend  # probes the C compiler: only when first needed
            self._backend = CpuCodegenBackend()
        return self._backend
