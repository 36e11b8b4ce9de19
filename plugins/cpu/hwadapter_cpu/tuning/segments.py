"""The CPU's segments (hwadapter.graph.segments): a run of kernel steps as one program of calls.c's records, run by
calls.c's run() in one call from Python, its values in one arena allocated per run.

A kernel's `lower` returns a Lowered: the records its step runs (each an entry point of the tuned C, its parameters and
where its arrays are: its inputs, its outputs, constants it keeps) or an alias (its output is its input, reshaped).
Why: each kernel called from Python costs tens of microseconds once its data has pushed the interpreter out of the
caches, more than many small kernels compute (the Python side was a third of SqueezeNet's run).
"""
from __future__ import annotations

import weakref

import numpy as np

from .blas import single_blas

#: calls.c's patch kinds
ARENA, INPUT, POINTER, FLAG, NONE = range(5)
#: every value in the arena starts on a cache line
ALIGN = 64
#: parameters a record may have (calls.c's CALL_SLOTS)
SLOTS = 64


class Record:
    """One call of calls.c's run: entry(a0, a1, params, a3, a4) `images` times, `patches` pointing parameter slots
    at arrays: (slot, where, step) with where ("in", j) or ("out", j) (the step's j-th input or output), ("const",
    array) (kept alive here), "flag" (a failure flag the entry sets) or None; step: bytes added per image."""
    __slots__ = ("entry", "a0", "a1", "template", "a3", "a4", "images", "patches", "blas")

    def __init__(self, entry, a0, a1, template, a3, a4, images, patches, blas=False):
        self.entry, self.a0, self.a1, self.template, self.a3, self.a4 = entry, a0, a1, template, a3, a4
        self.images, self.patches = images, patches
        self.blas = blas  # it calls numpy's BLAS: the segment runs with that BLAS on one thread (blas.py)


class Lowered:
    """A step as records (`records`, `keep`: what they point at; `scratch`: {name: bytes} its records share, placed in
    the arena for this step alone, patched as ("scratch", name)) or as an alias of its input `alias`. `fold`: a
    concatenation's byte offset of each input in its output, where its inputs may be made in place there instead."""
    __slots__ = ("runner", "records", "alias", "keep", "scratch", "fold")

    def __init__(self, runner, records=(), alias=None, keep=(), scratch=None, fold=None):
        self.runner, self.records, self.alias, self.keep = runner, tuple(records), alias, tuple(keep)
        self.scratch, self.fold = dict(scratch or {}), fold


_runners: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def runner_of(device) -> "Runner":
    """The one Runner of `device`: every lowering of its kernels names it, so that their steps join one segment."""
    found = _runners.get(device)
    if found is None:
        found = _runners[device] = Runner(device)
    return found


class Runner:
    """The segments of one device: builds each one's program and arena plan (`build`, as the graph layer asks)."""

    def __init__(self, device):
        self.device = device
        self._run = False  # calls.c's run(program, arena, inputs), looked up on first use

    @property
    def run(self):
        if self._run is False:
            from .calls import runner
            self._run = runner(self.device)
        return self._run

    def ready(self) -> bool:
        """Whether segments can run here (calls.c is built)."""
        return self.run is not None

    def lowered(self, records, keep=(), scratch=None, fold=None) -> Lowered:
        return Lowered(self, records, keep=keep, scratch=scratch, fold=fold)

    def alias(self) -> Lowered:
        return Lowered(self, alias=0)

    def build(self, items, buffers, inputs, outputs):
        """The call of one segment: (*input arrays) -> output arrays (see hwadapter.graph.segments)."""
        buffers, extra, items = list(buffers), [], list(items)
        for k, (low, ins, outs, name) in enumerate(items):  # scratch: buffers made and dropped by their own step
            if low.scratch:
                named = {}
                for key, nbytes in low.scratch.items():
                    named[key] = len(buffers)
                    buffers.append(((max(1, int(nbytes)),), np.dtype(np.uint8)))
                extra.append(named)
                items[k] = (low, ins, list(outs) + list(named.values()), name)
            else:
                extra.append({})
        root = list(range(len(buffers)))  # an alias's buffer is its input's
        for low, ins, outs, _ in items:
            if low.alias is not None:
                if ins[low.alias] is None:
                    raise ValueError("an alias of a constant")
                root[outs[0]] = root[ins[low.alias]]
        external = {b: k for k, b in enumerate(inputs)}
        within, skip = _folded(items, root, external, outputs)
        offsets, size = _arena(items, buffers, root, external, outputs, within)
        program, keep, names, blas = [0], [], [], False
        for k, ((low, ins, outs, name), named) in enumerate(zip(items, extra)):
            keep.extend(low.keep)
            for rec in () if k in skip else low.records:
                if len(rec.template) > SLOTS:
                    raise ValueError(f"{name}: {len(rec.template)} parameters, calls.c takes {SLOTS}")
                program[0] += 1
                names.append(name)
                blas = blas or rec.blas
                program += [rec.entry, rec.a0, rec.a1, rec.a3, rec.a4, rec.images, len(rec.template), len(rec.patches)]
                program += [int(v) for v in rec.template]
                for slot, where, step in rec.patches:
                    if isinstance(where, tuple) and where[0] == "scratch":
                        program += [slot, ARENA, offsets[named[where[1]]], step]
                        continue
                    program += [slot, *_where(where, ins, outs, root, external, offsets, keep), step]
        made = []  # each output: ("arena", offset, shape, dtype) or ("input", k, shape)
        for b in outputs:
            r = root[b]
            shape, dtype = buffers[b]
            made.append(("input", external[r], shape) if r in external else ("arena", offsets[r], shape, dtype))
        return _Call(self.run, np.array(program, np.int64), size, made, tuple(keep), tuple(names), blas)


