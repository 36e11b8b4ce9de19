"""The embedded kernel language: parameter annotations, primitives and the @kernel decorator.

A kernel body is ordinary Python run once per specialisation with parameter
proxies; every primitive call appends a node to the current trace.  Nodes are
interned, so reading the same input twice yields one load.
"""

import re
import threading
from dataclasses import dataclass

import numpy as np

from . import dtypes as dt
from .errors import KernelError
from .functors import lookup
from .ir import Apply, Const, CycleLoad, Load, Reduce, Store, Value
from .reducers import lookup_reducer


@dataclass(frozen=True)
class ParamSpec:
    """Annotation of a kernel parameter: kind ("in"/"out") and dtype or type variable."""

    kind: str
    dtype: str


class _Annotation:
    kind = ""

    def __class_getitem__(cls, dtype):
        return ParamSpec(cls.kind, dt.normalize(dtype) if dt.is_dtype(dtype) else str(dtype))


class In(_Annotation):
    """``kp.In["T"]`` / ``kp.In["float32"]``: an input buffer; default ``= None`` makes it optional."""

    kind = "in"


class Out(_Annotation):
    """``kp.Out["T"]``: an output buffer; an unbound type variable takes the dtype written to it."""

    kind = "out"


@dataclass(frozen=True)
class ParamDecl:
    """A declared kernel parameter."""

    name: str
    kind: str
    dtype: str
    optional: bool = False


class ParamRef:
    """What a kernel body receives for each parameter: name, dtype and (inputs) ndim."""

    def __init__(self, name, kind, dtype, ndim):
        self.name, self.kind, self.dtype, self.ndim = name, kind, dtype, ndim

    def __repr__(self):
        return f"<{self.kind} {self.name}: {self.dtype}>"


_RESERVED = re.compile(r"^(unit|item|first|last|rest|r|r_rest|flat|n_units|n_items|n_reduce|e|"
                       r"(i|size|v|acc)\d.*|kp_.*|.*_(base|period|stride\d+))$")
_C_WORDS = set("auto break case char const continue default do double else enum extern float for goto if "
               "inline int long register restrict return short signed sizeof static struct switch typedef "
               "union unsigned void volatile while bool half global local kernel private constant "
               "true false new delete class this template".split())
# math and work-item builtins a parameter (a pointer in the entry) would shadow in some dialect
_BUILTINS = set("exp log sqrt rsqrt tanh erf sin cos floor ceil rint fabs pow fmod copysign min max abs isnan "
                "sign round select clamp mix vload_half vstore_half vstore_half_rte get_global_id get_global_size "
                "blockIdx threadIdx blockDim gridDim uint ulong uchar ushort char2 float2 float4 "
                "INFINITY NAN".split())


def check_param_name(kernel: str, name: str):
    """Reject parameter names that are not C identifiers or would clash with keywords, builtins or locals."""
    if not name.isidentifier() or not name.isascii():
        raise KernelError(f"kernel {kernel!r}: parameter name {name!r} is not a C identifier; rename it")
    if name in _C_WORDS or name in _BUILTINS or _RESERVED.match(name) or name.startswith("__") \
            or name.endswith("_t"):
        raise KernelError(f"kernel {kernel!r}: parameter name {name!r} is reserved in generated code; rename it")


# --- the trace -----------------------------------------------------------------

class Trace:
    """State of one kernel body execution."""

    def __init__(self, kernel: str, refs: dict):
        self.kernel = kernel
        self.refs = refs
        self.out_dtypes = {n: r.dtype for n, r in refs.items() if r.kind == "out"}
        self.nodes = {}
        self.stores = []
        self.modes = {}          # input -> "domain" | "cycle"
        self.offsets = {}        # input -> explicit axis alignment
        self.full = set()        # inputs that must have the domain's shape
        self.declared_axes = None

    def intern(self, key, make):
        node = self.nodes.get(key)
        if node is None:
            node = self.nodes[key] = make()
        return node

    def error(self, message):
        return KernelError(f"kernel {self.kernel!r}: {message}")


_state = threading.local()


