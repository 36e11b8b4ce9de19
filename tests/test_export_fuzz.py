"""Seeded fuzz of hw.jit.save: random chains of eager ops per dtype, run in onnxruntime, give eager's result or an
ExportError (issue 22); a wrong result, a raw exception or a model onnxruntime refuses fails, listing the cases."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the oracle of the export tests (test extra)")

import hwadapter as hw  # noqa: E402
import hwadapter.nn.functional as F  # noqa: E402
from hwadapter.api import dtypes  # noqa: E402
from hwadapter.api.errors import HwAdapterError  # noqa: E402
from hwadapter.onnx import export  # noqa: E402

SEED = 22
CHAINS_PER_DTYPE = 32  # each chain is traced, exported and opened in onnxruntime: tens of ms
TOLERANCE = {np.dtype("float16"): (2e-2, 1e-2), np.dtype("float32"): (1e-4, 1e-5), np.dtype("float64"): (1e-9, 1e-12)}


# --- values: small random ones and each dtype's edges ------------------------------------------------------------
def _values(rng, shape, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind == "f":
        # no float max: a product that overflows before or after a 0 is inf * 0 = nan or 0, by summation order
        edges = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, np.inf, -np.inf, np.nan, np.finfo(dt).tiny], dt)
        small = rng.normal(0, 3, n).astype(dt)
    else:
        info = np.iinfo(dt)
        edges = np.array([v for v in (0, 1, -1, 2, -2, info.min, info.max, info.min + 1, info.max - 1)
                          if info.min <= v <= info.max], dt)
        small = rng.integers(max(info.min, -6), 7, n).astype(dt)
    pick = rng.random(n) < 0.35
    flat = np.where(pick, edges[rng.integers(0, len(edges), n)], small)
    return flat.astype(dt).reshape(shape)


def _shape(rng, rank=None) -> tuple:
    rank = int(rng.integers(0, 4)) if rank is None else rank
    return tuple(int(d) for d in rng.integers(1, 4, rank))


# --- recipes: graph op -> (rng, x, new input) -> the eager call on x, or None where x does not fit the op --------
def _unary(name, fn=None):
    fn = fn or getattr(hw, name)
    return lambda rng, x, new: fn


def _binary(fn):
    def recipe(rng, x, new):
        shape = x.shape if rng.random() < 0.7 or not x.shape else (1,) * (x.ndim - 1) + (x.shape[-1],)
        y = new(shape, x.dtype)
        return lambda t, ys: fn(t, ys[y])
    return recipe


def _reduce(fn, int_axis_only=False):
    def recipe(rng, x, new):
        axis = None if (x.ndim == 0 or rng.random() < 0.3) and not int_axis_only else \
            (int(rng.integers(-x.ndim, x.ndim)) if x.ndim else None)
        keep = bool(rng.random() < 0.5)
        return lambda t, ys: fn(t, axis=axis, keepdim=keep)
    return recipe


def _needs(rank, make):
    """A recipe for x of at least `rank` dimensions, none of them 0."""
    return lambda rng, x, new: make(rng, x, new) if x.ndim >= rank and 0 not in x.shape else None


def _where(rng, x, new):
    c, y = new(x.shape, "bool"), new(x.shape, x.dtype)
    return lambda t, ys: hw.where(ys[c], t, ys[y])


def _cast(rng, x, new):
    dt = dtypes.ALL[int(rng.integers(0, len(dtypes.ALL)))]
    return lambda t, ys: hw.cast(t, dt)


def _clip(rng, x, new):
    if x.dtype == np.bool_:
        return None
    lo, hi = sorted(_values(rng, (2,), x.dtype).tolist())
    lo, hi = (None, hi) if rng.random() < 0.3 else ((lo, None) if rng.random() < 0.3 else (lo, hi))
    return lambda t, ys: hw.clip(t, lo, hi)


def _matmul(rng, x, new):
    y = new((x.shape[-1], int(rng.integers(1, 4))), x.dtype)
    return lambda t, ys: hw.matmul(t, ys[y])


def _transpose(rng, x, new):
    perm = [int(p) for p in rng.permutation(x.ndim)]
    return lambda t, ys: hw.transpose(t, perm)


def _concat(rng, x, new):
    axis = int(rng.integers(0, x.ndim))
    y = new(x.shape, x.dtype)
    return lambda t, ys: hw.concat([t, ys[y]], axis=axis)


def _split(rng, x, new):
    axis = int(rng.integers(0, x.ndim))
    if x.shape[axis] < 2:
        return None
    part = int(rng.integers(0, 2))
    return lambda t, ys: hw.split(t, [1, t.shape[axis] - 1], axis=axis)[part]


def _slice(rng, x, new):
    axis = int(rng.integers(0, x.ndim))
    start, stop, step = [(0, None, 2), (None, None, -1), (1, None, 1), (-1, 0, -1)][int(rng.integers(0, 4))]
    key = (slice(None),) * axis + (slice(start, stop, step),)
    return lambda t, ys: t[key]


def _gather(rng, x, new):
    axis = int(rng.integers(0, x.ndim))
    idx = rng.integers(-x.shape[axis], x.shape[axis], int(rng.integers(1, 4)))
    return lambda t, ys: hw.gather(t, hw.to_tensor(idx), axis=axis)


def _pad(rng, x, new):
    pads = [int(p) for p in rng.integers(0, 3, 2 * x.ndim)]
    mode = ["constant", "reflect", "replicate"][int(rng.integers(0, 3))]
    return lambda t, ys: hw.pad(t, pads, mode=mode, value=1)


def _topk(rng, x, new):
    k = int(rng.integers(1, x.shape[-1] + 1))
    largest, part = bool(rng.random() < 0.5), int(rng.integers(0, 2))
    return lambda t, ys: hw.topk(t, k, axis=-1, largest=largest)[part]


def _cumulative(fn):
    def recipe(rng, x, new):
        axis, exclusive, reverse = int(rng.integers(0, x.ndim)), bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        return lambda t, ys: fn(t, axis, exclusive=exclusive, reverse=reverse)
    return recipe


def _along(rng, x, new, put=False):
    axis = int(rng.integers(0, x.ndim))
    idx = rng.integers(0, x.shape[axis], x.shape).astype(np.int64)
    if not put:
        return lambda t, ys: hw.take_along_axis(t, hw.to_tensor(idx), axis)
    v = new(x.shape, x.dtype)
    reduce = "add" if rng.random() < 0.5 else "assign"
    if reduce == "assign":  # one write per place: which of several writes wins is unspecified in ONNX
        idx = np.broadcast_to(np.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1)), x.shape).copy()
    return lambda t, ys: hw.put_along_axis(t, hw.to_tensor(idx), ys[v], axis, reduce=reduce)


def _nd(rng, x, new, scatter=False):
    idx = np.stack([rng.integers(0, x.shape[0], 2)], axis=-1).astype(np.int64)
    if not scatter:
        return lambda t, ys: hw.gather_nd(t, hw.to_tensor(idx))
    u = new((2,) + x.shape[1:], x.dtype)
    return lambda t, ys: hw.scatter_nd_add(t, hw.to_tensor(idx), ys[u])


def _nchw(make):
    return lambda rng, x, new: make(rng, x, new) if x.ndim == 4 and 0 not in x.shape else None


def _conv(rng, x, new):
    w = new((2, x.shape[1], 1 + int(x.shape[2] > 1), 1 + int(x.shape[3] > 1)), x.dtype)
    pad = int(rng.integers(0, 2))
    return lambda t, ys: F.conv2d(t, ys[w], padding=pad)


def _conv_t(rng, x, new):
    w = new((x.shape[1], 2, 2, 2), x.dtype)
    return lambda t, ys: F.conv2d_transpose(t, ys[w], stride=2)


def _pool(fn, **kw):
    return lambda rng, x, new: (lambda t, ys: fn(t, kernel_size=1 + int(min(x.shape[2:]) > 1), **kw))


def _norm(kind):
    def recipe(rng, x, new):
        if kind == "layer":
            w, b = new(x.shape[-1:], x.dtype), new(x.shape[-1:], x.dtype)
            return lambda t, ys: F.layer_norm(t, x.shape[-1:], ys[w], ys[b])
        m, v, w, b = (new(x.shape[1:2], x.dtype) for _ in range(4))
        return lambda t, ys: F.batch_norm(t, ys[m], hw.abs(ys[v]), ys[w], ys[b])
    return recipe


def _same_unary(rng, x):
    """A unary op (drawn) that eager runs on x giving x's shape and dtype, as a function; None if the draw fails."""
    name = sorted([*export.UNARY, "rsqrt", "gelu", "bitwise_not"])[int(rng.integers(0, len(export.UNARY) + 3))]
    fn = getattr(hw, name)
    try:
        y = fn(x)
    except HwAdapterError:
        return None
    return fn if y.shape == x.shape and y.dtype == x.dtype else None


