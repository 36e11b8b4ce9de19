"""The oracle of the autograd tests: central finite differences of a function of hwadapter tensors, in float64.

`check(fn, arrays)` differentiates fn(*tensors) with hw.grad against a random cotangent per float output and compares
each input's gradient with (f(x + eps e_i) - f(x - eps e_i)) / 2 eps, f = sum(output * cotangent), element by element
(or along random directions for large inputs). The finite differences only run fn forward: they share nothing with
the vjp rules they judge."""
from __future__ import annotations

import numpy as np

import hwadapter as hw
from hwadapter.autograd import engine

#: Inputs up to this many elements are differenced element by element; larger ones along random directions.
ELEMENTWISE_LIMIT = 96
DIRECTIONS = 4


def _outputs(out) -> list:
    outs = list(out) if isinstance(out, (list, tuple)) else [out]
    return [o for o in outs if o.dtype.kind == "f"] if outs and hasattr(outs[0], "dtype") else outs


def _as_float(o) -> np.ndarray:
    return np.asarray(o.numpy(), np.float64)


def _f(fn, arrays, cots, device) -> float:
    """sum(output * cotangent) over fn's float outputs, run forward only."""
    with hw.no_grad():
        outs = _outputs(fn(*[hw.to_tensor(a, device=device) for a in arrays]))
    return float(sum((_as_float(o) * c).sum() for o, c in zip(outs, cots)))


def numeric(fn, arrays, cots, i, eps, device="cpu:0", rng=None) -> tuple[np.ndarray, np.ndarray | None]:
    """(the finite-difference gradient of input i, None), or for a large input (directional derivatives along
    DIRECTIONS random unit directions, the directions)."""
    x = arrays[i]

    def at(delta):
        moved = list(arrays)
        moved[i] = x + delta
        return _f(fn, moved, cots, device)
    if x.size <= ELEMENTWISE_LIMIT:
        grad = np.zeros(x.shape)
        for idx in np.ndindex(x.shape):
            e = np.zeros(x.shape)
            e[idx] = eps
            grad[idx] = (at(e) - at(-e)) / (2 * eps)
        return grad, None
    rng = rng or np.random.default_rng(0)
    dirs = rng.standard_normal((DIRECTIONS,) + x.shape)
    dirs /= np.sqrt((dirs ** 2).sum(axis=tuple(range(1, dirs.ndim)), keepdims=True))
    return np.array([(at(eps * d) - at(-eps * d)) / (2 * eps) for d in dirs]), dirs


def analytic(fn, arrays, cots, wrt, device="cpu:0", dtype=None):
    """(the gradients hw.grad gives for the inputs in wrt (zeros where none flowed), the ops on the tape)."""
    ts = [hw.to_tensor(a if dtype is None or a.dtype.kind != "f" else a.astype(dtype), device=device)
          for a in arrays]
    for i in wrt:
        ts[i].stop_gradient = False
    outs = _outputs(fn(*ts))
    live = [(o, c) for o, c in zip(outs, cots) if not o.stop_gradient]
    ops = {n.op for n in engine._nodes([o for o, _ in live])}
    if not live:
        return [np.zeros(arrays[i].shape) for i in wrt], ops
    grads = hw.grad([o for o, _ in live], [ts[i] for i in wrt],
                    grad_outputs=[hw.to_tensor(c.astype(o.dtype), device=device) for o, c in live], allow_unused=True)
    out = []
    for i, g in zip(wrt, grads):
        if g is not None:
            assert tuple(g.shape) == tuple(arrays[i].shape), f"input {i}: gradient of shape {g.shape}"
            assert g.dtype == ts[i].dtype, f"input {i}: gradient of dtype {g.dtype}, input {ts[i].dtype}"
        out.append(np.zeros(arrays[i].shape) if g is None else _as_float(g))
    return out, ops


def check(fn, *arrays, wrt=None, op=None, eps=1e-6, rtol=1e-5, atol=1e-6, seed=0, device="cpu:0"):
    """Assert that hw.grad of fn at `arrays` (float64 numpy arrays; integer ones are passed through, never
    differentiated) equals central finite differences; with `op`, that op is on the tape (the rule under test ran)."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(a) for a in arrays]
    wrt = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"] if wrt is None else list(wrt)
    with hw.no_grad():
        outs = _outputs(fn(*[hw.to_tensor(a) for a in arrays]))
    cots = [rng.standard_normal(tuple(o.shape)) for o in outs]
    got, ops = analytic(fn, arrays, cots, wrt, device)
    if op is not None:
        assert op in ops, f"op {op!r} is not on the tape (ops recorded: {sorted(ops)}): the case misses its rule"
    for i, g in zip(wrt, got):
        want, dirs = numeric(fn, arrays, cots, i, eps, rng=rng)
        if dirs is not None:
            g = np.tensordot(dirs, g, axes=g.ndim)
        scale = max(1.0, float(np.abs(want).max(initial=0)))
        np.testing.assert_allclose(g, want, rtol=rtol, atol=atol * scale,
                                   err_msg=f"input {i} (shape {arrays[i].shape}): hw.grad vs finite differences"
                                           + (" along random directions" if dirs is not None else ""))
    return got


def distinct(rng, shape, spacing=0.05):
    """Values with no two within `spacing` of each other (no ties for max, min, topk or max pooling)."""
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2) * spacing + rng.uniform(0, spacing / 4)).reshape(shape)


def away(x, points=(0.0,), margin=0.05):
    """x with every element at least `margin` from each of `points` (where the function has a kink)."""
    x = np.array(x, np.float64)
    for p in points:
        near = np.abs(x - p) < margin
        x = np.where(near, p + np.where(x >= p, margin, -margin) * 2, x)
    return x
