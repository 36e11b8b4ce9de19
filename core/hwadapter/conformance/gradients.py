"""The autograd section's cases and judges: gradients computed on a device (the vjp rules run there, through its
kernels, codegen backend or fallback) against cpu:0's, and a device's fused backward kernels (`<op>_vjp`) against
the vjp rules run on cpu:0."""
from __future__ import annotations

import warnings

import numpy as np

import hwadapter as hw
from hwadapter.plugin import meta, reference

from . import check
from .cases import reference_pool

F = hw.nn.functional

REFERENCE = "cpu:0"
SUFFIX = "_vjp"  # a fused backward kernel's name: the op's, then this


def forward_of(op: str) -> str | None:
    """The op whose fused backward kernel `op` is ("relu" for "relu_vjp"), or None."""
    return op[:-len(SUFFIX)] if op.endswith(SUFFIX) and len(op) > len(SUFFIX) else None


def _index(values, like):
    return hw.to_tensor(np.asarray(values, np.int64), device=like.device)


#: name -> (fn(*tensors) -> tensor, input shapes): the op families of a network's forward and backward, each built
#: with the frontend, so that backward runs the rules (and their ops) that training runs.
CASES = {
    "elementwise": (lambda a, b: hw.tanh(a * b) + hw.exp(a) / (b * b + 1.0) - hw.relu(a - b) * hw.sigmoid(b),
                    [(3, 4), (4,)]),
    "gelu_erf_sqrt": (lambda a: F.gelu(a) + hw.sqrt(a * a + 1.0) * hw.erf(a) - hw.log(hw.abs(a) + 1.0), [(2, 5)]),
    "maximum_clip_where": (lambda a, b: hw.where(a > 0, hw.maximum(a, b), hw.clip(b, -0.5, 0.5)), [(3, 4), (3, 4)]),
    "matmul": (lambda a, b: hw.matmul(a, b), [(2, 3, 4), (4, 5)]),
    "matmul_transposed": (lambda a, b: hw.matmul(a, b, transpose_x=True, transpose_y=True), [(4, 3), (5, 4)]),
    "sum_mean": (lambda a: hw.sum(a, axis=1) * hw.mean(a, axis=[0, 1]), [(2, 3, 4)]),
    "max_prod": (lambda a: hw.max(a, axis=-1) * hw.prod(a, axis=-1), [(3, 4)]),
    "softmax": (lambda a: F.softmax(a, -1) * F.log_softmax(a, 0), [(3, 4)]),
    "cross_entropy": (lambda a: -hw.take_along_axis(F.log_softmax(a, -1), _index([[1], [0], [3]], a), 1).mean(),
                      [(3, 4)]),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, [4], w, b), [(3, 4), (4,), (4,)]),
    "batch_norm_training": (lambda a, w, b: F.batch_norm(a, None, None, w, b, training=True), [(4, 3, 2, 2), (3,),
                                                                                             (3,)]),
    "conv2d": (lambda a, w, b: F.conv2d(a, w, b, stride=2, padding=1), [(2, 3, 6, 6), (4, 3, 3, 3), (4,)]),
    "conv2d_groups_dilation": (lambda a, w: F.conv2d(a, w, padding=2, dilation=2, groups=2), [(1, 4, 5, 5),
                                                                                              (2, 2, 3, 3)]),
    "conv2d_transpose": (lambda a, w: F.conv2d_transpose(a, w, stride=2, padding=1), [(1, 2, 3, 3), (2, 3, 3, 3)]),
    "max_pool2d": (lambda a: F.max_pool2d(a, 3, 2, 1), [(1, 2, 6, 6)]),
    "avg_pool2d": (lambda a: F.avg_pool2d(a, 3, 2, 1, ceil_mode=True), [(1, 2, 6, 6)]),
    "adaptive_pools": (lambda a: F.adaptive_avg_pool2d(a, (2, 3)) + F.adaptive_max_pool2d(a, (2, 3)), [(1, 2, 5, 7)]),
    "gather": (lambda a: hw.gather(a, _index([2, 0, 2, 1], a), 1), [(3, 4)]),
    "embedding": (lambda t: F.embedding(_index([[0, 4], [4, 2]], t), t), [(5, 3)]),
    "movement": (lambda a: hw.concat([a[::2], hw.pad(a, [0, 0, 1, 1])[:, 1:5]], 0).transpose([1, 0]).reshape([20]),
                 [(3, 4)]),
    "split_expand": (lambda a: hw.split(a, [1, 3], axis=1)[1] * hw.expand(a[:, :1], [3, 3]), [(3, 4)]),
    "cumsum": (lambda a: hw.cumsum(a, axis=1, reverse=True) * hw.cumprod(a, dim=0), [(3, 4)]),
}


