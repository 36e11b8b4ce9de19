"""hwadapter.metric: paddle.metric's Metric and Accuracy. `compute` runs on the device in tensor ops (inside the
captured train step of hw.Model), `update` adds up its result on the host, `accumulate` gives the value so far."""
from __future__ import annotations

import numbers

import numpy as np

from .api.errors import InvalidArgumentError
from .api.shapes import show
from .dispatch.tensor import Tensor
from .ops import api as ops

__all__ = ["Metric", "Accuracy"]


class Metric:
    """Base of the metrics: compute(*outputs_and_labels) -> tensors (default: the arguments themselves), then
    update(*those, as numpy), accumulate(), reset(), name()."""

    def compute(self, *args):
        """The per-batch tensors update() takes, computed on the device."""
        return args

    def update(self, *args):
        raise NotImplementedError(f"{type(self).__name__} must define update()")

    def accumulate(self):
        raise NotImplementedError(f"{type(self).__name__} must define accumulate()")

    def reset(self) -> None:
        raise NotImplementedError(f"{type(self).__name__} must define reset()")

    def name(self):
        raise NotImplementedError(f"{type(self).__name__} must define name()")


def _host(x) -> np.ndarray:
    return x.numpy() if isinstance(x, Tensor) else np.asarray(x)


class Accuracy(Metric):
    """Top-k accuracy of scores [N, C] against labels [N], [N, 1] (class indices) or [N, C] (one-hot)."""

    def __init__(self, topk=(1,), name=None, *args, **kwargs):
        ks = (topk,) if isinstance(topk, numbers.Integral) else topk
        if not isinstance(ks, (list, tuple)) or not ks or not all(
                isinstance(k, numbers.Integral) and not isinstance(k, bool) and k >= 1 for k in ks):
            raise InvalidArgumentError(f"Accuracy: topk must be a positive int or a tuple of them, not {show(topk)}. "
                                       f"Fix: pass e.g. topk=(1, 5)", fix="pass topk=(1,) or (1, 5)")
        self.topk, self.maxk = tuple(int(k) for k in ks), max(ks)
        base = name or "acc"
        self._name = [base] if len(self.topk) == 1 else [f"{base}_top{k}" for k in self.topk]
        self.reset()

    def compute(self, pred, label, *args) -> Tensor:
        """[N, maxk] float32: 1 where the k-th highest score is the label's class."""
        if pred.ndim < 1 or pred.shape[-1] < self.maxk:
            raise InvalidArgumentError(f"Accuracy: pred has shape {list(pred.shape)}, fewer than topk={self.maxk} "
                                       f"classes on its last axis. Fix: pass scores of shape [N, classes] with at "
                                       f"least {self.maxk} classes", fix="pass [N, classes] scores")
        _, top = ops.topk(pred, self.maxk, axis=-1)
        if label.ndim == 1 or (label.ndim == 2 and label.shape[-1] == 1):
            label = ops.reshape(label, (-1, 1))
        else:  # one-hot
            label = ops.argmax(label, axis=-1, keepdim=True)
        if label.dtype != top.dtype:
            label = ops.cast(label, top.dtype)
        return ops.cast(ops.equal(top, label), "float32")

    def update(self, correct, *args):
        """Add a batch's compute() result; its accuracy (a float, or a list of one per k)."""
        correct = _host(correct)
        if correct.ndim < 1 or correct.shape[-1] < self.maxk:
            raise InvalidArgumentError(f"Accuracy.update: expected compute()'s [N, {self.maxk}] result, got shape "
                                       f"{list(correct.shape)}. Fix: pass what compute(pred, label) returned",
                                       fix="pass compute()'s result")
        samples = int(np.prod(correct.shape[:-1]))
        accs = []
        for i, k in enumerate(self.topk):
            hits = float(correct[..., :k].sum())
            accs.append(hits / samples if samples else 0.0)
            self.total[i] += hits
            self.count[i] += samples
        return accs[0] if len(self.topk) == 1 else accs

    def reset(self) -> None:
        self.total = [0.0] * len(self.topk)
        self.count = [0] * len(self.topk)

    def accumulate(self):
        """The accuracy over every batch since reset (a float, or a list of one per k)."""
        res = [t / c if c else 0.0 for t, c in zip(self.total, self.count)]
        return res[0] if len(self.topk) == 1 else res

    def name(self) -> list:
        return list(self._name)
