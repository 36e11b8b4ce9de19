"""vjp rules of the elementwise ops and reductions, in hwadapter ops (broadcast gradients are reduced by the engine)."""
from __future__ import annotations

import math

from ..dispatch.dispatcher import dispatch
from ..ops import api as O
from .registry import reshape, rule

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _mask(cond, like):
    """A boolean condition as 0/1 in like's dtype."""
    return O.cast(cond, like.dtype)


@rule("add")
def _add(node, g):
    return g, g


@rule("sub")
def _sub(node, g):
    return g, O.neg(g)


@rule("mul")
def _mul(node, g):
    x, y = node.inputs
    return (O.multiply(g, y) if node.needs[0] else None), (O.multiply(g, x) if node.needs[1] else None)


@rule("div")
def _div(node, g):
    x, y = node.inputs
    gx = O.divide(g, y)
    return gx, (O.neg(O.multiply(gx, node.output())) if node.needs[1] else None)


@rule("pow")
def _pow(node, g):
    x, y = node.inputs
    gx = O.multiply(g, O.multiply(y, O.pow(x, O.subtract(y, 1)))) if node.needs[0] else None
    gy = None
    if node.needs[1]:  # d/dy x**y = x**y * log x; 0 where x == 0 (the limit for y > 0, as torch)
        safe = O.where(O.equal(x, 0), O.ones_like(x), x)
        gy = O.multiply(g, O.where(O.equal(x, 0), O.zeros_like(x), O.multiply(node.output(), O.log(safe))))
    return gx, gy


def _pick(node, g, first):
    """maximum/minimum: the gradient goes to the chosen input; ties share it equally (as torch)."""
    x, y = node.inputs
    win = O.greater_than(x, y) if first else O.less_than(x, y)
    tie = O.multiply(_mask(O.equal(x, y), g), 0.5)
    wx = O.add(_mask(win, g), tie)
    wy = O.add(_mask(O.logical_not(O.logical_or(win, O.equal(x, y))), g), tie)
    return O.multiply(g, wx), O.multiply(g, wy)


@rule("maximum")
def _maximum(node, g):
    return _pick(node, g, True)


@rule("minimum")
def _minimum(node, g):
    return _pick(node, g, False)


@rule("mod")
def _mod(node, g):
    x, y = node.inputs
    return g, (O.neg(O.multiply(g, O.floor(O.divide(x, y)))) if node.needs[1] else None)


def _unary(op, fn):
    rule(op)(lambda node, g: (fn(node, node.inputs[0], g),))


_unary("neg", lambda n, x, g: O.neg(g))
_unary("abs", lambda n, x, g: O.multiply(g, O.sign(x)))
_unary("exp", lambda n, x, g: O.multiply(g, n.output()))
_unary("log", lambda n, x, g: O.divide(g, x))
_unary("sqrt", lambda n, x, g: O.divide(O.multiply(g, 0.5), n.output()))
_unary("rsqrt", lambda n, x, g: O.multiply(O.multiply(g, -0.5), O.pow(n.output(), 3)))
_unary("reciprocal", lambda n, x, g: O.neg(O.multiply(g, O.multiply(n.output(), n.output()))))
_unary("sigmoid", lambda n, x, g: O.multiply(g, O.multiply(n.output(), O.subtract(1, n.output()))))
_unary("tanh", lambda n, x, g: O.multiply(g, O.subtract(1, O.multiply(n.output(), n.output()))))
_unary("relu", lambda n, x, g: O.multiply(g, _mask(O.greater_than(x, 0), g)))
_unary("erf", lambda n, x, g: O.multiply(g, O.multiply(O.exp(O.neg(O.multiply(x, x))), 2 / math.sqrt(math.pi))))
_unary("sin", lambda n, x, g: O.multiply(g, O.cos(x)))
_unary("cos", lambda n, x, g: O.neg(O.multiply(g, O.sin(x))))
_unary("tan", lambda n, x, g: O.multiply(g, O.add(1, O.multiply(n.output(), n.output()))))
_unary("asin", lambda n, x, g: O.multiply(g, O.rsqrt(O.subtract(1, O.multiply(x, x)))))
_unary("acos", lambda n, x, g: O.neg(O.multiply(g, O.rsqrt(O.subtract(1, O.multiply(x, x))))))
_unary("atan", lambda n, x, g: O.divide(g, O.add(1, O.multiply(x, x))))
_unary("sinh", lambda n, x, g: O.multiply(g, O.cosh(x)))
_unary("cosh", lambda n, x, g: O.multiply(g, O.sinh(x)))
_unary("asinh", lambda n, x, g: O.multiply(g, O.rsqrt(O.add(O.multiply(x, x), 1))))
_unary("acosh", lambda n, x, g: O.multiply(g, O.rsqrt(O.subtract(O.multiply(x, x), 1))))
_unary("atanh", lambda n, x, g: O.divide(g, O.subtract(1, O.multiply(x, x))))
for _op in ("floor", "ceil", "round", "sign"):  # piecewise constant: zero almost everywhere (as torch)
    _unary(_op, lambda n, x, g: O.zeros_like(g))


