"""The device's threads for its compiled programs: the crew (crew.c) its conv2d and matmul run on, so that every CPU
kernel shares one pool and no pool's threads spin beside another's."""
from __future__ import annotations

import ctypes
import weakref

import numpy as np

from .segments import Record, runner_of

#: crew.c's hwa_crew_run(crew, task, params, ranges, count)
_RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
#: least units (output elements) per part: a part smaller than this costs more to hand over than it saves
UNITS_PER_PART = 16384
#: device -> the Transforms (blasconv.py) whose crew its programs share: handed over by tuning.register
_transforms_of: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def share(device, transforms) -> None:
    """`device`'s compiled programs run on `transforms`' crew (its conv2d's and matmul's), whichever kernels the
    device registers (HWADAPTER_CPU_KERNELS=codegen registers compiled conv2d and matmul instead)."""
    _transforms_of[device] = transforms


def shared(device):
    """The Transforms `device`'s kernels were registered with, or None before they were."""
    return _transforms_of.get(device)


def transforms_of(device):
    """The Transforms (blasconv.py) whose crew and library `device`'s tuned kernels share, or None."""
    device.kernels  # noqa: B018 - registers the device's kernels first: tuning.register shares the crew
    return _transforms_of.get(device)


class Threads:
    """`run(task, args, units)`: a hwadapter_kp C program's `_task` entry run in parts on `device`'s crew, the one
    tuning.register shared (looked up on first use: the kernels are registered after the codegen backend may be
    made)."""

    def __init__(self, device):
        self.device = device
        self._transforms = None
        self._ranges: dict[int, np.ndarray] = {}
        self._run = None

    def _crew(self):
        """(hwa_crew_run with this module's argument types, the crew) or (None, None) where there is none (no tuned
        conv2d, no C compiler)."""
        if self._transforms is None:
            self.device.kernels  # noqa: B018 - registers the device's kernels first: tuning.register shares the crew
            self._transforms = _transforms_of.get(self.device, False)
        lib = self._transforms.lib() if self._transforms else None
        crew = self._transforms.crew() if lib is not None else None
        if crew is None:
            return None, None
        if self._run is None:  # its own prototype: the library's attribute keeps the argument types its owner set
            self._run = _RUN(ctypes.cast(lib.hwa_crew_run, ctypes.c_void_p).value)
        return self._run, crew

    def _parts(self, t, units: int, crew) -> tuple:
        """(parts, their ranges) for `units` of work: one part without a crew or below two parts' worth."""
        parts = min(2 * t.threads, units // UNITS_PER_PART) if crew is not None and units >= 2 * UNITS_PER_PART \
            else 1
        ranges = self._ranges.get(parts)
        if ranges is None:  # (part, parts) pairs: the crew hands each task one pair as its range
            ranges = self._ranges[parts] = np.array([(p, parts) for p in range(parts)], np.int64)
        return parts, ranges

    def _library(self):
        """The Transforms whose library and crew these threads use, or None where its library is not built."""
        if self._transforms is None:
            self._crew()
        t = self._transforms
        return t if t and t.lib() is not None else None

    def lowered(self, task: int, template: np.ndarray, units: int, patches, keep=()):
        """C function `task(params, part, parts)` as a segment's record (segments.py), in parts as `call` runs it;
        None where segments cannot run."""
        t = self._library()
        runner = runner_of(self.device) if t else None
        if runner is None or not runner.ready():
            return None
        crew = t.crew()
        parts, ranges = self._parts(t, units, crew)
        return runner.lowered([Record(t.entry["hwa_crew_call"], crew if parts > 1 else 0, task, template,
                                      ranges.ctypes.data, parts, 1, patches)], keep=(ranges, *keep))

    def call(self, task: int, template: np.ndarray, units: int, *arrays) -> bool:
        """Runs C function `task(params, part, parts)` for every part, on the crew when `units` are enough to share,
        with `template`'s parameters and `arrays` (slot, array, ...) pointed at in C (calls.py); False (nothing run)
        where the crew's library is not built."""
        t = self._library()
        if t is None:
            return False
        crew = t.crew()
        parts, ranges = self._parts(t, units, crew)
        triples = [v for i in range(0, len(arrays), 2) for v in (arrays[i], arrays[i + 1], 0)]
        t.call(t.entry["hwa_crew_call"], crew if parts > 1 else 0, task, template, ranges.ctypes.data, parts, 1,
               *triples)
        return True

    def run(self, task: int, args: np.ndarray, units: int) -> bool:
        """Runs C function `task(args, part, parts)` for every part on the crew; False (nothing run) without one."""
        if units < 2 * UNITS_PER_PART:
            return False
        run, crew = self._crew()
        if crew is None:
            return False
        parts, ranges = self._parts(self._transforms, units, crew)
        run(crew, task, args.ctypes.data, ranges.ctypes.data, parts)
        return True
