"""Control flow on tensor values, under paddle's names: `cond(pred, true_fn, false_fn)` and
`while_loop(cond, body, loop_vars)`. Eagerly (and on a concrete predicate while tracing) they are Python's `if` and
`while`; on a traced predicate they trace both branches (or the condition and the body) into graphs and record one
`cond` or `while_loop` node (hwadapter.api.control), so that one trace serves every value."""
from __future__ import annotations

import numpy as np

from ..api.control import is_predicate
from ..api.errors import InvalidArgumentError, LoopLimitError, TracingError
from ..dispatch.dispatcher import dispatch
from ..tensor import Tensor, to_tensor
from .. import trace as _trace

__all__ = ["cond", "while_loop"]


def _where() -> str:
    path, line, _ = _trace.user_frame()
    return f"{path}:{line}"


def _truth(pred, op: str) -> bool:
    """A concrete predicate's value: a Python bool, or a bool tensor of one element."""
    if isinstance(pred, (bool, np.bool_)):
        return bool(pred)
    if isinstance(pred, Tensor) and is_predicate(pred.shape, pred.dtype):
        return bool(pred.numpy().reshape(-1)[0])
    got = f"a {pred.dtype.name}{list(pred.shape)} tensor" if isinstance(pred, Tensor) else type(pred).__name__
    fix = "pass a bool tensor of one element, e.g. x.mean() > 0.5 (or a Python bool)"
    raise InvalidArgumentError(f"{op} at {_where()}: its predicate must be a bool tensor of one element, got {got}. "
                               f"Fix: {fix}", fix=fix)


def cond(pred, true_fn=None, false_fn=None, name=None, return_names=None):
    """true_fn() if pred else false_fn() (None for a branch not given); on a traced pred, one `cond` node whose
    branches are both functions traced: they must return the same structure of tensors of the same shapes and
    dtypes. `name` and `return_names` are paddle's and change nothing here."""
    del name, return_names  # paddle's labels for its program's variables
    if not _trace.is_symbolic(pred):
        branch = true_fn if _truth(pred, "cond") else false_fn
        return None if branch is None else branch()
    tracer = _trace.active()
    if not is_predicate(pred.shape, pred.dtype):
        _truth(pred, "cond")  # the same error as eagerly
    where = _where()
    regions = []
    for label, fn in (("then", true_fn), ("else", false_fn)):
        if fn is None:
            regions.append(([], [], None))
            continue
        regions.append(tracer.region(fn, (), f"cond at {where}: its {'true_fn' if label == 'then' else 'false_fn'}"))
    (t_nodes, t_outs, t_struct), (f_nodes, f_outs, f_struct) = regions
    _same_structure(tracer, where, t_struct, f_struct, t_outs, f_outs)
    if not t_outs:
        return t_struct  # nothing to compute: both give None (or the same non-tensor value)
    return _trace.unflatten(t_struct, record_cond(tracer, pred, (t_nodes, t_outs), (f_nodes, f_outs)))


def record_cond(tracer, pred, then: tuple, other: tuple) -> list:
    """The output tensors of one cond node over two traced regions ((nodes, output names) each, alike outputs)."""
    (t_nodes, t_outs), (f_nodes, f_outs) = then, other
    operands = list(dict.fromkeys(tracer.reads(t_nodes, t_outs, []) + tracer.reads(f_nodes, f_outs, [])))
    attrs = {"then": tracer.body(t_nodes, [], t_outs, operands), "else": tracer.body(f_nodes, [], f_outs, operands)}
    out = dispatch("cond", (pred, *(tracer.symbolic(o) for o in operands)), attrs)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _same_structure(tracer, where: str, t_struct, f_struct, t_outs, f_outs) -> None:
    """TracingError naming the user's line unless both branches return the same structure of alike tensors."""
    fix = "return the same structure from both branches, with tensors of the same shape and dtype at each place"
    if repr(t_struct) != repr(f_struct):
        raise TracingError(f"cond at {where}: true_fn returns {_show(t_struct)} but false_fn returns "
                           f"{_show(f_struct)}. Fix: {fix}", fix=fix)
    for i, (a, b) in enumerate(zip(t_outs, f_outs)):
        va, vb = tracer.values[a], tracer.values[b]
        if va.shape != vb.shape or va.dtype != vb.dtype:
            raise TracingError(f"cond at {where}: output {i} is {va.dtype.name}{list(va.shape)} from true_fn but "
                               f"{vb.dtype.name}{list(vb.shape)} from false_fn. Fix: {fix}", fix=fix)


def _show(structure) -> str:
    return "None" if structure is None else repr(structure)


