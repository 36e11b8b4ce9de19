"""The collectives on Tensors (Paddle's names): in place on the tensors given, on their device's communicator of the
group. Inside a to_static trace, all_reduce and broadcast are ops of the captured graph; the others run eagerly."""
from __future__ import annotations

import sys

import numpy as np

from ..api.collectives import DONE, REDUCE_OPS
from ..api.errors import InvalidArgumentError, TracingError, UnsupportedDTypeError
from ..dispatch.dispatcher import dispatch
from ..dispatch.tensor import GradState, Tensor, wrap
from ..runtime.device import devices
from ..trace import active as _tracing
from ..autograd.engine import no_grad
from ..autograd.inplace import set_value
from . import env


#: sys.getrefcount of a tensor's array that only the tensor holds (the tensor, the local name, the call's argument).
_OWNED = 3


class ReduceOp:
    """The reductions (Paddle's dist.ReduceOp)."""
    SUM, AVG, MAX, MIN, PROD = REDUCE_OPS


class Task:
    """A collective in flight (sync_op=False): `wait()` puts its result in place."""

    def __init__(self, work, finish=None):
        self._work, self._finish = work, finish

    def wait(self) -> bool:
        self._work.wait()
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()
        return True

    def is_completed(self) -> bool:
        return self._finish is None or self._work.is_completed()


def _group(group):
    w = env.world()
    return w.groups[0] if group is None else group