def _where(where, ins, outs, root, external, offsets, keep) -> tuple:
    """(kind, value) of a patch for calls.c."""
    if where is None:
        return NONE, 0
    if where == "flag":
        return FLAG, 0
    kind, j = where
    if kind == "const":
        keep.append(j)
        return POINTER, j.ctypes.data
    b = ins[j] if kind == "in" else outs[j]
    if b is None:
        raise ValueError("a record reads a constant input it did not keep")
    r = root[b]
    return (INPUT, external[r]) if r in external else (ARENA, offsets[r])


def _folded(items, root, external, outputs) -> tuple:
    """({buffer: (the concatenation it is made in, byte offset)}, {concatenations with nothing left to copy}): a
    concatenation's inputs are made in place in its output where each is made inside the segment by one step, read
    by that concatenation alone and handed out by neither an alias nor the segment."""
    readers, makers = {}, {}
    for k, (low, ins, outs, _) in enumerate(items):
        for r in {root[b] for b in ins if b is not None}:
            readers[r] = readers.get(r, 0) + 1
        if low.alias is None:
            for b in outs:
                makers.setdefault(root[b], k)
    aliased = {r for b, r in enumerate(root) if r != b}
    escaping = {root[b] for b in outputs}
    within, skip = {}, set()
    for k, (low, ins, outs, _) in enumerate(items):
        if low.fold is None or None in ins:
            continue
        parent, rs = root[outs[0]], [root[b] for b in ins]
        if parent in external or len(set(rs)) != len(rs) or not all(
                r not in external and r not in aliased and r not in escaping and r not in within and r != parent
                and readers.get(r) == 1 and makers.get(r, k) < k for r in rs):
            continue
        within.update({r: (parent, offset) for r, offset in zip(rs, low.fold)})
        skip.add(k)
    return within, skip


def _arena(items, buffers, root, external, outputs, within=None) -> tuple:
    """({buffer: byte offset}, arena bytes): each value the segment makes, from its maker to its last reader (the end
    for an output), placed at the lowest offset free for all of that time; a value made inside another (`within`:
    {buffer: (outer buffer, byte offset)}) is part of it, which lives from the first of them made."""
    within = within or {}
    start, end = {}, {}
    for k, (_, ins, outs, _) in enumerate(items):
        for b in outs:
            start.setdefault(root[b], k)
        for b in ins + outs:
            if b is not None:
                end[root[b]] = k
    for b in outputs:
        end[root[b]] = len(items)

    def top(r):  # (outermost buffer, byte offset in it)
        at = 0
        while r in within:
            r, offset = within[r]
            at += offset
        return r, at
    for r in within:
        t, _ = top(r)
        start[t] = min(start[t], start.get(r, start[t]))
    offsets, placed = {}, []  # placed: (offset, bytes, first, last)
    for r in sorted(start, key=lambda r: start[r]):
        if r in external or r != root[r] or r in within:
            continue
        shape, dtype = buffers[r]
        nbytes = -(-max(1, int(np.prod(shape)) * np.dtype(dtype).itemsize) // ALIGN) * ALIGN
        busy = sorted((o, o + n) for o, n, a, z in placed if not (z < start[r] or a > end[r]))
        at = 0
        for lo, hi in busy:
            if at + nbytes <= lo:
                break
            at = max(at, hi)
        offsets[r] = at
        placed.append((at, nbytes, start[r], end[r]))
    for r in within:
        t, at = top(r)
        offsets[r] = offsets[t] + at
    return offsets, max((o + n for o, n, _, _ in placed), default=0)


class _Call:
    """A segment's call: one arena, calls.c's run, the outputs as views of the arena (or of an input)."""
    __slots__ = ("run", "program", "size", "made", "keep", "names", "blas")

    def __init__(self, run, program, size, made, keep, names, blas):
        self.run, self.program, self.size, self.made, self.keep, self.names = run, program, size, made, keep, names
        self.blas = blas

    def __call__(self, *arrays):
        arrays = tuple(np.ascontiguousarray(a) for a in arrays)
        arena = np.empty(self.size, np.uint8)
        if self.blas:
            with single_blas():
                failed = self.run(self.program, arena, arrays)
        else:
            failed = self.run(self.program, arena, arrays)
        if failed:
            raise MemoryError(f"plan step {self.names[failed - 1]!r} could not allocate its scratch on cpu. Fix: free "
                              f"host memory")
        return [np.ndarray(m[2], m[3], arena, m[1]) if m[0] == "arena" else arrays[m[1]].reshape(m[2])
                for m in self.made]
