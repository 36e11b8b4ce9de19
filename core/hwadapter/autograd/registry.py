"""The vjp rules, by dispatch-level op name: rule(node, *output_grads) -> one gradient (or None) per input.

A rule returns each input's gradient in the shape of the op's result when the op broadcasts: the engine reduces it
to the input's shape in one place (engine.fit). Rules are written in hwadapter's own ops, so every device runs them."""
from __future__ import annotations

from ..dispatch.dispatcher import dispatch

RULES: dict = {}


def reshape(t, shape):
    """t in `shape`, taken literally (paddle's reshape reads a 0 as "keep this axis"; a gradient's 0 is a size)."""
    shape = tuple(int(s) for s in shape)
    return t if tuple(t.shape) == shape else dispatch("reshape", (t,), {"shape": shape})


def rule(*ops: str):
    """Decorator: the vjp rule of these ops."""
    def register(fn):
        for op in ops:
            RULES[op] = fn
        return fn
    return register


def differentiable() -> frozenset:
    """The ops that have a vjp rule."""
    return frozenset(RULES)
