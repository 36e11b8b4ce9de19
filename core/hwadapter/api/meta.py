"""What every op of the op set returns: (input shapes, input dtypes, attrs) -> the (shape, dtype) of each output.

The dispatcher checks every kernel's result against these rules before anyone sees it; a plugin may use them to
size its outputs. They describe kernels as the frontend calls them (see ops/reference.py: attributes normalised,
the inputs of binary ops of one dtype), with the reference kernels' attribute defaults;
tests/test_kernel_results.py checks them against the reference kernels so that they cannot drift apart.
"""
from __future__ import annotations

import math

import numpy as np

from . import control as _control, shapes as _shapes, vjp_meta
from .collectives import COLLECTIVE_OPS
from .errors import InvalidArgumentError, UnsupportedDTypeError

BOOL = np.dtype(np.bool_)
INT64 = np.dtype(np.int64)

#: Ops whose result has the shape and dtype of their first input, x.
SAME_AS_X = frozenset({"abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu",
                        "gelu", "erf", "sin", "cos", "floor", "ceil", "round", "sign", "clip", "softmax",
                        "log_softmax", "layer_norm", "batch_norm", "tan", "asin", "acos", "atan", "sinh", "cosh",
                        "asinh", "acosh", "atanh", "bitwise_not", "cumsum", "cumprod", "lrn", "scatter_elements",
                        "scatter_nd"})
#: Binary ops whose result is broadcast and of the inputs' (promoted) dtype.
ARITHMETIC = frozenset({"add", "sub", "mul", "div", "pow", "maximum", "minimum", "mod", "bitwise_and", "bitwise_or",
                        "bitwise_xor", "left_shift", "right_shift"})
#: Ops whose result is broadcast (or of the input's shape) and bool.
BOOL_RESULT = frozenset({"equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
                         "logical_or", "logical_xor", "logical_not"})
#: Ops that return a list of arrays; every other op returns one array.
MULTI_OUTPUT = frozenset({"split", "topk", "momentum_update", "adam_update"})


def _same(shapes, dtypes, attrs):
    return ((shapes[0], dtypes[0]),)


def _elementwise(shapes, dtypes, attrs):
    return ((_shapes.broadcast("op", *shapes), np.result_type(*dtypes)),)


def _boolean(shapes, dtypes, attrs):
    return ((_shapes.broadcast("op", *shapes), BOOL),)


def _where(shapes, dtypes, attrs):
    return ((_shapes.broadcast("where", *shapes), np.result_type(*dtypes[1:])),)


def _cast(shapes, dtypes, attrs):
    return ((shapes[0], np.dtype(attrs["dtype"])),)


