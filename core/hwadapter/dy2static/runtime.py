"""What converted code calls (transform.py writes `_jst.<name>(...)`): each decides at run time whether the Python
values are concrete (then it is Python's own `if`, `while`, `for`, `and`, `or`, `not`) or traced tensors (then
hw.static.nn.cond / while_loop record graph control flow)."""
from __future__ import annotations

import numpy as np

from ..api.control import is_predicate
from ..api.errors import InvalidArgumentError, TracingError
from ..ops.api import logical_and, logical_not, logical_or
from ..static import nn as static_nn
from ..tensor import Tensor, to_tensor
from .. import trace as _trace


#: the functions converted code calls (convert.py adds `call`)
HELPERS = ("load", "ifelse", "ifexp", "while_", "in_range", "and_", "or_", "not_")


class Undefined:
    """A variable not yet assigned where converted control flow reads it (assigned in only one branch, say): any
    use raises a NameError naming it."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    def _fail(self, *args, **kwargs):
        raise NameError(f"name {self.name!r} is not defined (it is assigned in only some branches or loop "
                        f"iterations before this use)")

    __getattr__ = __call__ = __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __rsub__ = __bool__ = _fail
    __truediv__ = __getitem__ = __iter__ = __len__ = __neg__ = __lt__ = __gt__ = __le__ = __ge__ = _fail

    def __repr__(self):
        return f"<undefined {self.name}>"


def load(scope: dict, name: str):
    """The variable `name` from `locals()` before a converted statement, or Undefined."""
    return scope[name] if name in scope else Undefined(name)


def _traced(x) -> bool:
    return _trace.is_symbolic(x)


# --- if / else ----------------------------------------------------------------------------------------------------
def ifelse(pred, true_fn, false_fn, args: tuple, names: tuple, line: str):
    """`true_fn(*args)` if pred else `false_fn(*args)`: both take and return the statement's variables. A traced
    predicate traces both into one cond node; a variable they leave different (a number, a return value set in one
    only) is made a tensor where that is sound, else a TracingError names the user's line."""
    if not _traced(pred):
        return (true_fn if _as_bool(pred, line) else false_fn)(*args)
    tracer, pred = _trace.active(), _as_predicate(pred, line)
    sides = []
    for fn in (true_fn, false_fn):
        nodes, outs, structure = tracer.region(lambda fn=fn: tuple(fn(*args)), (), f"the if at {line}")
        sides.append((nodes, list(outs), [_value(v, outs) for v in structure]))
    (t_nodes, t_outs, t_vals), (f_nodes, f_outs, f_vals) = sides
    result, t_names, f_names, slots = [], [], [], []
    for name, x, y in zip(names, t_vals, f_vals):
        kind = _reconcile(name, x, y, line)
        if kind is None:
            result.append(x[1] if x[0] == "py" else None)
            continue
        t_names.append(_ref(tracer, x, kind))
        f_names.append(_ref(tracer, y, kind))
        slots.append(len(result))
        result.append(None)
    if slots:
        for i, t in zip(slots, static_nn.record_cond(tracer, pred, (t_nodes, t_names), (f_nodes, f_names))):
            result[i] = t
    return tuple(result)


def ifexp(pred, then, other, line: str):
    """`then() if pred else other()`: a cond node on a traced predicate (both give alike tensors)."""
    if not _traced(pred):
        return then() if _as_bool(pred, line) else other()
    return static_nn.cond(_as_predicate(pred, line), then, other)


def _value(leaf, outs: list) -> tuple:
    """("tensor", value name) for a branch's tensor, ("py", value) for anything else it leaves."""
    return ("tensor", outs[leaf.index]) if isinstance(leaf, _trace._Leaf) else ("py", leaf)


