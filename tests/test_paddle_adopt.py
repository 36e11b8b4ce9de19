"""The Python-kernel path on devices whose memory the host cannot address (Runtime.adopt): the OpenCL plugin's
kernels on its native library's shared virtual memory, the CUDA plugin's on cuda_device.c's memory (on a GPU).

The first tests need no Paddle: a child process initializes the plugin's native library as a host does, allocates
through it, and calls hwadapter_paddle.pykernels.run as the shim would, with numpy as the oracle. The slow tests
install one bridge alone (opencl; cuda on a GPU where Paddle is installed) and run an MLP, a CNN, every registered
phi kernel's cases and 4 threads in Paddle on its device, against Paddle's CPU.
Every child has a time limit: a crash or hang fails a test instead of killing pytest.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from children import ERROR_OF, LIVE_OF, result_of

CHILD_TIMEOUT = 180

# A host of the plugin's native library (hwadapter's NativeRuntime, as Paddle's shim would use it) and the shim's
# call: pykernels.run over memoryviews of the library's memory.
PRELUDE = r"""
import ctypes, json, numpy as np
from hwadapter.plugin import HwAdapterError
from hwadapter_paddle import pykernels
from hwadapter_paddle.optable import DTYPE_CODES
out = {}

def host(device_type):
    from hwadapter import host as api
    return api.native_runtime(api.plugin_record(device_type).plugin.native_library())

def view(address, nbytes):
    return memoryview((ctypes.c_char * nbytes).from_address(address)).cast("B")

class Slab:
    # one allocation of the library, handed out at offsets (Paddle sub-allocates so too)
    def __init__(self, rt, nbytes=1 << 22):
        self.rt, self.base, self.next = rt, rt.allocate(nbytes), 0
    def put(self, array, at=None):
        array = np.ascontiguousarray(array)
        address = self.take(array.nbytes, at)
        self.rt.copy_h2d(address, 0, array)
        return (view(address, array.nbytes), array.shape, tuple(s // array.itemsize for s in array.strides),
                DTYPE_CODES[array.dtype.name])
    def take(self, nbytes, at=None):
        if at is None:
            at, self.next = self.next, self.next + -(-max(nbytes, 1) // 256) * 256
        return self.base + at
    def get(self, t):
        got = np.empty(t[1], np.dtype({v: k for k, v in DTYPE_CODES.items()}[t[3]]))
        self.rt.copy_d2h(got, np.frombuffer(t[0], np.uint8).ctypes.data, 0)
        return got
""" + ERROR_OF

CASES = r"""
def cases(device_type):
    rt = host(device_type)
    slab = Slab(rt)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 32)).astype("float32")
    b = rng.standard_normal((32,)).astype("float32")
    w = rng.standard_normal((32, 16)).astype("float32")
    i = rng.integers(-100, 100, (5, 7)).astype("int64")
    def call(op, arrays, shape, dtype, attrs=None, at=None):
        ins = [slab.put(x) for x in arrays]
        o = np.zeros(shape, dtype)
        res = slab.put(o, at)
        pykernels.run(device_type, op, ins, res, attrs or {})
        return slab.get(res)
    out["add"] = np.array_equal(call("add", [a, b], a.shape, "float32"), a + b)
    out["matmul"] = float(np.abs(call("matmul", [a, w], (64, 16), "float32") - a @ w).max())
    out["sum"] = float(np.abs(call("sum", [a], (32,), "float32", {"axis": (0,), "keepdim": 0}) - a.sum(0)).max())
    out["int mul"] = np.array_equal(call("mul", [i, i], i.shape, "int64"), i * i)
    out["less"] = np.array_equal(call("less", [a, b], a.shape, "bool"), a < b)
    out["where"] = np.array_equal(call("where", [a > 0, a, -a], a.shape, "float32"), np.abs(a))
    # data movement: several inputs (concat), several outputs (split), attributes (pad's flat, as the shim passes)
    out["concat"] = np.array_equal(call("concat", [a, a[:, :5], a[:, :1]], (64, 38), "float32", {"axis": 1}),
                                   np.concatenate([a, a[:, :5], a[:, :1]], 1))
    parts = [slab.put(np.zeros((n, 32), "float32")) for n in (20, 1, 43)]
    pykernels.run(device_type, "split", [slab.put(a)], parts, {"sections": (20, 1, 43), "axis": 0})
    out["split"] = all(np.array_equal(slab.get(t), want) for t, want in zip(parts, np.split(a, [20, 21])))
    out["pad"] = np.array_equal(call("pad", [i], (6, 10), "int64", {"pads": (1, 0, 2, 1), "value": -3}),
                                np.pad(i, ((1, 0), (2, 1)), constant_values=-3))
    out["expand"] = np.array_equal(call("expand", [b], (3, 32), "float32", {"shape": (3, 32)}),
                                   np.broadcast_to(b, (3, 32)))
    # an output 64 bytes into a 256-byte slot: not at an aligned offset of the allocation
    spot = slab.take(512) - slab.base + 64
    out["unaligned"] = call("add", [b, b], b.shape, "float32", at=spot)
    out["unaligned ok"] = np.array_equal(out.pop("unaligned"), b + b)
    strided = slab.put(a)
    strided = (strided[0], (32, 64), (1, 32), strided[3])  # a.T as Paddle describes a transposed view
    out["strided"] = error_of(pykernels.run, device_type, "abs", [strided], slab.put(np.zeros((32, 64), "float32")), {})
    outside = np.zeros(16, "float32")  # host memory, not the library's
    out["outside"] = error_of(pykernels.run, device_type, "abs", [(view(outside.ctypes.data, 64), (16,), (1,),
                              DTYPE_CODES["float32"])], slab.put(outside), {})
