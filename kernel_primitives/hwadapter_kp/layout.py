"""Iteration domain: broadcasting of inputs onto it, and coalescing of its axes.

Programs are specialised on *patterns* (ranks, which dims are 1, which axes are
reduced, which inputs are strided) and never on sizes.  Coalescing merges
adjacent domain axes that every input addresses the same way and drops axes of
extent 1, so e.g. every contiguous same-shape elementwise op becomes rank 1.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .errors import KernelError


class Layout(NamedTuple):
    """Shape and strides (in elements) of a tensor passed to specialize/bind."""

    shape: tuple
    strides: tuple


def contiguous_strides(shape) -> tuple:
    """Row-major strides, in elements."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(int(size), 1)
    return tuple(reversed(strides))


def as_layout(value) -> Layout:
    """Layout of an ndarray, a Layout, a shape tuple, or any object with ``.shape`` (taken as row-major)."""
    if isinstance(value, Layout):
        return Layout(tuple(int(s) for s in value.shape), tuple(int(s) for s in value.strides))
    if isinstance(value, np.ndarray):
        item = value.itemsize
        return Layout(value.shape, tuple(s // item for s in value.strides))
    shape = tuple(int(s) for s in getattr(value, "shape", value))
    return Layout(shape, contiguous_strides(shape))


def is_contiguous(layout: Layout) -> bool:
    """True if strides are row-major (dims of extent 1 may have any stride)."""
    if 0 in layout.shape:
        return True
    expected = contiguous_strides(layout.shape)
    return all(n == 1 or s == e for n, s, e in zip(layout.shape, layout.strides, expected))


@dataclass(frozen=True)
class Access:
    """How one input maps onto the domain."""

    param: str
    mode: str            # "domain" (broadcast onto the domain) or "cycle" (flat index mod size)
    rank: int
    offset: int          # domain axis of the input's first dim
    bcast: tuple         # per domain axis: the input does not vary along it
    strided: bool        # strides are arbitrary (else row-major)
    full: bool           # read()/like=: shape must equal the domain

    def dim(self, axis: int):
        """The input dim aligned to domain ``axis``, or None."""
        d = axis - self.offset
        return d if 0 <= d < self.rank else None


def bcast_pattern(shape, offset: int, rank: int) -> tuple:
    """Per domain axis (rank ``rank``): True where ``shape`` (aligned at ``offset``) has extent 1 or no dim."""
    return tuple(not (0 <= a - offset < len(shape)) or shape[a - offset] == 1 for a in range(rank))


def broadcast_domain(kernel: str, entries, rank: int) -> tuple:
    """Domain shape: numpy broadcasting of ``(name, shape, offset)`` entries onto ``rank`` axes."""
    domain = [1] * rank
    for name, shape, offset in entries:
        if offset < 0 or offset + len(shape) > rank:
            raise KernelError(f"kernel {kernel!r}: input {name!r} of rank {len(shape)} does not fit "
                              f"the rank-{rank} domain at axis {offset}")
        for d, size in enumerate(shape):
            a = offset + d
            if size != 1 and domain[a] != 1 and domain[a] != size:
                raise KernelError(f"kernel {kernel!r}: input {name!r} of shape {tuple(shape)} does not "
                                  f"broadcast with the others on domain axis {a} ({domain[a]} vs {size})")
            if size != 1:
                domain[a] = size
    return tuple(domain)


@dataclass(frozen=True)
class Coalesced:
    """The coalesced domain the generated code iterates over."""

    groups: tuple        # per coalesced axis: the original domain axes merged into it
    reduced: tuple       # per coalesced axis: reduced or kept
    bcast: dict          # input name -> per coalesced axis flag
    flat: frozenset      # inputs addressed directly by the flat domain index (contiguous, full)

    @property
    def kept_axes(self) -> tuple:
        """Coalesced axes iterated in parallel."""
        return tuple(g for g, r in enumerate(self.reduced) if not r)

    @property
    def reduced_axes(self) -> tuple:
        """Coalesced axes looped over inside a work item."""
        return tuple(g for g, r in enumerate(self.reduced) if r)

    @property
    def reduced_trailing(self) -> bool:
        """True if every reduced axis comes after every kept axis."""
        return list(self.reduced) == sorted(self.reduced)


def coalesce(rank: int, reduce_axes, accesses) -> Coalesced:
    """Merge/drop domain axes according to the specialisation pattern only."""
    domain_inputs = [a for a in accesses if a.mode == "domain"]
    live = [ax for ax in range(rank) if not all(acc.bcast[ax] for acc in domain_inputs)]
    groups = []
    for ax in live:
        if groups and _mergeable(groups[-1][-1], ax, reduce_axes, domain_inputs):
            groups[-1].append(ax)
        else:
            groups.append([ax])
    groups = tuple(tuple(g) for g in groups)
    bcast = {acc.param: tuple(acc.bcast[g[0]] for g in groups) for acc in domain_inputs}
    flat = frozenset(acc.param for acc in domain_inputs
                     if not acc.strided and not any(bcast[acc.param]))
    return Coalesced(groups, tuple(g[0] in reduce_axes for g in groups), bcast, flat)


def _mergeable(a, b, reduce_axes, inputs) -> bool:
    if (a in reduce_axes) != (b in reduce_axes):
        return False
    for acc in inputs:
        if acc.bcast[a] != acc.bcast[b]:
            return False
        if not acc.bcast[a] and acc.strided:
            return False     # strides are runtime values; merging them would need equal steps
    return True
