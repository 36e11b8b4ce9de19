"""`call(entry, a0, a1, template, a3, a4, images, slot, array, step, ...)`: one call from Python into the tuned kernels'
C entry points (calls.c, a CPython function compiled with the running Python's headers), the arrays' pointers read in
C; where it cannot be built (no Python headers, no compiler) the same call through ctypes, slower. `run(program,
arena, inputs)`: a segment's kernels (segments.py), all in one call."""
from __future__ import annotations

import ctypes
import logging
import sys
import sysconfig
import threading
from pathlib import Path

import numpy as np

from hwadapter.plugin import load_source

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("calls.c")
#: the entry points call() runs: (a0, a1, int64 parameters, a3, a4) -> int64, nonzero when it failed
ENTRY = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64,
                         ctypes.c_int64)
_made: dict = {}
_lock = threading.Lock()
_char = ctypes.c_char.from_buffer


def caller(device):
    """`device`'s call function: calls.c's, else the ctypes form (saying why once)."""
    return _functions(device)[0]


def runner(device):
    """calls.c's run(program, arena, inputs) for `device` (segments.py's programs), or None where calls.c is not
    built."""
    return _functions(device)[1]


def _functions(device) -> tuple:
    made = _made.get(device)
    if made is None:
        with _lock:
            made = _made.get(device)
            if made is None:
                made = _made[device] = _build(device) or (call_ctypes, None)
    return made


def _build(device):
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not include.is_file():
        log.info("%s: kernels are called through ctypes: %s is missing (install the Python headers)", device, include)
        return None
    # the headers' path and the interpreter's version are part of the source, so a cached build is never loaded
    # into another Python
    source = f'#define PY_SSIZE_T_CLEAN\n#include "{include}"\n/* {sys.version} */\n' + SOURCE.read_text()
    try:
        lib = load_source(device, source, "hwa_calls").library
    except Exception as err:  # noqa: BLE001 - ctypes calls the same entry points, slower
        log.warning("%s: kernels are called through ctypes: calls.c could not be built: %s", device, err)
        return None
    return ctypes.PYFUNCTYPE(ctypes.py_object)(ctypes.cast(lib.hwa_calls, ctypes.c_void_p).value)()


def _address(a) -> int:
    if a is None:
        return 0
    return ctypes.addressof(_char(a)) if a.flags.writeable else a.ctypes.data


_entries: dict = {}


def call_ctypes(entry, a0, a1, template, a3, a4, images, *arrays):
    """calls.c's call through ctypes."""
    fn = _entries.get(entry)
    if fn is None:
        fn = _entries[entry] = ENTRY(entry)
    params = np.array(template, np.int64)
    slots = [(arrays[i], _address(arrays[i + 1]), arrays[i + 2]) for i in range(0, len(arrays), 3)]
    r = 0
    for image in range(images):
        for slot, base, step in slots:
            params[slot] = base + image * step if base else 0
        r = fn(a0, a1, params.ctypes.data, a3, a4)
        if r:
            break
    return r
