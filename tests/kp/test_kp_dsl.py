"""The embedded language, specialisation and the launch contract; misuse raises KernelError."""

import numpy as np
import pytest

import hwadapter_kp as kp
import kp_harness as H
from hwadapter_kp import library


@kp.kernel
def bias_gelu(x: kp.In["T"], b: kp.In["T"], out: kp.Out["T"]):
    a = kp.read(x)
    c = kp.read_broadcast(b, like=x)
    kp.write(out, kp.unary(kp.ops.gelu, kp.binary(kp.ops.add, a, c)))


@kp.kernel
def softmax_stats(x: kp.In["T"], out: kp.Out["T"], row_max: kp.Out["T"], *, axis=-1):
    """softmax plus the row maximum: a reduced and an elementwise output in one program."""
    v = kp.read_reduce(x, axes=axis)
    m = kp.reduce(kp.reducers.max, v, keepdims=True)
    e = kp.unary("exp", v - m)
    kp.write(out, e / kp.reduce("sum", e))
    kp.write(row_max, m)


def test_readme_example_renders_every_dialect():
    src = bias_gelu.source("opencl")
    assert "__kernel" in src and "get_global_id(0)" in src and "erfc(" in src
    assert "bias_gelu" in src.splitlines()[1]          # header names the kernel
    assert "float32" in src and "schedule:" in src     # ... its dtypes and the schedule
    assert "extern \"C\" __global__" in bias_gelu.source("cuda")
    c = bias_gelu.source("c")
    assert "#pragma omp simd" in c and "_task(const int64_t* args, const int64_t part, const int64_t parts)" in c
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    b = np.arange(5, dtype=np.float32)
    out = kp.interpret(bias_gelu, {"x": x, "b": b})["out"]
    assert out.shape == (4, 5) and out.dtype == np.float32


def test_program_contract():
    p = bias_gelu.specialize(dtypes={"T": "float32"}, shapes={"x": (4, 5), "b": (5,)})
    assert p.name.isidentifier() and p.name.startswith("bias_gelu_")
    assert [(q.name, q.dtype, q.kind) for q in p.params] == [("x", "float32", "in"), ("b", "float32", "in"),
                                                             ("out", "float32", "out")]
    assert p.output_shapes({"x": (4, 5), "b": (5,)}) == {"out": (4, 5)}
    # sizes, then strides of the non-flat inputs' non-broadcast axes; x is contiguous and full: flat index
    assert p.scalar_arg_names() == ("size0", "size1", "b_stride1")
    launch = p.bind({"x": (4, 5), "b": (5,)}, "opencl")
    assert launch == (128, (4, 5, 1))
    assert p.bind({"x": (400, 5), "b": (5,)}, "cuda").global_size == 2048   # ceil(2000 / 256) * 256
    assert p.bind({"x": (4, 5), "b": (5,)}, "c").global_size == 20
    assert p.bind({"x": (0, 5), "b": (5,)}, "opencl").global_size == 0      # nothing to launch
    assert p.local_size("opencl") == 128 and p.local_size("cuda") == 256


def test_global_size_honours_schedule():
    p = library.get("relu").specialize({"T": "float32"}, {"x": (1000,)})
    assert p.bind({"x": (1000,)}, kp.OPENCL.with_schedule(local_size=64, elems_per_item=4)).global_size == 256
    assert p.bind({"x": (1000,)}, kp.C.with_schedule(elems_per_item=8)).global_size == 125


def test_sources_are_shape_polymorphic_and_deterministic():
    add = library.get("add")
    sources = {add.specialize({"T": "float32"}, {"x": s, "y": s}).source("c")
               for s in [(4, 5), (40, 7), (3,), (2, 3, 4), (1, 9)]}
    assert len(sources) == 1              # contiguous same-shape operands coalesce to one rank-1 program
    bcast = add.specialize({"T": "float32"}, {"x": (4, 5), "y": (5,)})
    assert bcast.source("c") not in sources
    again = add.specialize({"T": "float32"}, {"x": (8, 2), "y": (2,)})
    assert again.source("c") == bcast.source("c") and again.name == bcast.name


def test_one_program_serves_many_shapes_of_its_pattern():
    p = library.get("softmax").specialize({"T": "float32"}, {"x": (2, 3)}, axis=-1)
    rng = np.random.default_rng(1)
    funcs = H.build_c([p])
    for shape in [(2, 3), (5, 17), (1, 2), (7, 1), (3, 0)]:
        x = rng.standard_normal(shape).astype(np.float32)
        if 1 in shape:
            with pytest.raises(kp.KernelError, match="broadcasts differently"):
                p.bind({"x": x})
            continue
        H.assert_same(H.run_c(p, {"x": x}, funcs)["out"], kp.interpret(p, {"x": x})["out"])


