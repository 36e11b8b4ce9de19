"""The reference plugins cpu and opencl as PaddlePaddle custom devices, through their native device libraries.

Each plugin's `native_library()` builds a small device_api.h library from the C source it ships (host memory for
cpu, OpenCL shared virtual memory for opencl). First those libraries alone, through hwadapter's own NativeRuntime
(numpy the oracle); then `hwadapter paddle install cpu opencl` and one child `import paddle` that checks both types
against Paddle's own CPU. The helpers (children with a time limit, their results) are test_paddle_bridge.py's.
"""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from paddle_needs import PADDLE_SKIP
from children import LIVE_OF
from hwadapter import host
from test_paddle_bridge import THREADS, _child, _hwadapter, _result
from test_paddle_kernels import DEVICE_FORMS, DEVICE_SIMPLE, FORM_CASES, check_device_forms

_SKIP = PADDLE_SKIP
needs_paddle = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")
needs_cc = pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None,
                              reason="a C compiler (gcc or cc) is needed to build the plugins' device libraries")

#: Paddle's name of each reference type: `cpu` is Paddle's own, so the bridge prefixes it.
PADDLE_NAME = {"cpu": "hwa_cpu", "opencl": "opencl"}


def _plugin(name: str):
    record = host.plugin_record(name)
    if record is None or record.plugin is None:
        pytest.skip(f"the {name} plugin is not usable here: {record.explain() if record else 'not installed'}")
    try:
        record.plugin.device_count()
    except Exception as err:
        pytest.skip(f"{name} has no device here: {err}")
    return record.plugin


def _usable_types() -> list[str]:
    """The reference types whose plugin loads and has a device (opencl needs an OpenCL driver)."""
    out = []
    for name in PADDLE_NAME:
        record = host.plugin_record(name)
        try:
            if record is not None and record.plugin is not None and record.plugin.device_count() > 0:
                out.append(name)
        except Exception:
            pass
    return out


@needs_cc
@pytest.mark.parametrize("name", ["cpu", "opencl", "opencl-queued"])
def test_device_library_through_hwadapters_native_runtime(name):
    from hwadapter.plugin import InvalidArgumentError, NativeRuntime, OutOfMemoryError, build_library
    plugin = _plugin(name.split("-")[0])
    path = plugin.native_library()
    assert path == plugin.native_library()  # built once, then the same file
    if name == "opencl-queued":  # copies and memset through the OpenCL queue, as on a coarse-grain SVM device
        from hwadapter_opencl import native
        path = build_library(native.SOURCE, "test-queued", {"DEVICE_TYPE": '"opencl"', "COARSE_GRAIN_ONLY": "1"},
                             ("-ldl", "-lpthread"))
    rt = host.native_runtime(path)
    free0, total = rt.memory_info()
    props = rt.properties()
    assert total > 0 and props.total_memory == total and props.extra["native_api"] == (1, 2)
    assert props.extra["alignment"] >= 64
    data = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    a, b = rt.allocate(data.nbytes), rt.allocate(data.nbytes)
    assert a % props.extra["alignment"] == 0
    assert rt.memory_info()[0] == free0 - 2 * data.nbytes  # the library counts what it handed out
    rt.copy_h2d(a, 0, data)
    rt.copy_d2d(b, 0, a, 0, data.nbytes)
    rt.copy_d2d(b, 400, a, 0, 400)  # flat pointers: copies into the middle of an allocation
    rt.memset(b, 4000 - 8, 0, 8)
    out = np.empty_like(data)
    rt.copy_d2h(out, b, 0)
    want = data.copy()
    want[100:200] = data[:100]
    want[-2:] = 0
    np.testing.assert_array_equal(out, want)
    rt.free(a)
    rt.free(b)
    assert rt.memory_info()[0] == free0
    with pytest.raises(InvalidArgumentError, match="not a live allocation"):
        rt.free(a)
    with pytest.raises(OutOfMemoryError, match=f"cannot allocate {total + 1} bytes"):
        rt.allocate(total + 1)
    assert rt.memory_info()[0] == free0
    with pytest.raises(InvalidArgumentError, match="no device 5"):
        NativeRuntime(rt.lib, 5).allocate(8)


