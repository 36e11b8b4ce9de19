"""hwadapter Graph -> ONNX model (opset 18): each hwadapter op written as the ONNX node(s) with its exact semantics.

`to_model(graph)` is what `hwadapter.jit.save` writes. Graphs come from `hwadapter.jit.get_graph`, which is taken
before the optimisation passes, so pass-made ops (`fused`) never reach it; an op without an exact ONNX form (a
custom kernel-primitive op, a pass-made node, an attribute value ONNX cannot say, a dtype neither the ONNX op nor
onnxruntime's kernel takes, even widened) raises `ExportError` naming the node and op before anything is written.
Each ONNX node is written in a type its schema allows (export_writer); where onnxruntime's own op computes
something else than eager (nan in max, integer overflow, x % 0), eager's form is written (export_nan, export_int).
cond and while_loop nodes become If and Loop, their branches and bodies written by the same writers (export_control).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os

import numpy as np

from .. import __version__
from ..api.control import graphs_of
from ..api.errors import HwAdapterError
from ..api.ir import Graph, Node
from . import export_control, export_int, export_nan
from .export_types import OPSET
from .export_writer import ExportError, Writer, refuse_checked  # noqa: F401 - export.ExportError, as before

_INT64_MAX, _INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min
#: onnxruntime has no ReduceMax/ReduceMin for these, and int64's (the wider type) loses values from 2^31 up
_UNSIGNED_WIDE = frozenset({np.dtype(np.uint32), np.dtype(np.uint64)})

UNARY = {"abs": "Abs", "neg": "Neg", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "reciprocal": "Reciprocal",
         "sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "erf": "Erf", "sin": "Sin", "cos": "Cos",
         "floor": "Floor", "ceil": "Ceil", "round": "Round", "sign": "Sign", "logical_not": "Not",
         "tan": "Tan", "asin": "Asin", "acos": "Acos", "atan": "Atan", "sinh": "Sinh", "cosh": "Cosh",
         "asinh": "Asinh", "acosh": "Acosh", "atanh": "Atanh"}
BINARY = {"add": "Add", "sub": "Sub", "mul": "Mul", "div": "Div", "pow": "Pow", "maximum": "Max", "minimum": "Min",
          "equal": "Equal", "less": "Less", "less_equal": "LessOrEqual", "greater": "Greater",
          "greater_equal": "GreaterOrEqual", "logical_and": "And", "logical_or": "Or", "logical_xor": "Xor"}
REDUCE = {"sum": "ReduceSum", "prod": "ReduceProd", "max": "ReduceMax", "min": "ReduceMin", "mean": "ReduceMean"}


# --- one function per op family: (writer, node) -> writes ONNX nodes whose outputs are node.outputs -------------
def _unary(w, n):
    x, (out,) = n.inputs[0], n.outputs
    if n.op == "rsqrt":
        w.node("Reciprocal", [w.node("Sqrt", [x])], [out])
    elif n.op == "gelu":
        _gelu(w, x, out, bool(n.attrs.get("approximate", False)))
    elif n.op in ("relu", "abs", "neg") and w.dtype(x).kind == "u":
        # ONNX Neg takes no unsigned type, nor Relu uint64 (no wider type holds it): on unsigned values relu and abs
        # are the identity, and neg is 0 - x, which wraps as eager's does
        if n.op == "neg":
            w.node("Sub", [w.const(np.zeros((), w.dtype(x))), x], [out])
        else:
            w.node("Identity", [x], [out])
    else:
        w.node(UNARY[n.op], [x], [out])


def _gelu(w, x, out: str, approximate: bool, dt=None) -> None:
    """x/2 * (1 + erf(x/sqrt 2)), or the tanh form: the two formulas the reference kernel computes."""
    dt = dt or w.dtype(x)
    c = lambda v: w.const(np.asarray(v, dt))  # noqa: E731
    if approximate:
        inner = w.node("Mul", [c(math.sqrt(2 / math.pi)),
                               w.node("Add", [x, w.node("Mul", [c(0.044715), w.node("Pow", [x, c(3.0)])])])])
        core = w.node("Tanh", [inner])
    else:
        core = w.node("Erf", [w.node("Div", [x, c(math.sqrt(2.0))])])
    value = w.node("Mul", [w.node("Mul", [x, c(0.5)]), w.node("Add", [core, c(1.0)])])
    # at +-inf the formulas are inf * 1 and -inf * 0 (nan); eager's gelu is its limit there, x or 0
    w.node("Where", [w.node("IsInf", [x]), w.node("Relu", [x]), value], [out])


def _binary(w, n):
    a, b = n.inputs
    (out,) = n.outputs
    if n.op == "not_equal":
        w.node("Not", [w.node("Equal", [a, b])], [out])
    elif n.op == "mod":
        _mod(w, a, b, out)
    elif n.op == "pow" and w.dtype(a).kind in "iu":
        export_int.power(w, a, b, out)
    elif n.op == "div" and w.dtype(a).kind in "iu":
        w.fail("integer division has no one ONNX form (ONNX Div truncates, numpy floors)",
               fix="cast to a float dtype before dividing")
    else:
        w.node(BINARY[n.op], [a, b], [out])


def _mod(w, a, b, out: str) -> None:
    """numpy's mod (the result has the divisor's sign): export_int.mod for integers; for floats C's fmod, plus
    the divisor where the remainder is non-zero and its sign differs from the divisor's (what numpy does)."""
    if w.dtype(a).kind in "iu":
        export_int.mod(w, a, b, out)
        return
    r = w.node("Mod", [a, b], fmod=1)
    zero = w.const(np.zeros((), w.dtype(a)))
    fix = w.node("And", [w.node("Not", [w.node("Equal", [r, zero])]),
                         w.node("Xor", [w.node("Less", [r, zero]), w.node("Less", [b, zero])])])
    w.node("Where", [fix, w.node("Add", [r, b]), r], [out])