def _axes(axis, ndim: int) -> tuple:
    """The reduced axes, non-negative: None is all of them (as the reference kernels, which pass it to numpy)."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(int(a) % ndim for a in axes) if ndim else ()


def _reduction(shapes, dtypes, attrs):
    shape = shapes[0]
    return ((_shapes.reduce(shape, _axes(attrs["axis"], len(shape)), bool(attrs.get("keepdim", False))),
             dtypes[0]),)


def _arg_reduction(shapes, dtypes, attrs):
    shape, axis, keep = shapes[0], attrs.get("axis"), bool(attrs.get("keepdim", False))
    if axis is None:  # over the flattened tensor
        return (((1,) * len(shape) if keep else (), INT64),)
    return ((_shapes.reduce(shape, _axes(axis, len(shape)), keep), INT64),)


def _matmul(shapes, dtypes, attrs):
    out = _shapes.matmul(shapes[0], shapes[1], attrs.get("transpose_x", False), attrs.get("transpose_y", False))
    if len(shapes) > 2:  # a fused bias (graph fusion): one value per output column, of the product's dtype
        _shapes.bias("matmul", shapes[2], out)
    return ((out, np.result_type(*dtypes[:2])),)


def _conv2d(shapes, dtypes, attrs):
    (n, _, h, w), (o, _, kh, kw) = shapes[0], shapes[1]
    (sh, sw), (dh, dw) = attrs.get("stride", (1, 1)), attrs.get("dilation", (1, 1))
    pt, pb, pl, pr = attrs.get("padding", (0, 0, 0, 0))
    oh = _shapes.window_out("conv2d", h, kh, sh, dh, pt + pb)
    ow = _shapes.window_out("conv2d", w, kw, sw, dw, pl + pr)
    if len(shapes) > 3:
        _shapes.residual(shapes[3], (n, o, oh, ow))
    return (((n, o, oh, ow), dtypes[0]),)


def _pool2d(shapes, dtypes, attrs):
    n, c, h, w = shapes[0]
    (kh, kw), (sh, sw) = attrs.get("kernel_size", (2, 2)), attrs.get("stride", (2, 2))
    pt, pb, pl, pr = attrs.get("padding", (0, 0, 0, 0))
    ceil = bool(attrs.get("ceil_mode", False))
    oh, ow = _shapes.pool_out(h, kh, sh, pt, pb, ceil), _shapes.pool_out(w, kw, sw, pl, pr, ceil)
    return (((n, c, oh, ow), dtypes[0]),)


def _adaptive_pool2d(shapes, dtypes, attrs):
    return ((tuple(shapes[0][:2]) + tuple(attrs.get("output_size", (1, 1))), dtypes[0]),)


def _reshape(shapes, dtypes, attrs):
    target = tuple(int(s) for s in attrs["shape"])
    if -1 in target:  # numpy's inference: the one unknown size makes the element count equal
        known = math.prod(s for s in target if s != -1)
        target = tuple(math.prod(shapes[0]) // known if s == -1 and known else s for s in target)
    return ((target, dtypes[0]),)


def _transpose(shapes, dtypes, attrs):
    return ((tuple(shapes[0][p] for p in attrs["perm"]), dtypes[0]),)


def _concat(shapes, dtypes, attrs):
    axis = attrs.get("axis", 0) % len(shapes[0])
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    return ((tuple(out), np.result_type(*dtypes)),)


def _split(shapes, dtypes, attrs):
    shape, axis = shapes[0], attrs.get("axis", 0) % len(shapes[0])
    return tuple((shape[:axis] + (int(n),) + shape[axis + 1:], dtypes[0]) for n in attrs["sections"])


def _slice(shapes, dtypes, attrs):
    """Bounds in the kernels' form (shapes.slice_bounds): absolute positions, an end of None is past position 0."""
    out = list(shapes[0])
    for axis, start, end, step in zip(attrs["axes"], attrs["starts"], attrs["ends"], attrs["steps"]):
        out[axis] = len(range(start, -1 if end is None else end, step))
    return ((tuple(out), dtypes[0]),)


def _gather(shapes, dtypes, attrs):
    shape, axis = shapes[0], attrs.get("axis", 0) % len(shapes[0])
    return ((shape[:axis] + tuple(shapes[1]) + shape[axis + 1:], dtypes[0]),)


def _expand(shapes, dtypes, attrs):
    return ((tuple(int(s) for s in attrs["shape"]), dtypes[0]),)


def _pad(shapes, dtypes, attrs):
    shape = shapes[0]
    if not shape:  # a 0-d tensor has nothing to pad
        return ((shape, dtypes[0]),)
    return ((tuple(s + int(lo) + int(hi) for s, (lo, hi) in zip(shape, attrs["pads"])), dtypes[0]),)


def _topk(shapes, dtypes, attrs):
    shape = list(shapes[0])
    shape[attrs.get("axis", -1) % len(shape)] = int(attrs["k"])
    return ((tuple(shape), dtypes[0]), (tuple(shape), INT64))


def _gather_elements(shapes, dtypes, attrs):
    return ((tuple(shapes[1]), dtypes[0]),)


def _gather_nd(shapes, dtypes, attrs):
    x, idx = shapes[0], shapes[1]
    return ((tuple(idx[:-1]) + tuple(x[attrs.get("batch_dims", 0) + idx[-1]:]), dtypes[0]),)


