"""The phi kernels a training loop needs beyond the forward ops of optable.py: gradients, optimizer steps and the
forward kernels Paddle's CPU computes its own way (relu's nan, cross entropy, full, cast), each written in
hwadapter's ops, so they run on the plugin's own kernels (hwadapter's vjp rules for the gradients) with no code from
the vendor.

A Composite names its phi kernel, Paddle's C++ parameter list (after the context, as Paddle's header declares it:
kernels.composite_wrapper turns it into the phi kernel and its registration), the dtypes it is registered for, and
fn(dev, ins, attrs, want) -> {output: Tensor or numpy array}: `ins` the inputs by name (hwadapter Tensors on the
device; numpy arrays for tensors Paddle keeps on the CPU, such as Adam's beta powers; None for an absent optional
one), `attrs` Paddle's attributes by name (IntArray and vectors as tuples, Scalar as int or float, DataType as a
numpy dtype), `want` {output: (shape, numpy dtype)} for the outputs Paddle asked for. What fn cannot do exactly as
Paddle does it refuses with `Refused` (a message naming the case); install leaves a kernel whose sample run needs
an op the plugin lacks to Paddle's CPU fallback, with the reason (kernels.plan_composites).
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


def reduce_to(g, shape: tuple):
    """A gradient of a broadcast result summed back to an input's shape (the vjp of broadcasting)."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + k for k, s in enumerate(shape) if s == 1 and g.shape[lead + k] != 1)
    if axes:
        g = hw.sum(g, axis=list(axes))
    return hw.reshape(g, list(shape)) if tuple(g.shape) != shape else g


def _add_grad(negate: bool):
    """add_grad, subtract_grad: Paddle passes x and y without their data (only their shapes matter)."""
    def fn(dev, i, a, want):
        x, y = i["x"], i["y"]
        if a["axis"] != -1 and len(y.shape) != len(x.shape):
            lead = a["axis"] if a["axis"] >= 0 else len(x.shape) - len(y.shape)
            placed = (1,) * lead + tuple(y.shape) + (1,) * (len(x.shape) - lead - len(y.shape))
        else:
            placed = tuple(y.shape)
        g, out = i["dout"], {}
        if "dx" in want:
            out["dx"] = reduce_to(g, x.shape)
        if "dy" in want:
            dy = hw.reshape(reduce_to(g, placed), list(y.shape))
            out["dy"] = hw.subtract(hw.zeros_like(dy), dy) if negate else dy
        return out
    return fn


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

def _relu(dev, i, a, want):
    x = i["x"]
    # Paddle's relu is x > 0 ? x : 0, so nan becomes 0 (hwadapter's relu keeps nan): the same select here
    return {"out": hw.where(hw.greater_than(x, hw.zeros_like(x)), x, hw.zeros_like(x))}


def _relu_grad(dev, i, a, want):
    out, dout = i["out"], i["dout"]
    # Paddle: dout * (out > 0), so a nan dout stays nan where out <= 0
    return {"dx": hw.multiply(dout, hw.cast(hw.greater_than(out, hw.zeros_like(out)), _float(dout).name))}


def _gelu(dev, i, a, want):
    return {"out": hw.nn.functional.gelu(i["x"], approximate=bool(a["approximate"]))}


def _gelu_grad(dev, i, a, want):
    return _grads("gelu", [i["x"]], i["out_grad"], {"approximate": bool(a["approximate"])}, [i["out_grad"]], want,
                  ("x_grad",))


def _softmax_grad(dev, i, a, want):
    out = i["out"]
    axis = a["axis"] % max(out.ndim, 1)
    return _grads("softmax", [out], i["out_grad"], {"axis": axis}, [out], want, ("x_grad",))


def _unary_sample(*names):
    def sample(dtype):
        r = np.random.RandomState(0)
        return {n: (r.rand(3, 4) - 0.5).astype(dtype) for n in names}, {"approximate": False, "axis": -1}
    return sample


def _scale(dev, i, a, want):
    x = i["x"]
    dtype = _float(x)
    s, b = _const(dev, a["scale"], dtype), _const(dev, a["bias"], dtype)
    return {"out": hw.add(hw.multiply(x, s), b) if a["bias_after_scale"] else hw.multiply(hw.add(x, b), s)}


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


