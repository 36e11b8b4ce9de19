"""ONNX activations, as hwadapter ops (float dtypes unless ONNX allows more), attribute defaults from the spec."""
from __future__ import annotations

import numpy as np

from . import converter
from .elementwise import const, floats, kinds

SELU_ALPHA = 1.67326319217681884765625  # the spec's defaults, float32 values written out
SELU_GAMMA = 1.05070102214813232421875


# --- numerically careful pieces -------------------------------------------------------------------------------------
def log1p(ctx, y):
    """log(1 + y) to a few ulp for y >= 0 (Goldberg): log(u) * y / (u - 1) with u = 1 + y, and y where u == 1."""
    dt = ctx.dtype(y)
    one = const(ctx, 1, dt)
    u = ctx.op("add", one, y)
    ratio = ctx.op("div", ctx.op("mul", ctx.op("log", u), y), ctx.op("sub", u, one))
    return ctx.op("where", ctx.op("equal", u, one), y, ratio)


def expm1(ctx, x):
    """e^x - 1 to a few ulp (Kahan): (u - 1) * x / log(u) with u = e^x; x where u == 1, -1 where u - 1 == -1 (u
    is then too small, or subnormal, for log(u) to give x back), inf where u is."""
    dt = ctx.dtype(x)
    one = const(ctx, 1, dt)
    u = ctx.op("exp", x)
    um1 = ctx.op("sub", u, one)
    ratio = ctx.op("div", ctx.op("mul", um1, x), ctx.op("log", u))
    ratio = ctx.op("where", ctx.op("equal", u, const(ctx, np.inf, dt)), u, ratio)
    ratio = ctx.op("where", ctx.op("equal", um1, const(ctx, -1, dt)), const(ctx, -1, dt), ratio)
    return ctx.op("where", ctx.op("equal", u, one), x, ratio)


def softplus(ctx, x):
    """log(1 + e^x) = max(x, 0) + log1p(e^-|x|), as numpy's logaddexp(0, x): no overflow, no cancellation."""
    dt = ctx.dtype(x)
    e = ctx.op("exp", ctx.op("neg", ctx.op("abs", x)))
    return ctx.op("add", ctx.op("maximum", x, const(ctx, 0, dt)), log1p(ctx, e))


def _x(ctx, node):
    x = ctx.input(node, 0)
    floats(ctx, node, x)
    return x, ctx.dtype(x)


# --- converters ---------------------------------------------------------------------------------------------------
@converter("Relu")
def relu(ctx, node):
    x = ctx.input(node, 0)
    kinds(ctx, node, (x,), "fi", "float or signed integer")
    return ctx.op("relu", x)


@converter("LeakyRelu")
def leaky_relu(ctx, node):
    x, dt = _x(ctx, node)
    alpha = const(ctx, node.float("alpha", 0.01), dt)
    return ctx.op("where", ctx.op("greater", x, const(ctx, 0, dt)), x, ctx.op("mul", x, alpha))


@converter("PRelu")
def prelu(ctx, node):
    x, slope = ctx.input(node, 0), ctx.input(node, 1)
    kinds(ctx, node, (x, slope), "fiu", "numeric")
    if ctx.dtype(x) != ctx.dtype(slope):
        ctx.fail(node, f"x is {ctx.dtype(x).name} and slope {ctx.dtype(slope).name}; ONNX takes one dtype")
    try:
        out = np.broadcast_shapes(ctx.shape(x), ctx.shape(slope))
    except ValueError:
        out = None
    if out != tuple(ctx.shape(x)):
        ctx.fail(node, f"slope of shape {ctx.shape(slope)} does not broadcast to x's {ctx.shape(x)} "
                       f"(ONNX's unidirectional broadcasting)", fix="reshape the slope")
    zero = const(ctx, 0, ctx.dtype(x))
    return ctx.op("where", ctx.op("greater", x, zero), x, ctx.op("mul", x, slope))


@converter("Elu")
def elu(ctx, node):
    x, dt = _x(ctx, node)
    neg = ctx.op("mul", const(ctx, node.float("alpha", 1.0), dt), expm1(ctx, x))
    return ctx.op("where", ctx.op("greater", x, const(ctx, 0, dt)), x, neg)


