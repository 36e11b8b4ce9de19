"""The converters: one function per ONNX op type, registered with `@converter`; a family of ops per module."""
from __future__ import annotations

from typing import Callable

#: ONNX op type (default domain) -> converter(ctx, node) returning the output refs (one, or a tuple).
CONVERTERS: dict[str, Callable] = {}


def converter(*op_types: str):
    """Register the decorated function as the converter of these ONNX op types."""
    def register(fn):
        for t in op_types:
            CONVERTERS[t] = fn
        return fn
    return register


def load_all() -> dict:
    """CONVERTERS, with every family module imported."""
    import importlib
    import pkgutil
    for mod in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{mod.name}")
    return CONVERTERS
