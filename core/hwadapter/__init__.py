"""hwadapter: plug accelerators into a deep-learning runtime through pip-installable plugins.

No logging handler is installed: with none configured, Python prints hwadapter's WARNINGs (CPU fallback)
to stderr, so fallback is never silent by default.
"""
from __future__ import annotations

import importlib


from .api import dtypes, errors  # hw.dtypes, hw.errors: public names for the bottom of the plugin API
from .device import configure, device_guard, get_device, set_device
from .api.dtypes import bool_, float16, float32, float64, int8, int16, int32, int64, uint8  # noqa: F401
from .api.errors import (CompileError, DeviceUnavailableError, HwAdapterError, InvalidArgumentError,
                         InvalidDeviceError, KernelExecutionError, KernelNotFoundError, OutOfMemoryError,
                         PluginLoadError, TracingError, UnsupportedDTypeError)
from .tensor import Tensor, from_dlpack, to_tensor
from .ops.api import *  # noqa: F401,F403  the op set: hwadapter.add, hwadapter.matmul, ...
from .ops.api import __all__ as _ops_all
from . import device, jit, nn, profiler  # noqa: F401


__version__ = "0.1.0"
bool = bool_  # noqa: A001  paddle's name for the boolean dtype

__all__ = ["Tensor", "to_tensor", "from_dlpack", "set_device", "get_device", "device_guard", "configure", "device",
           "nn", "jit", "profiler", "dtypes", "HwAdapterError"] + list(_ops_all)


def __getattr__(name):
    if name == "kp":  # the kernel-primitive language is imported when first used, not by `import hwadapter`
        return importlib.import_module(".kp", __name__)
    raise AttributeError(f"module 'hwadapter' has no attribute {name!r}")
