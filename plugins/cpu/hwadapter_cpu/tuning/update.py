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


def _ready(*arrays) -> bool:
    """float32 arrays, C-contiguous, of one shape after the first three (param, grad and state), scalars of one
    element."""
    return all(a.dtype == _F32 and a.flags.c_contiguous for a in arrays)


def _one(a) -> float | None:
    return float(a.reshape(-1)[0]) if a.size == 1 else None


def kernels(device) -> dict:
    """{op: kernel} for `device`: float32 through update.c once it compiles (else the reference kernels)."""
    lib = CLibrary(device, (SOURCE,), {"hwa_adam": (None, [_P] * 7 + [_N] + [_F] * 8 + [_F, _I, _F, _I]),
                                       "hwa_sgd": (None, [_P] * 3 + [_N, _F, _F, _I]),
                                       "hwa_momentum": (None, [_P] * 5 + [_N, _F, _F, _F, _I, _I])},
                   "optimizer updates run in numpy")
    ref = reference.KERNELS

    def sgd_update(param, grad, lr, weight_decay=0.0):
        rate = _one(lr)
        if lib() is None or rate is None or not _ready(param, grad, lr) or param.shape != grad.shape:
            return ref["sgd_update"](param, grad, lr, weight_decay=weight_decay)
        meta.RULES["sgd_update"]((param.shape, grad.shape, lr.shape), (param.dtype,) * 3, {"weight_decay": weight_decay})
        out = np.empty_like(param)
        lib().hwa_sgd(param.ctypes.data, grad.ctypes.data, out.ctypes.data, param.size, rate,
                      float(np.float32(weight_decay)), int(bool(weight_decay)))
        return out

    def momentum_update(param, grad, velocity, lr, momentum=0.9, use_nesterov=False, weight_decay=0.0):
        rate = _one(lr)
        attrs = {"momentum": momentum, "use_nesterov": use_nesterov, "weight_decay": weight_decay}
        if lib() is None or rate is None or not _ready(param, grad, velocity, lr) or \
                not param.shape == grad.shape == velocity.shape:
            return ref["momentum_update"](param, grad, velocity, lr, **attrs)
        meta.RULES["momentum_update"]((param.shape, grad.shape, velocity.shape, lr.shape), (param.dtype,) * 4, attrs)
        out_p, out_v = np.empty_like(param), np.empty_like(param)
        lib().hwa_momentum(param.ctypes.data, grad.ctypes.data, velocity.ctypes.data, out_p.ctypes.data,
                           out_v.ctypes.data, param.size, rate, float(np.float32(momentum)),
                           float(np.float32(weight_decay)), int(bool(weight_decay)), int(bool(use_nesterov)))
        return [out_p, out_v]

    def adam_update(param, grad, m, v, lr, beta1_pow, beta2_pow, beta1=0.9, beta2=0.999, epsilon=1e-8,
                    weight_decay=0.0, decoupled=False):
        rate, b1p, b2p = _one(lr), _one(beta1_pow), _one(beta2_pow)
        attrs = {"beta1": beta1, "beta2": beta2, "epsilon": epsilon, "weight_decay": weight_decay,
                 "decoupled": decoupled}
        arrays = (param, grad, m, v, lr, beta1_pow, beta2_pow)
        if lib() is None or None in (rate, b1p, b2p) or not _ready(*arrays) or \
                not param.shape == grad.shape == m.shape == v.shape:
            return ref["adam_update"](*arrays, **attrs)
        meta.RULES["adam_update"](tuple(a.shape for a in arrays), (param.dtype,) * 7, attrs)
        f = np.float32
        out = [np.empty_like(param) for _ in range(3)]
        wd = f(weight_decay)
        lib().hwa_adam(*(a.ctypes.data for a in (param, grad, m, v)), *(o.ctypes.data for o in out), param.size,
                       rate, float(f(beta1)), float(f(1 - beta1)), float(f(beta2)), float(f(1 - beta2)),
                       float(f(1) - f(b1p)), float(f(1) - f(b2p)), float(f(epsilon)), float(wd),
                       int(bool(weight_decay) and not decoupled), float(f(1) - f(rate) * wd),
                       int(bool(weight_decay) and bool(decoupled)))
        return out

    return {"sgd_update": sgd_update, "momentum_update": momentum_update, "adam_update": adam_update}