def _cond(rng, x, new):
    """A cond on a bool input: the unary op of x in one branch, x itself (unchanged) in the other."""
    fn, p, swap = _same_unary(rng, x), new((), "bool"), bool(rng.random() < 0.5)
    if fn is None:
        return None
    return lambda t, ys: hw.static.nn.cond(ys[p], *((lambda: t, lambda: fn(t)) if swap else (lambda: fn(t), lambda: t)))


def _while(rng, x, new):
    """A while_loop applying the unary op 0-3 times, or none when a bool input says so (read from the outer graph)."""
    fn, go, k = _same_unary(rng, x), new((), "bool"), int(rng.integers(0, 4))
    if fn is None:
        return None
    return lambda t, ys: hw.static.nn.while_loop(lambda i, v: (i < k) & ys[go], lambda i, v: [i + 1, fn(v)],
                                                 [hw.to_tensor(0), t])[1]


BINARY = {"add": hw.add, "sub": hw.subtract, "mul": hw.multiply, "div": hw.divide, "pow": hw.pow,
          "maximum": hw.maximum, "minimum": hw.minimum, "mod": hw.remainder, "equal": hw.equal,
          "not_equal": hw.not_equal, "less": hw.less_than, "less_equal": hw.less_equal, "greater": hw.greater_than,
          "greater_equal": hw.greater_equal, "logical_and": hw.logical_and, "logical_or": hw.logical_or,
          "logical_xor": hw.logical_xor, "bitwise_and": hw.bitwise_and, "bitwise_or": hw.bitwise_or,
          "bitwise_xor": hw.bitwise_xor, "left_shift": hw.bitwise_left_shift,
          "right_shift": hw.bitwise_right_shift}
