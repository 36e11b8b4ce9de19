"""The native C ABI: a vendor's C library implementing device_api.h, loaded and checked by hwadapter._native.

Two libraries: a small one written here (its variants built with -D flags: a 1.0 table, a missing function, half the
stream functions, a kernel that fails or sleeps), and the example plugin examples/native_plugin (cdemo), installed
into a temporary site directory through its entry point like a vendor's package."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import plugin
from hwadapter.api.interfaces import HostStream
from hwadapter.runtime.native import NativeRuntime, load_library

ROOT = Path(__file__).parents[1]
HEADER_DIR = ROOT / "core" / "hwadapter" / "include"
EXAMPLE = ROOT / "examples" / "native_plugin"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build a test device library")

LIBRARY = r"""
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "hwadapter/device_api.h"
static size_t used = 0;
static const size_t LIMIT = 1 << 20;
static _Thread_local const char *msg = 0;
static int count(int *n) { *n = 1; return HWA_OK; }
static int alloc(int d, size_t n, void **p) {
  if (used + n > LIMIT) return HWA_OUT_OF_MEMORY;
  size_t *b = malloc(n + sizeof(size_t)); if (!b) return HWA_OUT_OF_MEMORY;
  b[0] = n; used += n; *p = b + 1; return HWA_OK; }
static int dealloc(int d, void *p) { size_t *b = (size_t *)p - 1; used -= b[0]; free(b); return HWA_OK; }
static int cp(int d, void *dst, const void *src, size_t n) { memcpy(dst, src, n); return HWA_OK; }
static int set(int d, void *dst, int v, size_t n) { memset(dst, v, n); return HWA_OK; }
static int sync_(int d) { return HWA_OK; }
static int info(int d, size_t *f, size_t *t) { *f = LIMIT - used; *t = LIMIT; return HWA_OK; }
static int s_new(int d, HwaStream *s) { *s = (HwaStream)malloc(1); return HWA_OK; }
static int s_del(int d, HwaStream s) { free(s); return HWA_OK; }
static const char *last(void) { return msg; }
static int broken(int d, HwaStream s, const HwaTensor *in, size_t nin, HwaTensor *out, size_t nout,
                  const HwaAttr *a, size_t na) { msg = "the test kernel refuses"; return HWA_ERROR; }
static int slow_neg(int d, HwaStream s, const HwaTensor *in, size_t nin, HwaTensor *out, size_t nout,
                    const HwaAttr *a, size_t na) {
  usleep(300000);  /* a kernel that takes long: two threads overlap only if the core released the GIL */
  const float *x = in[0].data; float *o = out->data;
  for (int64_t i = 0; i < out->shape[0]; ++i) o[i] = -x[i];
  return HWA_OK; }
#ifdef U64_KERNEL  /* HWA_UINT64 came with a later 1.2 header: the 1.1 one (tests/native/v1_1) has no such code */
static int add_u64(int d, HwaStream s, const HwaTensor *in, size_t nin, HwaTensor *out, size_t nout,
                   const HwaAttr *a, size_t na) {
  if (in[0].dtype != HWA_UINT64 || in[1].dtype != HWA_UINT64 || out->dtype != HWA_UINT64) {
    msg = "add_u64: a tensor is not HWA_UINT64"; return HWA_ERROR; }
  const uint64_t *x = in[0].data, *y = in[1].data; uint64_t *o = out->data;
  for (int64_t i = 0; i < out->shape[0]; ++i) o[i] = x[i] + y[i];
  return HWA_OK; }
static const int32_t U64_U64[] = {HWA_UINT64, HWA_UINT64};
#endif
static const int32_t F32[] = {HWA_FLOAT32};
static const HwaKernelDef kernels[] = {{KERNEL_OP, 1, F32, broken}, {"neg", 1, F32, slow_neg},
#ifdef U64_KERNEL
                                       {"add", 2, U64_U64, add_u64},
#endif
};
static HwaDeviceInterface api = {sizeof(HwaDeviceInterface), MAJOR, MINOR, "ctest",
                                 count, alloc, dealloc, cp, D2H, cp, set, sync_, info};
const HwaDeviceInterface *hwadapter_get_device_interface(void) {
#ifdef TABLE_1_0  /* as a library built against the 1.0 header: what lies past its size must never be read */
  api.struct_size = offsetof(HwaDeviceInterface, initialize);
  api.num_kernels = 1000; api.kernels = (const HwaKernelDef *)8; api.stream_create = (void *)8;
#endif
#ifdef HALF_STREAMS
  api.stream_create = s_new; api.stream_destroy = s_del;
#endif
#ifdef KERNELS
  api.last_error = last; api.num_kernels = sizeof(kernels) / sizeof(kernels[0]); api.kernels = kernels;
#endif
  return &api; }
