"""Standard op kernels written in primitives, for the core to register as ops.

``KERNELS`` maps op names to Kernels.  Elementwise binaries broadcast (numpy
rules); reductions are ``reduce_<sum|mean|max|min|prod>`` with attrs ``axis``
(None: all) and ``keepdims``.  Output dtype variables left unbound are
inferred from what the kernel writes (e.g. comparisons give bool, integer sums
int64); ``cast`` needs its output variable ``U`` bound, and a bound ``U`` of a
reduction converts the accumulated result to it.
"""

import numpy as np

from . import dsl as kp
from . import dtypes as dt
from .dsl import ParamDecl, current
from .errors import KernelError
from .functors import BINARY, UNARY
from .kernel import Kernel

KERNELS = {}


def _register(name, params, body, attrs=None, example_shapes=None, doc=""):
    decls = [ParamDecl(n, kind, dtype, optional) for n, kind, dtype, optional in params]
    KERNELS[name] = Kernel(name, decls, body, attrs, example_shapes, doc)
    return KERNELS[name]


def _compute_dtype(dtype):
    """float16 math is done in float32 (free: that is its register type)."""
    return "float32" if dtype == "float16" else dtype


def _unary(op):
    def body(x, out):
        kp.write(out, kp.unary(op, kp.read(x)))
    _register(op, [("x", "in", "T", False), ("out", "out", "U", False)], body, doc=f"elementwise {op}")


def _binary(op):
    def body(x, y, out):
        kp.write(out, kp.binary(op, kp.read_broadcast(x), kp.read_broadcast(y)))
    _register(op, [("x", "in", "T", False), ("y", "in", "T", False), ("out", "out", "U", False)], body,
              doc=f"elementwise {op} with numpy broadcasting")


for _op in UNARY:
    _unary(_op)
for _op in BINARY:
    _binary(_op)


def _where(cond, x, y, out):
    kp.write(out, kp.ternary("where", kp.read_broadcast(cond), kp.read_broadcast(x), kp.read_broadcast(y)))


_register("where", [("cond", "in", "bool", False), ("x", "in", "T", False), ("y", "in", "T", False),
                    ("out", "out", "T", False)], _where, doc="cond ? x : y with numpy broadcasting")


def _cast(x, out):
    if out.dtype is None:
        raise current().error("cast needs its output dtype: pass dtypes={'U': ...}")
    kp.write(out, kp.cast(kp.read(x), out.dtype))


_register("cast", [("x", "in", "T", False), ("out", "out", "U", False)], _cast, doc="numpy astype")


def _bound(value, dtype):
    """A clip bound as a constant of ``dtype``, as numpy's clip takes it: a float bound rounds to the dtype (beyond its
    range: to +-inf), an integer bound beyond an integer dtype's range is clamped to it (no element lies beyond)."""
    if dt.is_float(dtype):
        with np.errstate(over="ignore"):
            return kp.init(float(np.asarray(value, dtype=dt.to_numpy(dtype))), dtype)
    if dtype != "bool" and float(value).is_integer():
        info = np.iinfo(dtype)
        value = min(max(int(value), int(info.min)), int(info.max))
    return kp.init(value, dtype)


def _clip(x, out, min=None, max=None):
    v = kp.read(x)
    if min is not None:
        v = kp.binary("max", v, _bound(min, x.dtype))
    if max is not None:
        v = kp.binary("min", v, _bound(max, x.dtype))
    kp.write(out, v)


_register("clip", [("x", "in", "T", False), ("out", "out", "T", False)], _clip, {"min": None, "max": None},
          doc="clamp to [min, max] (either may be None)")


def _reduction(op):
    def body(x, out, axis=None, keepdims=False):
        value = kp.reduce(op, kp.read(x), axes=axis, keepdims=keepdims)
        # U left unbound: the accumulator dtype (int64 for integer sums); bound: converted to it
        kp.write(out, kp.cast(value, out.dtype) if out.dtype else value)
    _register(f"reduce_{op}", [("x", "in", "T", False), ("out", "out", "U", False)], body,
              {"axis": None, "keepdims": False}, {"x": (4, 8)}, doc=f"{op} over axis (None: all)")


for _op in ("sum", "mean", "max", "min", "prod"):
    _reduction(_op)