def _conv_transpose2d(shapes, dtypes, attrs):
    (n, _, h, w), (_, og, kh, kw) = shapes[0], shapes[1]
    (sh, sw), (dh, dw) = attrs.get("stride", (1, 1)), attrs.get("dilation", (1, 1))
    pt, pb, pl, pr = attrs.get("padding", (0, 0, 0, 0))
    oph, opw = attrs.get("output_padding", (0, 0))
    oh = (h - 1) * sh + (kh - 1) * dh + 1 - pt - pb + oph
    ow = (w - 1) * sw + (kw - 1) * dw + 1 - pl - pr + opw
    return (((n, og * attrs.get("groups", 1), oh, ow), dtypes[0]),)


def _resize(shapes, dtypes, attrs):
    return ((tuple(int(s) for s in attrs["sizes"]), dtypes[0]),)


# --- training: pooling gradients and fused optimizer updates (kernel ops the autograd engine and the optimizers
# dispatch themselves, with no frontend function to validate them first: their rules check everything, and their
# kernels call the rules before they run) -----------------------------------------------------------------------
FLOATS = frozenset(np.dtype(d) for d in ("float16", "float32", "float64"))


def _known(op: str, attrs: dict, allowed) -> None:
    unknown = sorted(set(attrs) - set(allowed))
    if unknown:
        raise InvalidArgumentError(f"{op}: unknown attribute(s) {unknown}; it takes {sorted(allowed)}. Fix: pass only "
                                   f"those (check the spelling)")


def _one_float(op: str, names: tuple, shapes, dtypes) -> None:
    """`names` inputs (no more, no fewer), all of one float dtype."""
    if len(shapes) != len(names):
        raise InvalidArgumentError(f"{op}: takes {len(names)} inputs ({', '.join(names)}), got {len(shapes)}. "
                                   f"Fix: pass exactly those, in that order")
    if dtypes[0] not in FLOATS:
        raise UnsupportedDTypeError(f"{op}: {names[0]} must be float16, float32 or float64, got {dtypes[0].name}. "
                                    f"Fix: cast it to a float dtype first")
    for name, d in zip(names[1:], dtypes[1:]):
        if d != dtypes[0]:
            raise UnsupportedDTypeError(f"{op}: {name} is {d.name} but {names[0]} is {dtypes[0].name}; every input "
                                        f"must have one dtype. Fix: cast {name} to {dtypes[0].name}")


def _nchw(op: str, shape: tuple) -> tuple:
    if len(shape) != 4:
        raise InvalidArgumentError(f"{op}: x must be 4-D (N, C, H, W), got shape {shape}. Fix: reshape it to NCHW")
    return shape


def _grad_of(op: str, grad: tuple, out: tuple, forward: str) -> None:
    if tuple(grad) != tuple(out):
        raise InvalidArgumentError(f"{op}: grad has shape {tuple(grad)}, but {forward} of x with these attributes "
                                   f"gives {tuple(out)}. Fix: pass the gradient of that {forward}'s output")


def pool_grad_attrs(op: str, attrs: dict) -> tuple:
    """(kernel_size, stride, padding, ceil_mode) of max_pool2d_grad, checked: positive pairs, four paddings of at
    most half the kernel (so that every window holds an element of x), a bool."""
    _known(op, attrs, ("kernel_size", "stride", "padding", "ceil_mode"))
    k = _shapes.int_list(op, "kernel_size", attrs.get("kernel_size", (2, 2)), length=2, low=1)
    s = _shapes.int_list(op, "stride", attrs.get("stride", (2, 2)), length=2, low=1)
    pads = _shapes.int_list(op, "padding", attrs.get("padding", (0, 0, 0, 0)), length=4, low=0)
    ceil = _shapes.flag(op, "ceil_mode", attrs.get("ceil_mode", False))
    if max(pads[0], pads[1]) > k[0] // 2 or max(pads[2], pads[3]) > k[1] // 2:
        raise InvalidArgumentError(f"{op}: padding {pads} must be at most half the kernel {k}. Fix: pad less, or "
                                   f"use a larger kernel")
    return k, s, pads, ceil


