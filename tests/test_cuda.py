"""The CUDA plugin (plugins/cuda).

Everywhere: it is discovered, and without a GPU it is unavailable with its cause and fix; with nvcc, every CUDA
kernel it can generate (the op set's kernel-primitive programs) or ships (kernels/*.cu) compiles for sm_90.
Marked `gpu` (make test-gpu): ops against numpy in strict mode, the runtime contract, the allocator, compile errors,
out-of-memory, the disk cache across processes and the subgraph backend, on cuda:0.
"""
from __future__ import annotations

import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter.api.errors import DeviceUnavailableError, InvalidDeviceError
from hwadapter.api.meta import UPDATE_INPUTS as _UPDATES  # the optimizer updates: tensors, then scalars
from hwadapter.runtime.discovery import registry

NVCC = shutil.which("nvcc") or ("/usr/local/bin/nvcc" if os.path.exists("/usr/local/bin/nvcc") else None)
ARCH = "sm_90"
DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "bool"]
NOT_INSTALLED = "hwadapter-cuda is not installed: run `.venv/bin/pip install -e plugins/cuda` (make test does)"


def _cuda_unusable() -> str | None:
    """None when cuda:0 can be used, else why not."""
    rec = registry.get("cuda")
    if rec is None:
        return NOT_INSTALLED
    return None if rec.ok else rec.explain()


# --- (a) discovery, and the errors without a GPU --------------------------------------------------------------
def test_plugin_is_discovered_with_all_three_levels():
    assert registry.entry_points().get("cuda") == "hwadapter_cuda:CudaPlugin", NOT_INSTALLED
    rec = registry.get("cuda")
    assert rec.distribution[0] == "hwadapter-cuda"
    assert rec.status in ("ok", "unavailable"), rec.explain()  # never "failed": importing needs no cupy
    assert sorted(rec.levels) == ["codegen", "collectives", "op", "subgraph"]