@needs_cc
def test_build_library_keeps_one_file_per_source_and_says_why_it_cannot(monkeypatch, tmp_path):
    from hwadapter.plugin import CompileError, build_library
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "ok.c").write_text('#include "hwadapter/device_api.h"\nint answer(void) { return ANSWER; }\n')
    first = build_library(tmp_path / "ok.c", "t", {"ANSWER": "42"})
    assert first.parent == tmp_path / "cache" / "native" and first.is_file()
    assert build_library(tmp_path / "ok.c", "t", {"ANSWER": "42"}) == first  # built once
    assert build_library(tmp_path / "ok.c", "t", {"ANSWER": "7"}) != first  # what it is built from names it
    (tmp_path / "bad.c").write_text("int broken(void) { return }\n")
    with pytest.raises(CompileError, match="could not build the native device library") as err:
        build_library(tmp_path / "bad.c", "t")
    assert "error" in err.value.log
    # A cache directory others may write to is not used; the process's temporary one would vanish at exit.
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(shared / "cache"))
    with pytest.raises(CompileError, match="needs a lasting place"):
        build_library(tmp_path / "ok.c", "t", {"ANSWER": "42"})


@needs_paddle
@needs_cc
def test_candidates_name_and_classify_the_reference_plugins():
    import hwadapter_paddle.bridge as bridge
    assert bridge.paddle_type("cpu") == "hwa_cpu" and bridge.paddle_type("opencl") == "opencl"
    # Paddle reads "cuda:N" anywhere in a device string as its GPU: no Paddle name may end in "cuda"
    assert [bridge.paddle_type(t) for t in ("cuda", "dcu", "mycuda")] == ["hwa_cudart", "hwa_dcu", "mycudart"]
    with pytest.raises(bridge.BridgeError, match="the bridge names it 'hwa_cpu'"):
        bridge.check_type_name("cpu")
    found = {c.device_type: c for c in bridge.candidates(["cpu", "testdev"])}
    assert found["cpu"].bridgeable and found["cpu"].paddle_type == "hwa_cpu"
    # A plugin whose runtime is Python and that offers no library: the base Plugin's native_library() is None.
    assert not found["testdev"].bridgeable and "offers no native library" in found["testdev"].reason


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """`hwadapter paddle install cpu [opencl] --dir ROOT`: (root, an empty site folder, {hwadapter type: its library's
    path}, the manifest's shims)."""
    if _SKIP:
        pytest.skip(_SKIP)
    types = _usable_types()
    root = tmp_path_factory.mktemp("paddle-reference")
    site = tmp_path_factory.mktemp("empty-site")
    proc = _hwadapter("paddle", "install", "cpu", "--dir", str(root), site=site)
    assert proc.returncode == 0, f"install failed:\n{proc.stdout}\n{proc.stderr}"
    assert "in Paddle: hwa_cpu" in proc.stdout, proc.stdout
    # opencl beside it with its runtime only: Paddle runs static graphs on one custom type of a process, and this
    # child runs both (bridge.STATIC_FIRST_TYPE); opencl's own kernels are checked alone in test_paddle_adopt.py
    for other in (t for t in types if t != "cpu"):
        proc = _hwadapter("paddle", "install", other, "--runtime-only", "--dir", str(root), site=site)
        assert proc.returncode == 0, f"install failed:\n{proc.stdout}\n{proc.stderr}"
    shims = json.loads((root / "hwadapter_paddle.json").read_text())["shims"]
    assert sorted(shims) == sorted(types) and shims["cpu"]["paddle_type"] == "hwa_cpu"
    return root, site, {t: shims[t]["library"] for t in types}, shims


