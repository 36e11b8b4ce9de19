"""The three C-family dialects (C + OpenMP, OpenCL C, CUDA C) and the schedule they carry.

A dialect only answers small questions for the one renderer in codegen.py:
type names, literals, math function names, how to load/store a dtype, the
entry-point signature, and the loop that spreads work items over the grid.
"""

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from . import cfuncs
from . import dtypes as dt
from .errors import KernelError


@dataclass(frozen=True)
class Schedule:
    """How work is spread: work-group/block size, work units per item, and SIMD width (C)."""

    local_size: int = 128
    elems_per_item: int = 1
    vector_width: int = 1

    def __post_init__(self):
        for name in ("local_size", "elems_per_item", "vector_width"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise KernelError(f"schedule {name} must be a positive int, got {getattr(self, name)!r}")

    def describe(self) -> str:
        """One-line description for source headers."""
        return (f"local_size={self.local_size}, elems_per_item={self.elems_per_item}, "
                f"vector_width={self.vector_width}")


_MATH = ("exp", "log", "sqrt", "tanh", "erf", "erfc", "sin", "cos", "floor", "ceil", "rint", "fabs", "pow",
         "fmod", "copysign")


@dataclass(frozen=True)
class Dialect:
    """Base of the C-family dialects; instances are immutable and hashable (they key source caches)."""

    schedule: Schedule = field(default_factory=Schedule)
    #: Buffers are declared restrict (none aliases another). False for a program whose output is written over an input
    #: of its shape (a graph's in-place step): each unit still loads its position before it stores it.
    restrict: bool = True
    #: elementwise programs over several axes loop over rows, then along the last axis (codegen.py); False: one flat
    #: loop over elements, each unravelled (grid-stride dialects, whose threads share rows element by element)
    row_loops = False
    name = ""
    title = ""
    extension = ""
    index_type = ""
    func_qualifier = ""
    types = {}
    storage = {}
    unsigned = {}

    def with_schedule(self, **changes) -> "Dialect":
        """A copy of this dialect with schedule fields replaced."""
        return dataclasses.replace(self, schedule=dataclasses.replace(self.schedule, **changes))

    # --- types and literals ---------------------------------------------------------
    def ctype(self, d: str) -> str:
        """Register type of dtype ``d`` (float16 computes as float)."""
        return self.types[dt.register(d)]

    def storage_type(self, d: str) -> str:
        """Element type of a buffer of dtype ``d``."""
        return self.storage.get(d) or self.types[d]

    def utype(self, d: str) -> str:
        """Unsigned type as wide as int32, or int64 for 64-bit ``d`` (for wrapping arithmetic)."""
        return self.unsigned["int64" if d in ("int64", "uint64") else "int32"]

    def lit(self, value, d: str) -> str:
        """Literal of ``value`` in register dtype ``d``."""
        d = dt.register(d)
        if d == "bool":
            return "true" if value else "false"
        if dt.is_float(d):
            v = float(value)
            if math.isnan(v) or math.isinf(v):
                return self.special_float(v, d)
            text = str(np.float32(v)) if d == "float32" else repr(v)
            text = text + "f" if d == "float32" else text
            return f"({text})" if v < 0 or text.startswith("-") else text
        v = int(value)
        # unsigned literals carry a U: a uint64 value above 2^63 is no signed literal at all
        suffix = {"int64": self.int64_suffix, "uint32": "U", "uint64": "U" + self.int64_suffix}.get(d, "")
        info = np.iinfo(d)
        if v == info.min and d in ("int32", "int64"):
            return f"(-{info.max}{suffix} - 1)"
        return f"({v}{suffix})" if v < 0 else f"{v}{suffix}"

    def special_float(self, v, d):
        """Literal for inf/nan."""
        text = "NAN" if math.isnan(v) else "INFINITY"
        text = text if d == "float32" else f"(double){text}"
        return f"(-{text})" if v < 0 else text

    def call(self, fn: str, d: str, *args) -> str:
        """Call of math function ``fn`` on floating register dtype ``d``."""
        d = dt.register(d)
        if fn == "rsqrt":
            return f"{self.lit(1, d)} / {self.call('sqrt', d, *args)}"
        if fn not in _MATH:
            raise KernelError(f"no math function {fn!r}")
        return f"{fn}{'f' if d == 'float32' else ''}({', '.join(args)})"

    # --- memory -------------------------------------------------------------------------
    def load(self, ptr: str, offset: str, d: str, helpers) -> str:
        """Expression reading element ``offset`` of buffer ``ptr`` as a register value."""
        if d == "bool":
            return f"{ptr}[{offset}] != 0"
        return f"{ptr}[{offset}]"

    def store(self, ptr: str, offset: str, value: str, d: str, helpers) -> str:
        """Statement writing register ``value`` to element ``offset`` of ``ptr``."""
        return f"{ptr}[{offset}] = {value};"

    # --- helpers ---------------------------------------------------------------------
    def helper(self, kind: str, d: str):
        """(name, source, dependencies) of a helper function."""
        name = cfuncs.helper_name(kind, d)
        if kind == "round_half" and dt.register(d) == "float64":
            return name, self.round_half_f64_source(), self.round_half_f64_deps()
        if kind == "round_half":
            return name, self.round_half_source(), self.round_half_deps()
        if kind == "floormod" and dt.is_float(d):
            return name, cfuncs.float_floormod(dt.register(d), self), []
        if kind in ("floordiv", "floormod", "ipow"):
            return name, cfuncs.int_helper(kind, d, self), []
        raise KernelError(f"dialect {self.name}: no helper {kind!r}")

    def round_half_deps(self):
        """Helpers the float16 rounding helper needs."""
        return []

    def round_half_f64_deps(self):
        """Helpers the float64 -> float16 rounding helper needs."""
        return []

    # --- structure ------------------------------------------------------------------------
    def global_size(self, n_units: int) -> int:
        """Work items to launch for ``n_units`` work units (a multiple of local_size, 0 if none)."""
        items = -(-n_units // self.schedule.elems_per_item)
        local = self.schedule.local_size
        return -(-items // local) * local

    def grid_loop(self, vectorizable: bool, work: str = "n_units"):
        """(opening lines, closing lines, body depth) of the loop running ``unit`` over all work units.

        ``vectorizable``: the body has no inner loops; ``work``: expression of the total element count.
        """
        s, I = self.schedule, self.index_type
        first = self.first_item()
        step = self.item_stride()
        if s.elems_per_item == 1:
            return ([f"for ({I} unit = {first}; unit < n_units; unit += {step}) {{"], ["}"], 1)
        ept = s.elems_per_item
        # consecutive work items take consecutive units for each e, so memory accesses coalesce
        return ([f"const {I} n_items = (n_units + {ept} - 1) / {ept};",
                 f"for ({I} item = {first}; item < n_items; item += {step}) {{",
                 "    #pragma unroll",
                 f"    for (int e = 0; e < {ept}; ++e) {{",
                 f"        const {I} unit = item + e * n_items;",
                 "        if (unit >= n_units) break;"], ["    }", "}"], 2)

    def features_prelude(self, uses) -> list:
        """Lines before the helpers: includes and pragmas for the features used."""
        return []

    def entry(self, name, buffers, scalars, body) -> list:
        """Lines of the entry point `name` around the lines of its `body`."""
        return [*self.signature(name, buffers, scalars), "{", *body, "}"]

    def first_item(self) -> str:
        """Expression of this work item's first index (grid-stride dialects)."""
        raise NotImplementedError

    def item_stride(self) -> str:
        """Expression of the grid-stride step (grid-stride dialects)."""
        raise NotImplementedError

    def signature(self, name, buffers, scalars) -> list:
        """Lines of the entry declaration: ``buffers`` are (name, element type, is_input)."""
        raise NotImplementedError

    def round_half_source(self) -> str:
        """Source of ``kp_round_half`` (float -> nearest half -> float)."""
        raise NotImplementedError

    def round_half_f64_source(self) -> str:
        """Source of ``kp_round_half_f64`` (double -> nearest half -> float, rounded once)."""
        raise NotImplementedError

    def describe_schedule(self) -> str:
        """The schedule as the source header shows it."""
        return self.schedule.describe()


def _types(f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, b):
    return dict(zip(dt.DTYPES, (f16, f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, b)))


#: math functions of two arguments (every other vector_math function takes one)
_ARITY = {"powf": 2, "atan2f": 2}


#: C's powf(x, y) with x's sign taken out first: glibc's vector powf computes a negative base one lane at a time
#: (about 17 ns an element on GELU's activations, half of them negative, against 3 ns for their magnitudes); the sign
#: goes back as C's pow has it (odd integer y: negative; other integers: positive; otherwise nan for a finite non-zero
#: x, the magnitude's result for -0 and -inf)
_KP_POWF = """static inline float kp_powf(float x, float y)
{
    float r = powf(fabsf(x), y), h = y * 0.5f;
    int integer = rintf(y) == y, odd = integer && rintf(h) != h;
    return signbit(x) ? (odd ? -r : (!integer && isfinite(x) && x != 0.0f ? NAN : r)) : r;
}"""


@dataclass(frozen=True)
class CDialect(Dialect):
    """Plain C99 with OpenMP `simd` loops. The entry runs the whole grid itself; `<entry>_task(args, part, parts)` runs
    part `part` of `parts` of it, for a host's threads to share (no OpenMP threads: they hang a forked child)."""

    schedule: Schedule = field(default_factory=lambda: Schedule(local_size=1))
    parallel_threshold: int = 32768     # below this much work (elements) one part takes it all: threads cost more
    #: float math functions (C names: "expf", "powf") the C library also has as SIMD variants, such as glibc's
    #: libmvec: declared as glibc's math.h declares them under -ffast-math, so `omp simd` loops call the vector forms
    #: instead of staying scalar. Empty: every call is the scalar one.
    vector_math: tuple = ()
    row_loops = True
    name = "c"
    title = "C99 + OpenMP simd"
    extension = ".c"
    index_type = "int64_t"
    int64_suffix = "LL"
    func_qualifier = "static inline "
    types = _types(None, "float", "double", "int8_t", "int16_t", "int32_t", "int64_t", "uint8_t", "uint16_t",
                   "uint32_t", "uint64_t", "bool")
    storage = {"float16": "uint16_t", "bool": "uint8_t"}
    unsigned = {"int32": "uint32_t", "int64": "uint64_t"}

    def global_size(self, n_units):
        return -(-n_units // self.schedule.elems_per_item)

    def describe_schedule(self):
        s = self.schedule
        return (f"elems_per_item={s.elems_per_item}, vector_width={s.vector_width}, "
                f"parallel_threshold={self.parallel_threshold} (whole grid in one call, or in parts: <entry>_task)")

    def load(self, ptr, offset, d, helpers):
        if d == "float16":
            return f"{helpers('half_to_float', d)}({ptr}[{offset}])"
        return super().load(ptr, offset, d, helpers)

    def store(self, ptr, offset, value, d, helpers):
        if d == "float16":
            return f"{ptr}[{offset}] = {helpers('float_to_half', d)}({value});"
        return super().store(ptr, offset, value, d, helpers)

    def helper(self, kind, d):
        if kind == "half_to_float":
            return "kp_half_to_float", cfuncs.HALF_TO_FLOAT.format(q=self.func_qualifier), []
        if kind == "float_to_half":
            return "kp_float_to_half", cfuncs.FLOAT_TO_HALF.format(q=self.func_qualifier), []
        if kind == "double_to_half":
            return "kp_double_to_half", cfuncs.DOUBLE_TO_HALF.format(q=self.func_qualifier), []
        return super().helper(kind, d)

    def round_half_source(self):
        return (f"{self.func_qualifier}float kp_round_half(float x)\n{{\n"
                f"    return kp_half_to_float(kp_float_to_half(x));\n}}")

    def round_half_deps(self):
        return [("half_to_float", "float16"), ("float_to_half", "float16")]

    def round_half_f64_source(self):
        return (f"{self.func_qualifier}float kp_round_half_f64(double x)\n{{\n"
                f"    return kp_half_to_float(kp_double_to_half(x));\n}}")

    def round_half_f64_deps(self):
        return [("half_to_float", "float16"), ("double_to_half", "float16")]

    def features_prelude(self, uses):
        lines = ["#include <stdint.h>", "#include <stdbool.h>", "#include <math.h>"]
        for fn in self.vector_math:
            args = ", ".join(["float"] * _ARITY.get(fn, 1))
            lines.append(f'__attribute__((__simd__("notinbranch"))) float {fn}({args});')
        if "powf" in self.vector_math:
            lines += _KP_POWF.splitlines()
        return lines

    def call(self, fn, d, *args):
        if fn == "pow" and dt.register(d) == "float32" and "powf" in self.vector_math:
            return f"kp_powf({', '.join(args)})"
        return super().call(fn, d, *args)

    def _args(self, buffers, scalars) -> list:
        args = [f"{'const ' if is_in else ''}{t}*{' restrict' if self.restrict else ''} {n}" for n, t, is_in in buffers]
        return args + [f"const int64_t {s}" for s in scalars]

    def signature(self, name, buffers, scalars):
        return [f"void {name}(", *_arg_lines(self._args(buffers, scalars)), ")"]

    def entry(self, name, buffers, scalars, body):
        # <name>_part runs part `part` of `parts`; <name> all of it; <name>_task the same as <name>_part with its
        # arguments in one array (buffer addresses, then the scalars), which is what a thread pool's task receives
        args = self._args(buffers, scalars)
        names = [n for n, _, _ in buffers] + list(scalars)
        casts = [f"({'const ' if is_in else ''}{t}*)(intptr_t)args[{k}]" for k, (_, t, is_in) in enumerate(buffers)]
        casts += [f"args[{len(buffers) + k}]" for k in range(len(scalars))]
        return [f"static void {name}_part(", *_arg_lines(args + ["const int64_t part", "const int64_t parts"]), ")",
                "{", *body, "}", "", *self.signature(name, buffers, scalars), "{",
                f"    {name}_part({', '.join(names + ['0', '1'])});", "}", "",
                f"void {name}_task(const int64_t* args, const int64_t part, const int64_t parts)", "{",
                f"    {name}_part({', '.join(casts + ['part', 'parts'])});", "}"]

    def _range(self, count, work):
        """Lines setting [first, last) of `count` outer iterations for this part (one part takes all small work)."""
        return [f"const int64_t split = {work} > {self.parallel_threshold} ? parts : 1;",
                "if (part >= split) return;",
                f"const int64_t first = {count} * part / split, last = {count} * (part + 1) / split;"]

    def row_loop(self, last, work="n_units"):
        """(lines opening the row loop, lines opening the loop along axis `last` in it, closing lines)."""
        simdlen = f" simdlen({self.schedule.vector_width})" if self.schedule.vector_width > 1 else ""
        return ([f"const int64_t n_rows = size{last} ? n_units / size{last} : 0;", *self._range("n_rows", work),
                 "for (int64_t row = first; row < last; ++row) {"],
                [f"    #pragma omp simd{simdlen}",
                 f"    for (int64_t i{last} = 0; i{last} < size{last}; ++i{last}) {{",
                 f"        const int64_t unit = row * size{last} + i{last};"], ["    }", "}"])

    def grid_loop(self, vectorizable, work="n_units"):
        s = self.schedule
        # `simd` on every loop without inner loops: its units are independent (the buffers are restrict), and the
        # compiler would otherwise have to prove it, which it cannot once the buffers are too many to check at run time
        simdlen = f" simdlen({s.vector_width})" if s.vector_width > 1 else ""
        simd = [f"#pragma omp simd{simdlen}"] if vectorizable else []
        if s.elems_per_item == 1:
            return ([*self._range("n_units", work), *simd, "for (int64_t unit = first; unit < last; ++unit) {"],
                    ["}"], 1)
        ept = s.elems_per_item
        inner = [f"    {x}" for x in simd] + ["    for (int64_t unit = begin; unit < end; ++unit) {"]
        # each work item takes a contiguous run of units: cache friendly and SIMD friendly on CPUs
        return ([f"const int64_t n_items = (n_units + {ept} - 1) / {ept};", *self._range("n_items", work),
                 "for (int64_t item = first; item < last; ++item) {",
                 f"    const int64_t begin = item * {ept};",
                 f"    const int64_t end = begin + {ept} < n_units ? begin + {ept} : n_units;",
                 *inner], ["    }", "}"], 2)


@dataclass(frozen=True)
class OpenCLDialect(Dialect):
    """OpenCL C 1.2: __kernel entry, get_global_id grid-stride loop, half via vload/vstore_half."""

    name = "opencl"
    title = "OpenCL C"
    extension = ".cl"
    index_type = "long"
    int64_suffix = "L"
    func_qualifier = ""
    types = _types(None, "float", "double", "char", "short", "int", "long", "uchar", "ushort", "uint", "ulong", "bool")
    storage = {"float16": "half", "bool": "uchar"}
    unsigned = {"int32": "uint", "int64": "ulong"}

    def call(self, fn, d, *args):
        if fn == "rsqrt":
            return f"rsqrt({', '.join(args)})"
        super().call(fn, "float64", *args)   # validates the name
        return f"{fn}({', '.join(args)})"    # OpenCL builtins are overloaded on float/double

    def load(self, ptr, offset, d, helpers):
        if d == "float16":
            return f"vload_half({offset}, {ptr})"
        return super().load(ptr, offset, d, helpers)

    def store(self, ptr, offset, value, d, helpers):
        if d == "float16":
            return f"vstore_half_rte({value}, {offset}, {ptr});"
        return super().store(ptr, offset, value, d, helpers)

    def round_half_source(self):
        # no cl_khr_fp16 needed: round-trip through a 16-bit private slot
        return ("float kp_round_half(float x)\n{\n    ushort bits;\n"
                "    vstore_half_rte(x, 0, (__private half*)&bits);\n"
                "    return vload_half(0, (__private const half*)&bits);\n}")

    def round_half_f64_source(self):
        # vstore_half_rte has a double overload (cl_khr_fp64): one rounding, straight from double
        return ("float kp_round_half_f64(double x)\n{\n    ushort bits;\n"
                "    vstore_half_rte(x, 0, (__private half*)&bits);\n"
                "    return vload_half(0, (__private const half*)&bits);\n}")

    def features_prelude(self, uses):
        return ["#pragma OPENCL EXTENSION cl_khr_fp64 : enable"] if "float64" in uses else []

    def signature(self, name, buffers, scalars):
        args = [f"__global {'const ' if is_in else ''}{t}*{' restrict' if self.restrict else ''} {n}"
                for n, t, is_in in buffers]
        args += [f"const long {s}" for s in scalars]
        attr = f"__attribute__((reqd_work_group_size({self.schedule.local_size}, 1, 1)))"
        return [f"__kernel {attr}", f"void {name}(", *_arg_lines(args), ")"]

    def first_item(self):
        return "get_global_id(0)"

    def item_stride(self):
        return "get_global_size(0)"


@dataclass(frozen=True)
class CUDADialect(Dialect):
    """CUDA C++ for NVRTC/nvcc: extern "C" __global__ entry, grid-stride loop, __half via cuda_fp16.h."""

    schedule: Schedule = field(default_factory=lambda: Schedule(local_size=256))
    name = "cuda"
    title = "CUDA C"
    extension = ".cu"
    index_type = "long long"
    int64_suffix = "LL"
    func_qualifier = "static __device__ __forceinline__ "
    types = _types(None, "float", "double", "signed char", "short", "int", "long long", "unsigned char",
                   "unsigned short", "unsigned int", "unsigned long long", "bool")
    storage = {"float16": "__half", "bool": "unsigned char"}
    unsigned = {"int32": "unsigned int", "int64": "unsigned long long"}

    def special_float(self, v, d):
        # NVRTC has no math.h macros; build inf/nan from their bit patterns
        if d == "float32":
            text = "__int_as_float(0x7fffffff)" if math.isnan(v) else "__int_as_float(0x7f800000)"
        else:
            text = ("__longlong_as_double(0x7ff8000000000000LL)" if math.isnan(v)
                    else "__longlong_as_double(0x7ff0000000000000LL)")
        return f"(-{text})" if v < 0 else text

    def call(self, fn, d, *args):
        if fn == "rsqrt":
            return f"rsqrt{'f' if dt.register(d) == 'float32' else ''}({', '.join(args)})"
        return super().call(fn, d, *args)

    def load(self, ptr, offset, d, helpers):
        if d == "float16":
            return f"__half2float({ptr}[{offset}])"
        return super().load(ptr, offset, d, helpers)

    def store(self, ptr, offset, value, d, helpers):
        if d == "float16":
            return f"{ptr}[{offset}] = __float2half_rn({value});"
        return super().store(ptr, offset, value, d, helpers)

    def round_half_source(self):
        return (f"{self.func_qualifier}float kp_round_half(float x)\n{{\n"
                f"    return __half2float(__float2half_rn(x));\n}}")

    def round_half_f64_source(self):
        return (f"{self.func_qualifier}float kp_round_half_f64(double x)\n{{\n"
                f"    return __half2float(__double2half(x));\n}}")

    def features_prelude(self, uses):
        return ["#include <cuda_fp16.h>"] if "float16" in uses else []

    def signature(self, name, buffers, scalars):
        args = [f"{'const ' if is_in else ''}{t}*{' __restrict__' if self.restrict else ''} {n}"
                for n, t, is_in in buffers]
        args += [f"const long long {s}" for s in scalars]
        return [f'extern "C" __global__ void __launch_bounds__({self.schedule.local_size})',
                f"{name}(", *_arg_lines(args), ")"]

    def first_item(self):
        return "(long long)blockIdx.x * blockDim.x + threadIdx.x"

    def item_stride(self):
        return "(long long)gridDim.x * blockDim.x"


def _arg_lines(args):
    return [f"    {a}{',' if i < len(args) - 1 else ''}" for i, a in enumerate(args)]


C = CDialect()
OPENCL = OpenCLDialect()
CUDA = CUDADialect()
DIALECTS = {"c": C, "opencl": OPENCL, "cuda": CUDA}


def get_dialect(dialect) -> Dialect:
    """A Dialect instance from a name ("c", "opencl", "cuda") or an instance."""
    if isinstance(dialect, Dialect):
        return dialect
    try:
        return DIALECTS[str(dialect).lower()]
    except KeyError:
        raise KernelError(f"unknown dialect {dialect!r}; use one of {sorted(DIALECTS)}") from None