def _where(w, n):
    w.node("Where", list(n.inputs), list(n.outputs))


def _cast(w, n):
    to = w.onnx.helper.np_dtype_to_tensor_dtype(np.dtype(n.attrs["dtype"]))
    w.node("Cast", [n.inputs[0]], list(n.outputs), to=to)


def _clip(w, n):
    x = n.inputs[0]
    lo, hi = n.attrs.get("min"), n.attrs.get("max")
    dt = w.dtype(x)
    if dt.kind == "f":  # onnxruntime reads a missing bound as the largest finite one, which would clamp inf
        lo, hi = -np.inf if lo is None else lo, np.inf if hi is None else hi
    bound = lambda v: "" if v is None else w.const(np.asarray(v).astype(dt))  # noqa: E731
    ins = [x, bound(lo), bound(hi)]
    while ins[-1] == "":
        ins.pop()
    w.node("Clip", ins, list(n.outputs))


def _axes(axis, ndim: int) -> list:
    if axis is None:
        return list(range(ndim))
    return [int(a) % ndim for a in ((axis,) if isinstance(axis, (int, np.integer)) else axis)]


def _reduce(w, n):
    x, (out,) = n.inputs[0], n.outputs
    axes = _axes(n.attrs.get("axis"), len(w.shape(x)))
    if not axes:  # nothing reduced (a 0-d input): the value itself
        w.node("Identity", [x], [out])
        return
    if n.op == "mean" and w.dtype(x).kind in "biu":
        w.fail("the mean of an integer tensor has no exact ONNX form", fix="cast it to a float dtype first")
    keep, dt = int(bool(n.attrs.get("keepdim", False))), w.dtype(x)
    if n.op in ("max", "min") and dt.kind == "f":
        export_nan.reduce(w, REDUCE[n.op], x, axes, out, keep)
    elif n.op in ("sum", "prod") and dt.kind in "biu" or n.op in ("max", "min") and dt in _UNSIGNED_WIDE:
        export_int.reduce(w, REDUCE[n.op], x, axes, out)
    elif n.op == "mean" and any(w.shape(x)[a] == 0 for a in axes):  # 0 / 0, where ONNX's mean of nothing is 0
        w.node("Identity", [w.const(np.full(w.shape(out), np.nan, dt))], [out])
    else:
        w.node(REDUCE[n.op], [x, w.ints(axes)], [out], keepdims=keep)


