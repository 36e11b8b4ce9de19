"""The device's threads for its compiled programs: the crew (crew.c) its conv2d and matmul run on, so that every CPU
kernel shares one pool and no pool's threads spin beside another's."""
from __future__ import annotations

import ctypes

import numpy as np

#: crew.c's hwa_crew_run(crew, task, params, ranges, count)
_RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
#: least units (output elements) per part: a part smaller than this costs more to hand over than it saves
UNITS_PER_PART = 16384


class Threads:
    """`run(task, args, units)`: a hwadapter_kp C program's `_task` entry run in parts on `device`'s crew, the one its
    tuned conv2d holds (found on first use: the kernel table is filled after the codegen backend may be made)."""

    def __init__(self, device):
        self.device = device
        self._transforms = None
        self._ranges: dict[int, np.ndarray] = {}
        self._run = None

    def _crew(self):
        """(hwa_crew_run with this module's argument types, the crew) or (None, None) where there is none (no tuned
        conv2d, no C compiler)."""
        if self._transforms is None:
            conv = self.device.kernels.find("conv2d", (np.dtype("float32"), np.dtype("float32")))
            self._transforms = getattr(conv, "transforms", False)
        lib = self._transforms.lib() if self._transforms else None
        crew = self._transforms.crew() if lib is not None else None
        if crew is None:
            return None, None
        if self._run is None:  # its own prototype: the library's attribute keeps the argument types its owner set
            self._run = _RUN(ctypes.cast(lib.hwa_crew_run, ctypes.c_void_p).value)
        return self._run, crew

    def run(self, task: int, args: np.ndarray, units: int) -> bool:
        """Runs C function `task(args, part, parts)` for every part on the crew; False (nothing run) without one."""
        if units < 2 * UNITS_PER_PART:
            return False
        run, crew = self._crew()
        if crew is None:
            return False
        parts = min(2 * self._transforms.threads, units // UNITS_PER_PART)
        ranges = self._ranges.get(parts)
        if ranges is None:  # (part, parts) pairs: the crew hands each task one pair as its range
            ranges = self._ranges[parts] = np.array([(p, parts) for p in range(parts)], np.int64)
        run(crew, task, args.ctypes.data, ranges.ctypes.data, parts)
        return True
