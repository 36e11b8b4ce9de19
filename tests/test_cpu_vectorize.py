"""The CPU backend's generated loops run SIMD: gcc reports each elementwise loop vectorised under the backend's own
flags, and the flags that make that possible change no result (NaN, infinities, signed zeros, subnormals)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from hwadapter import kp
from hwadapter.runtime.device import get

pytestmark = pytest.mark.skipif(get("cpu").codegen is None, reason="no C compiler: CPU codegen unavailable")

# the benchmark's chain (benchmarks/fused_elementwise.py): relu and min are NaN-propagating selects
CHAIN8 = [("mul", ("x", 1.5), "a"), ("add", ("a", 0.25), "b"), ("relu", ("b",), "c"), ("mul", ("c", 0.5), "d"),
          ("sub", ("d", "x"), "e"), ("abs", ("e",), "f"), ("min", ("f", 4.0), "g"), ("add", ("g", 1.0), "y")]
VECTORISED = {
    "chain8": CHAIN8,
    "relu_scaled": [("relu", ("x",), "r"), ("mul", ("r", 2.0), "y")],
    "min_max": [("max", ("x", "z"), "p"), ("min", ("x", "z"), "q"), ("sub", ("p", "q"), "y")],
    "rsqrt": [("mul", ("x", "x"), "s"), ("add", ("s", 1.0), "t"), ("rsqrt", ("t",), "y")],
    "sqrt": [("abs", ("x",), "s"), ("sqrt", ("s",), "y")],
    "floor": [("floor", ("x",), "y")],
    "sign": [("sign", ("x",), "y")],
    "where": [("gt", ("x", 0.0), "c"), ("where", ("c", "x", "z"), "y")],
    "div": [("div", ("x", "z"), "y")],
}
# one program, many outputs: every select-, sqrt- and rounding-based functor the flags could touch
SPECIAL = [("relu", ("x",), "o_relu"), ("max", ("x", "z"), "o_max"), ("min", ("x", "z"), "o_min"),
           ("min", ("x", 4.0), "o_min_c"), ("max", ("x", -0.0), "o_max_negzero"), ("sqrt", ("x",), "o_sqrt"),
           ("rsqrt", ("x",), "o_rsqrt"), ("floor", ("x",), "o_floor"), ("round", ("x",), "o_round"),
           ("sign", ("x",), "o_sign"), ("div", ("x", "z"), "o_div"), ("abs", ("x",), "o_abs")] + \
          [(op, tuple(f"chain_{a}" if a in ("a", "b", "c", "d", "e", "f", "g") else a for a in args), f"chain_{out}")
           for op, args, out in CHAIN8]


def _program(name, nodes, outputs, dtype, n=100):
    """The fused kernel of `nodes` specialised for contiguous 1-D `dtype` inputs of `n` elements."""
    ins = [name for name in ("x", "z") if any(name in node[1] for node in nodes)]
    kernel = kp.fuse(nodes, ins, outputs, name=name)
    return kernel.specialize_for({name: np.zeros(n, dtype) for name in ins})


def _loop_lines(source: str) -> range:
    """Line numbers of the grid loop: from its `for` to the end of the entry point."""
    lines = source.splitlines()
    first = next(i for i, line in enumerate(lines, 1) if line.lstrip().startswith("for (int64_t unit"))
    return range(first, len(lines) + 1)


def _assert_vectorised(backend, program, what):
    """gcc reports the grid loop of `program` vectorised (skips under other compilers)."""
    source = program.source(backend.dialect)
    report = backend.vectorizer_report(source, program.name)
    if report is None:
        pytest.skip(f"{backend.version}: not gcc, no -fopt-info-vec report")
    loop = _loop_lines(source)
    in_loop = [line for line in report.splitlines()
               if (m := re.search(r"\.c:(\d+):\d+: ", line)) and int(m.group(1)) in loop]
    assert any("optimized: loop vectorized" in line for line in in_loop), (
        f"{what}: gcc left the grid loop scalar under {' '.join(backend.flags)}:\n" + "\n".join(in_loop))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(VECTORISED))
def test_elementwise_loop_is_vectorised_under_the_backends_flags(name, dtype):
    program = _program(name, VECTORISED[name], ["y"], dtype)
    _assert_vectorised(get("cpu").codegen, program, f"{name} ({dtype})")


def test_a_loop_over_many_buffers_is_vectorised():
    """A fused program with many outputs: the compiler cannot check that many pointers for overlap at run time, so
    the loop must say its units are independent (`omp simd`), or it stays scalar."""
    nodes = [("mul", ("x", float(i + 2)), f"y{i}") for i in range(16)]
    program = _program("many", nodes, [node[2] for node in nodes], "float32")
    _assert_vectorised(get("cpu").codegen, program, "16 outputs")


def _special_values(dtype, n):
    """x and z: every pair of special values once, then random values up to `n`."""
    info = np.finfo(dtype)
    special = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, info.smallest_subnormal,
                        -info.smallest_subnormal, info.tiny, -info.tiny, info.max, -info.max, 1.0, -1.0, 0.5, -0.5,
                        2.5, -2.5, 4.0, -4.0, 1e-3, -1e-3], dtype)
    rest = np.random.default_rng(0).standard_normal((2, n - special.size ** 2)).astype(dtype) * 3
    x = np.concatenate([np.repeat(special, special.size), rest[0]])
    z = np.concatenate([np.tile(special, special.size), rest[1]])
    return x, z


def _run(backend, program, inputs):
    binary = backend.compile(program.source(backend.dialect), program.name)
    loaded = backend.load(binary, program.name)
    launch = program.bind(inputs, backend.dialect)
    shapes = program.output_shapes(inputs)
    outs = [np.empty(shapes[p.name], p.dtype) for p in program.outputs]
    loaded.launch(launch.global_size, [inputs[p.name] for p in program.inputs] + outs, launch.scalar_args)
    return {p.name: out for p, out in zip(program.outputs, outs)}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_vectorising_flags_change_no_result_at_special_values(dtype):
    """Bit for bit equal to the same source built scalar and serial under gcc's strict defaults (-ftrapping-math,
    -fmath-errno; no vectoriser, and no OpenMP, whose `simd` would vectorise anyway): the flags that let gcc
    vectorise only drop exception flags and errno."""
    from hwadapter_cpu.codegen import CpuCodegenBackend
    backend = get("cpu").codegen
    strict = CpuCodegenBackend()
    strict.flags = [f for f in backend.flags if f not in ("-fno-trapping-math", "-fno-math-errno", "-fopenmp-simd")]
    strict.flags.append("-fno-tree-vectorize")
    n = 40_003  # above the OpenMP threshold, and not a multiple of any vector width (the loop's epilogue runs)
    x, z = _special_values(dtype, n)
    program = _program("special", SPECIAL, [node[2] for node in SPECIAL], dtype, n)
    _assert_vectorised(backend, program, "the special-values program")  # else this compares scalar with scalar
    fast, scalar = _run(backend, program, {"x": x, "z": z}), _run(strict, program, {"x": x, "z": z})
    assert set(fast) == set(scalar) and len(fast) > 10
    with np.errstate(all="ignore"):
        oracle_nan = {"o_relu": np.isnan(x), "o_max": np.isnan(x) | np.isnan(z),
                      "o_min": np.isnan(x) | np.isnan(z), "o_sqrt": np.isnan(np.sqrt(x)), "o_div": np.isnan(x / z)}
    for name, got in fast.items():
        bits = got.view(np.uint32 if dtype == "float32" else np.uint64)
        want = scalar[name].view(bits.dtype)
        diff = np.flatnonzero(bits != want)
        assert diff.size == 0, (f"{name}: vectorised build differs from the scalar build at x={x[diff[:5]]}, "
                                f"z={z[diff[:5]]}: {got[diff[:5]]} vs {scalar[name][diff[:5]]}")
        if name in oracle_nan:  # NaN propagates exactly where numpy's does
            np.testing.assert_array_equal(np.isnan(got), oracle_nan[name], err_msg=name)
