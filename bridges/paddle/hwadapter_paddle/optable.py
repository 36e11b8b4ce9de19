"""Which hwadapter op is which Paddle phi kernel, for which dtypes the two mean exactly the same thing.

A library's C kernel for (op, dtypes) is registered as the phi kernel only when the op is in this table with
those dtypes; everything else is left to Paddle's CPU fallback. Each entry's claim (Paddle's CPU kernel gives
numpy's result, which is hwadapter's semantics) is checked against Paddle in tests/test_paddle_kernels.py.
"""
from __future__ import annotations

from dataclasses import dataclass

#: HwaDType codes (device_api.h; Paddle's C_DataType numbering) and the C++ type phi registers each under.
DTYPE_CODES = {"bool": 1, "uint8": 2, "int8": 6, "int16": 7, "int32": 8, "int64": 9, "float16": 10, "float32": 11,
               "float64": 12}
CODE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
CPP_TYPES = {"bool": "bool", "uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
             "int64": "int64_t", "float16": "phi::dtype::float16", "float32": "float", "float64": "double"}

FLOATS = ("float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
NUMERIC = FLOATS + INTS


@dataclass(frozen=True)
class Mapping:
    """One hwadapter op as one phi kernel. form: how the phi kernel's arguments reach the C kernel."""
    op: str                    # the op's kernel name in hwadapter (and in a library's kernel table)
    phi: str                   # Paddle's phi kernel name
    form: str                  # "unary" (x) -> out, "binary" (x, y) -> out, "compare" (x, y) -> bool out,
    #                            "matmul" (x, y, transpose_x, transpose_y) -> out
    dtypes: tuple[str, ...]    # where the semantics are exactly the same
    exact: bool = True         # False: the same function, equal to rounding (a few ulp), not bit for bit
    note: str = ""


TABLE = (
    Mapping("add", "add", "binary", NUMERIC, note="integers wrap in both"),
    Mapping("sub", "subtract", "binary", NUMERIC),
    Mapping("mul", "multiply", "binary", NUMERIC),
    # Integer divide: hwadapter gives float32, Paddle's phi kernel an integer (its API casts first).
    Mapping("div", "divide", "binary", FLOATS),
    Mapping("maximum", "maximum", "binary", NUMERIC, note="nan propagates in both"),
    Mapping("minimum", "minimum", "binary", NUMERIC, note="nan propagates in both"),
    # Integer pow: Paddle overflows and handles negative exponents differently.
    Mapping("pow", "elementwise_pow", "binary", FLOATS),
    Mapping("equal", "equal", "compare", NUMERIC),
    Mapping("not_equal", "not_equal", "compare", NUMERIC),
    Mapping("less", "less_than", "compare", NUMERIC),
    Mapping("less_equal", "less_equal", "compare", NUMERIC),
    Mapping("greater", "greater_than", "compare", NUMERIC),
    Mapping("greater_equal", "greater_equal", "compare", NUMERIC),
    Mapping("abs", "abs", "unary", FLOATS + ("int32", "int64")),
    Mapping("sign", "sign", "unary", FLOATS),
    Mapping("floor", "floor", "unary", FLOATS),
    Mapping("ceil", "ceil", "unary", FLOATS),
    Mapping("reciprocal", "reciprocal", "unary", FLOATS),
    Mapping("log", "log", "unary", FLOATS, exact=False),
    Mapping("sin", "sin", "unary", FLOATS, exact=False),
    Mapping("cos", "cos", "unary", FLOATS, exact=False),
    Mapping("tanh", "tanh", "unary", FLOATS, exact=False),
    Mapping("matmul", "matmul", "matmul", FLOATS, exact=False,
            note="transpose_x/transpose_y passed when set; sums in another order than Paddle's BLAS"),
)

#: hwadapter ops a library may have that are deliberately not mapped, and why (printed by `hwadapter paddle status`).
UNMAPPED = {
    "relu": "Paddle's relu turns nan into 0, hwadapter's keeps nan",
    "exp": "Paddle's CPU exp(-inf) is 2.9e-39 in float32 (and exp(-1e30) 5.6e-309 in float64), not 0",
    "sqrt": "Paddle's CPU sqrt gives nan for inf and flushes subnormals to 0 (float32), numpy does not",
    "rsqrt": "Paddle's CPU rsqrt flushes subnormals (float32)",
    "sigmoid": "Paddle's CPU sigmoid differs from hwadapter's overflow-free form in the last bits and at the tails",
    "round": "Paddle's round has a `decimals` attribute hwadapter's round has not",
    "neg": "Paddle has no phi kernel `neg` (it scales by -1)",
    "cast": "Paddle's cast kernel is keyed by the input dtype alone; a library's cast may not produce every output",
}

BY_OP = {m.op: m for m in TABLE}


def plan(kernels: list[tuple[str, tuple[int, ...]]]) -> tuple[dict[str, list[str]], list[dict]]:
    """From a library's kernel table [(op, input dtype codes)]: {op: dtypes to register} and, for every kernel
    not registered, {"op", "dtypes", "why"}. A kernel is registered when the op is mapped, all its inputs share
    one dtype and the mapping holds for that dtype."""
    register: dict[str, list[str]] = {}
    left = []
    for op, codes in kernels:
        names = [CODE_NAMES.get(c, f"code {c}") for c in codes]
        mapping = BY_OP.get(op)
        arity = {"unary": 1}.get(mapping.form, 2) if mapping else None
        if mapping is None:
            why = UNMAPPED.get(op, "no Paddle kernel mapped for this op")
        elif len(codes) != arity or len(set(names)) != 1:
            why = f"phi {mapping.phi} takes {arity} inputs of one dtype"
        elif names[0] not in mapping.dtypes:
            why = f"phi {mapping.phi} is mapped for {', '.join(mapping.dtypes)} only"
        else:
            if names[0] not in register.setdefault(op, []):
                register[op].append(names[0])
            continue
        left.append({"op": op, "dtypes": names, "why": why})
    return register, left
