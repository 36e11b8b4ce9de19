"""Every vjp rule of hwadapter.autograd against central finite differences in float64 on cpu (tests/gradcheck.py).

One fixed case per differentiable op (EXAMPLES, which must cover every key of autograd.RULES and put that op on the
tape), then hypothesis properties over shapes (broadcasting, zero-size tensors, 0-d), axes (negative, several,
keepdim) and attributes (strides, paddings, dilations, groups, ceil_mode, exclusive, transpose flags, slice steps),
built with the public ops. Inputs keep away from the points where a function has no derivative (ties of max, the
kink of relu and |x|, the steps of floor), where finite differences measure nothing a rule could match."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hwadapter as hw
from hwadapter import autograd
from hwadapter.api import admit, meta
from hwadapter.dispatch.dispatcher import dispatch
from hwadapter.nn import functional as F

from gradcheck import away, check, distinct

_SLOW: dict = {}


def prop(**strategies):
    """@given(**strategies) at few examples (make test); the same property at many more is added as `<name>_many`,
    marked slow (make test-slow)."""
    def wrap(body):
        many = settings(max_examples=200, deadline=None)(given(**strategies)(body))
        _SLOW[f"{body.__name__}_many"] = pytest.mark.slow(many)
        return settings(max_examples=15, deadline=None)(given(**strategies)(body))
    return wrap


def normal(rng, shape, scale=1.0):
    return rng.standard_normal(shape) * scale


def ints(values):
    return np.asarray(values, np.int64)


def resize(x, sizes, mode="nearest", **attrs):
    """The resize op (no public frontend function: ONNX Resize reaches it), with scales from the sizes."""
    scales = tuple(o / i if i else 1.0 for o, i in zip(sizes, x.shape))
    return dispatch("resize", (x,), {"sizes": tuple(sizes), "scales": scales, "mode": mode, **attrs})


def scatter_nd(x, index, updates):
    """scatter_nd with reduction 'none' (assignment; the frontend's scatter_nd_add adds)."""
    return dispatch("scatter_nd", (x, index, updates), {"reduction": "none"})


# --- one case per op with a rule --------------------------------------------------------------------------------
_R = np.random.default_rng(1)


def _collective(name, x, **attrs):
    """op across the ranks of this process's world (of one: MPI starts as a singleton)."""
    from hwadapter import distributed as dist  # lazy: only these two cases start MPI
    group = dist.init_parallel_env()
    group.communicator(x.device)
    return dispatch(name, (x,), {"group": group.id, **attrs})
_POS = np.abs(_R.standard_normal((2, 3))) + 0.5
_UNIT = _R.uniform(-0.8, 0.8, (2, 3))
_UNARY_DOMAIN = {"log": _POS, "sqrt": _POS, "rsqrt": _POS, "reciprocal": _POS, "asin": _UNIT, "acos": _UNIT,
                 "atanh": _UNIT, "acosh": _POS + 1.0, "abs": away(_R.standard_normal((2, 3))),
                 "relu": away(_R.standard_normal((2, 3))), "sign": away(_R.standard_normal((2, 3))),
                 "floor": away(_R.standard_normal((2, 3)), (-1, 0, 1)),
                 "ceil": away(_R.standard_normal((2, 3)), (-1, 0, 1)),
                 "round": away(_R.standard_normal((2, 3)), (-1.5, -0.5, 0.5, 1.5)), "tan": _UNIT}
_UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu", "erf", "sin", "cos",
          "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "floor", "ceil", "round", "sign"]


def _unary(op):
    fn = getattr(hw, op)
    return fn, [_UNARY_DOMAIN.get(op, _R.standard_normal((2, 3)))]


EXAMPLES = {
    "add": (hw.add, [normal(_R, (2, 3)), normal(_R, (3,))]),
    "sub": (hw.subtract, [normal(_R, (2, 1)), normal(_R, (1, 3))]),
    "mul": (hw.multiply, [normal(_R, (2, 3)), normal(_R, ())]),
    "div": (hw.divide, [normal(_R, (2, 3)), away(normal(_R, (3,)), margin=0.5)]),
    "pow": (hw.pow, [_POS, normal(_R, (3,))]),
    "maximum": (hw.maximum, [distinct(_R, (2, 3)), distinct(_R, (3,)) + 0.01]),
    "minimum": (hw.minimum, [distinct(_R, (2, 3)), distinct(_R, (3,)) + 0.01]),
    "mod": (hw.mod, [np.array([[1.3, -2.7, 3.2], [0.4, 5.1, -0.2]]), np.array([0.7, 1.1, -0.9])]),
    **{op: _unary(op) for op in _UNARY},
    "gelu": (F.gelu, [normal(_R, (5,))]),
    "cast": (lambda x: hw.cast(hw.cast(x, "float32"), "float64"), [np.array([0.25, -1.5, 3.0])]),
    "clip": (lambda x: hw.clip(x, -0.5, 0.5), [np.array([-1.0, -0.3, 0.2, 0.9])]),
    "where": (lambda x, y: hw.where(hw.to_tensor([[True, False, True]]), x, y), [normal(_R, (2, 3)),
                                                                                  normal(_R, (3,))]),
    "sum": (lambda x: hw.sum(x, axis=-1), [normal(_R, (2, 3))]),
    "mean": (lambda x: hw.mean(x, axis=[0, 2], keepdim=True), [normal(_R, (2, 3, 2))]),
    "max": (lambda x: hw.max(x, axis=0), [distinct(_R, (3, 4))]),
    "min": (lambda x: hw.min(x, axis=1, keepdim=True), [distinct(_R, (3, 4))]),
    "prod": (lambda x: hw.prod(x, axis=1), [np.array([[1.5, 0.0, -2.0], [0.5, 2.0, 0.7]])]),
    "cumsum": (lambda x: hw.cumsum(x, axis=1, reverse=True), [normal(_R, (2, 4))]),
    "cumprod": (lambda x: hw.cumprod(x, dim=1), [np.array([[1.5, 0.0, -2.0, 0.3], [0.5, 2.0, 0.7, 0.0]])]),
    "reshape": (lambda x: hw.reshape(x, [3, 2]), [normal(_R, (2, 3))]),
    "transpose": (lambda x: hw.transpose(x, [2, 0, 1]), [normal(_R, (2, 3, 4))]),
    "expand": (lambda x: hw.expand(x, [2, 3, 4]), [normal(_R, (3, 1))]),
    "concat": (lambda a, b: hw.concat([a, b], axis=-1), [normal(_R, (2, 3)), normal(_R, (2, 1))]),
    "split": (lambda x: hw.split(x, [1, 3], axis=1)[1], [normal(_R, (2, 4))]),
    "slice": (lambda x: x[::-2, 1:], [normal(_R, (5, 3))]),
    "pad": (lambda x: hw.pad(x, [1, 2, 0, 1], mode="reflect"), [normal(_R, (3, 4))]),
    "gather": (lambda x: hw.gather(x, hw.to_tensor(ints([2, 0, 2, -1])), axis=1), [normal(_R, (2, 3))]),
    "gather_elements": (lambda x: hw.take_along_axis(x, hw.to_tensor(ints([[0, 0], [2, 1]])), 1),
                        [normal(_R, (2, 3))]),
    "gather_nd": (lambda x: hw.gather_nd(x, hw.to_tensor(ints([[1, 0], [0, 2], [1, 0]]))), [normal(_R, (2, 3))]),
    "scatter_elements": (lambda x, u: hw.put_along_axis(x, hw.to_tensor(ints([[2], [0]])), u, 1),
                         [normal(_R, (2, 3)), normal(_R, (2, 1))]),
    "scatter_nd": (lambda x, u: hw.scatter_nd_add(x, hw.to_tensor(ints([[1], [1], [0]])), u),
                   [normal(_R, (2, 3)), normal(_R, (3, 3))]),
    "topk": (lambda x: hw.topk(x, 2, axis=0)[0], [distinct(_R, (4, 3))]),
    "matmul": (lambda a, b: hw.matmul(a, b, transpose_y=True), [normal(_R, (2, 2, 3)), normal(_R, (4, 3))]),
    "softmax": (lambda x: F.softmax(x, axis=0), [normal(_R, (3, 4))]),
    "log_softmax": (lambda x: F.log_softmax(x, axis=-1), [normal(_R, (3, 4))]),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, [3, 4], w, b), [normal(_R, (2, 3, 4)), normal(_R, (3, 4)),
                                                                   normal(_R, (3, 4))]),
    "batch_norm": (lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b),
                   [normal(_R, (2, 3, 2, 2)), normal(_R, (3,)), _POS[0], normal(_R, (3,)), normal(_R, (3,))]),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), [normal(_R, (1, 2, 5, 5)),
                                                                          normal(_R, (3, 2, 3, 3)), normal(_R, (3,))]),
    "conv_transpose2d": (lambda x, w, b: F.conv2d_transpose(x, w, b, stride=2, padding=1, output_padding=1),
                         [normal(_R, (1, 2, 3, 3)), normal(_R, (2, 3, 3, 3)), normal(_R, (3,))]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 3, 2, 1), [distinct(_R, (1, 2, 5, 5))]),
    "adaptive_max_pool2d": (lambda x: F.adaptive_max_pool2d(x, (2, 3)), [distinct(_R, (1, 2, 5, 4))]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, 2, 1), [normal(_R, (1, 2, 5, 5))]),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (2, 3)), [normal(_R, (1, 2, 5, 7))]),
    "lrn": (lambda x: F.local_response_norm(x, 3, alpha=0.5, beta=0.75, k=1.5), [normal(_R, (2, 4, 2, 3))]),
    "resize": (lambda x: resize(x, (1, 2, 5, 3), "linear"), [normal(_R, (1, 2, 3, 4))]),
    # a world of one process here (tests/test_distributed.py checks them across ranks, with SyncBatchNorm)
    "all_reduce": (lambda x: _collective("all_reduce", x, op="avg"), [normal(_R, (2, 3))]),
    "broadcast": (lambda x: _collective("broadcast", x, root=0), [normal(_R, (3,))]),
}