def current() -> Trace:
    """The trace being recorded; KernelError outside a kernel body."""
    trace = getattr(_state, "trace", None)
    if trace is None:
        raise KernelError("kernel primitives can only be called inside a @kp.kernel body while it is traced")
    return trace


def run_trace(kernel: str, refs: dict, body, kwargs) -> Trace:
    """Run ``body`` with parameter proxies and return the recorded trace."""
    if getattr(_state, "trace", None) is not None:
        raise KernelError(f"kernel {kernel!r}: kernels cannot be traced inside another kernel")
    trace = _state.trace = Trace(kernel, refs)
    try:
        body(**kwargs)
    finally:
        _state.trace = None
    return trace


def _input(trace, x, primitive) -> ParamRef:
    if not isinstance(x, ParamRef) or trace.refs.get(x.name) is not x:
        raise trace.error(f"{primitive} expects an input parameter of this kernel, got {x!r}")
    if x.kind != "in":
        raise trace.error(f"{primitive}: {x.name!r} is an output; only inputs can be read")
    return x


def _mode(trace, name, mode):
    if trace.modes.setdefault(name, mode) != mode:
        raise trace.error(f"input {name!r} is read both through the domain and cyclically; use one")


# --- primitives --------------------------------------------------------------------

def init(value, dtype) -> Value:
    """A constant ``value`` of ``dtype`` (Paddle's Init)."""
    trace = current()
    d = dt.normalize(dtype)
    with np.errstate(all="ignore"):
        v = np.asarray(value).astype(dt.to_numpy(d))
    if dt.is_float(d):
        ok = not (np.isinf(v) and np.isfinite(value))     # floats round to nearest; overflow is an error
    else:
        ok = bool(np.asarray(value) == v)                 # ints and bool must be exact
    if not ok:
        raise trace.error(f"constant {value!r} is not representable as {d}")
    py = v.item()
    return trace.intern(("const", d, repr(py)), lambda: Const(py, d))


def read(x) -> Value:
    """Read input ``x`` (any strides) at the current index; its shape must equal the domain's."""
    trace = current()
    _input(trace, x, "read")
    _mode(trace, x.name, "domain")
    trace.full.add(x.name)
    return trace.intern(("load", x.name), lambda: Load(x.name, x.dtype))


def read_broadcast(x, like=None, axis=None) -> Value:
    """Read ``x`` broadcast (numpy rules) onto the domain; ``axis`` aligns its first dim (Paddle's axis)."""
    trace = current()
    _input(trace, x, "read_broadcast")
    _mode(trace, x.name, "domain")
    if like is not None:
        trace.full.add(_input(trace, like, "read_broadcast(like=)").name)
    if axis is not None:
        if trace.offsets.setdefault(x.name, int(axis)) != int(axis):
            raise trace.error(f"input {x.name!r} is aligned at two different axes")
    return trace.intern(("load", x.name), lambda: Load(x.name, x.dtype))


def read_reduce(x, axes=None) -> Value:
    """Read ``x`` for a reduction over ``axes`` (None: all), declaring the program's reduced axes."""
    trace = current()
    _declare_axes(trace, axes)
    return read_broadcast(x)


def _declare_axes(trace, axes):
    spec = _axes_spec(axes)
    if trace.declared_axes is None:
        trace.declared_axes = spec
    return trace.declared_axes if axes is None else spec


def _axes_spec(axes):
    if axes is None:
        return None
    if isinstance(axes, (int, np.integer)):
        return (int(axes),)
    return tuple(int(a) for a in axes)


def _operand(trace, v, like_dtype):
    if isinstance(v, Value):
        return v
    if isinstance(v, (bool, int, float, np.number, np.bool_)):
        if like_dtype is None:
            raise trace.error(f"cannot infer a dtype for constant {v!r}; use kp.init(value, dtype)")
        return init(v, like_dtype)
    raise trace.error(f"operand {v!r} is not a kernel value; read an input or use kp.init")