def _argreduce(w, n):
    x, (out,) = n.inputs[0], n.outputs
    op = "ArgMax" if n.op == "argmax" else "ArgMin"
    axis, keep = n.attrs.get("axis"), bool(n.attrs.get("keepdim", False))
    flat = axis is None  # over the flattened tensor, as numpy
    src, target = (w.node("Reshape", [x, w.ints([-1])]), w.fresh(op)) if flat else (x, out)
    axis, k = (0, 1) if flat else (int(axis), int(keep))
    if w.dtype(x).kind == "f":
        export_nan.arg(w, op, src, target, axis, k)
    else:
        w.node(op, [src], [target], axis=axis, keepdims=k, select_last_index=0)
    if flat:
        w.node("Reshape", [target, w.ints([1] * len(w.shape(x)) if keep else [])], [out])


def _matmul(w, n):
    x, y = n.inputs[:2]
    if n.attrs.get("transpose_x") and len(w.shape(x)) >= 2:
        x = _swap_last(w, x)
    if n.attrs.get("transpose_y") and len(w.shape(y)) >= 2:
        y = _swap_last(w, y)
    (out,) = n.outputs
    act, bias = n.attrs.get("activation"), n.inputs[2:]  # a fused linear layer: MatMul, Add of the bias, activation
    z = w.node("MatMul", [x, y], None if bias or act else [out])
    if bias:
        z = w.node("Add", [z, bias[0]], None if act else [out])
    if act is not None:
        _activation(w, act, z, out)


def _swap_last(w, ref) -> str:
    perm = list(range(len(w.shape(ref))))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return w.node("Transpose", [ref], perm=perm)


def _softmax(w, n):
    x = n.inputs[0]
    axis = int(n.attrs.get("axis", -1)) % max(len(w.shape(x)), 1)
    export_nan.softmax(w, "Softmax" if n.op == "softmax" else "LogSoftmax", x, n.outputs[0], axis)


def _layer_norm(w, n):
    x, weight, bias = n.inputs
    axis = int(n.attrs.get("begin_axis", -1)) % len(w.shape(x))
    norm = w.shape(x)[axis:]
    ins = [x, _broadcast_to(w, weight, norm), _broadcast_to(w, bias, norm)]
    w.node("LayerNormalization", ins, list(n.outputs), axis=axis, epsilon=float(n.attrs.get("epsilon", 1e-5)))


def _broadcast_to(w, ref, shape) -> str:
    """ref expanded to `shape` (LayerNormalization wants its scale and bias of the normalised shape)."""
    if w.shape(ref) == tuple(shape):
        return ref
    return w.node("Expand", [ref, w.ints(shape)])


def _batch_norm(w, n):
    """The reference kernel's formula, (x - mean) / sqrt(var + eps) * weight + bias: ONNX BatchNormalization folds it
    into x * scale + shift, which gives nan where eager gives inf (an inf x times a scale, minus an inf shift)."""
    x, mean, var, weight, bias = n.inputs
    eps, axis = float(n.attrs.get("epsilon", 1e-5)), int(n.attrs.get("channel_axis", 1)) % len(w.shape(x))
    shape = [1] * len(w.shape(x))
    shape[axis] = w.shape(x)[axis]
    r = lambda ref: w.node("Reshape", [ref, w.ints(shape)])  # noqa: E731
    std = w.node("Sqrt", [w.node("Add", [r(var), w.const(np.asarray(eps, w.dtype(x)))])])
    normed = w.node("Div", [w.node("Sub", [x, r(mean)]), std])
    w.node("Add", [w.node("Mul", [normed, r(weight)]), r(bias)], list(n.outputs))


_EPILOGUE = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh"}