def test_multi_output_program_with_reduction():
    x = np.random.default_rng(2).standard_normal((3, 4, 5)).astype(np.float32)
    for axis in (-1, 1):
        p = softmax_stats.specialize_for({"x": x}, axis=axis)
        assert p.output_shapes({"x": x.shape}) == {"out": x.shape,
                                                   "row_max": tuple(1 if a == axis % 3 else s
                                                                    for a, s in enumerate(x.shape))}
        got = H.run_c(p, {"x": x})
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        np.testing.assert_allclose(got["out"], e / e.sum(axis=axis, keepdims=True), rtol=1e-5)
        np.testing.assert_array_equal(got["row_max"], x.max(axis=axis, keepdims=True))


def test_softmax_is_one_program_with_passes():
    src = library.get("softmax").specialize({"T": "float32"}, {"x": (4, 8)}).source("c")
    assert src.count("reduction pass") == 2 and "/* write out */" in src
    assert src.count("for (int64_t unit = first; unit < last; ++unit)") == 1  # one loop over units, in parts


def test_independent_reductions_share_a_loop():
    @kp.kernel
    def moments(x: kp.In["T"], s: kp.Out["T"], m: kp.Out["T"]):
        v = kp.read_reduce(x, axes=None)
        kp.write(s, kp.reduce("sum", v))
        kp.write(m, kp.reduce("max", v))
    p = moments.specialize({"T": "float64"}, {"x": (3, 4)})
    assert p.source("c").count("for (int64_t r = 0;") == 1
    x = np.arange(12.0).reshape(3, 4)
    got = H.run_c(p, {"x": x})
    assert got["s"].shape == () and got["s"] == 66.0 and got["m"] == 11.0


def test_strided_inputs():
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    x, y = base[::2, 1::3], base.T[:3, :3]                   # two non-contiguous views
    p = library.get("mul").specialize_for({"x": x, "y": y})
    assert p.scalar_arg_names() == ("size0", "size1", "x_stride0", "x_stride1", "y_stride0", "y_stride1")
    assert p.bind({"x": x, "y": y}).scalar_args == (3, 3, 20, 3, 1, 10)
    H.assert_same(H.run_c(p, {"x": x, "y": y})["out"], x * y)
    with pytest.raises(kp.KernelError, match="not contiguous"):
        library.get("mul").specialize_for({"x": np.ascontiguousarray(x), "y": y}).bind({"x": x, "y": y})


def test_cycle_binary():
    @kp.kernel
    def cyc(x: kp.In["T"], p: kp.In["T"], out: kp.Out["T"]):
        kp.write(out, kp.cycle_binary("mul", kp.read(x), p))
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    period = np.array([1, -1, 2], np.int32)
    prog = cyc.specialize_for({"x": x, "p": period})
    expected = x * np.resize(period, 12).reshape(3, 4)
    np.testing.assert_array_equal(kp.interpret(prog, {"x": x, "p": period})["out"], expected)
    np.testing.assert_array_equal(H.run_c(prog, {"x": x, "p": period})["out"], expected)
    assert prog.scalar_arg_names()[-1] == "p_period"


def test_ternary_any_and_operators():
    @kp.kernel
    def mix(a: kp.In["T"], b: kp.In["T"], out: kp.Out["T"]):
        x, y = kp.read_broadcast(a), kp.read_broadcast(b)
        big = kp.binary("gt", x, y)
        kp.write(out, kp.any("where", big, x * 2 - y, (-x) ** 2 % 3))
    a = np.array([[1.0, -2.0, 3.5]], np.float32)
    b = np.array([[0.0], [5.0]], np.float32)
    expected = np.where(a > b, a * 2 - b, np.remainder(a ** 2, 3) + 0 * b)
    np.testing.assert_allclose(H.run_c(mix.specialize_for({"a": a, "b": b}), {"a": a, "b": b})["out"], expected)


def test_reads_are_interned():
    @kp.kernel
    def twice(x: kp.In["T"], out: kp.Out["T"]):
        kp.write(out, kp.read(x) + kp.read(x))
    p = twice.specialize({"T": "float32"}, {"x": (5,)})
    assert p.ir().count("load x") == 1 and p.source("c").count("x[") == 1


def test_float16_computes_in_float32():
    @kp.kernel
    def cancel(x: kp.In["float16"], out: kp.Out["float16"]):
        v = kp.read(x)
        kp.write(out, (v + kp.init(2048.0, "float16")) - kp.init(2048.0, "float16"))
    x = np.array([0.5, 1.25], np.float16)       # 2048.5 is not a half: rounding between ops would lose it
    p = cancel.specialize_for({"x": x})
    np.testing.assert_array_equal(kp.interpret(p, {"x": x})["out"], x)
    np.testing.assert_array_equal(H.run_c(p, {"x": x})["out"], x)
    assert "uint16_t" in p.source("c") and "vload_half" in p.source("opencl") and "__half" in p.source("cuda")


