"""Which hwadapter op is which Paddle phi kernel, for which dtypes the two mean exactly the same thing.

A library's C kernel for (op, dtypes) is registered as the phi kernel only when the op is in this table with
those dtypes; everything else is left to Paddle's CPU fallback. Each entry's claim (Paddle's CPU kernel gives
numpy's result, which is hwadapter's semantics) is checked against Paddle in tests/test_paddle_kernels.py.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

#: HwaDType codes (device_api.h; Paddle's C_DataType numbering) and the C++ type phi registers each under. hwadapter's
#: uint16, uint32 and uint64 (codes 3-5) are not mapped: Paddle has no uint16 integer tensors (paddle.uint16 is
#: paddle.bfloat16, and a numpy uint16 array becomes a bfloat16 tensor), and paddlepaddle 3.3.1 cannot make a uint32 or
#: uint64 tensor (paddle.zeros, paddle.cast and paddle.to_tensor refuse them); a library's kernel for one is left to
#: Paddle's fallback, with why (plan).
DTYPE_CODES = {"bool": 1, "uint8": 2, "int8": 6, "int16": 7, "int32": 8, "int64": 9, "float16": 10, "float32": 11,
               "float64": 12}
CODE_NAMES = {code: name for name, code in DTYPE_CODES.items()}
CPP_TYPES = {"bool": "bool", "uint8": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t",
             "int64": "int64_t", "float16": "phi::dtype::float16", "float32": "float", "float64": "double"}

FLOATS = ("float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
NUMERIC = FLOATS + INTS
BITS = ("bool",) + INTS
#: Paddle's CPU logical_* kernels: no uint8
LOGICAL = ("bool", "int8", "int16", "int32", "int64") + FLOATS


@dataclass(frozen=True)
class Mapping:
    """One hwadapter op as one phi kernel. form: how the phi kernel's arguments reach the C kernel."""
    op: str                    # the op's kernel name in hwadapter (and in a library's kernel table)
    phi: str                   # Paddle's phi kernel name
    form: str                  # how the phi kernel's arguments become the op's inputs and attributes: FORMS
    dtypes: tuple[str, ...]    # where the semantics are exactly the same
    exact: bool = True         # False: the same function, equal to rounding (a few ulp), not bit for bit
    note: str = ""
    requires: tuple[str, ...] = ()  # further hwadapter ops the phi kernel calls (by its attributes): all needed
    inputs: tuple[str | None, ...] = ()  # inputs of a fixed dtype (None: the registered one); () all of it
    variadic: bool = False     # any number of inputs (concat): Python kernels only (a C kernel has a fixed count)
    also: tuple[str, ...] = ()  # further phi kernels the op serves, each its own form (FORMS) of the same name