#: Ops of the op set with float results and no vjp rule, and why. Integer- and bool-only ops (comparisons, logical
#: and bitwise ops, argmax) have no gradient by nature and are recognised by their dtypes, not listed here.
NO_RULE = {
    # kernel ops of training itself: the gradient of max pooling, and the optimizers' fused updates; they run in
    # backward() and in step(), never in a function that is differentiated (no second derivative through them)
    "max_pool2d_grad", "adaptive_max_pool2d_grad", "sgd_update", "momentum_update", "adam_update",
}


#: Rules of ops recorded only while tracing (graph control flow): checked against finite differences through
#: to_static train steps in tests/test_control_flow_grad.py
TRACED_ONLY = {"cond", "while_loop"}


def test_every_rule_has_a_case_and_every_case_a_rule():
    assert set(EXAMPLES) | TRACED_ONLY == set(autograd.RULES)


@pytest.mark.parametrize("op", sorted(EXAMPLES))
def test_rule_against_finite_differences(op):
    fn, arrays = EXAMPLES[op]
    eps = 1e-3 if op == "cast" else 1e-6  # through float32: a larger step, so rounding stays below the tolerance
    check(fn, *arrays, op=op, eps=eps, atol=1e-4 if op == "cast" else 1e-6)


def _float_result(op) -> bool:
    """True unless op only ever returns integers or bools: comparisons and logical ops (bool), bitwise ops and shifts
    (which admit no float input), argmax/argmin (int64 whatever they are given)."""
    if op in meta.BOOL_RESULT:
        return False
    admits = admit.ADMITS.get(op)
    if admits is not None and not admits.dtypes & admit.FLOAT:
        return False
    if op in ("argmax", "argmin"):
        return meta.RULES[op](((2, 3),), (np.dtype("float64"),), {"axis": 1})[0][1].kind == "f"
    return True