def test_empty_and_zero_d_launches():
    p = library.get("add").specialize({"T": "int32"}, {"x": (), "y": ()})
    assert p.bind({"x": (), "y": ()}).global_size == 1
    np.testing.assert_array_equal(H.run_c(p, {"x": np.int32(3), "y": np.int32(4)})["out"], np.int32(7))
    s = library.get("reduce_sum").specialize({"T": "float32"}, {"x": (3, 0)}, axis=1)
    np.testing.assert_array_equal(H.run_c(s, {"x": np.zeros((3, 0), np.float32)})["out"], np.zeros(3, np.float32))


# --- misuse -------------------------------------------------------------------------------------

def _raises(match, fn, *args, **kwargs):
    with pytest.raises(kp.KernelError, match=match) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    return info.value


def test_dtype_mismatch_names_kernel_and_fix():
    _raises("kernel 'add': type variable 'T' is float32 but input 'y' is int32", kp.interpret,
            library.get("add"), {"x": np.zeros(3, np.float32), "y": np.zeros(3, np.int32)})

    @kp.kernel
    def bad(x: kp.In["float32"], y: kp.In["int32"], out: kp.Out["float32"]):
        kp.write(out, kp.read(x) + kp.read(y))
    err = _raises("different dtypes", bad.specialize, shapes={"x": (3,), "y": (3,)})
    assert "kernel 'bad'" in str(err) and "cast" in str(err)


def test_misuse_errors():
    add = library.get("add")
    _raises("type variable 'T' of input 'x' is unbound", add.specialize, shapes={"x": (3,), "y": (3,)})
    _raises("missing shape for input 'y'", add.specialize, {"T": "float32"}, {"x": (3,)})
    _raises("does not broadcast", add.specialize, {"T": "float32"}, {"x": (3,), "y": (4,)})
    _raises("unknown attribute", add.specialize, {"T": "float32"}, {"x": (3,), "y": (3,)}, axis=1)
    _raises("mean", library.get("reduce_mean").specialize, {"T": "int32"}, {"x": (3,)})
    _raises("needs a floating dtype", library.get("exp").specialize, {"T": "int32"}, {"x": (3,)})
    p = add.specialize({"T": "float32"}, {"x": (3, 4), "y": (3, 4)})
    _raises("rank 1, specialised for rank 2", p.bind, {"x": (12,), "y": (12,)})
    _raises("missing input", p.bind, {"x": (3, 4)})

    @kp.kernel
    def unknown(x: kp.In["T"], out: kp.Out["T"]):
        kp.write(out, kp.unary("frobnicate", kp.read(x)))
    _raises("unknown functor 'frobnicate'; known: abs, add", unknown.specialize, {"T": "float32"}, {"x": (3,)})
    _raises("unknown dialect", p.source, "vulkan")
    _raises("outside|inside a @kp.kernel", kp.read, None)


def test_kernel_definition_errors():
    def no_annotation(x, out: kp.Out["T"]):
        pass
    _raises("needs a kp.In", kp.kernel, no_annotation)

    def reserved(unit: kp.In["T"], out: kp.Out["T"]):
        pass
    _raises("reserved", kp.kernel, reserved)

    def shadows_builtin(exp: kp.In["T"], out: kp.Out["T"]):
        pass
    _raises("reserved", kp.kernel, shadows_builtin)
    _raises("not a C identifier", kp.fuse, [("neg", ["x.1"], "y", {})], ["x.1"], ["y"])

    @kp.kernel
    def twice(x: kp.In["T"], out: kp.Out["T"]):
        kp.write(out, kp.read(x))
        kp.write(out, kp.read(x))
    _raises("written twice", twice.specialize, {"T": "float32"}, {"x": (3,)})

    @kp.kernel
    def never(x: kp.In["T"], out: kp.Out["T"]):
        kp.read(x)
    _raises("never written", never.specialize, {"T": "float32"}, {"x": (3,)})

    @kp.kernel
    def full_read(x: kp.In["T"], y: kp.In["T"], out: kp.Out["T"]):
        kp.write(out, kp.read(x) + kp.read(y))
    _raises("use read_broadcast", full_read.specialize, {"T": "float32"}, {"x": (3, 4), "y": (4,)})

    @kp.kernel
    def two_axes(x: kp.In["T"], a: kp.Out["T"], b: kp.Out["T"]):
        v = kp.read(x)
        kp.write(a, kp.reduce("sum", v, axes=0))
        kp.write(b, kp.reduce("sum", v, axes=1))
    _raises("share their axes", two_axes.specialize, {"T": "float32"}, {"x": (3, 4)})
    _raises("out of range", library.get("reduce_sum").specialize, {"T": "float32"}, {"x": (3,)}, axis=2)

    @kp.kernel
    def wrong_out(x: kp.In["T"], out: kp.Out["float16"]):
        kp.write(out, kp.read(x))
    _raises("kp.cast", wrong_out.specialize, {"T": "float32"}, {"x": (3,)})


