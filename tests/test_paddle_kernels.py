"""hwadapter-paddle kernels: the cdemo library's C kernels as Paddle phi kernels on cdemo:0, against Paddle's CPU.

`hwadapter paddle install cdemo --dir D` builds the runtime shim and, beside it, libhwadapter_paddle_cdemo.kernels
(linked to libpaddle.so). That the library's kernels really run is read from the kernels library's own per-kernel
call counters (hwadapter_paddle_kernel_calls, through ctypes in the Paddle child: the same loaded library). Every
Paddle interaction is in a child process with a time limit (helpers of test_paddle_bridge.py).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from test_paddle_bridge import _SKIP, _child, _hwadapter, _result, _threads, cdemo_site  # noqa: F401  (a fixture)

pytestmark = pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")

#: Prepended to the children below: the kernels library's call counter for one phi kernel.
COUNTERS = r"""
_kernels = ctypes.CDLL(os.path.join(os.environ["CUSTOM_DEVICE_ROOT"], "libhwadapter_paddle_cdemo.kernels"))
_kernels.hwadapter_paddle_kernel_calls.restype = ctypes.c_longlong
def calls(name):
    return _kernels.hwadapter_paddle_kernel_calls(name.encode())
"""


def _kchild(code: str, root, site):
    """_child with COUNTERS first."""
    return _child(COUNTERS + textwrap.dedent(code), root, site)


@pytest.fixture(scope="module")
def kernels_root(cdemo_site, tmp_path_factory):
    """`hwadapter paddle install cdemo --dir ROOT`: runtime shim and kernels library, checked by install's child."""
    root = tmp_path_factory.mktemp("paddle-kernels-root")
    proc = _hwadapter("paddle", "install", "cdemo", "--dir", str(root), site=cdemo_site)
    assert proc.returncode == 0, f"install failed:\n{proc.stdout}\n{proc.stderr}"
    assert "phi kernels add (float32, int64), multiply (float32, int64), matmul (float32)" in proc.stdout, proc.stdout
    assert (root / "libhwadapter_paddle_cdemo.kernels").exists()
    return root