def test_the_ops_without_a_rule_are_exactly_the_listed_ones():
    """A new op with float results fails here until it has a rule (or joins NO_RULE with its reason)."""
    missing = {op for op in meta.RULES if _float_result(op) and op not in autograd.RULES}
    assert missing == NO_RULE


def test_integer_only_ops_refuse_floats_or_return_no_floats():
    """What _float_result calls integer-only is so: such ops give no float result from a float input."""
    x = hw.to_tensor(np.array([[1.0, 2.0, 3.0]]))
    x.stop_gradient = False
    for op in ("argmax", "argmin"):
        assert getattr(hw, op)(x, axis=1).dtype == hw.int64
    assert hw.greater_than(x, x).dtype == hw.bool
    assert not _float_result("bitwise_and") and not _float_result("left_shift") and _float_result("add")


def test_an_op_without_a_rule_is_refused_naming_it():
    x = hw.to_tensor(np.ones((1, 1, 4, 4)))
    x.stop_gradient = False
    y = F.max_pool2d(x, 2)
    g = dispatch("max_pool2d_grad", (x, hw.ones_like(y)), {"kernel_size": (2, 2), "stride": (2, 2),
                                                             "padding": (0, 0, 0, 0), "ceil_mode": False})
    with pytest.raises(hw.InvalidArgumentError, match="'max_pool2d_grad'.*no gradient rule.*Fix:"):
        g.sum().backward()