def _reconcile(name: str, x: tuple, y: tuple, line: str):
    """None when both branches leave the same Python value (kept as it is), else how the cond gives the variable:
    ("tensor", (shape, dtype)) of the tensor side, or ("number", dtype) for two different numbers."""
    tracer = _trace.active()
    tensors = [tracer.values[v] for kind, v in (x, y) if kind == "tensor"]
    if tensors:
        for kind, v in (x, y):
            if kind == "tensor" or _number(v) or (name.startswith("__hw_ret") and (v is None or
                                                                                   isinstance(v, Undefined))):
                continue
            if isinstance(v, Undefined):
                fix = f"give {name!r} a value before the if, or in both branches"
                raise TracingError(f"{line}: {name!r} is assigned in only one branch of an if on a traced tensor. "
                                   f"Fix: {fix}", fix=fix)
            fix = f"make {name!r} a tensor in both branches"
            raise TracingError(f"{line}: {name!r} is a tensor in one branch of an if on a traced tensor and a "
                               f"{type(v).__name__} in the other. Fix: {fix}", fix=fix)
        return ("tensor", (tensors[0].shape, tensors[0].dtype))
    a, b = x[1], y[1]
    if a is b or (isinstance(a, Undefined) and isinstance(b, Undefined)) or (type(a) is type(b) and _equal(a, b)):
        return None
    if _number(a) and _number(b):
        return ("number", np.result_type(np.asarray(a), np.asarray(b)))
    fix = f"make {name!r} a tensor, or the same Python value, in both branches"
    raise TracingError(f"{line}: {name!r} differs between the branches of an if on a traced tensor ({_show(a)} and "
                       f"{_show(b)}), and only tensors can differ at run time. Fix: {fix}", fix=fix)


def _ref(tracer, side: tuple, kind: tuple) -> str:
    """The value name a branch gives for a reconciled variable: its tensor, its number as a constant, or zeros for a
    return value it does not set (its flag says it is never read)."""
    what, meta = kind
    if side[0] == "tensor":
        name = side[1]
        if what == "tensor" and (tracer.values[name].shape, tracer.values[name].dtype) != meta:
            fix = "give the variable the same shape and dtype in both branches"
            raise TracingError(f"a variable is {tracer.values[name].dtype.name}{list(tracer.values[name].shape)} in "
                               f"one branch of an if on a traced tensor and {np.dtype(meta[1]).name}{list(meta[0])} "
                               f"in the other. Fix: {fix}", fix=fix)
        return name
    if what == "number":
        return tracer.constant(np.array(side[1], dtype=meta)).name
    # a number beside a tensor, filled to its shape; a return value this branch does not set: zeros
    return tracer.constant(np.full(meta[0], side[1] if _number(side[1]) else 0, dtype=meta[1])).name


def _as_predicate(pred, line: str):
    """A traced condition as a cond's predicate: a bool of one element (a number's truth: != 0)."""
    if is_predicate(pred.shape, pred.dtype):
        return pred
    if pred.size != 1:
        fix = "reduce it to one element (x.any(), x.all(), x.sum() > 0)"
        raise TracingError(f"{line}: an if on a traced tensor of {pred.size} elements is ambiguous. Fix: {fix}",
                           fix=fix)
    flat = pred.reshape([])
    return flat if flat.dtype == np.bool_ else flat != 0


def _number(v) -> bool:
    return isinstance(v, (bool, int, float, np.bool_, np.number))


def _equal(x, y) -> bool:
    try:
        return bool(x == y)
    except Exception:  # noqa: BLE001 - values that do not compare are not equal
        return False


def _show(v) -> str:
    return repr(v) if _number(v) or v is None else type(v).__name__


def _as_bool(pred, line: str) -> bool:
    if isinstance(pred, Tensor):
        if pred.size != 1:
            fix = "reduce it to one element (x.any(), x.all(), x.sum() > 0)"
            raise InvalidArgumentError(f"{line}: the truth value of a tensor of {pred.size} elements is ambiguous. "
                                       f"Fix: {fix}", fix=fix)
        return bool(pred.numpy().reshape(-1)[0])
    return bool(pred)


