"""Property-based: random primitive programs (chains of functors over broadcast inputs, optionally
with a reduction whose result is reused elementwise) compiled by gcc equal the interpreter.

Float chains use only continuous functors, so compiler-vs-numpy rounding differences cannot be
amplified by a discontinuity (floor, sign, comparisons are exercised exactly in the corpus).
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hwadapter_kp as kp
import kp_harness as H
from kp_corpus import values

pytestmark = pytest.mark.slow  # property-based: dozens of random programs, each compiled by gcc / PoCL

FLOAT_UNARY = ["neg", "abs", "relu", "tanh", "sigmoid", "sin", "cos", "gelu", "erf"]
FLOAT_BINARY = ["add", "sub", "mul", "max", "min"]
INT_UNARY = ["neg", "abs", "relu", "sign"]
INT_BINARY = ["add", "sub", "mul", "max", "min", "div", "mod"]
TOL = {"float16": (5e-3, 2e-3), "float32": (1e-4, 1e-5), "float64": (1e-10, 1e-12)}
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def random_program(draw):
    dtype = draw(st.sampled_from(["float32", "float64", "float16", "int32", "int8", "int64"]))
    is_float = dtype.startswith("float")
    rank = draw(st.integers(0, 3))
    domain = tuple(draw(st.integers(1, 4)) for _ in range(rank))
    if rank and draw(st.integers(0, 9)) == 0:
        domain = domain[:-1] + (0,)     # now and then an empty domain
    shapes, strided = {}, {}
    for i in range(draw(st.integers(1, 3))):
        keep = rank if i == 0 else draw(st.integers(0, rank))   # x0 fixes the domain's rank
        shape = tuple(1 if draw(st.integers(0, 3)) == 0 else n for n in domain[rank - keep:])
        shapes[f"x{i}"] = shape
        strided[f"x{i}"] = draw(st.booleans()) and bool(shape)
    unary, binary = (FLOAT_UNARY, FLOAT_BINARY) if is_float else (INT_UNARY, INT_BINARY)
    nodes, cur = [], "x0"
    for k in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            nodes.append((draw(st.sampled_from(unary)), [cur], f"t{k}", {}))
        else:
            other = draw(st.sampled_from(list(shapes) + ["const"]))
            operand = draw(st.sampled_from([0.5, -1.5, 2.0] if is_float else [3, -2, 1])) if other == "const" else other
            args = [cur, operand] if draw(st.booleans()) else [operand, cur]
            nodes.append((draw(st.sampled_from(binary)), args, f"t{k}", {}))
        cur = f"t{k}"
    outputs = {"y_full": cur}
    if rank and draw(st.booleans()):
        axes = tuple(sorted(draw(st.sets(st.integers(0, rank - 1), min_size=1))))
        ops = ["sum", "max", "min", "mean"] if is_float else ["sum", "max", "min", "prod"]
        op = draw(st.sampled_from(ops))
        if op in ("max", "min") and 0 in domain:
            op = "sum"                  # max/min over an empty extent is an error by design
        nodes.append((f"reduce_{op}", [cur], "red", {"axes": axes, "keepdims": draw(st.booleans())}))
        outputs["y_red"] = "red"
        if draw(st.booleans()) and op not in ("sum", "prod"):
            nodes.append(("sub", [cur, "red"], "centred", {}))    # reduced value broadcast back
            outputs["y_full"] = "centred"
    nodes += [("identity", [src], name, {}) for name, src in outputs.items()]
    schedule = dict(elems_per_item=draw(st.sampled_from([1, 2, 4])), vector_width=draw(st.sampled_from([1, 4])))
    seed = draw(st.integers(0, 2**16))
    return dtype, shapes, strided, nodes, list(outputs), schedule, seed


def make_inputs(dtype, shapes, strided, seed):
    rng = np.random.default_rng(seed)
    inputs = {}
    for name, shape in shapes.items():
        base = values(rng, shape[:-1] + (2 * shape[-1],) if strided[name] else shape, dtype, -2, 2)
        if dtype.startswith("int"):
            base = values(rng, base.shape, dtype, -9, 9)
        inputs[name] = base[..., ::2] if strided[name] else base    # a genuinely non-contiguous view
    return inputs


def compare(got, expected, dtype_of):
    for name, exp in expected.items():
        act = got[name]
        assert act.shape == exp.shape and act.dtype == exp.dtype, name
        if exp.dtype.kind == "f":
            rtol, atol = TOL[exp.dtype.name]
            scale = float(np.max(np.abs(exp), initial=1.0)) if np.all(np.isfinite(exp)) else 1.0
            np.testing.assert_allclose(act, exp, rtol=rtol, atol=atol * scale, equal_nan=True, err_msg=name)
        else:
            np.testing.assert_array_equal(act, exp, err_msg=name)


@SETTINGS
@given(random_program())
def test_random_programs_c_equals_interpreter(case):
    dtype, shapes, strided, nodes, outputs, schedule, seed = case
    kernel = kp.fuse(nodes, list(shapes), outputs, name="rand")
    inputs = make_inputs(dtype, shapes, strided, seed)
    program = kernel.specialize_for(inputs)
    expected = kp.interpret(program, inputs)
    dialect = kp.C.with_schedule(**schedule)
    got = H.run_c(program, inputs, dialect=dialect)
    compare(got, expected, dtype)


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(random_program())
def test_random_programs_opencl_equals_interpreter(case):
    env, reason = H.cl_env()
    if env is None:
        pytest.skip(reason)
    dtype, shapes, strided, nodes, outputs, schedule, seed = case
    kernel = kp.fuse(nodes, list(shapes), outputs, name="rand")
    inputs = {n: np.array(v, order="C") for n, v in make_inputs(dtype, shapes, strided, seed).items()}
    program = kernel.specialize_for(inputs)
    dialect = kp.OPENCL.with_schedule(local_size=16, elems_per_item=schedule["elems_per_item"])
    compare(H.run_cl(program, inputs, dialect=dialect), kp.interpret(program, inputs), dtype)