#: form: the phi kernel's arguments (after the context) -> the op's inputs and attributes (docs/ops.md, "what a
#: kernel receives"); what cannot be passed exactly is refused at run time by the wrapper (paddle_kernels.cc).
FORMS = {
    "unary": "(x) -> out",
    "binary": "(x, y) -> out, numpy broadcasting",
    "compare": "(x, y) -> bool out, numpy broadcasting",
    "unary_bool": "(x) -> bool out",
    "shift": "(x, y, is_arithmetic) -> out, numpy broadcasting; a logical right shift of a signed dtype refused",
    "matmul": "(x, y, transpose_x, transpose_y) -> out; the transposes passed when set",
    "reduce": "(x, dims, keep_dim) -> axis (all when dims is empty), keepdim",
    "sum": "(x, dims, out_dtype, keep_dim) -> as reduce; an out_dtype other than x's is refused",
    "softmax": "(x, axis) -> axis, non-negative; a 0-d x as one element",
    "conv2d": "(input, filter, strides, paddings, padding_algorithm, dilations, groups, data_format) -> stride, "
              "padding (t, b, l, r; SAME/VALID resolved as Paddle does), dilation, groups; NHWC refused",
    "pool2d": "(x, kernel_size, strides, paddings, ceil_mode, exclusive, data_format, pooling_type, global_pooling, "
              "adaptive, padding_algorithm) -> max_pool2d, avg_pool2d or adaptive_avg_pool2d; NHWC, adaptive max "
              "and Paddle-only window rules refused",
    "clip": "(x, min, max) -> min, max as x's dtype (Scalar::to<T>, as Paddle's CPU reads them); min > max and nan "
            "bounds refused",
    "transpose": "(x, axis) -> perm (non-negative)",
    "cumsum": "(x, axis, flatten, exclusive, reverse) -> axis (non-negative), exclusive, reverse; flatten: x as 1-D",
    "arg": "(x, axis, keepdims, flatten, dtype) -> axis (none when flatten), keepdim; int64 out; dtype int32 refused",
    "prod": "(x, dims, keep_dim, reduce_all) -> as reduce (reduce_all or no dims: every axis)",
    "where": "(condition, x, y) -> out, numpy broadcasting of the three; condition bool",
    "gather": "(x, index, axis) -> axis (non-negative); an int64 index of 0 or 1 dims (or [n, 1], as Paddle's); an "
              "int32 index refused",
    "concat": "(x: any number of tensors, axis) -> the tensors, axis (non-negative); the Python-kernel path only",
    "split": "(x, sections, axis) -> sections (one -1 inferred), axis (non-negative); one output per section",
    "split_with_num": "(x, num, axis) -> num equal sections, axis (non-negative): the op of `split` (Mapping.also)",
    "expand": "(x, shape) -> shape resolved (-1 keeps an existing axis, new axes lead)",
    "cumprod": "(x, dim, exclusive, reverse) -> axis (non-negative), exclusive, reverse (a 0-d x as one element)",
    "slice": "(input, axes, starts, ends, infer_flags, decrease_axis) -> axes (non-negative), starts, ends (Python's "
             "rules, step 1, normalised: an empty slice (0, 0, 1)), steps 1; decrease_axis drops those axes from "
             "Paddle's shape; an axis sliced twice refused",
    "gather_nd": "(x, index) -> batch_dims 0; an int64 index whose last axis holds 1..rank coordinates (an empty one "
                 "and an int32 index refused)",
    "take_along_axis": "(arr, indices, axis) -> gather_elements' axis (non-negative); an int64 index of x's rank",
    "put_along_axis": "(arr, indices, values, axis, reduce, include_self) -> scatter_elements' axis, reduction "
                      "(assign: none, add, mul/multiply: mul, amax: max, amin: min); mean and include_self=False "
                      "with a reduction refused",
    "scatter_nd_add": "(x, index, updates) -> scatter_nd with reduction add; an int64 index",
    "pad": "(x, paddings, pad_value) -> pads (flat: before, after of each axis from the first; pairs in Python), mode "
           "constant, value as x's dtype (Scalar::to<T>); a negative padding refused",
    "conv2d_transpose": "(x, filter, strides, paddings, output_padding, output_size, padding_algorithm, groups, "
                        "dilations, data_format) -> stride, padding (t, b, l, r; SAME/VALID as conv2d's), "
                        "output_padding (or the one output_size implies), dilation, groups; NHWC refused",
}
#: inputs each form's op takes
ARITY = {"unary": 1, "unary_bool": 1, "reduce": 1, "sum": 1, "softmax": 1, "pool2d": 1, "clip": 1, "transpose": 1,
         "cumsum": 1, "arg": 1, "prod": 1, "expand": 1, "cumprod": 1, "slice": 1, "pad": 1,
         "concat": 1, "split": 1, "split_with_num": 1}  # concat: variadic; planned by its first input