def _conv2d(w, n):
    a = n.attrs
    pt, pb, pl, pr = a.get("padding", (0, 0, 0, 0))
    act = a.get("activation")
    (out,) = n.outputs
    target = out if act is None else w.fresh("conv")
    w.node("Conv", list(n.inputs), [target], strides=list(a.get("stride", (1, 1))), pads=[pt, pl, pb, pr],
           dilations=list(a.get("dilation", (1, 1))), group=int(a.get("groups", 1)),
           kernel_shape=list(w.shape(n.inputs[1])[2:]))
    _activation(w, act, target, out)


def _activation(w, act, target: str, out: str) -> None:
    """A fused epilogue's activation (conv2d's, matmul's) of `target` written as `out`: ONNX ops for each."""
    if act == "gelu":
        _gelu(w, target, out, False, w.dtype(out))
    elif act == "relu6":
        dt = w.dtype(out)
        w.node("Clip", [target, w.const(np.asarray(0, dt)), w.const(np.asarray(6, dt))], [out])
    elif act == "silu":
        w.node("Mul", [target, w.node("Sigmoid", [target])], [out])
    elif act is not None:
        w.node(_EPILOGUE[act], [target], [out])


def _pool2d(w, n):
    a, x = n.attrs, n.inputs[0]
    k, s = tuple(a.get("kernel_size", (2, 2))), tuple(a.get("stride", (2, 2)))
    pt, pb, pl, pr = a.get("padding", (0, 0, 0, 0))
    ceil = bool(a.get("ceil_mode", False))
    # ONNX sizes a ceil-mode output without dropping a last window that starts in the end padding: only export
    # where that gives our size
    _, _, h, wd = w.shape(x)
    onnx_out = tuple((math.ceil if ceil else math.floor)((size + lo + hi - kk) / ss) + 1
                     for size, lo, hi, kk, ss in ((h, pt, pb, k[0], s[0]), (wd, pl, pr, k[1], s[1])))
    if onnx_out != w.shape(n.outputs[0])[2:]:
        w.fail(f"with ceil_mode its output is {w.shape(n.outputs[0])[2:]}, ONNX's rule gives {onnx_out}",
               fix="pad explicitly instead of using ceil_mode")
    attrs = dict(kernel_shape=list(k), strides=list(s), pads=[pt, pl, pb, pr], ceil_mode=int(ceil))
    if n.op == "avg_pool2d":
        if ceil and (pb or pr) and a.get("exclusive", True) is False:
            w.fail("an inclusive average pool in ceil mode with end padding is divided differently in ONNX")
        w.node("AveragePool", [x], list(n.outputs), count_include_pad=int(not a.get("exclusive", True)), **attrs)
    else:
        _max_or_avg(w, "MaxPool", x, n.outputs[0], **attrs)


def _max_or_avg(w, op_type: str, x, out: str, **attrs) -> None:
    if op_type.startswith("Global"):  # a reduction over H and W, which onnxruntime also has in float64
        _reduce(w, Node(w.current.name, "max" if "Max" in op_type else "mean", (x,), (out,),
                        {"axis": (2, 3), "keepdim": True}))
    elif "Max" in op_type and w.dtype(x).kind == "f":
        export_nan.pool(w, op_type, x, out, **attrs)
    else:
        w.node(op_type, [x], [out], **attrs)


