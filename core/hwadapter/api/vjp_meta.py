"""Fused backward kernels: a plugin may register `<op>_vjp` for an op of the set, and the autograd engine then runs it
instead of the op's vjp rule. It takes the op's inputs, then the gradients of the op's outputs (of the outputs'
shapes and dtypes), and the op's attributes, and returns one gradient per input, of that input's shape and dtype:
one array for an op of one input, else a list (an integer input's entry, an index, is ignored: zeros do)."""
from __future__ import annotations

from .errors import InvalidArgumentError

SUFFIX = "_vjp"


def forward_of(op: str) -> str | None:
    """The op whose fused backward kernel `op` is ("relu" for "relu_vjp"), or None."""
    if isinstance(op, str) and op.endswith(SUFFIX) and len(op) > len(SUFFIX):
        forward = op[:-len(SUFFIX)]
        return None if forward.endswith(SUFFIX) else forward
    return None


def _split(op: str, forward: str, shapes: tuple, dtypes: tuple, attrs: dict, forward_rule) -> int:
    """How many of the inputs are the forward op's: the k for which the op's rule, given the first k, gives outputs
    of exactly the shapes and dtypes of the rest (one output assumed for an op without a rule)."""
    if forward_rule is None:
        return len(shapes) - 1
    for k in range(len(shapes) - 1, 0, -1):
        try:
            outs = forward_rule(shapes[:k], dtypes[:k], attrs)
        except Exception:  # not the op's inputs: try fewer
            continue
        if len(outs) == len(shapes) - k and all(tuple(s) == tuple(shape) and d == dtype for (s, d), shape, dtype in
                                                zip(outs, shapes[k:], dtypes[k:])):
            return k
    inputs = ", ".join(f"{d.name}{list(s)}" for s, d in zip(shapes, dtypes))
    raise InvalidArgumentError(f"{op}: inputs ({inputs}) are not {forward}'s inputs followed by the gradients of its "
                               f"outputs (each of its output's shape and dtype). Fix: pass {forward}'s inputs, then "
                               f"one gradient per output")


def rule_of(op: str, rules: dict):
    """The shape rule of `op` when it names a fused backward kernel (`rules`: the op set's rules), else None."""
    forward = forward_of(op)
    if forward is None:
        return None
    forward_rule = rules.get(forward)

    def vjp_rule(shapes, dtypes, attrs):
        if len(shapes) < 2:
            raise InvalidArgumentError(f"{op}: takes {forward}'s inputs and the gradients of its outputs, got "
                                       f"{len(shapes)} input(s). Fix: pass both")
        k = _split(op, forward, shapes, dtypes, attrs, forward_rule)
        return tuple((tuple(s), d) for s, d in zip(shapes[:k], dtypes[:k]))
    vjp_rule.__name__ = f"_{op}"
    return vjp_rule
