"""kp.fuse: a graph of ops becomes ONE program that reads each input once and writes each output once."""

import numpy as np
import pytest

import hwadapter_kp as kp
import kp_harness as H
from hwadapter_kp import library

CHAIN = [
    ("mul", ["x", "scale"], "t0", {}),
    ("add", ["t0", "bias"], "t1", {}),
    ("gelu", ["t1"], "t2", {}),
    ("sub", ["t2", "x"], "t3", {}),
    ("tanh", ["t3"], "t4", {}),
    ("max", ["t4", "bias"], "t5", {}),
    ("mul", ["t5", 0.5], "t6", {}),
    ("add", ["t6", "x"], "y", {}),
]


def _inputs(dtype):
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((4, 8)).astype(dtype), "scale": rng.standard_normal(8).astype(dtype),
            "bias": rng.standard_normal((4, 1)).astype(dtype)}


def _unfused(nodes, inputs):
    """Run each node as its own library kernel through the interpreter (intermediates materialised)."""
    env = dict(inputs)
    for op, args, out, _ in nodes:
        dtype = next(env[a].dtype for a in args if isinstance(a, str))
        vals = [env[a] if isinstance(a, str) else np.asarray(a, dtype) for a in args]
        names = ["x", "y"][:len(vals)]
        env[out] = kp.interpret(library.get(op), dict(zip(names, vals)))["out"]
    return env


def test_eight_op_chain_is_one_program_equal_to_unfused():
    kernel = kp.fuse(CHAIN, ["x", "scale", "bias"], ["y"], name="chain8")
    inputs = _inputs(np.float32)
    program = kernel.specialize_for(inputs)
    fused = kp.interpret(program, inputs)["y"]
    np.testing.assert_array_equal(fused, _unfused(CHAIN, inputs)["y"])   # same float32 ops, same order
    H.assert_same(H.run_c(program, inputs)["y"], fused)
    assert len(program.params) == 4 and program.outputs[0].name == "y"


def test_fused_program_reads_each_input_once_and_writes_once():
    program = kp.fuse(CHAIN, ["x", "scale", "bias"], ["y"]).specialize_for(_inputs(np.float32))
    ir = program.ir()
    for name in ("x", "scale", "bias"):
        assert ir.count(f"load {name}\n") == 1
    assert ir.count("store ") == 1
    for dialect in ("c", "cuda"):
        src = program.source(dialect)
        for name in ("x", "scale", "bias", "y"):
            assert src.count(f"{name}[") == 1, (dialect, name)
    src = program.source("opencl")
    assert sum(src.count(f"{n}[") for n in ("x", "scale", "bias", "y")) == 4


def test_float16_fusion_rounds_each_intermediate_as_the_unfused_ops_do():
    """Registers hold float32, but each float16 result is rounded where the op alone would write it: fusing a
    float16 chain never changes its result."""
    inputs = _inputs(np.float16)
    program = kp.fuse(CHAIN, ["x", "scale", "bias"], ["y"]).specialize_for(inputs)
    fused = kp.interpret(program, inputs)["y"]
    with np.errstate(all="ignore"):
        one_by_one = _unfused(CHAIN, inputs)["y"]                 # numpy: float16 in, float16 out, per op
    np.testing.assert_array_equal(fused, one_by_one)
    H.assert_same(H.run_c(program, inputs)["y"], fused)


def test_fusion_with_reductions_and_several_outputs():
    nodes = [
        ("reduce_mean", ["x"], "mu", {"axes": (-1,), "keepdims": True}),
        ("sub", ["x", "mu"], "d", {}),
        ("mul", ["d", "d"], "d2", {}),
        ("reduce_mean", ["d2"], "var", {"axes": (-1,), "keepdims": True}),
        ("add", ["var", 1e-5], "ve", {}),
        ("rsqrt", ["ve"], "inv", {}),
        ("mul", ["d", "inv"], "n", {}),
        ("mul", ["n", "w"], "y", {}),
    ]
    kernel = kp.fuse(nodes, {"x": "T", "w": "T"}, ["y", "var"])
    rng = np.random.default_rng(1)
    inputs = {"x": rng.standard_normal((5, 6)).astype(np.float64), "w": rng.standard_normal(6)}
    program = kernel.specialize_for(inputs)
    x = inputs["x"]
    var = x.var(axis=-1, keepdims=True)
    expected = {"y": (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(var + 1e-5) * inputs["w"], "var": var}
    for got in (kp.interpret(program, inputs), H.run_c(program, inputs)):
        for name, value in expected.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-12)
    assert program.source("c").count("for (int64_t unit = first; unit < last; ++unit)") == 1


def test_fusion_accepts_cast_and_output_dtype_inference():
    kernel = kp.fuse([("gt", ["a", "b"], "m", {}), ("cast", ["m"], "f", {"dtype": "float32"}),
                      ("mul", ["f", "a"], "y", {})], ["a", "b"], ["m", "y"])
    a, b = np.array([1.0, -2.0, 3.0], np.float32), np.array([0.0, 0.0, 5.0], np.float32)
    got = H.run_c(kernel.specialize_for({"a": a, "b": b}), {"a": a, "b": b})
    np.testing.assert_array_equal(got["m"], a > b)
    np.testing.assert_array_equal(got["y"], (a > b) * a)


@pytest.mark.parametrize("nodes,outputs,match", [
    ([("frob", ["x"], "y", {})], ["y"], "unknown op"),
    ([("reduce_median", ["x"], "y", {})], ["y"], "unknown reduction"),
    ([("add", ["x", "z"], "y", {})], ["y"], "before it is defined"),
    ([("neg", ["x"], "y", {}), ("neg", ["y"], "y", {})], ["y"], "defined twice"),
    ([("neg", ["x"], "y", {})], ["z"], "never computed"),
])
def test_fusion_graph_errors(nodes, outputs, match):
    with pytest.raises(kp.KernelError, match=match):
        kp.fuse(nodes, ["x"], outputs)