def test_rules_that_refuse_some_attributes_say_so():
    x = hw.to_tensor(np.ones((2, 3)))
    x.stop_gradient = False
    y = hw.put_along_axis(x, hw.to_tensor(ints([[0], [1]])), 2.0, 1, reduce="mul")
    with pytest.raises(hw.InvalidArgumentError, match="scatter_elements.*'mul'.*Fix:"):
        y.sum().backward()


# --- elementwise: broadcasting, zero-size tensors, 0-d -----------------------------------------------------------
SEED = st.integers(0, 2**32 - 1)
BROADCAST = hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=3)
SHAPE = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


def _binary_inputs(op, rng, sx, sy):
    x, y = normal(rng, sx), normal(rng, sy)
    if op == "div":
        y = away(y, margin=0.4)
    elif op == "pow":
        x, y = np.abs(x) + 0.5, np.clip(y, -2, 2)
    elif op in ("maximum", "minimum"):  # on two interleaved grids: never a tie
        x, y = np.round(x * 4) / 4, np.round(y * 4) / 4 + 0.125
    elif op == "mod":  # x / y away from whole numbers, where mod jumps
        y = np.where(rng.random(sy) < 0.5, -1.0, 1.0) * rng.uniform(0.6, 1.4, sy)
        for _ in range(100):
            q = np.broadcast_to(x, np.broadcast_shapes(sx, sy)) / y
            if np.all(np.abs(q - np.round(q)) > 0.02):
                break
            x = normal(rng, sx)
        else:
            pytest.skip("no mod case away from its jumps")  # hypothesis never got here in practice
    return x, y


@prop(op=st.sampled_from(["add", "sub", "mul", "div", "pow", "maximum", "minimum", "mod"]), shapes=BROADCAST,
       seed=SEED)
def test_binary_broadcast(op, shapes, seed):
    (sx, sy), _ = shapes
    rng = np.random.default_rng(seed)
    x, y = _binary_inputs(op, rng, sx, sy)
    fn = {"add": hw.add, "sub": hw.subtract, "mul": hw.multiply, "div": hw.divide, "pow": hw.pow,
          "maximum": hw.maximum, "minimum": hw.minimum, "mod": hw.mod}[op]
    check(fn, x, y, seed=seed)


def _unary_input(op, rng, shape):
    x = normal(rng, shape)
    if op in ("log", "sqrt", "rsqrt", "reciprocal"):
        return np.abs(x) + 0.3
    if op in ("asin", "acos", "atanh"):
        return rng.uniform(-0.85, 0.85, shape)
    if op == "acosh":
        return np.abs(x) + 1.2
    if op == "tan":
        return rng.uniform(-1.2, 1.2, shape)
    if op in ("abs", "relu", "sign"):
        return away(x)
    if op in ("floor", "ceil", "round"):  # fractional parts .1, .35, .6, .85: off every step of the three
        return np.floor(x * 4) / 4 + 0.1
    return x


@prop(op=st.sampled_from(_UNARY + ["gelu", "gelu_tanh"]), shape=SHAPE, seed=SEED)
def test_unary(op, shape, seed):
    rng = np.random.default_rng(seed)
    fn = {"gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate=True)}.get(op) or getattr(hw, op)
    check(fn, _unary_input(op, rng, shape), seed=seed)


@prop(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=0, max_side=3),
       seed=SEED)
def test_where_broadcast(shapes, seed):
    (sc, sx, sy), _ = shapes
    rng = np.random.default_rng(seed)
    cond = hw.to_tensor(rng.random(sc) < 0.5)
    check(lambda x, y: hw.where(cond, x, y), normal(rng, sx), normal(rng, sy), seed=seed)


@prop(shape=SHAPE, lo=st.sampled_from([None, -0.6, 0.1]), hi=st.sampled_from([None, 0.55, 1.3]), seed=SEED)
def test_clip(shape, lo, hi, seed):
    rng = np.random.default_rng(seed)
    x = away(normal(rng, shape), [b for b in (lo, hi) if b is not None], margin=0.02)
    check(lambda t: hw.clip(t, lo, hi), x, seed=seed)