@converter("Selu")
def selu(ctx, node):
    x, dt = _x(ctx, node)
    alpha, gamma = node.float("alpha", SELU_ALPHA), node.float("gamma", SELU_GAMMA)
    neg = ctx.op("mul", const(ctx, alpha, dt), expm1(ctx, x))
    inner = ctx.op("where", ctx.op("greater", x, const(ctx, 0, dt)), x, neg)
    return ctx.op("mul", inner, const(ctx, gamma, dt))


@converter("Celu")
def celu(ctx, node):
    x, dt = _x(ctx, node)
    alpha = const(ctx, node.float("alpha", 1.0), dt)
    zero = const(ctx, 0, dt)
    neg = ctx.op("mul", alpha, expm1(ctx, ctx.op("div", x, alpha)))
    return ctx.op("add", ctx.op("maximum", x, zero), ctx.op("minimum", neg, zero))


def _hard_sigmoid(ctx, x, alpha: float, beta: float):
    dt = ctx.dtype(x)
    lin = ctx.op("add", ctx.op("mul", x, const(ctx, alpha, dt)), const(ctx, beta, dt))
    return ctx.op("clip", lin, min=0.0, max=1.0)  # max(0, min(1, lin)), nan staying nan


@converter("HardSigmoid")
def hard_sigmoid(ctx, node):
    x, _ = _x(ctx, node)
    return _hard_sigmoid(ctx, x, node.float("alpha", 0.2), node.float("beta", 0.5))


@converter("HardSwish")
def hard_swish(ctx, node):
    x, _ = _x(ctx, node)
    return ctx.op("mul", x, _hard_sigmoid(ctx, x, 1 / 6, 0.5))


@converter("Softplus")
def softplus_op(ctx, node):
    x, _ = _x(ctx, node)
    return softplus(ctx, x)


@converter("Softsign")
def softsign(ctx, node):
    x, dt = _x(ctx, node)
    return ctx.op("div", x, ctx.op("add", ctx.op("abs", x), const(ctx, 1, dt)))


@converter("Mish")
def mish(ctx, node):
    x, _ = _x(ctx, node)
    return ctx.op("mul", x, ctx.op("tanh", softplus(ctx, x)))


@converter("Swish")
def swish(ctx, node):
    x, dt = _x(ctx, node)
    alpha = node.float("alpha", 1.0)
    z = x if alpha == 1.0 else ctx.op("mul", x, const(ctx, alpha, dt))
    return ctx.op("mul", x, ctx.op("sigmoid", z))


@converter("Gelu")
def gelu(ctx, node):
    """hwadapter's gelu (exact, or the tanh form); at -inf it gives the limit, -0.0, where ONNX's definition
    (0.5 x (1 + erf(x / sqrt 2)), as onnx's reference and onnxruntime compute it) gives nan: made nan."""
    x, dt = _x(ctx, node)
    mode = node.string("approximate", "none", choices=("none", "tanh"))
    y = ctx.op("gelu", x) if mode == "none" else ctx.op("gelu", x, approximate=True)
    return ctx.op("where", ctx.op("equal", x, const(ctx, -np.inf, dt)), const(ctx, np.nan, dt), y)


@converter("ThresholdedRelu")
def thresholded_relu(ctx, node):
    x, dt = _x(ctx, node)
    alpha = const(ctx, node.float("alpha", 1.0), dt)
    return ctx.op("where", ctx.op("greater", x, alpha), x, const(ctx, 0, dt))


@converter("Shrink")
def shrink(ctx, node):
    x = ctx.input(node, 0)
    kinds(ctx, node, (x,), "fiu", "numeric")
    dt = ctx.dtype(x)
    bias, lambd = node.float("bias", 0.0), node.float("lambd", 0.5)
    if dt.kind != "f" and not (float(bias).is_integer() and float(lambd).is_integer()):
        # the reference compares and adds in float64 and truncates back: not done here
        ctx.fail(node, f"bias {bias} and lambd {lambd} must be whole numbers for integer inputs")
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if not (0 <= lambd <= info.max and abs(bias) <= info.max):
            ctx.fail(node, f"lambd {lambd} or bias {bias} is outside what {dt.name} holds (or lambd is negative)")
    lo = ctx.op("less", x, const(ctx, -lambd, dt)) if dt.kind != "u" else None
    hi = ctx.op("greater", x, const(ctx, lambd, dt))
    b = const(ctx, bias, dt)
    out = ctx.op("where", hi, ctx.op("sub", x, b), const(ctx, 0, dt))
    return out if lo is None else ctx.op("where", lo, ctx.op("add", x, b), out)
