"""Recurrent ONNX ops (RNN, GRU, LSTM), unrolled over the static sequence length into hwadapter ops.

Activation alpha/beta values are consumed in order by the activations that take them, with onnxruntime's defaults
(LeakyRelu 0.01, HardSigmoid 0.2/0.5, Elu 1.0); an activation without a default must be given its values. `clip`
bounds the input of every activation (RNN, GRU; LSTM's clip is refused: see lstm)."""
from __future__ import annotations

import numpy as np

from . import converter
from .activation import expm1, softplus
from .elementwise import const

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
#: activation (lower case) -> (takes alpha, takes beta)
_USES = {"affine": (True, True), "relu": (False, False), "leakyrelu": (True, False), "tanh": (False, False),
         "scaledtanh": (True, True), "sigmoid": (False, False), "hardsigmoid": (True, True), "elu": (True, False),
         "softsign": (False, False), "softplus": (False, False), "thresholdedrelu": (True, False)}
_DEFAULTS = {"leakyrelu": (0.01, None), "hardsigmoid": (0.2, 0.5), "elu": (1.0, None)}


# --- activations ---------------------------------------------------------------------------------------------------
def _apply(ctx, name, alpha, beta, x):
    """Activation `name` (lower case) of x."""
    dt = ctx.dtype(x)
    if name in ("relu", "tanh", "sigmoid"):
        return ctx.op(name, x)
    if name == "affine":
        return ctx.op("add", ctx.op("mul", x, const(ctx, alpha, dt)), const(ctx, beta, dt))
    if name == "leakyrelu":
        neg = ctx.op("mul", x, const(ctx, alpha, dt))
        return ctx.op("where", ctx.op("greater_equal", x, const(ctx, 0, dt)), x, neg)
    if name == "scaledtanh":
        return ctx.op("mul", const(ctx, alpha, dt), ctx.op("tanh", ctx.op("mul", x, const(ctx, beta, dt))))
    if name == "hardsigmoid":
        lin = ctx.op("add", ctx.op("mul", x, const(ctx, alpha, dt)), const(ctx, beta, dt))
        return ctx.op("clip", lin, min=0.0, max=1.0)
    if name == "elu":
        neg = ctx.op("mul", const(ctx, alpha, dt), expm1(ctx, x))
        return ctx.op("where", ctx.op("greater_equal", x, const(ctx, 0, dt)), x, neg)
    if name == "softsign":
        return ctx.op("div", x, ctx.op("add", ctx.op("abs", x), const(ctx, 1, dt)))
    if name == "softplus":
        return softplus(ctx, x)
    raise AssertionError(name)


def _activations(ctx, node, defaults, n_dirs):
    """Per direction, the list of activation functions fn(x) (clip applied first when the node has one)."""
    names = node.strings("activations", None)
    names = list(defaults) * n_dirs if names is None else names
    if len(names) != len(defaults) * n_dirs:
        ctx.fail(node, f"it lists {len(names)} activations; {node.op_type} with {n_dirs} direction(s) takes "
                       f"{len(defaults) * n_dirs}")
    alphas, betas = node.floats("activation_alpha", []), node.floats("activation_beta", [])
    clip = node.float("clip", None)
    if clip is not None and not clip > 0:
        ctx.fail(node, f"its clip {clip} is not positive")
    fns = []
    for raw in names:
        name = raw.lower()
        if name not in _USES:
            ctx.fail(node, f"its activation {raw!r} is not one ONNX defines for recurrent layers")
        if name == "thresholdedrelu":
            # the RNN spec writes x >= alpha, the ThresholdedRelu op x > alpha: which one holds is not settled
            ctx.fail(node, "its ThresholdedRelu activation is not converted (x >= alpha or x > alpha is unsettled)")
        takes_a, takes_b = _USES[name]
        default = _DEFAULTS.get(name, (None, None))
        alpha = beta = None
        if takes_a:
            alpha = alphas.pop(0) if alphas else default[0]
        if takes_b:
            beta = betas.pop(0) if betas else default[1]
        if (takes_a and alpha is None) or (takes_b and beta is None):
            ctx.fail(node, f"its activation {raw!r} needs activation_alpha/activation_beta values, which it lacks")
        fns.append(_bound(ctx, name, alpha, beta, clip))
    if alphas or betas:
        ctx.fail(node, f"it has {len(alphas)} activation_alpha and {len(betas)} activation_beta values that no "
                       f"activation takes")
    k = len(defaults)
    return [fns[d * k:(d + 1) * k] for d in range(n_dirs)]


