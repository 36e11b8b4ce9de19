"""Training ONNX ops, composed of hwadapter's elementwise ops and reductions (no kernel of their own):
BatchNormalization's training mode, and the optimizers of ai.onnx.preview.training (Adagrad, Adam, Momentum).

Each follows its operator's pseudo code step by step (onnx's defs and onnx.reference's implementations), in the
optimized tensors' dtype; a branch on the update count T (Adam's bias correction, Momentum's first-step beta) is a
`where` on T, so one converted graph serves every step."""
from __future__ import annotations

import numpy as np

from . import TRAINING_DOMAIN, converter

_FLOAT32 = np.dtype(np.float32)
_INT64 = np.dtype(np.int64)
#: The optimizers' type constraints T1 (R) and T3 (the optimized tensors and their states).
_OPTIMIZER_FLOATS = (_FLOAT32, np.dtype(np.float64))


# --- BatchNormalization, training_mode=1 ---------------------------------------------------------------------------
def batch_norm_training(ctx, node, x, scale, bias, mean, var):
    """(Y, running_mean, running_var): Y normalised with the batch's mean and population (biased) variance over every
    axis but the channel axis (1); running = input * momentum + batch * (1 - momentum), in the running inputs' dtype.
    The statistics of float16 input are computed in float32, as the operator says."""
    shape = ctx.shape(x)
    if len(shape) < 2:
        ctx.fail(node, f"its input has shape {shape}; training mode needs (N, C, ...) to take statistics over")
    c = shape[1]
    for ref, what in ((scale, "scale"), (bias, "B"), (mean, "input_mean"), (var, "input_var")):
        if ctx.shape(ref) != (c,):
            ctx.fail(node, f"its {what} has shape {ctx.shape(ref)}, not ({c},) for its input of shape {shape}")
        if ctx.dtype(ref).kind != "f":
            ctx.fail(node, f"its {what} is {ctx.dtype(ref).name}; BatchNormalization takes floating-point tensors")
    work = _FLOAT32 if ctx.dtype(x) == np.float16 else ctx.dtype(x)
    xw = ctx.cast(x, work)
    axes = (0,) + tuple(range(2, len(shape)))
    batch_mean = ctx.op("mean", xw, axis=axes, keepdim=True)
    centered = ctx.op("sub", xw, batch_mean)
    batch_var = ctx.op("mean", ctx.op("mul", centered, centered), axis=axes, keepdim=True)
    batch_mean, batch_var = (ctx.op("reshape", r, shape=(c,)) for r in (batch_mean, batch_var))
    params = [ctx.cast(p, work) for p in (scale, bias)]
    y = ctx.cast(ctx.op("batch_norm", xw, batch_mean, batch_var, *params, epsilon=node.float("epsilon", 1e-5),
                        channel_axis=1), ctx.dtype(x))
    momentum = node.float("momentum", 0.9)
    return (y, _running(ctx, mean, batch_mean, momentum), _running(ctx, var, batch_var, momentum))


def _running(ctx, running, batch, momentum: float):
    """running * momentum + batch * (1 - momentum), computed in the wider of the two dtypes, as running's dtype."""
    dt = np.result_type(ctx.dtype(running), ctx.dtype(batch))
    kept = ctx.op("mul", ctx.cast(running, dt), _const(ctx, momentum, dt))
    added = ctx.op("mul", ctx.cast(batch, dt), _const(ctx, 1.0 - momentum, dt))
    return ctx.cast(ctx.op("add", kept, added), ctx.dtype(running))


# --- ai.onnx.preview.training optimizers ---------------------------------------------------------------------------
def _const(ctx, value, dtype):
    """A 0-d constant of `dtype` (a Python float rounds to it, as numpy's weak scalars do in onnx's reference)."""
    return ctx.constant(np.array(value, dtype=np.dtype(dtype)))


def _scalar(ctx, node, i: int, name: str, allowed: tuple):
    """Input i (R or T), one element of a dtype in `allowed`, as a 0-d ref."""
    ref = ctx.input(node, i)
    if ctx.dtype(ref) not in allowed:
        ctx.fail(node, f"its input {name} is {ctx.dtype(ref).name}; {node.op_type} takes "
                       f"{' or '.join(d.name for d in allowed)}", fix="the model is invalid ONNX for this op")
    if int(np.prod(ctx.shape(ref))) != 1:
        ctx.fail(node, f"its input {name} has shape {ctx.shape(ref)}; it must be a scalar",
                 fix="the model is invalid ONNX for this op")
    return ctx.op("reshape", ref, shape=()) if ctx.shape(ref) != () else ref


def _optimizer_inputs(ctx, node, names: tuple):
    """(R as the tensors' dtype, T > 0, T as that dtype, the groups): a group per optimized tensor, its inputs in
    the order `names` gives (the operator lists every X, then every G, ...)."""
    per = len(names)
    k = len(node.inputs) - 2
    if k < per or k % per:
        ctx.fail(node, f"it has {len(node.inputs)} inputs; {node.op_type} takes R, T and then {per} lists of "
                       f"equal length ({', '.join(names)}), one entry per optimized tensor",
                 fix="the model is invalid ONNX for this op")
    n = k // per
    if len(node.outputs) > (per - 1) * n:
        ctx.fail(node, f"it has {len(node.outputs)} outputs; {node.op_type} makes at most {(per - 1) * n} here "
                       f"({per - 1} per optimized tensor)", fix="the model is invalid ONNX for this op")
    groups = [[ctx.input(node, 2 + j * n + i) for j in range(per)] for i in range(n)]
    dt = ctx.dtype(groups[0][0])
    if dt not in _OPTIMIZER_FLOATS:
        ctx.fail(node, f"its X is {dt.name}; {node.op_type} optimizes float32 or float64 tensors",
                 fix="the model is invalid ONNX for this op")
    for i, group in enumerate(groups):
        for j, (ref, name) in enumerate(zip(group, names)):
            if ctx.dtype(ref) != dt:
                ctx.fail(node, f"its input {node.inputs[2 + j * n + i]!r} (a {name}) is {ctx.dtype(ref).name} and "
                               f"its first X {dt.name}; {node.op_type}'s tensors are of one dtype",
                         fix="the model is invalid ONNX for this op")
    r = ctx.cast(_scalar(ctx, node, 0, "R", _OPTIMIZER_FLOATS), dt)
    t = _scalar(ctx, node, 1, "T", (_INT64,))
    started = ctx.op("greater", t, _const(ctx, 0, _INT64))
    return r, started, ctx.cast(t, dt), groups


