"""Control-flow nodes of the graph IR: `cond` and `while_loop`, whose branches and bodies are graphs held in their
attributes, and their shape rules (what `Graph.validate` and the `infer` pass check).

    cond(pred, *operands) {then: Graph, else: Graph} -> outputs
        pred: a bool tensor of one element; each branch takes the operands as its inputs, in order, and both give
        outputs of the same shapes and dtypes: the node's.
    while_loop(*carried, *operands) {cond: Graph, body: Graph, carried: k, max_iters: int | None} -> k outputs
        `cond` takes (carried, operands) and gives one bool of one element; `body` takes the same and gives the next
        carried values, of their shapes and dtypes; the node gives the carried values when `cond` is false.
"""
from __future__ import annotations

import math

import numpy as np

#: ops whose attributes hold graphs
CONTROL = frozenset({"cond", "while_loop"})
#: the attributes of each that are graphs
BRANCHES = {"cond": ("then", "else"), "while_loop": ("cond", "body")}


def graphs_of(node) -> list:
    """(attribute name, Graph) of a control node's branches or body, [] for any other node."""
    return [(k, node.attrs[k]) for k in BRANCHES.get(node.op, ()) if k in node.attrs]


def _metas(graph, names) -> list:
    return [(tuple(graph.values[n].shape), np.dtype(graph.values[n].dtype)) for n in names]


def _show(metas) -> str:
    return "(" + ", ".join(f"{d.name}{list(s)}" for s, d in metas) + ")"


def _takes(op: str, key: str, graph, metas) -> None:
    """ValueError unless `graph` takes inputs of exactly `metas`."""
    if not hasattr(graph, "inputs") or not hasattr(graph, "values"):
        raise ValueError(f"{op}: attribute {key!r} is {type(graph).__name__}, not a graph")
    got = _metas(graph, graph.inputs)
    if got != list(metas):
        raise ValueError(f"{op}: its {key} graph takes {_show(got)}, but the node gives it {_show(metas)}")


def is_predicate(shape, dtype) -> bool:
    """Whether a value can decide a branch: a bool of one element (shape () or (1,), as paddle takes it)."""
    return np.dtype(dtype) == np.bool_ and math.prod(shape) == 1 and len(shape) <= 1


def cond_rule(shapes, dtypes, attrs) -> tuple:
    """The outputs of cond(pred, *operands): its branches', which must agree."""
    if not shapes or not is_predicate(shapes[0], dtypes[0]):
        got = f"{np.dtype(dtypes[0]).name}{list(shapes[0])}" if shapes else "nothing"
        raise ValueError(f"cond: its predicate must be a bool tensor of one element, got {got}")
    operands = list(zip(shapes[1:], dtypes[1:]))
    outs = []
    for key in BRANCHES["cond"]:
        if key not in attrs:
            raise ValueError(f"cond: attribute {key!r} (a graph) is missing")
        _takes("cond", key, attrs[key], operands)
        outs.append(_metas(attrs[key], attrs[key].outputs))
    if outs[0] != outs[1]:
        raise ValueError(f"cond: its branches give different outputs: then {_show(outs[0])}, else {_show(outs[1])}")
    return tuple(outs[0])


def while_rule(shapes, dtypes, attrs) -> tuple:
    """The outputs of while_loop(*carried, *operands): the carried values, which the body must give back alike."""
    k = attrs.get("carried")
    if not isinstance(k, int) or isinstance(k, bool) or not 0 < k <= len(shapes):
        raise ValueError(f"while_loop: attribute 'carried' must count its first inputs (1 to {len(shapes)}), "
                         f"got {k!r}")
    limit = attrs.get("max_iters")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise ValueError(f"while_loop: attribute 'max_iters' must be None or an int >= 0, got {limit!r}")
    inputs = list(zip(shapes, (np.dtype(d) for d in dtypes)))
    for key in BRANCHES["while_loop"]:
        if key not in attrs:
            raise ValueError(f"while_loop: attribute {key!r} (a graph) is missing")
        _takes("while_loop", key, attrs[key], inputs)
    test = _metas(attrs["cond"], attrs["cond"].outputs)
    if len(test) != 1 or not is_predicate(*test[0]):
        raise ValueError(f"while_loop: its cond graph must give one bool of one element, it gives {_show(test)}")
    gives = _metas(attrs["body"], attrs["body"].outputs)
    if gives != inputs[:k]:
        raise ValueError(f"while_loop: its body gives {_show(gives)}, but the loop carries {_show(inputs[:k])}: "
                         f"each carried value must keep its shape and dtype")
    return tuple(inputs[:k])


RULES = {"cond": cond_rule, "while_loop": while_rule}