RECIPES = {name: _unary(name) for name in [*export.UNARY, "rsqrt", "gelu", "bitwise_not"]}
RECIPES.update({name: _binary(fn) for name, fn in BINARY.items()})
RECIPES.update({name: _reduce(getattr(hw, name)) for name in export.REDUCE})
RECIPES.update({name: _reduce(getattr(hw, name)) for name in ("argmax", "argmin")})
RECIPES.update({
    "softmax": _needs(1, lambda rng, x, new: lambda t, ys: F.softmax(t, axis=-1)),
    "log_softmax": _needs(1, lambda rng, x, new: lambda t, ys: F.log_softmax(t, axis=-1)),
    "where": _where, "cast": _cast, "clip": _clip, "matmul": _needs(1, _matmul),
    "reshape": lambda rng, x, new: lambda t, ys: hw.reshape(t, [-1]),
    "transpose": _needs(2, _transpose), "concat": _needs(1, _concat), "split": _needs(1, _split),
    "slice": _needs(1, _slice), "gather": _needs(1, _gather),
    "expand": lambda rng, x, new: lambda t, ys: hw.expand(t, (2,) + tuple(t.shape)),
    "pad": _needs(1, _pad), "topk": _needs(1, _topk),
    "cumsum": _needs(1, _cumulative(hw.cumsum)), "cumprod": _needs(1, _cumulative(hw.cumprod)),
    "gather_elements": _needs(1, _along), "scatter_elements": _needs(1, lambda r, x, n: _along(r, x, n, True)),
    "gather_nd": _needs(1, _nd), "scatter_nd": _needs(1, lambda r, x, n: _nd(r, x, n, True)),
    "layer_norm": _needs(1, _norm("layer")), "batch_norm": _nchw(_norm("batch")), "conv2d": _nchw(_conv),
    "conv_transpose2d": _nchw(_conv_t), "max_pool2d": _nchw(_pool(F.max_pool2d)),
    "avg_pool2d": _nchw(_pool(F.avg_pool2d)),
    "adaptive_avg_pool2d": _nchw(lambda rng, x, new: lambda t, ys: F.adaptive_avg_pool2d(t, 1)),
    "adaptive_max_pool2d": _nchw(lambda rng, x, new: lambda t, ys: F.adaptive_max_pool2d(t, 1)),
    "lrn": _nchw(lambda rng, x, new: lambda t, ys: F.local_response_norm(t, 3)),
    "cond": _cond, "while_loop": _while,
})


def test_every_op_the_exporter_writes_has_a_recipe():
    """The fuzz draws from the exporter's own table: a newly exportable op needs a recipe here."""
    assert sorted(set(export.WRITERS) - set(RECIPES)) == []