def _tensor(t, call: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise InvalidArgumentError(f"dist.{call}: expected a Tensor, got {type(t).__name__}. Fix: pass "
                                   f"hw.to_tensor(...)")
    own = getattr(t._device, "base", t._device).collectives
    if own is not None:  # the plugin's communicator may carry fewer dtypes than its device has
        names = own.dtypes()
        if names is not None and t._dtype.name not in names:
            raise UnsupportedDTypeError(f"dist.{call}: the communicator of {t._device} carries "
                                        f"{', '.join(sorted(names))}, not {t._dtype.name}. Fix: cast the tensor to "
                                        f"one of those first")
    return t


def _op(op, call: str) -> str:
    if op in REDUCE_OPS:
        return op
    name = getattr(op, "value", op)
    name = str(name).lower()
    if name not in REDUCE_OPS:
        raise InvalidArgumentError(f"dist.{call}: unknown reduce op {op!r}. Fix: use dist.ReduceOp.SUM, AVG, MAX, "
                                   f"MIN or PROD")
    return name


def _replace(t: Tensor, data) -> None:
    """t now holds `data` (a new array of its shape and dtype): what an in-place collective leaves."""
    t._data = data
    if t._ag is None:
        t._ag = GradState()
    t._ag.version += 1


def _traced(t: Tensor, op: str, attrs: dict, group) -> Task:
    group.communicator(getattr(t._device, "base", t._device))  # the captured op's kernel finds it there
    with no_grad():
        set_value(t, dispatch(op, (t,), attrs))
    return Task(DONE)


def _done(task: Task, sync_op: bool):
    if sync_op:
        task.wait()
        return None
    return task


def _rank_in(group, rank: int, call: str, what: str) -> int:
    r = group.get_group_rank(rank)
    if r < 0:
        raise InvalidArgumentError(f"dist.{call}: {what}={rank} is not a rank of group {group.id} (ranks "
                                   f"{group.ranks}). Fix: pass a global rank of the group")
    return r


def all_reduce(tensor, op=ReduceOp.SUM, group=None, sync_op: bool = True):
    """tensor = op over every rank's tensor, in place."""
    t, g, name = _tensor(tensor, "all_reduce"), _group(group), _op(op, "all_reduce")
    if _tracing() is not None:
        return _done(_traced(t, "all_reduce", {"group": g.id, "op": name}, g), sync_op)
    dev, data = t._device, t._data
    # in place when nothing but t holds its array (no view, no other tensor, no cache: CPython's count says so), as
    # numpy elides temporaries; a new array each call would cost a page fault per 4 KiB of a large tensor
    out = data if type(data) is np.ndarray and data.base is None and sys.getrefcount(data) <= _OWNED \
        and data.flags.writeable else dev.empty(data.shape, data.dtype)
    work = g.communicator(dev).all_reduce(data, out, name)
    if sync_op:  # the common call, without a Task
        work.wait()
        _replace(t, out)
        return None
    return Task(work, lambda: _replace(t, out))


def broadcast(tensor, src: int, group=None, sync_op: bool = True):
    """Every rank's tensor = rank `src`'s (a global rank), in place."""
    t, g = _tensor(tensor, "broadcast"), _group(group)
    root = _rank_in(g, src, "broadcast", "src")
    if _tracing() is not None:
        return _done(_traced(t, "broadcast", {"group": g.id, "root": root}, g), sync_op)
    g.communicator(t._device)
    out = dispatch("broadcast", (t,), {"group": g.id, "root": root})
    _replace(t, out._data)
    return _done(Task(DONE), sync_op)


def _eager(call: str) -> None:
    if _tracing() is not None:
        raise TracingError(f"dist.{call} inside to_static: only all_reduce and broadcast are captured into a graph. "
                           f"Fix: call it outside the to_static function")


def reduce(tensor, dst: int, op=ReduceOp.SUM, group=None, sync_op: bool = True):
    """Rank `dst`'s tensor = op over every rank's tensor (others keep theirs)."""
    _eager("reduce")
    t, g, name = _tensor(tensor, "reduce"), _group(group), _op(op, "reduce")
    root = _rank_in(g, dst, "reduce", "dst")
    dev = t._device
    out = dev.empty(t.shape, t._dtype)
    work = g.communicator(dev).reduce(t._data, out, name, root)
    return _done(Task(work, (lambda: _replace(t, out)) if g.rank == root else None), sync_op)


def all_gather(tensor_list: list, tensor, group=None, sync_op: bool = True):
    """tensor_list = every rank's tensor, in rank order (the list is filled)."""
    _eager("all_gather")
    t, g = _tensor(tensor, "all_gather"), _group(group)
    if not isinstance(tensor_list, list):
        raise InvalidArgumentError("dist.all_gather: tensor_list must be a list (it is filled). Fix: pass []")
    dev = t._device
    out = dev.empty((g.nranks,) + tuple(t.shape), t._dtype)
    work = g.communicator(dev).all_gather(t._data, out)

    def finish():
        whole = wrap(out, dev)
        tensor_list.clear()
        tensor_list.extend(_part(whole, i, t.shape) for i in range(g.nranks))
    return _done(Task(work, finish), sync_op)


def _part(whole: Tensor, i: int, shape) -> Tensor:
    """Part i (along the first axis) of a gathered tensor, in `shape` (taken literally: a 0 is a size)."""
    piece = dispatch("slice", (whole,), {"axes": (0,), "starts": (i,), "ends": (i + 1,), "steps": (1,)})
    return dispatch("reshape", (piece,), {"shape": tuple(shape)})


def _stacked(tensors: list, call: str, n: int):
    if not isinstance(tensors, (list, tuple)) or len(tensors) != n:
        raise InvalidArgumentError(f"dist.{call}: pass a list of {n} tensors (one per rank of the group), got "
                                   f"{len(tensors) if isinstance(tensors, (list, tuple)) else type(tensors).__name__}")
    shapes = {tuple(x.shape) for x in tensors}
    if len(shapes) != 1:
        raise InvalidArgumentError(f"dist.{call}: the tensors of the list have different shapes {sorted(shapes)}. "
                                   f"Fix: give each rank's part the same shape")
    return dispatch("concat", tuple(dispatch("reshape", (x,), {"shape": (1,) + tuple(x.shape)}) for x in tensors),
                    {"axis": 0})


def reduce_scatter(tensor, tensor_list: list, op=ReduceOp.SUM, group=None, sync_op: bool = True):
    """tensor = this rank's part of op over every rank's tensor_list (one part per rank)."""
    _eager("reduce_scatter")
    t, g, name = _tensor(tensor, "reduce_scatter"), _group(group), _op(op, "reduce_scatter")
    whole = _stacked(tensor_list, "reduce_scatter", g.nranks)
    if tuple(whole.shape[1:]) != tuple(t.shape) or whole._dtype != t._dtype:
        raise InvalidArgumentError(f"dist.reduce_scatter: the parts are {whole._dtype.name}{list(whole.shape[1:])}, "
                                   f"the output {t._dtype.name}{list(t.shape)}. Fix: make them equal")
    dev = t._device
    out = dev.empty(t.shape, t._dtype)
    work = g.communicator(dev).reduce_scatter(whole._data, out, name)
    return _done(Task(work, lambda: _replace(t, out)), sync_op)


def alltoall(in_tensor_list: list, out_tensor_list: list, group=None, sync_op: bool = True):
    """out_tensor_list[j] = rank j's in_tensor_list[this rank]."""
    _eager("alltoall")
    g = _group(group)
    whole = _stacked(in_tensor_list, "alltoall", g.nranks)
    dev = whole._device
    out = dev.empty(whole.shape, whole._dtype)
    work = g.communicator(dev).all_to_all(whole._data, out)

    def finish():
        got = wrap(out, dev)
        out_tensor_list.clear()
        out_tensor_list.extend(_part(got, i, whole.shape[1:]) for i in range(g.nranks))
    return _done(Task(work, finish), sync_op)


def send(tensor, dst: int, group=None, sync_op: bool = True):
    """tensor to global rank `dst`."""
    _eager("send")
    t, g = _tensor(tensor, "send"), _group(group)
    return _done(Task(g.communicator(t._device).send(t._data, _rank_in(g, dst, "send", "dst"))), sync_op)


def recv(tensor, src: int, group=None, sync_op: bool = True):
    """tensor = what global rank `src` sends (in place)."""
    _eager("recv")
    t, g = _tensor(tensor, "recv"), _group(group)
    dev = t._device
    out = dev.empty(t.shape, t._dtype)
    work = g.communicator(dev).recv(out, _rank_in(g, src, "recv", "src"))
    return _done(Task(work, lambda: _replace(t, out)), sync_op)


def isend(tensor, dst: int, group=None):
    return send(tensor, dst, group, sync_op=False)


def irecv(tensor, src: int, group=None):
    return recv(tensor, src, group, sync_op=False)


def barrier(group=None) -> None:
    """Return once every rank of the group has called it."""
    _eager("barrier")
    g = _group(group)
    dev = env.world().device
    g.communicator(devices.get(dev)).barrier()