def test_constant_representability():
    @kp.kernel
    def half_int(x: kp.In["int32"], out: kp.Out["int32"]):
        kp.write(out, kp.read(x) * 0.5)
    _raises("not representable as int32", half_int.specialize, shapes={"x": (3,)})


def test_params_are_inputs_then_outputs():
    @kp.kernel
    def interleaved(a: kp.In["T"], total: kp.Out["T"], b: kp.In["T"], diff: kp.Out["T"]):
        kp.write(total, kp.read(a) + kp.read(b))
        kp.write(diff, kp.read(a) - kp.read(b))
    p = interleaved.specialize({"T": "int32"}, {"a": (3,), "b": (3,)})
    assert [q.name for q in p.params] == ["a", "b", "total", "diff"]
    a, b = np.arange(3, dtype=np.int32), np.full(3, 5, np.int32)
    got = H.run_c(p, {"a": a, "b": b})
    np.testing.assert_array_equal(got["total"], a + b)
    np.testing.assert_array_equal(got["diff"], a - b)


def test_shape_objects_and_bound_reduction_dtype():
    class Dense:           # what a device array looks like to the launch contract: shape and dtype
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, np.dtype(dtype)
    p = library.get("reduce_sum").specialize_for({"x": Dense((4, 6), "int32")}, dtypes={"U": "int32"}, axis=1)
    assert p.outputs[0].dtype == "int32" and p.bind({"x": Dense((4, 6), "int32")}).scalar_args == (4, 6)
    x = np.arange(24, dtype=np.int32).reshape(4, 6)
    np.testing.assert_array_equal(H.run_c(p, {"x": x})["out"], x.sum(axis=1).astype(np.int32))
    unbound = library.get("reduce_sum").specialize_for({"x": x}, axis=1)
    assert unbound.outputs[0].dtype == "int64"


def test_large_launches_run_in_parallel_and_agree():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 257)).astype(np.float32)
    y = rng.standard_normal(257).astype(np.float32)
    add = library.get("add").specialize_for({"x": x, "y": y})
    H.assert_same(H.run_c(add, {"x": x, "y": y})["out"], x + y)
    for axis in (-1, 0):
        sm = library.get("softmax").specialize_for({"x": x}, axis=axis)
        H.assert_same(H.run_c(sm, {"x": x})["out"], kp.interpret(sm, {"x": x})["out"])


@pytest.mark.parametrize("parts", [2, 3, 7])
def test_a_c_program_run_in_parts_equals_it_run_whole(parts):
    """The `_task` entry a host's threads share: its parts together write what one call of the entry writes, for
    flat, row (broadcast) and reducing programs, above and below the threshold where one part takes everything."""
    rng = np.random.default_rng(4)
    for rows in (3, 300):
        x = rng.standard_normal((rows, 257)).astype(np.float32)
        y = rng.standard_normal(257).astype(np.float32)
        cases = [(library.get("add").specialize_for({"x": x, "y": y}), {"x": x, "y": y}),
                 (library.get("exp").specialize_for({"x": x}), {"x": x}),
                 (library.get("softmax").specialize_for({"x": x}, axis=-1), {"x": x}),
                 (library.get("softmax").specialize_for({"x": x}, axis=0), {"x": x})]
        for program, inputs in cases:
            whole, split = H.run_c(program, inputs), H.run_c_parts(program, inputs, parts)
            for name in whole:
                np.testing.assert_array_equal(split[name], whole[name], err_msg=f"{program.name}: {name}")


def test_kernel_in_a_module_with_postponed_annotations(tmp_path):
    """`from __future__ import annotations` turns annotations into strings; kp.kernel evaluates them."""
    import importlib.util
    src = tmp_path / "postponed_mod.py"
    src.write_text("from __future__ import annotations\nimport hwadapter_kp as kp\n\n"
                   "@kp.kernel\ndef inc(x: kp.In['T'], out: kp.Out['T']):\n    kp.write(out, kp.read(x) + 1)\n")
    spec = importlib.util.spec_from_file_location("postponed_mod", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import numpy as np
    assert np.array_equal(kp.interpret(mod.inc, {"x": np.arange(3)})["out"], np.arange(1, 4))
