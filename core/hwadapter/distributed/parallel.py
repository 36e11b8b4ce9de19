"""hw.DataParallel: one model replica per rank; parameters broadcast from the group's first rank at start, gradients
averaged across ranks in buckets that start as soon as their last gradient is ready during backward."""
from __future__ import annotations

import contextlib

import numpy as np

from ..autograd import engine
from ..autograd.engine import no_grad
from ..autograd.rules_shape import zeros
from ..dispatch.dispatcher import dispatch
from ..nn.layer import Layer
from ..trace import active as _tracing
from . import collective, env


class _Bucket:
    """Parameters whose gradients are averaged as one flat tensor."""

    def __init__(self, params: list):
        self.params = params
        self.waiting = set()
        self.work = None  # (task, flat tensor) in flight
        #: id of a parameter's GradState -> the tensor backward handed over for it (inside a to_static trace, the
        #: traced stand-in of the parameter, which shares its GradState)
        self.seen: dict = {}

    def reset(self) -> None:
        self.waiting = {id(p._ag) for p in self.params}
        self.work, self.seen = None, {}

    def current(self) -> list:
        """The parameters as this backward pass sees them."""
        return [self.seen.get(id(p._ag), p) for p in self.params]


class DataParallel(Layer):
    """Wraps `layers` for data-parallel training (Paddle's paddle.DataParallel)."""

    def __init__(self, layers: Layer, strategy=None, comm_buffer_size: float = 25, last_comm_buffer_size: float = 1,
                 find_unused_parameters: bool = False, group=None):
        super().__init__()
        self._layers = layers
        w = env.world()
        object.__setattr__(self, "_group", w.groups[0] if group is None else group)
        object.__setattr__(self, "_sync", True)
        object.__setattr__(self, "_touched", False)
        params = [p for p in layers.parameters() if not p.stop_gradient]
        with no_grad():  # every replica starts from the first rank's weights
            src = self._group.ranks[0]
            for t in list(layers.parameters()) + list(layers.buffers()):
                collective.broadcast(t, src=src, group=self._group)
        object.__setattr__(self, "_buckets", _buckets(params, int(comm_buffer_size * (1 << 20)),
                                                      int(last_comm_buffer_size * (1 << 20))))
        object.__setattr__(self, "_owner", {id(p._ag): b for b in self._buckets for p in b.params})
        for b in self._buckets:
            b.reset()
        engine.watchers.add(self)

    def forward(self, *inputs, **kwargs):
        return self._layers(*inputs, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Gradients accumulate locally inside (gradient accumulation); the next backward outside averages them."""
        before = self._sync
        object.__setattr__(self, "_sync", False)
        try:
            yield
        finally:
            object.__setattr__(self, "_sync", before)

    def state_dict(self, *args, **kwargs):
        return self._layers.state_dict(*args, **kwargs)

    def set_state_dict(self, *args, **kwargs):
        return self._layers.set_state_dict(*args, **kwargs)

    # --- engine.watchers -----------------------------------------------------------------------------------------
    def ready(self, t) -> None:
        """Leaf t's gradient is whole: start its bucket once the bucket's last gradient is."""
        if not self._sync:
            return
        b = self._owner.get(id(t._ag))
        if b is None or b.work is not None:
            return
        object.__setattr__(self, "_touched", True)
        b.seen[id(t._ag)] = t
        b.waiting.discard(id(t._ag))
        if not b.waiting:
            self._start(b)

    def finished(self) -> None:
        """Backward is done: start the buckets still waiting (parameters without a gradient count as zeros), then
        wait for all, in the same order on every rank."""
        if not self._sync or not self._touched:  # a backward pass that reached none of this model's parameters
            return
        object.__setattr__(self, "_touched", False)
        for b in self._buckets:
            if b.work is None:
                self._start(b)
        for b in self._buckets:
            self._finish(b)
            b.reset()

    def _start(self, b: _Bucket) -> None:
        with no_grad():
            parts = []
            for p in b.current():
                g = p.grad
                if g is None:
                    g = zeros(p.shape, p)
                parts.append(dispatch("reshape", (g,), {"shape": (-1,)}))
            flat = parts[0] if len(parts) == 1 else dispatch("concat", tuple(parts), {"axis": 0})
            if _tracing() is None:
                task = collective.all_reduce(flat, collective.ReduceOp.AVG, self._group, sync_op=False)
            else:  # an op of the captured step: the plan runs it
                self._group.communicator(flat._device.base)
                task, flat = None, dispatch("all_reduce", (flat,), {"group": self._group.id, "op": "avg"})
        b.work = (task, flat)

    def _finish(self, b: _Bucket) -> None:
        task, flat = b.work
        if task is not None:
            task.wait()
        with no_grad():
            start = 0
            for p in b.current():
                n = int(np.prod(p.shape))
                piece = dispatch("slice", (flat,), {"axes": (0,), "starts": (start,), "ends": (start + n,),
                                                    "steps": (1,)})
                engine.set_grad(p, dispatch("reshape", (piece,), {"shape": tuple(p.shape)}))
                start += n


def _buckets(params: list, size: int, last: int) -> list:
    """Parameters in reverse order (their gradients come roughly in that order in backward), grouped by dtype and
    device into buckets of about `size` bytes (the first one, done first, about `last`)."""
    out, current, nbytes, limit = [], [], 0, last
    for p in reversed(params):
        if current and (nbytes >= limit or p._dtype != current[0]._dtype or p._device is not current[0]._device):
            out.append(_Bucket(current))
            current, nbytes, limit = [], 0, size
        current.append(p)
        nbytes += int(np.prod(p.shape)) * p._dtype.itemsize
    if current:
        out.append(_Bucket(current))
    return out
