"""The compiler level on the CPU: kernel-primitive ops compiled by the C backend, cached on disk, dispatched."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import kp
from hwadapter.plugin import CompileError
from hwadapter.runtime.device import get

pytestmark = pytest.mark.skipif(get("cpu").codegen is None, reason="no C compiler: CPU codegen unavailable")

_erf = np.vectorize(math.erf)


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(tmp_path / "cache"))


@kp.kernel
def bias_gelu(x: kp.In["T"], b: kp.In["T"], out: kp.Out["T"]):
    """gelu(x + b), b broadcast along x."""
    a = kp.read(x)
    c = kp.read_broadcast(b, like=x)
    kp.write(out, kp.unary(kp.ops.gelu, kp.binary(kp.ops.add, a, c)))


def _bias_gelu_oracle(x, b):
    v = (x + b).astype(np.float64)
    return 0.5 * v * (1 + _erf(v / np.sqrt(2)))


def test_registered_custom_op_runs_compiled_on_the_cpu():
    op = kp.register_op("bias_gelu", bias_gelu)
    x, b = np.random.default_rng(0).standard_normal((2, 5, 7)).astype(np.float32), np.linspace(-1, 1, 7, dtype=np.float32)
    with hw.profiler.profile() as prof:
        y = op(hw.to_tensor(x), hw.to_tensor(b))
    np.testing.assert_allclose(y.numpy(), _bias_gelu_oracle(x, b), rtol=2e-6, atol=2e-6)
    assert [r["route"] for r in prof.table()] == ["codegen"]


def test_custom_op_on_a_device_without_codegen_falls_back_to_the_cpu_program(testdev):
    op = kp.register_op("bias_gelu", bias_gelu)
    x, b = np.ones((3, 4), np.float32), np.arange(4, dtype=np.float32)
    y = op(hw.to_tensor(x, device=testdev), hw.to_tensor(b, device=testdev))
    assert y.device is testdev
    np.testing.assert_allclose(y.numpy(), _bias_gelu_oracle(x, b), rtol=2e-6)
    assert hw.profiler.fallback_count("bias_gelu", testdev) == 1


def test_custom_op_checks_its_arity():
    op = kp.register_op("bias_gelu", bias_gelu)
    with pytest.raises(hw.InvalidArgumentError, match="takes 2 tensors"):
        op(hw.ones([2]))


CASES = [
    ("exp", lambda x: np.exp(x), lambda t: hw.exp(t)),
    ("where", lambda x: np.where(x > 0, x, -x), lambda t: hw.where(t > 0, t, -t)),
    ("broadcast add", lambda x: x + x[0], lambda t: t + t[0]),
    ("sum axis 1", lambda x: x.sum(axis=1), lambda t: hw.sum(t, axis=1)),
    ("max keepdim", lambda x: x.max(axis=(0, 2), keepdims=True), lambda t: hw.max(t, axis=(0, 2), keepdim=True)),
    ("mean", lambda x: x.mean(), lambda t: hw.mean(t)),
    ("softmax", lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True), lambda t: hw.nn.functional.softmax(t)),
    ("log_softmax", lambda x: x - np.log(np.exp(x).sum(1, keepdims=True)),
     lambda t: hw.nn.functional.log_softmax(t, axis=1)),
    ("layer_norm", lambda x: (x - x.mean((1, 2), keepdims=True)) / np.sqrt(x.var((1, 2), keepdims=True) + 1e-5),
     lambda t: hw.nn.functional.layer_norm(t, t.shape[1:])),
    ("batch_norm", lambda x: (x - 0.5) / np.sqrt(2 + 1e-5),
     lambda t: hw.nn.functional.batch_norm(t, hw.full([3], 0.5), hw.full([3], 2.0))),
    ("clip", lambda x: np.clip(x, -0.5, 0.5), lambda t: hw.clip(t, -0.5, 0.5)),
    ("cast", lambda x: x.astype(np.int32), lambda t: t.astype("int32")),
]


@pytest.fixture
def codegen_mode(monkeypatch, reset_plugins):
    """The CPU plugin without numpy kernels for primitive ops: they run as compiled programs."""
    monkeypatch.setenv("HWADAPTER_CPU_KERNELS", "codegen")
    reset_plugins()


@pytest.mark.parametrize("name,oracle,run", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_op_set_through_primitives_on_the_cpu(codegen_mode, name, oracle, run, dtype):
    x = np.random.default_rng(1).standard_normal((4, 3, 5)).astype(dtype)
    with hw.profiler.profile() as prof:
        got = run(hw.to_tensor(x, device="cpu")).numpy()
    np.testing.assert_allclose(got, oracle(x), rtol=1e-5, atol=1e-6)
    routes = {r["op"]: r["route"] for r in prof.table()}
    compiled = {op for op, route in routes.items() if route == "codegen"}
    assert compiled, f"nothing ran compiled: {routes}"


def test_integer_and_float16_through_primitives(codegen_mode):
    a = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal((hw.to_tensor(a) % 4).numpy(), a % 4)  # floor mod, as numpy
    np.testing.assert_array_equal(hw.sum(hw.to_tensor(a), axis=0).numpy(), a.sum(axis=0))
    h = np.linspace(-3, 3, 12, dtype=np.float16).reshape(3, 4)
    np.testing.assert_allclose(hw.tanh(hw.to_tensor(h)).numpy(), np.tanh(h.astype(np.float32)), rtol=2e-3, atol=1e-3)


def test_compile_error_carries_numbered_source_and_log():
    backend = hw.runtime.device.get("cpu").codegen
    with pytest.raises(CompileError) as info:
        backend.compile("void broken(void) { return 1 +; }\n", "broken")
    err = info.value
    assert "broken" in err.source and "error" in err.log.lower()
    assert "   1 | void broken" in str(err)


def test_dump_kernels_writes_every_generated_source(tmp_path, monkeypatch):
    monkeypatch.setenv("HWADAPTER_DUMP_KERNELS", str(tmp_path / "dump"))
    src = bias_gelu.source("opencl")
    files = list((tmp_path / "dump").iterdir())
    assert files and any(f.read_text() == src for f in files)


_CHILD = textwrap.dedent("""
    import numpy as np, hwadapter as hw
    from hwadapter.runtime import cache
    from hwadapter.runtime.device import get
    k = get("cpu").primitive("tanh")
    x = np.linspace(-2, 2, 9)
    np.testing.assert_allclose(k(x), np.tanh(x))
    print(cache.default().hits, cache.default().misses)
""")


def test_second_process_finds_the_compiled_kernel_in_the_cache(tmp_path):
    env = dict(os.environ, HWADAPTER_CACHE_DIR=str(tmp_path / "shared-cache"))
    runs = [subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    assert runs[0].stdout.split() == ["0", "1"]  # first process: a miss, compiled and stored
    assert runs[1].stdout.split() == ["1", "0"]  # second: a hit, nothing compiled


def test_without_a_c_compiler_the_backend_says_why_and_numpy_kernels_serve(tmp_path):
    child = textwrap.dedent("""
        import numpy as np, hwadapter as hw
        from hwadapter.runtime.device import get
        x = hw.to_tensor(np.array([1.0, -2.0]))
        print(hw.exp(x).numpy().round(3).tolist())
        print(get("cpu").codegen, get("cpu").codegen_unavailable)
    """)
    env = dict(os.environ, CC="/nonexistent/cc", PATH=str(tmp_path), HWADAPTER_CPU_KERNELS="codegen")
    out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert lines[0] == str(np.exp([1.0, -2.0]).round(3).tolist())
    assert "no C compiler" in lines[1] and "install gcc" in lines[1]
