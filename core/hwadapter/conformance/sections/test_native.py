"""The native library for hosts outside Python (Plugin.native_library: the Paddle bridge's way in): it loads, its
memory round-trips through hwadapter's NativeRuntime, and that memory serves the plugin's own kernels (host memory
as numpy views, else Runtime.adopt) as a host's would. Skipped when the plugin offers no native library.

Each check runs in a child process with a time limit: a host initializes the library before the plugin opens its
device (the OpenCL plugin then shares the library's context), and a crash in C fails one test, not the kit.
"""
from __future__ import annotations

import pytest

from ..children import ERROR_OF, result_of

CHILD_TIMEOUT = 120

# The host's side (a NativeRuntime over the library, initialised first) and the plugin's (its device, opened after).
PRELUDE = r"""
import ctypes, json, sys
import numpy as np
from hwadapter.runtime.discovery import registry
from hwadapter.runtime.native import NativeRuntime, load_library
kind = sys.argv[1]
host = NativeRuntime(load_library(registry.get(kind).plugin.native_library()), 0)
out = {}
""" + ERROR_OF

ROUND_TRIP = r"""
rng = np.random.default_rng(0)
data = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
free0 = host.memory_info()[0]
a, b = host.allocate(data.nbytes), host.allocate(data.nbytes)
host.copy_h2d(a, 0, data)
host.copy_d2d(b, 0, a, 0, data.nbytes)
host.memset(b, 100, 7, 50)
got = np.empty_like(data)
host.copy_d2h(got, b, 0)
want = data.copy()
want[100:150] = 7
out["round trip"] = bool(np.array_equal(got, want))
host.free(a)
host.free(b)
out["double free"] = error_of(host.free, a)
out["freed"] = host.memory_info()[0] - free0
"""

KERNELS = r"""
from hwadapter.device import devices
from hwadapter.dispatch.dispatcher import own
from hwadapter.plugin import DeviceArray, Runtime
dev = devices.get(f"{kind}:0")
out["serves"] = dev.host_memory or type(dev.runtime).adopt is not Runtime.adopt
def lend(address, like):
    # the library's memory as the plugin's array: what a host's Python kernels receive
    if dev.host_memory:
        raw = np.ctypeslib.as_array((ctypes.c_char * like.nbytes).from_address(address))
        return raw.view(np.uint8).view(like.dtype).reshape(like.shape)
    return DeviceArray.adopt(dev, address, like.shape, like.dtype)
def into(address, result):
    if dev.host_memory:
        np.copyto(lend(address, result), result)
    else:
        dev.runtime.copy_d2d(lend(address, result).handle, 0, result.handle, 0, result.nbytes)
if out["serves"]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((33, 17)).astype(np.float32)
    y = rng.standard_normal(17).astype(np.float32)
    slab = host.allocate(1 << 16)  # one allocation, used at offsets: hosts sub-allocate so (Paddle does)
    px, py, po = slab, slab + 4096, slab + 8192 + 64  # the output 64 bytes past an aligned offset
    host.copy_h2d(px, 0, x)
    host.copy_h2d(py, 0, y)
    f32 = np.dtype(np.float32)
    for op, want in (("add", x + y), ("mul", x * y)):
        fn = own(op, dev, (f32, f32))
        if fn is None:
            continue
        into(po, np.asarray(fn(lend(px, x), lend(py, y))) if dev.host_memory else fn(lend(px, x), lend(py, y)))
        got = np.empty_like(x)
        host.copy_d2h(got, po, 0)
        out[op] = bool(np.array_equal(got, want))
    host.free(slab)
"""


def _child(code: str, kind: str) -> dict:
    """PRELUDE + code for device type `kind` in a child Python with a time limit: the dict it printed."""
    return result_of(PRELUDE + code + '\nprint("RESULT=" + json.dumps(out))\n', CHILD_TIMEOUT, (kind,),
                     what="the child using the native library")


@pytest.fixture(scope="module")
def library(kit_type):
    """The path of the plugin's native library; the section is skipped when there is none."""
    from hwadapter.api.errors import DeviceUnavailableError
    from hwadapter.runtime.discovery import registry
    plugin = registry.get(kit_type).plugin
    try:
        path = plugin.native_library()
    except DeviceUnavailableError as err:
        pytest.skip(f"{kit_type}'s native library is unavailable here: {err}")
    if path is None:
        pytest.skip(f"{kit_type} offers no native library (Plugin.native_library): hosts outside Python, such as the "
                    f"Paddle bridge, cannot use it")
    return path


def test_the_library_loads(library, kit_type):
    from hwadapter.runtime.native import load_library
    lib = load_library(library)
    assert lib.device_count() >= 1, f"{library} reports no devices where the {kit_type} plugin has some"


def test_memory_round_trips_through_the_library(library, kit_type):
    """allocate, copies in every direction, memset and free as a host calls them; a double free is an error."""
    r = _child(ROUND_TRIP, kit_type)
    assert r["round trip"], "copies or memset through the native library changed the bytes"
    assert r["double free"], "freeing an allocation twice through the native library raised nothing"
    assert r["freed"] == 0, f"memory_info's free bytes moved by {r['freed']} after allocate and free"


def test_the_librarys_memory_serves_the_plugins_kernels(library, kit_type):
    """The plugin's add and mul on the library's memory (at offsets inside one allocation), as a host's Python
    kernels run them: numpy's results, read back through the library."""
    r = _child(KERNELS, kit_type)
    if not r["serves"]:
        pytest.skip(f"{kit_type}'s runtime neither keeps host memory nor adopts the library's (Runtime.adopt): a "
                    f"host runs only the library's C kernels")
    ran = [op for op in ("add", "mul") if op in r]
    assert ran, f"{kit_type} runs neither add nor mul itself"
    assert all(r[op] for op in ran), f"on the library's memory: {r}"