def test_registered_kernels_match_paddle_cpu_and_really_run(kernels_root, cdemo_site):
    proc = _kchild("""
        rng = np.random.default_rng(0)
        def pair(device, fn, *arrays):
            paddle.set_device(device)
            return fn(*[paddle.to_tensor(a) for a in arrays])
        def both(fn, *arrays):
            dev = pair("cdemo:0", fn, *arrays)
            cpu = pair("cpu", fn, *arrays)
            return {"dev": dev.numpy().tolist(), "cpu": cpu.numpy().tolist(), "place": str(dev.place),
                    "dtype": str(dev.dtype).replace("paddle.", "")}
        out = {"cases": {}, "before": {k: calls(k) for k in ("add", "multiply", "matmul", "contiguous")}}
        shapes = [((3, 4), (4,)), ((2, 1, 3), (4, 1)), ((5,), ()), ((), ()), ((0, 3), (3,)), ((2, 3), (2, 3))]
        for dtype in ("float32", "int64"):
            for sx, sy in shapes:
                if dtype == "float32":
                    x, y = rng.standard_normal(sx).astype(dtype), rng.standard_normal(sy).astype(dtype)
                else:
                    x, y = rng.integers(-2**62, 2**62, sx), rng.integers(-9, 9, sy)  # int64 products wrap
                for name, fn in (("add", paddle.add), ("multiply", paddle.multiply)):
                    out["cases"][f"{name} {dtype} {sx} {sy}"] = both(fn, x, y)
        special = np.array([np.nan, np.inf, -np.inf, -0.0, 1e38, -1e38, 3e-39, 1.0], "float32")
        out["cases"]["add special"] = both(paddle.add, special, special[::-1].copy())
        out["cases"]["multiply special"] = both(paddle.multiply, special, special[::-1].copy())
        mid = {k: calls(k) for k in ("add", "multiply", "matmul")}
        for sx, sy, tx, ty in [((3, 4), (4, 5), False, False), ((2, 3, 4), (4, 2), False, False),
                               ((4, 3), (4, 5), True, False), ((3, 4), (5, 4), False, True),
                               ((2, 1, 4, 3), (3, 5, 4), True, True), ((4,), (4, 3), True, False),
                               ((3, 4), (4,), False, True), ((4,), (4,), False, False), ((3, 0), (0, 2), False, False)]:
            x, y = rng.standard_normal(sx).astype("float32"), rng.standard_normal(sy).astype("float32")
            out["cases"][f"matmul {sx} {sy} {tx} {ty}"] = both(
                lambda a, b: paddle.matmul(a, b, transpose_x=tx, transpose_y=ty), x, y)
        out["mid"], out["after_mm"] = mid, {k: calls(k) for k in ("add", "multiply", "matmul")}
        # Strided views (stride kernels on, Paddle's default): made contiguous on the device by the kernels library.
        m = rng.standard_normal((3, 4)).astype("float32")
        out["cases"]["x.T @ x"] = both(lambda a: a.T @ a, m)
        out["cases"]["slices"] = both(lambda a: a[:, 1:] * a[:, :3] + a[1:, ::2].sum(), m)
        def setitem(a):
            b = a.clone()
            b[:, 0] = 7.0
            return b
        out["cases"]["setitem"] = both(setitem, m)
        out["contiguous"] = calls("contiguous") - out["before"]["contiguous"]
        # Ops Paddle must fall back for: relu (cdemo has one, but Paddle's relu maps nan to 0: not registered),
        # exp (cdemo has none), an int32 add (cdemo's add is float32 and int64 only).
        before = calls("add")
        out["cases"]["relu (fallback)"] = both(paddle.nn.functional.relu, special)
        out["cases"]["exp (fallback)"] = both(paddle.exp, m)
        out["cases"]["add int32 (fallback)"] = both(paddle.add, np.arange(6, dtype="int32"), np.int32(3) * np.ones(6, "int32"))
        out["fallback_add_calls"] = calls("add") - before
        print("RESULT=" + json.dumps(out))
    """, kernels_root, cdemo_site)
    r = _result(proc)
    assert "hwadapter-paddle:" not in proc.stderr, proc.stderr[-2000:]
    for name, case in r["cases"].items():
        dev, cpu = np.array(case["dev"], dtype=float), np.array(case["cpu"], dtype=float)
        assert case["place"] == "Place(cdemo:0)", name
        assert dev.shape == cpu.shape, name
        if name.startswith(("matmul", "x.T")):  # cdemo sums in double, Paddle's BLAS in float: equal to rounding
            np.testing.assert_allclose(dev, cpu, rtol=2e-6, atol=2e-6, err_msg=name)
        else:  # the same numbers, bit for bit (nan where Paddle has nan; int64 wraps as Paddle's)
            np.testing.assert_array_equal(dev, cpu, err_msg=name)
            assert np.array_equal(np.signbit(dev), np.signbit(cpu)), name
    # Each registered phi kernel ran in the kernels library: 2 dtypes x 6 shape pairs + 1 special case each.
    assert r["mid"]["add"] - r["before"]["add"] == 13 and r["mid"]["multiply"] - r["before"]["multiply"] == 13
    assert r["after_mm"]["matmul"] - r["mid"]["matmul"] == 9  # (3, 0) @ (0, 2) too: zeros from the library
    assert r["contiguous"] >= 2, r  # x.T and the slices went through the device's contiguous
    assert r["fallback_add_calls"] == 0  # int32 add: Paddle's CPU kernel, not the library's
    assert r["cases"]["relu (fallback)"]["dev"][0] == 0.0  # Paddle's relu semantics kept (nan -> 0)


