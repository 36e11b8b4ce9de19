"""The available devices as one sequence of "type:index": a list, or names made on demand when the plugins report
more devices than a list should hold (a plugin may report any number; 10**9 strings would exhaust memory)."""
from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Sequence

from .discovery import device_list

#: Up to this many devices in all, get_available_device() returns a plain list.
LIST_LIMIT = 4096


def available(records) -> Sequence:
    """Every device of the ok records, in record order: a list, or a DeviceNames beyond LIST_LIMIT."""
    counts = [(r.name, r.device_count) for r in records if r.ok]
    if sum(c for _, c in counts) <= LIST_LIMIT:
        return [f"{name}:{i}" for name, count in counts for i in range(count)]
    return DeviceNames(counts)


class DeviceNames(Sequence):
    """A read-only sequence of "type:index", each made when read: indexing, len, `in` and iteration as a list's."""

    __hash__ = None  # compares equal to lists, which are not hashable either

    def __init__(self, counts: list[tuple[str, int]]):
        self._counts = [(name, count) for name, count in counts if count > 0]
        self._ends = list(itertools.accumulate(count for _, count in self._counts))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        i, n = operator.index(i), len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("device list index out of range")
        k = bisect.bisect_right(self._ends, i)
        return f"{self._counts[k][0]}:{i - (self._ends[k - 1] if k else 0)}"

    def __contains__(self, spec) -> bool:
        if not isinstance(spec, str):
            return False
        name, _, index = spec.partition(":")
        if not (index.isascii() and index.isdigit()) or str(int(index)) != index:  # as a list holds them: "a:7"
            return False
        return any(n == name and int(index) < count for n, count in self._counts)

    def __eq__(self, other) -> bool:
        if isinstance(other, DeviceNames):
            return self._counts == other._counts
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        return "[" + ", ".join(device_list(name, count) for name, count in self._counts) + "]"