"""


def _build(tmp_path, major=1, minor=0, name="libctest.so", defines=(), d2h="cp", kernel_op="relu"):
    src = tmp_path / f"{name}.c"
    src.write_text(LIBRARY.replace("MAJOR", str(major)).replace("MINOR", str(minor)).replace("D2H", d2h)
                   .replace("KERNEL_OP", f'"{kernel_op}"'))
    lib = tmp_path / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{HEADER_DIR}", *[f"-D{d}" for d in defines], str(src), "-o",
                    str(lib)], check=True)
    return lib


def _site(tmp_path, dist: str, entry: str, files: dict) -> Path:
    """A site directory with `files` (name -> text or a Path to copy) and a .dist-info whose entry point is `entry`."""
    site = tmp_path / f"site-{dist}"
    site.mkdir()
    for name, content in files.items():
        target = site / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copy(content, target)
        else:
            target.write_text(content)
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[hwadapter.plugins]\n{entry}\n")
    return site


def test_header_and_extension_agree_with_the_python_api():
    from hwadapter import _native
    header = (HEADER_DIR / "hwadapter" / "device_api.h").read_text()
    major = int(re.search(r"#define HWA_API_MAJOR (\d+)", header).group(1))
    minor = int(re.search(r"#define HWA_API_MINOR (\d+)", header).group(1))
    assert _native.API_VERSION == (major, minor) == plugin.NATIVE_API_VERSION == (1, 2)  # the C ABI, versioned apart
    # every dtype hwadapter has, with the numbers of the header (which are Paddle's C_DataType's)
    codes = {name.lower(): int(v) for name, v in re.findall(r"HWA_(BOOL|U?INT\d+|FLOAT\d+) = (\d+)", header)}
    assert _native.DTYPES == codes and set(codes) == {d.name for d in hw.dtypes.ALL}


def test_library_round_trip_memset_and_oom(tmp_path):
    rt = NativeRuntime(load_library(_build(tmp_path)), 0)
    # Expected values come from the host input alone, fixed before anything touches the device (and in arrays
    # the runtime never sees), so a copy that drops, zeroes or scrambles data cannot agree with them.
    data = np.arange(1000, dtype=np.float64) * 1.5 + 1
    expected = np.arange(1000, dtype=np.float64) * 1.5 + 1
    expected_after_memset = expected.copy()
    expected_after_memset[1] = 0  # bytes 8..15, element 1, set to 0
    a, b = rt.allocate(data.nbytes), rt.allocate(data.nbytes)
    rt.copy_h2d(a, 0, data)
    out = np.full_like(data, np.nan)
    rt.copy_d2h(out, a, 0)
    np.testing.assert_array_equal(out, expected)  # host -> device -> host
    rt.copy_d2d(b, 0, a, 0, data.nbytes)
    out = np.full_like(data, np.nan)
    rt.copy_d2h(out, b, 0)
    np.testing.assert_array_equal(out, expected)  # ... -> device -> device -> host
    rt.memset(b, 8, 0, 8)
    out = np.full_like(data, np.nan)
    rt.copy_d2h(out, b, 0)
    np.testing.assert_array_equal(out, expected_after_memset)
    np.testing.assert_array_equal(data, expected)  # the copies left the host source alone
    assert rt.memory_info() == ((1 << 20) - 2 * data.nbytes, 1 << 20)
    with pytest.raises(hw.OutOfMemoryError, match="out of memory|allocate of 2097152 bytes"):
        rt.allocate(2 << 20)
    rt.free(a)
    rt.free(b)
    assert rt.memory_info()[0] == 1 << 20


@pytest.mark.parametrize("major,minor", [(2, 0), (1, 7), (0, 9)])
def test_incompatible_library_is_rejected_with_the_versions(tmp_path, major, minor):
    with pytest.raises(hw.DeviceUnavailableError, match=rf"implements device API {major}\.{minor}, this hwadapter "
                                                        rf"provides 1\.2.*rebuild it"):
        load_library(_build(tmp_path, major, minor))


def test_a_1_0_table_loads_and_nothing_past_its_size_is_read(tmp_path):
    # The 1.0 library sets junk past its struct_size (1000 kernels at address 8, a stream function at 8): reading any
    # of it would crash or register kernels. It must load as a 1.0 table: no streams, properties or kernels.
    lib = load_library(_build(tmp_path, 1, 0, defines=["TABLE_1_0"]))
    assert lib.api_version == (1, 0) and lib.struct_size < hw._native.STRUCT_SIZE
    assert not lib.has_streams and lib.properties(0) is None and lib.kernels() == []
    rt = NativeRuntime(lib, 0)
    assert isinstance(rt.create_stream(), HostStream) and rt.properties().total_memory == 1 << 20
    host = np.arange(5, dtype=np.int32)
    h = rt.allocate(host.nbytes)
    rt.copy_h2d(h, 0, host, rt.create_stream())  # a stream of a 1.0 library: the synchronous copy
    out = np.zeros(5, np.int32)
    rt.copy_d2h(out, h, 0)
    rt.free(h)
    np.testing.assert_array_equal(out, np.arange(5))


def test_a_missing_required_function_is_named(tmp_path):
    with pytest.raises(hw.DeviceUnavailableError, match="required function memcpy_d2h empty"):
        load_library(_build(tmp_path, d2h="NULL"))


def test_half_of_the_stream_functions_is_refused_naming_the_rest(tmp_path):
    with pytest.raises(hw.DeviceUnavailableError, match=r"leaves stream_synchronize stream_query .*event_synchronize "
                                                        r"empty: streams and events are all ten functions or none"):
        load_library(_build(tmp_path, 1, 1, defines=["HALF_STREAMS"]))


def test_missing_library_is_a_clear_error(tmp_path):
    with pytest.raises(hw.DeviceUnavailableError, match="cannot load"):
        load_library(tmp_path / "nope.so")


def test_native_plugin_through_an_entry_point(tmp_path, monkeypatch, reset_plugins):
    lib = _build(tmp_path)
    site = _site(tmp_path, "hwadapter_ctest", "ctest = ctest_shim:CTestPlugin", {
        "ctest_shim.py": f"from hwadapter.plugin import NativePlugin\nclass CTestPlugin(NativePlugin):\n"
                         f"    api_version = (2, 0)\n    library = {str(lib)!r}\n"})
    monkeypatch.syspath_prepend(str(site))
    reset_plugins()
    host = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    expected_x, expected_y = host.copy(), np.exp(host) + host  # from the host input, before the device sees it
    x = hw.to_tensor(host, device="ctest:0")
    np.testing.assert_array_equal(x.numpy(), expected_x)  # the round trip itself
    y = hw.exp(x) + x  # no kernels: both ops fall back to the CPU, loudly
    np.testing.assert_allclose(y.numpy(), expected_y, rtol=1e-6)
    assert hw.profiler.fallback_count(device="ctest:0") == 2
    from hwadapter.runtime.discovery import registry
    assert "op" not in registry.get("ctest").plugin.levels()  # a library without kernels claims no op level
    del x, y


def test_a_kernel_failure_carries_the_librarys_message(tmp_path, monkeypatch, reset_plugins):
    lib = _build(tmp_path, 1, 1, defines=["KERNELS"])
    site = _site(tmp_path, "hwadapter_ctest", "ctest = ctest_kernels_shim:CTestPlugin", {  # a module name of its own:
        "ctest_kernels_shim.py": f"from hwadapter.plugin import NativePlugin\nclass CTestPlugin(NativePlugin):\n"
                         f"    api_version = (2, 0)\n    library = {str(lib)!r}\n"})
    monkeypatch.syspath_prepend(str(site))
    reset_plugins()
    x = hw.to_tensor(np.array([-1.0, 2.0], np.float32), device="ctest:0")
    with pytest.raises(hw.KernelExecutionError, match="kernel for relu failed with status 1: the test kernel refuses"):
        hw.relu(x)


def test_a_uint64_kernel_gets_its_dtype_code_and_wraps(tmp_path):
    """HWA_UINT64 (Paddle's C_DataType code 5) reaches the kernel for uint64 tensors; its sums wrap as numpy's."""
    from hwadapter.api.interfaces import KernelRegistrar, KernelTable
    from hwadapter.runtime import native_kernels
    from hwadapter.runtime.memory import DeviceArray
    lib = load_library(_build(tmp_path, 1, 1, defines=["KERNELS", "U64_KERNEL"]))
    device = _StubDevice(NativeRuntime(lib, 0))
    table = KernelTable()
    native_kernels.register(lib, KernelRegistrar(table, device))
    u64 = np.dtype(np.uint64)
    add = table.find("add", (u64, u64))
    assert table.find("add", (np.dtype(np.int64),) * 2) is None  # registered for uint64 only
    x = np.array([2 ** 64 - 1, 2 ** 63, 5], np.uint64)
    y = np.array([2, 2 ** 63 + 1, 7], np.uint64)
    out = add(DeviceArray.from_numpy(device, x), DeviceArray.from_numpy(device, y))
    assert out.dtype == u64
    np.testing.assert_array_equal(out.numpy(), x + y)


def test_kernels_run_without_the_gil(tmp_path):
    # Two threads each run a kernel that sleeps 0.3 s in C: together in well under 0.6 s only if the GIL is released.
    from hwadapter.api.interfaces import KernelRegistrar, KernelTable
    from hwadapter.runtime import native_kernels
    from hwadapter.runtime.memory import DeviceArray
    lib = load_library(_build(tmp_path, 1, 1, defines=["KERNELS"]))
    device = _StubDevice(NativeRuntime(lib, 0))
    table = KernelTable()
    native_kernels.register(lib, KernelRegistrar(table, device))
    neg = table.find("neg", (np.dtype(np.float32),))
    x = DeviceArray.from_numpy(device, np.arange(4, dtype=np.float32))
    results = []
    threads = [threading.Thread(target=lambda: results.append(neg(x).numpy())) for _ in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    assert len(results) == 2 and all(np.array_equal(r, -np.arange(4)) for r in results)
    assert elapsed < 0.5, f"two 0.3 s kernels took {elapsed:.2f} s: the GIL was held"


class _StubDevice:
    """The little of a Device that DeviceArray and the native kernels use: an index, a runtime, an allocator."""

    type = "ctest"
    index = 0
    host_memory = False

    def __init__(self, runtime):
        from hwadapter.runtime.allocator import CachingAllocator
        self.runtime = runtime
        self._allocator = self.allocator = CachingAllocator(runtime, "ctest:0")


# --- the example plugin, examples/native_plugin -----------------------------------------------------------------
@pytest.fixture(scope="module")
def cdemo_site(tmp_path_factory):
    """examples/native_plugin installed by pip into a folder of its own (--target): its setup.py builds the library
    with the system compiler; the checkout's venv is left as it was. About 3 s."""
    pytest.importorskip("setuptools", reason="pip builds the example with the environment's setuptools")
    tmp = tmp_path_factory.mktemp("cdemo")
    src, site = tmp / "src", tmp / "site"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    env = {**os.environ, "HWADAPTER_INCLUDE": str(HEADER_DIR), "CC": "gcc"}  # the copy is outside the checkout
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(site), str(src)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"pip install of examples/native_plugin failed:\n{proc.stdout}\n{proc.stderr}"
    assert (site / "hwadapter_cdemo" / "libhwadapter_cdemo.so").exists()
    return site


@pytest.fixture
def cdemo(cdemo_site, monkeypatch, reset_plugins):
    """The cdemo plugin installed for this test (and for child processes through PYTHONPATH)."""
    monkeypatch.syspath_prepend(str(cdemo_site))
    monkeypatch.setenv("PYTHONPATH", str(cdemo_site))
    reset_plugins()
    return cdemo_site


def _on(device, *arrays):
    return [hw.to_tensor(a, device=device) for a in arrays]


def test_cdemo_kernels_give_numpys_results(cdemo):
    rng = np.random.default_rng(0)
    f = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    special = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 3e38, -1.0], np.float32)
    i64 = np.array([np.iinfo(np.int64).max, np.iinfo(np.int64).min, -3, 0, 7], np.int64)
    cases = [  # (op, host inputs, attrs)
        ("add", (f(3, 4), f(4)), {}), ("add", (f(2, 1, 3), f(5, 1)), {}), ("mul", (f(3, 1), f(1, 4)), {}),
        ("add", (special, special[::-1].copy()), {}), ("mul", (special, special[::-1].copy()), {}),
        ("add", (f(), f(2, 2)), {}), ("mul", (f(0, 3), f(3)), {}),
        ("add", (i64, i64[::-1].copy()), {}), ("mul", (i64, np.array([2], np.int64)), {}),
        ("relu", (f(4, 5),), {}), ("relu", (special,), {}), ("relu", (f(),), {}),
        ("matmul", (f(3, 4), f(4, 5)), {}), ("matmul", (f(4), f(4, 2)), {}), ("matmul", (f(3, 4), f(4)), {}),
        ("matmul", (f(4), f(4)), {}), ("matmul", (f(2, 1, 3, 4), f(5, 4, 2)), {}), ("matmul", (f(3, 0), f(0, 2)), {}),
        ("matmul", (f(4, 3), f(5, 4)), {"transpose_x": True, "transpose_y": True}),
        ("matmul", (f(2, 3, 4), f(3)), {"transpose_x": True}),
    ]
    reference = {"add": np.add, "mul": np.multiply, "relu": lambda x: np.maximum(x, 0),
                 "matmul": plugin.reference.matmul}
    for op, host, attrs in cases:
        with np.errstate(all="ignore"):
            expected = reference[op](*host, **attrs)  # before the device sees the inputs
        got = getattr(hw, {"mul": "multiply"}.get(op, op))(*_on("cdemo:0", *host), **attrs).numpy()
        assert got.shape == expected.shape and got.dtype == expected.dtype, (op, attrs, got.shape, expected.shape)
        if op == "matmul":
            np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=f"{op} {attrs}")
        else:
            np.testing.assert_array_equal(got, expected, err_msg=f"{op} {attrs}")
    assert hw.profiler.fallback_count(device="cdemo:0") == 0  # every case ran on the library's kernels


