"""Optimizer updates for the CPU: float32 sgd_update, momentum_update and adam_update in C (update.c), one pass
over the elements with the reference kernels' arithmetic in the same order (bit-identical); other dtypes, and
learning rates that are not one number, go to the reference kernels."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from hwadapter.plugin import meta, reference

from .clib import CLibrary

SOURCE = Path(__file__).with_name("update.c")
_P, _N, _F, _I = ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_int
_F32 = np.dtype(np.float32)


def _fast(arrays, tensors: int, count: int) -> bool:
    """`count` float32 ndarrays, C-contiguous, the first `tensors` of one shape and the rest of one element: what
    update.c takes (anything else goes to the reference kernel, which the op's rule checks too)."""
    if len(arrays) != count or not all(type(a) is np.ndarray and a.dtype == _F32 and a.flags.c_contiguous
                                       for a in arrays):
        return False
    return all(a.shape == arrays[0].shape for a in arrays[:tensors]) and all(a.size == 1 for a in arrays[tensors:])


def _one(a) -> float:
    """The number a one-element array holds."""
    return float(a.reshape(-1)[0])


def kernels(device) -> dict:
    """{op: kernel} for `device`: float32 through update.c once it compiles (else the reference kernels)."""
    lib = CLibrary(device, (SOURCE,), {"hwa_adam": (None, [_P] * 7 + [_N] + [_F] * 8 + [_F, _I, _F, _I]),
                                       "hwa_sgd": (None, [_P] * 3 + [_N, _F, _F, _I]),
                                       "hwa_momentum": (None, [_P] * 5 + [_N, _F, _F, _F, _I, _I])},
                   "optimizer updates run in numpy")
    ref = reference.KERNELS

    def sgd_update(*arrays, **attrs):
        if lib() is None or not _fast(arrays, 2, 3):
            return ref["sgd_update"](*arrays, **attrs)
        meta.RULES["sgd_update"](tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), attrs)  # raises
        param, grad, lr = arrays
        wd = attrs.get("weight_decay", 0.0)
        out = np.empty_like(param)
        lib().hwa_sgd(param.ctypes.data, grad.ctypes.data, out.ctypes.data, param.size, _one(lr),
                      float(np.float32(wd)), int(bool(wd)))
        return out

    def momentum_update(*arrays, **attrs):
        if lib() is None or not _fast(arrays, 3, 4):
            return ref["momentum_update"](*arrays, **attrs)
        meta.RULES["momentum_update"](tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), attrs)
        param, grad, velocity, lr = arrays
        mu, nesterov, wd = attrs.get("momentum", 0.9), attrs.get("use_nesterov", False), attrs.get("weight_decay", 0.0)
        out_p, out_v = np.empty_like(param), np.empty_like(param)
        lib().hwa_momentum(param.ctypes.data, grad.ctypes.data, velocity.ctypes.data, out_p.ctypes.data,
                           out_v.ctypes.data, param.size, _one(lr), float(np.float32(mu)), float(np.float32(wd)),
                           int(bool(wd)), int(bool(nesterov)))
        return [out_p, out_v]

    def adam_update(*arrays, **attrs):
        if lib() is None or not _fast(arrays, 4, 7):
            return ref["adam_update"](*arrays, **attrs)
        meta.RULES["adam_update"](tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), attrs)
        param, grad, m, v, lr, beta1_pow, beta2_pow = arrays
        beta1, beta2 = attrs.get("beta1", 0.9), attrs.get("beta2", 0.999)
        epsilon, decoupled = attrs.get("epsilon", 1e-8), attrs.get("decoupled", False)
        f = np.float32
        rate, wd = _one(lr), f(attrs.get("weight_decay", 0.0))
        out = [np.empty_like(param) for _ in range(3)]
        lib().hwa_adam(*(a.ctypes.data for a in (param, grad, m, v)), *(o.ctypes.data for o in out), param.size,
                       rate, float(f(beta1)), float(f(1 - beta1)), float(f(beta2)), float(f(1 - beta2)),
                       float(f(1) - f(_one(beta1_pow))), float(f(1) - f(_one(beta2_pow))), float(f(epsilon)),
                       float(wd), int(bool(wd) and not decoupled), float(f(1) - f(rate) * wd),
                       int(bool(wd) and bool(decoupled)))
        return out

    return {"sgd_update": sgd_update, "momentum_update": momentum_update, "adam_update": adam_update}