def _mean_all(dev, i, a, want):
    return {"out": hw.mean(i["x"])}


def _mean_all_grad(dev, i, a, want):
    x = i["x"]
    return {"x_grad": _spread(i["out_grad"], tuple(x.shape), tuple(range(len(x.shape))), int(np.prod(x.shape)))}


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


def _ignored(dev, label, ignore_index: int):
    return hw.equal(hw.cast(label, "int64"), _const(dev, ignore_index, np.int64))


def _cross_entropy(dev, i, a, want):
    logits, label = i["logits"], i["label"]
    axis = a["axis"] % logits.ndim
    if a["use_softmax"]:
        logp = hw.nn.functional.log_softmax(logits, axis=axis)
        probs = hw.nn.functional.softmax(logits, axis=axis)
    else:
        probs = logits
        logp = hw.log(logits)
    out = {"softmax": probs}
    if a["soft_label"]:
        out["loss"] = hw.multiply(hw.sum(hw.multiply(label, logp), axis=axis, keepdim=True), _const(dev, -1, _float(logp)))
        return out
    # the label's entry picked by a select and a sum (a select, not a product: 0 * -inf would be nan); an ignored
    # label picks nothing, so its loss is 0 as Paddle's
    hit = hw.equal(hw.cast(label, "int64"), _classes(dev, logp, axis))
    picked = hw.sum(hw.where(hit, logp, hw.zeros_like(logp)), axis=axis, keepdim=True)
    out["loss"] = hw.subtract(hw.zeros_like(picked), picked)
    return out


def _cross_entropy_grad(dev, i, a, want):
    label, probs, g = i["label"], i["softmax"], i["loss_grad"]
    axis = a["axis"] % probs.ndim
    if a["soft_label"]:
        target = label
        keep = None
    else:
        target = _class_hot(dev, label, probs, axis)
        keep = hw.logical_not(_ignored(dev, label, a["ignore_index"]))
    if a["use_softmax"]:
        grad = hw.multiply(hw.subtract(probs, target), g)
    else:
        grad = hw.multiply(hw.subtract(hw.zeros_like(probs), hw.divide(target, probs)), g)
    if keep is not None:
        grad = hw.where(hw.expand(keep, grad.shape), grad, hw.zeros_like(grad))
    return {"logits_grad": grad}


def _cross_entropy_sample(dtype):
    r = np.random.RandomState(0)
    probs = np.full((3, 4), 0.25, dtype)
    return {"logits": r.rand(3, 4).astype(dtype), "label": np.array([[0], [3], [1]], np.int64), "softmax": probs,
            "loss_grad": r.rand(3, 1).astype(dtype)}, {"soft_label": False, "use_softmax": True,
                                                       "numeric_stable_mode": True, "ignore_index": -100, "axis": -1}


# ---- optimizers ----

def _sgd(dev, i, a, want):
    if i.get("master_param") is not None:
        raise Refused("master weights (multi_precision for float16 parameters): hwadapter-paddle registers sgd for "
                      "float32 and float64 parameters only")
    p = i["param"]
    return {"param_out": host.tensor(dev, host.run_own_kernel("sgd_update", dev, host.data(p), host.data(i["grad"]),
                                                              host.data(i["learning_rate"])))}


def _sgd_sample(dtype):
    r = np.random.RandomState(0)
    return {"param": r.rand(3, 4).astype(dtype), "learning_rate": np.array([0.1], dtype),
            "grad": r.rand(3, 4).astype(dtype), "master_param": None}, {"multi_precision": False}


