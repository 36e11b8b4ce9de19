"""The native C ABI: a vendor's C library implementing device_api.h, loaded and checked by hwadapter._native."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import hwadapter as hw
from hwadapter import plugin
from hwadapter.runtime.native import NativeRuntime, load_library

HEADER_DIR = Path(__file__).parents[1] / "core" / "native" / "include"
pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build a test device library")

LIBRARY = r"""
#include <stdlib.h>
#include <string.h>
#include "hwadapter/device_api.h"
static size_t used = 0;
static const size_t LIMIT = 1 << 20;
static int count(int *n) { *n = 1; return HWA_OK; }
static int alloc(int d, size_t n, void **p) {
  if (used + n > LIMIT) return HWA_OUT_OF_MEMORY;
  size_t *b = malloc(n + sizeof(size_t)); if (!b) return HWA_OUT_OF_MEMORY;
  b[0] = n; used += n; *p = b + 1; return HWA_OK; }
static int dealloc(int d, void *p) { size_t *b = (size_t *)p - 1; used -= b[0]; free(b); return HWA_OK; }
static int cp(int d, void *dst, const void *src, size_t n) { memcpy(dst, src, n); return HWA_OK; }
static int set(int d, void *dst, int v, size_t n) { memset(dst, v, n); return HWA_OK; }
static int sync(int d) { return HWA_OK; }
static int info(int d, size_t *f, size_t *t) { *f = LIMIT - used; *t = LIMIT; return HWA_OK; }
static HwaDeviceInterface api = {sizeof(HwaDeviceInterface), MAJOR, MINOR, "ctest",
                                 count, alloc, dealloc, cp, cp, cp, set, sync, info};
const HwaDeviceInterface *hwadapter_get_device_interface(void) { return &api; }
"""


def _build(tmp_path, major=1, minor=0, name="libctest.so"):
    src = tmp_path / "ctest.c"
    src.write_text(LIBRARY.replace("MAJOR", str(major)).replace("MINOR", str(minor)))
    lib = tmp_path / name
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", f"-I{HEADER_DIR}", str(src), "-o", str(lib)], check=True)
    return lib


def test_header_and_extension_agree_with_the_python_api():
    from hwadapter import _native
    header = (HEADER_DIR / "hwadapter" / "device_api.h").read_text()
    major = int(re.search(r"#define HWA_API_MAJOR (\d+)", header).group(1))
    minor = int(re.search(r"#define HWA_API_MINOR (\d+)", header).group(1))
    assert _native.API_VERSION == (major, minor) == plugin.NATIVE_API_VERSION  # the C ABI, versioned apart


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
    with pytest.raises(hw.OutOfMemoryError, match="out of memory"):
        rt.allocate(2 << 20)
    rt.free(a)
    rt.free(b)
    assert rt.memory_info()[0] == 1 << 20


@pytest.mark.parametrize("major,minor", [(2, 0), (1, 7)])
def test_incompatible_library_is_rejected_with_the_versions(tmp_path, major, minor):
    with pytest.raises(hw.DeviceUnavailableError, match=rf"implements device API {major}\.{minor}"):
        load_library(_build(tmp_path, major, minor))


def test_missing_library_is_a_clear_error(tmp_path):
    with pytest.raises(hw.DeviceUnavailableError, match="cannot load"):
        load_library(tmp_path / "nope.so")


def test_native_plugin_through_an_entry_point(tmp_path, monkeypatch, reset_plugins):
    lib = _build(tmp_path)
    (tmp_path / "ctest_shim.py").write_text(
        "from hwadapter.plugin import NativePlugin\n"
        f"class CTestPlugin(NativePlugin):\n    library = {str(lib)!r}\n")
    info = tmp_path / "hwadapter_ctest-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: hwadapter-ctest\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[hwadapter.plugins]\nctest = ctest_shim:CTestPlugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    reset_plugins()
    host = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    expected_x, expected_y = host.copy(), np.exp(host) + host  # from the host input, before the device sees it
    x = hw.to_tensor(host, device="ctest:0")
    np.testing.assert_array_equal(x.numpy(), expected_x)  # the round trip itself
    y = hw.exp(x) + x  # no kernels: both ops fall back to the CPU, loudly
    np.testing.assert_allclose(y.numpy(), expected_y, rtol=1e-6)
    assert hw.profiler.fallback_count(device="ctest:0") == 2
    del x, y
