"""Test plugins with fused backward kernels: the CPU plugin (host memory, every reference kernel) plus `relu_vjp` and
`mul_vjp`. Not on sys.path unless a test puts this directory there.

* vjpgood: both right; CALLS counts their calls (the engine must prefer them to the rules);
* vjpbad: relu_vjp forgets relu's mask (the gradient passes where x < 0 too), and mul_vjp returns the broadcast
  result's shape instead of each input's.
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from hwadapter_cpu import CpuPlugin

CALLS: Counter = Counter()


def _to_shape(g: np.ndarray, shape: tuple) -> np.ndarray:
    """g summed over the axes broadcasting added or stretched, back to `shape`."""
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and g.shape[i] != 1)
    return np.ascontiguousarray(g.sum(axis=axes, keepdims=True) if axes else g).reshape(shape)


def relu_vjp(x, g):
    CALLS["relu_vjp"] += 1
    return np.where(x > 0, g, np.zeros((), g.dtype)).astype(x.dtype)


def mul_vjp(x, y, g):
    CALLS["mul_vjp"] += 1
    return [_to_shape(g * y, x.shape).astype(x.dtype), _to_shape(g * x, y.shape).astype(y.dtype)]


def relu_vjp_unmasked(x, g):
    return np.array(g, dtype=x.dtype)


def mul_vjp_unreduced(x, y, g):
    return [np.array(g * y), np.array(g * x)]


class FusedPlugin(CpuPlugin):
    fused = {"relu_vjp": relu_vjp, "mul_vjp": mul_vjp}

    def register_kernels(self, kernels) -> None:
        super().register_kernels(kernels)
        for op, fn in self.fused.items():
            kernels.register(op, fn, dtypes=["float32", "float64"])

    def native_library(self):
        return None


class WrongPlugin(FusedPlugin):
    fused = {"relu_vjp": relu_vjp_unmasked, "mul_vjp": mul_vjp_unreduced}