# Every check of both types in one child: `import paddle` costs seconds. Bytes in use are read from each library's
# own memory_info (a dlopen of the path the shim loaded is the same instance).
REFERENCE = LIVE_OF + r"""
libraries = json.loads(os.environ["REFERENCE_LIBRARIES"])
if "cpu" in libraries:  # an op the bridge has no kernel for: Paddle's fallback log must name it (before the
    paddle.set_device("hwa_cpu:0")  # inference config below turns Paddle's INFO log off: disable_glog_info)
    paddle.roll(paddle.ones([3]), 1)
def mlp():
    paddle.seed(7)
    return paddle.nn.Sequential(paddle.nn.Linear(16, 32), paddle.nn.ReLU(), paddle.nn.Linear(32, 32),
                                paddle.nn.GELU(), paddle.nn.Linear(32, 4), paddle.nn.Softmax())
def cnn():
    paddle.seed(11)
    return paddle.nn.Sequential(paddle.nn.Conv2D(3, 8, 3, padding=1), paddle.nn.BatchNorm2D(8), paddle.nn.ReLU(),
                                paddle.nn.MaxPool2D(2), paddle.nn.Conv2D(8, 4, 3), paddle.nn.ReLU(),
                                paddle.nn.Flatten(), paddle.nn.Linear(4 * 4 * 4, 5))
inputs = {"mlp": (mlp, np.random.default_rng(0).standard_normal((8, 16)).astype("float32")),
          "cnn": (cnn, np.random.default_rng(1).standard_normal((2, 3, 12, 12)).astype("float32"))}
import tempfile
from paddle import inference
models = tempfile.mkdtemp()
paddle.set_device("cpu")
out = {"types": paddle.device.get_all_custom_device_type(), "paddle_cpu": {}}
for model, (build, x) in inputs.items():  # Paddle's CPU: the oracle; its nets saved for paddle.inference
    net = build()
    net.eval()
    out["paddle_cpu"][model] = net(paddle.to_tensor(x)).numpy().tolist()
    paddle.jit.save(net, os.path.join(models, model), input_spec=[paddle.static.InputSpec([None, *x.shape[1:]],
                                                                                          "float32")])
def run(r, static=True):  # the nets, then a 4 MiB tensor, all dropped: the bytes the library still lends
    for model, (build, x) in inputs.items():
        net = build()
        net.eval()
        t = paddle.to_tensor(x)
        eager = net(t)
        r[model] = {"eager": eager.numpy().tolist(), "place": str(eager.place),
                    "weight_place": str(net[0].weight.place),
                    "static": static and paddle.jit.to_static(net, full_graph=True)(t).numpy().tolist()}
        del net, t, eager
    paddle.device.empty_cache()
    before = live()
    big = paddle.ones([1024, 1024], dtype="float32")  # past anything Paddle's allocator has cached
    twice = big * 2
    r["peak"], r["sum"] = live() - before, float(twice.sum())
    del big, twice
    paddle.device.empty_cache()
    r["freed"] = live() - before
    return live() - base
for kind, path in libraries.items():
    name = PADDLE_NAME[kind]
    live = live_of(path)
    paddle.set_device(name + ":0")
    for build, x in inputs.values():  # Paddle keeps a few bytes on a device after its first use (seeds, constants)
        build()(paddle.to_tensor(x))
    paddle.device.empty_cache()
    base = live()
    r = out[kind] = {}
    r["after"] = [run(r), run({}, static=False)]  # the results and peak of the first round
    for model, (build, x) in inputs.items():
        file = next(f for f in os.listdir(models) if f.startswith(model + ".") and f.endswith((".json", ".pdmodel")))
        config = inference.Config(os.path.join(models, file), os.path.join(models, model + ".pdiparams"))
        config.enable_custom_device(name, 0)
        config.disable_glog_info()
        predictor = inference.create_predictor(config)
        handle = predictor.get_input_handle(predictor.get_input_names()[0])
        handle.copy_from_cpu(x)
        predictor.run()
        r[model]["inference"] = predictor.get_output_handle(predictor.get_output_names()[0]).copy_to_cpu().tolist()
        del predictor, handle
if "cpu" in libraries:  # hwa_cpu's Python kernels with attributes (optable.FORMS) against Paddle's CPU, counted
    lib = ctypes.CDLL(os.path.join(os.environ["CUSTOM_DEVICE_ROOT"], "libhwadapter_paddle_cpu.pykernels"))
    lib.hwadapter_paddle_kernel_calls.restype = ctypes.c_longlong
    calls = lambda name: lib.hwadapter_paddle_kernel_calls(name.encode())
    from hwadapter_paddle import optable
    by_phi = {m.phi: m for m in optable.TABLE if m.form in optable.ATTRIBUTE_FORMS}
    out["forms"] = device_forms("hwa_cpu:0", by_phi, dtypes=lambda phi: by_phi[phi].dtypes)  # every mapped dtype
    out["simple"] = device_simple("hwa_cpu:0", [m for m in optable.TABLE if m.form not in optable.ATTRIBUTE_FORMS
                                                and m.form != "matmul"])
    paddle.set_device("hwa_cpu:0")  # what the device's kernels cannot do exactly: refused, with the reason
    rs, refused = np.random.default_rng(2), out.setdefault("refused", {})
    for name, fn, args in [
            ("conv2d NHWC", lambda a, b: _F.conv2d(a, b, data_format="NHWC"),
             [rs.standard_normal((1, 5, 5, 2)).astype("float32"), rs.standard_normal((3, 2, 3, 3)).astype("float32")]),
            ("pool2d ceil_mode past the input", lambda t: _F.max_pool2d(t, 2, 3, ceil_mode=True),
             [rs.standard_normal((1, 1, 6, 6)).astype("float32")]),
            ("sum into float64", lambda t: paddle.sum(t, dtype="float64"), [np.ones(3, "float32")]),
            ("logical right shift of int32", lambda a, b: paddle.bitwise_right_shift(a, b, is_arithmetic=False),
             [np.array([-8], "int32"), np.array([1], "int32")]),
            ("argmax into int32", lambda t: paddle.argmax(t, dtype="int32"), [np.arange(3, dtype="int64")]),
            ("clip with a nan bound", lambda t: paddle.clip(t, float("nan"), 1.0), [np.ones(3, "float32")]),
            ("gather with an int32 index", paddle.gather, [np.ones(3, "float32"), np.array([1], "int32")]),
            ("gather_nd with an empty coordinate", paddle.gather_nd, [np.ones((3, 3), "float32"),
                                                                       np.zeros((2, 0), "int64")]),
            ("take_along_axis with an int32 index", lambda a, b: paddle.take_along_axis(a, b, 0, broadcast=False),
             [np.ones((3, 2), "float32"), np.zeros((1, 2), "int32")]),
            ("put_along_axis mean", lambda a, b, c: paddle.put_along_axis(a, b, c, 0, "mean", broadcast=False),
             [np.ones((3, 2), "float32"), np.zeros((1, 2), "int64"), np.ones((1, 2), "float32")]),
            ("conv2d_transpose NHWC", lambda a, b: _F.conv2d_transpose(a, b, data_format="NHWC"),
             [rs.standard_normal((1, 5, 5, 2)).astype("float32"), rs.standard_normal((2, 3, 3, 3)).astype("float32")]),
            ("slice of one axis twice", lambda t: paddle._C_ops.slice(t, [0, 0], [0, 1], [2, 3], [1, 1], []),
             [np.ones((3, 3), "float32")])]:
        paddle.set_flags({"FLAGS_use_stride_kernel": name != "slice of one axis twice"})  # else a view, no kernel
        try:
            fn(*[paddle.to_tensor(a) for a in args])
            refused[name] = None
        except Exception as err:
            refused[name] = str(err)
        finally:
            paddle.set_flags({"FLAGS_use_stride_kernel": True})
    with open(os.path.join(models, "moves.py"), "w") as f:  # to_static reads the function's source from a file
        f.write("import paddle\n"
                "def moves(a, b):  # data movement: eager (where slice is a view) and under to_static\n"
                "    c = paddle.concat([a[1:3] * 2, paddle.expand(b[:1], [2, 4]), a[:1]], axis=0)\n"
                "    d = paddle.nn.functional.pad(c, [1, 0, 0, 2], value=0.5)\n"
                "    return paddle.cumprod(d, dim=1) + paddle.gather_nd(d, paddle.to_tensor([[0], [2]])).sum()\n")
    sys.path.insert(0, models)
    from moves import moves
    moved = out["moves"] = {}
    m = np.random.default_rng(4).standard_normal((4, 4)).astype("float32")
    for place in ("cpu", "hwa_cpu:0"):
        paddle.set_device(place)
        before = calls("slice")
        moved[place] = [moves(paddle.to_tensor(m), paddle.to_tensor(m[::-1].copy())).numpy().tolist(),
                        paddle.jit.to_static(moves, full_graph=True)(paddle.to_tensor(m),
                                                                      paddle.to_tensor(m[::-1].copy())).numpy().tolist()]
        moved[place + " slice calls"] = calls("slice") - before
    names = [m.phi for m in optable.TABLE]
    for model, (build, x) in inputs.items():  # which of the nets' phi kernels ran on the device's kernels
        net = build()
        net.eval()
        before = {n: calls(n) for n in names}
        net(paddle.to_tensor(x))
        out[model + "_kernels"] = {n: calls(n) - before[n] for n in names if calls(n) != before[n]}
print("RESULT=" + json.dumps(out))
"""


