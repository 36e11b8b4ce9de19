"""hwadapter.nn: layers, losses and initialisers with paddle's names (hw.nn.Linear, ...), and the functions in
hwadapter.nn.functional."""
from . import functional, initializer  # noqa: F401
from .activation import GELU, LogSoftmax, ReLU, Sigmoid, Softmax, Tanh
from .common import Dropout, Embedding, Flatten, Linear
from .container import LayerList, Sequential
from .conv import Conv2D
from .layer import Layer
from .loss import CrossEntropyLoss, MSELoss
from .norm import BatchNorm1D, BatchNorm2D, LayerNorm
from .param_attr import ParamAttr
from .pooling import AdaptiveAvgPool2D, AdaptiveMaxPool2D, AvgPool2D, MaxPool2D
from .sync_norm import SyncBatchNorm
from ..optimizer.clip import ClipGradByGlobalNorm, ClipGradByNorm, ClipGradByValue  # paddle's names, under nn

__all__ = ["functional", "initializer", "Layer", "ParamAttr", "Linear", "Conv2D", "BatchNorm1D", "BatchNorm2D",
           "SyncBatchNorm", "LayerNorm", "Dropout", "Embedding", "ReLU", "GELU", "Sigmoid", "Tanh", "Softmax",
           "LogSoftmax", "MaxPool2D", "AvgPool2D", "AdaptiveAvgPool2D", "AdaptiveMaxPool2D", "Flatten", "Sequential",
           "LayerList", "CrossEntropyLoss", "MSELoss", "ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue"]