def _inputs(shapes, dtype, device):
    """Fixed inputs (their values distinct, so no max or pool ties) that need gradients, on device."""
    rng = np.random.default_rng(7)
    out = []
    for shape in shapes:
        n = int(np.prod(shape))
        values = ((rng.permutation(n) - n / 2) / max(n, 1) * 3 + rng.uniform(-0.05, 0.05)).reshape(shape)
        t = hw.to_tensor(values.astype(dtype), device=device)
        t.stop_gradient = False
        out.append(t)
    return out


def case_gradients(name: str, device: str, dtype: str = "float32") -> list[np.ndarray]:
    """The gradients of case `name` on device, against a fixed cotangent, as host arrays."""
    fn, shapes = CASES[name]
    ts = _inputs(shapes, dtype, device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fallback notices: gradients through fallback still count
        out = fn(*ts)
        cot = np.random.default_rng(8).standard_normal(out.shape).astype(dtype)
        grads = hw.grad(out, ts, grad_outputs=hw.to_tensor(cot, device=device), allow_unused=True)
    return [np.zeros(t.shape, dtype) if g is None else g.numpy() for g, t in zip(grads, ts)]


def _close(got: np.ndarray, want: np.ndarray, dtype: str) -> str | None:
    rtol, atol = check.TOLERANCE[dtype]
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    try:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol * scale,
                                   equal_nan=True)
    except AssertionError as err:
        return " ".join(str(err).split())[:600]
    return None


def judge_case(name: str, device: str, dtype: str = "float32") -> list[str]:
    """What is wrong with case `name`'s gradients on device, compared with cpu:0's (nothing: [])."""
    got, want = case_gradients(name, device, dtype), case_gradients(name, REFERENCE, dtype)
    return [f"input {i} {CASES[name][1][i]}: {why}" for i, (g, w) in enumerate(zip(got, want))
            if (why := _close(g, w, dtype)) is not None]


def reproduce_case(name: str, device: str) -> str:
    return (f"from hwadapter.conformance import gradients; print(gradients.judge_case({name!r}, {device!r}))")


# --- fused backward kernels ---------------------------------------------------------------------------------------
def vjp_kernels(dev) -> list[str]:
    """The fused backward kernels (`<op>_vjp`) the device's plugin registered."""
    return sorted(op for op in dev.kernels.ops() if forward_of(op) is not None)


def _variants(op: str, arrays, attrs, rng) -> list:
    """The case's float inputs moved by up to 0.05 (the kit's values are whole numbers, so a max or a pool would tie,
    where gradients may rightly differ), as they are (positive) and centred on 0 (negative values too: relu's mask,
    abs's sign), the centred one only where the op's result stays finite there."""
    moved = [a + rng.uniform(-0.05, 0.05, a.shape).astype(a.dtype) if a.dtype.kind == "f" else a for a in arrays]
    centred = [a - np.asarray(2.5, a.dtype) if a.dtype.kind == "f" else a for a in moved]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            out = reference.KERNELS[op](*centred, **attrs)
        except Exception:  # noqa: BLE001: inputs the op refuses once centred
            return [moved]
    outs = out if isinstance(out, (list, tuple)) else [out]
    finite = all(np.isfinite(o).all() for o in outs if np.asarray(o).dtype.kind == "f")
    return [centred, moved] if finite else [moved]