def _bound(ctx, name, alpha, beta, clip):
    def fn(x):
        if clip is not None:
            x = ctx.op("clip", x, min=-float(clip), max=float(clip))
        return _apply(ctx, name, alpha, beta, x)
    return fn


# --- shared structure ----------------------------------------------------------------------------------------------
def _sl(ctx, x, axis, start, end):
    return ctx.op("slice", x, axes=(axis,), starts=(start,), ends=(end,), steps=(1,))


def _dir(ctx, x, d):
    """x[d] of a (num_directions, ...) tensor."""
    shape = ctx.shape(x)
    return ctx.op("reshape", _sl(ctx, x, 0, d, d + 1), shape=tuple(shape[1:]))


def _setup(ctx, node, n_gates):
    """Checked inputs, seq-major: x (seq, batch, in), w, r, b (or None), h0 (or None), the sizes and directions."""
    x, w, r, b = (ctx.input(node, i) for i in range(4))
    dt = ctx.dtype(x)
    if dt not in _FLOATS:
        ctx.fail(node, f"its input is {dt.name}; {node.op_type} takes float16, float32 or float64")
    for ref, what in ((w, "W"), (r, "R"), (b, "B")):
        if ref is not None and ctx.dtype(ref) != dt:
            ctx.fail(node, f"its {what} is {ctx.dtype(ref).name} and X {dt.name}; ONNX takes one type")
    direction = node.string("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        ctx.fail(node, f"its direction {direction!r} is not forward, reverse or bidirectional")
    nd = 2 if direction == "bidirectional" else 1
    layout = node.int("layout", 0)
    if layout not in (0, 1):
        ctx.fail(node, f"its layout {layout} is not 0 or 1")
    if len(ctx.shape(x)) != 3:
        ctx.fail(node, f"its X has shape {ctx.shape(x)}, not 3-D")
    if layout:
        x = ctx.op("transpose", x, perm=(1, 0, 2))
    seq, batch, isz = ctx.shape(x)
    if seq == 0 or batch == 0:
        ctx.fail(node, "its sequence or batch is empty")
    rs = ctx.shape(r)
    hid = rs[-1] if len(rs) == 3 else -1
    hidden_size = node.int("hidden_size", None)
    if hidden_size is not None and hidden_size != hid:
        ctx.fail(node, f"its hidden_size {hidden_size} differs from R's shape {rs}")
    gh = n_gates * hid
    if tuple(ctx.shape(w)) != (nd, gh, isz) or tuple(rs) != (nd, gh, hid):
        ctx.fail(node, f"its W {ctx.shape(w)} or R {rs} is not ({nd}, {gh}, {isz}) / ({nd}, {gh}, {hid})")
    if b is not None and tuple(ctx.shape(b)) != (nd, 2 * gh):
        ctx.fail(node, f"its B {ctx.shape(b)} is not ({nd}, {2 * gh})")
    if ctx.input(node, 4) is not None:
        lens = ctx.require_const(node, 4, "sequence_lens")
        if tuple(lens.shape) != (batch,) or np.any(lens != seq):
            ctx.fail(node, f"its sequence_lens {lens.tolist()} are not all the full length {seq}: shorter "
                           f"sequences are not converted", fix="pad the sequences and drop sequence_lens")
    states = []
    for i in ((5, 6) if node.op_type == "LSTM" else (5,)):
        s = ctx.input(node, i)
        if s is not None:
            if ctx.dtype(s) != dt:
                ctx.fail(node, f"its initial state (input {i}) is {ctx.dtype(s).name}, not {dt.name}")
            if layout:
                s = ctx.op("transpose", s, perm=(1, 0, 2))
            if tuple(ctx.shape(s)) != (nd, batch, hid):
                ctx.fail(node, f"its initial state (input {i}) has shape {ctx.shape(s)}, not {(nd, batch, hid)}")
        states.append(s)
    return x, w, r, b, states, (seq, batch, hid, nd, direction, layout, dt)


def _direction_inputs(ctx, x, w, r, b, d, gh, seq, batch):
    """For direction d: x W^T per step (seq refs of (batch, gh)), R (gh, hid), and the two biases (or None)."""
    wd, rd = _dir(ctx, w, d), _dir(ctx, r, d)
    xw = ctx.op("matmul", x, wd, transpose_y=True)  # (seq, batch, gh): every step's input product at once
    steps = ctx.op("split", xw, n_outputs=seq, sections=(1,) * seq, axis=0) if seq > 1 else (xw,)
    steps = [ctx.op("reshape", s, shape=(batch, gh)) for s in steps]
    if b is None:
        return steps, rd, None, None
    bd = _dir(ctx, b, d)
    return steps, rd, _sl(ctx, bd, 0, 0, gh), _sl(ctx, bd, 0, gh, 2 * gh)


def _zeros(ctx, batch, hid, dt):
    return ctx.constant(np.zeros((batch, hid), dt))


def _outputs(ctx, per_dir, finals, meta):
    """Y (seq, nd, batch, hid) from each direction's per-time states (in time order), and Y_h-like finals."""
    seq, batch, hid, nd, _, layout, _ = meta
    cols = []
    for states in per_dir:
        parts = [ctx.op("reshape", s, shape=(1, 1, batch, hid)) for s in states]
        cols.append(parts[0] if seq == 1 else ctx.op("concat", *parts, axis=0))
    y = cols[0] if nd == 1 else ctx.op("concat", *cols, axis=1)
    outs = []
    for fin in finals:
        parts = [ctx.op("reshape", s, shape=(1, batch, hid)) for s in fin]
        outs.append(parts[0] if nd == 1 else ctx.op("concat", *parts, axis=0))
    if layout:
        y = ctx.op("transpose", y, perm=(2, 0, 1, 3))
        outs = [ctx.op("transpose", o, perm=(1, 0, 2)) for o in outs]
    return (y, *outs)


def _order(direction, d, seq):
    reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
    return list(range(seq - 1, -1, -1)) if reverse else list(range(seq))


def _run(ctx, node, n_gates, defaults, step):
    """Unroll `step(ctx, node, acts, xw_t, states, rd, wb, rb, d, hid, once) -> new states` over time for every
    direction; `once(key, fn)` is fn() computed once per direction (weight slices, summed biases)."""
    x, w, r, b, init, meta = _setup(ctx, node, n_gates)
    seq, batch, hid, nd, direction, _, dt = meta
    acts = _activations(ctx, node, defaults, nd)
    per_dir, finals = [], [[] for _ in init]
    for d in range(nd):
        xw, rd, wb, rb = _direction_inputs(ctx, x, w, r, b, d, n_gates * hid, seq, batch)
        states = [_dir(ctx, s, d) if s is not None else _zeros(ctx, batch, hid, dt) for s in init]
        ys, memo = [None] * seq, {}

        def once(key, fn, memo=memo):
            if key not in memo:
                memo[key] = fn()
            return memo[key]
        for t in _order(direction, d, seq):
            states = step(ctx, node, acts[d], xw[t], states, rd, wb, rb, d, hid, once)
            ys[t] = states[0]
        per_dir.append(ys)
        for k, s in enumerate(states):
            finals[k].append(s)
    return _outputs(ctx, per_dir, finals, meta)


def _gates(ctx, v, n, hid):
    """The n gate blocks of the last axis of v."""
    return [_sl(ctx, v, len(ctx.shape(v)) - 1, k * hid, (k + 1) * hid) for k in range(n)]


def _add_bias(ctx, v, wb, rb, once):
    """v + (Wb + Rb), the biases summed first as onnx's reference does."""
    return v if wb is None else ctx.op("add", v, once("bias", lambda: ctx.op("add", wb, rb)))


# --- the three ops -------------------------------------------------------------------------------------------------
def _rnn_step(ctx, node, acts, xw, states, rd, wb, rb, d, hid, once):
    (h,) = states
    pre = _add_bias(ctx, ctx.op("add", xw, ctx.op("matmul", h, rd, transpose_y=True)), wb, rb, once)
    return [acts[0](pre)]


@converter("RNN", values=(4,))
def rnn(ctx, node):
    """Ht = f(Xt W^T + Ht-1 R^T + Wb + Rb)."""
    return _run(ctx, node, 1, ("Tanh",), _rnn_step)


def _gru_step(ctx, node, acts, xw, states, rd, wb, rb, d, hid, once):
    (h,) = states
    f, g = acts
    xz, xr, xh = _gates(ctx, xw, 3, hid)
    r_zr, r_h = once("r", lambda: (_sl(ctx, rd, 0, 0, 2 * hid), _sl(ctx, rd, 0, 2 * hid, 3 * hid)))
    zr = ctx.op("add", ctx.op("concat", xz, xr, axis=1), ctx.op("matmul", h, r_zr, transpose_y=True))
    wbs = once("wb", lambda: _gates(ctx, wb, 3, hid) if wb is not None else [None] * 3)
    rbs = once("rb", lambda: _gates(ctx, rb, 3, hid) if rb is not None else [None] * 3)
    if wb is not None:
        zr = ctx.op("add", zr, once("bzr", lambda: ctx.op("add", ctx.op("concat", *wbs[:2], axis=0),
                                                           ctx.op("concat", *rbs[:2], axis=0))))
    z, r = (f(v) for v in _gates(ctx, zr, 2, hid))
    if node.int("linear_before_reset", 0):
        hr = ctx.op("matmul", h, r_h, transpose_y=True)
        if rbs[2] is not None:
            hr = ctx.op("add", hr, rbs[2])
        pre = ctx.op("add", xh, ctx.op("mul", r, hr))
        if wbs[2] is not None:
            pre = ctx.op("add", pre, wbs[2])
    else:
        pre = ctx.op("add", xh, ctx.op("matmul", ctx.op("mul", r, h), r_h, transpose_y=True))
        if wbs[2] is not None:
            pre = ctx.op("add", ctx.op("add", pre, wbs[2]), rbs[2])
    hh = g(pre)
    one = const(ctx, 1, ctx.dtype(h))
    return [ctx.op("add", ctx.op("mul", ctx.op("sub", one, z), hh), ctx.op("mul", z, h))]


@converter("GRU", values=(4,))
def gru(ctx, node):
    """z, r = f(...); h~ = g(Xt Wh^T + (r . Ht-1) Rh^T + Rbh + Wbh) (or r . (Ht-1 Rh^T + Rbh) with
    linear_before_reset); Ht = (1 - z) . h~ + z . Ht-1."""
    lbr = node.int("linear_before_reset", 0)
    if lbr not in (0, 1):
        ctx.fail(node, f"its linear_before_reset {lbr} is not 0 or 1")
    return _run(ctx, node, 3, ("Sigmoid", "Tanh"), _gru_step)


def _lstm_step(ctx, node, acts, xw, states, rd, wb, rb, d, hid, once):
    h, c = states
    f, g, hact = acts
    pre = _add_bias(ctx, ctx.op("add", xw, ctx.op("matmul", h, rd, transpose_y=True)), wb, rb, once)
    gi, go, gf, gc = _gates(ctx, pre, 4, hid)
    peep = once("p", lambda: _peepholes(ctx, node, d, hid))
    if peep is not None:
        gi = ctx.op("add", gi, ctx.op("mul", peep[0], c))
    i = f(gi)
    if node.int("input_forget", 0):
        fg = ctx.op("sub", const(ctx, 1, ctx.dtype(h)), i)  # coupled: onnxruntime's 1 - i (peephole unused)
    else:
        if peep is not None:
            gf = ctx.op("add", gf, ctx.op("mul", peep[2], c))
        fg = f(gf)
    c_new = ctx.op("add", ctx.op("mul", fg, c), ctx.op("mul", i, g(gc)))
    if peep is not None:
        go = ctx.op("add", go, ctx.op("mul", peep[1], c_new))
    o = f(go)
    return [ctx.op("mul", o, hact(c_new)), c_new]


def _peepholes(ctx, node, d, hid):
    """(P_i, P_o, P_f) of direction d, or None without P."""
    p = ctx.input(node, 7)
    if p is None:
        return None
    return _gates(ctx, _dir(ctx, p, d), 3, hid)


@converter("LSTM", values=(4,))
def lstm(ctx, node):
    """i, f, o = f(... + P . C), c~ = g(...), Ct = f . Ct-1 + i . c~, Ht = o . h(Ct); gate order i, o, f, c."""
    if node.has("clip"):
        # the spec clips "the input of activations", h(Ct)'s too; onnxruntime clips the gates but not Ct before h
        ctx.fail(node, "its clip is not converted for LSTM: whether h's input (the cell state) is clipped differs "
                       "between the spec's wording and onnxruntime", fix="remove clip, or export the LSTM unrolled")
    node.int("input_forget", 0, choices=(0, 1))
    p = ctx.input(node, 7)
    if p is not None:
        x, nd = ctx.input(node, 0), 2 if node.string("direction", "forward") == "bidirectional" else 1
        hid = ctx.shape(ctx.input(node, 2))[-1]
        if ctx.dtype(p) != ctx.dtype(x) or tuple(ctx.shape(p)) != (nd, 3 * hid):
            ctx.fail(node, f"its P is {ctx.dtype(p).name} {ctx.shape(p)}, not {ctx.dtype(x).name} {(nd, 3 * hid)}")
    return _run(ctx, node, 4, ("Sigmoid", "Tanh", "Tanh"), _lstm_step)
