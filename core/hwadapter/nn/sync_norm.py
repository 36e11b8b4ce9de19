"""SyncBatchNorm (paddle.nn.SyncBatchNorm): batch normalisation whose training statistics are those of the global
batch, summed across the ranks of the job; with one rank, in eval mode or before init_parallel_env, it is
BatchNorm."""
from __future__ import annotations

import importlib
import math

from .. import autograd
from ..api import dtypes as _dt
from ..api.errors import InvalidArgumentError
from ..dispatch.dispatcher import dispatch
from ..ops._common import _as_float, _tensor, cast, number_arg
from ..ops.creation import full
from ..ops.elementwise import add, divide, multiply, rsqrt, subtract
from ..ops.manipulation import _reshape, concat
from ..ops.manipulation import slice as _slice
from ..ops.reduction import sum as _sum
from . import functional as F
from .norm import _BatchNormBase


def _distributed():
    """hwadapter.distributed, imported at first use: it imports nn.layer, so a module-level import here would be a
    cycle (nn -> distributed -> nn); it never loads mpi4py by itself (init_parallel_env does)."""
    return importlib.import_module("hwadapter.distributed")


class SyncBatchNorm(_BatchNormBase):
    """Batch normalisation of [N, C, ...] (or channels-last) input with the statistics of the whole batch across
    ranks in training: per channel, the sum and the element count, then the sum of squared deviations, are
    all-reduced (so ranks may hold batches of different sizes), and gradients flow back through the all-reduces."""

    _formats = ("NC", "NCL", "NCHW", "NCDHW", "NLC", "NHWC", "NDHWC")
    _ranks = (2, 3, 4, 5)

    def __init__(self, num_features, momentum=0.9, epsilon=1e-5, weight_attr=None, bias_attr=None,
                 data_format="NCHW", name=None):
        super().__init__(num_features, momentum, epsilon, weight_attr, bias_attr, data_format, None, name)

    def forward(self, input):  # noqa: A002
        use_batch = self.training if self._use_global_stats is None else not self._use_global_stats
        group = self._group() if use_batch and input.ndim in self._ranks else None
        if group is None:  # BatchNorm's own path (and its errors): one rank gives BatchNorm's results bit for bit
            return super().forward(input)
        return self._synced(input, group)

    @staticmethod
    def _group():
        """The world group when there are several ranks, else None."""
        dist = _distributed()
        if not dist.is_initialized() or dist.get_world_size() < 2:
            return None
        return dist.get_group(0)

    def _synced(self, x, group):
        layer = type(self).__name__
        momentum = number_arg(layer, "momentum", self._momentum)
        if isinstance(momentum, bool) or not 0 <= momentum <= 1:
            raise InvalidArgumentError(f"{layer}: momentum must be a number in [0, 1], not {momentum!r}. Fix: pass "
                                       f"e.g. 0.9 (paddle's convention: the weight of the running statistics)")
        x = _as_float(_tensor(layer, x))
        eps = F._epsilon(layer, self._epsilon, x.dtype)
        axis = 1 if self._data_format.startswith("NC") else x.ndim - 1
        c = x.shape[axis]
        axes = tuple(a for a in range(x.ndim) if a != axis)
        per_channel = tuple(c if a == axis else 1 for a in range(x.ndim))
        xs = x if x.dtype != _dt.float16 else cast(x, _dt.float32)  # statistics in float32, as BatchNorm's
        dev = xs._device
        group.communicator(getattr(dev, "base", dev))  # the all_reduce op's kernel finds it on the device

        def all_reduce(t):
            return dispatch("all_reduce", (t,), {"group": group.id, "op": "sum"})

        # round 1: per-channel sums and this rank's element count (its shape is the same on every rank, whatever
        # the batch sizes, as the collective's cross-rank check wants), in one all-reduce
        count = math.prod(x.shape[a] for a in axes)
        first = all_reduce(concat([_sum(xs, axes), full((1,), count, xs.dtype, xs.device)]))
        total = _slice(first, [0], [c], [c + 1])
        batch_mean = divide(_slice(first, [0], [0], [c]), total)
        # round 2: squared deviations from the global mean (not sums of squares minus the squared mean, which lose
        # precision when the mean is large against the spread)
        centred = subtract(xs, _reshape(batch_mean, per_channel))
        batch_var = divide(all_reduce(_sum(multiply(centred, centred), axes)), total)
        y = multiply(centred, _reshape(rsqrt(add(batch_var, eps)), per_channel))
        y = y if y.dtype == x.dtype else cast(y, x.dtype)
        if self.weight is not None:
            y = multiply(y, _reshape(F._param(layer, "weight", self.weight, x, (c,), 1), per_channel))
        if self.bias is not None:
            y = add(y, _reshape(F._param(layer, "bias", self.bias, x, (c,), 0), per_channel))
        with autograd.no_grad():  # BatchNorm's update: momentum * running + (1 - momentum) * batch (biased var)
            for running, stat in ((self._mean, batch_mean), (self._variance, batch_var)):
                if running is not None:
                    stat = stat.detach()
                    stat = stat if stat.dtype == running.dtype else cast(stat, running.dtype)
                    running.set_value(add(multiply(running, momentum), multiply(stat, 1.0 - momentum)))
        return y

    @classmethod
    def convert_sync_batchnorm(cls, layer):
        """`layer` with every BatchNorm1D/2D below it (itself included) replaced by a SyncBatchNorm that shares its
        parameters and running statistics; containers are changed in place, a BatchNorm given alone is returned
        converted."""
        out = layer
        if isinstance(layer, _BatchNormBase) and not isinstance(layer, cls):
            out = cls(layer._num_features, layer._momentum, layer._epsilon, False, False, layer._data_format,
                      layer._name)
            object.__setattr__(out, "_dtype", layer._dtype)
            object.__setattr__(out, "training", layer.training)
            object.__setattr__(out, "_use_global_stats", layer._use_global_stats)
            out.weight, out.bias = layer.weight, layer.bias
            out._mean, out._variance = layer._mean, layer._variance
        for name, sub in list(layer.named_children()):
            out.add_sublayer(name, cls.convert_sync_batchnorm(sub))
        return out