# --- reductions and scans ----------------------------------------------------------------------------------------
@st.composite
def reduction_case(draw, nonempty=False):
    """(shape, axis) with axis None, an int or a list of distinct axes, any of them negative."""
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=1 if nonempty else 0, max_side=4))
    nd = len(shape)
    if nd == 0:
        return shape, draw(st.sampled_from([None, 0, -1]))
    axes = draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
    signed = [a - nd if draw(st.booleans()) else a for a in axes]
    return shape, draw(st.sampled_from([None, signed[0], signed]))


@prop(op=st.sampled_from(["sum", "mean", "max", "min", "prod"]), data=st.data(), keepdim=st.booleans(), seed=SEED)
def test_reduction(op, data, keepdim, seed):
    shape, axis = data.draw(reduction_case(nonempty=op in ("max", "min", "mean")))
    rng = np.random.default_rng(seed)
    if op in ("max", "min"):
        x = distinct(rng, shape)
    elif op == "prod":  # some exact zeros: the rule must be exact there too (no division by x)
        x = np.where(rng.random(shape) < 0.2, 0.0, rng.uniform(0.5, 1.5, shape) * np.sign(normal(rng, shape)))
    else:
        x = normal(rng, shape)
    check(lambda t: getattr(hw, op)(t, axis=axis, keepdim=keepdim), x, seed=seed)


@prop(op=st.sampled_from(["cumsum", "cumprod"]), shape=SHAPE, data=st.data(), exclusive=st.booleans(),
       reverse=st.booleans(), seed=SEED)
def test_scan(op, shape, data, exclusive, reverse, seed):
    nd = max(len(shape), 1)
    axis = data.draw(st.one_of(st.none(), st.integers(-nd, nd - 1)))
    rng = np.random.default_rng(seed)
    x = normal(rng, shape)
    if op == "cumprod":  # zeros too (one, two in a row, several): the gradient is exact through them
        x = np.where(rng.random(shape) < 0.25, 0.0, rng.uniform(0.5, 1.5, shape) * np.sign(x))
    fn = hw.cumsum if op == "cumsum" else (lambda t, **k: hw.cumprod(t, dim=k.pop("axis"), **k))
    check(lambda t: fn(t, axis=axis, exclusive=exclusive, reverse=reverse), x, seed=seed)


# --- data movement -----------------------------------------------------------------------------------------------
@prop(shape=SHAPE, data=st.data(), seed=SEED)
def test_reshape_transpose_expand(shape, data, seed):
    rng = np.random.default_rng(seed)
    perm = data.draw(st.permutations(range(len(shape))))
    grown = [data.draw(st.sampled_from([s, 2])) if s == 1 else s for s in shape]
    lead = data.draw(st.lists(st.integers(1, 2), max_size=2))

    def fn(t):  # (paddle's reshape reads a 0 as "keep this axis": zero-size shapes are flattened instead)
        a = hw.reshape(t, list(reversed(shape))) if 0 not in shape else hw.flatten(t)
        b = hw.transpose(hw.reshape(a, list(shape)), list(perm)) if 0 not in shape else t
        return hw.expand(t, lead + grown) + hw.sum(b)
    check(fn, normal(rng, shape), seed=seed)


@prop(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4), data=st.data(), seed=SEED)
def test_concat_split(shape, data, seed):
    rng = np.random.default_rng(seed)
    nd = len(shape)
    axis = data.draw(st.integers(-nd, nd - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    parts = []
    for s in sizes:
        p = list(shape)
        p[axis] = s
        parts.append(normal(rng, p))
    cuts = data.draw(st.lists(st.integers(0, sum(sizes)), min_size=1, max_size=2))
    sections = np.diff([0, *sorted(cuts), sum(sizes)]).tolist()

    def fn(*ts):
        whole = hw.concat(list(ts), axis=axis)
        pieces = hw.split(whole, sections, axis=axis)
        return [p * float(k + 1) for k, p in enumerate(pieces)]  # each piece its own cotangent (and some unused)
    check(fn, *parts, seed=seed)


@st.composite
def slice_key(draw, size):
    step = draw(st.sampled_from([1, 2, 3, -1, -2, -3]))
    bound = st.one_of(st.none(), st.integers(-size - 2, size + 2))
    return slice(draw(bound), draw(bound), step)


@prop(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5), data=st.data(), seed=SEED)
def test_slice_with_steps(shape, data, seed):
    key = tuple(data.draw(slice_key(s)) for s in shape)
    check(lambda t: t[key], normal(np.random.default_rng(seed), shape), seed=seed)


@prop(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), data=st.data(),
       mode=st.sampled_from(["constant", "reflect", "replicate", "circular"]), seed=SEED)