def _softmax(x, out, axis=-1):
    v = kp.read(x)
    shifted = v - kp.reduce("max", v, axes=axis, keepdims=True)   # subtracting the max keeps exp finite
    e = kp.unary("exp", shifted)
    kp.write(out, e / kp.reduce("sum", e, axes=axis, keepdims=True))


def _log_softmax(x, out, axis=-1):
    v = kp.read(x)
    shifted = v - kp.reduce("max", v, axes=axis, keepdims=True)
    total = kp.reduce("sum", kp.unary("exp", shifted), axes=axis, keepdims=True)
    kp.write(out, shifted - kp.unary("log", total))


for _name, _body in (("softmax", _softmax), ("log_softmax", _log_softmax)):
    _register(_name, [("x", "in", "T", False), ("out", "out", "T", False)], _body, {"axis": -1},
              {"x": (4, 8)}, doc=f"numerically stable {_name} along axis")


def _layer_norm(x, weight, bias, out, mean, variance, begin_norm_axis=1, epsilon=1e-5):
    cd = _compute_dtype(x.dtype)
    axes = tuple(range(begin_norm_axis % x.ndim if x.ndim else 0, x.ndim))
    v = kp.cast(kp.read(x), cd)
    mu = kp.reduce("mean", v, axes=axes)
    d = v - mu
    var = kp.reduce("mean", d * d, axes=axes)
    y = d * kp.unary("rsqrt", var + kp.init(epsilon, cd))
    if weight is not None:
        y = y * kp.cast(kp.read_broadcast(weight), cd)
    if bias is not None:
        y = y + kp.cast(kp.read_broadcast(bias), cd)
    kp.write(out, kp.cast(y, x.dtype))
    kp.write(mean, mu)
    kp.write(variance, var)


_register("layer_norm", [("x", "in", "T", False), ("weight", "in", "W", True), ("bias", "in", "W", True),
                         ("out", "out", "T", False), ("mean", "out", "U", False), ("variance", "out", "U", False)],
          _layer_norm, {"begin_norm_axis": 1, "epsilon": 1e-5}, {"x": (4, 8), "weight": (8,), "bias": (8,)},
          doc="normalise over axes >= begin_norm_axis; weight/bias have shape x.shape[begin_norm_axis:]; "
              "mean/variance (float32 for float16 x) have shape x.shape[:begin_norm_axis]")


def _batch_norm(x, running_mean, running_var, weight, bias, out, epsilon=1e-5, channel_axis=1):
    cd = _compute_dtype(x.dtype)
    axis = channel_axis % x.ndim

    def per_channel(p):
        return kp.cast(kp.read_broadcast(p, axis=axis), cd)

    y = (kp.cast(kp.read(x), cd) - per_channel(running_mean))
    y = y * kp.unary("rsqrt", per_channel(running_var) + kp.init(epsilon, cd))
    if weight is not None:
        y = y * per_channel(weight)
    if bias is not None:
        y = y + per_channel(bias)
    kp.write(out, kp.cast(y, x.dtype))


_register("batch_norm", [("x", "in", "T", False), ("running_mean", "in", "W", False),
                         ("running_var", "in", "W", False), ("weight", "in", "W", True),
                         ("bias", "in", "W", True), ("out", "out", "T", False)],
          _batch_norm, {"epsilon": 1e-5, "channel_axis": 1},
          {"x": (2, 3, 4), "running_mean": (3,), "running_var": (3,), "weight": (3,), "bias": (3,)},
          doc="inference batch norm; per-channel params of shape (C,) on channel_axis (NC... by default)")


# --- fused optimizer updates: one program per parameter (hwadapter's sgd_update, momentum_update, adam_update) -----
# The tensors of param's shape are read over the domain; the one-element scalars that change between steps (the
# learning rate, the powers of beta) are read cyclically, element 0 everywhere, so that they take no part in the
# iteration shape (a 0-d param with a shape-(1,) lr stays 0-d); fixed hyper-parameters are attributes (constants).
# float16 is computed in float32 and rounded once. The order of operations is the numpy reference's.
def _float_update(param):
    if not dt.is_float(param.dtype):
        raise current().error(f"optimizer updates take float tensors, not {param.dtype}")
    return _compute_dtype(param.dtype)


