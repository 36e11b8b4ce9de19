"""hwadapter: plug accelerators into a deep-learning runtime through pip-installable plugins.

`import hwadapter` loads the plugin API's bottom floor only (errors, dtypes); the frontend (tensors, ops, devices,
jit, nn, profiler, save/load) is imported on first use of any of its names, so that a plugin's
`import hwadapter.plugin` loads no frontend, graph or dispatch module.

No logging handler is installed: with none configured, Python prints hwadapter's WARNINGs (CPU fallback)
to stderr, so fallback is never silent by default.
"""
from __future__ import annotations

import importlib

from .api import dtypes, errors  # hw.dtypes, hw.errors: public names for the bottom of the plugin API
from .api.dtypes import (bool_, float16, float32, float64, int8, int16, int32, int64,  # noqa: F401
                         uint8, uint16, uint32, uint64)
from .api.errors import (CollectiveError, CompileError, DeviceUnavailableError, DiskFullError, HwAdapterError,  # noqa: F401
                         InvalidArgumentError, InvalidDeviceError, KernelExecutionError, KernelNotFoundError,
                         LoopLimitError, OutOfMemoryError, PluginError, PluginLoadError, TracingError,
                         UnsupportedDTypeError)

__version__ = "0.1.0"
bool = bool_  # noqa: A001  paddle's name for the boolean dtype

#: Packages `hw.<name>` imports on its own, without loading the frontend's other names.
_PACKAGES = ("graph", "onnx", "host", "plugin", "io", "optimizer", "random", "metric", "hapi", "autograd", "trace",
             "static", "jit", "serialize", "distributed")


def _frontend() -> dict:
    """The frontend's public names, imported once and then set on the package (they never change)."""
    # lazy: the frontend is what `import hwadapter.plugin` must not load (import_module: `from . import name` would
    # ask this module's __getattr__ for the name first)
    device, jit, nn, profiler, ops, tensor, serialize, autograd, hapi = (
        importlib.import_module(f".{m}", __name__) for m in
        ("device", "jit", "nn", "profiler", "ops.api", "tensor", "serialize", "autograd", "hapi"))
    configure, device_guard, get_device, set_device = (device.configure, device.device_guard, device.get_device,
                                                       device.set_device)
    Tensor, from_dlpack, to_tensor = tensor.Tensor, tensor.from_dlpack, tensor.to_tensor
    names = {"Tensor": Tensor, "to_tensor": to_tensor, "from_dlpack": from_dlpack, "set_device": set_device,
             "get_device": get_device, "device_guard": device_guard, "configure": configure, "device": device,
             "jit": jit, "nn": nn, "profiler": profiler, "save": serialize.save, "load": serialize.load,
             "autograd": autograd, "grad": autograd.grad, "no_grad": autograd.no_grad,
             "enable_grad": autograd.enable_grad, "is_grad_enabled": autograd.is_grad_enabled,
             "set_grad_enabled": autograd.set_grad_enabled, "create_parameter": autograd.create_parameter,
             "ParamAttr": nn.ParamAttr, "Model": hapi.Model}
    names.update({n: getattr(ops, n) for n in ops.__all__})
    names["__all__"] = ["Tensor", "to_tensor", "from_dlpack", "set_device", "get_device", "device_guard",
                        "configure", "device", "nn", "jit", "profiler", "dtypes", "HwAdapterError", "save", "load",
                        "io", "autograd", "grad", "no_grad", "enable_grad", "is_grad_enabled", "set_grad_enabled",
                        "create_parameter", "ParamAttr", "optimizer", "random", "metric", "Model", "DataParallel",
                        "distributed"] + list(ops.__all__)
    globals().update(names)
    return names


def __getattr__(name):
    if name == "kp":  # the kernel-primitive language is imported when first used, not with the frontend
        return importlib.import_module(".kp", __name__)
    if name in _PACKAGES:
        return importlib.import_module(f".{name}", __name__)
    if name == "DataParallel":  # the class itself, from hwadapter.distributed, which loads only when asked for
        return importlib.import_module(".distributed", __name__).DataParallel
    names = _frontend()
    if name in names:
        return names[name]
    raise AttributeError(f"module 'hwadapter' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_frontend()) | {"DataParallel"})
