"""The phi kernels a training loop needs beyond the forward ops of optable.py: gradients, optimizer steps and the
forward kernels Paddle's CPU computes its own way (relu's nan, cross entropy, full, cast), each written in
hwadapter's ops, so they run on the plugin's own kernels (hwadapter's vjp rules for the gradients) with no code from
the vendor.

A Composite names its phi kernel, Paddle's C++ parameter list (after the context, as Paddle's header declares it:
kernels.composite_wrapper turns it into the phi kernel and its registration), the dtypes it is registered for, and
fn(dev, ins, attrs, want) -> {output: Tensor, device array or numpy array}: `ins` the inputs by name (hwadapter
Tensors on the device, or with `arrays` the device's own arrays and fn given the device's Ops instead of the device;
numpy arrays for tensors Paddle keeps on the CPU, such as Adam's beta powers; a Meta for one Paddle passes without
its data; None for an absent optional one), `attrs` Paddle's attributes by name (IntArray and vectors as tuples,
Scalar as int or float, DataType as its code: DTYPE_BY_CODE), `want` {output: (shape, numpy dtype)} for the outputs
Paddle asked for. What fn cannot do exactly as Paddle does it refuses with `Refused` (a message naming the case);
install leaves a kernel whose sample run needs an op the plugin lacks to Paddle's CPU fallback, with the reason
(kernels.plan_composites).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import hwadapter as hw
from hwadapter import host

FLOATS = ("float32", "float64")
ALL = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64")
#: Paddle's DataType numbering (HwaDType codes, as the kernels library passes DataType attributes)
DTYPE_BY_CODE = {1: "bool", 2: "uint8", 6: "int8", 7: "int16", 8: "int32", 9: "int64", 10: "float16", 11: "float32",
                 12: "float64"}


@dataclass(frozen=True)
class Meta:
    """An input Paddle passes without its data (a grad kernel's no-need-buffer input): its shape and dtype only."""
    shape: tuple
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


class Refused(Exception):
    """A call the composite cannot do exactly as Paddle's CPU does (the message says which case and what to do)."""


class Ops:
    """One device's own kernels called on its arrays (numpy on a host-memory device, else DeviceArrays), each looked
    up once per (op, input dtypes), and its small constants made once: the composites' hot path, without the
    frontend's argument checks (attributes as a kernel receives them, docs/ops.md). Never a CPU fallback: a missing
    kernel is hwadapter's KernelNotFoundError."""

    def __init__(self, dev):
        self.dev, self.fns, self.consts = dev, {}, {}

    def __call__(self, op: str, *xs, **attrs):
        key = (op,) + tuple([x.dtype for x in xs])
        fn = self.fns.get(key)
        if fn is None:
            fn = host.own_kernel(op, self.dev, key[1:])
            if fn is None:
                return host.run_own_kernel(op, self.dev, *xs, **attrs)  # raises, naming the op and the dtypes
            self.fns[key] = fn
        return fn(*xs, **attrs)

    def const(self, value, dtype):
        """A constant of the device (value: a number or a small numpy array). Host arrays are kept here; a number's
        device copy is the Device's own (Device.constant: uploaded once, released by hwadapter.device.empty_cache);
        a larger constant is copied in at each call, never held."""
        array = np.asarray(value, dtype)
        if self.dev.host_memory:
            key = (array.tobytes(), array.shape, array.dtype)
            found = self.consts.get(key)
            if found is None:
                found = self.consts[key] = array
            return found
        if array.ndim == 0:
            return self.dev.constant(array)
        return host.data(hw.to_tensor(array, device=self.dev))


_OPS: dict = {}


def ops(dev) -> Ops:
    """The device's Ops, made once."""
    found = _OPS.get(dev)
    if found is None:
        found = _OPS[dev] = Ops(dev)
    return found


@dataclass(frozen=True)
class Composite:
    """One phi kernel built from hwadapter's ops."""
    phi: str
    params: str                 # Paddle's C++ parameters after the context, as its kernel header declares them
    dtypes: tuple[str, ...]     # registered for these (the kernel key's dtype)
    fn: Callable
    sample: Callable            # sample(dtype) -> (ins as numpy arrays or None, attrs): install's probe run
    exact: bool = False         # True: bit for bit Paddle's CPU; False: equal to rounding
    host_inputs: tuple[str, ...] = ()  # inputs Paddle may keep on the CPU (registered for any backend)
    host_outputs: dict = field(default_factory=dict)  # output -> the input whose place it takes (CPU or device)
    note: str = ""
    arrays: bool = False        # fn(ops(dev), ins, attrs, want) on the device's arrays (Ops), not on Tensors
    dtype_attribute: bool = False  # the output's dtype is an attribute's (cast's out_dtype), not the kernel key's


def _const(dev, value, dtype):
    """A small constant on the device (one copy in)."""
    return hw.to_tensor(np.asarray(value, dtype), device=dev)


def _float(t) -> np.dtype:
    return np.dtype(host.data(t).dtype)


def _grads(op, inputs, out_grad, attrs, outputs, want, names):
    """op_vjp for the inputs whose gradient Paddle wants (names[i] in want), as {name: grad}."""
    needs = [n in want for n in names]
    if not any(needs):
        return {}
    grads = host.op_vjp(op, inputs, [out_grad], attrs, outputs=outputs, needs=needs)
    return {n: g for n, g, need in zip(names, grads, needs) if need}


# ---- elementwise: Paddle's grad kernels reduce a broadcast gradient to each input's shape, as the rules do ----

def _legacy(x, y, axis: int):
    """y as Paddle's old `axis` broadcasting reads it (y's dims placed from `axis` of x's), and how to undo it."""
    if axis == -1 or y.ndim == x.ndim:
        return y, None
    if axis < 0 or axis + y.ndim > x.ndim:
        raise Refused(f"axis {axis} does not place a {y.ndim}-d y inside a {x.ndim}-d x")
    shape = (1,) * axis + tuple(y.shape) + (1,) * (x.ndim - axis - y.ndim)
    return hw.reshape(y, shape), tuple(y.shape)


def _binary_grad(op):
    def fn(dev, i, a, want):
        y, back = _legacy(i["x"], i["y"], a["axis"])
        outputs = [i["out"]] if "out" in i else [i["dout"]]
        got = _grads(op, [i["x"], y], i["dout"], {}, outputs, want, ("dx", "dy"))
        if back is not None and "dy" in got:
            got["dy"] = hw.reshape(got["dy"], back)
        return got
    return fn


def _binary_sample(dtype):
    r = np.random.RandomState(0)
    return {"x": r.rand(2, 3).astype(dtype), "y": r.rand(3).astype(dtype) + 1,
            "dout": r.rand(2, 3).astype(dtype)}, {"axis": -1}


def _div_sample(dtype):
    ins, attrs = _binary_sample(dtype)
    return {**ins, "out": ins["x"] / ins["y"]}, attrs


# ---- activations ----

def _gelu(dev, i, a, want):
    return {"out": hw.nn.functional.gelu(i["x"], approximate=bool(a["approximate"]))}


def _gelu_grad(dev, i, a, want):
    return _grads("gelu", [i["x"]], i["out_grad"], {"approximate": bool(a["approximate"])}, [i["out_grad"]], want,
                  ("x_grad",))


def _unary_sample(*names):
    def sample(dtype):
        r = np.random.RandomState(0)
        return {n: (r.rand(3, 4) - 0.5).astype(dtype) for n in names}, {"approximate": False, "axis": -1}
    return sample


# ---- reductions ----

def _axes(dims, ndim: int, reduce_all: bool) -> tuple:
    if reduce_all or not dims or ndim == 0:
        return tuple(range(ndim))
    return tuple(sorted({d % ndim for d in dims}))


def _spread(g, shape: tuple, axes: tuple, count: int | None):
    """sum's and mean's gradient: g (reduced over `axes`) back over x's shape, divided by the count for a mean."""
    kept = [1 if k in axes else s for k, s in enumerate(shape)]
    g = hw.expand(hw.reshape(g, kept), list(shape))
    if count is None:
        return g
    return hw.divide(g, _const(g.place, count, _float(g)))


def _reduce_grad(mean: bool):
    """sum_grad, mean_grad: Paddle passes x without its data."""
    def fn(dev, i, a, want):
        x, g = i["x"], i["out_grad"]
        axes = _axes(a["dims"], len(x.shape), a["reduce_all"])
        count = int(np.prod([x.shape[k] for k in axes])) if mean else None
        return {"x_grad": _spread(g, tuple(x.shape), axes, count)}
    return fn


def _reduce_sample(dtype):
    r = np.random.RandomState(0)
    return {"x": r.rand(2, 3).astype(dtype), "out_grad": r.rand(2).astype(dtype)}, {"dims": (1,), "keep_dim": False,
                                                                                   "reduce_all": False}


# ---- matmul ----

def _matmul_grad(dev, i, a, want):
    attrs = {k: True for k in ("transpose_x", "transpose_y") if a[k]}
    return _grads("matmul", [i["x"], i["y"]], i["dout"], attrs, [i["dout"]], want, ("dx", "dy"))


def _matmul_sample(dtype):
    r = np.random.RandomState(0)
    return {"x": r.rand(2, 3).astype(dtype), "y": r.rand(3, 4).astype(dtype), "dout": r.rand(2, 4).astype(dtype)}, \
        {"transpose_x": False, "transpose_y": False}


# ---- cross entropy (softmax with cross entropy, Paddle's fused kernel) ----

def _classes(dev, like, axis: int):
    """0, 1, ... along like's `axis` (an int64 tensor of 1s elsewhere), to compare hard labels with."""
    shape = [1] * like.ndim
    shape[axis] = like.shape[axis]
    return _const(dev, np.arange(like.shape[axis], dtype=np.int64).reshape(shape), np.int64)


def _class_hot(dev, label, like, axis: int):
    """A float one-hot of hard `label` (1 along `axis` where it names the class) in like's shape and dtype."""
    return hw.cast(hw.equal(hw.cast(label, "int64"), _classes(dev, like, axis)), _float(like).name)


def _cross_entropy_sample(dtype):
    r = np.random.RandomState(0)
    probs = np.full((3, 4), 0.25, dtype)
    return {"logits": r.rand(3, 4).astype(dtype), "label": np.array([[0], [3], [1]], np.int64), "softmax": probs,
            "loss_grad": r.rand(3, 1).astype(dtype)}, {"soft_label": False, "use_softmax": True,
                                                       "numeric_stable_mode": True, "ignore_index": -100, "axis": -1}


# ---- convolution and pooling: Paddle's paddings as hwadapter's (top, bottom, left, right) ----

def _nchw(a):
    fmt = a.get("data_format", "NCHW")
    if fmt not in ("NCHW", "AnyLayout"):
        raise Refused(f"data_format {fmt} (hwadapter's conv2d and pooling take NCHW)")


def _pads(paddings, algorithm: str, size, kernel, strides, dilations):
    """Paddle's UpdatePaddingAndDilation: (top, bottom, left, right) and the dilations it leaves."""
    if algorithm == "VALID":
        return (0, 0, 0, 0), tuple(dilations)
    if algorithm == "SAME":
        pads = []
        for n, k, s in zip(size, kernel, strides):
            total = max((-(-n // s) - 1) * s + k - n, 0)
            pads += [total // 2, total - total // 2]
        return tuple(pads), (1, 1)
    p = tuple(int(v) for v in paddings)
    if len(p) == 2:
        return (p[0], p[0], p[1], p[1]), tuple(dilations)
    if len(p) == 4:
        return p, tuple(dilations)
    raise Refused(f"paddings {list(p)} (2 or 4 values)")


def _conv_grad(dev, i, a, want):
    _nchw(a)
    x, w = i["input"], i["filter"]
    pads, dil = _pads(a["paddings"], a["padding_algorithm"], x.shape[2:], w.shape[2:], a["strides"], a["dilations"])
    attrs = {"stride": tuple(a["strides"]), "padding": pads, "dilation": dil, "groups": int(a["groups"])}
    return _grads("conv2d", [x, w], i["out_grad"], attrs, [i["out_grad"]], want, ("input_grad", "filter_grad"))


def _conv_sample(dtype):
    r = np.random.RandomState(0)
    return {"input": r.rand(1, 2, 5, 5).astype(dtype), "filter": r.rand(3, 2, 3, 3).astype(dtype),
            "out_grad": r.rand(1, 3, 5, 5).astype(dtype)}, {"strides": (1, 1), "paddings": (1, 1),
                                                            "padding_algorithm": "EXPLICIT", "dilations": (1, 1),
                                                            "groups": 1, "data_format": "NCHW"}


def _pool_grad(dev, i, a, want):
    _nchw(a)
    x, out, dout = i["x"], i["out"], i["dout"]
    kind = a["pooling_type"]
    if a["adaptive"]:
        if kind != "avg":
            raise Refused("adaptive max pooling (hwadapter's adaptive_max_pool2d keeps no indices for Paddle's grad)")
        return _grads("adaptive_avg_pool2d", [x], dout, {"output_size": tuple(a["kernel_size"])}, [out], want,
                      ("dx",))
    if a["global_pooling"]:
        kernel, strides, pads = tuple(x.shape[2:]), (1, 1), (0, 0, 0, 0)
    else:
        kernel, strides = tuple(a["kernel_size"]), tuple(a["strides"])
        pads, _ = _pads(a["paddings"], a["padding_algorithm"], x.shape[2:], kernel, strides, (1, 1))
    if max(pads[:2]) > kernel[0] // 2 or max(pads[2:]) > kernel[1] // 2:
        raise Refused(f"a padding {list(pads)} over half the window {list(kernel)}")
    attrs = {"kernel_size": kernel, "stride": strides, "padding": pads, "ceil_mode": bool(a["ceil_mode"])}
    if kind == "avg":
        attrs["exclusive"] = bool(a["exclusive"])
    return _grads("max_pool2d" if kind == "max" else "avg_pool2d", [x], dout, attrs, [out], want, ("dx",))


def _pool_sample(kind):
    def sample(dtype):
        r = np.random.RandomState(0)
        x = r.rand(1, 2, 4, 4).astype(dtype)
        out = x.reshape(1, 2, 2, 2, 2, 2).max(axis=(3, 5))
        return {"x": x, "out": out, "dout": r.rand(1, 2, 2, 2).astype(dtype)}, {
            "kernel_size": (2, 2), "strides": (2, 2), "paddings": (0, 0), "ceil_mode": False, "exclusive": True,
            "data_format": "NCHW", "pooling_type": kind, "global_pooling": False, "adaptive": False,
            "padding_algorithm": "EXPLICIT"}
    return sample


# ---- normalisation ----

def _bn_axes(x, layout: str):
    if layout not in ("NCHW", "NCL", "NC", "NCDHW", "AnyLayout", "NHWC", "NLC", "NDHWC"):
        raise Refused(f"data_layout {layout}")
    axis = len(x.shape) - 1 if layout in ("NHWC", "NLC", "NDHWC") and len(x.shape) > 2 else 1
    return axis, tuple(k for k in range(len(x.shape)) if k != axis)


_BN_ATTRS = {"is_test": False, "momentum": 0.9, "epsilon": 1e-5, "data_layout": "NCHW", "use_global_stats": False,
             "trainable_statistics": False}


def _bn_sample(dtype):
    r = np.random.RandomState(0)
    x = r.rand(2, 3, 2, 2).astype(dtype)
    m, v = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    return {"x": x, "mean": np.zeros(3, dtype), "variance": np.ones(3, dtype), "scale": np.ones(3, dtype),
            "bias": np.zeros(3, dtype), "saved_mean": m, "saved_variance": (1 / np.sqrt(v + 1e-5)).astype(dtype),
            "reserve_space": None, "y_grad": r.rand(2, 3, 2, 2).astype(dtype)}, dict(_BN_ATTRS, data_format="NCHW")


def _norm_shape(x, begin: int):
    return tuple(x.shape[begin:])


def _layer_norm(dev, i, a, want):
    x = i["x"]
    begin = a["begin_norm_axis"]
    shape = _norm_shape(x, begin)
    w = hw.reshape(i["scale"], list(shape)) if i.get("scale") is not None else None
    b = hw.reshape(i["bias"], list(shape)) if i.get("bias") is not None else None
    out = {"out": hw.nn.functional.layer_norm(x, list(shape), weight=w, bias=b, epsilon=a["epsilon"])}
    axes = list(range(begin, x.ndim))
    mean = hw.mean(x, axis=axes, keepdim=True)
    centred = hw.subtract(x, mean)
    # Paddle's InferMeta gives x.shape[:begin] (older Paddles: their product): the shape it set
    left = list((want.get("mean") or (None,))[0] or x.shape[:begin])
    out["mean"] = hw.reshape(mean, left)
    out["variance"] = hw.reshape(hw.mean(hw.multiply(centred, centred), axis=axes), left)
    return out


def _layer_norm_grad(dev, i, a, want):
    x, g = i["x"], i["out_grad"]
    begin = a["begin_norm_axis"]
    shape, dtype = _norm_shape(x, begin), _float(g)
    n = int(np.prod(shape))
    w = hw.reshape(i["scale"], list(shape)) if i.get("scale") is not None else _const(dev, np.ones(shape, dtype), dtype)
    b = _const(dev, np.zeros(shape, dtype), dtype)
    got = _grads("layer_norm", [x, w, b], g, {"begin_axis": begin, "epsilon": float(a["epsilon"])}, [g], want,
                 ("x_grad", "scale_grad", "bias_grad"))
    for name in ("scale_grad", "bias_grad"):
        if name in got:
            got[name] = hw.reshape(got[name], [n])
    return got


def _ln_sample(dtype):
    r = np.random.RandomState(0)
    x = r.rand(2, 3, 4).astype(dtype)
    return {"x": x, "scale": np.ones(4, dtype), "bias": np.zeros(4, dtype), "mean": x.mean(-1).reshape(6),
            "variance": x.var(-1).reshape(6), "out_grad": r.rand(2, 3, 4).astype(dtype)}, \
        {"epsilon": 1e-5, "begin_norm_axis": 2}


# ---- embedding ----

def _ids(ids):
    return ids if np.dtype(_float(ids)) == np.int64 else hw.cast(ids, "int64")


def _embedding(dev, i, a, want):
    ids, w = _ids(i["inputx"]), i["weight"]
    pad = a["padding_idx"]
    out = hw.gather(w, hw.reshape(ids, [-1]), axis=0)
    if pad != -1:  # Paddle's kNoPadding is -1; a row of padding_idx gives zeros
        keep = hw.cast(hw.not_equal(hw.reshape(ids, [-1, 1]), _const(dev, pad, np.int64)), _float(w).name)
        out = hw.multiply(out, keep)
    return {"out": hw.reshape(out, list(ids.shape) + [w.shape[1]])}


def _embedding_grad(dev, i, a, want):
    ids, w, g = _ids(i["input"]), i["weight"], i["out_grad"]
    rows, width = w.shape
    dtype = _float(g)
    flat = hw.reshape(g, [-1, width])
    if host.own_kernel("scatter_nd", dev, (dtype, np.int64, dtype)) is not None:
        grad = hw.scatter_nd_add(_const(dev, np.zeros((rows, width), dtype), dtype), hw.reshape(ids, [-1, 1]), flat)
    else:  # a device without scatter: the rows' one-hot, transposed, times the gradient (one matmul)
        hot = _class_hot(dev, hw.reshape(ids, [-1, 1]), _const(dev, np.zeros((1, rows), dtype), dtype), 1)
        grad = hw.matmul(hot, flat, transpose_x=True)
    pad = a["padding_idx"]
    if pad != -1:
        keep = np.ones((rows, 1), _float(g))
        keep[pad] = 0
        grad = hw.multiply(grad, _const(dev, keep, _float(g)))
    return {"weight_grad": grad}


def _embedding_sample(dtype):
    r = np.random.RandomState(0)
    return {"inputx": np.array([[1, 2], [0, 1]], np.int64), "input": np.array([[1, 2], [0, 1]], np.int64),
            "weight": r.rand(4, 3).astype(dtype), "out_grad": r.rand(2, 2, 3).astype(dtype)}, {"padding_idx": 0}


def _add_n(dev, i, a, want):
    xs = [x for x in i["x"] if x is not None]
    if not xs:
        raise Refused("no inputs")
    out = xs[0]
    for x in xs[1:]:  # in order, as Paddle's CPU sums them
        out = hw.add(out, x)
    return {"out": out if len(xs) > 1 else hw.add(out, hw.zeros_like(out))}


def _transpose_grad(dev, i, a, want):
    g = i["out_grad"]
    perm = [p % g.ndim for p in a["axis"]]
    back = [perm.index(k) for k in range(len(perm))]
    return {"x_grad": hw.transpose(g, back)}


def _reshape_grad(dev, i, a, want):
    # the shape Paddle's InferMeta gave x_grad: flatten_grad's x is its xshape (0 and then x's dims)
    shape = (want.get("x_grad") or (None,))[0] or i["x"].shape
    return {"x_grad": hw.reshape(i["out_grad"], list(shape))}


# ---- optimizers ----

def _sgd_sample(dtype):
    r = np.random.RandomState(0)
    return {"param": r.rand(3, 4).astype(dtype), "learning_rate": np.array([0.1], dtype),
            "grad": r.rand(3, 4).astype(dtype), "master_param": None}, {"multi_precision": False}


def _host(t):
    """A tensor's values on the host (a CPU input is already a numpy array)."""
    return t if isinstance(t, np.ndarray) else t.numpy()


def _adam_sample(dtype):
    r = np.random.RandomState(0)
    p = r.rand(3, 4).astype(dtype)
    return {"param": p, "grad": r.rand(3, 4).astype(dtype), "learning_rate": np.array([0.01], dtype),
            "moment1": np.zeros_like(p), "moment2": np.zeros_like(p), "moment2_max": None,
            "beta1_pow": np.array([0.9], dtype), "beta2_pow": np.array([0.999], dtype), "master_param": None,
            "skip_update": None}, {"beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8, "lazy_mode": False,
                                   "min_row_size_to_use_multithread": 1000, "multi_precision": False,
                                   "use_global_beta_pow": False, "amsgrad": False}


# ---- creation and casts ----

def _filled(shape, value, dtype):
    """value in every element: a read-only broadcast of one scalar (copied straight into Paddle's output)."""
    return np.broadcast_to(np.asarray(value).astype(dtype), tuple(shape))


def _full(dev, i, a, want):
    return {"out": _filled(a["shape"], a["val"], DTYPE_BY_CODE[a["dtype"]])}


def _full_like(dev, i, a, want):
    x = i["x"]
    dtype = DTYPE_BY_CODE.get(a["dtype"]) or np.dtype(x.dtype if isinstance(x, np.ndarray) else _float(x))
    return {"out": _filled(x.shape, a["val"], dtype)}


def _full_sample(dtype):
    return {}, {"shape": (2, 3), "val": 1, "dtype": 11}


def _cast_sample(dtype):
    return {"x": (np.arange(6) % 2).astype(dtype).reshape(2, 3)}, {"out_dtype": 11}


# ---- the hot path of a training step, on the device's arrays (Ops): a few µs of Python per kernel ----

def _reduce_to_a(k, g, shape: tuple):
    """A gradient of a broadcast result summed back to an input's shape (the vjp of broadcasting)."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = len(g.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + j for j, n in enumerate(shape) if n == 1 and g.shape[lead + j] != 1)
    if axes:
        g = k("sum", g, axis=axes, keepdim=False)
    return k("reshape", g, shape=shape) if tuple(g.shape) != shape else g


def _add_grad_a(negate: bool):
    def fn(k, i, a, want):
        x, y, g = i["x"], i["y"], i["dout"]
        if a["axis"] != -1 and len(y.shape) != len(x.shape):
            lead = a["axis"] if a["axis"] >= 0 else len(x.shape) - len(y.shape)
            placed = (1,) * lead + tuple(y.shape) + (1,) * (len(x.shape) - lead - len(y.shape))
        else:
            placed = tuple(y.shape)
        out = {}
        if "dx" in want:
            out["dx"] = _reduce_to_a(k, g, tuple(x.shape))
        if "dy" in want:
            dy = _reduce_to_a(k, g, placed)
            dy = k("reshape", dy, shape=tuple(y.shape)) if tuple(dy.shape) != tuple(y.shape) else dy
            out["dy"] = k("sub", k.const(0, g.dtype), dy) if negate else dy
        return out
    return fn


def _relu_a(k, i, a, want):
    x = i["x"]
    zero = k.const(0, x.dtype)
    # x > 0 ? x : 0, as Paddle's (a nan gives 0); numpy's where broadcasts the scalar, other devices get it expanded
    return {"out": k("where", k("greater", x, zero), x, zero if k.dev.host_memory else
                     k("expand", zero, shape=tuple(x.shape)))}


def _relu_grad_a(k, i, a, want):
    out, dout = i["out"], i["dout"]
    return {"dx": k("mul", dout, k("cast", k("greater", out, k.const(0, out.dtype)), dtype=dout.dtype.name))}


def _mean_all_a(k, i, a, want):
    x = i["x"]
    return {"out": k("mean", x, axis=tuple(range(len(x.shape))), keepdim=False)}


def _mean_all_grad_a(k, i, a, want):
    x, g = i["x"], i["out_grad"]
    n = int(np.prod(x.shape))
    scaled = k("div", k("reshape", g, shape=()), k.const(n, g.dtype))
    return {"x_grad": k("expand", scaled, shape=tuple(x.shape))}


def _matmul_grad_a(k, i, a, want):
    x, y, g = i["x"], i["y"], i["dout"]
    if len(x.shape) != 2 or len(y.shape) != 2:  # batched or vector operands: the vjp rule (broadcast batch dims)
        dev = k.dev
        t = {n: host.tensor(dev, v) for n, v in i.items()}
        got = _matmul_grad(dev, t, a, want)
        return {n: host.data(v) for n, v in got.items()}
    tx, ty = bool(a["transpose_x"]), bool(a["transpose_y"])

    def mm(p, q, tp=False, tq=False):
        return k("matmul", p, q, **({"transpose_x": True} if tp else {}), **({"transpose_y": True} if tq else {}))
    out = {}
    if "dx" in want:  # out = op(x) op(y): dop(x) = g op(y)^T, so dx = (g op(y)^T) or its transpose
        out["dx"] = mm(y, g, ty, True) if tx else mm(g, y, False, not ty)
    if "dy" in want:
        out["dy"] = mm(g, x, True, tx) if ty else mm(x, g, not tx, False)
    return out


def _classes_a(k, like, axis: int):
    shape = [1] * len(like.shape)
    shape[axis] = like.shape[axis]
    return k.const(np.arange(like.shape[axis], dtype=np.int64).reshape(shape), np.int64)


def _as_int64(k, label):
    return label if label.dtype == np.int64 else k("cast", label, dtype="int64")


def _cross_entropy_a(k, i, a, want):
    logits, label = i["logits"], i["label"]
    axis = a["axis"] % len(logits.shape)
    if a["use_softmax"]:
        logp = k("log_softmax", logits, axis=axis)
        probs = k("softmax", logits, axis=axis)
    else:
        probs, logp = logits, k("log", logits)
    out = {"softmax": probs}
    if a["soft_label"]:
        picked = k("sum", k("mul", label, logp), axis=(axis,), keepdim=True)
    else:  # a select, not a product (0 * -inf is nan); an ignored label picks nothing: its loss is 0
        hit = k("equal", _as_int64(k, label), _classes_a(k, logp, axis))
        zero = k.const(0, logp.dtype)
        picked = k("sum", k("where", hit, logp, k("expand", zero, shape=tuple(logp.shape))), axis=(axis,),
                   keepdim=True)
    out["loss"] = k("sub", k.const(0, picked.dtype), picked)
    return out


def _cross_entropy_grad_a(k, i, a, want):
    label, probs, g = i["label"], i["softmax"], i["loss_grad"]
    axis = a["axis"] % len(probs.shape)
    if a["soft_label"]:
        target, keep = label, None
    else:
        label = _as_int64(k, label)
        target = k("cast", k("equal", label, _classes_a(k, probs, axis)), dtype=probs.dtype.name)
        keep = k("cast", k("not_equal", label, k.const(a["ignore_index"], np.int64)), dtype=probs.dtype.name)
    if a["use_softmax"]:
        grad = k("mul", k("sub", probs, target), g)
    else:
        grad = k("mul", k("sub", k.const(0, probs.dtype), k("div", target, probs)), g)
    return {"logits_grad": grad if keep is None else k("mul", grad, keep)}


def _cast_a(k, i, a, want):
    return {"out": k("cast", i["x"], dtype=DTYPE_BY_CODE[a["out_dtype"]])}


def _sgd_a(k, i, a, want):
    if i.get("master_param") is not None:
        raise Refused("master weights (multi_precision for float16 parameters): hwadapter-paddle registers sgd for "
                      "float32 and float64 parameters only")
    return {"param_out": k("sgd_update", i["param"], i["grad"], i["learning_rate"])}


def _adam_a(k, i, a, want):
    if i.get("master_param") is not None:
        raise Refused("master weights (multi_precision for float16 parameters): hwadapter-paddle registers adam for "
                      "float32 and float64 parameters only")
    if a["amsgrad"]:
        raise Refused("amsgrad=True (hwadapter's adam_update has no running maximum of the second moment)")
    p, g, m, v = i["param"], i["grad"], i["moment1"], i["moment2"]
    b1, b2 = float(a["beta1"]), float(a["beta2"])
    # Paddle keeps the beta powers on the CPU (numpy here): read once, passed to the kernel as the device's scalars
    b1p, b2p = (np.asarray(_host(i[n])).reshape(()) for n in ("beta1_pow", "beta2_pow"))
    out = {}
    skip = i.get("skip_update")
    if skip is not None and bool(np.asarray(_host(skip)).reshape(-1)[0]):
        out.update({"param_out": p, "moment1_out": m, "moment2_out": v})
    else:
        scalars = (b1p, b2p) if k.dev.host_memory else (k("reshape", _device(k, b1p), shape=()),
                                                        k("reshape", _device(k, b2p), shape=()))
        new_p, new_m, new_v = k("adam_update", p, g, m, v, i["learning_rate"], *scalars, beta1=b1, beta2=b2,
                                epsilon=float(a["epsilon"]))
        out.update({"param_out": new_p, "moment1_out": new_m, "moment2_out": new_v})
    if not a["use_global_beta_pow"]:
        for name, base, beta in (("beta1_pow_out", b1p, b1), ("beta2_pow_out", b2p, b2)):
            if name in want:
                out[name] = (base * np.asarray(beta, base.dtype)).astype(base.dtype).reshape(want[name][0] or ())
    return out


def _device(k, array):
    """A small host array on k's device (a copy: Paddle's CPU tensors change between calls)."""
    return host.data(hw.to_tensor(array, device=k.dev))


def _softmax_grad_a(k, i, a, want):
    out, g = i["out"], i["out_grad"]
    axis = a["axis"] % max(len(out.shape), 1)
    dot = k("sum", k("mul", g, out), axis=(axis,), keepdim=True)
    return {"x_grad": k("mul", out, k("sub", g, dot))}


def _scale_a(k, i, a, want):
    x = i["x"]
    s, b = k.const(a["scale"], x.dtype), k.const(a["bias"], x.dtype)
    return {"out": k("add", k("mul", x, s), b) if a["bias_after_scale"] else k("mul", k("add", x, b), s)}


def _bn_frame(k, i, x, dtype, layout: str):
    """(channel axis, the other axes, channel(t): a per-channel vector shaped to broadcast against x, the scale)."""
    axis, axes = _bn_axes(x, layout)
    c = x.shape[axis]
    per = [1] * len(x.shape)
    per[axis] = c

    def channel(t):
        return k("reshape", t, shape=tuple(per))
    scale = i["scale"] if i.get("scale") is not None else k.const(np.ones(c), dtype)
    return axis, axes, channel, scale


def _batch_norm_a(k, i, a, want):
    x = i["x"]
    dtype = x.dtype
    axis, axes, channel, scale = _bn_frame(k, i, x, dtype, a["data_layout"])
    c = x.shape[axis]
    bias = i["bias"] if i.get("bias") is not None else k.const(np.zeros(c), dtype)
    batch = (not a["is_test"] or a["trainable_statistics"]) and not a["use_global_stats"]
    if batch:
        mean = k("mean", x, axis=axes, keepdim=False)
        centred = k("sub", x, channel(mean))
        var = k("mean", k("mul", centred, centred), axis=axes, keepdim=False)
    else:
        mean, var = i["mean"], i["variance"]
        centred = k("sub", x, channel(mean))
    inv = k("rsqrt", k("add", var, k.const(a["epsilon"], dtype)))
    out = {"y": k("add", k("mul", centred, channel(k("mul", inv, scale))), channel(bias))}
    if batch:
        m, rest = k.const(a["momentum"], dtype), k.const(1 - np.asarray(a["momentum"], dtype), dtype)
        out["mean_out"] = k("add", k("mul", i["mean"], m), k("mul", mean, rest))
        out["variance_out"] = k("add", k("mul", i["variance"], m), k("mul", var, rest))
        # Paddle keeps the batch's mean and its reciprocal standard deviation for the grad kernel
        out["saved_mean"], out["saved_variance"] = mean, inv
    else:
        out["mean_out"], out["variance_out"] = i["mean"], i["variance"]
        zeros = k("expand", k.const(0, dtype), shape=(c,))
        out["saved_mean"], out["saved_variance"] = zeros, zeros
    return out


def _batch_norm_grad_a(k, i, a, want):
    x, dy = i["x"], i["y_grad"]
    dtype = dy.dtype
    axis, axes, channel, scale = _bn_frame(k, i, x, dtype, a["data_layout"])
    if a["use_global_stats"] or (a["is_test"] and not a["trainable_statistics"]):
        mean, batch = i["mean"], False
        inv = k("rsqrt", k("add", i["variance"], k.const(a["epsilon"], dtype)))
    else:
        mean, inv, batch = i["saved_mean"], i["saved_variance"], True
    xhat = k("mul", k("sub", x, channel(mean)), channel(inv))
    dbias = k("sum", dy, axis=axes, keepdim=False)
    dscale = k("sum", k("mul", dy, xhat), axis=axes, keepdim=False)
    out = {"scale_grad": dscale, "bias_grad": dbias}
    if "x_grad" in want:
        s = k("mul", scale, inv)
        if batch:
            count = k.const(int(np.prod([x.shape[d] for d in axes])), dtype)
            inner = k("sub", k("sub", k("mul", dy, count), channel(dbias)),
                      k("mul", xhat, channel(dscale)))
            out["x_grad"] = k("mul", inner, channel(k("div", s, count)))
        else:
            out["x_grad"] = k("mul", dy, channel(s))
    return out


COMPOSITES = (
    Composite("add_grad", "const DenseTensor& x, const DenseTensor& y, const DenseTensor& dout, int axis, "
              "DenseTensor* dx, DenseTensor* dy", FLOATS, _add_grad_a(False), _binary_sample, exact=True, arrays=True),
    Composite("subtract_grad", "const DenseTensor& x, const DenseTensor& y, const DenseTensor& dout, int axis, "
              "DenseTensor* dx, DenseTensor* dy", FLOATS, _add_grad_a(True), _binary_sample, exact=True, arrays=True),
    Composite("multiply_grad", "const DenseTensor& x, const DenseTensor& y, const DenseTensor& dout, int axis, "
              "DenseTensor* dx, DenseTensor* dy", FLOATS, _binary_grad("mul"), _binary_sample),
    Composite("divide_grad", "const DenseTensor& x, const DenseTensor& y, const DenseTensor& out, "
              "const DenseTensor& dout, int axis, DenseTensor* dx, DenseTensor* dy", FLOATS, _binary_grad("div"),
              _div_sample),
    Composite("matmul_grad", "const DenseTensor& x, const DenseTensor& y, const DenseTensor& dout, bool transpose_x, "
              "bool transpose_y, DenseTensor* dx, DenseTensor* dy", FLOATS, _matmul_grad_a, _matmul_sample, arrays=True),
    Composite("relu", "const DenseTensor& x, DenseTensor* out", FLOATS, _relu_a, _unary_sample("x"), exact=True,
              arrays=True,
              note="x > 0 ? x : 0 as Paddle's (nan gives 0)"),
    Composite("relu_grad", "const DenseTensor& out, const DenseTensor& dout, DenseTensor* dx", FLOATS, _relu_grad_a,
              _unary_sample("out", "dout"), exact=True, arrays=True),
    Composite("gelu", "const DenseTensor& x, bool approximate, DenseTensor* out", FLOATS, _gelu, _unary_sample("x")),
    Composite("gelu_grad", "const DenseTensor& x, const DenseTensor& out_grad, bool approximate, DenseTensor* x_grad",
              FLOATS, _gelu_grad, _unary_sample("x", "out_grad")),
    Composite("softmax_grad", "const DenseTensor& out, const DenseTensor& out_grad, int axis, DenseTensor* x_grad",
              FLOATS, _softmax_grad_a, _unary_sample("out", "out_grad"), arrays=True),
    Composite("scale", "const DenseTensor& x, const Scalar& scale, const Scalar& bias, bool bias_after_scale, "
              "DenseTensor* out", FLOATS, _scale_a,
              lambda d: ({"x": np.arange(6, dtype=d)}, {"scale": 2.0, "bias": 1.0, "bias_after_scale": True}),
              exact=True, arrays=True),
    Composite("mean_all", "const DenseTensor& x, DenseTensor* out", FLOATS, _mean_all_a, _unary_sample("x"),
              arrays=True),
    Composite("mean_all_grad", "const DenseTensor& x, const DenseTensor& out_grad, DenseTensor* x_grad", FLOATS,
              _mean_all_grad_a, lambda d: ({"x": np.ones((2, 3), d), "out_grad": np.ones((), d)}, {}), arrays=True),
    Composite("sum_grad", "const DenseTensor& x, const DenseTensor& out_grad, const IntArray& dims, bool keep_dim, "
              "bool reduce_all, DenseTensor* x_grad", FLOATS, _reduce_grad(False), _reduce_sample, exact=True),
    Composite("mean_grad", "const DenseTensor& x, const DenseTensor& out_grad, const IntArray& dims, bool keep_dim, "
              "bool reduce_all, DenseTensor* x_grad", FLOATS, _reduce_grad(True), _reduce_sample),
    Composite("cross_entropy_with_softmax", "const DenseTensor& logits, const DenseTensor& label, bool soft_label, "
              "bool use_softmax, bool numeric_stable_mode, int ignore_index, int axis, DenseTensor* softmax, "
              "DenseTensor* loss", FLOATS, _cross_entropy_a, _cross_entropy_sample, arrays=True),
    Composite("cross_entropy_with_softmax_grad", "const DenseTensor& label, const DenseTensor& softmax, "
              "const DenseTensor& loss_grad, bool soft_label, bool use_softmax, bool numeric_stable_mode, "
              "int ignore_index, int axis, DenseTensor* logits_grad", FLOATS, _cross_entropy_grad_a,
              _cross_entropy_sample, arrays=True),
    Composite("conv2d_grad", "const DenseTensor& input, const DenseTensor& filter, const DenseTensor& out_grad, "
              "const std::vector<int>& strides, const std::vector<int>& paddings, const std::string& padding_algorithm, "
              "const std::vector<int>& dilations, int groups, const std::string& data_format, "
              "DenseTensor* input_grad, DenseTensor* filter_grad", FLOATS, _conv_grad, _conv_sample),
    Composite("depthwise_conv2d_grad", "const DenseTensor& input, const DenseTensor& filter, "
              "const DenseTensor& out_grad, const std::vector<int>& strides, const std::vector<int>& paddings, "
              "const std::string& padding_algorithm, int groups, const std::vector<int>& dilations, "
              "const std::string& data_format, DenseTensor* input_grad, DenseTensor* filter_grad", FLOATS,
              _conv_grad, lambda d: ({**_conv_sample(d)[0], "filter": np.ones((2, 1, 3, 3), d),
                                      "out_grad": np.ones((1, 2, 5, 5), d)}, {**_conv_sample(d)[1], "groups": 2})),
    Composite("pool2d_grad", "const DenseTensor& x, const DenseTensor& out, const DenseTensor& dout, "
              "const IntArray& kernel_size, const std::vector<int64_t>& strides, "
              "const std::vector<int64_t>& paddings, bool ceil_mode, bool exclusive, const std::string& data_format, "
              "const std::string& pooling_type, bool global_pooling, bool adaptive, "
              "const std::string& padding_algorithm, DenseTensor* dx", FLOATS, _pool_grad, _pool_sample("max"),
              note="max: the first maximal element of a window takes its gradient, as Paddle's CPU"),
    Composite("batch_norm", "const DenseTensor& x, const DenseTensor& mean, const DenseTensor& variance, "
              "const paddle::optional<DenseTensor>& scale, const paddle::optional<DenseTensor>& bias, bool is_test, "
              "float momentum, float epsilon, const std::string& data_layout, bool use_global_stats, "
              "bool trainable_statistics, DenseTensor* y, DenseTensor* mean_out, DenseTensor* variance_out, "
              "DenseTensor* saved_mean, DenseTensor* saved_variance, DenseTensor* reserve_space", FLOATS,
              _batch_norm_a, _bn_sample, arrays=True, note="the biased batch variance updates the running one, as Paddle's"),
    Composite("batch_norm_grad", "const DenseTensor& x, const paddle::optional<DenseTensor>& scale, "
              "const paddle::optional<DenseTensor>& bias, const paddle::optional<DenseTensor>& mean, "
              "const paddle::optional<DenseTensor>& variance, const DenseTensor& saved_mean, "
              "const DenseTensor& saved_variance, const paddle::optional<DenseTensor>& reserve_space, "
              "const DenseTensor& y_grad, float momentum, float epsilon, const std::string& data_layout, "
              "bool is_test, bool use_global_stats, bool trainable_statistics, DenseTensor* x_grad, "
              "DenseTensor* scale_grad, DenseTensor* bias_grad", FLOATS, _batch_norm_grad_a, _bn_sample, arrays=True),
    Composite("layer_norm", "const DenseTensor& x, const paddle::optional<DenseTensor>& scale, "
              "const paddle::optional<DenseTensor>& bias, float epsilon, int begin_norm_axis, DenseTensor* out, "
              "DenseTensor* mean, DenseTensor* variance", FLOATS, _layer_norm, _ln_sample),
    Composite("layer_norm_grad", "const DenseTensor& x, const paddle::optional<DenseTensor>& scale, "
              "const paddle::optional<DenseTensor>& bias, const DenseTensor& mean, const DenseTensor& variance, "
              "const DenseTensor& out_grad, float epsilon, int begin_norm_axis, DenseTensor* x_grad, "
              "DenseTensor* scale_grad, DenseTensor* bias_grad", FLOATS, _layer_norm_grad, _ln_sample),
    Composite("embedding", "const DenseTensor& inputx, const DenseTensor& weight, int64_t padding_idx, "
              "DenseTensor* out", FLOATS, _embedding, _embedding_sample, exact=True),
    Composite("embedding_grad", "const DenseTensor& input, const DenseTensor& weight, const DenseTensor& out_grad, "
              "int64_t padding_idx, DenseTensor* weight_grad", FLOATS, _embedding_grad, _embedding_sample,
              note="repeated ids add up in index order"),
    Composite("add_n", "const std::vector<const TensorBase*>& x, DenseTensor* out", FLOATS, _add_n,
              lambda d: ({"x": [np.ones((2, 3), d), np.ones((2, 3), d)]}, {}), exact=True,
              note="the inputs added in order, as Paddle's CPU"),
    Composite("transpose_grad", "const DenseTensor& out_grad, const std::vector<int>& axis, DenseTensor* x_grad",
              ALL[1:], _transpose_grad, lambda d: ({"out_grad": np.zeros((2, 3), d)}, {"axis": (1, 0)}), exact=True),
    Composite("reshape_grad", "const DenseTensor& x, const DenseTensor& out_grad, DenseTensor* x_grad", ALL[1:],
              _reshape_grad, lambda d: ({"x": np.zeros((2, 3), d), "out_grad": np.zeros(6, d)}, {}), exact=True),
    Composite("flatten_grad", "const DenseTensor& x, const DenseTensor& out_grad, DenseTensor* x_grad", ALL[1:],
              _reshape_grad, lambda d: ({"x": np.zeros((2, 3), d), "out_grad": np.zeros(6, d)}, {}), exact=True),
    Composite("sgd", "const DenseTensor& param, const DenseTensor& learning_rate, const DenseTensor& grad, "
              "const paddle::optional<DenseTensor>& master_param, bool multi_precision, DenseTensor* param_out, "
              "DenseTensor* master_param_out", FLOATS, _sgd_a, _sgd_sample, arrays=True),
    Composite("adam", "const DenseTensor& param, const DenseTensor& grad, const DenseTensor& learning_rate, "
              "const DenseTensor& moment1, const DenseTensor& moment2, "
              "const paddle::optional<DenseTensor>& moment2_max, const DenseTensor& beta1_pow, "
              "const DenseTensor& beta2_pow, const paddle::optional<DenseTensor>& master_param, "
              "const paddle::optional<DenseTensor>& skip_update, const Scalar& beta1, const Scalar& beta2, "
              "const Scalar& epsilon, bool lazy_mode, int64_t min_row_size_to_use_multithread, bool multi_precision, "
              "bool use_global_beta_pow, bool amsgrad, DenseTensor* param_out, DenseTensor* moment1_out, "
              "DenseTensor* moment2_out, DenseTensor* moment2_max_out, DenseTensor* beta1_pow_out, "
              "DenseTensor* beta2_pow_out, DenseTensor* master_param_outs", FLOATS, _adam_a, _adam_sample, arrays=True,
              host_inputs=("beta1_pow", "beta2_pow", "skip_update"),
              host_outputs={"beta1_pow_out": "beta1_pow", "beta2_pow_out": "beta2_pow"}),
    Composite("full", "const IntArray& shape, const Scalar& val, DataType dtype, DenseTensor* out", ALL, _full,
              _full_sample, exact=True, note="filled on the host, copied into the device's memory"),
    Composite("full_like", "const DenseTensor& x, const Scalar& val, DataType dtype, DenseTensor* out", ALL,
              _full_like, lambda d: ({"x": np.zeros((2, 3), d)}, {"val": 1, "dtype": 11}), exact=True,
              note="filled on the host, copied into the device's memory"),
    Composite("cast", "const DenseTensor& x, DataType out_dtype, DenseTensor* out", ALL, _cast_a, _cast_sample,
              exact=True, arrays=True, dtype_attribute=True, note="a float out of the target integer's range is undefined in both"),
)
BY_PHI = {c.phi: c for c in COMPOSITES}