def apply(op, *args, **attrs) -> Value:
    """Apply an n-ary functor elementwise (Paddle's ElementwiseAny, exported as kp.any)."""
    trace = current()
    functor = lookup(op)
    like = next((a.dtype for a in args if isinstance(a, Value)), None)
    if functor.name == "where" and len(args) == 3:
        like = next((a.dtype for a in args[1:] if isinstance(a, Value)), None)
        args = (_operand(trace, args[0], "bool"),) + args[1:]
    values = tuple(_operand(trace, a, like) for a in args)
    try:
        out_dtype = functor.result_dtype([v.dtype for v in values], attrs)
    except KernelError as exc:
        raise trace.error(str(exc)) from None
    if functor.name == "cast":
        attrs = {"dtype": out_dtype}
    key_attrs = tuple(sorted((k, str(v)) for k, v in attrs.items()))
    return trace.intern(("apply", functor.name, tuple(id(v) for v in values), key_attrs),
                        lambda: Apply(functor, values, key_attrs, out_dtype))


def unary(op, a, **attrs) -> Value:
    """Apply a one-operand functor (Paddle's ElementwiseUnary)."""
    return _arity(1, op, (a,), attrs)


def binary(op, a, b, **attrs) -> Value:
    """Apply a two-operand functor (Paddle's ElementwiseBinary); no implicit dtype promotion."""
    return _arity(2, op, (a, b), attrs)


def ternary(op, a, b, c, **attrs) -> Value:
    """Apply a three-operand functor, e.g. where (Paddle's ElementwiseTernary)."""
    return _arity(3, op, (a, b, c), attrs)


def _arity(n, op, args, attrs):
    functor = lookup(op)
    if functor.arity != n:
        raise current().error(f"functor {functor.name!r} takes {functor.arity} operand(s), not {n}")
    return apply(functor, *args, **attrs)


def cast(a, dtype) -> Value:
    """Shorthand for unary(ops.cast, a, dtype=dtype); returns ``a`` itself if it already has that dtype."""
    if isinstance(a, Value) and a.dtype == dt.normalize(dtype):
        return a
    return unary("cast", a, dtype=dtype)


def cycle_binary(op, a, x) -> Value:
    """op(a, x[flat_index % x.size]): input ``x`` repeats with its size as period (Paddle's CycleBinary)."""
    trace = current()
    _input(trace, x, "cycle_binary")
    _mode(trace, x.name, "cycle")
    b = trace.intern(("cycle", x.name), lambda: CycleLoad(x.name, x.dtype))
    return binary(op, a, b)


def reduce(op, value, axes=None, keepdims=False) -> Value:
    """Reduce over domain ``axes`` (None: those of read_reduce, else all) with sum/prod/max/min/mean."""
    trace = current()
    reducer = lookup_reducer(op)
    if not isinstance(value, Value):
        raise trace.error(f"reduce expects a kernel value, got {value!r}")
    try:
        acc = reducer.acc_dtype(value.dtype)
    except KernelError as exc:
        raise trace.error(str(exc)) from None
    spec = _declare_axes(trace, axes)
    return trace.intern(("reduce", reducer.name, id(value), spec, bool(keepdims)),
                        lambda: Reduce(reducer, value, spec, bool(keepdims), acc))


def write(out, value) -> None:
    """Write ``value`` to output ``out`` (Paddle's WriteData); dtypes must match exactly."""
    trace = current()
    if not isinstance(out, ParamRef) or trace.refs.get(out.name) is not out or out.kind != "out":
        raise trace.error(f"write expects an output parameter of this kernel, got {out!r}")
    value = _operand(trace, value, trace.out_dtypes[out.name])
    if out.name in {s.param for s in trace.stores}:
        raise trace.error(f"output {out.name!r} is written twice")
    want = trace.out_dtypes[out.name]
    if want is None:
        trace.out_dtypes[out.name] = value.dtype
    elif want != value.dtype:
        raise trace.error(f"output {out.name!r} is {want} but the value written is {value.dtype}; "
                          f"cast it with kp.cast(value, {want!r})")
    trace.stores.append(Store(out.name, value))


Value.builders = (binary, unary)  # a Value's arithmetic operators build through these