# --- one case: a chain, its eager result, the export, onnxruntime ------------------------------------------------
def _chain(rng, dtype):
    """(the function, its input arrays, the op names) of 2-4 ops eager runs, from an input of `dtype`."""
    arrays = [_values(rng, _shape(rng, 4 if rng.random() < 0.15 else None), dtype)]

    def new(shape, dt):
        arrays.append(_values(rng, tuple(shape), dt))
        return len(arrays) - 1

    steps, names, x = [], [], hw.to_tensor(arrays[0])
    seen, scale = {x.dtype}, 0.0
    ops = sorted(RECIPES)
    for _ in range(int(rng.integers(2, 5))):
        for _ in range(20):  # an op eager refuses for this input (dtype, shape) is drawn again
            name = ops[int(rng.integers(0, len(ops)))]
            mark = len(arrays)
            step = RECIPES[name](rng, x, new)
            try:
                y = step(x, [hw.to_tensor(a) for a in arrays]) if step is not None else None
            except HwAdapterError:
                y = None
            if y is None or not isinstance(y, hw.Tensor) or y.size > 4096:
                del arrays[mark:]
                continue
            steps.append(step)
            names.append(name)
            seen.update([y.dtype, *(a.dtype for a in arrays)])
            scale = max(scale, *(_magnitude(v) for v in (x.numpy(), y.numpy(), *arrays)))
            x = y
            break

    def fn(*ts):
        out = ts[0]
        for s in steps:
            out = s(out, ts)
        return out
    floats = [d for d in seen if d in TOLERANCE]
    rtol, atol = max((TOLERANCE[d] for d in floats), default=(0, 0))
    # a sum in another order is off by some units in the last place of the largest value summed (cancellation)
    eps = max((float(np.finfo(d).eps) for d in floats), default=0.0)
    return fn, arrays, names, (rtol, max(atol, 64 * eps * scale))


def _magnitude(a: np.ndarray) -> float:
    """The largest finite |value| of a."""
    with np.errstate(all="ignore"):
        finite = np.abs(a[np.isfinite(a)].astype(np.float64)) if a.dtype.kind == "f" else np.abs(a.astype(np.float64))
    return float(finite.max(initial=0.0))


def _differs(got: np.ndarray, expected: np.ndarray, tolerance) -> str:
    if got.dtype != expected.dtype or got.shape != expected.shape:
        return f"onnxruntime gives {got.dtype}{list(got.shape)}, eager {expected.dtype}{list(expected.shape)}"
    if expected.dtype.kind != "f":
        bad = got != expected
    else:
        rtol, atol = (max(a, b) for a, b in zip(tolerance, TOLERANCE[expected.dtype]))
        g, e = got.astype(np.float64), expected.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            bad = (np.isnan(g) != np.isnan(e)) | ~(np.isclose(g, e, rtol=rtol, atol=atol) | np.isnan(e))
    if not bad.any():
        return ""
    return f"onnxruntime {got[bad][:4].tolist()}, eager {expected[bad][:4].tolist()} ({int(bad.sum())} differ)"


def _run_case(tmp_path, rng, dtype, i) -> tuple:
    """(outcome, description): 'equal', 'refused' (an ExportError) or 'wrong'."""
    fn, arrays, names, tolerance = _chain(rng, dtype)
    label = f"{dtype.name} {' -> '.join(names)} on {[f'{a.dtype}{list(a.shape)}' for a in arrays]}"
    expected = fn(*(hw.to_tensor(a) for a in arrays)).numpy()
    try:
        path = hw.jit.save(fn, tmp_path / f"{dtype.name}_{i}.onnx", input_spec=list(arrays))
    except export.ExportError:
        return "refused", label
    except Exception as err:  # noqa: BLE001  a raw error is what the fuzz looks for
        return "wrong", f"{label}: jit.save raised {type(err).__name__}: {str(err)[:300]}"
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the model as written
    opts.log_severity_level = 4
    try:
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        feeds = {inp.name: a for inp, a in zip(sess.get_inputs(), arrays)}
        (got,) = sess.run(None, feeds)
    except Exception as err:  # noqa: BLE001
        return "wrong", f"{label}: onnxruntime refused the export: {str(err)[:300]}"
    why = _differs(np.asarray(got), expected, tolerance)
    return ("wrong", f"{label}: {why}") if why else ("equal", label)


@pytest.mark.parametrize("dtype", dtypes.ALL, ids=lambda d: d.name)
def test_random_op_chains_export_to_eagers_results_or_an_export_error(tmp_path, dtype):
    rng = np.random.default_rng([SEED, dtypes.ALL.index(dtype)])
    outcomes = {"equal": [], "refused": [], "wrong": []}
    with np.errstate(all="ignore"):
        for i in range(CHAINS_PER_DTYPE):
            kind, text = _run_case(tmp_path, rng, dtype, i)
            outcomes[kind].append(text)
    assert not outcomes["wrong"], "\n".join(outcomes["wrong"])
    assert len(outcomes["equal"]) >= CHAINS_PER_DTYPE // 2, outcomes["refused"]  # the fuzz still exercises exports
