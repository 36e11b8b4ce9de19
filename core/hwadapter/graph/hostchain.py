"""A fused node on a host-memory device as the chain of its ops' own numpy kernels, where that measured faster than
its compiled program (NUMPY_UP_TO), or where the device cannot compile one."""
from __future__ import annotations

import numpy as np

from ..dispatch.dispatcher import route
from ..runtime.fused import BINARY, REDUCTIONS, UNARY

#: Largest output (elements) a fused node runs as numpy calls on a device that can compile it, by the slowest kind
#: of op in it: the size below which the numpy calls measured faster than the program's one call
#: (`benchmarks/fused_elementwise.py --crossover` measures both on this machine and prints this table).
NUMPY_UP_TO = {"vectorised": 4096, "series": 0}
#: functors whose numpy kernels are many float64 passes (erf and GELU: a series and a continued fraction, to a few
#: ulp); every other one is one vectorised numpy call (exp, log, tanh among them), as the eager op runs it
SERIES = frozenset({"erf", "gelu"})
_OPS = {**{f: op for op, f in BINARY.items()}, **{u: u for u in UNARY}, "gelu": "gelu", "where": "where"}


def numpy_up_to(nodes) -> int:
    """The largest output (elements) at which the fused `nodes` run as numpy calls on a device that compiles."""
    return NUMPY_UP_TO["series" if any(fn in SERIES for fn, *_ in nodes) else "vectorised"]


def _attrs(fn: str, attrs: dict) -> tuple[str, dict] | None:
    """The op-set op and attributes of one fuse functor, or None when there is no exact one."""
    if fn in _OPS:
        return _OPS[fn], {}
    if fn == "cast":
        return "cast", {"dtype": np.dtype(attrs["dtype"])}
    if fn.startswith("reduce_") and fn[7:] in REDUCTIONS:
        axes = attrs.get("axes")
        return fn[7:], {"axis": axes, "keepdim": bool(attrs.get("keepdims", False))}
    return None


def host_chain(device, node, values):
    """`node` (a fused node) as a callable of numpy arrays -> list of arrays built from `device`'s op kernels, or None
    when an op of it has no exact kernel there or its outputs are too large for the numpy calls to win."""
    if not device.host_memory:
        return None
    limit = numpy_up_to(node.attrs["nodes"]) if device.codegen is not None else None  # none: the only fast form
    if limit is not None and any(int(np.prod(values[o].shape)) > limit for o in node.outputs):
        return None
    attrs = node.attrs
    env = {n: np.zeros(values[v].shape, values[v].dtype) for n, v in zip(attrs["inputs"], node.inputs)}
    steps, inline = [], True  # inline: every kernel returns an ndarray, so the calls can be written out
    try:
        for fn, operands, result, fattrs in attrs["nodes"]:
            found = _attrs(fn, dict(fattrs))
            if found is None:
                return None
            op, kw = found
            names = tuple(o if isinstance(o, str) else None for o in operands)
            if None in names:  # a literal operand (clip's bounds): a 0-d array of the other operand's dtype
                dtype = next(env[o].dtype for o in operands if isinstance(o, str))
                lits = tuple(None if isinstance(o, str) else np.asarray(o, dtype) for o in operands)
            else:
                lits = None
            args = [env[o] if isinstance(o, str) else lit for o, lit in zip(operands, lits or operands)]
            kernel = route(op, device, tuple(a.dtype for a in args))
            if getattr(kernel, "fallback_device", None) is not None:
                return None
            with np.errstate(all="ignore"):  # a dry run on zeros: rsqrt(0) and 0/0 are expected, not the user's
                out = kernel(*args, **kw)
            inline = inline and out.__class__ is np.ndarray
            env[result] = np.asarray(out)
            steps.append((kernel, names, lits, result, kw))
    except Exception:  # an op the host kernels do not take like this: the compiled program runs it
        return None
    outputs = tuple(attrs["outputs"])
    if any(env[o].shape != values[v].shape or env[o].dtype != values[v].dtype for o, v in zip(outputs, node.outputs)):
        return None
    inputs = tuple(attrs["inputs"])

    def call(*arrays):
        env = dict(zip(inputs, arrays))
        for kernel, names, lits, result, kw in steps:
            args = [env[n] for n in names] if lits is None else [env[n] if n else l for n, l in zip(names, lits)]
            env[result] = kernel(*args, **kw) if kw else kernel(*args)
        return [np.asarray(env[o]) for o in outputs]
    #: (fuse input names, (kernel, operand names, literals, result, attrs) per op, output names): for code generation
    call.inline = (inputs, tuple(steps), outputs) if inline else None
    return call