def _max_pool2d_grad(shapes, dtypes, attrs):
    op = "max_pool2d_grad"
    _one_float(op, ("x", "grad"), shapes, dtypes)
    n, c, h, w = _nchw(op, shapes[0])
    (kh, kw), (sh, sw), (pt, pb, pl, pr), ceil = pool_grad_attrs(op, attrs)
    _shapes.window_out(op, h, kh, sh, 1, pt + pb, ceil)  # a window larger than the padded input is an error
    _shapes.window_out(op, w, kw, sw, 1, pl + pr, ceil)
    out = (n, c, _shapes.pool_out(h, kh, sh, pt, pb, ceil), _shapes.pool_out(w, kw, sw, pl, pr, ceil))
    _grad_of(op, shapes[1], out, "max_pool2d")
    return ((shapes[0], dtypes[0]),)


def _adaptive_max_pool2d_grad(shapes, dtypes, attrs):
    op = "adaptive_max_pool2d_grad"
    _one_float(op, ("x", "grad"), shapes, dtypes)
    n, c, h, w = _nchw(op, shapes[0])
    _known(op, attrs, ("output_size",))
    size = _shapes.int_list(op, "output_size", attrs.get("output_size", (1, 1)), length=2, low=1)
    if not h * w:
        raise InvalidArgumentError(f"{op}: x has an empty spatial size {(h, w)}: no window has a maximum. Fix: pool "
                                   f"a non-empty input")
    _grad_of(op, shapes[1], (n, c) + size, "adaptive_max_pool2d")
    return ((shapes[0], dtypes[0]),)


#: The attributes of each optimizer update: name -> (default, kind): "bool", "rate" (a finite number >= 0) or
#: "beta" (a number in [0, 1)).
UPDATE_ATTRS = {
    "sgd_update": {"weight_decay": (0.0, "rate")},
    "momentum_update": {"momentum": (0.9, "rate"), "use_nesterov": (False, "bool"), "weight_decay": (0.0, "rate")},
    "adam_update": {"beta1": (0.9, "beta"), "beta2": (0.999, "beta"), "epsilon": (1e-8, "rate"),
                    "weight_decay": (0.0, "rate"), "decoupled": (False, "bool")},
}
#: The inputs of each update: those of param's shape, then the one-element scalars (0-d or shape (1,)).
UPDATE_INPUTS = {
    "sgd_update": (("param", "grad"), ("lr",)),
    "momentum_update": (("param", "grad", "velocity"), ("lr",)),
    "adam_update": (("param", "grad", "m", "v"), ("lr", "beta1_pow", "beta2_pow")),
}
_NUMBER = (int, float, np.integer, np.floating)


def update_attrs(op: str, attrs: dict) -> dict:
    """op's attributes checked, with their defaults filled in."""
    spec = UPDATE_ATTRS[op]
    _known(op, attrs, spec)
    out = {}
    for name, (default, kind) in spec.items():
        value = attrs.get(name, default)
        if kind == "bool":
            out[name] = _shapes.flag(op, name, value)
            continue
        ok = isinstance(value, _NUMBER) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)
        low_ok = ok and value >= 0
        if not (low_ok and (kind == "rate" or value < 1)):
            want = "a finite number >= 0" if kind == "rate" else "a number in [0, 1)"
            raise InvalidArgumentError(f"{op}: {name} must be {want}, not {_shapes.show(value)}. Fix: pass "
                                       f"{want}, e.g. {default}")
        out[name] = float(value)
    return out


def _update(op: str):
    tensors, scalars = UPDATE_INPUTS[op]
    count = 1 if op not in MULTI_OUTPUT else len(tensors) - 1  # param, then the state (velocity; m and v)

    def rule(shapes, dtypes, attrs):
        _one_float(op, tensors + scalars, shapes, dtypes)
        for name, shape in zip(tensors[1:], shapes[1:]):
            if tuple(shape) != tuple(shapes[0]):
                raise InvalidArgumentError(f"{op}: {name} has shape {tuple(shape)}, param {tuple(shapes[0])}. Fix: "
                                           f"pass the {name} of this very parameter")
        for name, shape in zip(scalars, shapes[len(tensors):]):
            if len(shape) > 1 or math.prod(shape) != 1:
                raise InvalidArgumentError(f"{op}: {name} must hold one number (shape () or (1,)), got shape "
                                           f"{tuple(shape)}. Fix: pass it as a 0-d tensor of param's dtype")
        update_attrs(op, attrs)
        return ((tuple(shapes[0]), dtypes[0]),) * count
    rule.__name__ = f"_{op}"
    return rule