"""


def _child(code: str, cases: bool = False) -> dict:
    """PRELUDE (+ CASES) + code in a child Python with a time limit; the dict it printed as RESULT=."""
    code = PRELUDE + (CASES if cases else "") + textwrap.dedent(code) + '\nprint("RESULT=" + json.dumps(out))\n'
    return result_of(code, CHILD_TIMEOUT)


def _bridgeable(device_type: str) -> None:
    """Skip unless the plugin is installed, has a device here and its native library can be had."""
    bridge = pytest.importorskip("hwadapter_paddle", reason="hwadapter-paddle is needed (make test installs it)")
    (c,) = bridge.candidates([device_type])
    if not c.bridgeable:
        pytest.skip(f"the {device_type} plugin cannot be bridged here: {c.reason}")
    from hwadapter import host
    try:
        count = host.plugin_record(device_type).plugin.device_count()
    except Exception as err:  # no driver, no cupy: what the plugin says
        pytest.skip(f"the {device_type} plugin cannot count its devices here: {err}")
    if count == 0:
        pytest.skip(f"no {device_type} device here")


def _check(r: dict, outside: str) -> None:
    """The CASES results right; memory the library did not allocate refused as the runtime says (`outside`)."""
    assert r["add"] and r["int mul"] and r["less"] and r["where"] and r["unaligned ok"], r
    assert r["concat"] and r["split"] and r["pad"] and r["expand"], r
    assert r["matmul"] < 1e-4 and r["sum"] < 1e-4, r
    assert r["strided"] and "strided tensor" in r["strided"][1] and "contiguous" in r["strided"][1], r
    assert "InvalidArgumentError" in r["outside"][1] and outside in r["outside"][1], r


def test_opencl_kernels_run_on_the_native_librarys_memory():
    """The OpenCL runtime opened after a host initialized its library shares the library's context: its kernels
    and kernel-primitive programs run on the host's shared virtual memory, at aligned and unaligned offsets."""
    _bridgeable("opencl")
    r = _child(cases=True, code="""
    cases("opencl")
    from hwadapter import host as api
    out["shared"] = api.device("opencl:0").runtime.shared is not None
    """)
    assert r["shared"], r
    _check(r, "is in no live allocation")