@pytest.fixture(scope="module")
def mlp_and_claims(kernels_root, cdemo_site) -> dict:
    """One child: an MLP on cpu and cdemo:0 (eager and to_static), and Paddle's CPU results for every table entry."""
    proc = _kchild("""
        def build():
            paddle.seed(3)
            return paddle.nn.Sequential(paddle.nn.Linear(16, 32), paddle.nn.ReLU(), paddle.nn.Linear(32, 32),
                                        paddle.nn.Tanh(), paddle.nn.Linear(32, 4))
        x = np.random.default_rng(0).standard_normal((8, 16)).astype("float32")
        out = {}
        for device in ("cpu", "cdemo:0"):
            paddle.set_device(device)
            net = build()
            net.eval()
            before = calls("matmul")
            out[device] = {"eager": net(paddle.to_tensor(x)).numpy().tolist(),
                           "static": paddle.jit.to_static(net, full_graph=True)(paddle.to_tensor(x)).numpy().tolist(),
                           "matmul_calls": calls("matmul") - before}

        from hwadapter_paddle import optable
        api = {"add": paddle.add, "subtract": paddle.subtract, "multiply": paddle.multiply, "divide": paddle.divide,
               "maximum": paddle.maximum, "minimum": paddle.minimum, "elementwise_pow": paddle.pow,
               "equal": paddle.equal, "not_equal": paddle.not_equal, "less_than": paddle.less_than,
               "less_equal": paddle.less_equal, "greater_than": paddle.greater_than,
               "greater_equal": paddle.greater_equal, "abs": paddle.abs, "sign": paddle.sign, "floor": paddle.floor,
               "ceil": paddle.ceil, "reciprocal": paddle.reciprocal, "exp": paddle.exp, "log": paddle.log,
               "sin": paddle.sin, "cos": paddle.cos, "tanh": paddle.tanh, "matmul": paddle.matmul}
        f = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.5, 3.0, -7.0, 1e30, np.inf, -np.inf, np.nan, 100.0, 1e-3, 9.0])
        claims = out["claims"] = {}
        paddle.set_device("cpu")
        for m in optable.TABLE:
            for dtype in m.dtypes:
                info = np.iinfo(dtype) if dtype.startswith(("int", "uint")) else None
                x = f.astype(dtype) if info is None else np.linspace(info.min, info.max, 16).astype(dtype)
                y = np.roll(x, 5)
                if m.form == "matmul":
                    x, y = x.reshape(4, 4), np.where(np.isfinite(y), y, 1).reshape(4, 4)
                args = [x] if m.form == "unary" else [x, y]
                try:
                    got = api[m.phi](*[paddle.to_tensor(a) for a in args]).numpy()
                except Exception as err:  # Paddle's CPU has no kernel for this dtype: nothing to differ from
                    claims[f"{m.op} {dtype}"] = {"none": str(err).splitlines()[0][:120]}
                    continue
                claims[f"{m.op} {dtype}"] = {"got": got.tolist(), "dtype": str(got.dtype), "x": x.tolist(),
                                          "y": y.tolist()}
        print("RESULT=" + json.dumps(out))
    """, kernels_root, cdemo_site)
    return _result(proc)


