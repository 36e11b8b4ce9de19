"""vjp rules of the collective ops, so that layers written with them (SyncBatchNorm) train: the gradient of a sum
or average across ranks is the same reduction of the gradients; of a broadcast, their sum, at the source."""
from __future__ import annotations

from ..api.errors import InvalidArgumentError
from ..dispatch.dispatcher import dispatch
from .registry import rule
from .rules_shape import zeros


@rule("all_reduce")
def _all_reduce(node, g):
    op = node.attrs.get("op", "sum")
    if op not in ("sum", "avg"):
        raise InvalidArgumentError(f"all_reduce with op={op!r} has no gradient (only sum and avg do). Fix: reduce "
                                   f"with sum or avg where a gradient must flow, or detach the input")
    return (dispatch("all_reduce", (g,), {"group": node.attrs["group"], "op": op}),)


@rule("broadcast")
def _broadcast(node, g):
    group = node.attrs["group"]
    total = dispatch("all_reduce", (g,), {"group": group, "op": "sum"})  # every rank takes part
    dev = getattr(g.device, "base", g.device)
    return (total,) if dev.communicator(group).rank == node.attrs.get("root", 0) else (zeros(g.shape, g),)