def _number(x, cd):
    """One-element input ``x`` as a value of ``cd``: x[0] * 1 (exact) is how a cyclic read is spelt."""
    return kp.cast(kp.cycle_binary("mul", kp.init(1, x.dtype), x), cd)


def _sgd_update(param, grad, lr, param_out, weight_decay=0.0):
    cd = _float_update(param)
    p, g = kp.cast(kp.read(param), cd), kp.cast(kp.read(grad), cd)
    if weight_decay:
        g = g + kp.init(weight_decay, cd) * p
    kp.write(param_out, kp.cast(p - _number(lr, cd) * g, param.dtype))


def _momentum_update(param, grad, velocity, lr, param_out, velocity_out, momentum=0.9, use_nesterov=False,
                     weight_decay=0.0):
    cd = _float_update(param)
    p, g, v = (kp.cast(kp.read(a), cd) for a in (param, grad, velocity))
    mu = kp.init(momentum, cd)
    if weight_decay:
        g = g + kp.init(weight_decay, cd) * p
    v = mu * v + g
    step = g + mu * v if use_nesterov else v
    kp.write(param_out, kp.cast(p - _number(lr, cd) * step, param.dtype))
    kp.write(velocity_out, kp.cast(v, param.dtype))


def _adam_update(param, grad, m, v, lr, beta1_pow, beta2_pow, param_out, m_out, v_out, beta1=0.9, beta2=0.999,
                 epsilon=1e-8, weight_decay=0.0, decoupled=False):
    cd = _float_update(param)
    p, g, m0, v0 = (kp.cast(kp.read(a), cd) for a in (param, grad, m, v))
    rate, one = _number(lr, cd), kp.init(1.0, cd)
    if weight_decay and not decoupled:
        g = g + kp.init(weight_decay, cd) * p
    m1 = kp.init(beta1, cd) * m0 + kp.init(1 - beta1, cd) * g
    v1 = kp.init(beta2, cd) * v0 + kp.init(1 - beta2, cd) * g * g
    m_hat = m1 / (one - _number(beta1_pow, cd))
    v_hat = v1 / (one - _number(beta2_pow, cd))
    if weight_decay and decoupled:
        p = p * (one - rate * kp.init(weight_decay, cd))
    p = p - rate * m_hat / (kp.unary("sqrt", v_hat) + kp.init(epsilon, cd))
    kp.write(param_out, kp.cast(p, param.dtype))
    kp.write(m_out, kp.cast(m1, param.dtype))
    kp.write(v_out, kp.cast(v1, param.dtype))


def _state(*names):
    return [(n, "in", "T", False) for n in names]


def _outs(*names):
    return [(n, "out", "T", False) for n in names]


_SCALAR = {"lr": (), "beta1_pow": (), "beta2_pow": ()}
_register("sgd_update", _state("param", "grad", "lr") + _outs("param_out"), _sgd_update, {"weight_decay": 0.0},
          {"param": (4, 8), "grad": (4, 8), **_SCALAR},
          doc="param - lr * (grad + weight_decay * param); lr has one element")
_register("momentum_update", _state("param", "grad", "velocity", "lr") + _outs("param_out", "velocity_out"),
          _momentum_update, {"momentum": 0.9, "use_nesterov": False, "weight_decay": 0.0},
          {"param": (4, 8), "grad": (4, 8), "velocity": (4, 8), **_SCALAR},
          doc="Paddle's Momentum: v = momentum v + g (g = grad + weight_decay param); param - lr v, or with "
              "Nesterov param - lr (g + momentum v)")
_register("adam_update", _state("param", "grad", "m", "v", "lr", "beta1_pow", "beta2_pow")
          + _outs("param_out", "m_out", "v_out"), _adam_update,
          {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "weight_decay": 0.0, "decoupled": False},
          {"param": (4, 8), "grad": (4, 8), "m": (4, 8), "v": (4, 8), **_SCALAR},
          doc="Adam (AdamW when decoupled) at step t: beta1_pow = beta1**t, beta2_pow = beta2**t, one element each, "
              "as lr")


def get(name) -> Kernel:
    """The library kernel registered as ``name``."""
    try:
        return KERNELS[name]
    except KeyError:
        raise KernelError(f"no library kernel {name!r}; known: {', '.join(sorted(KERNELS))}") from None
