"""The "fused" op: graph nodes as one hwadapter_kp.fuse kernel, run through a device's codegen backend (one launch),
or interpreted in numpy on a host-memory device without one."""
from __future__ import annotations

import hashlib

import numpy as np

from ..api.errors import InvalidArgumentError
from .codegen import PrimitiveKernel, PrimitiveOp
from .signature import BoundedCache, freeze

#: Graph ops a fused kernel computes, as kernel-primitive functors (the same names unless listed).
UNARY = frozenset({"abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu", "erf",
                   "sin", "cos", "floor", "ceil", "round", "sign", "logical_not"})
BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow", "maximum": "max", "minimum": "min",
          "mod": "mod", "equal": "eq", "not_equal": "ne", "less": "lt", "less_equal": "le", "greater": "gt",
          "greater_equal": "ge", "logical_and": "logical_and", "logical_or": "logical_or",
          "logical_xor": "logical_xor"}
REDUCTIONS = frozenset({"sum", "mean", "max", "min", "prod"})


def functor_nodes(node, operands: tuple, result: str, dtypes: tuple) -> list | None:
    """The fuse nodes ((op, operands, result, attrs) with attrs as (key, value) pairs) computing graph `node`, or
    None when a fused kernel cannot compute it exactly as the op set does."""
    op, attrs = node.op, node.attrs
    floats = all(np.dtype(d).kind == "f" for d in dtypes)
    if op in UNARY:
        return [(op, operands, result, ())]
    if op == "gelu" and not attrs.get("approximate", False):
        return [("gelu", operands, result, ())]
    if op in BINARY and (op != "div" or floats):  # integer div is floor division in primitives, true in the op set
        return [(BINARY[op], operands, result, ())]
    if op == "where":
        return [("where", operands, result, ())]
    if op == "cast":
        return [("cast", operands, result, (("dtype", np.dtype(attrs["dtype"]).name),))]
    if op == "clip" and floats:
        lo, hi = attrs.get("min"), attrs.get("max")
        if lo is None and hi is None:
            return [("identity", operands, result, ())]
        nodes, x = [], operands[0]
        steps = [(fn, bound) for fn, bound in (("max", lo), ("min", hi)) if bound is not None]
        for k, (fn, bound) in enumerate(steps):
            out = result if k == len(steps) - 1 else f"{result}_lo"
            nodes.append((fn, (x, float(bound)), out, ()))
            x = out
        return nodes
    if op in REDUCTIONS and floats:  # integer sums accumulate wider in primitives than in the op set
        axis = attrs.get("axis")
        axes = None if axis is None else ((axis,) if isinstance(axis, (int, np.integer)) else tuple(axis))
        return [(f"reduce_{op}", operands, result,
                 (("axes", None if axes is None else tuple(int(a) for a in axes)),
                  ("keepdims", bool(attrs.get("keepdim", False)))))]
    return None


def kernel_name(nodes, inputs, outputs) -> str:
    """A name unique to the fused computation (compiled programs are cached by it)."""
    text = repr((freeze(nodes), tuple(inputs), tuple(outputs)))
    return f"fused_{hashlib.sha1(text.encode()).hexdigest()[:12]}"


class FusedKernel(PrimitiveKernel):
    """A PrimitiveKernel over one fused program that returns every output, always as a list."""

    def returned(self, program) -> tuple:
        return tuple(self.spec.outputs)

    def __call__(self, *arrays, out=None):
        result = super().__call__(*arrays, out=out)
        return list(result) if isinstance(result, list) else [result]


_kernels = BoundedCache(512)  # device-free: the kp Kernel of each fused computation (Device.fused holds the compiled ones)


def _kp_kernel(attrs):
    """The hwadapter_kp Kernel of a fused node's computation, built once."""
    def build():
        import hwadapter_kp  # lazy: importing it costs tens of milliseconds
        return hwadapter_kp.fuse(attrs["nodes"], tuple(attrs["inputs"]), tuple(attrs["outputs"]),
                                 attrs.get("name", "fused"))
    return _kernels.get_or_make(_key(attrs), build)


def _key(attrs) -> tuple:
    return (freeze(attrs["nodes"]), tuple(attrs["inputs"]), tuple(attrs["outputs"]), attrs.get("name", "fused"))


def interpret(attrs, arrays) -> list:
    """The fused node's outputs for numpy `arrays`, from the kernel-primitive interpreter (what the program means)."""
    import hwadapter_kp  # lazy: importing hwadapter_kp costs tens of milliseconds; only interpreting needs it
    out = hwadapter_kp.interpret(_kp_kernel(attrs), dict(zip(attrs["inputs"], (np.asarray(a) for a in arrays))))
    return [out[n] for n in attrs["outputs"]]


def fused_kernel(device, attrs):
    """A callable (device arrays in attrs["inputs"] order) -> [device arrays in attrs["outputs"] order] running the
    fused node on `device`: compiled by its codegen backend, else interpreted when tensors there are numpy arrays."""
    return device.fused.get_or_make(_key(attrs), lambda: _make(device, attrs))


def _make(device, attrs):
    if device.codegen is not None:
        spec = PrimitiveOp(_kp_kernel(attrs), tuple(attrs["inputs"]), outputs=tuple(attrs["outputs"]))
        return FusedKernel(attrs.get("name", "fused"), spec, device, device.codegen)
    if device.host_memory:
        return lambda *arrays: interpret(attrs, arrays)
    raise InvalidArgumentError(
        f"{device}: cannot run fused node {attrs.get('name', 'fused')!r}: the device has no codegen backend "
        f"({device.codegen_unavailable or 'its plugin has none'}). Fix: fuse only for devices where "
        f"`device.codegen` is set (the can_fuse argument of hwadapter.graph.passes.fuse)",
        fix="fuse only for devices with a codegen backend")


def node_primitive(device, node) -> tuple:
    """(`device`'s kernel-primitive kernel for graph `node`, the attrs to specialise it with) or (None, None)."""
    # a "fused" node is its own program, its attributes built in (so none); any other node runs its op's program
    if node.op != "fused":
        kernel = device.primitive(node.op)
        return (kernel, node.attrs) if kernel is not None else (None, None)
    if device.codegen is None:
        return None, None
    return fused_kernel(device, node.attrs), {}