#: forms whose phi kernels take attributes: the tests check them case by case (FORM_CASES)
ATTRIBUTE_FORMS = ("reduce", "sum", "softmax", "conv2d", "pool2d", "clip", "transpose", "cumsum", "arg", "prod",
                   "where", "gather", "expand", "cumprod", "slice", "gather_nd", "take_along_axis", "put_along_axis",
                   "scatter_nd_add", "pad", "conv2d_transpose", "concat", "split")


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
    # Integer sums: Paddle's sum of int32 (and smaller) gives int64, hwadapter's kernel keeps the dtype.
    Mapping("sum", "sum", "sum", FLOATS + ("int64",), exact=False, note="floats sum in another order than Paddle's"),
    # Integer means: Paddle's mean of int32 is int32, hwadapter's mean of integers is float32.
    Mapping("mean", "mean", "reduce", FLOATS, exact=False),
    Mapping("max", "max", "reduce", FLOATS + ("int32", "int64"), note="nan propagates in both"),
    Mapping("min", "min", "reduce", FLOATS + ("int32", "int64"), note="nan propagates in both"),
    Mapping("softmax", "softmax", "softmax", FLOATS, exact=False,
            note="Paddle's CPU clips x - max(x) at -64 (an element more than 64 below the max gives 1.6e-28, not "
                 "less): equal to rounding or within 1.7e-28 (exp(-64))"),
    Mapping("conv2d", "conv2d", "conv2d", FLOATS, exact=False, note="sums in another order than Paddle's"),
    # Registered although Paddle's CPU max pooling differs on nan and -inf (checked in the tests): its nan depends on
    # where in the window it lies (an artefact of `y = y > x ? y : x`), so no program can rely on it.
    Mapping("max_pool2d", "pool2d", "pool2d", FLOATS, exact=False, requires=("avg_pool2d", "adaptive_avg_pool2d"),
            note="max equal on numbers, averages to rounding; Paddle's CPU max ignores a nan unless it is the last "
                 "of its window and gives -3.4e38 for a window of -inf, hwadapter's propagates nan and keeps -inf"),
    # Bit for bit on special values and 7000 random ones each (both glibc's libm here); another numpy build may use
    # its own SIMD functions, so rounding is all that is claimed.
    *(Mapping(op, op, "unary", FLOATS, exact=False)
      for op in ("acos", "asin", "atan", "sinh", "cosh", "tan", "asinh", "acosh", "atanh")),
    # float32 erf: Paddle's CPU loses precision for subnormal results (erf(1.18e-38) is 23 ulp off) and is up to 4
    # ulp off elsewhere; hwadapter's is float64 rounded once.
    Mapping("erf", "erf", "unary", ("float64",), exact=False, note="Paddle's CPU differs by up to 5 ulp"),
    Mapping("bitwise_and", "bitwise_and", "binary", BITS),
    Mapping("bitwise_or", "bitwise_or", "binary", BITS),
    Mapping("bitwise_xor", "bitwise_xor", "binary", BITS),
    Mapping("bitwise_not", "bitwise_not", "unary", BITS),
    Mapping("logical_and", "logical_and", "compare", LOGICAL),
    Mapping("logical_or", "logical_or", "compare", LOGICAL),
    Mapping("logical_xor", "logical_xor", "compare", LOGICAL),
    Mapping("logical_not", "logical_not", "unary_bool", LOGICAL),
    # Negative shift counts (unspecified in hwadapter) gave the same as Paddle's CPU in the tests, not promised.
    Mapping("left_shift", "bitwise_left_shift", "shift", INTS, note="is_arithmetic makes no difference"),
    Mapping("right_shift", "bitwise_right_shift", "shift", INTS,
            note="arithmetic for signed dtypes; is_arithmetic=False refused for them (uint8: logical in both)"),
    # Float remainder: Paddle's CPU keeps the sign of a zero x (remainder(-0.0, 3) is -0.0), numpy's np.mod gives 0.0.
    Mapping("mod", "remainder", "binary", ("int32", "int64"),
            note="floor mod in both; Paddle's CPU process died (SIGFPE) on int32 [INT_MIN, 5] % [-1, 0], where "
                 "hwadapter's gives 0"),
    Mapping("clip", "clip", "clip", FLOATS + ("int32", "int64"), note="nan stays nan in both"),
    Mapping("transpose", "transpose", "transpose", BITS + FLOATS),
    # paddle.cumsum casts int32 to int64 first; the int32 phi kernel itself (_C_ops.cumsum) keeps int32, as ours.
    Mapping("cumsum", "cumsum", "cumsum", FLOATS + ("int32", "int64"), exact=False,
            note="bit for bit in the tests (both add in order)"),
    # Floats: Paddle's CPU argmax/argmin skip nan (argmax of [1, nan, 5, nan, 9] is 4), numpy's stop at the first.
    Mapping("argmax", "argmax", "arg", ("uint8", "int16", "int32", "int64")),
    Mapping("argmin", "argmin", "arg", ("uint8", "int16", "int32", "int64")),
    Mapping("prod", "prod", "prod", FLOATS + ("int32", "int64"), exact=False,
            note="floats multiply in another order than Paddle's; integers wrap in both"),
    Mapping("where", "where", "where", ("bool", "int32", "int64") + FLOATS, inputs=("bool", None, None)),
    Mapping("gather", "gather", "gather", BITS + FLOATS, inputs=(None, "int64"),
            note="negative indices count from the end in both"),
    Mapping("expand", "expand", "expand", BITS + FLOATS),
    Mapping("concat", "concat", "concat", BITS + FLOATS, variadic=True),
    # Paddle's CPU split_with_num has no int16 kernel.
    Mapping("split", "split", "split", ("bool", "uint8", "int8", "int32", "int64") + FLOATS, also=("split_with_num",)),
    # Paddle's CPU cumprod has no kernels for bool and the small integers.
    Mapping("cumprod", "cumprod", "cumprod", FLOATS + ("int32", "int64"), exact=False,
            note="bit for bit in the tests (both multiply in order); integers wrap in both"),
    # With stride kernels on (Paddle's default) an eager slice is a view (Paddle's own strided kernel): this one
    # serves static graphs and FLAGS_use_stride_kernel=0.
    Mapping("slice", "slice", "slice", BITS + FLOATS),
    Mapping("gather_nd", "gather_nd", "gather_nd", BITS + FLOATS, inputs=(None, "int64"),
            note="negative coordinates count from the end in both"),
    # Paddle's CPU take_along_axis/put_along_axis/pad: no bool or int8 kernels (pad none for uint8 either).
    Mapping("gather_elements", "take_along_axis", "take_along_axis", ("uint8", "int16", "int32", "int64") + FLOATS,
            inputs=(None, "int64"), note="negative indices count from the end in both"),
    Mapping("scatter_elements", "put_along_axis", "put_along_axis", ("uint8", "int16", "int32", "int64") + FLOATS,
            exact=False, inputs=(None, "int64", None),
            note="repeated indices: the last assigned wins in both; reductions combine in index order (bit for bit "
                 "in the tests)"),
    Mapping("scatter_nd", "scatter_nd_add", "scatter_nd_add", ("uint8", "int32", "int64") + FLOATS, exact=False,
            inputs=(None, "int64", None), note="repeated coordinates add up in index order in both (bit for bit in "
                                               "the tests)"),
    Mapping("pad", "pad", "pad", ("int16", "int32", "int64") + FLOATS),
    Mapping("conv_transpose2d", "conv2d_transpose", "conv2d_transpose", FLOATS, exact=False,
            note="sums in another order than Paddle's"),
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
    "log_softmax": "Paddle's CPU log_softmax clips x - max(x) at -64: -64.3 where hwadapter's gives -inf",
    "gelu": "Paddle's CPU gelu loses its tail (float32 gelu(-10) is -0.0, not -7.6e-23; gelu(-5.5) -1.64e-7, not "
            "-1.04e-7) and gives nan for -inf, hwadapter's -0.0",
    "reshape": "Paddle registers its own reshape kernel for every custom device (metadata only): no device kernel "
               "needed",
    "lrn": "Paddle's local_response_norm is composed of other ops (pow, pad, avg_pool2d, ...): no phi kernel to map",
    "adaptive_max_pool2d": "Paddle's adaptive_max_pool2d runs max_pool2d_with_index, which also outputs the argmax "
                           "mask hwadapter's op does not give (pool2d's adaptive max is refused)",
    "topk": "Paddle's CPU topk orders equal values arbitrarily (int32 [4, 1, 4, 2, 4, 0, 3, 3], k=5: indices [2, 4, "
            "0, 7, 6], hwadapter's [0, 2, 4, 6, 7]) and has two outputs; the bridge's kernels give one",
    "layer_norm": "Paddle's layer_norm also outputs mean and variance, which hwadapter's op does not give",
    "batch_norm": "Paddle's batch_norm (and batch_norm_infer) also output the running mean and variance, which "
                  "hwadapter's op does not give",
    "resize": "Paddle's interpolation kernels (nearest_interp, bilinear_interp, ...) take its own coordinate rules "
              "and scale attributes: not attempted",
}