def while_loop(cond, body, loop_vars, is_test=False, name=None, max_iters=None):
    """`loop_vars` (a list or tuple of tensors) passed through `body` while `cond(*loop_vars)` holds; the final
    values as a list. On traced values one `while_loop` node: each loop variable keeps its shape and dtype, and the
    loop stops with LoopLimitError after `max_iters` iterations (default: hw.configure(max_loop_iters=...)).
    `is_test` and `name` are paddle's and change nothing here."""
    del is_test, name
    where = _where()
    if not isinstance(loop_vars, (list, tuple)) or not loop_vars:
        fix = "pass loop_vars as a non-empty list of tensors, e.g. [i, x]"
        raise InvalidArgumentError(f"while_loop at {where}: loop_vars must be a non-empty list or tuple, got "
                                   f"{type(loop_vars).__name__}. Fix: {fix}", fix=fix)
    if max_iters is not None and (isinstance(max_iters, bool) or not isinstance(max_iters, int) or max_iters < 0):
        raise InvalidArgumentError(f"while_loop at {where}: max_iters must be None or an int >= 0, got "
                                   f"{max_iters!r}", fix="pass max_iters=1000, say, or leave it out")
    return _loop(_trace.active(), cond, body, list(loop_vars), where, max_iters)


def record_while(tracer, cond, body, values: list, where: str, max_iters) -> list:
    """The outputs of one while_loop node: the condition and the body traced over stand-ins of the loop variables
    (`where`: the user's line, for errors)."""
    values = [v if isinstance(v, Tensor) else to_tensor(v) for v in values]
    stand = [tracer.placeholder(v.shape, v.dtype) for v in values]
    names = [s._data.name for s in stand]
    c_nodes, c_outs, _ = tracer.region(lambda *a: _as_pred(cond(*a), where), tuple(stand),
                                       f"while_loop at {where}: its cond")
    b_nodes, b_outs, _ = tracer.region(lambda *a: _as_list(body(*a), len(values), where), tuple(stand),
                                       f"while_loop at {where}: its body")
    _carried_alike(tracer, where, stand, b_outs)
    operands = list(dict.fromkeys(tracer.reads(c_nodes, c_outs, names) + tracer.reads(b_nodes, b_outs, names)))
    attrs = {"cond": tracer.body(c_nodes, names, c_outs, operands),
             "body": tracer.body(b_nodes, names, b_outs, operands),
             "carried": len(values), "max_iters": max_iters, "source": where}
    ins = [v if _trace.is_symbolic(v) else tracer.device.lift(v) for v in values]
    out = dispatch("while_loop", (*ins, *(tracer.symbolic(o) for o in operands)), attrs)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _loop(tracer, cond, body, values: list, where: str, max_iters) -> list:
    """The loop in Python while its values are concrete; while tracing, once a loop variable or the condition is
    traced, the rest of it is one traced loop from there."""
    done = 0
    while True:
        if tracer is not None and any(_trace.is_symbolic(v) for v in values):
            return record_while(tracer, cond, body, values, where, None if max_iters is None else max_iters - done)
        pred = cond(*values)
        if tracer is not None and _trace.is_symbolic(pred):
            return record_while(tracer, cond, body, values, where, None if max_iters is None else max_iters - done)
        if not _truth(pred, "while_loop"):
            return values
        if max_iters is not None and done == max_iters:
            raise LoopLimitError(f"while_loop at {where}: its condition still held after {max_iters} iterations, its "
                                 f"max_iters", fix="make the condition turn false, or raise max_iters")
        values = _as_list(body(*values), len(values), where)
        done += 1


def _as_pred(pred, where: str):
    if not isinstance(pred, Tensor) or not is_predicate(pred.shape, pred.dtype):
        got = f"{pred.dtype.name}{list(pred.shape)}" if isinstance(pred, Tensor) else type(pred).__name__
        fix = "return a bool tensor of one element from cond, e.g. i < n"
        raise TracingError(f"while_loop at {where}: cond must return a bool tensor of one element, it returned {got}. "
                           f"Fix: {fix}", fix=fix)
    return pred


def _as_list(out, count: int, where: str) -> list:
    """body's result as a list of `count` values (a lone tensor for one loop variable)."""
    out = [out] if isinstance(out, Tensor) else out
    if not isinstance(out, (list, tuple)) or len(out) != count:
        got = f"{len(out)} values" if isinstance(out, (list, tuple)) else type(out).__name__
        fix = "return one value per loop variable, in order, as a list or tuple"
        raise InvalidArgumentError(f"while_loop at {where}: body must return {count} values, it returned {got}. "
                                   f"Fix: {fix}", fix=fix)
    return list(out)


def _carried_alike(tracer, where: str, stand: list, outs: list) -> None:
    fix = "keep each loop variable's shape and dtype in the body (a graph's loop carries fixed shapes)"
    for i, (s, o) in enumerate(zip(stand, outs)):
        v = tracer.values[o]
        if tuple(s.shape) != v.shape or s.dtype != v.dtype:
            raise TracingError(f"while_loop at {where}: loop variable {i} enters as {s.dtype.name}{list(s.shape)} "
                               f"but the body returns {v.dtype.name}{list(v.shape)}. Fix: {fix}", fix=fix)
