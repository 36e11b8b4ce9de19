"""Fusion builder: compose a graph of primitive-expressible ops into ONE kernel.

The input format is what a graph pass produces naturally: nodes in topological
order, each ``(op, input_names, output_name, attrs)``, over named external
inputs; the named external outputs are written.  Every external input is read
once (loads are interned) and intermediates stay in registers.
"""

from typing import NamedTuple

from . import dsl
from .dsl import ParamDecl
from .errors import KernelError
from .functors import FUNCTORS
from .kernel import Kernel
from .reducers import REDUCERS, Reducer

REDUCE_PREFIX = "reduce_"


class FuseNode(NamedTuple):
    """One op of a fusion graph: functor name (or "reduce_<sum|mean|max|min|prod>"), operand names, result name."""

    op: object
    inputs: tuple
    output: str
    attrs: dict = {}


def fuse(nodes, inputs, outputs, name="fused") -> Kernel:
    """Kernel computing ``outputs`` from ``inputs`` through ``nodes``.

    ``inputs``: names (each gets its own type variable, bound from the arrays'
    dtypes) or a dict name -> dtype/type variable.  Operands may be Python
    numbers (constants of the other operands' dtype).  Reductions take attrs
    ``axes`` (None: all) and ``keepdims``; all reductions of one fused kernel
    must share their axes.  Output dtypes are inferred.
    """
    nodes = [FuseNode(*n) if not isinstance(n, FuseNode) else n for n in nodes]
    in_types = dict(inputs) if isinstance(inputs, dict) else {n: f"T_{n}" for n in inputs}
    outputs = list(outputs)
    _validate(name, nodes, in_types, outputs)
    params = [ParamDecl(n, "in", t) for n, t in in_types.items()]
    params += [ParamDecl(n, "out", f"O_{n}") for n in outputs]

    def body(**refs):
        env = {n: dsl.read_broadcast(refs[n]) for n in in_types}
        for node in nodes:
            args = [env[a] if isinstance(a, str) else a for a in node.inputs]
            env[node.output] = _rounded(_apply(node, args))
        for n in outputs:
            dsl.write(refs[n], env[n])

    return Kernel(name, params, body, doc=f"fusion of {len(nodes)} ops")


def _rounded(value):
    """A float16 result rounded to float16 now, as the unfused op writes it: a fused chain computes in float32
    registers, and carrying the extra precision on would make its result differ from the ops run one by one."""
    if isinstance(value, dsl.Value) and value.dtype == "float16":
        return dsl.unary("cast", value, dtype="float16")
    return value


def _apply(node, args):
    attrs = dict(node.attrs)
    if isinstance(node.op, Reducer) or (isinstance(node.op, str) and node.op.startswith(REDUCE_PREFIX)):
        reducer = node.op if isinstance(node.op, Reducer) else node.op[len(REDUCE_PREFIX):]
        return dsl.reduce(reducer, args[0], axes=attrs.get("axes"), keepdims=attrs.get("keepdims", False))
    if node.op == "cast" and "dtype" in attrs:
        return dsl.cast(args[0], attrs["dtype"])
    return dsl.apply(node.op, *args, **attrs)


def _validate(name, nodes, in_types, outputs):
    defined = set(in_types)
    for node in nodes:
        op = node.op
        if isinstance(op, str) and op.startswith(REDUCE_PREFIX):
            if op[len(REDUCE_PREFIX):] not in REDUCERS:
                raise KernelError(f"fusion {name!r}: unknown reduction {op!r}; use reduce_<{'|'.join(REDUCERS)}>")
        elif isinstance(op, str) and op not in FUNCTORS:
            raise KernelError(f"fusion {name!r}: unknown op {op!r}")
        for a in node.inputs:
            if isinstance(a, str) and a not in defined:
                raise KernelError(f"fusion {name!r}: node {node.output!r} uses {a!r} before it is defined; "
                                  f"list nodes in topological order and name external inputs")
        if node.output in defined:
            raise KernelError(f"fusion {name!r}: {node.output!r} is defined twice")
        defined.add(node.output)
    missing = [o for o in outputs if o not in defined]
    if missing:
        raise KernelError(f"fusion {name!r}: outputs {missing} are never computed")
    clash = [o for o in outputs if o in in_types]
    if clash:
        raise KernelError(f"fusion {name!r}: {clash} are both inputs and outputs; add an identity node")
