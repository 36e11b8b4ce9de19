"""nn.Layer: paddle.nn.Layer without hooks. Parameters, sublayers and buffers register by attribute assignment;
state_dict / set_state_dict use paddle's dotted names ("0.weight", "bn._mean")."""
from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from .. import autograd
from ..api import dtypes as _dt
from ..api import shapes
from ..api.errors import InvalidArgumentError, UnsupportedDTypeError
from ..runtime import device as _device
from ..tensor import Tensor, to_tensor
from .param_attr import to_attr

#: What set_state_dict returns (paddle's two lists): keys the layer has and the dict lacked, and the reverse.
IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Layer:
    """Base class of layers: subclasses make their parameters in __init__ and compute in forward."""

    training: bool

    def __init__(self, name_scope=None, dtype="float32"):
        put = object.__setattr__
        put(self, "_parameters", OrderedDict())
        put(self, "_sub_layers", OrderedDict())
        put(self, "_buffers", OrderedDict())
        put(self, "_non_persistable_buffer_names_set", set())
        put(self, "training", True)
        put(self, "_dtype", _dt.as_dtype(dtype))
        put(self, "_name_scope", name_scope)

    # --- attribute registration --------------------------------------------------------------------------------
    def _registry(self, what: str) -> OrderedDict:
        table = self.__dict__.get(what)
        if table is None:
            raise InvalidArgumentError(f"{type(self).__name__}: a parameter, sublayer or buffer was set before "
                                       f"Layer.__init__ ran. Fix: call super().__init__() first in __init__")
        return table

    def _forget(self, name: str, keep: str) -> None:
        for what in ("_parameters", "_sub_layers", "_buffers"):
            if what != keep:
                self.__dict__[what].pop(name, None)
        self.__dict__.pop(name, None)
        if keep != "_buffers":
            self._non_persistable_buffer_names_set.discard(name)

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, Tensor) and value.is_parameter:
            self._registry("_parameters")
            self._forget(name, "_parameters")
            self._parameters[name] = value
        elif isinstance(value, Layer):
            self._registry("_sub_layers")
            self._forget(name, "_sub_layers")
            self._sub_layers[name] = value
        elif name in self.__dict__.get("_parameters", ()):
            if value is not None:
                raise InvalidArgumentError(f"{type(self).__name__}.{name} is a parameter; it can be set to a parameter "
                                           f"or None, not a {type(value).__name__}. Fix: assign "
                                           f"hw.create_parameter(...), or update it with .set_value(value)")
            self._parameters[name] = None
        elif name in self.__dict__.get("_sub_layers", ()):
            if value is not None:
                raise InvalidArgumentError(f"{type(self).__name__}.{name} is a sublayer; it can be set to a Layer or "
                                           f"None, not a {type(value).__name__}. Fix: assign a Layer")
            self._sub_layers[name] = None
        elif name in self.__dict__.get("_buffers", ()):
            if value is not None and not isinstance(value, Tensor):
                raise InvalidArgumentError(f"{type(self).__name__}.{name} is a buffer; it can be set to a Tensor or "
                                           f"None, not a {type(value).__name__}. Fix: assign a Tensor")
            self._buffers[name] = None if value is None else autograd.buffer(value)
        else:
            object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        # only called when normal lookup fails: parameters, sublayers and buffers live in their tables
        d = self.__dict__
        for what in ("_parameters", "_sub_layers", "_buffers"):
            table = d.get(what)
            if table is not None and name in table:
                return table[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute {name!r}")

    def __delattr__(self, name: str) -> None:
        for what in ("_parameters", "_sub_layers", "_buffers"):
            table = self.__dict__.get(what)
            if table is not None and name in table:
                del table[name]
                self._non_persistable_buffer_names_set.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._sub_layers) | set(self._buffers))

    # --- making and adding state ---------------------------------------------------------------------------------
    def create_parameter(self, shape, attr=None, dtype=None, is_bias=False, default_initializer=None, device=None):
        """A parameter made as paddle makes it: attr's initializer, else default_initializer, else Xavier uniform
        (zeros for a bias); None when attr is False. Assign it to an attribute to register it."""
        attr = to_attr(attr, "create_parameter: attr")
        if attr is False:
            return None
        dt = _dt.as_dtype(self._dtype if dtype is None else dtype)
        init = attr.initializer or default_initializer
        p = autograd.create_parameter(shape, dtype=dt, initializer=init, device=device, name=attr.name,
                                      is_bias=bool(is_bias))
        if not attr.trainable:
            p.stop_gradient = True
        return p

    def add_parameter(self, name: str, parameter):
        """Register `parameter` (a parameter or None) under `name`; returns it."""
        self._check_name("add_parameter", name)
        if parameter is not None and not (isinstance(parameter, Tensor) and parameter.is_parameter):
            raise InvalidArgumentError(f"add_parameter: {name!r} is a {type(parameter).__name__}, not a parameter. "
                                       f"Fix: make it with create_parameter (or hw.create_parameter)")
        if parameter is None:
            self._forget(name, "_parameters")
            self._parameters[name] = None
        else:
            setattr(self, name, parameter)
        return parameter

    def add_sublayer(self, name: str, sublayer):
        """Register `sublayer` under `name`; returns it."""
        self._check_name("add_sublayer", name, dotted_ok=False)
        if sublayer is not None and not isinstance(sublayer, Layer):
            raise InvalidArgumentError(f"add_sublayer: {name!r} is a {type(sublayer).__name__}, not a Layer. Fix: "
                                       f"pass a Layer")
        self._registry("_sub_layers")
        self._forget(name, "_sub_layers")
        self._sub_layers[name] = sublayer
        return sublayer

    def register_buffer(self, name: str, tensor, persistable: bool = True) -> None:
        """Register a tensor the layer keeps but does not train (running statistics): in state_dict when
        persistable, device state inside to_static either way."""
        self._check_name("register_buffer", name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise InvalidArgumentError(f"register_buffer: {name!r} is a {type(tensor).__name__}, not a Tensor. Fix: "
                                       f"wrap it with hw.to_tensor")
        if name in self.__dict__ and name not in self._buffers:
            raise InvalidArgumentError(f"register_buffer: {type(self).__name__} already has an attribute {name!r}. "
                                       f"Fix: pick another name")
        self._registry("_buffers")
        self._forget(name, "_buffers")
        self._buffers[name] = None if tensor is None else autograd.buffer(tensor)
        if persistable:
            self._non_persistable_buffer_names_set.discard(name)
        else:
            self._non_persistable_buffer_names_set.add(name)

    def _check_name(self, op: str, name, dotted_ok: bool = False) -> None:
        if not isinstance(name, str) or not name or ("." in name and not dotted_ok):
            raise InvalidArgumentError(f"{op}: name must be a non-empty str without '.', not {shapes.show(name)}. "
                                       f"Fix: pass e.g. 'weight'")

    # --- walking the tree -------------------------------------------------------------------------------------------
    def named_sublayers(self, prefix: str = "", include_self: bool = False, layers_set=None):
        """(dotted name, layer) of every sublayer, depth first, each layer once."""
        seen = set() if layers_set is None else layers_set
        if include_self and id(self) not in seen:
            seen.add(id(self))
            yield prefix, self
        for name, layer in self._sub_layers.items():
            if layer is None or id(layer) in seen:
                continue
            seen.add(id(layer))
            path = f"{prefix}.{name}" if prefix else name
            yield path, layer
            yield from layer.named_sublayers(path, False, seen)

    def sublayers(self, include_self: bool = False) -> list:
        return [layer for _, layer in self.named_sublayers(include_self=include_self)]

    def named_children(self):
        """(name, layer) of the direct sublayers."""
        seen = set()
        for name, layer in self._sub_layers.items():
            if layer is not None and id(layer) not in seen:
                seen.add(id(layer))
                yield name, layer

    def children(self):
        for _, layer in self.named_children():
            yield layer

    def _named(self, what: str, prefix: str, include_sublayers: bool):
        """(dotted name, tensor) of `what` (_parameters or _buffers) here and below, each tensor once."""
        seen = set()
        layers = self.named_sublayers(prefix, include_self=True) if include_sublayers else [(prefix, self)]
        for path, layer in layers:
            for name, t in layer.__dict__[what].items():
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                yield (f"{path}.{name}" if path else name), t

    def named_parameters(self, prefix: str = "", include_sublayers: bool = True):
        return self._named("_parameters", prefix, include_sublayers)

    def parameters(self, include_sublayers: bool = True) -> list:
        return [p for _, p in self.named_parameters(include_sublayers=include_sublayers)]

    def named_buffers(self, prefix: str = "", include_sublayers: bool = True):
        return self._named("_buffers", prefix, include_sublayers)

    def buffers(self, include_sublayers: bool = True) -> list:
        return [b for _, b in self.named_buffers(include_sublayers=include_sublayers)]

    # --- modes and gradients ------------------------------------------------------------------------------------
    def train(self):
        """Training mode here and below (Dropout drops, BatchNorm uses and updates batch statistics)."""
        for layer in self.sublayers(include_self=True):
            object.__setattr__(layer, "training", True)
        return self

    def eval(self):
        """Inference mode here and below."""
        for layer in self.sublayers(include_self=True):
            object.__setattr__(layer, "training", False)
        return self

    def clear_gradients(self, set_to_zero: bool = True) -> None:
        """Drop every parameter's gradient (paddle's default keeps zeros: set_to_zero=True)."""
        for p in self.parameters():
            if not p.stop_gradient:
                p.clear_grad(set_to_zero)

    # --- state dict -------------------------------------------------------------------------------------------------
    def state_dict(self, destination=None, include_sublayers: bool = True, structured_name_prefix: str = ""):
        """Parameters and persistable buffers by dotted name, in paddle's order (a layer's parameters, its buffers,
        then its sublayers')."""
        out = OrderedDict() if destination is None else destination
        self._state_into(out, structured_name_prefix, include_sublayers)
        return out

    def _state_into(self, out, prefix: str, include_sublayers: bool) -> None:
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistable_buffer_names_set:
                out[prefix + name] = b
        if include_sublayers:
            for name, layer in self._sub_layers.items():
                if layer is not None:
                    layer._state_into(out, f"{prefix}{name}.", True)

    def set_state_dict(self, state_dict, use_structured_name: bool = True, strict: bool = True):
        """Copy `state_dict`'s values into this layer's parameters and buffers with set_value (the tensor objects
        stay the same). Every name, shape and dtype is checked first; strict (the default) also refuses missing
        and unexpected keys. Returns (missing_keys, unexpected_keys)."""
        if not isinstance(state_dict, dict):
            raise InvalidArgumentError(f"set_state_dict: expected a dict of name -> tensor, got "
                                       f"{type(state_dict).__name__}. Fix: pass model.state_dict() or hw.load(path)")
        own = self.state_dict()
        if not use_structured_name:
            own = OrderedDict((t.name or k, t) for k, t in own.items())
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise InvalidArgumentError(_key_mismatch(type(self).__name__, missing, unexpected))
        values = {k: _checked_value(k, own[k], state_dict[k]) for k in own if k in state_dict}
        with autograd.no_grad():
            for k, v in values.items():
                own[k].set_value(v)
        return IncompatibleKeys(missing, unexpected)

    set_dict = load_dict = set_state_dict  # paddle's older names

    # --- devices and dtypes ---------------------------------------------------------------------------------------
    def to(self, device=None, dtype=None, blocking=None):
        """Move every parameter and buffer to `device` and/or cast the floating ones to `dtype`, in place (the
        tensor objects stay the same, so an optimizer made before still holds them; their gradients are
        dropped)."""
        dev = None if device is None else _device.get(device)
        dt = None if dtype is None else _dt.as_dtype(dtype)
        if dt is not None and dt.kind != "f":
            raise UnsupportedDTypeError(f"Layer.to: dtype must be floating-point, not {dt.name}. Fix: pass "
                                        f"'float32' or 'float64'")
        for t in self.parameters() + self.buffers():
            moved = t
            if dt is not None and t.dtype.kind == "f" and t.dtype != dt:
                moved = moved.astype(dt)
            if dev is not None and moved.device is not dev:
                moved = moved.to(dev)
            if moved is not t:
                _replace(t, moved)
        if dt is not None:
            for layer in self.sublayers(include_self=True):
                object.__setattr__(layer, "_dtype", dt)
        return self

    def astype(self, dtype):
        """Cast the floating parameters and buffers to `dtype` in place (paddle's Layer.astype)."""
        return self.to(dtype=dtype)

    def float(self):
        return self.to(dtype="float32")

    def double(self):
        return self.to(dtype="float64")

    # --- calling and printing -----------------------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward(). Fix: define forward in the "
                                  f"subclass")

    def __call__(self, *inputs, **kwargs):
        return self.forward(*inputs, **kwargs)

    def extra_repr(self) -> str:
        """The layer's own settings, shown inside its repr (subclasses override it)."""
        return ""

    def __repr__(self):
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        subs = [f"({name}): {_indent(repr(layer), 2)}" for name, layer in self._sub_layers.items()]
        out = type(self).__name__ + "("
        if len(lines) > 1:
            out += "\n  " + "\n  ".join(lines) + "\n"
        elif lines:
            out += lines[0]
        if subs:
            out += "\n  " + "\n  ".join(subs) + "\n"
        return out + ")"