def _adam(dev, i, a, want):
    if i.get("master_param") is not None:
        raise Refused("master weights (multi_precision for float16 parameters): hwadapter-paddle registers adam for "
                      "float32 and float64 parameters only")
    p, g, m, v = i["param"], i["grad"], i["moment1"], i["moment2"]
    dtype = _float(p)
    b1, b2, eps = float(a["beta1"]), float(a["beta2"]), float(a["epsilon"])
    b1p, b2p = (np.asarray(_host(i[k])).reshape(()) for k in ("beta1_pow", "beta2_pow"))
    skip = i.get("skip_update")
    if skip is not None and bool(np.asarray(_host(skip)).reshape(-1)[0]):
        out = {"param_out": p, "moment1_out": m, "moment2_out": v}
        if "moment2_max_out" in want and i.get("moment2_max") is not None:
            out["moment2_max_out"] = i["moment2_max"]
        out.update({"beta1_pow_out": b1p.reshape(want.get("beta1_pow_out", ((),))[0]),
                    "beta2_pow_out": b2p.reshape(want.get("beta2_pow_out", ((),))[0])})
        return out
    if a["amsgrad"]:
        raise Refused("amsgrad=True (hwadapter's adam_update has no running maximum of the second moment)")
    new_p, new_m, new_v = (host.tensor(dev, d) for d in host.run_own_kernel(
        "adam_update", dev, *map(host.data, (p, g, m, v, i["learning_rate"], _const(dev, b1p, dtype),
                                             _const(dev, b2p, dtype))), beta1=b1, beta2=b2, epsilon=eps))
    out = {"param_out": new_p, "moment1_out": new_m, "moment2_out": new_v}
    if not a["use_global_beta_pow"]:
        for name, base, beta in (("beta1_pow_out", b1p, b1), ("beta2_pow_out", b2p, b2)):
            if name in want:
                out[name] = (base * np.asarray(beta, base.dtype)).astype(base.dtype).reshape(want[name][0] or ())
    return out


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

def _full(dev, i, a, want):
    return {"out": np.full(tuple(a["shape"]), a["val"], DTYPE_BY_CODE[a["dtype"]])}


def _full_like(dev, i, a, want):
    x = i["x"]
    dtype = DTYPE_BY_CODE.get(a["dtype"]) or np.dtype(x.dtype if isinstance(x, np.ndarray) else _float(x))
    return {"out": np.full(tuple(x.shape), a["val"], dtype)}


def _cast(dev, i, a, want):
    return {"out": hw.cast(i["x"], DTYPE_BY_CODE[a["out_dtype"]])}


def _full_sample(dtype):
    return {}, {"shape": (2, 3), "val": 1, "dtype": 11}


def _cast_sample(dtype):
    return {"x": (np.arange(6) % 2).astype(dtype).reshape(2, 3)}, {"out_dtype": 11}


