"""Child processes for tests that load native libraries or Paddle: a crash or a hang fails one test, not pytest."""
from __future__ import annotations

from hwadapter.conformance.children import ERROR_OF, result_of  # noqa: F401 (the tests' too)


#: Child code: live_of(path)() -> the bytes device 0 of the device library at `path` has lent out, read through its
#: own memory_info (HwaDeviceInterface: struct_size, the versions, device_type, then memory_info 9th of 1.0's
#: functions). A dlopen of the path the host loaded gives the same library instance.
LIVE_OF = r"""
import ctypes
def live_of(path):
    table = ctypes.CDLL(path).hwadapter_get_device_interface
    table.restype = ctypes.POINTER(ctypes.c_void_p)
    memory_info = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t),
                                   ctypes.POINTER(ctypes.c_size_t))(table()[3 + 8])
    def live():
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        assert memory_info(0, ctypes.byref(free), ctypes.byref(total)) == 0
        return total.value - free.value
    return live
"""
