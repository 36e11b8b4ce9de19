"""The public host API: what a host of hwadapter devices uses (a framework bridge, a test kit, a user's harness).

A host runs a device's own kernels on memory it holds itself: it finds the device, asks for the device's own way to
run an op for some input dtypes (never a CPU fallback), lends its native memory to the device's runtime, and loads a
plugin's native library (device_api.h) to allocate that memory. Plugins implement `hwadapter.plugin`; hosts use this
module, `hwadapter` and `hwadapter.device`, and nothing else of hwadapter's (docs/host.md).

`import hwadapter.host` costs nothing beyond `import hwadapter`: no graph pass, executor or onnx module.
"""
from __future__ import annotations

import ctypes
import math
from typing import Callable

import numpy as np

from .api.config import config as _config
from .api.errors import KernelNotFoundError
from .api.interfaces import Runtime
from .autograd.opvjp import op_vjp
from .dispatch.dispatcher import own as _own
from .dispatch.tensor import Tensor, wrap as _wrap
from .runtime.device import Device, devices as _devices
from .runtime.discovery import PluginRecord, registry as _registry
from .runtime.memory import DeviceArray
from .runtime.native import NativeRuntime
from .runtime.native import load_library as _load_library

__all__ = ["Device", "DeviceArray", "PluginRecord", "device", "own_kernel", "run_own_kernel", "accepts_native_memory",
           "adopt", "native_array", "load_library", "native_runtime", "plugin_types", "plugin_record", "tensor", "data",
           "op_vjp", "strict"]


# ---- devices and their own kernels ----
def device(spec) -> Device:
    """The Device named "type:index" ("type" alone is index 0), its plugin loaded on first use."""
    return _devices.get(spec)


def own_kernel(op: str, device: Device, dtypes: tuple) -> Callable | None:
    """The device's own way to run op for inputs of these numpy dtypes (its kernel, else its kernel-primitive
    program), or None: never a CPU fallback. Call it on the device's arrays; its result is the plugin's, unchecked."""
    return _own(op, device, tuple(np.dtype(d) for d in dtypes))


def run_own_kernel(op: str, device: Device, *arrays, **attrs):
    """op(*arrays, **attrs) on the device's own kernel for the arrays' dtypes; KernelNotFoundError when it has none."""
    dtypes = tuple(np.dtype(a.dtype) for a in arrays)
    fn = _own(op, device, dtypes)
    if fn is None:
        names = ", ".join(d.name for d in dtypes) or "no inputs"
        raise KernelNotFoundError(f"op {op!r} ({names}) has no kernel of {device} itself (a kernel or a "
                                  f"kernel-primitive program). Fix: run it through hwadapter's dispatch "
                                  f"(hwadapter.{op}), which may fall back to the CPU, or use dtypes {device.type} "
                                  f"registered (`hwadapter ops --device {device.type}`)")
    return fn(*arrays, **attrs)


def tensor(device: Device, array) -> Tensor:
    """A hwadapter Tensor over the device's own array (a numpy array on a host-memory device, else a DeviceArray, as
    native_array gives), sharing its memory: hwadapter's ops then run on it (op_vjp: the gradients by its rules)."""
    return _wrap(array, device)


def data(t: Tensor):
    """The device array a Tensor holds (numpy on a host-memory device, else a DeviceArray), not copied."""
    return t._data


class strict:
    """A context in which hwadapter's dispatch never falls back to the CPU (a missing kernel is an error), as a host
    running a device's kernels for another framework needs: that framework counts its own fallbacks. The setting is
    the process's (hwadapter.configure's), restored on leaving: nesting is fine, other threads see it meanwhile."""

    def __enter__(self):
        self._was, _config.fallback = _config.fallback, "error"
        return self

    def __exit__(self, *exc):
        _config.fallback = self._was


# ---- lending a native host's memory ----
def accepts_native_memory(device: Device) -> bool:
    """True when the device's kernels can run on a native host's memory: numpy views of it (Runtime.host_memory),
    or DeviceArrays its runtime adopts (Runtime.adopt)."""
    rt = device.runtime
    return bool(getattr(rt, "host_memory", False)) or type(rt).adopt is not Runtime.adopt


def adopt(device: Device, address: int, shape: tuple, dtype) -> DeviceArray:
    """The native host's dense memory at `address` as a DeviceArray of device (Runtime.adopt): lent for the length of
    one call, never freed by hwadapter."""
    return DeviceArray.adopt(device, address, tuple(shape), np.dtype(dtype))


def native_array(device: Device, address: int, shape: tuple, dtype):
    """The native host's dense memory at `address` as the device's array type: a numpy view on a host-memory device,
    else a DeviceArray its runtime adopts (`adopt`)."""
    dtype, shape = np.dtype(dtype), tuple(shape)
    if not device.host_memory:
        return adopt(device, address, shape, dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if not nbytes:
        return np.zeros(shape, dtype)
    raw = np.ctypeslib.as_array((ctypes.c_char * nbytes).from_address(address))
    return raw.view(np.uint8).view(dtype).reshape(shape)


# ---- native libraries (device_api.h) ----
def load_library(path) -> object:
    """A plugin's native device library (device_api.h) loaded and version-checked, as hwadapter's loader holds it
    (its kernels(): [(name, op, input dtype codes)]); DeviceUnavailableError says why it cannot be used."""
    return _load_library(str(path))


def native_runtime(path, index: int = 0) -> NativeRuntime:
    """A Runtime over device `index` of a native device library, as a host allocates and copies with it."""
    return NativeRuntime(_load_library(str(path)), index)


# ---- installed plugins ----
def plugin_types() -> list[str]:
    """The device types of the installed plugins (entry points of group hwadapter.plugins), none of them loaded."""
    return list(_registry.entry_points())


def plugin_record(device_type: str) -> PluginRecord | None:
    """What discovery knows of a plugin, loading it now if needed (ok, status, cause, fix, explain(), plugin,
    device_count, api_version, distribution, levels); None when no plugin has this device type."""
    return _registry.get(device_type)


# ---- communicators ----
def mpi_communicator(device: Device, comm, timeout: float | None = None):
    """hwadapter's default Communicator (on MPI) for device over the processes of mpi4py intracommunicator `comm`,
    for a host that makes its own groups: each wait bounded by `timeout` seconds (the job's limit by default) and
    stopped by a failure another rank announced. Needs hwadapter.distributed.init_parallel_env() first."""
    from .distributed import env  # lazy: MPI only for a host that asks for it
    from .runtime.mpi import MpiCommunicator
    w = env.world()
    return MpiCommunicator(device, comm, w.watch, w.timeout if timeout is None else timeout)