def test_mlp_with_registered_kernels_equals_paddle_cpu(mlp_and_claims):
    r = mlp_and_claims
    cpu, dev = r["cpu"], r["cdemo:0"]
    np.testing.assert_allclose(np.array(dev["eager"]), np.array(cpu["eager"]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(dev["static"]), np.array(cpu["eager"]), rtol=1e-5, atol=1e-6)
    assert cpu["matmul_calls"] == 0 and dev["matmul_calls"] >= 3, r  # eager: 3 Linear layers on cdemo's matmul


def test_the_table_claims_paddles_cpu_semantics_for_every_mapped_dtype(mlp_and_claims):
    """Each optable entry says Paddle's phi kernel equals hwadapter's op (numpy's) for its dtypes: check it on
    special values against Paddle's own CPU kernels (bit for bit, or to rounding where the entry says so)."""
    from hwadapter_paddle import optable
    r = mlp_and_claims["claims"]
    oracles = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "maximum": np.maximum,
               "minimum": np.minimum, "pow": np.power, "equal": np.equal, "not_equal": np.not_equal, "less": np.less,
               "less_equal": np.less_equal, "greater": np.greater, "greater_equal": np.greater_equal, "abs": np.abs,
               "sign": np.sign, "floor": np.floor, "ceil": np.ceil, "reciprocal": np.reciprocal, "exp": np.exp,
               "log": np.log, "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "matmul": np.matmul}
    checked = 0
    for m in optable.TABLE:
        for dtype in m.dtypes:
            case = r[f"{m.op} {dtype}"]
            if "none" in case:
                continue
            args = [np.array(case["x"], dtype)] + ([np.array(case["y"], dtype)] if "y" in case and m.form != "unary"
                                                  else [])
            with np.errstate(all="ignore"):
                want = oracles[m.op](*args)
            got = np.array(case["got"], dtype=case["dtype"])
            assert got.dtype == want.dtype, (m.op, dtype, got.dtype, want.dtype)
            if m.exact:
                assert np.array_equal(got, want, equal_nan=got.dtype.kind == "f"), (m.op, dtype, got, want)
                if got.dtype.kind == "f":  # -0.0 is not 0.0 (a nan's sign is not meaningful)
                    assert np.array_equal(np.signbit(got) & ~np.isnan(got), np.signbit(want) & ~np.isnan(want)), \
                        (m.op, dtype, got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12, atol=0,
                                           err_msg=f"{m.op} {dtype}")
            checked += 1
    assert checked >= 40, checked


def test_four_threads_on_the_registered_kernels_neither_deadlock_nor_leak(kernels_root, cdemo_site):
    _threads(kernels_root, cdemo_site, 3.0)  # matmul and add on cdemo's C kernels, relu through the fallback


def test_status_lists_the_kernels_and_what_falls_back(kernels_root, cdemo_site):
    env = {"CUSTOM_DEVICE_ROOT": str(kernels_root), "COLUMNS": "200"}
    data = json.loads(_hwadapter("paddle", "status", "--json", "--dir", str(kernels_root), site=cdemo_site,
                                 env=env).stdout)
    (shim,) = data["shims"]
    k = shim["kernels"]
    assert k["file"] == "libhwadapter_paddle_cdemo.kernels" and k["error"] is None
    assert {(e["phi"], e["op"], tuple(e["dtypes"])) for e in k["registered"]} == {
        ("add", "add", ("float32", "int64")), ("multiply", "mul", ("float32", "int64")),
        ("matmul", "matmul", ("float32",)), ("contiguous", None, ("all",))}
    assert [(e["op"], e["dtypes"]) for e in k["left"]] == [("relu", ["float32"])]
    assert "nan" in k["left"][0]["why"] and "phi kernels add" in shim["covers"]
    text = _hwadapter("paddle", "status", "--dir", str(kernels_root), site=cdemo_site, env=env).stdout
    assert "cdemo: Paddle kernels" in text and "multiply" in text and "left to Paddle's CPU" in text, text


#: In a child with the cdemo site: install with a kernels source that does not compile, then with a kernels
#: library that cannot be loaded (an undefined symbol, as a library built with the other C++ ABI, or for another
#: Paddle, has); each time the runtime shim is installed alone. Then that broken library put beside the shim anyway
#: (as a stale one after a Paddle upgrade would be): Paddle still imports and registers cdemo, and the shim says why.
BROKEN = r"""
import json, subprocess, sys
from pathlib import Path
import hwadapter_paddle.kernels as k
from hwadapter_paddle import bridge
root, tmp = Path(sys.argv[1]), Path(sys.argv[2])
out = {}
(tmp / "bad.cc").write_text("this is not C++\n")
k.KERNELS_SOURCE = tmp / "bad.cc"
report = bridge.install(["cdemo"], root / "a")
out["compile"] = [(o.ok, o.message) for o in report.outcomes]
out["compile_files"] = sorted(p.name for p in (root / "a").iterdir())
# a data symbol: resolved when the library is loaded, even lazily (a function would be resolved at its first call)
(tmp / "undefined.c").write_text("extern int hwa_no_such_symbol; int f(void) { return hwa_no_such_symbol; }\n")
def broken(device_type, library, out_path, *args, **kw):
    subprocess.run(["gcc", "-shared", "-fPIC", str(tmp / "undefined.c"), "-o", str(out_path)], check=True)
k.compile_kernels = broken
report = bridge.install(["cdemo"], root / "b")
out["import"] = [(o.ok, o.message) for o in report.outcomes]
out["import_files"] = sorted(p.name for p in (root / "b").iterdir())
out["manifest"] = json.loads((root / "b" / "hwadapter_paddle.json").read_text())["shims"]["cdemo"]["kernels"]
broken(None, None, root / "b" / "libhwadapter_paddle_cdemo.kernels")
out["types"], out["lines"], _ = bridge.registered_types(root / "b")
print("RESULT=" + json.dumps(out))
"""


def test_a_broken_kernels_library_leaves_the_runtime_installed_and_paddle_importable(cdemo_site, tmp_path):
    import os
    env = {k: v for k, v in os.environ.items() if k != "CUSTOM_DEVICE_ROOT"}
    env["PYTHONPATH"] = str(cdemo_site)
    proc = subprocess.run([sys.executable, "-c", BROKEN, str(tmp_path), str(tmp_path)], capture_output=True,
                          text=True, timeout=300, env=env)
    r = _result(proc)
    (ok, message), = r["compile"]
    assert ok and "no kernels library (runtime only" in message and "compiling the kernels library failed" in message
    assert r["compile_files"] == ["hwadapter_paddle.json", "libhwadapter_paddle_cdemo.so"]
    (ok, message), = r["import"]
    assert ok and "no kernels library (runtime only" in message and "kernels not loaded" in message, message
    assert "hwa_no_such_symbol" in message
    assert r["import_files"] == ["hwadapter_paddle.json", "libhwadapter_paddle_cdemo.so"]
    assert r["manifest"]["file"] is None and "hwa_no_such_symbol" in r["manifest"]["error"]
    assert r["types"] == ["cdemo"]
    (line,) = r["lines"]
    assert line.startswith("hwadapter-paddle: cdemo: kernels not loaded:") and "hwa_no_such_symbol" in line


@pytest.mark.slow  # two kernels libraries compiled (about 20 s) and a child
def test_the_cpu_plugins_python_kernels_run_as_paddle_kernels(cdemo_site, tmp_path):
    """The cpu plugin: its runtime bridged through its native library, its Python kernels registered as phi kernels
    (outputs allocated by Paddle, then the GIL taken): the same results as Paddle's CPU, in eager mode, under
    to_static and from 4 threads, with the .pykernels library's counters moving."""
    import hwadapter_paddle as bridge
    from hwadapter_paddle.bridge import paddle_type
    (cpu,) = bridge.candidates(["cpu"])
    if not cpu.bridgeable:
        pytest.skip(f"the cpu plugin is not bridgeable here: {cpu.reason}")
    root = tmp_path / "root"
    proc = _hwadapter("paddle", "install", "cpu", "--dir", str(root), site=cdemo_site)
    assert proc.returncode == 0 and "the plugin's Python kernels as add" in proc.stdout, proc.stdout + proc.stderr
    proc = _child("""
        lib = ctypes.CDLL(os.path.join(os.environ["CUSTOM_DEVICE_ROOT"], "libhwadapter_paddle_cpu.pykernels"))
        lib.hwadapter_paddle_kernel_calls.restype = ctypes.c_longlong
        calls = lambda name: lib.hwadapter_paddle_kernel_calls(name.encode())
        device = os.environ["PADDLE_TYPE"] + ":0"
        rng = np.random.default_rng(0)
        cases = {"add int8": (paddle.add, rng.integers(-128, 127, (3, 4)).astype("int8"),
                              rng.integers(-128, 127, (4,)).astype("int8")),
                 "divide float64": (paddle.divide, rng.standard_normal((2, 3)), rng.standard_normal((2, 1))),
                 "less_than float32": (paddle.less_than, rng.standard_normal((5,)).astype("float32"),
                                       np.float32(0.1) * np.ones((2, 5), "float32")),
                 "matmul float32": (lambda a, b: paddle.matmul(a, b, transpose_y=True),
                                    rng.standard_normal((2, 3, 4)).astype("float32"),
                                    rng.standard_normal((5, 4)).astype("float32")),
                 "x.T @ x": (lambda a: a.T @ a, rng.standard_normal((3, 4)).astype("float32"))}
        out = {"before": {k: calls(k) for k in ("add", "divide", "less_than", "matmul")}}
        for name, (fn, *arrays) in cases.items():
            got = []
            for place in ("cpu", device):
                paddle.set_device(place)
                got.append(fn(*[paddle.to_tensor(a) for a in arrays]).numpy().tolist())
            out[name] = got
        out["after"] = {k: calls(k) for k in ("add", "divide", "less_than", "matmul")}
        paddle.set_device(device)
        paddle.seed(3)
        net = paddle.nn.Sequential(paddle.nn.Linear(16, 32), paddle.nn.ReLU(), paddle.nn.Linear(32, 4))
        net.eval()
        x = paddle.to_tensor(rng.standard_normal((8, 16)).astype("float32"))
        out["mlp"] = [net(x).numpy().tolist(), paddle.jit.to_static(net, full_graph=True)(x).numpy().tolist()]
        errors = []
        def work(i):
            try:
                a = paddle.to_tensor(np.full(64, float(i), "float32"))
                for _ in range(100):
                    if float(paddle.add(a, a).sum()) != 128.0 * i:
                        raise AssertionError("wrong sum")
            except Exception as err:
                errors.append(f"{type(err).__name__}: {err}")
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        out["errors"] = errors
        print("RESULT=" + json.dumps(out))
    """, root, cdemo_site, env={"PADDLE_TYPE": paddle_type("cpu")})
    r = _result(proc)
    for name in ("add int8", "divide float64", "less_than float32"):
        assert r[name][0] == r[name][1], name
    for name in ("matmul float32", "x.T @ x"):
        np.testing.assert_allclose(np.array(r[name][1]), np.array(r[name][0]), rtol=1e-5, atol=1e-6, err_msg=name)
    assert all(r["after"][k] - r["before"][k] >= 1 for k in r["before"]), r
    np.testing.assert_allclose(np.array(r["mlp"][1]), np.array(r["mlp"][0]), rtol=1e-5, atol=1e-6)
    assert r["errors"] == []
