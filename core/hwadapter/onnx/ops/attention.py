"""Attention ONNX ops: Attention (opsets 23, 24 and 25's windows) and RotaryEmbedding (opset 23), decomposed into
matmul, elementwise ops and reductions.

They follow onnx's reference (onnx/reference/ops/op_attention.py, the source of the test cases' expected outputs)
step by step, in the inputs' dtype: float16 is rounded after each step as numpy rounds it (the softmax too, unless
softmax_precision asks for another dtype), so that the results are the reference's, not a more accurate value."""
from __future__ import annotations

import numpy as np

from . import converter
from .tensor import reshape, slice_axes, transpose

_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
_INT64 = np.dtype(np.int64)
#: softmax_precision (an onnx TensorProto element type) -> dtype; BFLOAT16 (16) has no hwadapter dtype.
_PRECISIONS = {1: np.dtype(np.float32), 10: np.dtype(np.float16), 11: np.dtype(np.float64)}


def _const(ctx, value, dtype):
    return ctx.constant(np.array(value, dtype=dtype))


# --- RotaryEmbedding -------------------------------------------------------------------------------------------
@converter("RotaryEmbedding")
def rotary_embedding(ctx, node):
    """x rotated pairwise by the cached cos/sin of each token's position (halves, or interleaved pairs)."""
    if ctx.opset < 23:
        ctx.fail(node, "RotaryEmbedding exists from opset 23")
    x, cos, sin, pos = (ctx.input(node, i) for i in range(4))
    shape, dt = ctx.shape(x), ctx.dtype(x)
    if dt not in _FLOATS:
        ctx.fail(node, f"its input is {dt.name}; RotaryEmbedding takes float types")
    if ctx.dtype(cos) != dt or ctx.dtype(sin) != dt:
        ctx.fail(node, "its cos_cache and sin_cache must have the input's dtype")
    num_heads = node.int("num_heads", 0)
    if len(shape) == 4:  # (B, H, S, D): the caches are laid out (B, 1, S, r/2) to broadcast over the heads
        b, _, s, head = shape
        xs = x
        cache_shape = (b, 1, s)
    elif len(shape) == 3:  # (B, S, H*D) -> (B, S, H, D): caches (B, S, 1, r/2)
        b, s, hidden = shape
        if num_heads <= 0 or hidden % num_heads:
            ctx.fail(node, f"its 3-D input's hidden size {hidden} is not a multiple of num_heads {num_heads}")
        head = hidden // num_heads
        xs = reshape(ctx, x, (b, s, num_heads, head))
        cache_shape = (b, s, 1)
    else:
        ctx.fail(node, f"its input has {len(shape)} axes; RotaryEmbedding takes 3-D or 4-D inputs")
    rot = node.int("rotary_embedding_dim", 0) or head
    if rot % 2 or not 0 < rot <= head:
        ctx.fail(node, f"its rotary_embedding_dim {rot} is not an even number in 2..head_size ({head})")
    half = rot // 2
    caches = []
    for c in (cos, sin):
        if pos is not None:
            if np.dtype(ctx.dtype(pos)).kind not in "iu" or tuple(ctx.shape(pos)) != (b, s):
                ctx.fail(node, f"its position_ids must be integers of shape (batch, sequence) = {(b, s)}")
            if len(ctx.shape(c)) != 2:
                ctx.fail(node, f"its caches have shape {ctx.shape(c)}; with position_ids they must be 2-D")
            c = ctx.op("gather", c, ctx.cast(pos, _INT64), axis=0)
        if tuple(ctx.shape(c)) != (b, s, half):
            ctx.fail(node, f"its cos/sin cache gives shape {ctx.shape(c)} per token, not {(b, s, half)}")
        caches.append(reshape(ctx, c, cache_shape + (half,)))
    cos, sin = caches
    last = len(ctx.shape(xs)) - 1
    x_rot = slice_axes(ctx, xs, {last: (0, rot, 1)})
    if node.int("interleaved", 0):
        x1, x2 = slice_axes(ctx, x_rot, {last: (0, rot, 2)}), slice_axes(ctx, x_rot, {last: (1, rot, 2)})
    else:
        x1, x2 = slice_axes(ctx, x_rot, {last: (0, half, 1)}), slice_axes(ctx, x_rot, {last: (half, rot, 1)})
    real = ctx.op("sub", ctx.op("mul", cos, x1), ctx.op("mul", sin, x2))
    imag = ctx.op("add", ctx.op("mul", sin, x1), ctx.op("mul", cos, x2))
    if node.int("interleaved", 0):  # (real, imag) pairs back in place: stack on a new last axis, flatten it
        pair = tuple(ctx.shape(real)) + (1,)
        rotated = ctx.op("concat", reshape(ctx, real, pair), reshape(ctx, imag, pair), axis=last + 1)
        rotated = reshape(ctx, rotated, ctx.shape(x_rot))
    else:
        rotated = ctx.op("concat", real, imag, axis=last)
    if rot < head:
        rotated = ctx.op("concat", rotated, slice_axes(ctx, xs, {last: (rot, head, 1)}), axis=last)
    return reshape(ctx, rotated, shape)