def test_cpu_and_opencl_in_paddle_match_paddle_cpu_eager_to_static_and_inference(installed):
    root, site, libraries, _ = installed
    code = f"PADDLE_NAME = {PADDLE_NAME!r}\n" + FORM_CASES + DEVICE_FORMS + DEVICE_SIMPLE + REFERENCE
    proc = _child(code, root, site,
                  env={"REFERENCE_LIBRARIES": json.dumps(libraries), "CDEMO_LIBRARY": libraries["cpu"],
                       # Paddle's fallback lines. A pattern of at most 15 characters: paddlepaddle 3.3.1 destroys
                       # glog's FLAGS_vmodule twice at exit, a double free (valgrind; then SIGABRT, or a hang in
                       # Paddle's signal handler) once the string is long enough to live on the heap, as
                       # "kernel_factory=1" is, even in `GLOG_vmodule=kernel_factory=1 python -c "import paddle"`.
                       "GLOG_minloglevel": "0", "GLOG_vmodule": "kernel_f*=1"})
    r = _result(proc)
    # Paddle says each op it runs on the CPU instead ("missing hwa_cpu kernel: relu, ... fallbacking to CPU one!")
    fell_back = set(re.findall(r"missing hwa_cpu kernel: (\w+),", proc.stderr))
    # the mapped ops and those training.py writes (relu, gelu, batch_norm) run on the device
    assert not fell_back & {"conv2d", "pool2d", "softmax", "matmul", "add", "relu", "gelu", "batch_norm"}, fell_back
    assert "roll" in fell_back or "cpu" not in libraries, fell_back  # the observable works (roll is not mapped)
    print("hwa_cpu fell back for:", sorted(fell_back))
    assert sorted(r["types"]) == sorted(PADDLE_NAME[t] for t in libraries)
    for kind in libraries:
        place = f"Place({PADDLE_NAME[kind]}:0)"
        for model in ("mlp", "cnn"):
            got, want = r[kind][model], np.array(r["paddle_cpu"][model])
            assert got["place"] == place and got["weight_place"] == place
            # the plugin's kernels, bridged (hwa_cpu's Python ones), sum in their own order: equal to rounding
            np.testing.assert_allclose(np.array(got["eager"]), want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{kind} {model} eager")
            np.testing.assert_allclose(np.array(got["static"]), want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{kind} {model} to_static")
            np.testing.assert_allclose(np.array(got["inference"]), want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{kind} {model} paddle.inference")
        # Paddle's tensors are the C library's memory. paddle.device.empty_cache() (3.3.1) releases the cache of one
        # custom device type only, the first listed: that one's 4 MiB return to the library; another's stay in
        # Paddle's cache. Either way a second round ends holding no more than the first: nothing leaks.
        assert r[kind]["sum"] == 2.0 * 1024 * 1024
        assert r[kind]["peak"] >= 2 * 4 * 1024 * 1024, (kind, r[kind]["peak"])
        first, second = r[kind]["after"]
        assert second <= first, (kind, r[kind]["after"])
        assert r[kind]["freed"] == 0 or PADDLE_NAME[kind] != r["types"][0], (kind, r[kind]["freed"])
    if "cpu" in libraries:
        _check_forms_on_hwa_cpu(r)


def _check_forms_on_hwa_cpu(r: dict) -> None:
    """Reductions, softmax, conv2d and pool2d ran on hwa_cpu's kernels (their counters moved, never on the CPU) and
    equal Paddle's CPU as the optable entry claims; what they cannot do is refused naming the kernel and the fix."""
    assert len(r["forms"]) >= 60, sorted(r["forms"])
    check_device_forms(r["forms"], "hwa_cpu:0")
    check_device_forms(r["simple"], "hwa_cpu:0")  # the one- and two-input entries (keys "phi dtype")
    for name, message in r["refused"].items():
        assert message and "hwadapter-paddle: hwa_cpu kernel" in message and "--runtime-only" in message, (name,
                                                                                                          message)
    assert "NHWC" in r["refused"]["conv2d NHWC"] and "paddle.cast" in r["refused"]["sum into float64"]
    assert "is_arithmetic=False" in r["refused"]["logical right shift of int32"]
    assert "int32" in r["refused"]["argmax into int32"] and "nan" in r["refused"]["clip with a nan bound"]
    assert "cast the index" in r["refused"]["gather with an int32 index"]
    assert "cast the index" in r["refused"]["take_along_axis with an int32 index"]
    assert "empty" in r["refused"]["gather_nd with an empty coordinate"]  # Paddle gives all of x for each
    assert "reduce='mean'" in r["refused"]["put_along_axis mean"] and "NHWC" in r["refused"]["conv2d_transpose NHWC"]
    assert "sliced twice" in r["refused"]["slice of one axis twice"]
    # concat, expand, pad, cumprod and gather_nd in one program, eager and under to_static (where slice is a kernel)
    moved = r["moves"]
    for got in moved["hwa_cpu:0"]:
        np.testing.assert_allclose(np.array(got), np.array(moved["cpu"][0]), rtol=1e-6, atol=0)
    assert moved["cpu slice calls"] == 0 and moved["hwa_cpu:0 slice calls"] >= 2, moved
    # The CNN's convolutions (their bias adds too), pooling and Linear ran as registered kernels; the MLP's softmax.
    assert {"conv2d", "pool2d", "add", "matmul"} <= set(r["cnn_kernels"]), r["cnn_kernels"]
    assert r["cnn_kernels"]["conv2d"] == 2 and r["cnn_kernels"]["pool2d"] == 1
    assert {"matmul", "add", "softmax"} <= set(r["mlp_kernels"]), r["mlp_kernels"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(PADDLE_NAME))
def test_four_threads_for_twenty_seconds(installed, kind, tmp_path):
    root, site, libraries, shims = installed
    if kind not in libraries:
        pytest.skip(f"{kind} is not usable here")
    # This type's files alone: paddle.device.empty_cache() reaches one custom type only, and THREADS compares the
    # library's bytes in use before and after it.
    for file in (shims[kind]["file"], (shims[kind].get("kernels") or {}).get("file")):
        if file:
            shutil.copy(root / file, tmp_path / file)
    code = THREADS.replace('"cdemo"', repr(PADDLE_NAME[kind])).replace("cdemo:0", f"{PADDLE_NAME[kind]}:0")
    proc = _child(code, tmp_path, site, timeout=110, env={"THREAD_SECONDS": "20", "CDEMO_LIBRARY": libraries[kind]})
    r = _result(proc)
    assert r["errors"] == [], r["errors"]
    assert all(c > 0 for c in r["counts"]), r["counts"]
    assert r["after"] == r["base"], f"{kind}'s library holds {r['after'] - r['base']} more bytes than before"
