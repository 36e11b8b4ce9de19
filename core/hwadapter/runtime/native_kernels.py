"""A C library's kernels (device_api.h 1.1) as kernels of a device's table: outputs allocated from the op's rule."""
from __future__ import annotations

import numpy as np

from ..api.errors import InvalidArgumentError, PluginLoadError
from ..api import meta
from .memory import DeviceArray


def register(lib, kernels) -> None:
    """Register every kernel `lib` declares with `kernels` (a KernelRegistrar), for its exact input dtypes."""
    from .. import _native  # loaded already: lib is one of its NativeDevices
    names = {code: name for name, code in _native.DTYPES.items()}
    for index, op, dtypes in lib.kernels():
        if op not in meta.RULES:
            raise PluginLoadError(f"plugin {kernels.device_type!r}: its C library registers a kernel for {op!r}, an op "
                                  f"without an output rule in hwadapter.api.meta, so the core cannot allocate its "
                                  f"outputs. Fix: register kernels for ops of the op set only (see `hwadapter ops`)")
        kernels.register(op, _kernel(lib, index, op, kernels.device, _native), dtypes=[tuple(names[d] for d in dtypes)])


def _kernel(lib, index: int, op: str, device, _native):
    """The Python kernel that allocates op's outputs, then calls C kernel `index` (without the GIL) to fill them."""
    codes, call, rule, multi = _native.DTYPES, lib.call_kernel, meta.result_meta, op in meta.MULTI_OUTPUT
    dev = device.index

    def desc(a: DeviceArray) -> tuple:
        return a.handle, a.shape, codes[a.dtype.name]

    def kernel(*xs, **attrs):
        outs = [DeviceArray.empty(device, shape, dtype)
                for shape, dtype in rule(op, tuple(x.shape for x in xs), tuple(x.dtype for x in xs), attrs)]
        if any(o.handle is not None for o in outs):  # every output empty: nothing to compute
            call(index, dev, 0, [desc(x) for x in xs], [desc(o) for o in outs], _attrs(op, attrs, _native))
        return outs if multi else outs[0]

    kernel.__name__ = kernel.__qualname__ = f"native_{op}"
    return kernel


def _attrs(op: str, attrs: dict, _native) -> list:
    """(name, HwaAttrType, value) per attribute: bools as ints, dtypes as their names, None left out."""
    out = []
    for name, v in attrs.items():
        if v is None:
            continue
        if isinstance(v, (bool, int, np.bool_, np.integer)):
            out.append((name, _native.ATTR_INT, int(v)))
        elif isinstance(v, (float, np.floating)):
            out.append((name, _native.ATTR_FLOAT, float(v)))
        elif isinstance(v, str):
            out.append((name, _native.ATTR_STRING, v))
        elif isinstance(v, (np.dtype, type)):
            out.append((name, _native.ATTR_STRING, np.dtype(v).name))
        elif isinstance(v, (list, tuple)) and all(isinstance(i, (int, np.integer)) for i in v):
            out.append((name, _native.ATTR_INTS, [int(i) for i in v]))
        else:
            raise InvalidArgumentError(f"op {op!r}: attribute {name}={v!r} has no C form (int, float, int list or "
                                       f"string) to pass to a native kernel. Fix: run the op on a device whose kernel "
                                       f"takes it, or report it to the plugin's vendor")
    return out
