"""The element type each exported ONNX node computes in: its schema's types at the export opset, then exact widening."""
from __future__ import annotations

import functools

import numpy as np

OPSET = 18  # Reduce* take axes as an input, Split takes its sizes as an input, LayerNormalization exists

_NAMES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
          "float64")
_ONNX_NAME = {"float32": "float", "float64": "double"}
BY_TYPE_STR = {f"tensor({_ONNX_NAME.get(n, n)})": np.dtype(n) for n in _NAMES}

# Narrow types (int8, int16, uint8, uint16, bool, float16) are computed in a wider type where the schema allows one: the
# types every runtime implements, and what eager does for float16. Ops that only move elements keep any type, and
# a type a constraint allows alone (And's bool) is taken as it is.
PORTABLE = frozenset(np.dtype(n) for n in ("int32", "int64", "uint32", "uint64", "float32", "float64"))
MOVES = frozenset({"Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "Expand", "Identity",
                   "GatherElements", "GatherND", "Cast"})
# the types a schema allows that onnxruntime's CPU provider has no kernel for (onnxruntime 1.31, probed per op)
_LACKS = {"ArgMax": "int16 uint32 uint64", "ArgMin": "int16 uint32 uint64", "CumSum": "uint32 uint64",
          "Max": "int16", "Min": "int16", "Pad": "int16", "Relu": "int16", "Where": "bool int16 uint64",
          "TopK": "uint32 uint64", "GlobalMaxPool": "float64", "GlobalAveragePool": "float64",
          "AveragePool": "float64", "Conv": "float64", "ConvTranspose": "float64", "Erf": "float64",
          **dict.fromkeys(("ReduceMax", "ReduceMin", "ReduceSum", "ReduceProd", "ReduceMean"), "uint32 uint64"),
          **dict.fromkeys(("Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cosh", "Sinh", "Tan"), "float64")}
LACKS = {op: frozenset(np.dtype(n) for n in names.split()) for op, names in _LACKS.items()}

# Wider types that hold every value of the narrow one. Integer results cast back keep the low bits, which is the
# wrap-around eager integer arithmetic has; float16 through float32 rounds once, as numpy's float16 kernels do.
_I32, _I64, _U32, _U64 = (np.dtype(n) for n in ("int32", "int64", "uint32", "uint64"))
_F32, _F64 = np.dtype("float32"), np.dtype("float64")
WIDER = {np.dtype("bool"): (_I32, _I64, _F32), np.dtype("int8"): (_I32, _I64), np.dtype("int16"): (_I32, _I64),
         np.dtype("uint8"): (_I32, _I64, _U32, _U64), np.dtype("uint16"): (_I32, _I64, _U32, _U64), _I32: (_I64,),
         _U32: (_U64, _I64),
         np.dtype("float16"): (_F32, _F64), _F32: (_F64,)}


@functools.lru_cache(maxsize=None)
def signature(defs, op_type: str):
    """(input type strings, output type strings, {type parameter: allowed dtypes}) of op_type at OPSET."""
    s = defs.get_schema(op_type, OPSET)
    allowed = {c.type_param_str: tuple(BY_TYPE_STR[t] for t in c.allowed_type_strs if t in BY_TYPE_STR)
               for c in s.type_constraints}
    return tuple(i.type_str for i in s.inputs), tuple(o.type_str for o in s.outputs), allowed


def usable(op_type: str, dtype: np.dtype, allowed) -> bool:
    """Whether op_type's schema allows dtype and onnxruntime has a kernel for it (LACKS names the data's type, not a
    constraint's one type: Where's bool condition)."""
    return dtype in allowed and (len(allowed) == 1 or dtype not in LACKS.get(op_type, ()))


# Ops that only select or move elements never read their values: an unsigned type may go through the signed type of
# its width, whose Cast keeps every bit both ways (onnxruntime has no uint64 Where, and no type is wider).
SELECTS = MOVES | {"Where"}
SAME_BITS = {np.dtype("uint16"): (np.dtype("int16"),), _U32: (_I32,), _U64: (_I64,)}


def choose(op_type: str, dtype: np.dtype, allowed) -> np.dtype | None:
    """The type to compute in: dtype if it is portable, else the first exact wider type usable, else dtype itself
    where usable (MaxPool has int8 but no int32), else for an op of SELECTS the signed type of dtype's width; None if
    none is."""
    first = op_type in MOVES or dtype in PORTABLE or len(allowed) == 1
    order = (dtype, *WIDER.get(dtype, ())) if first else (*WIDER.get(dtype, ()), dtype)
    if op_type in SELECTS:
        order += SAME_BITS.get(dtype, ())
    return next((d for d in order if usable(op_type, d, allowed)), None)


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