def test_pad_modes(shape, data, mode, seed):
    limit = {"reflect": lambda s: s - 1, "circular": lambda s: s}.get(mode, lambda s: 3)
    pads = []
    for s in shape:
        pads += [data.draw(st.integers(0, min(limit(s), 3))), data.draw(st.integers(0, min(limit(s), 3)))]
    check(lambda t: hw.pad(t, pads, mode=mode, value=0.5), normal(np.random.default_rng(seed), shape), seed=seed)


@prop(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), data=st.data(), seed=SEED)
def test_gather_family(shape, data, seed):
    rng = np.random.default_rng(seed)
    nd = len(shape)
    axis = data.draw(st.integers(-nd, nd - 1))
    n = shape[axis]
    x = normal(rng, shape)
    index = hw.to_tensor(rng.integers(-n, n, data.draw(hnp.array_shapes(min_dims=0, max_dims=2, min_side=0,
                                                                         max_side=3))))
    check(lambda t: hw.gather(t, index, axis=axis), x, seed=seed)
    along = list(shape)
    along[axis] = data.draw(st.integers(0, 4))
    idx = hw.to_tensor(rng.integers(0, n, along))  # repeated indices: their gradients add up
    check(lambda t: hw.take_along_axis(t, idx, axis), x, seed=seed)
    k = data.draw(st.integers(1, nd))
    coords = hw.to_tensor(np.stack([rng.integers(0, s, (3,)) for s in shape[:k]], axis=-1))
    check(lambda t: hw.gather_nd(t, coords), x, seed=seed)


@prop(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), data=st.data(),
       reduce=st.sampled_from(["assign", "add"]), seed=SEED)
def test_scatter_family(shape, data, reduce, seed):
    rng = np.random.default_rng(seed)
    nd = len(shape)
    axis = data.draw(st.integers(-nd, nd - 1))
    along = list(shape)
    along[axis] = data.draw(st.integers(0, 3))
    idx = hw.to_tensor(rng.integers(0, shape[axis], along))  # repeated: with 'assign' one of them wins
    check(lambda t, u: hw.put_along_axis(t, idx, u, axis, reduce=reduce), normal(rng, shape), normal(rng, along),
          seed=seed)
    k = data.draw(st.integers(1, nd))
    coords = np.stack([rng.integers(0, s, (3,)) for s in shape[:k]], axis=-1)
    updates = normal(rng, (3,) + tuple(shape[k:]))
    fn = hw.scatter_nd_add if reduce == "add" else scatter_nd
    check(lambda t, u: fn(t, hw.to_tensor(coords), u), normal(rng, shape), updates, seed=seed)


@prop(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), data=st.data(), seed=SEED)
def test_topk(shape, data, seed):
    nd = len(shape)
    axis = data.draw(st.integers(-nd, nd - 1))
    k = data.draw(st.integers(0, shape[axis]))
    largest, ordered = data.draw(st.booleans()), data.draw(st.booleans())
    x = distinct(np.random.default_rng(seed), shape)
    check(lambda t: hw.topk(t, k, axis=axis, largest=largest, sorted=ordered)[0], x, seed=seed)


# --- linear algebra, normalisation, convolution, pooling ----------------------------------------------------------
@st.composite
def matmul_case(draw):
    m, k, n = draw(st.integers(0, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=2))[0]
    kind = draw(st.sampled_from(["mm", "vec-mat", "mat-vec", "vec-vec"]))
    tx, ty = draw(st.booleans()), draw(st.booleans())
    sx = (k,) if kind.startswith("vec") else tuple(batch[0]) + ((k, m) if tx else (m, k))
    sy = (k,) if kind.endswith("vec") else tuple(batch[1]) + ((n, k) if ty else (k, n))
    return sx, sy, tx, ty


@prop(case=matmul_case(), seed=SEED)
def test_matmul(case, seed):
    sx, sy, tx, ty = case
    rng = np.random.default_rng(seed)
    check(lambda a, b: hw.matmul(a, b, transpose_x=tx, transpose_y=ty), normal(rng, sx), normal(rng, sy), seed=seed)