RULES: dict = {}
RULES.update(dict.fromkeys(SAME_AS_X, _same))
RULES.update(dict.fromkeys(ARITHMETIC, _elementwise))
RULES.update(dict.fromkeys(BOOL_RESULT, _boolean))
RULES.update(dict.fromkeys(("sum", "prod", "max", "min", "mean"), _reduction))
RULES.update(dict.fromkeys(("argmax", "argmin"), _arg_reduction))
RULES.update(dict.fromkeys(("max_pool2d", "avg_pool2d"), _pool2d))
RULES.update(dict.fromkeys(("adaptive_avg_pool2d", "adaptive_max_pool2d"), _adaptive_pool2d))
RULES.update({
    "where": _where, "cast": _cast, "matmul": _matmul, "conv2d": _conv2d, "reshape": _reshape,
    "transpose": _transpose, "concat": _concat, "split": _split, "slice": _slice, "gather": _gather,
    "expand": _expand, "pad": _pad, "topk": _topk, "gather_elements": _gather_elements, "gather_nd": _gather_nd,
    "conv_transpose2d": _conv_transpose2d, "resize": _resize,
    "max_pool2d_grad": _max_pool2d_grad, "adaptive_max_pool2d_grad": _adaptive_max_pool2d_grad,
})
RULES.update({op: _update(op) for op in UPDATE_INPUTS})
RULES.update(dict.fromkeys(COLLECTIVE_OPS, _same))  # all_reduce, broadcast across ranks: the input's shape and dtype


def _fused(shapes, dtypes, attrs):
    """A "fused" node (made by hwadapter.graph.passes.fusion): attrs {"nodes": ((functor or "reduce_<r>", operand
    names, result name, ((attr, value), ...)), ...), "inputs": names, "outputs": names, "name": str} is
    hwadapter_kp.fuse(nodes, inputs, outputs, name); its outputs are what that kernel writes for these inputs."""
    import hwadapter_kp  # lazy: tens of milliseconds, and only graphs that were fused need it
    names = tuple(attrs["inputs"])
    kernel = hwadapter_kp.fuse(attrs["nodes"], {n: np.dtype(d).name for n, d in zip(names, dtypes)},
                               attrs["outputs"], attrs.get("name", "fused"))
    program = kernel.specialize(shapes=dict(zip(names, shapes)))
    out_shapes = program.output_shapes(dict(zip(names, shapes)))
    by_name = {p.name: np.dtype(p.dtype) for p in program.outputs}
    return tuple((tuple(int(d) for d in out_shapes[n]), by_name[n]) for n in attrs["outputs"])


#: Ops only graph passes produce. They have no kernel of the op set, so they are not in RULES (which the dispatcher
#: and tests/test_kernel_results.py hold to the reference kernels), but graphs that carry them are typed by these.
#: conv2d's optional "activation" attribute (None, "relu", "sigmoid", "tanh", "gelu", "relu6", "silu": applied after
#: the bias, an epilogue a pass folds in) changes nothing in its rule.
#: cond and while_loop (api/control.py) hold their branches and body as graphs, typed by those graphs.
GRAPH_RULES: dict = {"fused": _fused, **_control.RULES}


def result_meta(op: str, shapes: tuple, dtypes: tuple, attrs: dict | None = None) -> tuple | None:
    """((shape, dtype), ...) of op's outputs for inputs of `shapes` and `dtypes`, or None for an op without a rule
    (a custom kernel-primitive op). Raises what the shape rules raise for inputs the op cannot take, and for a result
    of more axes than a tensor has."""
    rule = RULES.get(op) or GRAPH_RULES.get(op) or vjp_meta.rule_of(op, RULES)
    if rule is None:
        return None
    out = rule(tuple(tuple(s) for s in shapes), tuple(np.dtype(d) for d in dtypes), attrs or {})
    for shape, _ in out:  # graphs are typed here before anything runs: no kernel meets a result it cannot hold
        _shapes.check_rank(op, shape)
    return out
