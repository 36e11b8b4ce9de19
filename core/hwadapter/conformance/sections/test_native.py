"""The native library for hosts outside Python (Plugin.native_library: the Paddle bridge's way in): it loads, its
memory round-trips through hwadapter's NativeRuntime, and that memory serves the plugin's own kernels (host memory
as numpy views, else Runtime.adopt) as a host's would. Skipped when the plugin offers no native library.

Each check runs in a child process with a time limit: a host initializes the library before the plugin opens its
device (the OpenCL plugin then shares the library's context), and a crash in C fails one test, not the kit.
"""
from __future__ import annotations

import pytest

from hwadapter import host
from hwadapter.plugin import DeviceUnavailableError

from ..children import ERROR_OF, result_of

CHILD_TIMEOUT = 120

# The host's side (a NativeRuntime over the library, initialised first) and the plugin's (its device, opened after).
PRELUDE = r"""
import json, sys
import numpy as np
from hwadapter import host
kind = sys.argv[1]
lib = host.native_runtime(host.plugin_record(kind).plugin.native_library(), 0)
out = {}
""" + ERROR_OF

ROUND_TRIP = r"""
rng = np.random.default_rng(0)
data = rng.integers(0, 256, 1 << 16, dtype=np.uint8)
free0 = lib.memory_info()[0]
a, b = lib.allocate(data.nbytes), lib.allocate(data.nbytes)
lib.copy_h2d(a, 0, data)
lib.copy_d2d(b, 0, a, 0, data.nbytes)
lib.memset(b, 100, 7, 50)
got = np.empty_like(data)
lib.copy_d2h(got, b, 0)
want = data.copy()
want[100:150] = 7
out["round trip"] = bool(np.array_equal(got, want))
lib.free(a)
lib.free(b)
out["double free"] = error_of(lib.free, a)
out["freed"] = lib.memory_info()[0] - free0
"""

KERNELS = r"""
dev = host.device(f"{kind}:0")
out["serves"] = host.accepts_native_memory(dev)
def into(address, result):
    # the kernel's result copied into the library's memory at address, as a host's output
    if dev.host_memory:
        np.copyto(host.native_array(dev, address, result.shape, result.dtype), result)
    else:
        dev.runtime.copy_d2d(host.adopt(dev, address, result.shape, result.dtype).handle, 0, result.handle, 0,
                             result.nbytes)
if out["serves"]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((33, 17)).astype(np.float32)
    y = rng.standard_normal(17).astype(np.float32)
    slab = lib.allocate(1 << 16)  # one allocation, used at offsets: hosts sub-allocate so (Paddle does)
    px, py, po = slab, slab + 4096, slab + 8192 + 64  # the output 64 bytes past an aligned offset
    lib.copy_h2d(px, 0, x)
    lib.copy_h2d(py, 0, y)
    for op, want in (("add", x + y), ("mul", x * y)):
        fn = host.own_kernel(op, dev, (np.float32, np.float32))
        if fn is None:
            continue
        result = fn(host.native_array(dev, px, x.shape, x.dtype), host.native_array(dev, py, y.shape, y.dtype))
        into(po, np.asarray(result) if dev.host_memory else result)
        got = np.empty_like(x)
        lib.copy_d2h(got, po, 0)
        out[op] = bool(np.array_equal(got, want))
    lib.free(slab)
"""


def _child(code: str, kind: str) -> dict:
    """PRELUDE + code for device type `kind` in a child Python with a time limit: the dict it printed."""
    return result_of(PRELUDE + code + '\nprint("RESULT=" + json.dumps(out))\n', CHILD_TIMEOUT, (kind,),
                     what="the child using the native library")


@pytest.fixture(scope="module")
def library(kit_type):
    """The path of the plugin's native library; the section is skipped when there is none."""
    plugin = host.plugin_record(kit_type).plugin
    try:
        path = plugin.native_library()
    except DeviceUnavailableError as err:
        pytest.skip(f"{kit_type}'s native library is unavailable here: {err}")
    if path is None:
        pytest.skip(f"{kit_type} offers no native library (Plugin.native_library): hosts outside Python, such as the "
                    f"Paddle bridge, cannot use it")
    return path


def test_the_library_loads(library, kit_type):
    lib = host.load_library(library)
    assert lib.device_count() >= 1, (f"{library} (Plugin.native_library()) reports no devices where the {kit_type} "
                                     f"plugin has some: its device_count must count the devices the plugin offers")


def test_memory_round_trips_through_the_library(library, kit_type):
    """allocate, copies in every direction, memset and free as a host calls them; a double free is an error."""
    r = _child(ROUND_TRIP, kit_type)
    repro = (f"Reproduce: from hwadapter import host; lib = host.native_runtime({library!r}); h = lib.allocate(64); "
             f"lib.free(h); lib.free(h)")
    assert r["round trip"], (f"copy_h2d, copy_d2d, memset(b, 100, 7, 50) and copy_d2h through {library} read back "
                             f"other bytes than were written: the library's copies and memset must move bytes "
                             f"unchanged, at their offsets")
    assert r["double free"], (f"freeing an allocation twice through {library} returned success: its free must fail "
                              f"(an error code and a last-error message) for a pointer that is not live. {repro}")
    assert r["freed"] == 0, (f"memory_info's free bytes moved by {r['freed']} after allocate and free through "
                             f"{library}: free must give back exactly what allocate took")


def test_the_librarys_memory_serves_the_plugins_kernels(library, kit_type):
    """The plugin's add and mul on the library's memory (at offsets inside one allocation), as a host's Python
    kernels run them: numpy's results, read back through the library."""
    r = _child(KERNELS, kit_type)
    if not r["serves"]:
        pytest.skip(f"{kit_type}'s runtime neither keeps host memory nor adopts the library's (Runtime.adopt): a "
                    f"host runs only the library's C kernels")
    ran = [op for op in ("add", "mul") if op in r]
    assert ran, f"{kit_type} runs neither add nor mul (float32) itself: this check needs one of them"
    wrong = [op for op in ran if not r[op]]
    assert not wrong, (f"{', '.join(wrong)} (float32) on {library}'s memory (inputs and output at offsets inside one "
                       f"allocation, lent with hwadapter.host.native_array) differ from numpy's: the runtime must "
                       f"address memory the library allocated, at any offset (Runtime.adopt, or host memory)")