def _regularized(ctx, x, g, norm: float):
    """norm_coefficient * X + G: the gradient with the L2 regularization's."""
    return ctx.op("add", ctx.op("mul", _const(ctx, norm, ctx.dtype(x)), x), g)


def _axpy(ctx, a: float, x, b, y):
    """a * x + b * y: `a` a number, `b` a number or (a 0-d ref) computed at run time."""
    dt = ctx.dtype(x)
    b = _const(ctx, b, dt) if isinstance(b, (int, float)) else b
    return ctx.op("add", ctx.op("mul", _const(ctx, a, dt), x), ctx.op("mul", b, y))


def _split_outputs(per_tensor: list) -> tuple:
    """[(X_new, V_new, ...) per tensor] as the operator lists its outputs: every X_new, then every V_new, ..."""
    return tuple(ref for outputs in zip(*per_tensor) for ref in outputs)


@converter(f"{TRAINING_DOMAIN}:Adagrad")
def adagrad(ctx, node):
    norm = node.float("norm_coefficient", 0.0)
    decay = node.float("decay_factor", 0.0)
    eps = node.float("epsilon", 1e-6)
    r, _, t, groups = _optimizer_inputs(ctx, node, ("X", "G", "H"))
    dt = ctx.dtype(r)
    rate = ctx.op("div", r, ctx.op("add", _const(ctx, 1, dt), ctx.op("mul", t, _const(ctx, decay, dt))))
    out = []
    for x, g, h in groups:
        g_reg = _regularized(ctx, x, g, norm)
        h_new = ctx.op("add", h, ctx.op("mul", g_reg, g_reg))
        adaptive = ctx.op("add", ctx.op("sqrt", h_new), _const(ctx, eps, dt))
        x_new = ctx.op("sub", x, ctx.op("div", ctx.op("mul", rate, g_reg), adaptive))
        out.append((x_new, h_new))
    return _split_outputs(out)


@converter(f"{TRAINING_DOMAIN}:Adam")
def adam(ctx, node):
    alpha, beta = node.float("alpha", 0.9), node.float("beta", 0.999)
    eps = node.float("epsilon", 1e-6)
    norm, norm_post = node.float("norm_coefficient", 0.0), node.float("norm_coefficient_post", 0.0)
    r, started, t, groups = _optimizer_inputs(ctx, node, ("X", "G", "V", "H"))
    dt = ctx.dtype(r)
    # R * sqrt(1 - beta**T) / (1 - alpha**T) once T > 0; the powers take T = 1 before, where `where` drops them,
    # so that no step divides by 1 - alpha**0 = 0
    steps = ctx.op("where", started, t, _const(ctx, 1, dt))
    one = _const(ctx, 1, dt)
    corrected = ctx.op("div", ctx.op("mul", r, ctx.op("sqrt", ctx.op("sub", one, ctx.op("pow", _const(ctx, beta, dt),
                                                                                          steps)))),
                       ctx.op("sub", one, ctx.op("pow", _const(ctx, alpha, dt), steps)))
    rate = ctx.op("where", started, corrected, r)
    out = []
    for x, g, v, h in groups:
        g_reg = _regularized(ctx, x, g, norm)
        v_new = _axpy(ctx, alpha, v, 1.0 - alpha, g_reg)
        h_new = _axpy(ctx, beta, h, 1.0 - beta, ctx.op("mul", g_reg, g_reg))
        h_sqrt = ctx.op("add", ctx.op("sqrt", h_new), _const(ctx, eps, dt))
        x_new = ctx.op("sub", x, ctx.op("mul", rate, ctx.op("div", v_new, h_sqrt)))
        out.append((ctx.op("mul", _const(ctx, 1.0 - norm_post, dt), x_new), v_new, h_new))
    return _split_outputs(out)


@converter(f"{TRAINING_DOMAIN}:Momentum")
def momentum(ctx, node):
    alpha, beta = node.float("alpha"), node.float("beta")
    norm = node.float("norm_coefficient")
    nesterov = node.string("mode", choices=("standard", "nesterov")) == "nesterov"
    r, started, _, groups = _optimizer_inputs(ctx, node, ("X", "G", "V"))
    dt = ctx.dtype(r)
    beta_now = ctx.op("where", started, _const(ctx, beta, dt), _const(ctx, 1, dt))  # 1 at the first step
    out = []
    for x, g, v in groups:
        g_reg = _regularized(ctx, x, g, norm)
        v_new = _axpy(ctx, alpha, v, beta_now, g_reg)
        step = ctx.op("add", g_reg, ctx.op("mul", _const(ctx, alpha, dt), v_new)) if nesterov else v_new
        out.append((ctx.op("sub", x, ctx.op("mul", r, step)), v_new))
    return _split_outputs(out)
