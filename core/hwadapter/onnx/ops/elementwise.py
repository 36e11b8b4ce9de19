"""Elementwise ONNX ops: arithmetic, comparisons, logic, unary math and activations."""
from __future__ import annotations

from . import converter

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div"}
_UNARY = {"Relu": "relu", "Exp": "exp", "Neg": "neg", "Abs": "abs"}


@converter(*_BINARY)
def binary(ctx, node):
    a, b = ctx.inputs(node)
    return ctx.op(_BINARY[node.op_type], a, b)


@converter(*_UNARY)
def unary(ctx, node):
    return ctx.op(_UNARY[node.op_type], ctx.input(node, 0))
