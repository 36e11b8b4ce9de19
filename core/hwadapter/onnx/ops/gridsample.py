"""GridSample: sampling an input at the grid's coordinates (nearest, linear, cubic taps through gather_elements)."""
from __future__ import annotations

import numpy as np

from . import converter
from .elementwise import const

# --- GridSample ------------------------------------------------------------------------------------------------------
_GRID_MODES = {16: {"bilinear": "linear", "nearest": "nearest", "bicubic": "cubic"},
               20: {"linear": "linear", "nearest": "nearest", "cubic": "cubic"}}
_CUBIC_A = -0.75


def _reflect(ctx, v, lo, hi):
    """v reflected by the borders [lo, hi] until inside (onnx's reference / PyTorch's reflect_coordinates)."""
    dt = ctx.dtype(v)
    span = hi - lo
    below = ctx.op("less", v, const(ctx, lo, dt))
    above = ctx.op("greater", v, const(ctx, hi, dt))
    dx = ctx.op("where", below, ctx.op("sub", const(ctx, lo, dt), v), ctx.op("sub", v, const(ctx, hi, dt)))
    n = ctx.op("floor", ctx.op("div", dx, const(ctx, span, dt)))
    r = ctx.op("sub", dx, ctx.op("mul", n, const(ctx, span, dt)))
    half = ctx.op("mul", n, const(ctx, 0.5, dt))
    even = ctx.op("equal", ctx.op("floor", half), half)
    from_lo, from_hi = ctx.op("add", const(ctx, lo, dt), r), ctx.op("sub", const(ctx, hi, dt), r)
    out = ctx.op("where", below, ctx.op("where", even, from_lo, from_hi), ctx.op("where", even, from_hi, from_lo))
    return ctx.op("where", ctx.op("logical_or", below, above), out, v)


def _cubic_coeffs(ctx, t):
    """Keys' cubic convolution weights (A = -0.75) of the 4 taps at offsets -1..2 for a fraction t, in the
    reference's order of operations."""
    dt = ctx.dtype(t)
    a = lambda v: const(ctx, v, dt)  # noqa: E731
    add, sub, mul = (lambda p, q, o=o: ctx.op(o, p, q) for o in ("add", "sub", "mul"))
    one, two = a(1), a(2)
    t1, u, u2 = add(t, one), sub(one, t), sub(two, t)

    def outer(w):  # ((A w - 5A) w + 8A) w - 4A
        return sub(mul(add(mul(sub(mul(a(_CUBIC_A), w), a(5 * _CUBIC_A)), w), a(8 * _CUBIC_A)), w), a(4 * _CUBIC_A))

    def inner(w):  # ((A + 2) w - (A + 3)) w w + 1
        return add(mul(mul(sub(mul(a(_CUBIC_A + 2), w), a(_CUBIC_A + 3)), w), w), one)
    return [outer(t1), inner(t), inner(u), outer(u2)]


def _grid_taps(ctx, node, g, size, mode, padding, align):
    """For one spatial axis: [(index int64, weight or None, valid bool or None), ...] of the taps sampled."""
    dt = ctx.dtype(g)
    one = const(ctx, 1, dt)
    if align:
        x = ctx.op("mul", ctx.op("div", ctx.op("add", g, one), const(ctx, 2, dt)), const(ctx, size - 1, dt))
        lo, hi = 0.0, float(size - 1)
    else:
        x = ctx.op("div", ctx.op("sub", ctx.op("mul", ctx.op("add", g, one), const(ctx, size, dt)), one),
                   const(ctx, 2, dt))
        lo, hi = -0.5, size - 0.5
    if padding == "reflection" and hi == lo:
        ctx.fail(node, "reflection padding of an axis of size 1 with align_corners=1 is undefined (no span)")
    if mode == "nearest":
        x = ctx.op("round", x)  # half to even, as the reference and PyTorch
    outside = ctx.op("logical_or", ctx.op("less", x, const(ctx, lo, dt)), ctx.op("greater", x, const(ctx, hi, dt)))
    if padding == "border":
        x = ctx.op("where", outside, ctx.op("clip", x, min=0.0, max=float(size - 1)), x)
    elif padding == "reflection":
        x = _reflect(ctx, x, lo, hi)

    def tap(i, w):
        """Integer-valued float position i, padded per the mode, as an int64 index (and its validity)."""
        valid = None
        if padding == "zeros":
            valid = ctx.op("logical_and", ctx.op("greater_equal", i, const(ctx, 0, dt)),
                           ctx.op("less", i, const(ctx, size, dt)))
        elif padding == "reflection":
            i = _reflect(ctx, i, lo, hi)
        i = ctx.op("clip", i, min=0.0, max=float(size - 1))  # border's clamp; in range (or masked) otherwise
        return ctx.cast(i, np.int64), w, valid  # the cast truncates, as the reference's int()

    if mode == "nearest":
        # the reference truncates the (rounded, maybe reflected) coordinate to an index
        return [tap(ctx.op("where", ctx.op("less", x, const(ctx, 0, dt)), ctx.op("ceil", x), ctx.op("floor", x)),
                    None)]
    x0 = ctx.op("floor", x)
    t = ctx.op("sub", x, x0)
    if mode == "linear":
        return [tap(x0, ctx.op("sub", one, t)), tap(ctx.op("add", x0, one), t)]
    coeffs = _cubic_coeffs(ctx, t)
    return [tap(ctx.op("add", x0, const(ctx, k, dt)), c) for k, c in zip((-1, 0, 1, 2), coeffs)]