def _adaptive(w, n):
    x, (out,) = n.inputs[0], n.outputs
    oh, ow = tuple(n.attrs.get("output_size", (1, 1)))
    _, _, h, wd = w.shape(x)
    avg = n.op == "adaptive_avg_pool2d"
    if (oh, ow) == (1, 1):
        _max_or_avg(w, "GlobalAveragePool" if avg else "GlobalMaxPool", x, out)
    elif h % oh == 0 and wd % ow == 0:  # equal windows, side by side: a plain pool
        k = [h // oh, wd // ow]
        _max_or_avg(w, "AveragePool" if avg else "MaxPool", x, out, kernel_shape=k, strides=k)
    else:
        w.fail(f"adaptive pooling of {h}x{wd} to {oh}x{ow} has windows of unequal size, which ONNX cannot say",
               fix="pool to a size that divides the input")


def _reshape(w, n):
    (out,) = n.outputs
    w.node("Reshape", [n.inputs[0], w.ints(w.shape(out))], [out], allowzero=1)  # the static shape: 0 is 0


def _transpose(w, n):
    w.node("Transpose", [n.inputs[0]], list(n.outputs), perm=[int(p) for p in n.attrs["perm"]])


def _concat(w, n):
    dt = w.dtype(n.outputs[0])
    ins = [i if w.dtype(i) == dt else w.cast(i, dt) for i in n.inputs]
    w.node("Concat", ins, list(n.outputs), axis=int(n.attrs.get("axis", 0)))


def _split(w, n):
    w.node("Split", [n.inputs[0], w.ints(n.attrs["sections"])], list(n.outputs), axis=int(n.attrs.get("axis", 0)))


def _slice(w, n):
    a = n.attrs
    ends = []
    for end, step in zip(a["ends"], a["steps"]):
        if end is None or end < 0:  # past the beginning (a negative step): ONNX reads -1 as the last element
            ends.append(_INT64_MIN if step < 0 else _INT64_MAX)
        else:
            ends.append(int(end))
    w.node("Slice", [n.inputs[0], w.ints(a["starts"]), w.ints(ends), w.ints(a["axes"]), w.ints(a["steps"])],
           list(n.outputs))


def _gather(w, n):
    w.node("Gather", list(n.inputs), list(n.outputs), axis=int(n.attrs.get("axis", 0)))


def _expand(w, n):
    w.node("Expand", [n.inputs[0], w.ints(n.attrs["shape"])], list(n.outputs))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def _pad(w, n):
    x, (out,) = n.inputs[0], n.outputs
    if not w.shape(x):
        w.node("Identity", [x], [out])
        return
    mode = n.attrs.get("mode", "constant")
    if mode not in _PAD_MODES:
        w.fail(f"pad mode {mode!r} needs ONNX opset 19 (wrap); hwadapter exports opset {OPSET}")
    pads = [int(lo) for lo, _ in n.attrs["pads"]] + [int(hi) for _, hi in n.attrs["pads"]]
    ins = [x, w.ints(pads)]
    if mode == "constant":
        ins.append(w.const(np.asarray(n.attrs.get("value", 0.0)).astype(w.dtype(x))))
    w.node("Pad", ins, [out], mode=_PAD_MODES[mode])


_BITWISE = {"bitwise_and": ("BitwiseAnd", "And"), "bitwise_or": ("BitwiseOr", "Or"),
            "bitwise_xor": ("BitwiseXor", "Xor"), "bitwise_not": ("BitwiseNot", "Not")}


def _bitwise(w, n):
    integer, boolean = _BITWISE[n.op]
    w.node(boolean if w.dtype(n.inputs[0]) == np.bool_ else integer, list(n.inputs), list(n.outputs))


def _shift(w, n):
    if w.dtype(n.inputs[0]).kind != "u":
        w.fail(f"ONNX BitShift takes unsigned integers only, not {w.dtype(n.inputs[0])}")
    w.node("BitShift", list(n.inputs), list(n.outputs), direction="LEFT" if n.op == "left_shift" else "RIGHT")


def _topk(w, n):
    a, x = n.attrs, n.inputs[0]
    axis, largest = int(a.get("axis", -1)) % len(w.shape(x)), int(bool(a.get("largest", True)))
    if w.dtype(x).kind == "f":
        export_nan.topk(w, x, int(a["k"]), axis, largest, n.outputs)
        return
    # ONNX TopK also puts the lower index first among equal values; its results are always sorted here
    w.node("TopK", [x, w.ints([a["k"]])], list(n.outputs), axis=axis, largest=largest, sorted=1)


def _cumulative(w, n):
    if n.op == "cumprod":
        w.fail(f"ONNX has CumProd from opset 24 only; hwadapter exports opset {OPSET}")
    x = n.inputs[0]
    if not w.shape(x):
        w.fail("ONNX CumSum needs an input of rank 1 or more")
    w.node("CumSum", [x, w.const(np.asarray(int(n.attrs.get("axis", 0)), np.int64))], list(n.outputs),
           exclusive=int(bool(n.attrs.get("exclusive", False))), reverse=int(bool(n.attrs.get("reverse", False))))


def _gather_scatter(w, n):
    a = n.attrs
    if n.op == "gather_elements":
        w.node("GatherElements", list(n.inputs), list(n.outputs), axis=int(a.get("axis", 0)))
    elif n.op == "scatter_elements":
        w.node("ScatterElements", list(n.inputs), list(n.outputs), axis=int(a.get("axis", 0)),
               reduction=a.get("reduction", "none"))
    elif n.op == "gather_nd":
        w.node("GatherND", list(n.inputs), list(n.outputs), batch_dims=int(a.get("batch_dims", 0)))
    else:
        w.node("ScatterND", list(n.inputs), list(n.outputs), reduction=a.get("reduction", "none"))


def _lrn(w, n):
    """The reference kernel's formula, x / (bias + alpha / size * the sum of x**2 over the window) ** beta, as adds
    of shifted slices: onnxruntime's LRN slides a running sum, which turns an inf in the window into nan."""
    a, x = n.attrs, n.inputs[0]
    size, shape = int(a["size"]), w.shape(x)
    c = lambda v: w.const(np.asarray(v, w.dtype(x)))  # noqa: E731
    pads = [0] * (2 * len(shape))
    pads[1], pads[len(shape) + 1] = (size - 1) // 2, size // 2
    padded = w.node("Pad", [w.node("Mul", [x, x]), w.ints(pads), c(0)], mode="constant")
    total = None
    for k in range(size):
        part = w.node("Slice", [padded, w.ints([k]), w.ints([k + shape[1]]), w.ints([1])])
        total = part if total is None else w.node("Add", [total, part])
    scale = w.node("Add", [c(float(a.get("bias", 1.0))), w.node("Mul", [c(float(a.get("alpha", 1e-4)) / size), total])])
    w.node("Div", [x, w.node("Pow", [scale, c(float(a.get("beta", 0.75)))])], list(n.outputs))


def _conv_transpose2d(w, n):
    a = n.attrs
    pt, pb, pl, pr = a.get("padding", (0, 0, 0, 0))
    w.node("ConvTranspose", list(n.inputs), list(n.outputs), strides=list(a.get("stride", (1, 1))),
           pads=[pt, pl, pb, pr], output_padding=list(a.get("output_padding", (0, 0))),
           dilations=list(a.get("dilation", (1, 1))), group=int(a.get("groups", 1)),
           kernel_shape=list(w.shape(n.inputs[1])[2:]))


WRITERS: dict = {}
WRITERS.update(dict.fromkeys([*UNARY, "rsqrt", "gelu"], _unary))
WRITERS.update(dict.fromkeys([*BINARY, "not_equal", "mod"], _binary))
WRITERS.update(dict.fromkeys(REDUCE, _reduce))
WRITERS.update(dict.fromkeys(("argmax", "argmin"), _argreduce))
WRITERS.update(dict.fromkeys(("softmax", "log_softmax"), _softmax))
WRITERS.update(dict.fromkeys(("max_pool2d", "avg_pool2d"), _pool2d))
WRITERS.update(dict.fromkeys(("adaptive_avg_pool2d", "adaptive_max_pool2d"), _adaptive))
WRITERS.update({"where": _where, "cast": _cast, "clip": _clip, "matmul": _matmul, "layer_norm": _layer_norm,
                "batch_norm": _batch_norm, "conv2d": _conv2d, "reshape": _reshape, "transpose": _transpose,
                "concat": _concat, "split": _split, "slice": _slice, "gather": _gather, "expand": _expand,
                "pad": _pad, "topk": _topk, "lrn": _lrn, "conv_transpose2d": _conv_transpose2d})
WRITERS.update(dict.fromkeys(_BITWISE, _bitwise))
WRITERS.update(dict.fromkeys(("left_shift", "right_shift"), _shift))
WRITERS.update(dict.fromkeys(("cumsum", "cumprod"), _cumulative))
WRITERS.update(dict.fromkeys(("gather_elements", "scatter_elements", "gather_nd", "scatter_nd"), _gather_scatter))


# ops written as several ONNX nodes, which eager computes in float32 for float16 and rounds once
_FORMULAS = frozenset({"gelu", "batch_norm", "lrn", "conv2d", "layer_norm"})


def _in_float32(w, n) -> None:
    """Write n's formula on float32 copies of its float16 inputs, and cast its outputs back once."""
    f16, f32 = np.dtype("float16"), np.dtype("float32")
    wide = [w.cast(i, f32) if w.dtype(i) == f16 else i for i in n.inputs]
    outs = [w.fresh("float32") for _ in n.outputs]
    for o, f in zip(n.outputs, outs):
        w.types[f], w.shapes[f] = f32, w.shape(o)
    WRITERS[n.op](w, dataclasses.replace(n, inputs=tuple(wide), outputs=tuple(outs)))
    for o, f in zip(n.outputs, outs):
        w.node("Cast", [f], [o], to=w.onnx.helper.np_dtype_to_tensor_dtype(f16))


def write_nodes(w, nodes) -> None:
    """Write hwadapter `nodes` (of w's graph, or a branch or body) as ONNX nodes into the writer w."""
    for node in nodes:
        w.current = node
        try:
            if node.op in _FORMULAS and np.dtype("float16") in {w.dtype(i) for i in node.inputs}:
                _in_float32(w, node)
            else:
                WRITERS[node.op](w, node)
        except HwAdapterError:
            raise
        except Exception as err:  # an attribute or dtype the writer did not foresee: ours, naming the node
            w.fail(f"its attributes or dtypes have no ONNX form here ({type(err).__name__}: {err})")
    w.current = None


# control flow: a branch or body is written by write_nodes, which the control writers are handed (no import cycle)
WRITERS["cond"] = functools.partial(export_control.cond, write=write_nodes)
WRITERS["while_loop"] = functools.partial(export_control.while_loop, write=write_nodes)


def _walk(graph, where: str = ""):
    """(node, where it is) of every node of the graph, its branches and bodies included, in writing order."""
    for n in graph.nodes:
        yield n, where
        for key, sub in graphs_of(n):
            if isinstance(sub, Graph):
                yield from _walk(sub, f"{where}node {n.name!r} (op {n.op!r}), its {key} graph: ")


def to_model(graph, name: str = "hwadapter", producer_version: str = ""):
    """The Graph as an ONNX ModelProto (opset OPSET), checked by onnx.checker; ExportError for an op without an
    ONNX form."""
    # lazy: onnx is an optional package, and jit.save imports this module before it checks onnx is installed
    import onnx
    helper = onnx.helper
    w = Writer(graph, onnx)
    missing = [(n, where) for n, where in _walk(graph) if n.op not in WRITERS]
    if missing:
        first, where = missing[0]
        why = ("a node made by the graph passes (export the graph of hwadapter.jit.get_graph, taken before them)"
               if first.op == "fused" else "it has no ONNX form in hwadapter's exporter")
        ops = ", ".join(map(repr, sorted({n.op for n, _ in missing})))
        w.fail(f"cannot export op(s) {ops}: {why}", node=first, where=where)
    write_nodes(w, graph.nodes)
    inits = [onnx.numpy_helper.from_array(np.asarray(a), k) for k, a in graph.constants.items()]
    outputs = w.outputs(graph.outputs, lambda i: f"output_{i}")
    g = helper.make_graph(w.nodes, name, [w.value_info(i) for i in graph.inputs], outputs,
                          initializer=inits + w.inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="hwadapter",
                              producer_version=producer_version)
    model.ir_version = min(model.ir_version, 9)  # IR 9 (onnx 1.15): what onnxruntimes of the last years read
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as err:  # InferenceError, ValidationError: a node written wrong, named by ONNX's node name
        refuse_checked(w, err)
    return model


def save(graph, path, name: str = "hwadapter") -> str:
    """Write the Graph as an ONNX model file; its path."""
    import onnx  # lazy: as in to_model
    model = to_model(graph, name, __version__)
    onnx.save_model(model, os.fspath(path))
    return os.fspath(path)
