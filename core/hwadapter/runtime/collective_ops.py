"""The collective ops (all_reduce, broadcast) as kernels of every device: they run on the device's communicator of
the group their `group` attribute names, so eager calls and captured plans use the same path."""
from __future__ import annotations

from ..api.collectives import COLLECTIVE_OPS


def kernels(device) -> dict:
    """{op: kernel} of the collective ops for `device`."""

    def all_reduce(x, *, group: int, op: str = "sum"):
        out = device.empty(x.shape, x.dtype)
        device.communicator(group).all_reduce(x, out, op).wait()
        return out

    def broadcast(x, *, group: int, root: int = 0):
        comm = device.communicator(group)
        out = device.empty(x.shape, x.dtype)
        if comm.rank == root:
            _copy(device, x, out)
        comm.broadcast(out, root).wait()
        return out

    found = {"all_reduce": all_reduce, "broadcast": broadcast}
    assert set(found) == set(COLLECTIVE_OPS)
    return found


def _copy(device, src, dst) -> None:
    """dst = src (device arrays of one size)."""
    if device.host_memory:
        dst[...] = src
    elif src.nbytes:
        device.runtime.copy_d2d(dst.handle, 0, src.handle, 0, src.nbytes)