@converter("GridSample")
def grid_sample(ctx, node):
    """Samples of X at the grid's normalized positions: per-axis taps gathered from X flattened
    (gather_elements), combined axis by axis as onnx's reference interpolates (the last spatial axis first)."""
    x, grid = ctx.input(node, 0), ctx.input(node, 1)
    dt = ctx.dtype(x)
    if dt != np.float32 or ctx.dtype(grid) != dt:
        # the reference computes coordinates in float32 whatever X's dtype: only float32 is mirrored exactly
        ctx.fail(node, f"X is {dt.name} and the grid {ctx.dtype(grid).name}; float32 GridSample only is converted")
    xs, gs = ctx.shape(x), ctx.shape(grid)
    r = len(xs) - 2
    if r < 1 or len(gs) != r + 2 or gs[0] != xs[0] or gs[-1] != r:
        ctx.fail(node, f"X {xs} and grid {gs} do not fit (N, C, D1..Dr) and (N, O1..Or, r)")
    if ctx.opset < 20 and r != 2:
        ctx.fail(node, f"GridSample before opset 20 takes 4-D inputs, got {xs}")
    modes = _GRID_MODES[16 if ctx.opset < 20 else 20]
    mode_name = node.string("mode", "bilinear" if ctx.opset < 20 else "linear")
    if mode_name not in modes:
        ctx.fail(node, f"its mode {mode_name!r} is not one of {sorted(modes)} (opset {ctx.opset})")
    mode = modes[mode_name]
    padding = node.string("padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        ctx.fail(node, f"its padding_mode {padding!r} is not zeros, border or reflection")
    if mode == "cubic" and padding == "border":
        # onnx's reference clamps the coordinate, then each tap; onnxruntime (as PyTorch) clamps each tap only
        ctx.fail(node, "cubic sampling with border padding is not converted: onnx's reference and onnxruntime "
                       "clamp differently (the coordinate too, or each tap only)")
    align = node.int("align_corners", 0)
    if align not in (0, 1):
        ctx.fail(node, f"its align_corners {align} is not 0 or 1")
    n, c, sizes, outs = xs[0], xs[1], xs[2:], gs[1:-1]
    q = int(np.prod(outs))
    if n * c * q == 0 or int(np.prod(sizes)) == 0:
        ctx.fail(node, "empty inputs or outputs are not converted")
    taps = []
    for a in range(r):  # grid's last axis lists coordinates in reverse: (x, y, ...) for (..., H, W)
        comp = r - 1 - a
        g = ctx.op("reshape", ctx.op("slice", grid, axes=(r + 1,), starts=(comp,), ends=(comp + 1,), steps=(1,)),
                   shape=(n, 1, q))
        taps.append(_grid_taps(ctx, node, g, sizes[a], mode, padding, align))
    strides = [int(np.prod(sizes[a + 1:])) for a in range(r)]
    flat = ctx.op("reshape", x, shape=(n, c, int(np.prod(sizes))))
    zero = const(ctx, 0, dt)

    def sample(a, index, valid):
        """The interpolated value over axes a.. given the flat index (and validity) of the axes before a."""
        if a == r:
            v = ctx.op("gather_elements", flat, ctx.op("expand", index, shape=(n, c, q)), axis=2)
            return v if valid is None else ctx.op("where", valid, v, zero)
        total = None
        for idx, w, ok in taps[a]:
            part = idx if strides[a] == 1 else ctx.op("mul", idx, ctx.constant(np.array(strides[a], np.int64)))
            sub = sample(a + 1, part if index is None else ctx.op("add", index, part),
                         ok if valid is None or ok is None else ctx.op("logical_and", valid, ok))
            term = sub if w is None else ctx.op("mul", w, sub)
            total = term if total is None else ctx.op("add", total, term)
        return total
    # the reference interpolates the innermost axis first; the nesting here sums in that order per outer tap
    return ctx.op("reshape", sample(0, None, None), shape=(n, c) + tuple(outs))
