"""Which input dtypes each op admits: what the frontend (ops/*.py, nn/functional.py) casts its inputs to or lets
through, in one table that graphs built without the frontend (an importer, GraphBuilder) are checked against."""
from __future__ import annotations

from dataclasses import dataclass

from . import dtypes as _dt


@dataclass(frozen=True)
class Admits:
    """The dtypes an op's inputs may have: each input one of `dtypes` (`what` in words), all of them one dtype when
    `same`, except the inputs of `own`: (index, dtypes, words) admitted on their own (where's condition, gather's
    index). `fix`: what a caller does about a refused dtype."""
    dtypes: frozenset
    what: str
    same: bool = True
    own: tuple = ()
    fix: str = ""


ANY = frozenset(_dt.ALL)
FLOAT = frozenset(_dt.FLOATING)
NUMERIC = frozenset(_dt.NUMERIC)
INTEGER = frozenset(_dt.INTEGER)
BOOL = frozenset({_dt.bool_})

_TO_FLOAT = "cast the inputs to a float dtype first (cast node with dtype='float32'), as the frontend does"
_TO_NUMERIC = "cast bool inputs to a numeric dtype first (cast node with dtype='int64' or 'float32')"
_TO_BOOL = "cast the inputs to bool first (cast node with dtype='bool'), as the frontend does"
_TO_ONE = "cast the inputs to one dtype first (cast nodes to their promoted dtype), as the frontend does"


def _table() -> dict:
    floats = Admits(FLOAT, "float", fix=_TO_FLOAT)
    numeric = Admits(NUMERIC, "numeric (non-bool)", fix=_TO_NUMERIC)
    logical = Admits(BOOL, "bool", fix=_TO_BOOL)
    bitwise = Admits(INTEGER | BOOL, "integer or bool", fix="cast the inputs to an integer dtype or bool first")
    shared = Admits(ANY, "any", fix=_TO_ONE)
    table = {}
    # the frontend's _binary kinds: "arith", "float", "compare", "logical", "bitwise", "shift" (inputs promoted first)
    table.update(dict.fromkeys(("add", "sub", "mul", "pow", "maximum", "minimum", "mod", "matmul", "abs", "neg",
                                "relu", "sign", "clip"), numeric))
    table.update(dict.fromkeys(("div", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "erf", "sin",
                                "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                                "gelu", "floor", "ceil", "round",  # rounding an integer returns it: no node
                                "mean", "softmax", "log_softmax", "layer_norm", "batch_norm", "conv2d",
                                "conv_transpose2d", "lrn", "avg_pool2d", "adaptive_avg_pool2d",
                                # training's kernel ops: every input of one float dtype (their rules say so too)
                                "max_pool2d_grad", "adaptive_max_pool2d_grad", "sgd_update", "momentum_update",
                                "adam_update"), floats))
    table.update(dict.fromkeys(("equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "concat"),
                               shared))
    table.update(dict.fromkeys(("logical_and", "logical_or", "logical_xor", "logical_not"), logical))
    table.update(dict.fromkeys(("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"), bitwise))
    table.update(dict.fromkeys(("left_shift", "right_shift"), Admits(INTEGER, "integer",
                                                                     fix="cast the inputs to an integer dtype first")))
    table["where"] = Admits(ANY, "any", own=((0, BOOL, "bool"),), fix="cast the condition to bool and x and y to "
                                                                        "one dtype first, as the frontend does")
    table["gather"] = Admits(ANY, "any", same=False, own=((1, frozenset({_dt.int64}), "int64"),),
                             fix="cast the index to int64 first (cast node with dtype='int64'), as the frontend does")
    # Any dtype (the frontend casts nothing): cast, copy, sum and prod (bool and integers accumulate in int64 unless a
    # dtype is asked for), max, min, argmax, argmin, max_pool2d, adaptive_max_pool2d, reshape, transpose, split,
    # slice, expand, pad; and every op not listed here (kernel-primitive ops, "fused"), so that later ops still work.
    return table


#: op -> Admits. The one place that says which input dtypes an op takes.
ADMITS: dict = _table()


def refusal(op: str, dtypes: tuple) -> tuple[str, str] | None:
    """(what is wrong, the fix) when `op` does not admit inputs of `dtypes`, else None."""
    rule = ADMITS.get(op)
    if rule is None or not dtypes:
        return None
    mine = {i for i, _, _ in rule.own}
    for i, allowed, words in rule.own:
        if i < len(dtypes) and dtypes[i] not in allowed:
            return f"input {i} must be {words}, got {dtypes[i].name}", rule.fix
    rest = [d for i, d in enumerate(dtypes) if i not in mine]
    bad = [d for d in rest if d not in rule.dtypes]
    if bad:
        return f"takes {rule.what} inputs, got {bad[0].name}", rule.fix
    if rule.same and len(set(rest)) > 1:
        return f"takes inputs of one dtype, got {', '.join(d.name for d in rest)}", _TO_ONE
    return None