def test_importing_the_plugin_never_imports_cupy(tmp_path):
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("")  # an importable cupy, without anything in it
    code = textwrap.dedent("""
        import sys, hwadapter, hwadapter_cuda, hwadapter_cuda.codegen, hwadapter_cuda.kernels, hwadapter_cuda.subgraph
        assert "cupy" not in sys.modules
        from hwadapter.runtime.discovery import registry
        hwadapter.device.get_available_device()
        assert "cupy" in sys.modules and registry.get("cuda").status == "unavailable", registry.get("cuda").explain()
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.skipif(_cuda_unusable() is None, reason="a GPU is usable here")
def test_without_a_gpu_cuda_is_unavailable_with_cause_and_fix(capsys):
    rec = registry.get("cuda")
    assert rec.status == "unavailable" and rec.cause and rec.fix, rec.explain()
    assert hw.device.is_available("cuda") is False
    assert "cuda:0" not in hw.device.get_available_device()
    with pytest.raises(InvalidDeviceError) as err:
        hw.set_device("cuda:0")
    assert rec.cause in str(err.value) and rec.fix in str(err.value)
    from hwadapter.cli import main
    assert main(["devices", "--json"]) == 0
    row = next(p for p in json.loads(capsys.readouterr().out)["plugins"] if p["type"] == "cuda")
    assert row["status"] == "unavailable" and row["cause"] == rec.cause


def _fake_cupy(count=None, status=None):
    """A stand-in cupy whose getDeviceCount returns `count` or raises CUDARuntimeError(status)."""
    import types

    class CUDARuntimeError(RuntimeError):
        def __init__(self, status):
            super().__init__(f"cudaError {status}")
            self.status = status

    def get_device_count():
        if status is not None:
            raise CUDARuntimeError(status)
        return count

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=get_device_count,
                                                                    CUDARuntimeError=CUDARuntimeError))
    return cupy


@pytest.mark.parametrize("count, status, cause, fix", [
    (None, 35, "NVIDIA driver is missing or older", "nvidia-smi"),
    (None, 100, "no NVIDIA GPU is visible", "CUDA_VISIBLE_DEVICES"),
    (0, None, "no NVIDIA GPU is visible", "CUDA_VISIBLE_DEVICES"),
    (None, 803, "differ in version", "reinstall the NVIDIA driver"),
    (None, 3, "could not count GPUs", "hwadapter-cuda[cuda13]"),
])
def test_device_count_says_why_there_is_no_gpu(monkeypatch, count, status, cause, fix):
    from hwadapter_cuda import CudaPlugin
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(count, status))
    with pytest.raises(DeviceUnavailableError, match=cause) as err:
        CudaPlugin().device_count()
    assert fix in err.value.fix


def test_missing_or_broken_cupy_says_how_to_install(monkeypatch, tmp_path):
    from hwadapter_cuda import CudaPlugin
    monkeypatch.setitem(sys.modules, "cupy", None)  # as if not installed
    with pytest.raises(DeviceUnavailableError, match="cupy is not installed") as err:
        CudaPlugin().device_count()
    assert "pip install 'hwadapter-cuda[cuda13]'" in err.value.fix
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text("raise ImportError('CuPy failed to load libnvrtc.so.13')\n")
    monkeypatch.delitem(sys.modules, "cupy")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DeviceUnavailableError, match="libnvrtc.so.13") as err:
        CudaPlugin().device_count()
    assert "exactly one cupy wheel" in err.value.fix


# --- (b) every CUDA kernel compiles with nvcc --------------------------------------------------------------------
def _programs() -> dict:
    """name -> CUDA source of the op set's kernel-primitive programs, specialised as the dispatcher would."""
    from hwadapter.runtime import codegen
    out = {}
    for op, arrays, attrs in _op_cases():
        kernel = codegen.PrimitiveKernel(op, codegen.op_set()[op], None, None)
        try:
            _, program = kernel.program([np.empty(s, d) for s, d in arrays], attrs)
        except Exception as err:  # the primitives refuse this dtype (e.g. exp of int8): the frontend never asks
            if type(err).__name__ != "KernelError":
                raise
            continue
        out[program.name] = program.source("cuda")
    return out


#: The optimizer updates' attributes per case (their inputs: _UPDATES)
_UPDATE_ATTRS = {"sgd_update": [{}, {"weight_decay": 0.1}, {}],
                 "momentum_update": [{}, {"use_nesterov": True, "weight_decay": 0.1}, {"momentum": 0.5}],
                 "adam_update": [{}, {"weight_decay": 0.1}, {"weight_decay": 0.1, "decoupled": True}]}


def _op_cases():
    """(op, [(shape, dtype)], attrs): every dtype on a plain shape, and for a few dtypes every rank, broadcast,
    reduction and attribute pattern (these change the indexing code; the dtype changes types and helpers)."""
    from hwadapter.runtime.codegen import op_set
    OPS = op_set()
    sweep = ("float32", "float16", "int64", "bool")
    shapes_1 = [(7,), (), (2, 3, 4)]
    shapes_2 = [((4, 5), (4, 5)), ((4, 5), (5,)), ((4, 1), (1, 5)), ((2, 3, 4), (3, 1)), ((), (4, 5))]
    unary = {"abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu", "erf", "sin", "cos",
             "floor", "ceil", "round", "sign", "logical_not", "gelu"}
    reductions = [((3, 4, 5), axes, keep) for axes in [(0, 1, 2), (0,), (1,), (2,), (0, 2), (1, 2)]
                  for keep in (False, True)] + [((), (), False), ((6,), (0,), False)]
    for op in sorted(OPS):
        for dtype in DTYPES:
            few = (lambda cases: cases) if dtype in sweep else (lambda cases: cases[:1])
            if op in unary:
                for s in few(shapes_1):
                    yield op, [(s, dtype)], {}
                if op == "gelu":
                    yield op, [((7,), dtype)], {"approximate": True}
            elif op == "where":
                for a, b in few(shapes_2):
                    yield op, [(a, "bool"), (b, dtype), (a, dtype)], {}
            elif op == "cast":
                for to in DTYPES:
                    yield op, [((7,), dtype)], {"dtype": to}
            elif op == "clip":
                lo, hi = (0.5, 2.5) if dtype.startswith("float") else (1, 3)
                for attrs in ({"min": lo, "max": hi}, {"min": lo, "max": None}, {"min": None, "max": hi}):
                    yield op, [((7,), dtype)], attrs
            elif op in ("sum", "mean", "max", "min", "prod"):
                for shape, axes, keep in few(reductions[1:]) + reductions[:1]:
                    yield op, [(shape, dtype)], {"axis": axes, "keepdim": keep}
            elif op in ("softmax", "log_softmax"):
                for shape, axis in few([((3, 4, 5), 1), ((3, 4, 5), 0), ((3, 4, 5), 2), ((7,), 0)]):
                    yield op, [(shape, dtype)], {"axis": axis}
            elif op == "layer_norm":
                for shape, begin in few([((2, 3, 4), 1), ((2, 3, 4), 2), ((5, 6), 1)]):
                    yield op, [(shape, dtype), (shape[begin:], dtype), (shape[begin:], dtype)], \
                        {"begin_axis": begin, "epsilon": 1e-5}
            elif op == "batch_norm":
                for shape, axis in few([((2, 3, 4, 5), 1), ((2, 3), 1), ((2, 4, 5, 3), 3)]):
                    c = (shape[axis],)
                    yield op, [(shape, dtype)] + [(c, dtype)] * 4, {"epsilon": 1e-5, "channel_axis": axis}
            elif op in _UPDATES:  # float tensors of param's shape, then one-element scalars
                if not dtype.startswith("float"):
                    continue
                tensors, scalars = _UPDATES[op]
                for (shape, scalar), attrs in zip([((7,), ()), ((2, 3, 4), (1,)), ((), (1,))], _UPDATE_ATTRS[op]):
                    yield op, [(shape, dtype)] * len(tensors) + [(scalar, dtype)] * len(scalars), attrs
            else:  # binary arithmetic, comparisons and logical ops
                for a, b in few(shapes_2):
                    yield op, [(a, dtype), (b, dtype)], {}


def _force_instantiation(file: str, expressions: list[str]) -> str:
    """A translation unit that includes a .cu file and instantiates these templates (taking their addresses)."""
    refs = ", ".join(f"(void*)&{e}" for e in expressions)
    tag = re.sub(r"\W", "_", file)
    return f'#include "{file}"\nvoid* hwadapter_instantiate_{tag}[] = {{{refs}}};\n'


def _mangled(expression: str) -> bytes:
    """The Itanium-mangled prefix of a one-type template kernel, e.g. max_pool2d<float> -> _Z10max_pool2dIfE."""
    codes = {"__half": "6__half", "float": "f", "double": "d", "signed char": "a", "short": "s", "int": "i",
             "long long": "x", "unsigned char": "h"}
    name, ctype = re.fullmatch(r"(\w+)<(.+)>", expression).groups()
    return f"_Z{len(name)}{name}I{codes[ctype]}E".encode()


def nvcc_cubin(source: str, include_dirs=(), name="tu") -> bytes:
    """Compile one translation unit with `nvcc -cubin -arch=sm_90` and the plugin's options; AssertionError with
    nvcc's log (and the failing lines) when it does not compile."""
    from hwadapter_cuda.codegen import OPTIONS
    with tempfile.TemporaryDirectory(prefix="hwadapter-cuda-") as tmp:
        src, out = Path(tmp) / f"{name}.cu", Path(tmp) / f"{name}.cubin"
        src.write_text(source)
        cmd = [NVCC, "-cubin", f"-arch={ARCH}", *OPTIONS, *(f"-I{d}" for d in include_dirs), str(src), "-o", str(out)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            lines = source.splitlines()
            where = sorted({int(n) for n in re.findall(rf"{re.escape(src.name)}\((\d+)\)", res.stderr)})[:5]
            context = "\n".join(f"{n:5d} | {lines[n - 1]}" for n in where if 0 < n <= len(lines))
            raise AssertionError(f"nvcc failed ({' '.join(cmd[:3])}):\n{res.stderr[-4000:]}\n{context}")
        return out.read_bytes()


needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (install the CUDA toolkit to check CUDA sources)")


@needs_nvcc
def test_every_kernel_primitive_program_compiles_with_nvcc():
    programs = _programs()
    assert len(programs) > 300, f"only {len(programs)} distinct programs: the case table lost coverage"
    names = sorted(programs)
    groups = [names[i::2] for i in range(2)]  # two translation units, compiled side by side
    units = ["\n".join(programs[n] for n in g) for g in groups]
    with ThreadPoolExecutor(2) as pool:
        cubins = list(pool.map(lambda i: nvcc_cubin(units[i], name=f"kp{i}"), range(2)))
    for group, cubin in zip(groups, cubins):
        missing = [n for n in group if n.encode() not in cubin]
        assert not missing, f"entry points missing from the cubin: {missing[:5]}"


@needs_nvcc
def test_every_handwritten_kernel_compiles_with_nvcc_for_its_dtypes():
    from hwadapter_cuda import kernels
    unit = "".join(_force_instantiation(f, kernels.name_expressions(f)) for f in sorted(kernels.TEMPLATES))
    cubin = nvcc_cubin(unit, include_dirs=[kernels.SOURCE_DIR], name="handwritten")
    expressions = [e for f in kernels.TEMPLATES for e in kernels.name_expressions(f)]
    assert len(expressions) >= 40
    missing = [e for e in expressions if _mangled(e) not in cubin]
    assert not missing, f"instantiations missing from the cubin: {missing}"
    shipped = {p.name for p in kernels.SOURCE_DIR.glob("*.cu")}
    assert shipped == set(kernels.TEMPLATES), "every shipped .cu file must be listed in kernels.TEMPLATES"


@needs_nvcc
def test_the_compile_check_fails_on_a_broken_source():
    good = next(iter(_programs().values()))
    broken = good.replace("{", "{ this is not CUDA;", 1)
    with pytest.raises(AssertionError, match="nvcc failed") as err:
        nvcc_cubin(broken, name="broken")
    assert "this is not CUDA" in str(err.value)
    with pytest.raises(AssertionError, match="nvcc failed"):
        nvcc_cubin(_force_instantiation("pool.cu", ["max_pool2d<no_such_type>"]), name="badinst",
                   include_dirs=[__import__("hwadapter_cuda.kernels").kernels.SOURCE_DIR])


# --- the plugin's Python logic on a host-emulated cupy -----------------------------------------------------------
# A stand-in for the subset of cupy the plugin uses, backed by host memory and numpy: it exercises runtime.py,
# the cupy-based kernels, the codegen backend's NVRTC handling (nvcc stands in for NVRTC) and subgraph.py without a
# GPU. It checks the plugin's own logic, not cupy's API: the `gpu` tests below do that on a real device.
class _Emulated:
    """Builds the fake `cupy` module; `memory_limit` makes cudaMalloc fail like a full GPU."""

    def __init__(self, memory_limit=1 << 30):
        import ctypes
        import contextlib
        import types
        self.limit, self.live, self.launches = memory_limit, {}, []
        emu = self

        class CUDARuntimeError(RuntimeError):
            def __init__(self, status):
                super().__init__(f"cudaError {status}")
                self.status = status

        def malloc(n):
            if sum(a.nbytes for a in self.live.values()) + n > self.limit:
                raise CUDARuntimeError(2)
            buf = np.zeros(n, np.uint8)
            self.live[buf.ctypes.data] = buf
            return buf.ctypes.data

        def free(ptr):
            del self.live[ptr]

        # Only what cupy_backends.cuda.api.runtime really has: it exports no errorMemoryAllocation constant (the
        # plugin once read one, and every cudaMalloc failure on a real GPU became an AttributeError).
        runtime = types.SimpleNamespace(
            CUDARuntimeError=CUDARuntimeError, memcpyHostToDevice=1, memcpyDeviceToHost=2,
            memcpyDeviceToDevice=3, getDeviceCount=lambda: 1, malloc=malloc, free=free,
            memcpyAsync=lambda d, s, n, kind, stream: ctypes.memmove(d, s, n),
            memsetAsync=lambda p, v, n, stream: ctypes.memset(p, v, n),
            memGetInfo=lambda: (self.limit - sum(a.nbytes for a in self.live.values()), self.limit),
            deviceSynchronize=lambda: None, driverGetVersion=lambda: 13000, runtimeGetVersion=lambda: 13000,
            getDeviceProperties=lambda i: {"name": b"host-emulated GPU", "totalGlobalMem": self.limit, "major": 9,
                                           "minor": 0, "multiProcessorCount": 4, "maxThreadsPerBlock": 1024})

        class Context:
            def __init__(self, *args, **kwargs):
                self.ptr = id(self)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        class Stream(Context):
            done = True

            def synchronize(self):
                pass

            def wait_event(self, event):
                assert isinstance(event, Context)

        class Event(Context):
            done = True

            def record(self, stream=None):
                pass

            def synchronize(self):
                pass

        class UnownedMemory:
            def __init__(self, ptr, size, owner, device_id):
                self.ptr, self.size, self.owner = ptr, size, owner

        class MemoryPointer:
            def __init__(self, mem, offset):
                self.mem, self.ptr = mem, mem.ptr + offset

        def ndarray(shape, dtype, memptr):
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            if nbytes == 0:
                return np.empty(shape, dtype)
            raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(memptr.ptr))
            raw.flags.writeable = True
            return raw.view(dtype).reshape(shape)

        class NVRTCError(RuntimeError):
            pass

        class Program:
            def __init__(self, src, name):
                self.src, self.name, self.log, self.cubin = src, name, "", b""

        def compile_program(prog, options):
            opts = [o.replace("--gpu-architecture=", "-arch=") for o in options]
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / prog.name
                src.write_text(prog.src)
                res = subprocess.run([NVCC, "-cubin", *opts, str(src), "-o", str(src) + ".cubin"],
                                     capture_output=True, text=True)
                prog.log = res.stderr
                if res.returncode:
                    raise NVRTCError("NVRTC_ERROR_COMPILATION (6)")
                prog.cubin = (src.parent / (src.name + ".cubin")).read_bytes()

        nvrtc = types.SimpleNamespace(
            NVRTCError=NVRTCError, getVersion=lambda: (13, 0), getSupportedArchs=lambda: (75, 80, 86, 89, 90),
            createProgram=lambda src, name, h, i: Program(src, name), compileProgram=compile_program,
            getProgramLog=lambda p: p.log, getCUBIN=lambda p: p.cubin, destroyProgram=lambda p: None)

        class Module:
            def load(self, binary):
                assert binary[:4] == b"\x7fELF", "not a cubin"
                self.binary = binary

            def get_function(self, name):
                assert name.encode() in self.binary, f"no entry point {name}"
                return lambda grid, block, args, stream=None: emu.launches.append((name, grid, block, args))

        class CompileException(Exception):
            pass

        class RawModule:
            """Compiles with nvcc the way cupy would with NVRTC: the code, its options and name expressions."""

            def __init__(self, code, options, name_expressions):
                includes = [o[2:] for o in options if o.startswith("-I")]
                refs = ", ".join(f"(void*)&{e}" for e in name_expressions)
                self.cubin = nvcc_cubin(f"{code}\nvoid* hwadapter_instantiate[] = {{{refs}}};\n", includes)
                self.names = set(name_expressions)

            def get_function(self, expression):
                assert expression in self.names and _mangled(expression) in self.cubin, expression
                return lambda grid, block, args, stream=None: emu.launches.append((expression, grid, block, args))

        allocators = []

        @contextlib.contextmanager
        def using_allocator(fn):
            allocators.append(fn)
            try:
                yield
            finally:
                allocators.pop()

        cuda = types.SimpleNamespace(
            runtime=runtime, Device=Context, Stream=Stream, Event=Event, UnownedMemory=UnownedMemory,
            MemoryPointer=MemoryPointer, using_allocator=using_allocator, nvrtc=nvrtc, get_cuda_path=lambda: None,
            function=types.SimpleNamespace(Module=Module), compiler=types.SimpleNamespace(
                CompileException=CompileException))
        cupy = types.ModuleType("cupy")
        cupy.__file__, cupy.__version__, cupy.cuda, cupy.ndarray, cupy.RawModule = __file__, "emulated", cuda, \
            ndarray, RawModule
        for name in ("matmul", "swapaxes", "pad", "transpose", "concatenate", "take", "broadcast_to", "lib"):
            setattr(cupy, name, getattr(np, name))
        self.cupy = cupy


@pytest.fixture
def emulated(monkeypatch, reset_plugins):
    """cuda:0 on the host-emulated cupy (needs nvcc, which stands in for NVRTC)."""
    if NVCC is None:
        pytest.skip("nvcc not found: the host emulation compiles with it")
    if _cuda_unusable() is None:
        pytest.skip("a real GPU is present: the gpu tests cover the plugin")
    from hwadapter_cuda import kernels
    emu = _Emulated()
    monkeypatch.setitem(sys.modules, "cupy", emu.cupy)
    monkeypatch.setitem(sys.modules, "cupy_backends", None)
    monkeypatch.setattr(kernels, "_modules", {})
    monkeypatch.setattr(kernels, "_functions", {})
    reset_plugins()
    assert hw.device.is_available("cuda"), registry.get("cuda").explain()
    yield emu
    gc.collect()
    monkeypatch.undo()
    reset_plugins()


def _rand(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def test_emulated_runtime_contract(emulated):
    from hwadapter.runtime.device import get
    rt = get("cuda:0").runtime
    props = rt.properties()
    assert props.vendor == "NVIDIA" and props.extra["arch"] == "sm_90"
    for dtype in DTYPES:
        for size in (0, 1, 7, 1001):
            host = _rand((size,), dtype, size)
            np.testing.assert_array_equal(hw.to_tensor(host, device="cuda:0").numpy(), host)
    buf = rt.allocate(64)
    s, e = rt.create_stream(), rt.create_event()
    rt.copy_h2d(buf, 0, np.zeros(64, np.uint8), s)
    rt.copy_h2d(buf, 10, np.arange(1, 6, dtype=np.uint8), s)
    e.record(s)
    rt.default_stream.wait_event(e)
    rt.memset(buf, 20, 7, 3)
    rt.copy_d2d(buf, 30, buf, 10, 5)
    out = np.empty(32, np.uint8)
    rt.copy_d2h(out, buf, 8)
    e.synchronize()
    assert e.query() and s.query()
    np.testing.assert_array_equal(out[:8], [0, 0, 1, 2, 3, 4, 5, 0])
    np.testing.assert_array_equal(out[12:15], [7, 7, 7])
    np.testing.assert_array_equal(out[22:27], [1, 2, 3, 4, 5])
    rt.free(buf)
    assert rt.memory_info()[1] == props.total_memory


def test_emulated_out_of_memory_names_the_device(emulated):
    emulated.limit = 1 << 20
    with pytest.raises(hw.OutOfMemoryError, match=r"cuda:0.*host-emulated GPU.*cudaMalloc of 2097152 bytes"):
        hw.zeros([1 << 19], "float32", device="cuda:0")


def test_emulated_cupy_kernels_match_numpy(emulated):
    """matmul, conv2d and data movement run through cupy calls on views of device memory."""
    from hwadapter.api import reference as ref
    from hwadapter.runtime.device import get
    F = hw.nn.functional
    alloc = get("cuda:0").allocator
    base = alloc.stats()["allocated_bytes"]
    hw.configure(strict=True)
    t = lambda a: hw.to_tensor(a, device="cuda:0")  # noqa: E731
    for dtype in ("float32", "float64", "float16", "int32"):
        a, b = _rand((2, 3, 4), dtype, 1), _rand((4, 5), dtype, 2)
        np.testing.assert_allclose(hw.matmul(t(a), t(b)).numpy(), ref.matmul(a, b), rtol=2e-3)
        np.testing.assert_allclose(hw.matmul(t(b), t(a[0]), transpose_x=True, transpose_y=True).numpy(),
                                   ref.matmul(b, a[0], True, True), rtol=2e-3)
        np.testing.assert_allclose(hw.matmul(t(b[:, 0]), t(b)).numpy(), ref.matmul(b[:, 0], b), rtol=2e-3)
        np.testing.assert_allclose(hw.matmul(t(b[0]), t(b[0])).numpy(), ref.matmul(b[0], b[0]), rtol=2e-3)
    for dtype, groups, stride, pad, dil in [("float32", 1, 1, 0, 1), ("float64", 2, 2, 1, 1),
                                           ("float16", 4, (1, 2), (1, 0, 2, 1), 2), ("float32", 1, 3, "SAME", 1)]:
        x, w, bias = _rand((2, 4, 9, 8), dtype, 3), _rand((8, 4 // groups, 3, 2), dtype, 4), _rand((8,), dtype, 5)
        got = F.conv2d(t(x), t(w), t(bias), stride=stride, padding=pad, dilation=dil, groups=groups)
        want = F.conv2d(hw.to_tensor(x), hw.to_tensor(w), hw.to_tensor(bias), stride=stride, padding=pad,
                        dilation=dil, groups=groups)
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.numpy(), rtol=3e-3, atol=3e-3)
    x = _rand((3, 4, 5), "float32", 6)
    cases = [
        (hw.transpose(t(x), [2, 0, 1]), ref.transpose(x, (2, 0, 1))),
        (hw.concat([t(x), t(x[:, :2])], axis=1), np.concatenate([x, x[:, :2]], axis=1)),
        (hw.slice(t(x), [0, 2], [2, -1], [-4, 0], [-1, -2]), x[2::-1, :, -1:0:-2]),
        (hw.gather(t(x), t(np.array([[2, -1], [0, 1]])), axis=1), np.take(x, [[2, -1], [0, 1]], axis=1)),
        (hw.expand(t(x[:, :1]), [2, 3, 4, 5]), np.broadcast_to(x[:, :1], (2, 3, 4, 5))),
        (F.pad(t(x), [1, 2, 0, 1], mode="constant", value=1.5), ref.pad(x, ((0, 0), (0, 1), (1, 2)), "constant", 1.5)),
        *[(F.pad(t(x), [1, 2], mode=m), ref.pad(x, ((0, 0), (0, 0), (1, 2)), m)) for m in ("reflect", "replicate",
                                                                                          "circular")],
    ]
    cases += [(p, q) for p, q in zip(hw.split(t(x), [1, 4], axis=2), np.split(x, [1], axis=2))]
    for got, want in cases:
        np.testing.assert_array_equal(got.numpy(), want)
    with pytest.raises(hw.InvalidArgumentError, match="gather on cuda:0: index 5 is out of range for axis 1"):
        hw.gather(t(x), t(np.array([0, 5])), axis=1)
    r = hw.reshape(t(x), [4, 15])
    assert r.shape == (4, 15) and r._data.block is not None
    np.testing.assert_array_equal(r.numpy(), x.reshape(4, 15))
    del cases, got, want, r
    gc.collect()
    assert alloc.stats()["allocated_bytes"] == base


def _params(file: str, template: str) -> int:
    """How many parameters a template kernel of kernels/*.cu declares."""
    from hwadapter_cuda.kernels import SOURCE_DIR
    sig = re.search(rf"__global__ void {template}\((.*?)\)", (SOURCE_DIR / file).read_text(), re.S).group(1)
    return sig.count(",") + 1


def test_emulated_handwritten_kernels_compile_and_launch_with_their_signatures(emulated):
    """Pooling and arg reductions: NVRTC's inputs (code, options, name expressions) compile, and each launch passes
    exactly the parameters the .cu template declares, pointers as uint64 and sizes as int64."""
    F = hw.nn.functional
    x, long = _rand((2, 3, 9, 8), "float32"), _rand((3, 2000), "float32")
    calls = [lambda d: F.max_pool2d(hw.to_tensor(x, device=d), 3, 2, 1, ceil_mode=True),
             lambda d: F.avg_pool2d(hw.to_tensor(x, device=d).astype("float16"), 2),
             lambda d: F.adaptive_avg_pool2d(hw.to_tensor(x, device=d).astype("float64"), [4, 3]),
             lambda d: F.adaptive_max_pool2d(hw.to_tensor(x, device=d).astype("int16"), 2),
             lambda d: hw.argmax(hw.to_tensor(long.reshape(2, 3000), device=d).astype("uint8"), axis=0),
             lambda d: hw.argmin(hw.to_tensor(x, device=d).reshape([6, 72]), axis=None, keepdim=True),
             lambda d: hw.argmax(hw.to_tensor(long, device=d), axis=1)]
    for call in calls:
        got, want = call("cuda:0"), call("cpu")
        assert got.shape == want.shape and got.dtype == want.dtype
    launches = [launch for launch in emulated.launches if "<" in launch[0]]
    expected = ["max_pool2d<float>", "avg_pool2d<__half>", "adaptive_avg_pool2d<double>",
                "adaptive_max_pool2d<short>", "argmax_rows<unsigned char>", "argmin_blocks<float>", "argmax_blocks<float>"]
    assert [launch[0] for launch in launches] == expected
    for name, grid, block, args in launches:
        file = "argreduce.cu" if name.startswith("arg") else "pool.cu"
        assert len(args) == _params(file, name.split("<")[0]), name
        assert [type(a) for a in args[:2]] == [np.uint64, np.uint64] and all(type(a) is np.int64 for a in args[2:])
        assert block == (256,) and grid[0] >= 1


def test_emulated_codegen_compiles_caches_and_launches(emulated, monkeypatch, tmp_path):
    """Kernel primitives through NVRTC's stand-in: the core's disk cache keeps the cubin; launches get the grid of
    the plugin's CUDA dialect (two elements per thread); a bad kernel raises CompileError with NVRTC's log and the source."""
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(tmp_path))
    from hwadapter import kp
    from hwadapter.plugin import CompileError
    from hwadapter.runtime.device import get
    dev = get("cuda:0")
    backend = dev.codegen
    assert backend is not None and backend.available() is None and backend.cache_key()["target"] == "sm_90"
    a = hw.to_tensor(_rand((1000,), "float32"), device="cuda:0")
    hw.exp(a)
    name, grid, block, args = emulated.launches[-1]
    assert name.startswith("exp_") and block == (256,) and grid == (2,)  # 1000 elements, 2 per thread (DIALECT)
    assert [type(x) for x in args] == [np.uint64, np.uint64, np.int64] and isinstance(args, tuple)
    assert len(list(tmp_path.rglob("*.bin"))) == 1 and name in backend.binaries
    source = kp.library.get("exp").source("cuda").replace("expf(", "no_such_function(")
    with pytest.raises(CompileError, match="NVRTC 13.0 could not compile kernel 'broken' for sm_90") as err:
        backend.compile(source, "broken")
    assert "no_such_function" in err.value.log and err.value.source == source


def _graph():
    from hwadapter.graph import GraphBuilder
    g = GraphBuilder()
    x, w = g.input("x", (4, 6)), g.input("w", (6, 8))
    y = g.op("matmul", [x, w])
    t = g.op("transpose", [y], perm=(1, 0))
    r = g.op("reshape", [t], shape=(2, 16))
    c = g.op("concat", [r, r], axis=0)
    s = g.op("slice", [c], axes=(1,), starts=(1,), ends=(9,), steps=(2,))
    return g.build([s, r])


def test_emulated_subgraph_runs_serialises_and_reloads(emulated):
    from hwadapter.graph import run
    from hwadapter.plugin import DeviceArray
    from hwadapter.runtime.device import get
    dev = get("cuda:0")
    backend = dev.subgraph
    graph = _graph()
    assert backend.supported_nodes(graph) == {n.name for n in graph.nodes}
    exe = backend.compile(graph)
    x, w = _rand((4, 6), "float32", 1), _rand((6, 8), "float32", 2)
    want = run(graph, {"x": x, "w": w}, device="cpu")
    inputs = [DeviceArray.from_numpy(dev, x), DeviceArray.from_numpy(dev, w)]
    first = [o.numpy() for o in exe.run(inputs)]
    second = exe.run(inputs)
    for got, again, name in zip(first, second, graph.outputs):
        np.testing.assert_allclose(got, want[name].numpy(), rtol=1e-5)
        np.testing.assert_array_equal(again.numpy(), got)
    assert second[1].block is not exe._storage(dev).get(graph.outputs[1])  # outputs are fresh on every run
    data = exe.serialize()
    assert data.startswith(b"HWADAPTER-EXECUTABLE 1\n") and b"hwadapter-cuda-subgraph" in data and b"pickle" not in data
    again = backend.deserialize(data)
    for got, name in zip(again.run(inputs), graph.outputs):
        np.testing.assert_allclose(got.numpy(), want[name].numpy(), rtol=1e-5)
    with pytest.raises(hw.InvalidArgumentError, match="cuda:0: cannot load a compiled subgraph"):
        backend.deserialize(data[:10])


def test_emulated_subgraph_shares_memory_between_values_whose_lives_do_not_overlap(emulated):
    """A chain of 8 matmuls: each intermediate is dead once the next is computed, so the subgraph's scratch values
    share two or three allocations, not seven, and the results stay the CPU's, run after run."""
    from hwadapter.graph import GraphBuilder, run
    from hwadapter.plugin import DeviceArray
    from hwadapter.runtime.device import get
    dev = get("cuda:0")
    g = GraphBuilder()
    h = g.input("x", (16, 16))
    weights = []
    for i in range(8):
        weights.append(g.input(f"w{i}", (16, 16)))
        h = g.op("matmul", [h, weights[-1]])
    graph = g.build([h])
    exe = dev.subgraph.compile(graph)
    arrays = [_rand((16, 16), "float32", i) * 0.3 for i in range(9)]
    want = run(graph, dict(zip(graph.inputs, arrays)), device="cpu")[graph.outputs[0]].numpy()
    inputs = [DeviceArray.from_numpy(dev, a) for a in arrays]
    for _ in range(2):
        np.testing.assert_allclose(exe.run(inputs)[0].numpy(), want, rtol=1e-4, atol=1e-5)
    storage = exe._storage(dev)
    assert len(storage) == 7 and len({id(a.block) for a in storage.values()}) <= 3


def test_emulated_subgraph_prepares_programs_and_ships_their_binaries(emulated, monkeypatch, tmp_path):
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(tmp_path))
    from hwadapter.graph import GraphBuilder
    from hwadapter.runtime.device import get
    dev = get("cuda:0")
    backend = dev.subgraph
    g = GraphBuilder()
    x = g.input("x", (4, 8))
    h = g.op("layer_norm", [x, g.input("wt", (8,)), g.input("b", (8,))], begin_axis=1, epsilon=1e-5)
    y = g.op("max_pool2d", [g.op("reshape", [h], shape=(1, 1, 4, 8))], kernel_size=(2, 2), stride=(2, 2),
             padding=(0, 0, 0, 0), ceil_mode=False)
    graph = g.build(g.op("add", [y, y]))
    assert backend.supported_nodes(graph) == {n.name for n in graph.nodes}
    exe = backend.compile(graph)
    assert [s.kind for s in exe.steps] == ["program", "alias", "kernel", "program"]
    ln = exe.steps[0]
    assert len(ln.params) == 6 and ln.params[4:] == [f"{ln.node.name}/mean", f"{ln.node.name}/variance"]
    data = exe.serialize()
    header = json.loads(data.split(b"\n")[1])
    assert [p["name"] for p in header["binaries"]] == [exe.steps[0].program.name, exe.steps[3].program.name]
    assert header["graph"]["nodes"][2][4]["kernel_size"] == {"tuple": [2, 2]}
    reloaded = backend.deserialize(data)
    assert [s.binary for s in reloaded.steps] == [s.binary for s in exe.steps]
    assert reloaded.steps[2].node.attrs == exe.steps[2].node.attrs
    from hwadapter.plugin import DeviceArray
    emulated.launches.clear()
    outs = reloaded.run([DeviceArray.from_numpy(dev, _rand(s, "float32")) for s in [(4, 8), (8,), (8,)]])
    assert outs[0].shape == (1, 1, 2, 4)
    assert [launch[0].split("_")[0] for launch in emulated.launches] == ["layer", "max", "add"]


def _interpreting(step):
    """The host emulation has no GPU to run a compiled program: this stands in for a fused step's loaded program,
    computing what the program means (the kernel-primitive interpreter) into the buffers the subgraph passes."""
    from hwadapter.runtime.fused import interpret
    from hwadapter_cuda.kernels import view
    attrs, program = step.node.attrs, step.program

    class Program:
        def launch(self, global_size, buffers, scalars, stream=None):
            ins = dict(zip([p.name for p in program.inputs], buffers))
            outs = dict(zip([p.name for p in program.outputs], buffers[len(program.inputs):]))
            for name, value in zip(attrs["outputs"], interpret(attrs, [view(ins[n]) for n in attrs["inputs"]])):
                view(outs[name])[...] = value
    return Program()


def _fused_mlp():
    """(unfused graph: the oracle, the same after the fusion pass for cuda:0)."""
    from hwadapter.graph import GraphBuilder
    from hwadapter.graph.passes import fuse
    g = GraphBuilder()
    x, w, b = g.input("x", (4, 6)), g.input("w", (6, 8)), g.input("b", (8,))
    h = g.op("relu", [g.op("add", [g.op("matmul", [x, w]), b])])
    s = g.op("sum", [g.op("mul", [h, h])], axis=(1,), keepdim=False)
    graph = g.build([g.op("matmul", [h, g.input("w2", (8, 3))]), s])
    return graph, fuse(graph, {n.name: "cuda:0" for n in graph.nodes}, can_fuse=lambda device: True)[0]


def test_emulated_subgraph_claims_compiles_and_round_trips_fused_nodes(emulated):
    from hwadapter.graph import run
    from hwadapter.plugin import DeviceArray, unpack_executable
    from hwadapter.runtime.device import get
    dev = get("cuda:0")
    backend = dev.subgraph
    oracle, graph = _fused_mlp()
    assert [n.op for n in graph.nodes] == ["matmul", "fused", "matmul"]
    assert backend.supported_nodes(graph) == {n.name for n in graph.nodes}
    exe = backend.compile(graph)
    assert [s.kind for s in exe.steps] == ["kernel", "program", "kernel"]
    fused = exe.steps[1]
    assert fused.params == [*fused.node.inputs, *fused.node.outputs]  # the node's values, in the program's order
    arrays = [_rand(oracle.values[n].shape, "float32", i) for i, n in enumerate(oracle.inputs)]
    want = run(oracle, dict(zip(oracle.inputs, arrays)), device="cpu")
    data = exe.serialize()
    _, back, binaries = unpack_executable(data, "hwadapter-cuda-subgraph/2", "cuda:0")
    assert back == graph and list(binaries) == [fused.program.name]
    reloaded = backend.deserialize(data)
    assert reloaded.steps[1].binary == fused.binary
    for prepared in (exe, reloaded):
        prepared.steps[1].fn = _interpreting(prepared.steps[1])
        outs = prepared.run([DeviceArray.from_numpy(dev, a) for a in arrays])
        for name, out in zip(graph.outputs, outs):
            np.testing.assert_allclose(out.numpy(), want[name].numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


def test_emulated_subgraph_leaves_conv2d_with_an_activation_unclaimed(emulated):
    from dataclasses import replace
    from hwadapter.graph import GraphBuilder
    from hwadapter.runtime.device import get
    g = GraphBuilder()
    y = g.op("conv2d", [g.input("x", (1, 2, 5, 5)), g.input("w", (3, 2, 3, 3))], stride=(1, 1),
             padding=(0, 0, 0, 0), dilation=(1, 1), groups=1)
    graph = g.build(g.op("relu", [y]))
    backend = get("cuda:0").subgraph
    assert backend.supported_nodes(graph) == {n.name for n in graph.nodes}
    conv = graph.nodes[0]
    graph.nodes[0] = replace(conv, attrs={**conv.attrs, "activation": "relu"})  # cuBLAS conv2d has no epilogue
    assert backend.supported_nodes(graph) == {graph.nodes[1].name}
    with pytest.raises(hw.InvalidArgumentError, match="cuda:0: node .* is a conv2d with activation 'relu'"):
        backend.compile(graph)


def test_no_benchmark_script_shadows_a_package():
    """A script's folder is first on sys.path: benchmarks/cuda.py once shadowed NVIDIA's `cuda` namespace package
    (cupy 14 imports cuda.pathfinder), and every benchmark in that folder then saw no GPU (found on the H100)."""
    from importlib.metadata import packages_distributions
    taken = set(packages_distributions()) | set(sys.stdlib_module_names) | {"cuda", "cupy", "torch", "onnx"}
    root = Path(__file__).parent.parent
    for folder in ("benchmarks", "scripts", "examples"):
        clash = sorted(p.name for p in (root / folder).glob("*.py") if p.stem in taken)
        assert not clash, f"{folder}/{clash} would shadow an installed package or module of that name: rename it"


# --- (c) on a GPU (make test-gpu) ----------------------------------------------------------------------------------
gpu = pytest.mark.gpu


@pytest.fixture
def cuda():
    """cuda:0 in strict mode (no CPU fallback), or a skip saying why there is no usable GPU."""
    why = _cuda_unusable()
    if why is not None:
        pytest.skip(f"no usable NVIDIA GPU: {why}")
    from hwadapter.runtime.device import get
    hw.configure(strict=True)
    return get("cuda:0")


# Which dtypes the frontend hands each primitive op (it casts everything else before dispatching).
_FLOAT_OPS = {"exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "erf", "sin", "cos", "gelu", "floor",
              "ceil", "round", "div", "softmax", "log_softmax", "layer_norm", "batch_norm", "mean"}
_BOOL_OPS = {"logical_not", "logical_and", "logical_or", "logical_xor"}
_ANY_OPS = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "where", "cast", "max", "min"}


def _frontend_passes(op: str, arrays: list) -> bool:
    if op in _UPDATES:  # random values make no optimizer state (v < 0, beta powers > 1): _kernel_cases has them
        return False
    dtype = arrays[-1][1]
    if all(shape == () for shape, _ in arrays) and op not in ("sum", "mean", "max", "min", "prod", "cast", "clip"):
        return False  # the frontend runs 0-d elementwise ops as one-element arrays
    if op in _FLOAT_OPS:
        return dtype.startswith("float")
    if op in _BOOL_OPS:
        return dtype == "bool"
    if op in ("sum", "prod"):
        return dtype.startswith("float") or dtype == "int64"
    return op in _ANY_OPS or dtype != "bool"


def _data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype.startswith("float"):
        return (rng.standard_normal(shape) * 3).astype(dtype)
    lo = 0 if dtype == "uint8" else -5
    return rng.integers(lo, 6, shape).astype(dtype)


def _assert_close(got, want, what):
    assert got.dtype == want.dtype and got.shape == want.shape, f"{what}: {got.dtype}{got.shape} vs " \
                                                                f"{want.dtype}{want.shape}"
    if want.dtype.kind == "f":
        tol = {"float16": (4e-3, 2e-3), "float32": (3e-5, 3e-6), "float64": (1e-12, 1e-14)}[want.dtype.name]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), *tol, equal_nan=True,
                                   err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def _kernel_cases():
    """(op, arrays, attrs) for the ops with kernels of their own (cuBLAS, kernels/*.cu, cupy)."""
    from hwadapter.api.reference import KERNELS as KERNELS_REF
    x4 = {d: _data((2, 3, 9, 8), d, 1) for d in DTYPES}
    for d in DTYPES[:-1]:
        yield "matmul", [_data((2, 3, 4), d, 2), _data((4, 5), d, 3)], {}
        yield "matmul", [_data((5, 4), d, 2), _data((3, 5), d, 3)], {"transpose_x": True, "transpose_y": True}
        yield "matmul", [_data((4,), d, 2), _data((4,), d, 3)], {}
        yield "matmul", [_data((3, 0), d, 2), _data((0, 4), d, 3)], {}  # an empty inner dimension gives zeros
        yield "max_pool2d", [x4[d]], {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1),
                                      "ceil_mode": True}
        yield "adaptive_max_pool2d", [x4[d]], {"output_size": (4, 3)}
    yield "max_pool2d", [x4["bool"]], {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0, 0, 0),
                                       "ceil_mode": False}
    for d in ("float16", "float32", "float64"):
        xr = np.maximum(x4[d], 0)  # ties of zeros: each window's grad to one element only
        for attrs in ({"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0, 0, 0), "ceil_mode": False},
                      {"kernel_size": (3, 3), "stride": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": True}):
            out = KERNELS_REF["max_pool2d"](xr, **attrs)
            yield "max_pool2d_grad", [xr, _data(out.shape, d, 12)], attrs
        yield "adaptive_max_pool2d_grad", [xr, _data((2, 3, 4, 3), d, 13)], {"output_size": (4, 3)}
        p, g, m, v = _data((3, 50), d, 8), _data((3, 50), d, 9), _data((3, 50), d, 10), np.abs(_data((3, 50), d, 11))
        for scalar in ((), (1,)):
            lr, b1p, b2p = (np.full(scalar, s, d) for s in (0.01, 0.9 ** 3, 0.999 ** 3))
            for op, arrays in (("sgd_update", [p, g, lr]), ("momentum_update", [p, g, m, lr]),
                               ("adam_update", [p, g, m, v, lr, b1p, b2p])):
                for attrs in _UPDATE_ATTRS[op]:
                    yield op, arrays, attrs
        for groups, stride, pads, dil in [(1, (1, 1), (0, 0, 0, 0), (1, 1)), (2, (2, 1), (1, 2, 0, 1), (2, 1))]:
            yield "conv2d", [_data((2, 4, 9, 8), d, 4), _data((6, 4 // groups, 3, 2), d, 5), _data((6,), d, 6)], \
                {"stride": stride, "padding": pads, "dilation": dil, "groups": groups}
        for exclusive in (True, False):
            yield "avg_pool2d", [x4[d]], {"kernel_size": (3, 2), "stride": (2, 2), "padding": (1, 1, 0, 1),
                                          "ceil_mode": True, "exclusive": exclusive}
        yield "adaptive_avg_pool2d", [x4[d]], {"output_size": (4, 3)}
    for d in DTYPES:
        x = x4[d].copy()
        if d.startswith("float"):
            x[0, 1, 2, 3] = np.nan
        for op in ("argmax", "argmin"):
            for axis, keep in [(None, False), (None, True), (3, False), (0, True)]:
                yield op, [x], {"axis": axis, "keepdim": keep}
            yield op, [_data((3, 5000), d, 7)], {"axis": 1, "keepdim": False}
        yield "argmax", [x[0, 0, 0, 0].copy()], {"axis": None, "keepdim": False}
        yield "transpose", [x], {"perm": (2, 0, 3, 1)}
        yield "concat", [x, x[:, :1].copy(), x[:, :0].copy()], {"axis": 1}
        yield "slice", [x], {"axes": (2,), "starts": (5,), "ends": (2,), "steps": (1,)}  # empty
        yield "split", [x], {"sections": (2, 7), "axis": 2}
        yield "slice", [x], {"axes": (0, 3), "starts": (1, 7), "ends": (None, 0), "steps": (-1, -3)}
        yield "gather", [x, np.array([[2, -1], [0, 1]])], {"axis": 1}
        yield "expand", [x[:, :1].copy()], {"shape": (3, 2, 3, 9, 8)}
        yield "reshape", [x], {"shape": (6, 72)}
        for mode in ("constant", "reflect", "replicate", "circular"):
            yield "pad", [x], {"pads": ((0, 0), (1, 0), (2, 1), (0, 3)), "mode": mode, "value": 1}


def _out_of_range_cast(op, arrays, attrs) -> bool:
    """A float cast to uint8 with negative elements: undefined in C, numpy (x86) wraps, the GPU saturates (see
    test_gpu_cast_of_negative_floats_to_uint8_wraps_as_numpy); the main test compares these casts elsewhere."""
    return op == "cast" and np.dtype(attrs["dtype"]) == np.uint8 and arrays[0].dtype.kind == "f" \
        and bool((arrays[0] <= -1).any())


@gpu
def test_gpu_every_op_matches_numpy_without_fallback(cuda):
    from hwadapter.dispatch.dispatcher import dispatch
    from hwadapter.api.reference import KERNELS
    cases = [(op, [_data(s, d, i) for i, (s, d) in enumerate(arrays)], attrs) for op, arrays, attrs in _op_cases()
             if _frontend_passes(op, arrays)]
    cases += list(_kernel_cases())
    ops = {op for op, _, _ in cases}
    # Every op cuda:0 runs (its own kernels and the kernel-primitive op set) has a case; ops the core adds with
    # neither (CPU reference only) cannot run here in strict mode and are not this plugin's to test.
    from hwadapter.runtime.codegen import op_set
    from hwadapter_cuda.kernels import KERNELS as CUDA_KERNELS
    on_gpu = (set(op_set()) | set(CUDA_KERNELS)) & set(KERNELS)
    assert on_gpu <= ops <= set(KERNELS), f"ops without a case: {sorted(on_gpu - ops)}"
    failures = []  # every case runs: one GPU run names every wrong op, not only the first
    for op, arrays, attrs in cases:
        what = f"{op}({', '.join(f'{a.dtype}{a.shape}' for a in arrays)}, {attrs})"
        try:
            out = dispatch(op, tuple(hw.to_tensor(a, device="cuda:0") for a in arrays), attrs)
            want = KERNELS[op](*arrays, **attrs)
            outs, wants = (out, want) if isinstance(want, list) else ([out], [want])
            assert len(outs) == len(wants), what
            for got, exp in zip(outs, wants):
                assert got.device is cuda, what
                got, exp = got.numpy(), np.asarray(exp)
                if _out_of_range_cast(op, arrays, attrs):
                    keep = arrays[0] > -1
                    got, exp = got[keep], exp[keep]
                _assert_close(got, exp, what)
        except Exception as err:  # noqa: BLE001  AssertionError, or an op that raised
            failures.append(f"{what}: {type(err).__name__}: {str(err).strip()[:600]}")
        finally:
            out = outs = got = None  # nothing of a failed case stays alive in this frame
    assert not failures, f"{len(failures)} of {len(cases)} cases differ from numpy:\n" + "\n".join(failures)


@gpu
def test_gpu_cast_of_negative_floats_to_uint8_wraps_as_numpy(cuda):
    for dtype in ("float16", "float32", "float64"):
        x = np.array([-1.607, -200.5, -0.5, 3.9, 255.0], dtype)
        with np.errstate(invalid="ignore"):
            want = x.astype(np.uint8)  # [255, 56, 0, 3, 255] on x86, and on every other device of hwadapter
        np.testing.assert_array_equal(hw.to_tensor(x, device="cuda:0").astype("uint8").numpy(), want, err_msg=dtype)


@gpu
def test_gpu_runtime_contract(cuda):
    rt = cuda.runtime
    assert rt.properties().vendor == "NVIDIA" and rt.properties().total_memory > 0
    for dtype in DTYPES:
        for size in (0, 1, 7, 1001, (1 << 22) + 3):
            host = _data((size,), dtype, size)
            np.testing.assert_array_equal(hw.to_tensor(host, device="cuda:0").numpy(), host)
    n = 64 << 20
    host = np.random.default_rng(0).integers(0, 255, n, dtype=np.uint8)
    a, b = rt.allocate(n), rt.allocate(n)
    try:
        s = rt.create_stream()  # ordering on one stream: h2d, d2d, d2h queued back to back
        out = np.empty_like(host)
        rt.copy_h2d(a, 0, host, s)
        rt.copy_d2d(b, 0, a, 0, n, s)
        rt.copy_d2h(out, b, 0, s)
        s.synchronize()
        assert s.query()
        np.testing.assert_array_equal(out, host)
        s1, s2, e = rt.create_stream(), rt.create_stream(), rt.create_event()  # across streams: an event orders
        for value in (1, 2, 3):
            rt.memset(a, 0, value, n, s1)
        e.record(s1)
        s2.wait_event(e)
        rt.copy_d2d(b, 0, a, 0, n, s2)
        rt.copy_d2h(out, b, 0, s2)
        s2.synchronize()
        assert e.query() and (out == 3).all()
        rt.memset(a, 5, 9, 10)
        small = np.empty(12, np.uint8)
        rt.copy_d2h(small, a, 0)
        np.testing.assert_array_equal(small, [3] * 5 + [9] * 7)
    finally:
        rt.free(a)
        rt.free(b)
    free, total = rt.memory_info()
    assert 0 < free <= total == rt.properties().total_memory


@gpu
def test_gpu_allocator_returns_to_baseline_and_cupy_pool_is_unused(cuda):
    import cupy
    F = hw.nn.functional

    def work():
        x = hw.to_tensor(_data((2, 4, 16, 16), "float16", 1), device="cuda:0")
        w = hw.to_tensor(_data((8, 4, 3, 3), "float16", 2), device="cuda:0")
        y = F.conv2d(x, w, padding=1)  # cupy temporaries: padding, im2col, float32 accumulation
        s = hw.gather(hw.sum(y, axis=[2, 3]), [0, -1], axis=1)  # (2, 2): the first and last channel's sums
        t = hw.reshape(hw.sum(s.astype("int64"), axis=1), [2, 1, 1])
        z = hw.argmax(F.max_pool2d(y, 2), axis=1) + t  # (2, 8, 8) + (2, 1, 1)
        return z.numpy(), s.numpy(), y.numpy()

    z, s, y = work()  # warm up: compiles, cuBLAS handles
    # the numbers are right: sums against numpy over the GPU's own conv2d output, argmax against numpy's
    y32 = y.astype(np.float32)
    np.testing.assert_allclose(s.astype(np.float32), y32.sum(axis=(2, 3))[:, [0, -1]], rtol=2e-2, atol=0.5)
    pooled = y32.reshape(2, 8, 8, 2, 8, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(z - s.astype(np.int64).sum(axis=1).reshape(2, 1, 1), pooled.argmax(axis=1))
    pool = cupy.get_default_memory_pool()
    used, baseline = pool.total_bytes(), cuda.allocator.stats()["allocated_bytes"]
    for _ in range(3):
        work()
    gc.collect()
    stats = cuda.allocator.stats()
    assert stats["allocated_bytes"] == baseline and stats["num_cache_hits"] > 0
    assert pool.total_bytes() == used, "cupy allocated from its own pool instead of the core's allocator"


@gpu
def test_gpu_compile_error_carries_source_and_log(cuda):
    from hwadapter import kp
    from hwadapter.plugin import CompileError
    backend = cuda.codegen
    source = kp.library.get("exp").source("cuda").replace("expf(", "no_such_function(")
    with pytest.raises(CompileError, match=r"cuda:0: NVRTC .* could not compile kernel 'broken' for sm_") as err:
        backend.compile(source, "broken")
    assert "no_such_function" in err.value.log and err.value.source == source


@gpu
def test_gpu_out_of_memory_names_the_device(cuda):
    from hwadapter.plugin import DeviceArray
    total = cuda.runtime.properties().total_memory
    with pytest.raises(hw.OutOfMemoryError, match=r"cuda:0.*out of memory"):
        DeviceArray.empty(cuda, (2 * total,), np.uint8)
    assert cuda.allocator.stats()["num_oom_retries"] >= 1
    x = hw.ones([1024], device="cuda:0")  # the device still works afterwards
    assert float(hw.sum(x).numpy()) == 1024


@gpu
def test_gpu_compiled_kernels_are_cached_across_processes(cuda, tmp_path):
    code = textwrap.dedent("""
        import numpy as np, hwadapter as hw
        from hwadapter.runtime import cache
        x = hw.to_tensor(np.arange(10, dtype="float32"), device="cuda:0")
        np.testing.assert_allclose(hw.exp(hw.sin(x)).numpy(), np.exp(np.sin(np.arange(10, dtype="float32"))),
                                   rtol=1e-5)
        print(cache.default().hits, cache.default().misses)
    """)
    env = {**os.environ, "HWADAPTER_CACHE_DIR": str(tmp_path), "HWADAPTER_FALLBACK": "error"}
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    (hits1, misses1), (hits2, misses2) = ([int(v) for v in r.stdout.split()] for r in runs)
    assert misses1 >= 2 and hits1 == 0, runs[0].stdout
    assert hits2 == misses1 and misses2 == 0, runs[1].stdout


@gpu
def test_gpu_subgraph_runs_a_hand_built_graph(cuda):
    from hwadapter.graph import GraphBuilder, run
    from hwadapter.plugin import DeviceArray
    g = GraphBuilder()
    x, w, b = g.input("x", (4, 16)), g.input("w", (16, 32)), g.input("b", (32,))
    h = g.op("relu", [g.op("add", [g.op("matmul", [x, w]), b])])
    p = g.op("max_pool2d", [g.op("reshape", [h], shape=(4, 2, 4, 4))], kernel_size=(2, 2), stride=(2, 2),
             padding=(0, 0, 0, 0), ceil_mode=False)
    y = g.op("softmax", [g.op("reshape", [p], shape=(4, 8))], axis=-1)
    n = g.op("layer_norm", [h, g.input("gamma", (32,)), g.input("beta", (32,))], begin_axis=1, epsilon=1e-5)
    graph = g.build([y, n, h])
    backend = cuda.subgraph
    assert backend.supported_nodes(graph) == {node.name for node in graph.nodes}
    arrays = [_data(graph.values[i].shape, "float32", k) for k, i in enumerate(graph.inputs)]
    want = run(graph, dict(zip(graph.inputs, arrays)), device="cpu")
    exe = backend.compile(graph)
    inputs = [DeviceArray.from_numpy(cuda, a) for a in arrays]
    for executable in (exe, exe, backend.deserialize(exe.serialize())):
        for got, name in zip(executable.run(inputs), graph.outputs):
            _assert_close(got.numpy(), want[name].numpy(), name)