@rule("gelu")
def _gelu(node, g):
    x = node.inputs[0]
    if node.attrs.get("approximate"):  # d/dx x/2 (1 + tanh u), u = c (x + 0.044715 x^3)
        x2 = O.multiply(x, x)
        t = O.tanh(O.multiply(O.add(x, O.multiply(O.multiply(x2, x), 0.044715)), _SQRT_2_OVER_PI))
        du = O.multiply(O.add(O.multiply(x2, 3 * 0.044715), 1), _SQRT_2_OVER_PI)
        dt = O.multiply(O.multiply(x, 0.5), O.subtract(1, O.multiply(t, t)))
        d = O.add(O.multiply(O.add(t, 1), 0.5), O.multiply(dt, du))
        return (O.multiply(g, d),)
    cdf = O.multiply(O.add(O.erf(O.multiply(x, 1 / math.sqrt(2.0))), 1), 0.5)
    pdf = O.multiply(O.exp(O.multiply(O.multiply(x, x), -0.5)), _INV_SQRT_2PI)
    return (O.multiply(g, O.add(cdf, O.multiply(x, pdf))),)


@rule("cast")
def _cast(node, g):
    return (g,)  # the engine casts it back to the input's dtype


@rule("clip")
def _clip(node, g):
    x = node.inputs[0]
    lo, hi = node.attrs.get("min"), node.attrs.get("max")
    keep = O.ones_like(x)
    if lo is not None:
        keep = O.multiply(keep, _mask(O.greater_equal(x, lo), x))
    if hi is not None:
        keep = O.multiply(keep, _mask(O.less_equal(x, hi), x))
    return (O.multiply(g, keep),)


@rule("where")
def _where(node, g):
    cond = node.inputs[0]
    zero = O.zeros_like(g)
    return None, O.where(cond, g, zero), O.where(cond, zero, g)


# --- reductions ---------------------------------------------------------------------------------------------------
def _axes(node, x):
    axis = node.attrs.get("axis")
    return tuple(range(x.ndim)) if axis is None else ((axis,) if isinstance(axis, int) else tuple(axis))


def _kept(node, x, t):
    """A reduction's result (or gradient) with the reduced axes kept as 1, ready to broadcast against x."""
    if node.attrs.get("keepdim"):
        return t
    axes = {a % max(x.ndim, 1) for a in _axes(node, x)}
    return dispatch("reshape", (t,), {"shape": tuple(1 if i in axes else s for i, s in enumerate(x.shape))})


def _spread(node, g):
    x = node.inputs[0]
    return O.broadcast_to(_kept(node, x, g), x.shape)


@rule("sum")
def _sum(node, g):
    return (_spread(node, g),)


@rule("mean")
def _mean(node, g):
    x = node.inputs[0]
    count = math.prod(x.shape[a] for a in {a % max(x.ndim, 1) for a in _axes(node, x)}) if x.ndim else 1
    return (O.divide(_spread(node, g), max(count, 1)),)


