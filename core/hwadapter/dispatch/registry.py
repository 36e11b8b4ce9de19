"""The kernel registry: kernels keyed by (op, device type, input dtypes)."""
from __future__ import annotations

import threading
from typing import Callable, Iterable

import numpy as np

# Ops whose kernel dtype is not that of their first input (where's first input is the bool condition).
KEY_INPUT = {"where": 1}


class _Entry:
    __slots__ = ("fn", "homogeneous", "exact", "any_dtype")

    def __init__(self, fn, dtypes):
        self.fn = fn
        self.any_dtype = dtypes is None
        self.homogeneous, self.exact = set(), set()
        for d in dtypes or ():
            if isinstance(d, (tuple, list)):
                self.exact.add(tuple(np.dtype(x) for x in d))
            else:
                self.homogeneous.add(np.dtype(d))

    def matches(self, op: str, dtypes: tuple) -> bool:
        if self.any_dtype or dtypes in self.exact:
            return True
        if not dtypes:
            return False
        i = KEY_INPUT.get(op, 0)
        return i < len(dtypes) and dtypes[i] in self.homogeneous

    def dtype_names(self) -> list[str]:
        if self.any_dtype:
            return ["any"]
        return sorted(d.name for d in self.homogeneous) + sorted("(" + ",".join(d.name for d in t) + ")" for t in self.exact)


class KernelRegistrar:
    """Handed to `Plugin.register_kernels`: registers kernels for one device type."""

    def __init__(self, registry: "KernelRegistry", device_type: str):
        self._registry, self.device_type = registry, device_type

    def register(self, op: str, fn: Callable | None = None, dtypes: Iterable | None = None):
        """Register `fn(*arrays, **attrs)` for `op`; `dtypes` lists dtype names (the kernel's type) or exact tuples, None for any.

        Usable as a decorator: `@kernels.register("add", dtypes=["float32"])`.
        """
        if fn is None:
            return lambda f: self.register(op, f, dtypes) or f
        self._registry.add(op, self.device_type, fn, dtypes)
        return fn


class KernelRegistry:
    """Every registered kernel; later registrations for the same key win, so a plugin can override."""

    def __init__(self):
        self._kernels: dict[tuple[str, str], list[_Entry]] = {}
        self._lock = threading.Lock()

    def add(self, op: str, device_type: str, fn: Callable, dtypes=None) -> None:
        """Register one kernel."""
        with self._lock:
            self._kernels.setdefault((op, device_type), []).insert(0, _Entry(fn, dtypes))

    def lookup(self, op: str, device_type: str, dtypes: tuple) -> Callable | None:
        """The kernel for these input dtypes, or None."""
        for entry in self._kernels.get((op, device_type), ()):
            if entry.matches(op, dtypes):
                return entry.fn
        return None

    def ops(self, device_type: str) -> dict[str, list[str]]:
        """op -> dtype names with a kernel on this device type."""
        out: dict[str, list[str]] = {}
        for (op, dev), entries in self._kernels.items():
            if dev == device_type:
                out[op] = sorted({n for e in entries for n in e.dtype_names()})
        return out

    def device_types_with(self, op: str, dtypes: tuple) -> list[str]:
        """Device types that have a kernel for op and these dtypes."""
        return sorted({dev for (o, dev), entries in self._kernels.items()
                       if o == op and any(e.matches(op, dtypes) for e in entries)})

    def remove_device_type(self, device_type: str) -> None:
        """Forget a device type's kernels (its plugin was reloaded)."""
        with self._lock:
            for key in [k for k in self._kernels if k[1] == device_type]:
                del self._kernels[key]


kernels = KernelRegistry()
