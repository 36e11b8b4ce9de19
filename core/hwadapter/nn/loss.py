"""Loss layers: CrossEntropyLoss and MSELoss (paddle's constructors; the functions are in nn.functional)."""
from __future__ import annotations

from . import functional as F
from .layer import Layer
from .loss_functional import _reduction


class CrossEntropyLoss(Layer):
    """Softmax cross entropy of logits against integer class labels ([N] or [N, 1]) or, with soft_label=True,
    class probabilities; see hw.nn.functional.cross_entropy."""

    def __init__(self, weight=None, ignore_index=-100, reduction="mean", soft_label=False, axis=-1,
                 use_softmax=True, label_smoothing=0.0, name=None):
        super().__init__()
        self.weight, self.ignore_index, self.reduction = weight, ignore_index, _reduction("CrossEntropyLoss",
                                                                                           reduction)
        self.soft_label, self.axis, self.use_softmax, self.label_smoothing = soft_label, axis, use_softmax, \
            label_smoothing
        self.name = name

    def forward(self, input, label):  # noqa: A002
        return F.cross_entropy(input, label, weight=self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, soft_label=self.soft_label, axis=self.axis,
                               use_softmax=self.use_softmax, label_smoothing=self.label_smoothing)


class MSELoss(Layer):
    """Mean squared error (reduction 'mean', 'sum' or 'none')."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self.reduction = _reduction("MSELoss", reduction)

    def forward(self, input, label):  # noqa: A002
        return F.mse_loss(input, label, self.reduction)