@prop(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4), data=st.data(), seed=SEED)
def test_softmax_and_layer_norm(shape, data, seed):
    rng = np.random.default_rng(seed)
    nd = len(shape)
    axis = data.draw(st.integers(-nd, nd - 1))
    x = normal(rng, shape)
    check(lambda t: F.softmax(t, axis), x, seed=seed)
    check(lambda t: F.log_softmax(t, axis), x, seed=seed)
    k = data.draw(st.integers(1, nd))
    norm = list(shape[nd - k:])
    affine = data.draw(st.booleans())
    params = [normal(rng, norm), normal(rng, norm)] if affine else []
    if math.prod(norm) > 1:  # one element normalises to 0 whatever it is: its derivative is 0, but FD rounds
        check(lambda t, *wb: F.layer_norm(t, norm, *wb, epsilon=1e-3), x, *params, seed=seed)


@prop(shape=hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=3), training=st.booleans(),
       channels_last=st.booleans(), seed=SEED)
def test_batch_norm(shape, training, channels_last, seed):
    """Inference (the batch_norm op and its rule) and training (batch statistics, a composition of ops)."""
    rng = np.random.default_rng(seed)
    fmt = {2: "NC", 3: "NCL", 4: "NCHW"}[len(shape)]
    if channels_last:
        fmt = {2: "NC", 3: "NLC", 4: "NHWC"}[len(shape)]
    c = shape[1] if fmt.startswith("NC") else shape[-1]
    x, w, b = normal(rng, shape), normal(rng, (c,)), normal(rng, (c,))
    if training and math.prod(shape) // c < 2:
        return  # one element per channel normalises to 0 exactly: no derivative to measure
    mean, var = hw.to_tensor(normal(rng, (c,))), hw.to_tensor(rng.uniform(0.5, 2, (c,)))
    check(lambda t, wt, bt: F.batch_norm(t, mean, var, wt, bt, training=training, data_format=fmt, epsilon=1e-3),
          x, w, b, seed=seed)
    if not training:
        check(lambda m, v: F.batch_norm(hw.to_tensor(x), m, v, hw.to_tensor(w), hw.to_tensor(b), data_format=fmt),
              normal(rng, (c,)), rng.uniform(0.5, 2, (c,)), seed=seed)


