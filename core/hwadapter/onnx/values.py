"""Sequence and optional values as the importer holds them while converting: a sequence is a list of tensor refs
whose length is known at conversion, an optional a ref, a sequence or nothing. A tensor is its ref (a str)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Seq:
    """An ONNX sequence: its tensors' refs in order, and their dtype (None: unknown, an empty sequence the model
    types nowhere)."""
    items: tuple
    dtype: np.dtype | None = None


@dataclass(frozen=True)
class Opt:
    """An ONNX optional: `value` (a ref or a Seq), or None when it is empty; `sequence`: it holds (or would hold) a
    sequence rather than a tensor."""
    value: object
    sequence: bool = False


def is_tensor(value) -> bool:
    return isinstance(value, str)


def describe(value) -> str:
    """What a value is, for messages: 'a tensor', 'a sequence of 3 tensors', 'an empty optional', ..."""
    if isinstance(value, Seq):
        n = len(value.items)
        return f"a sequence of {n} tensor{'' if n == 1 else 's'}"
    if isinstance(value, Opt):
        return "an empty optional" if value.value is None else f"an optional holding {describe(value.value)}"
    return "a tensor"


def flatten(value) -> list:
    """The tensor refs a value holds, in order."""
    if isinstance(value, Seq):
        return list(value.items)
    if isinstance(value, Opt):
        return [] if value.value is None else flatten(value.value)
    return [value]


def structure(value):
    """What must agree between two values for one to stand for the other, refs aside: kinds and lengths."""
    if isinstance(value, Seq):
        return ("sequence", len(value.items))
    if isinstance(value, Opt):
        return ("optional", None if value.value is None else structure(value.value))
    return "tensor"


def rebuild(template, refs):
    """`template`'s structure over the refs taken in order from the iterator `refs`."""
    if isinstance(template, Seq):
        return Seq(tuple(next(refs) for _ in template.items), template.dtype)
    if isinstance(template, Opt):
        return template if template.value is None else Opt(rebuild(template.value, refs), template.sequence)
    return next(refs)


def present(value):
    """The value an optional holds (None when empty); a tensor or sequence is its own value (opset 18 lets
    OptionalHasElement and OptionalGetElement take them)."""
    return value.value if isinstance(value, Opt) else value