#: mapped ops left to the fallback for some dtypes, and why (status prints it)
DTYPES_LEFT = {
    "mod": "float remainder keeps the sign of a zero x in Paddle's CPU (remainder(-0.0, 3) is -0.0), numpy's np.mod "
           "gives 0.0",
    "argmax": "Paddle's CPU argmax of floats skips nan (of [1, nan, 5, nan, 9]: 4), hwadapter's stops at the first",
    "argmin": "Paddle's CPU argmin of floats skips nan (of [1, nan, 5, nan, 9]: 0), hwadapter's stops at the first",
    "erf": "Paddle's CPU float32 erf is 23 ulp off for subnormal results (erf(1.18e-38)) and up to 4 ulp elsewhere",
    "div": "Paddle's integer divide truncates to an integer, hwadapter's gives float32",
    "pow": "Paddle's integer pow overflows and handles negative exponents differently",
    "sum": "Paddle sums int32 and smaller into int64, hwadapter's kernel keeps the dtype",
    "mean": "Paddle's mean of int32 is int32, hwadapter's mean of integers float32",
}

BY_OP = {m.op: m for m in TABLE}


def phi_kernels(m: Mapping) -> list[Mapping]:
    """The phi kernels one mapping registers: its own, and each of `also` as a mapping of that phi and form."""
    return [m] + [replace(m, phi=phi, form=phi, also=()) for phi in m.also]