def _indent(text: str, n: int) -> str:
    first, *rest = text.split("\n")
    return "\n".join([first] + [" " * n + line for line in rest])


def _replace(t: Tensor, new: Tensor) -> None:
    """t holds new's data, device and dtype from now on (what to_static's state write-back does): the object, which
    optimizers and layers hold, stays; its gradient, of the old device or dtype, is dropped."""
    t.clear_grad()
    t._data, t._device, t._dtype = new._data, new._device, new._dtype


def _key_mismatch(layer: str, missing: list, unexpected: list) -> str:
    parts = []
    if missing:
        parts.append(f"missing keys {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    if unexpected:
        parts.append(f"unexpected keys {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''}")
    return (f"set_state_dict: the state dict does not fit {layer}: {'; '.join(parts)}. Fix: load a state dict saved "
            f"from the same architecture (compare with model.state_dict().keys()), or pass strict=False to load the "
            f"matching keys only")


def _checked_value(key: str, target: Tensor, value):
    """`value` for state-dict entry `key` as a tensor on target's device, refused unless its shape and dtype
    match."""
    if isinstance(value, np.ndarray) or (not isinstance(value, Tensor) and isinstance(value, (list, float, int))):
        value = to_tensor(np.asarray(value), device=target.device)
    if not isinstance(value, Tensor):
        raise InvalidArgumentError(f"set_state_dict: {key!r} is a {type(value).__name__}, not a tensor. Fix: map "
                                   f"each key to a Tensor or numpy array")
    if tuple(value.shape) != tuple(target.shape):
        raise InvalidArgumentError(f"set_state_dict: {key!r} has shape {list(value.shape)}, the layer's "
                                   f"{list(target.shape)}. Fix: load a state dict of the same architecture (layer "
                                   f"sizes), or reshape that entry first")
    if value.dtype != target.dtype:
        raise InvalidArgumentError(f"set_state_dict: {key!r} is {value.dtype.name}, the layer's is "
                                   f"{target.dtype.name}. Fix: cast the entry first, e.g. "
                                   f"sd[{key!r}] = sd[{key!r}].astype('{target.dtype.name}'), or model.to(dtype=...)")
    return value if value.device is target.device else value.to(target.device)
