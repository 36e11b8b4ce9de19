"""Shape and dtype inference: every node's outputs checked against (or completed from) the op's rule in ops/meta."""
from __future__ import annotations

import numpy as np

from ...api.errors import HwAdapterError
from ...api.meta import result_meta
from ...api.ir import Value
from .common import PassReport, constants_of, graph_error, make_graph


def _meta(node, shapes, dtypes):
    if node.op == "copy":  # the partitioner's device-to-device copy: the value unchanged
        return ((shapes[0], dtypes[0]),)
    try:
        return result_meta(node.op, shapes, dtypes, node.attrs)
    except HwAdapterError as err:
        raise graph_error(f"graph: node {node.name!r} ({node.op}) cannot take its inputs "
                          f"{_describe(shapes, dtypes)}: {err}",
                          "check the producing nodes' shapes and the node's attributes") from None
    except Exception as err:  # a rule reading attributes it does not understand
        raise graph_error(f"graph: node {node.name!r} ({node.op}): its attributes {node.attrs} do not fit "
                          f"inputs {_describe(shapes, dtypes)}: {type(err).__name__}: {err}",
                          "normalise the attributes as the frontend passes them to kernels") from None


def _describe(shapes, dtypes) -> str:
    return ", ".join(f"{np.dtype(d).name}{list(s)}" for s, d in zip(shapes, dtypes)) or "(none)"


def infer(graph):
    """`graph` with every node's output Values checked against its op's rule; missing Values are completed.
    InvalidArgumentError names the first node whose inputs are undefined or whose outputs disagree."""
    values = dict(graph.values)
    constants = constants_of(graph)
    for name, array in constants.items():
        values.setdefault(name, Value(name, tuple(array.shape), np.dtype(array.dtype)))
    defined = set(graph.inputs) | set(constants)
    completed = 0
    for node in graph.nodes:
        missing = [i for i in node.inputs if i not in defined]
        if missing:
            raise graph_error(f"graph: node {node.name!r} ({node.op}) reads {missing}, which no earlier "
                              f"node, input or constant defines",
                              "list nodes in topological order and declare every input")
        ins = [values[i] for i in node.inputs]
        due = _meta(node, tuple(v.shape for v in ins), tuple(v.dtype for v in ins))
        if due is not None and len(due) != len(node.outputs):
            raise graph_error(f"graph: node {node.name!r} ({node.op}) has {len(node.outputs)} outputs; "
                              f"the op produces {len(due)}", "give the node one output per result")
        for k, out in enumerate(node.outputs):
            have = values.get(out)
            if due is None:
                if have is None:
                    raise graph_error(f"graph: node {node.name!r} ({node.op}): the op has no shape rule, "
                                      f"so its output {out!r} needs a declared Value",
                                      "give the graph a Value (shape, dtype) for it")
                continue
            shape, dtype = tuple(due[k][0]), np.dtype(due[k][1])
            if have is None:
                values[out] = Value(out, shape, dtype)
                completed += 1
            elif tuple(have.shape) != shape or np.dtype(have.dtype) != dtype:
                raise graph_error(f"graph: node {node.name!r} ({node.op}) declares output {out!r} as "
                                  f"{np.dtype(have.dtype).name}{list(have.shape)}, but its inputs "
                                  f"{_describe([v.shape for v in ins], [v.dtype for v in ins])} give "
                                  f"{dtype.name}{list(shape)}",
                                  "fix the declared Value or the node's inputs and attributes")
        defined.update(node.outputs)
    undefined = [o for o in graph.outputs if o not in defined]
    if undefined:
        raise graph_error(f"graph: outputs {undefined} are never computed", "name values of the graph")
    new = make_graph(graph.nodes, values, graph.inputs, graph.outputs, constants)
    n = len(graph.nodes)
    return new, PassReport("infer", n, n, f"{completed} values completed" if completed else "all values agree")