def _extreme(node, g):
    """max/min: the gradient is shared equally by the elements equal to the result (as torch's amax)."""
    x = node.inputs[0]
    hit = _mask(O.equal(x, _kept(node, x, node.output())), g)
    count = dispatch("sum", (hit,), {"axis": _axes(node, x), "keepdim": True})
    return (O.divide(O.multiply(_spread(node, g), hit), count),)


rule("max", "min")(_extreme)


@rule("prod")
def _prod(node, g):
    """The product of the other elements of each reduced group, by exclusive running products both ways (exact
    with zeros, where out / x is not)."""
    x = node.inputs[0]
    axes = sorted({a % max(x.ndim, 1) for a in _axes(node, x)}) if x.ndim else []
    kept = [a for a in range(x.ndim) if a not in axes]
    perm = kept + axes
    moved = O.transpose(x, perm) if perm != list(range(x.ndim)) else x
    lead = [x.shape[a] for a in kept]
    flat = reshape(moved, lead + [math.prod(x.shape[a] for a in axes)])
    before = O.cumprod(flat, -1, exclusive=True)
    after = O.cumprod(flat, -1, exclusive=True, reverse=True)
    others = reshape(O.multiply(before, after), [x.shape[a] for a in perm])
    inverse = [perm.index(i) for i in range(x.ndim)]
    others = O.transpose(others, inverse) if perm != list(range(x.ndim)) else others
    return (O.multiply(_spread(node, g), others),)


@rule("cumsum")
def _cumsum(node, g):
    a = node.attrs
    return (dispatch("cumsum", (g,), {"axis": a.get("axis", 0), "exclusive": a.get("exclusive", False),
                                      "reverse": not a.get("reverse", False)}),)


def _shifted(g, axis, reverse):
    """g moved one place along axis towards the scan's start, a zero entering at its end: the gradient of an
    exclusive scan's result taken as its inclusive scan's (y_excl[i] = y_incl[i - 1], or [i + 1] reversed)."""
    n = g.shape[axis]
    start, end = (1, n) if not reverse else (0, n - 1)
    kept = dispatch("slice", (g,), {"axes": (axis,), "starts": (start,), "ends": (end,), "steps": (1,)})
    pads = tuple((0, 1) if a == axis and not reverse else (1, 0) if a == axis else (0, 0) for a in range(g.ndim))
    return dispatch("pad", (kept,), {"pads": pads, "mode": "constant", "value": 0.0})


@rule("cumprod")
def _cumprod(node, g):
    """d/dx_j of sum_i g_i prod_{k<=i} x_k: sum_{i>=j} g_i y_i / x_j where x_j != 0; at the first zero of a scan,
    the same sum with that zero taken as 1 (exact, no division by it); 0 at the zeros after it."""
    x = node.inputs[0]
    a = node.attrs
    axis, reverse = a.get("axis", 0), a.get("reverse", False)
    if x.ndim == 0:
        return (O.zeros_like(g) if a.get("exclusive") else g,)
    if x.size == 0:
        return (g,)
    if a.get("exclusive"):
        g = _shifted(g, axis, reverse)

    def scan(t):
        return dispatch("cumprod", (t,), {"axis": axis, "exclusive": False, "reverse": reverse})

    def gather_back(t):  # sum over the outputs each x_j reaches: a scan the other way
        return dispatch("cumsum", (t,), {"axis": axis, "exclusive": False, "reverse": not reverse})
    zero = O.equal(x, 0)
    ones = O.ones_like(x)
    earlier = dispatch("cumsum", (_mask(zero, x),), {"axis": axis, "exclusive": True, "reverse": reverse})
    first = O.logical_and(zero, O.equal(earlier, 0))
    nonzero = O.divide(gather_back(O.multiply(g, scan(x))), O.where(zero, ones, x))
    at_first = gather_back(O.multiply(g, scan(O.where(first, ones, x))))
    return (O.where(first, at_first, O.where(zero, O.zeros_like(x), nonzero)),)
