"""Child processes for tests that load native libraries or Paddle: a crash or a hang fails one test, not pytest."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


def result_of(code: str, timeout: float, env: dict | None = None) -> dict:
    """Run `code` in a child Python with a time limit; the dict it printed as a line RESULT=<json>."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"the child did not finish within {timeout:.0f} s\nstdout:\n{err.stdout}\nstderr:\n{err.stderr}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT="):
            return json.loads(line[len("RESULT="):])
    raise AssertionError(f"the child printed no result (exit {proc.returncode}: a crash?)\nstdout:\n"
                         f"{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")


#: Child code: error_of(fn, *args) -> [error type, message], or None when fn(*args) succeeds.
ERROR_OF = r"""
def error_of(fn, *args):
    try:
        fn(*args)
    except Exception as err:
        return [type(err).__name__, str(err)]
    return None
"""

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