def test_a_runtime_opened_before_the_host_says_so():
    """hwadapter's opencl:0 opened before any host loaded the library has a context of its own: the host's memory
    is refused with the reason and the fix, never used from the wrong context."""
    _bridgeable("opencl")
    r = _child("""
    from hwadapter import host as api
    api.device("opencl:0").runtime  # opened first: its own context
    slab = Slab(host("opencl"))
    x = slab.put(np.ones(8, "float32"))
    out["error"] = error_of(pykernels.run, "opencl", "abs", [x], slab.put(np.zeros(8, "float32")), {})
    """)
    name, text = r["error"]
    assert "DeviceUnavailableError" in text and "its own OpenCL context" in text, r
    assert "Fix: load the host first" in text, r


@pytest.mark.gpu
def test_cuda_kernels_run_on_the_native_librarys_memory():
    """On a GPU: cuda_device.c's memory (the device's primary context) serves the CUDA plugin's kernels as it is."""
    _bridgeable("cuda")
    r = _child(cases=True, code="""
    cases("cuda")
    """)
    _check(r, "is not memory of this GPU")


@pytest.fixture(scope="module", params=["opencl", pytest.param("cuda", marks=pytest.mark.gpu)])
def bridged(request, tmp_path_factory):
    """`hwadapter paddle install <type>` alone into a folder of its own (the runtime shim and the Python-kernel
    library): (folder, hwadapter type, Paddle's name for it)."""
    kind = request.param
    _bridgeable(kind)
    pytest.importorskip("paddle", reason="paddlepaddle is needed (make test installs it)")
    from hwadapter_paddle.bridge import paddle_type
    root = tmp_path_factory.mktemp(f"{kind}-root")
    proc = subprocess.run([sys.executable, "-m", "hwadapter.cli", "paddle", "install", kind, "--dir", str(root)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "the plugin's Python kernels as add" in proc.stdout, proc.stdout + proc.stderr
    return root, kind, paddle_type(kind)


def _paddle_child(bridged, code: str) -> dict:
    """code in a child Python that loads Paddle with the bridge of `bridged` (CALLS first: `calls`, `registered`,
    DEVICE); its RESULT=."""
    root, kind, name = bridged
    env = {**os.environ, "CUSTOM_DEVICE_ROOT": str(root), "HWA_TYPE": kind, "PADDLE_DEVICE": f"{name}:0"}
    return result_of(CALLS + code, CHILD_TIMEOUT * 2, env=env)


CALLS = r"""
import ctypes, json, os, numpy as np, paddle
KIND, DEVICE = os.environ["HWA_TYPE"], os.environ["PADDLE_DEVICE"]
_lib = ctypes.CDLL(os.path.join(os.environ["CUSTOM_DEVICE_ROOT"], f"libhwadapter_paddle_{KIND}.pykernels"))
_lib.hwadapter_paddle_kernel_calls.restype = ctypes.c_longlong
calls = lambda n: _lib.hwadapter_paddle_kernel_calls(n.encode())
manifest = json.load(open(os.path.join(os.environ["CUSTOM_DEVICE_ROOT"], "hwadapter_paddle.json")))
registered = {r["phi"]: r["dtypes"] for r in manifest["shims"][KIND]["kernels"]["python"]["registered"]}
"""


@pytest.mark.slow  # the bridge installed (a kernels library compiled, about 20 s) and a Paddle child
def test_the_plugins_kernels_serve_paddle(bridged):
    """An MLP and a CNN on the device equal Paddle's CPU (to rounding), eager and under to_static, and the phi
    kernels' counters show that the plugin's kernels ran."""
    device = f"Place({bridged[2]}:0)"
    r = _paddle_child(bridged, r"""
rng = np.random.default_rng(0)
def mlp():
    paddle.seed(7)
    return paddle.nn.Sequential(paddle.nn.Linear(16, 32), paddle.nn.ReLU(), paddle.nn.Linear(32, 4),
                                paddle.nn.Softmax())
def cnn():
    paddle.seed(7)
    return paddle.nn.Sequential(paddle.nn.Conv2D(3, 8, 3, padding=1), paddle.nn.ReLU(), paddle.nn.MaxPool2D(2),
                                paddle.nn.Conv2D(8, 4, 3), paddle.nn.AdaptiveAvgPool2D(1), paddle.nn.Flatten(),
                                paddle.nn.Linear(4, 3))
out = {"types": paddle.device.get_all_custom_device_type()}
for name, make, x in [("mlp", mlp, rng.standard_normal((8, 16)).astype("float32")),
                      ("cnn", cnn, rng.standard_normal((2, 3, 16, 16)).astype("float32"))]:
    paddle.set_device("cpu")
    want = make()(paddle.to_tensor(x)).numpy()
    paddle.set_device(DEVICE)
    net = make()
    before = {k: calls(k) for k in ("matmul", "add", "conv2d", "pool2d", "softmax")}
    y = net(paddle.to_tensor(x))
    static = paddle.jit.to_static(net, full_graph=True)
    out[name] = {"place": str(y.place), "eager": float(np.abs(y.numpy() - want).max()),
                 "static": float(np.abs(static(paddle.to_tensor(x)).numpy() - want).max()),
                 "scale": float(np.abs(want).max()),
                 "calls": {k: calls(k) - v for k, v in before.items()}}
print("RESULT=" + json.dumps(out))
""")
    assert bridged[2] in r["types"], r
    for name, kernels in (("mlp", ("matmul", "add", "softmax")), ("cnn", ("conv2d", "pool2d", "matmul", "add"))):
        got = r[name]
        assert got["place"] == device, r
        assert got["eager"] <= 1e-5 * got["scale"] + 1e-6 and got["static"] <= 1e-5 * got["scale"] + 1e-6, r
        assert all(got["calls"][k] >= 1 for k in kernels), r
    assert r["mlp"]["calls"]["conv2d"] == 0, r  # the counters count only what ran


#: phi kernels that sum many terms: their float results may differ by the order of the sum, so the tolerance
#: scales with the largest result (a small result left by cancellation carries the big terms' rounding)
SUMS = ("conv2d", "matmul", "sum", "mean", "prod", "cumsum", "pool2d")


def assert_device_equal(phi: str, got: np.ndarray, want: np.ndarray, what: str) -> None:
    """A device kernel's result is Paddle's CPU one: integers and booleans exactly; floats with nan, the infinities
    and the sign of zero in the same places and finite values to the device math library's rounding (OpenCL allows
    its built-ins a few ulp: sin 4, pow 16). Two allowances, both documented in docs/paddle-bridge.md: the sign of
    max(+0, -0) and min(+0, -0), which IEEE 754 leaves to the implementation (OpenCL's fmax gives +0, Paddle's CPU
    -0), and softmax's 1.7e-28 (Paddle's CPU clips its exponent at -64, as for every device)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind != "f":
        assert np.array_equal(got, want), (what, got, want)
        return
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.array_equal(np.isinf(got), np.isinf(want)), \
        (what, got, want)
    finite = np.isfinite(want)
    assert np.array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)]), (what, got, want)
    if phi not in ("max", "min"):
        assert np.array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0])), (what, got, want)
    rtol = 4e-6 if got.dtype == np.float32 else 1e-13
    atol = 16 * np.finfo(got.dtype).tiny
    if phi in SUMS and finite.any():
        atol = rtol * float(np.abs(want[finite]).max())
    if phi == "softmax":
        atol = 1.7e-28
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=atol, err_msg=what)


@pytest.mark.slow  # a Paddle child running every registered phi kernel's cases twice (about 30 s)
def test_every_phi_kernel_registered_means_what_paddles_cpu_does(bridged):
    """Each phi kernel the bridge registers for the plugin's Python kernels, for each dtype it registers, on special
    values (nan, the infinities, signed zeros, the dtype's range) and the attribute forms' cases: the same as Paddle's
    CPU (as assert_device_equal says), run by the plugin's kernel (its counter moved)."""
    from test_paddle_kernels import DEVICE_FORMS, DEVICE_SIMPLE, FORM_CASES
    r = _paddle_child(bridged, FORM_CASES + DEVICE_FORMS + DEVICE_SIMPLE + r"""
from hwadapter_paddle import optable
simple = [optable.Mapping(m.op, m.phi, m.form, tuple(registered[m.phi]))
          for m in optable.TABLE if m.phi in registered and m.form not in optable.ATTRIBUTE_FORMS
          and m.form not in ("matmul",)]
out = {"simple": device_simple(DEVICE, simple), "registered": registered,
       "forms": device_forms(DEVICE, [p for p in registered if p in {m.phi for m in optable.TABLE
                                          if m.form in optable.ATTRIBUTE_FORMS}], lambda phi: registered[phi])}
print("RESULT=" + json.dumps(out))
""")
    assert len(r["registered"]) >= 40, r["registered"]
    checked, wrong = 0, []
    for key, got in {**r["simple"], **r["forms"]}.items():
        cpu, dev = got["cpu"], got[f"{bridged[2]}:0"]
        assert dev["place"] == f"Place({bridged[2]}:0)" and dev["calls"] >= 1, (key, got)
        try:
            assert_device_equal(key.split()[0], np.array(dev["v"], dev["dtype"]), np.array(cpu["v"], cpu["dtype"]),
                                key)
        except AssertionError as err:
            wrong.append(" ".join(str(err).split())[:400])
        checked += 1
    assert not wrong, "\n".join(wrong)
    assert checked >= 100, checked


@pytest.mark.slow  # 4 threads for 2 x 5 s in a Paddle child
def test_four_threads_on_the_plugins_kernels_neither_deadlock_nor_leak(bridged):
    """test_paddle_bridge's thread work (matmul, add of a scalar, relu through the fallback, multiply, sum) on the
    device with the plugin's kernels registered, 4 threads at once, two rounds: right every time, and the second
    round leaves the library holding no more bytes than the first. (On an H100 Paddle kept 6 MiB after the first
    round with the kernels, the same after every later one, and none with --runtime-only: a cache, not a leak.)"""
    r = _paddle_child(bridged, LIVE_OF + r"""
import threading, time
live = live_of(manifest["shims"][KIND]["library"])
paddle.set_device(DEVICE)
paddle.device.empty_cache()
out = {"base": live(), "after": [], "counts": [], "errors": []}
before = {k: calls(k) for k in ("matmul", "multiply", "sum")}  # `+ 1.0` is Paddle's scale, not add
for _ in range(2):
    stop, counts = time.time() + 5, [0] * 4
    def work(i):
        try:
            rng = np.random.default_rng(i)
            w = rng.standard_normal((32, 16)).astype("float32")
            wt = paddle.to_tensor(w)
            while time.time() < stop:
                a = rng.standard_normal((64, 32)).astype("float32")
                y = paddle.nn.functional.relu(paddle.matmul(paddle.to_tensor(a), wt) + 1.0)
                got = (y * y).sum(axis=1).numpy()
                if not np.allclose(got, (np.maximum(a @ w + 1.0, 0) ** 2).sum(axis=1), rtol=1e-4, atol=1e-3):
                    raise AssertionError(f"thread {i}: wrong result")
                counts[i] += 1
        except Exception as err:
            out["errors"].append(f"{type(err).__name__}: {err}"[:300])
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    paddle.device.synchronize()
    paddle.device.empty_cache()
    out["after"].append(live())
    out["counts"].append(counts)
out["calls"] = {k: calls(k) - v for k, v in before.items()}
print("RESULT=" + json.dumps(out))
""")
    assert r["errors"] == [], r["errors"]
    assert all(c > 0 for counts in r["counts"] for c in counts), r["counts"]
    assert all(n > 0 for n in r["calls"].values()), r["calls"]
    first, second = r["after"]
    assert second <= first, f"the second round left {second - first} more bytes in the library than the first"
    assert first - r["base"] <= 8 << 20, f"{first - r['base']} bytes kept after the first round"