# --- loops --------------------------------------------------------------------------------------------------------
def while_(cond_fn, body_fn, args: tuple, names: tuple, line: str):
    """`args` through `body_fn` while `cond_fn(*args)`: Python's while on concrete values; once the condition is a
    traced tensor, one while_loop node over the variables (tensors and numbers; numbers become tensors)."""
    values = tuple(args)
    while True:
        pred = cond_fn(*values)
        if _traced(pred):
            return _traced_loop(cond_fn, body_fn, values, names, line)
        if not _as_bool(pred, line):
            return values
        values = tuple(body_fn(*values))


def _traced_loop(cond_fn, body_fn, values: tuple, names: tuple, line: str):
    carried, fixed = [], {}
    for i, (name, v) in enumerate(zip(names, values)):
        if isinstance(v, Tensor) or _number(v):
            carried.append(i)
        elif isinstance(v, Undefined):
            fixed[i] = v  # assigned in the body before it is read: a temporary of each iteration
        else:
            fix = f"make {name!r} a tensor (or a number), or compute it outside the loop"
            raise TracingError(f"{line}: {name!r} is a {type(v).__name__} changed by a while loop on a traced "
                               f"tensor; a graph's loop carries tensors only. Fix: {fix}", fix=fix)

    def full(vals):
        it = iter(vals)
        return tuple(fixed[i] if i in fixed else next(it) for i in range(len(values)))

    def test(*vals):
        return _bool_tensor(cond_fn(*full(vals)))

    def body(*vals):
        out = body_fn(*full(vals))
        return [_like(out[i], vals[k]) for k, i in enumerate(carried)]
    start = [values[i] if isinstance(values[i], Tensor) else to_tensor(values[i]) for i in carried]
    final = static_nn.record_while(_trace.active(), test, body, start, line, None)
    result = list(values)
    for k, i in enumerate(carried):
        result[i] = final[k]
    for i in fixed:
        result[i] = Undefined(names[i])
    return tuple(result)


def _like(v, template):
    """A loop variable's next value as a tensor of its start's dtype (a number a body assigns becomes one)."""
    if isinstance(v, Tensor):
        return v
    if _number(v):
        return to_tensor(np.array(v, dtype=template.dtype))
    raise TracingError(f"a loop variable became a {type(v).__name__} inside a while loop on a traced tensor",
                       fix="keep loop variables tensors or numbers")


def _bool_tensor(pred):
    if isinstance(pred, Tensor):
        return pred if pred.dtype == np.bool_ else pred != 0
    return to_tensor(np.array(bool(pred)))


def in_range(i, stop, step):
    """Whether a converted `for ... in range` goes on: i < stop for a positive step, i > stop for a negative one."""
    if not (_traced(i) or _traced(stop) or _traced(step)):
        if step == 0:
            raise ValueError("range() arg 3 must not be zero")
        return i < stop if step > 0 else i > stop
    if not _traced(step):
        return (i < stop) if step > 0 else (i > stop)
    return logical_or(logical_and(step > 0, i < stop), logical_and(step < 0, i > stop))


# --- and / or / not -----------------------------------------------------------------------------------------------
def and_(*thunks):
    """`a and b and ...` with each operand a thunk: Python's on concrete values, logical_and once one is traced."""
    return _logic(thunks, logical_and, False)


def or_(*thunks):
    """`a or b or ...`, as and_."""
    return _logic(thunks, logical_or, True)


def _logic(thunks, op, stop: bool):
    """Python's short-circuit `and` (stop False) or `or` (stop True) until an operand is traced, then `op` of the
    rest as bool tensors."""
    value = thunks[0]()
    for thunk in thunks[1:]:
        if _traced(value):
            value = op(_bool_tensor(value), _bool_tensor(thunk()))
            continue
        if _truthy(value) is stop:
            return value
        value = thunk()
    return value


def not_(value):
    """`not value`: logical_not of a traced tensor, Python's `not` otherwise."""
    return logical_not(_bool_tensor(value)) if _traced(value) else not _truthy(value)


def _truthy(value) -> bool:
    return _as_bool(value, "") if isinstance(value, Tensor) else bool(value)