def _rule_gradients(op: str, arrays, cots, attrs) -> list:
    """The vjp rule's gradient of each input of op on cpu:0 (None for an integer input), as host arrays."""
    ts = [hw.to_tensor(a, device=REFERENCE) for a in arrays]
    grads = hw.autograd.op_vjp(op, ts, [hw.to_tensor(c, device=REFERENCE) for c in cots], attrs)
    return [None if t.dtype.kind != "f" else (np.zeros(t.shape, t.dtype) if g is None else g.numpy())
            for g, t in zip(grads, ts)]


def vjp_cases(vjp_op: str, dev, limit: int = 8) -> list:
    """[(input arrays, output cotangents, attrs)] of the forward op's kit cases the kernel is registered for (float
    inputs finite, none empty: a gradient of nothing checks nothing)."""
    op = forward_of(vjp_op)
    rng = np.random.default_rng(9)
    picked = []
    for arrays, attrs in reference_pool(op):
        if not any(a.dtype.kind == "f" for a in arrays) or any(a.size == 0 for a in arrays) or \
                not all(np.isfinite(a).all() for a in arrays if a.dtype.kind == "f"):
            continue
        outs = meta.result_meta(op, tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), attrs)
        if outs is None or not any(np.dtype(d).kind == "f" for _, d in outs):
            continue
        dtypes = tuple(a.dtype for a in arrays) + tuple(np.dtype(d) for _, d in outs)
        if dev.kernels.find(vjp_op, dtypes) is None:
            continue
        for variant in _variants(op, arrays, attrs, rng):
            picked.append((variant, [rng.standard_normal(s).astype(d) for s, d in outs], attrs))
        if len(picked) >= limit:
            return picked[:limit]
    return picked


def judge_vjp(vjp_op: str, dev, arrays, cots, attrs) -> str | None:
    """Run the device's `vjp_op` kernel on (arrays, cots) uploaded to dev: None when it returns one gradient per
    input of the device's array type, with the input's shape and dtype, equal to the rule's on cpu:0 (float inputs)
    at the dtype's tolerance; else what is wrong."""
    op = forward_of(vjp_op)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        want = _rule_gradients(op, arrays, cots, attrs)
        kernel = dev.kernels.find(vjp_op, tuple(a.dtype for a in arrays) + tuple(c.dtype for c in cots))
        inputs = [check.upload(dev, a) for a in list(arrays) + list(cots)]
        out = kernel(*inputs, **attrs)
    del inputs
    multi = isinstance(out, (list, tuple))
    grads = list(out) if multi else [out]
    if multi != (len(arrays) > 1) or len(grads) != len(arrays):
        expected = "one array" if len(arrays) == 1 else f"a list of {len(arrays)} arrays"
        return (f"returned {f'a list of {len(grads)}' if multi else 'one array'} where {expected} is expected: one "
                f"gradient per input of {op!r}")
    for i, (g, a, w) in enumerate(zip(grads, arrays, want)):
        kind = check._kind(g, dev)
        if kind is not None:
            return f"gradient {i}: {kind}"
        if tuple(g.shape) != a.shape or np.dtype(g.dtype) != a.dtype:
            return (f"gradient {i}: shape {tuple(g.shape)} dtype {np.dtype(g.dtype).name}; expected input {i}'s "
                    f"shape {a.shape} and dtype {a.dtype.name}")
        if w is None:
            continue  # an integer input (an index): its entry is ignored
        got = g.numpy() if hasattr(g, "numpy") and not isinstance(g, np.ndarray) else np.asarray(g)
        wrong = _close(got, w, a.dtype.name)
        if wrong:
            return f"gradient {i}: differs from the vjp rule's on {REFERENCE}: {wrong}"
    return None


def describe(arrays, cots, attrs) -> str:
    return check.describe(list(arrays) + list(cots), attrs)


def reproduce_vjp(vjp_op: str, device) -> str:
    return (f"from hwadapter import host; from hwadapter.conformance import gradients as g; "
            f"dev = host.device({str(device)!r}); "
            f"print([g.judge_vjp({vjp_op!r}, dev, *c) for c in g.vjp_cases({vjp_op!r}, dev)])")
