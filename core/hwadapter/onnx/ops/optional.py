"""Optional ops: an optional is known at conversion to hold a value (a tensor or a sequence) or to be empty
(values.Opt), so Optional wraps, OptionalHasElement is a constant and OptionalGetElement unwraps."""
from __future__ import annotations

import numpy as np

from ...api.errors import InvalidArgumentError
from ..boundary import value_type
from ..values import Opt, Seq, present
from . import converter


@converter("Optional")
def optional(ctx, node):
    v = ctx.value(node, 0)
    if isinstance(v, Opt):
        ctx.fail(node, "its input is an optional: ONNX has no optional of an optional")
    if v is not None:
        return Opt(v, isinstance(v, Seq))
    tp = node.type_proto("type", None)
    if tp is None:
        node.bad("type", "is missing; an Optional without an input needs it to say what it would hold")
    vt = value_type(tp, f"attribute 'type' of {node.where()}")
    if vt.kind == "optional":
        node.bad("type", "is an optional type: ONNX has no optional of an optional")
    return Opt(None, vt.kind == "sequence")


@converter("OptionalHasElement")
def optional_has_element(ctx, node):
    v = ctx.value(node, 0)  # omitted (opset 18 on): an empty optional
    return ctx.constant(np.array(v is not None and present(v) is not None))


@converter("OptionalGetElement")
def optional_get_element(ctx, node):
    v = ctx.value(node, 0)
    if v is None:
        ctx.fail(node, "its input is omitted", fix="give OptionalGetElement its input")
    if present(v) is None:
        raise InvalidArgumentError(f"onnx: {node.where()}: its input {node.inputs[0]!r} is an empty optional, which "
                                   "has no element to get", fix="test it with OptionalHasElement first (an If on its "
                                                                "result), or pass a value for it")
    return present(v)
