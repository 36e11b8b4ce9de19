"""The converters: one function per ONNX op type, registered with `@converter`; a family of ops per module."""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

#: The domains whose ops are keyed by their bare op type; an op of another domain is keyed "domain:op" (op_key).
DEFAULT_DOMAINS = ("", "ai.onnx")
#: The domain of ONNX's training operators (Adagrad, Adam, Momentum, Gradient).
TRAINING_DOMAIN = "ai.onnx.preview.training"

#: op_key(domain, op type) -> converter(ctx, node) returning the output refs (one, or a tuple).
CONVERTERS: dict[str, Callable] = {}
#: op_key -> the indices of the inputs whose values its converter reads (`ctx.require_const`: a Reshape's
#: shape), or a function (ctx, node) -> those indices where it depends on the node. `convert` calls the converter
#: only once each of them is known, and otherwise returns the graph input the model must be converted per value of.
VALUE_INPUTS: dict[str, tuple | Callable] = {}


def op_key(domain: str, op_type: str) -> str:
    """The registry key of an op: its type in the default domain, "domain:type" in any other."""
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}:{op_type}"


def converter(*op_types: str, values: tuple | Callable = ()):
    """Register the decorated function as the converter of these ONNX op types (op_key's keys: "domain:op" for
    another domain than the default); `values`: the inputs whose values it reads (VALUE_INPUTS)."""
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