COMPOSITES = (
    Composite("add_grad", "const DenseTensor& x, const DenseTensor& y, const DenseTensor& dout, int axis, "
              "DenseTensor* dx, DenseTensor* dy", FLOATS, _add_grad(False), _binary_sample, exact=True),
    Composite("subtract_grad", "const DenseTensor& x, const DenseTensor& y, const DenseTensor& dout, int axis, "
              "DenseTensor* dx, DenseTensor* dy", FLOATS, _add_grad(True), _binary_sample, exact=True),
    Composite("multiply_grad", "const DenseTensor& x, const DenseTensor& y, const DenseTensor& dout, int axis, "
              "DenseTensor* dx, DenseTensor* dy", FLOATS, _binary_grad("mul"), _binary_sample),
    Composite("divide_grad", "const DenseTensor& x, const DenseTensor& y, const DenseTensor& out, "
              "const DenseTensor& dout, int axis, DenseTensor* dx, DenseTensor* dy", FLOATS, _binary_grad("div"),
              _div_sample),
    Composite("matmul_grad", "const DenseTensor& x, const DenseTensor& y, const DenseTensor& dout, bool transpose_x, "
              "bool transpose_y, DenseTensor* dx, DenseTensor* dy", FLOATS, _matmul_grad, _matmul_sample),
    Composite("relu", "const DenseTensor& x, DenseTensor* out", FLOATS, _relu, _unary_sample("x"), exact=True,
              note="x > 0 ? x : 0 as Paddle's (nan gives 0)"),
    Composite("relu_grad", "const DenseTensor& out, const DenseTensor& dout, DenseTensor* dx", FLOATS, _relu_grad,
              _unary_sample("out", "dout"), exact=True),
    Composite("gelu", "const DenseTensor& x, bool approximate, DenseTensor* out", FLOATS, _gelu, _unary_sample("x")),
    Composite("gelu_grad", "const DenseTensor& x, const DenseTensor& out_grad, bool approximate, DenseTensor* x_grad",
              FLOATS, _gelu_grad, _unary_sample("x", "out_grad")),
    Composite("softmax_grad", "const DenseTensor& out, const DenseTensor& out_grad, int axis, DenseTensor* x_grad",
              FLOATS, _softmax_grad, _unary_sample("out", "out_grad")),
    Composite("scale", "const DenseTensor& x, const Scalar& scale, const Scalar& bias, bool bias_after_scale, "
              "DenseTensor* out", FLOATS, _scale,
              lambda d: ({"x": np.arange(6, dtype=d)}, {"scale": 2.0, "bias": 1.0, "bias_after_scale": True}),
              exact=True),
    Composite("mean_all", "const DenseTensor& x, DenseTensor* out", FLOATS, _mean_all, _unary_sample("x")),
    Composite("mean_all_grad", "const DenseTensor& x, const DenseTensor& out_grad, DenseTensor* x_grad", FLOATS,
              _mean_all_grad, lambda d: ({"x": np.ones((2, 3), d), "out_grad": np.ones((), d)}, {})),
    Composite("sum_grad", "const DenseTensor& x, const DenseTensor& out_grad, const IntArray& dims, bool keep_dim, "
              "bool reduce_all, DenseTensor* x_grad", FLOATS, _reduce_grad(False), _reduce_sample, exact=True),
    Composite("mean_grad", "const DenseTensor& x, const DenseTensor& out_grad, const IntArray& dims, bool keep_dim, "
              "bool reduce_all, DenseTensor* x_grad", FLOATS, _reduce_grad(True), _reduce_sample),
    Composite("cross_entropy_with_softmax", "const DenseTensor& logits, const DenseTensor& label, bool soft_label, "
              "bool use_softmax, bool numeric_stable_mode, int ignore_index, int axis, DenseTensor* softmax, "
              "DenseTensor* loss", FLOATS, _cross_entropy, _cross_entropy_sample),
    Composite("cross_entropy_with_softmax_grad", "const DenseTensor& label, const DenseTensor& softmax, "
              "const DenseTensor& loss_grad, bool soft_label, bool use_softmax, bool numeric_stable_mode, "
              "int ignore_index, int axis, DenseTensor* logits_grad", FLOATS, _cross_entropy_grad,
              _cross_entropy_sample),
    Composite("sgd", "const DenseTensor& param, const DenseTensor& learning_rate, const DenseTensor& grad, "
              "const paddle::optional<DenseTensor>& master_param, bool multi_precision, DenseTensor* param_out, "
              "DenseTensor* master_param_out", FLOATS, _sgd, _sgd_sample),
    Composite("adam", "const DenseTensor& param, const DenseTensor& grad, const DenseTensor& learning_rate, "
              "const DenseTensor& moment1, const DenseTensor& moment2, "
              "const paddle::optional<DenseTensor>& moment2_max, const DenseTensor& beta1_pow, "
              "const DenseTensor& beta2_pow, const paddle::optional<DenseTensor>& master_param, "
              "const paddle::optional<DenseTensor>& skip_update, const Scalar& beta1, const Scalar& beta2, "
              "const Scalar& epsilon, bool lazy_mode, int64_t min_row_size_to_use_multithread, bool multi_precision, "
              "bool use_global_beta_pow, bool amsgrad, DenseTensor* param_out, DenseTensor* moment1_out, "
              "DenseTensor* moment2_out, DenseTensor* moment2_max_out, DenseTensor* beta1_pow_out, "
              "DenseTensor* beta2_pow_out, DenseTensor* master_param_outs", FLOATS, _adam, _adam_sample,
              host_inputs=("beta1_pow", "beta2_pow", "skip_update"),
              host_outputs={"beta1_pow_out": "beta1_pow", "beta2_pow_out": "beta2_pow"}),
    Composite("full", "const IntArray& shape, const Scalar& val, DataType dtype, DenseTensor* out", ALL, _full,
              _full_sample, exact=True, note="filled on the host, copied into the device's memory"),
    Composite("full_like", "const DenseTensor& x, const Scalar& val, DataType dtype, DenseTensor* out", ALL,
              _full_like, lambda d: ({"x": np.zeros((2, 3), d)}, {"val": 1, "dtype": 11}), exact=True,
              note="filled on the host, copied into the device's memory"),
    Composite("cast", "const DenseTensor& x, DataType out_dtype, DenseTensor* out", ALL, _cast, _cast_sample,
              exact=True, note="a float out of the target integer's range is undefined in both"),
)
BY_PHI = {c.phi: c for c in COMPOSITES}
