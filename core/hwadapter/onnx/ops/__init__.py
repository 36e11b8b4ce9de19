"""The converters: one function per ONNX op type, registered with `@converter`; a family of ops per module."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

#: ONNX op type (default domain) -> converter(ctx, node) returning the output refs (one, or a tuple).
CONVERTERS: dict[str, Callable] = {}
#: ONNX op type -> the indices of the inputs whose values its converter reads (`ctx.require_const`: a Reshape's
#: shape), or a function (ctx, node) -> those indices where it depends on the node. `convert` calls the converter
#: only once each of them is known, and otherwise returns the graph input the model must be converted per value of.
VALUE_INPUTS: dict[str, tuple | Callable] = {}


def converter(*op_types: str, values: tuple | Callable = ()):
    """Register the decorated function as the converter of these ONNX op types; `values`: the inputs whose values
    it reads (VALUE_INPUTS)."""
    def register(fn):
        for t in op_types:
            CONVERTERS[t] = fn
            if values:
                VALUE_INPUTS[t] = values
            else:
                VALUE_INPUTS.pop(t, None)
        return fn
    return register


def load_all() -> dict:
    """CONVERTERS, with every family module imported."""
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")
    return CONVERTERS
