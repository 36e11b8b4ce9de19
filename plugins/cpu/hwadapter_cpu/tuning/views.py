"""reshape and concat as the reference runs them, and how each runs inside a segment (segments.py): a reshape is its
input seen in another shape, a concatenation rows.c's copies."""
from __future__ import annotations

import ctypes
import math

import numpy as np

from hwadapter.plugin import reference

from . import rows
from .segments import Record, runner_of

#: inputs a concatenation may have in a segment: its parameters must fit calls.c's CALL_SLOTS
CONCAT_INPUTS = 30


def kernels(device) -> dict:
    """{op: kernel}: the reference's reshape and concat, each with its `lower`."""
    library = rows.library(device)

    def runner():
        r = runner_of(device)
        return r if r.ready() else None

    def reshape(x, shape):
        return reference.KERNELS["reshape"](x, shape)

    def lower_reshape(ins, outs, attrs, consts):
        r = runner()
        return r.alias() if r is not None and 0 not in consts else None

    def concat(*xs, axis=0):
        return reference.KERNELS["concat"](*xs, axis=axis)

    def lower_concat(ins, outs, attrs, consts):
        r, lib = runner(), library()
        (shape, dtype), = outs
        if r is None or lib is None or not 1 <= len(ins) <= CONCAT_INPUTS or any(d != dtype for _, d in ins):
            return None
        axis = attrs.get("axis", 0) % len(shape)
        outer, size = math.prod(shape[:axis]), np.dtype(dtype).itemsize
        template = [0, outer, len(ins)]
        patches = [(0, ("out", 0), 0)]
        keep = []
        for j, (s, _) in enumerate(ins):
            template += [0, math.prod(s[axis:]) * size]
            if j in consts:
                keep.append(np.ascontiguousarray(consts[j]))
                patches.append((3 + 2 * j, ("const", keep[-1]), 0))
            else:
                patches.append((3 + 2 * j, ("in", j), 0))
        entry = ctypes.cast(lib.hwa_concat, ctypes.c_void_p).value
        # one slice of each input (a batch of one along the channels): its inputs may be made in place in the output
        fold = None if outer != 1 or keep else list(np.cumsum([0] + template[4::2][:-1]))
        return r.lowered([Record(entry, 0, 0, np.array(template, np.int64), 0, 0, 1, patches)], keep=keep,
                         fold=fold)

    reshape.lower, concat.lower = lower_reshape, lower_concat
    return {"reshape": reshape, "concat": concat}
