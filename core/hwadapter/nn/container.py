"""Sequential and LayerList: layers held in order, registered as sublayers "0", "1", ... (paddle's names)."""
from __future__ import annotations

from collections import OrderedDict

from ..api import shapes
from ..api.errors import InvalidArgumentError
from .layer import Layer


def _index(container: Layer, idx, what: str) -> int:
    """A position of `container`'s sublayers (negative counts from the end), refused when out of range."""
    n = len(container._sub_layers)
    i = shapes.int_arg(what, "index", idx)
    if not -n <= i < n:
        raise InvalidArgumentError(f"{what}: index {i} is out of range for {n} layers. Fix: pass -{n}..{n - 1}")
    return i % n


class Sequential(Layer):
    """Layers called in order, each on the previous one's output. Sequential(l1, l2), Sequential(("name", l1), ...)
    or Sequential(OrderedDict(name=layer)); indexable (a slice is a Sequential), len()."""

    def __init__(self, *layers):
        super().__init__()
        if len(layers) == 1 and isinstance(layers[0], OrderedDict):
            items = list(layers[0].items())
        elif layers and all(isinstance(item, (list, tuple)) for item in layers):
            items = [tuple(item) for item in layers]
            if any(len(item) != 2 for item in items):
                raise InvalidArgumentError("Sequential: named layers come as (name, layer) pairs. Fix: pass "
                                           "Sequential(('conv', conv), ('relu', relu))")
        else:
            items = [(str(i), layer) for i, layer in enumerate(layers)]
        for name, layer in items:
            if not isinstance(layer, Layer):
                raise InvalidArgumentError(f"Sequential: item {name!r} is a {type(layer).__name__}, not a Layer. "
                                           f"Fix: pass layers (hw.nn.Linear(...), ...)")
            self.add_sublayer(str(name), layer)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return Sequential(*list(self._sub_layers.values())[idx])
        if isinstance(idx, str):
            return self._sub_layers[idx]
        return list(self._sub_layers.values())[_index(self, idx, "Sequential")]

    def __setitem__(self, idx, layer):
        if not isinstance(layer, Layer):
            raise InvalidArgumentError(f"Sequential: cannot set a {type(layer).__name__}. Fix: assign a Layer")
        name = list(self._sub_layers)[_index(self, idx, "Sequential")]
        self._sub_layers[name] = layer

    def __delitem__(self, idx):
        names = list(self._sub_layers)
        for name in (names[idx] if isinstance(idx, slice) else [names[_index(self, idx, "Sequential")]]):
            del self._sub_layers[name]

    def __len__(self):
        return len(self._sub_layers)

    def __iter__(self):
        return iter(self._sub_layers.values())

    def forward(self, input):  # noqa: A002
        for layer in self._sub_layers.values():
            input = layer(input)
        return input


class LayerList(Layer):
    """A list of layers, registered as sublayers "0", "1", ... (indexing, len, iteration, append, extend,
    insert)."""

    def __init__(self, sublayers=None):
        super().__init__()
        for layer in sublayers or ():
            self.append(layer)

    def _check(self, layer) -> Layer:
        if not isinstance(layer, Layer):
            raise InvalidArgumentError(f"LayerList: a {type(layer).__name__} is not a Layer. Fix: hold layers only")
        return layer

    def _renumber(self, layers: list) -> None:
        self._sub_layers.clear()
        for i, layer in enumerate(layers):
            self._sub_layers[str(i)] = layer

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return LayerList(list(self._sub_layers.values())[idx])
        return self._sub_layers[str(_index(self, idx, "LayerList"))]

    def __setitem__(self, idx, layer):
        self._sub_layers[str(_index(self, idx, "LayerList"))] = self._check(layer)

    def __delitem__(self, idx):
        layers = list(self._sub_layers.values())
        del layers[idx if isinstance(idx, slice) else _index(self, idx, "LayerList")]
        self._renumber(layers)

    def __len__(self):
        return len(self._sub_layers)

    def __iter__(self):
        return iter(self._sub_layers.values())

    def append(self, sublayer):
        self.add_sublayer(str(len(self)), self._check(sublayer))
        return self

    def extend(self, sublayers):
        for layer in sublayers:
            self.append(layer)
        return self

    def insert(self, index, sublayer):
        layers = list(self._sub_layers.values())
        layers.insert(shapes.int_arg("LayerList", "index", index), self._check(sublayer))
        self._renumber(layers)