@st.composite
def conv_case(draw, transpose=False):
    groups = draw(st.integers(1, 2))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride, dilation = (draw(st.integers(1, 3)), draw(st.integers(1, 2))), (draw(st.integers(1, 2)),
                                                                              draw(st.integers(1, 2)))
    if transpose:
        h, w = draw(st.integers(1, 3)), draw(st.integers(1, 3))
        # paddings that leave a non-empty result: at most half of (size - 1) * stride + (k - 1) * dilation
        pad = tuple(draw(st.integers(0, min(k - 1, ((n - 1) * s + (k - 1) * d) // 2)))
                    for n, k, s, d in zip((h, w), (kh, kw), stride, dilation))
        outpad = tuple(draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation))
        return dict(groups=groups, cin=cin, cout=cout, k=(kh, kw), stride=stride, dilation=dilation, padding=pad,
                    output_padding=outpad, hw=(h, w), n=draw(st.integers(1, 2)))
    pad = draw(st.one_of(st.integers(0, 2), st.lists(st.integers(0, 2), min_size=4, max_size=4),
                         st.sampled_from(["SAME", "VALID"])))
    h = draw(st.integers((kh - 1) * dilation[0] + 1, 6))
    w = draw(st.integers((kw - 1) * dilation[1] + 1, 6))
    return dict(groups=groups, cin=cin, cout=cout, k=(kh, kw), stride=stride, dilation=dilation, padding=pad,
                hw=(h, w), n=draw(st.integers(1, 2)))


@prop(case=conv_case(), bias=st.booleans(), seed=SEED)
def test_conv2d(case, bias, seed):
    rng = np.random.default_rng(seed)
    x = normal(rng, (case["n"], case["cin"]) + case["hw"])
    w = normal(rng, (case["cout"], case["cin"] // case["groups"]) + case["k"])
    extra = [normal(rng, (case["cout"],))] if bias else []
    check(lambda a, b, *c: F.conv2d(a, b, *c, stride=case["stride"], padding=case["padding"],
                                    dilation=case["dilation"], groups=case["groups"]), x, w, *extra, seed=seed)


@prop(case=conv_case(transpose=True), bias=st.booleans(), seed=SEED)
def test_conv2d_transpose(case, bias, seed):
    rng = np.random.default_rng(seed)
    x = normal(rng, (case["n"], case["cin"]) + case["hw"])
    w = normal(rng, (case["cin"], case["cout"] // case["groups"]) + case["k"])
    extra = [normal(rng, (case["cout"],))] if bias else []
    check(lambda a, b, *c: F.conv2d_transpose(a, b, *c, stride=case["stride"], padding=case["padding"],
                                              output_padding=case["output_padding"], dilation=case["dilation"],
                                              groups=case["groups"]), x, w, *extra, seed=seed)


@st.composite
def pool_case(draw):
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = [draw(st.integers(0, kh // 2)), draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2)),
           draw(st.integers(0, kw // 2))]
    h, w = draw(st.integers(max(kh - pad[0] - pad[1], 1), 6)), draw(st.integers(max(kw - pad[2] - pad[3], 1), 6))
    return (draw(st.integers(1, 2)), draw(st.integers(1, 2)), h, w), (kh, kw), stride, pad, draw(st.booleans())


@prop(case=pool_case(), exclusive=st.booleans(), seed=SEED)
def test_pooling(case, exclusive, seed):
    shape, k, stride, pad, ceil = case
    rng = np.random.default_rng(seed)
    x = distinct(rng, shape)
    check(lambda t: F.max_pool2d(t, k, stride, pad, ceil_mode=ceil), x, seed=seed)
    check(lambda t: F.avg_pool2d(t, k, stride, pad, ceil_mode=ceil, exclusive=exclusive), x, seed=seed)


@prop(shape=hnp.array_shapes(min_dims=4, max_dims=4, min_side=1, max_side=5), out=st.tuples(
    st.integers(1, 6), st.integers(1, 6)), seed=SEED)
def test_adaptive_pooling(shape, out, seed):
    shape = (min(shape[0], 2), min(shape[1], 2)) + shape[2:]
    x = distinct(np.random.default_rng(seed), shape)
    check(lambda t: F.adaptive_avg_pool2d(t, out), x, seed=seed)
    check(lambda t: F.adaptive_max_pool2d(t, out), x, seed=seed)


@prop(shape=hnp.array_shapes(min_dims=3, max_dims=4, min_side=1, max_side=4), size=st.integers(1, 5),
       beta=st.sampled_from([0.5, 0.75, 1.0]), seed=SEED)
def test_lrn(shape, size, beta, seed):
    x = normal(np.random.default_rng(seed), shape)
    check(lambda t: F.local_response_norm(t, size, alpha=0.3, beta=beta, k=1.2), x, seed=seed)


RESIZE_MODES = ["nearest", "linear", "cubic"]
COORDS = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel", "half_pixel_symmetric"]


@prop(shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=4), data=st.data(),
       mode=st.sampled_from(RESIZE_MODES), coord=st.sampled_from(COORDS), seed=SEED)
def test_resize(shape, data, mode, coord, seed):
    sizes = tuple(data.draw(st.integers(1, 6)) for _ in shape)
    x = normal(np.random.default_rng(seed), shape)
    if mode == "nearest":  # half a pixel from a sample: no rounding flips under a step of 1e-6 (it never does)
        attrs = {"nearest_mode": data.draw(st.sampled_from(["round_prefer_floor", "round_prefer_ceil", "floor",
                                                            "ceil"]))}
    else:
        attrs = {"antialias": data.draw(st.booleans()), "exclude_outside": data.draw(st.booleans())}
    check(lambda t: resize(t, sizes, mode, coordinate_transformation_mode=coord, **attrs), x, seed=seed)


# --- compositions the frontend builds from the op set -------------------------------------------------------------
def test_compositions():
    rng = np.random.default_rng(5)
    x, w, b = normal(rng, (4, 3)), normal(rng, (3, 2)), normal(rng, (2,))
    check(lambda a, c, d: F.linear(a, c, d), x, w, b)
    table = normal(rng, (5, 3))
    ids = hw.to_tensor(ints([[0, 4], [4, 2]]))
    check(lambda t: F.embedding(ids, t), table)
    check(lambda t: hw.squeeze(hw.unsqueeze(hw.flatten(t), 0), 0) * 2.0, x)


# --- more examples (make test-slow) -------------------------------------------------------------------------------
globals().update(_SLOW)