#: an op that only serves another mapping's phi kernel -> that mapping
REQUIRED_BY = {op: m for m in TABLE for op in m.requires}


def arity(m: Mapping) -> int:
    return len(m.inputs) if m.inputs else ARITY.get(m.form, 2)


def input_dtypes(m: Mapping, dtype: str) -> tuple[str, ...]:
    """The dtypes of the op's inputs when its phi kernel is registered for `dtype`."""
    return tuple(d or dtype for d in m.inputs) if m.inputs else (dtype,) * arity(m)


def _registered(m: Mapping, names: list[str]) -> str:
    """The dtype a kernel with inputs of dtypes `names` would be registered for: its first input not of a fixed one."""
    return names[m.inputs.index(None)] if m.inputs else names[0]


def plan(kernels: list[tuple[str, tuple[int, ...]]],
         python: bool = False) -> tuple[dict[str, list[str]], list[dict]]:
    """From a library's kernel table [(op, input dtype codes)]: {op: dtypes to register} and, for every kernel
    not registered, {"op", "dtypes", "why"}. A kernel is registered when the op is mapped, all its inputs share
    one dtype, the mapping holds for that dtype and the library also has the mapping's `requires` for it (those
    then serve its phi kernel). A variadic mapping (concat) only for the plugin's Python kernels (`python`)."""
    register: dict[str, list[str]] = {}
    left = []
    have = set(kernels)
    for op, codes in kernels:
        names = [CODE_NAMES.get(c, f"code {c}") for c in codes]
        mapping = BY_OP.get(op)
        n = arity(mapping) if mapping else None
        missing = [r for r in mapping.requires if (r, codes) not in have] if mapping else []
        if mapping is None and op in REQUIRED_BY:
            owner = REQUIRED_BY[op]
            if (owner.op, codes) in have and names[0] in owner.dtypes and all(
                    (r, codes) in have for r in owner.requires):
                continue  # served through the owner's phi kernel
            why = f"used only by phi {owner.phi}, which needs {', '.join((owner.op,) + owner.requires)}"
        elif mapping is None:
            why = UNMAPPED.get(op, "no Paddle kernel mapped for this op")
        elif mapping.variadic and not python:
            why = (f"phi {mapping.phi} takes any number of inputs, a C kernel a fixed count (never registered "
                   f"half-done; a plugin's Python kernel serves it)")
        elif len(codes) != n or tuple(names) != input_dtypes(mapping, _registered(mapping, names)):
            why = (f"phi {mapping.phi} takes inputs of dtypes ({', '.join(input_dtypes(mapping, 'T'))})"
                   if mapping.inputs else f"phi {mapping.phi} takes {n} inputs of one dtype")
        elif _registered(mapping, names) not in mapping.dtypes:
            why = f"phi {mapping.phi} is mapped for {', '.join(mapping.dtypes)} only" + (
                f": {DTYPES_LEFT[op]}" if op in DTYPES_LEFT else "")
        elif missing:
            why = f"phi {mapping.phi} also needs {', '.join(missing)} for {names[0]} (never registered half-done)"
        else:
            dtype = _registered(mapping, names)
            if dtype not in register.setdefault(op, []):
                register[op].append(dtype)
            continue
        left.append({"op": op, "dtypes": names, "why": why})
    return register, left