# --- Attention -------------------------------------------------------------------------------------------------
def _to_heads(ctx, x, heads):
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hidden = ctx.shape(x)
    return transpose(ctx, reshape(ctx, x, (b, s, heads, hidden // heads)), (0, 2, 1, 3))


def _repeat_heads(ctx, x, reps):
    """np.repeat(x, reps, axis=1) of a (B, H, L, D) tensor: each head `reps` times in a row."""
    b, h, length, d = ctx.shape(x)
    x5 = reshape(ctx, x, (b, h, 1, length, d))
    return reshape(ctx, ctx.op("expand", x5, shape=(b, h, reps, length, d)), (b, h * reps, length, d))


def _select(ctx, allowed, dtype):
    """where(allowed, 0, -inf) in dtype (select, not multiply: 0 * -inf would be nan)."""
    return ctx.op("where", allowed, _const(ctx, 0, dtype), _const(ctx, -np.inf, dtype))


def _frontier(ctx, q_len, kv_len, offset, batch):
    """The query-minus-key distance i + offset - j: (q, kv) for a static offset, (B, 1, q, kv) per batch (offset
    a (B,) int64 ref)."""
    i = np.arange(q_len, dtype=np.int64).reshape(q_len, 1)
    j = np.arange(kv_len, dtype=np.int64).reshape(1, kv_len)
    if isinstance(offset, int):
        return ctx.constant(i + offset - j)
    off = reshape(ctx, offset, (batch, 1, 1, 1))
    return ctx.op("sub", ctx.op("add", ctx.constant(i.reshape(1, 1, q_len, 1)), off),
                  ctx.constant(j.reshape(1, 1, 1, kv_len)))


def _softmax(ctx, x):
    """onnx's reference softmax over the last axis, step by step in x's dtype: an all -inf row gives zeros."""
    dt = ctx.dtype(x)
    zero, one = _const(ctx, 0, dt), _const(ctx, 1, dt)
    x_max = ctx.op("max", x, axis=-1, keepdim=True)
    safe_max = ctx.op("where", ctx.op("equal", x_max, _const(ctx, -np.inf, dt)), zero, x_max)
    e = ctx.op("exp", ctx.op("sub", x, safe_max))
    s = ctx.op("sum", e, axis=-1, keepdim=True)
    s = ctx.op("where", ctx.op("equal", s, zero), one, s)
    return ctx.op("div", e, s)


def _attrs(ctx, node):
    """The attributes, checked: (scale, is_causal, q_heads, kv_heads, precision, softcap, mode, left, right)."""
    if ctx.opset < 23:
        ctx.fail(node, "Attention exists from opset 23")
    left, right = node.int("left_window_size", -1), node.int("right_window_size", -1)
    if ctx.opset < 25 and ("left_window_size" in node.attrs or "right_window_size" in node.attrs):
        ctx.fail(node, "left_window_size/right_window_size are attributes from opset 25 only")
    if left < -1 or right < -1:
        ctx.fail(node, f"its window sizes ({left}, {right}) must be -1 or non-negative")
    precision = node.int("softmax_precision", None)
    if precision is not None:
        if precision not in _PRECISIONS:
            ctx.fail(node, f"its softmax_precision {precision} is not float16, float32 or float64 (bfloat16 has no "
                           "hwadapter dtype)")
        precision = _PRECISIONS[precision]
    mode = node.int("qk_matmul_output_mode", 0)
    if mode not in (0, 1, 2, 3):
        ctx.fail(node, f"its qk_matmul_output_mode {mode} is none of 0, 1, 2, 3")
    return (node.float("scale", None), bool(node.int("is_causal", 0)), node.int("q_num_heads", None),
            node.int("kv_num_heads", None), precision, node.float("softcap", 0.0), mode, left, right)


@converter("Attention")
def attention(ctx, node):
    scale, causal, q_heads_attr, kv_heads_attr, precision, softcap, mode, left, right = _attrs(ctx, node)
    q, k, v, mask, past_k, past_v = (ctx.input(node, i) for i in range(6))
    nonpad = ctx.input(node, 6) if ctx.opset >= 24 else None
    if ctx.opset < 24 and ctx.input(node, 6) is not None:
        ctx.fail(node, "its nonpad_kv_seqlen input exists from opset 24")
    dt = ctx.dtype(q)
    if dt not in _FLOATS or ctx.dtype(k) != dt or ctx.dtype(v) != dt:
        ctx.fail(node, f"its Q, K, V are {ctx.dtype(q).name}, {ctx.dtype(k).name}, {ctx.dtype(v).name}; hwadapter "
                       "converts Q, K and V of one float dtype")
    rank = len(ctx.shape(q))
    if rank not in (3, 4) or len(ctx.shape(k)) != rank or len(ctx.shape(v)) != rank:
        ctx.fail(node, "its Q, K and V must all be 3-D or all 4-D")
    if (past_k is None) != (past_v is None):
        ctx.fail(node, "past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        ctx.fail(node, "nonpad_kv_seqlen cannot be combined with past_key/past_value")
    if rank == 3:
        if q_heads_attr is None or kv_heads_attr is None:
            ctx.fail(node, "its 3-D Q, K, V need both q_num_heads and kv_num_heads")
        qh, kvh = int(q_heads_attr), int(kv_heads_attr)
        for name, t, h in (("Q", q, qh), ("K", k, kvh), ("V", v, kvh)):
            if h <= 0 or ctx.shape(t)[2] % h:
                ctx.fail(node, f"its {name} hidden size {ctx.shape(t)[2]} is not a multiple of its heads {h}")
        q, k, v = _to_heads(ctx, q, qh), _to_heads(ctx, k, kvh), _to_heads(ctx, v, kvh)
    else:
        if ctx.opset >= 25 and (q_heads_attr is not None or kv_heads_attr is not None):
            ctx.fail(node, "q_num_heads and kv_num_heads must not be given for 4-D inputs (opset 25)")
        if (q_heads_attr is not None and int(q_heads_attr) != ctx.shape(q)[1]) or \
                (kv_heads_attr is not None and int(kv_heads_attr) != ctx.shape(k)[1]):
            ctx.fail(node, "its q_num_heads/kv_num_heads disagree with the 4-D inputs' head axes")
    batch, qh, q_len, head = ctx.shape(q)
    kb, kvh, _, k_head = ctx.shape(k)
    if kb != batch or ctx.shape(v)[0] != batch or ctx.shape(v)[1] != kvh or k_head != head or \
            ctx.shape(v)[2] != ctx.shape(k)[2]:
        ctx.fail(node, f"its Q {ctx.shape(q)}, K {ctx.shape(k)}, V {ctx.shape(v)} (as 4-D) do not fit together")
    if qh != kvh and qh % kvh:
        ctx.fail(node, f"its {qh} query heads are not a multiple of its {kvh} key/value heads")

    # Q and K are each scaled by sqrt(scale), rounded to the inputs' dtype, as the reference does
    scale = 1 / np.sqrt(head) if scale is None else float(scale)
    sqrt_scale = _const(ctx, dt.type(np.sqrt(np.float64(scale))), dt)
    if past_k is not None:
        for name, p, t in (("past_key", past_k, k), ("past_value", past_v, v)):
            ps, ts = ctx.shape(p), ctx.shape(t)
            if ctx.dtype(p) != dt or len(ps) != 4 or ps[:2] != ts[:2] or ps[3] != ts[3]:
                ctx.fail(node, f"its {name} {ps} ({ctx.dtype(p).name}) does not fit its 4-D {ts} ({dt.name})")
        k = ctx.op("concat", past_k, k, axis=2)
        v = ctx.op("concat", past_v, v, axis=2)
    present_k, present_v = k, v
    past_len = ctx.shape(past_k)[2] if past_k is not None else 0
    kv_len = ctx.shape(k)[2]

    if nonpad is not None:
        if tuple(ctx.shape(nonpad)) != (batch,) or ctx.dtype(nonpad) != _INT64:
            ctx.fail(node, f"its nonpad_kv_seqlen must be int64 of shape ({batch},)")
    bias = _bias(ctx, node, mask, causal, left, right, nonpad, dt, batch, q_len, kv_len, past_len)

    if qh != kvh:  # grouped-query attention: each key/value head serves qh / kvh query heads in a row
        k, v = _repeat_heads(ctx, k, qh // kvh), _repeat_heads(ctx, v, qh // kvh)
    scores = ctx.op("matmul", ctx.op("mul", q, sqrt_scale), ctx.op("mul", k, sqrt_scale), transpose_y=True)
    if softcap > 0:
        cap = _const(ctx, softcap, dt)
        scores = ctx.op("mul", ctx.op("tanh", ctx.op("div", scores, cap)), cap)
    wants_qk = len(node.outputs) > 3 and bool(node.outputs[3])
    if wants_qk and mode == 0 and softcap > 0:
        ctx.fail(node, "qk_matmul_output_mode 0 with softcap: the spec says the raw QK product, onnx's reference "
                       "gives the softcapped one", fix="use qk_matmul_output_mode 1 (after softcap)")
    qk_out = scores
    with_bias = scores if bias is None else ctx.op("add", scores, bias)
    if mode == 2:
        qk_out = with_bias
    probs = _softmax(ctx, ctx.cast(with_bias, precision) if precision is not None else with_bias)
    if bias is not None:  # a query whose keys are all masked attends nothing: a zero row, not nan
        empty = ctx.op("equal", ctx.op("max", bias, axis=-1, keepdim=True), _const(ctx, -np.inf, dt))
        if ctx.const(empty) is None or ctx.const(empty).any():
            probs = ctx.op("where", empty, _const(ctx, 0, ctx.dtype(probs)), probs)
    if mode == 3:
        qk_out = probs
    probs = ctx.cast(probs, dt)
    y = ctx.op("matmul", probs, v)
    if rank == 3:
        b, h, s, dv = ctx.shape(y)
        y = reshape(ctx, transpose(ctx, y, (0, 2, 1, 3)), (b, s, h * dv))
    return y, present_k, present_v, ctx.cast(qk_out, dt)


def _bias(ctx, node, mask, causal, left, right, nonpad, dt, batch, q_len, kv_len, past_len):
    """The additive attention bias (0 or -inf, plus a float mask), broadcastable to (B, H, q, kv), in the reference's
    order of steps; None when nothing is masked."""
    if mask is not None:
        mdt, mshape = ctx.dtype(mask), ctx.shape(mask)
        if mdt != np.dtype(np.bool_) and mdt != dt:
            ctx.fail(node, f"its attn_mask is {mdt.name}; hwadapter converts a bool mask or one of Q's dtype "
                           f"({dt.name}) (onnx's reference promotes other dtypes)")
        if not 1 <= len(mshape) <= 4 or mshape[-1] > kv_len:
            ctx.fail(node, f"its attn_mask of shape {mshape} does not broadcast to (B, H, {q_len}, {kv_len})")
        if mshape[-1] < kv_len:  # a short mask is padded: those keys are masked
            fill = False if mdt == np.dtype(np.bool_) else float("-inf")
            pads = tuple((0, 0) for _ in mshape[:-1]) + ((0, kv_len - mshape[-1]),)
            mask = ctx.op("pad", mask, pads=pads, mode="constant", value=fill)
        if mdt == np.dtype(np.bool_):
            mask = _select(ctx, mask, dt)
    zeros = _const(ctx, np.zeros((q_len, kv_len)), dt)
    window = left >= 0 or right >= 0
    # the offset of the query block: past keys (internal cache), nonpad - q_len per batch (external), or 0
    offset = ctx.op("sub", nonpad, _const(ctx, q_len, _INT64)) if nonpad is not None and past_len == 0 else past_len
    bias = None
    if causal:
        if mask is not None and not window and (len(ctx.shape(mask)) < 2 or ctx.shape(mask)[-2] != q_len):
            ctx.fail(node, f"is_causal with an attn_mask of shape {ctx.shape(mask)}, whose query axis is not "
                           f"q_sequence_length {q_len}: onnx's reference then takes the causal frontier's size from "
                           "the mask (the spec says the two are independent) and onnxruntime refuses it",
                     fix=f"give the mask its full query axis ({q_len})")
        base = zeros if mask is None else mask
        if window:
            base = ctx.op("add", zeros, base)
        allowed = ctx.op("greater_equal", _frontier(ctx, q_len, kv_len, offset, batch), _const(ctx, 0, _INT64))
        bias = ctx.op("add", base, _select(ctx, allowed, dt))
    elif mask is not None:
        bias = ctx.op("add", zeros, mask)
    if window:
        bias = zeros if bias is None else ctx.op("add", zeros, bias)
        diff = _frontier(ctx, q_len, kv_len, offset, batch)
        allowed = None
        for bound, d in ((left, diff), (right, None)):
            if bound < 0:
                continue
            d = diff if d is not None else ctx.op("neg", diff)
            ok = ctx.op("less_equal", d, _const(ctx, bound, _INT64))
            allowed = ok if allowed is None else ctx.op("logical_and", allowed, ok)
        bias = ctx.op("add", bias, _select(ctx, allowed, dt))
    if nonpad is not None:
        keys = ctx.constant(np.arange(kv_len, dtype=np.int64).reshape(1, kv_len))
        valid = ctx.op("less", keys, reshape(ctx, nonpad, (batch, 1)))
        pad_bias = reshape(ctx, _select(ctx, valid, dt), (batch, 1, 1, kv_len))
        bias = pad_bias if bias is None else ctx.op("add", bias, pad_bias)
    return bias
