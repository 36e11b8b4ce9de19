"""Signatures of a call (shapes, dtypes, attributes) and a bounded cache keyed by them, for launch plans."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import numpy as np


def freeze(value):
    """Lists (from JSON or a caller) as tuples, recursively, so attributes hash and compare as kernels take them."""
    return tuple(freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


def signature(arrays, attrs: dict):
    """A hashable key of the arrays' shapes and dtypes and the attributes, or None when an attribute cannot hash."""
    if len(arrays) == 2 and not attrs:  # every binary op's warm call: the general loop below, unrolled
        a, b = arrays
        if type(a) is not np.ndarray and type(b) is not np.ndarray:
            return (a.shape, a.dtype), (b.shape, b.dtype)
    key = []
    for a in arrays:  # a loop, not a generator: this is on every warm call of a compiled kernel
        # numpy strides too: a host kernel may return a view, and a program is specialised on its layout
        key.append((a.shape, a.dtype, a.strides) if type(a) is np.ndarray else (a.shape, a.dtype))
    if not attrs:
        return tuple(key)  # shapes, dtypes and strides always hash
    key.append(tuple(sorted((k, freeze(v)) for k, v in attrs.items())))
    key = tuple(key)
    try:
        hash(key)
    except TypeError:
        return None
    return key


class BoundedCache:
    """A thread-safe map that forgets its oldest entries past `limit` (shapes seen once must not pile up)."""

    def __init__(self, limit: int = 1024):
        self.limit = limit
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        #: The value for a key, or None (the dict's own get: warm calls of compiled kernels use it).
        self.get = self._items.get


    def get_or_make(self, key, make: Callable):
        """The value for `key`, made by `make()` when absent (a None key is never cached)."""
        value = self._items.get(key) if key is not None else None
        if value is None:
            value = make()
            if key is not None:
                with self._lock:
                    self._items[key] = value
                    if len(self._items) > self.limit:
                        self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._items.clear()  # in place: `get` is bound to this dict

    def __len__(self):
        return len(self._items)
