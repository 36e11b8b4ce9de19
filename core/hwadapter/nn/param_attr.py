"""ParamAttr (paddle.ParamAttr): how a layer makes one of its parameters (name, initialiser, trainable)."""
from __future__ import annotations

from ..api import shapes
from ..api.errors import InvalidArgumentError
from .initializer import Initializer


class ParamAttr:
    """A parameter's name, initializer and trainable flag; learning_rate other than 1.0 and regularizer are not
    supported (optimizers take per-group settings)."""

    def __init__(self, name=None, initializer=None, learning_rate=1.0, regularizer=None, trainable=True,
                 do_model_average=True, need_clip=True):
        if name is not None and not isinstance(name, str):
            raise InvalidArgumentError(f"ParamAttr: name must be a str or None, not {shapes.show(name)}. Fix: pass "
                                       f"a str")
        if initializer is not None and not callable(initializer):
            raise InvalidArgumentError(f"ParamAttr: initializer must be an initializer (hw.nn.initializer.*) or a "
                                       f"callable (shape, dtype) -> array, not {type(initializer).__name__}. Fix: "
                                       f"pass e.g. hw.nn.initializer.Constant(0.5)")
        if learning_rate != 1.0 or regularizer is not None:
            raise InvalidArgumentError("ParamAttr: learning_rate and regularizer are not supported per parameter. "
                                       "Fix: leave them out; set the learning rate and weight decay on the optimizer")
        if not isinstance(trainable, bool):
            raise InvalidArgumentError(f"ParamAttr: trainable must be True or False, not {trainable!r}. Fix: pass a "
                                       f"bool")
        self.name, self.initializer, self.trainable, self.need_clip = name, initializer, trainable, need_clip

    def __repr__(self):
        return f"ParamAttr(name={self.name!r}, initializer={self.initializer!r}, trainable={self.trainable})"


def to_attr(arg, what: str):
    """A layer's weight_attr / bias_attr as a ParamAttr, or False for "no such parameter" (paddle's rules: None is
    the default, a str is a name, an initializer is the initializer, False drops the parameter)."""
    if arg is None:
        return ParamAttr()
    if arg is False:
        return False
    if isinstance(arg, ParamAttr):
        return arg
    if isinstance(arg, str):
        return ParamAttr(name=arg)
    if isinstance(arg, Initializer) or callable(arg):
        return ParamAttr(initializer=arg)
    if arg is True:
        return ParamAttr()
    raise InvalidArgumentError(f"{what} must be None, False, a str, a ParamAttr or an initializer, not "
                               f"{type(arg).__name__}. Fix: pass e.g. hw.nn.ParamAttr(initializer=...)")
