"""The numpy reference interpreter: it defines what every program means."""

import numpy as np

from . import dtypes as dt
from .errors import KernelError
from .ir import Apply, Const, CycleLoad, Load, Reduce
from .kernel import Kernel


def interpret(kernel_or_program, inputs: dict, dtypes=None, **attrs) -> dict:
    """Run a Kernel (specialised for ``inputs``) or a Program on numpy arrays; returns outputs by name."""
    inputs = {n: np.asarray(v) for n, v in inputs.items() if v is not None}
    program = kernel_or_program
    if isinstance(program, Kernel):
        program = program.specialize_for(inputs, dtypes, **attrs)
    elif attrs or dtypes:
        raise KernelError("attrs/dtypes only apply when interpreting a Kernel, not a Program")
    for p in program.inputs:
        if dt.normalize(inputs[p.name].dtype) != p.dtype:
            raise KernelError(f"kernel {program.kernel_name!r}: input {p.name!r} is "
                              f"{inputs[p.name].dtype}, the program expects {p.dtype}")
    domain = program.domain(inputs)
    program.bind(inputs)   # same runtime checks as a real launch (empty max/min, cycled inputs)
    with np.errstate(all="ignore"):
        values = {}
        for node in program.nodes:
            values[id(node)] = _eval(program, node, values, inputs, domain)
        return {s.param: _store(program, s, values[id(s.value)], domain) for s in program.stores}


def _eval(program, node, values, inputs, domain):
    reg = dt.register(node.dtype)
    if isinstance(node, Const):
        return np.asarray(node.value, dtype=reg)
    if isinstance(node, Load):
        acc = program.accesses[node.param]
        x = inputs[node.param]
        aligned = (1,) * acc.offset + x.shape + (1,) * (program.rank - acc.offset - acc.rank)
        return x.reshape(aligned).astype(reg)
    if isinstance(node, CycleLoad):
        flat = inputs[node.param].reshape(-1).astype(reg)
        n = int(np.prod(domain, dtype=np.int64))
        return np.resize(flat, n).reshape(domain) if n else np.zeros(domain, reg)
    if isinstance(node, Apply):
        args = [values[id(a)] for a in node.args]
        return np.asarray(node.functor.numpy(*args, **dict(node.attrs))).astype(reg, copy=False)
    assert isinstance(node, Reduce)
    arg = np.broadcast_to(values[id(node.arg)], domain)   # a kept-level operand still counts n times
    return node.reducer.numpy(arg, program.reduce_axes, node.dtype)


def _store(program, store, value, domain):
    param = next(p for p in program.params if p.name == store.param)
    if store.kind == "full":
        out = np.broadcast_to(value, domain)
    else:
        kept = tuple(1 if a in program.reduce_axes else s for a, s in enumerate(domain))
        out = np.broadcast_to(value, kept)
        if not store.keepdims:
            out = out.reshape(tuple(s for a, s in enumerate(domain) if a not in program.reduce_axes))
    return np.array(out, dtype=dt.to_numpy(param.dtype), order="C")   # (ascontiguousarray would make 0-d 1-d)
