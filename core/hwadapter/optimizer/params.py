"""What an optimizer trains: its `parameters` argument (a list of tensors, or paddle's parameter groups: a list of
dicts with 'params' and overrides of the optimizer's hyper-parameters) checked and put into groups."""
from __future__ import annotations

from ..api.errors import InvalidArgumentError
from ..api.shapes import show
from ..dispatch.tensor import Tensor

_MAKE = "make trainable tensors with hw.create_parameter (or a layer's create_parameter) and pass them"


def _bad(owner: str, what: str, fix: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{owner}: {what}. Fix: {fix}", fix=fix)


def check_parameter(owner: str, where: str, p) -> Tensor:
    """`p` if an optimizer can train it: a floating-point leaf tensor with stop_gradient=False, or a parameter
    frozen with stop_gradient=True (it gets no gradient, so step() leaves it, until it is unfrozen)."""
    if not isinstance(p, Tensor):
        raise _bad(owner, f"{where} is a {type(p).__name__} ({show(p)}), not a Tensor",
                   "pass model.parameters(), or a list of tensors made by hw.create_parameter")
    if p.dtype.kind != "f":
        raise _bad(owner, f"{where} is a {p.dtype.name} tensor, and only floating-point tensors have gradients",
                   f"train a float copy instead: hw.create_parameter(shape, 'float32', initializer=...); {_MAKE}")
    if p.stop_gradient and not p.is_parameter:  # a frozen parameter (trainable=False) is kept and skipped, as paddle
        raise _bad(owner, f"{where} (shape {list(p.shape)}) has stop_gradient=True and is not a parameter, so it "
                   f"never gets a gradient", f"{_MAKE}, or set p.stop_gradient = False on a leaf tensor first")
    if not p.is_leaf:
        raise _bad(owner, f"{where} (shape {list(p.shape)}) is computed from other tensors (not a leaf), and an "
                   f"optimizer updates leaves in place", f"pass the tensors it was computed from; {_MAKE}")
    return p


def _tensors(owner: str, where: str, value) -> list:
    if isinstance(value, (Tensor, dict, str, bytes)) or not hasattr(value, "__iter__"):
        raise _bad(owner, f"{where} is a {type(value).__name__}, not a list of parameters",
                   "pass a list, e.g. parameters=model.parameters() or parameters=[w, b]")
    return list(value)


def make_groups(owner: str, parameters, defaults: dict) -> list[dict]:
    """The parameter groups: each a dict of 'params' and every key of `defaults` (its own value, else the
    default). A parameter in two places and an empty list are errors."""
    if parameters is None:
        raise _bad(owner, "parameters is None: an optimizer updates the parameters it is given",
                   "pass parameters=model.parameters()")
    items = _tensors(owner, "parameters", parameters)
    if not items:
        raise _bad(owner, "parameters is empty: there is nothing to train",
                   "pass parameters=model.parameters() of a model that has parameters")
    if all(isinstance(i, dict) for i in items):
        groups = [_group(owner, i, g, defaults) for i, g in enumerate(items)]
    elif any(isinstance(i, dict) for i in items):
        raise _bad(owner, "parameters mixes dicts (parameter groups) with tensors",
                   "pass either a list of tensors or a list of dicts [{'params': [...]}, ...]")
    else:
        groups = [{"params": [check_parameter(owner, f"parameters[{i}]", p) for i, p in enumerate(items)],
                   **defaults}]
    seen = set()
    for group in groups:
        for p in group["params"]:
            if id(p) in seen:
                raise _bad(owner, f"a parameter of shape {list(p.shape)} is given twice: it would be updated twice "
                           f"per step", "pass each parameter once")
            seen.add(id(p))
    return groups


def _group(owner: str, index: int, group: dict, defaults: dict) -> dict:
    where = f"parameters[{index}]"
    unknown = sorted(set(group) - {"params"} - set(defaults), key=str)
    if unknown:
        raise _bad(owner, f"{where} has key(s) {unknown} that {owner} does not take",
                   f"use 'params' and any of {sorted(defaults)}")
    if "params" not in group:
        raise _bad(owner, f"{where} has no 'params'", "pass {'params': layer.parameters(), ...}")
    params = _tensors(owner, f"{where}['params']", group["params"])
    if not params:
        raise _bad(owner, f"{where}['params'] is empty", "leave out groups without parameters")
    out = {**defaults, **{k: v for k, v in group.items() if k != "params"}}
    out["params"] = [check_parameter(owner, f"{where}['params'][{i}]", p) for i, p in enumerate(params)]
    return out