def test_cdemo_runtime_streams_events_errors_and_oom(cdemo):
    from hwadapter.runtime.device import devices
    rt = devices.get("cdemo:1").runtime
    props = rt.properties()
    assert (props.name, props.vendor, props.extra["native_api"]) == ("cdemo emulated device 1", "hwadapter examples",
                                                                     (1, 2))
    free0, total = rt.memory_info()
    assert total == props.total_memory == 256 << 20
    host = np.arange(1000, dtype=np.float32)
    expected = np.arange(1000, dtype=np.float32)
    a, b = rt.allocate(host.nbytes), rt.allocate(host.nbytes)
    s1, s2, ev = rt.create_stream(), rt.create_stream(), rt.create_event()
    rt.copy_h2d(a, 0, host, s1)
    ev.record(s1)
    s2.wait_event(ev)  # s2's copy comes after s1's upload
    rt.copy_d2d(b, 0, a, 0, host.nbytes, s2)
    rt.memset(b, 0, 0, 4, s2)
    out = np.full_like(host, -1)
    rt.copy_d2h(out, b, 0, s2)
    s2.synchronize()
    assert ev.query() and s1.query()
    expected[0] = 0
    np.testing.assert_array_equal(out, expected)
    assert rt.memory_info()[0] == free0 - 2 * host.nbytes
    rt.free(a)
    with pytest.raises(hw.InvalidArgumentError, match="is not a live allocation of device 1 .freed twice"):
        rt.free(a)  # a double free: the library's message in hwadapter's error, and no crash
    with pytest.raises(hw.InvalidArgumentError, match="not inside a live allocation"):
        rt.copy_d2h(out, a, 0)  # reading freed memory is refused too
    rt.free(b)
    assert rt.memory_info()[0] == free0
    with pytest.raises(hw.OutOfMemoryError, match=r"device 1 has \d+ of 268435456 bytes free"):
        rt.allocate(total + 1)
    with pytest.raises(hw.OutOfMemoryError):  # through the core's allocator, which retries once after emptying its cache
        hw.zeros([total // 4 + 1024], dtype="float32", device="cdemo:1")
    lib = rt.lib  # the current device is per thread (Paddle's set_device/get_device)
    lib.set_device(1)
    seen = []
    t = threading.Thread(target=lambda: seen.append(lib.get_device()))
    t.start()
    t.join()
    assert lib.get_device() == 1 and seen == [0]


def test_cdemo_passes_the_kits_runtime_kernels_and_native_sections(cdemo):
    # The kit runs each section in a child process, which finds cdemo through PYTHONPATH (set by the fixture).
    from hwadapter import conformance
    result = conformance.run("cdemo", ["runtime", "kernels", "native"], timeout=120, progress=False)
    summary = {name: (s.status, s.passed, s.failed, s.error) for name, s in result.sections.items()}
    assert result.ok, f"{summary}\n" + "\n".join(f"{f.test}: {f.message}\n  {f.reproducer}" for f in result.failures)
    assert result.sections["kernels"].passed >= 4 and result.sections["runtime"].passed >= 20, summary
    assert result.sections["native"].passed == 3, summary  # its own library, its memory serving its C kernels
