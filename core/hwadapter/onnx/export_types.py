"""The element type each exported ONNX node computes in: its schema's types at the export opset, then exact widening."""
from __future__ import annotations

import functools

import numpy as np

OPSET = 18  # Reduce* take axes as an input, Split takes its sizes as an input, LayerNormalization exists

_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64")
_ONNX_NAME = {"float32": "float", "float64": "double"}
BY_TYPE_STR = {f"tensor({_ONNX_NAME.get(n, n)})": np.dtype(n) for n in _NAMES}

# onnxruntime's CPU kernels leave out int8, int16, uint8 and float16 for many ops whose schemas allow them (Min,
# Where, Relu, ...): ops that compute run in these types, ops that only move elements run in any type they allow
PORTABLE = frozenset(np.dtype(n) for n in ("bool", "int32", "int64", "uint32", "uint64", "float32", "float64"))
MOVES = frozenset({"Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "Expand", "Identity",
                   "GatherElements", "GatherND", "Cast"})

# Wider types that hold every value of the narrow one. Integer results cast back keep the low bits, which is the
# wrap-around eager integer arithmetic has; float16 through float32 rounds once, as numpy's float16 kernels do.
_I32, _I64, _U32, _U64 = (np.dtype(n) for n in ("int32", "int64", "uint32", "uint64"))
_F32, _F64 = np.dtype("float32"), np.dtype("float64")
WIDER = {np.dtype("bool"): (_I32, _I64, _F32), np.dtype("int8"): (_I32, _I64), np.dtype("int16"): (_I32, _I64),
         np.dtype("uint8"): (_I32, _I64, _U32, _U64), _I32: (_I64,), _U32: (_U64, _I64),
         np.dtype("float16"): (_F32, _F64), _F32: (_F64,)}


@functools.lru_cache(maxsize=None)
def signature(defs, op_type: str):
    """(input type strings, output type strings, {type parameter: allowed dtypes}) of op_type at OPSET."""
    s = defs.get_schema(op_type, OPSET)
    allowed = {c.type_param_str: tuple(BY_TYPE_STR[t] for t in c.allowed_type_strs if t in BY_TYPE_STR)
               for c in s.type_constraints}
    return tuple(i.type_str for i in s.inputs), tuple(o.type_str for o in s.outputs), allowed


def choose(op_type: str, dtype: np.dtype, allowed) -> np.dtype | None:
    """The type to compute in: dtype where the op allows it, else the first exact wider type it allows; None if none."""
    for d in (dtype, *WIDER.get(dtype, ())):
        if d in allowed and (op_type in MOVES or d in PORTABLE):
            return d
    return None


def input_params(in_strs, n_inputs: int) -> list:
    """The type string of each of n_inputs actual inputs (a variadic last input repeats its type)."""
    return [in_strs[min(i, len(in_strs) - 1)] for i in range(n_inputs)]


def output_dtype(type_str: str, bound: dict, allowed: dict):
    """The dtype an output has after the node (and its cast back): bound by a parameter, fixed, or None."""
    if type_str in bound:
        return bound[type_str]
    if type_str in BY_TYPE_STR:
        return BY_TYPE_STR[type_str]
    only = allowed.get(type_str, ())
    return only[0] if len(only) == 1 else None
