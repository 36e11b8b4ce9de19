"""hwadapter.jit: `to_static` traces a function once per input signature into a Graph and runs it as a graph."""
from __future__ import annotations

import functools
import inspect
import itertools
import logging
import numbers
import os
import threading
import types
import weakref
from pathlib import Path

import numpy as np

from .api.config import config
from .api import dtypes as _dt
from .api.errors import HwAdapterError, InvalidArgumentError
from .api.shapes import check_rank
from . import trace as _trace
from .autograd.engine import is_grad_enabled
from .runtime.device import current
from .runtime.memory import check_fits
from .tensor import Tensor, to_tensor
from .dy2static import converted, not_to_static  # noqa: F401  hw.jit.not_to_static, paddle's name

__all__ = ["to_static", "not_to_static", "get_graph", "save", "StaticFunction"]


log = logging.getLogger("hwadapter")
_MANY = 16  # traces of one function after which retracing is worth a warning
#: Traces one function keeps by default; past it the least recently called is dropped (each holds a plan and its
#: constants on the device), so a function called with ever new signatures does not grow without end.
CACHE_SIZE = 64
_tick = itertools.count()  # when each entry was last called (the least recent is dropped first)
_FAST = ("tensors",)  # the key prefix of calls with tensor arguments only (see StaticFunction.__call__)


def executor(graph, device):
    """How a traced graph runs, as a callable (list of input Tensors -> list of output Tensors): partitioned over
    [the inputs' device, the fallback device] when hwadapter.graph.partition exists, else the reference executor."""
    from . import graph as _graph  # lazy: the graph layer costs ~90 ms; the frontend (hw.jit) loads without it
    devices = list(dict.fromkeys([str(device), config.fallback_device]))
    partition = getattr(_graph, "partition", None)
    if partition is not None:
        return partition(graph, devices=devices).run
    from .graph.reference import run  # lazy: the graph layer, as above
    constants = {k: to_tensor(a, device=device) for k, a in graph.constants.items()}

    def run_reference(tensors):
        out = run(graph, {**constants, **dict(zip(graph.inputs, tensors))}, device)
        return [out[o] for o in graph.outputs]
    return run_reference


class _Entry:
    """One traced signature: its graph, how its outputs are shaped, its device state (parameters, optimizer state and
    gradients it reads and writes: hwadapter.trace.State), and the runner (made on first run)."""

    __slots__ = ("graph", "structure", "device", "state", "runner", "lock", "keys", "used", "eager", "variants")

    def __init__(self, graph, structure, device, state, eager=None):
        self.graph, self.structure, self.device, self.state, self.runner = graph, structure, device, state, None
        self.lock = threading.Lock()
        self.keys: list = []  # its keys in the cache (the full one, and the fast one of tensor-only calls)
        self.used = next(_tick)
        self.eager = eager  # the function itself, run as is: its results need gradients outside (see _entry)
        self.variants: dict = {}  # which probed gradients are present -> the trace for that (see _variant)

    def run(self, tensors: list, args=(), kwargs=None):
        self.used = next(_tick)
        if self.eager is not None and is_grad_enabled():
            return self.eager(*args, **(kwargs or {}))
        if self.runner is None:
            with self.lock:
                if self.runner is None:
                    self.runner = executor(self.graph, self.device)
        state = self.state
        out = self.runner(tensors + state.inputs() if state.reads else tensors)
        if isinstance(out, dict):
            out = [out[o] for o in self.graph.outputs]
        out = list(out)
        if len(out) > state.results:
            out = state.update(out)
        return _trace.unflatten(self.structure, out)


def _key(fn_name: str, path: str, value):
    """The cache key of one argument: a tensor's shape, dtype and device; anything else by value (hashable)."""
    if isinstance(value, Tensor):
        return ("T", tuple(value.shape), value.dtype.str, value._device)  # the Device: a reset makes new ones
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_key(fn_name, f"{path}[{i}]", v) for i, v in enumerate(value)))
    if isinstance(value, dict):
        return ("dict", tuple((k, _key(fn_name, f"{path}[{k!r}]", v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        fix = "pass it as a tensor (hwadapter.to_tensor), as a tuple, or bind it outside (functools.partial)"
        raise InvalidArgumentError(f"to_static {fn_name}: argument {path} is a {type(value).__name__}, which is "
                                   f"unhashable: non-tensor arguments are part of the trace cache's key, by value. "
                                   f"Fix: {fix}", fix=fix) from None
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Integral):
        # by their bits: nan equals no nan (a new trace per call), and 0.0 == -0.0 although 1/x tells them apart
        z = complex(value)
        return (type(value), z.real.hex(), z.imag.hex())
    return (type(value), value)


class StaticFunction:
    """A function traced once per input signature (tensor shapes, dtypes and device; other arguments by value) and
    then run as a graph. Tensors the function reads from elsewhere (closures, attributes) are captured as constants
    when it is traced: call `clear_cache()` after changing them."""

    def __init__(self, fn, cache_size: int = CACHE_SIZE, traced=None):
        functools.update_wrapper(self, fn)
        self._fn = fn
        #: what is traced: `fn` with its Python control flow on tensors converted (hwadapter.dy2static)
        self._traced = traced if traced is not None else _converted(fn)
        self.cache_size = cache_size  # traces kept; the least recently called is dropped past it
        self._cache: dict = {}
        self._instances: dict = {}  # id(instance) -> (its bound StaticFunction, weakref or the instance)
        self._lock = threading.Lock()
        self._traces = self._dropped = 0  # traces made and dropped since the last clear_cache

    # --- methods: each instance has its own cache (its tensors are its constants) ----------------------------------
    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        hit = self._instances.get(id(instance))
        if hit is not None and hit[1]() is instance:
            return _Bound(hit[0], instance)
        key, instances = id(instance), self._instances
        try:  # held weakly, so that the cache does not keep the instance alive
            ref = weakref.ref(instance, lambda _: instances.pop(key, None))
        except TypeError:  # no weak references (__slots__): kept alive by this cache
            ref = functools.partial(_identity, instance)
        bound = StaticFunction(_method(self._fn, ref), self.cache_size, traced=_method(_converted(self._fn), ref))
        self._instances[key] = (bound, ref)
        return _Bound(bound, instance)

    # --- calls --------------------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if not kwargs:  # the common call, tensors only: keyed without walking structures
            try:
                entry = self._cache.get(_FAST + tuple([(a._data.shape, a._dtype, a._device) for a in args]))
            except AttributeError:  # not all tensors
                entry = None
            if entry is not None:
                if entry.state.probes and not entry.state.matches():
                    entry = self._variant(entry, args, kwargs, list(args))
                return entry.run(list(args), args)
        leaves: list = []
        _trace.flatten((args, kwargs), "", leaves)
        tensors = [t for _, t in leaves]
        if any(_trace.is_symbolic(t) for t in tensors):  # called inside another traced function: inlined
            return self._traced(*args, **kwargs)
        entry = self._entry(args, kwargs, tensors)
        if entry.state.probes and not entry.state.matches():
            entry = self._variant(entry, args, kwargs, tensors)
        return entry.run(tensors, args, kwargs)

    def _variant(self, entry: _Entry, args: tuple, kwargs: dict, tensors: list) -> _Entry:
        """The trace of this signature for the gradients present now (accumulating into a .grad and starting one
        afresh are different graphs), traced on first need and kept with the entry."""
        presence = entry.state.presence()
        variant = entry.variants.get(presence)
        if variant is None:
            with self._lock:
                variant = entry.variants.get(presence)
                if variant is None:
                    graph, structure, state = _trace.trace(self._traced, args, kwargs, entry.device)
                    variant = entry.variants[presence] = _Entry(graph, structure, entry.device, state, entry.eager)
                    self._traces += 1
        return variant

    def get_graph(self, *args, **kwargs):
        """The Graph traced for these arguments (traced now unless this signature was seen before)."""
        leaves: list = []
        _trace.flatten((args, kwargs), "", leaves)
        return self._entry(args, kwargs, [t for _, t in leaves]).graph

    def _entry(self, args: tuple, kwargs: dict, tensors: list) -> _Entry:
        name = getattr(self._fn, "__qualname__", repr(self._fn))
        key = (_key(name, "args", args), _key(name, "kwargs", kwargs))
        entry = self._cache.get(key)
        if entry is None:
            devices = list(dict.fromkeys(t._device for t in tensors))
            if len(devices) > 1:
                fix = "move them to one device with .to(device) first"
                raise InvalidArgumentError(f"to_static {name}: the tensor arguments are on different devices "
                                           f"({', '.join(map(str, devices))}). Fix: {fix}", fix=fix)
            device = devices[0] if devices else current()
            with self._lock:
                entry = self._cache.get(key)
                if entry is None:
                    graph, structure, state = _trace.trace(self._traced, args, kwargs, device)
                    self._make_room(name)
                    eager = None
                    if state.needs_grad and is_grad_enabled():
                        eager = self._fn
                        log.warning("to_static %s returns tensors that need gradients, and a graph's results carry "
                                    "no tape: it runs eagerly so that backward() outside works. Fix: call "
                                    "backward() and the optimizer's step() inside the function (one captured train "
                                    "step), or call it under hw.no_grad() for inference", name)
                    entry = _Entry(graph, structure, device, state, eager)
                    entry.keys.append(key)
                    if not kwargs and all(type(a) is Tensor for a in args):
                        entry.keys.append(_FAST + tuple([(a._data.shape, a._dtype, a._device) for a in args]))
                    for k in entry.keys:
                        self._cache[k] = entry
                    self._traces += 1
                    if self._traces == _MANY:
                        log.warning("to_static %s has been traced %d times (once per input signature: tensor "
                                    "shapes, dtypes and device, other arguments by value); pass changing numbers as "
                                    "tensors, or keep shapes fixed, to trace less", name, self._traces)
        return entry

    def _make_room(self, name: str) -> None:
        """Drop the least recently called traces until one more fits in `cache_size` (called holding the lock)."""
        entries = {id(e): e for e in self._cache.values()}
        while entries and len(entries) >= max(self.cache_size, 1):
            old = min(entries.values(), key=lambda e: e.used)
            del entries[id(old)]
            for k in old.keys:
                self._cache.pop(k, None)
            if not self._dropped:
                log.warning("to_static %s keeps %d traces (cache_size) and drops the least recently called to trace "
                            "another: pass changing numbers as tensors, or keep shapes fixed, to trace less",
                            name, self.cache_size)
            self._dropped += 1

    def cache_info(self) -> dict:
        """The traces kept (`traces`) and their graphs by key, the most kept (`cache_size`), and how many were
        dropped to keep within it (`dropped`)."""
        graphs = {k: e.graph for k, e in self._cache.items() if k[:1] != _FAST}
        return {"traces": len(graphs), "graphs": graphs, "cache_size": self.cache_size, "dropped": self._dropped}

    def clear_cache(self) -> None:
        """Forget every trace (after changing tensors the function captured as constants)."""
        with self._lock:
            self._cache.clear()
            self._instances.clear()
            self._traces = self._dropped = 0

    def __repr__(self):
        return f"<to_static {getattr(self._fn, '__qualname__', self._fn)!r}: {self.cache_info()['traces']} trace(s)>"


def _converted(fn):
    """`fn` (a function or a bound method) with its control flow converted for tracing; `fn` when it is not."""
    if isinstance(fn, types.MethodType):
        func = converted(fn.__func__)
        return fn if func is fn.__func__ else types.MethodType(func, fn.__self__)
    return converted(fn)


def _identity(x):
    return x


class _Bound:
    """A to_static method bound to an instance: the instance's StaticFunction (cached per instance, which it holds
    weakly) and a strong reference to the instance for as long as this object lives, so that a method of a
    temporary (`Scale().f(x)`) runs on it."""

    __slots__ = ("static", "instance")

    def __init__(self, static, instance):
        self.static, self.instance = static, instance

    def __call__(self, *args, **kwargs):
        return self.static(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.static, name)

    def __repr__(self):
        return repr(self.static)


def _method(func, ref):
    """`func` bound to the instance `ref()` gives, with the signature of the bound method (for input names)."""
    @functools.wraps(func)
    def method(*args, **kwargs):
        return func(ref(), *args, **kwargs)
    try:
        sig = inspect.signature(func)
        method.__signature__ = sig.replace(parameters=list(sig.parameters.values())[1:])
    except (TypeError, ValueError):
        pass
    return method


def to_static(fn=None, *, cache_size: int = CACHE_SIZE):
    """Decorator: trace `fn` (a function or a method) over symbolic tensors once per input signature and run the
    graph, keeping the `cache_size` most recently called traces; Python control flow on shapes is traced, on tensor
    values raises TracingError. `@to_static` and `@to_static(cache_size=8)` both work."""
    if isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1:
        fix = f"pass a positive int (default {CACHE_SIZE})"
        raise InvalidArgumentError(f"to_static: cache_size={cache_size!r} is not a positive number of traces. "
                                   f"Fix: {fix}", fix=fix)
    if fn is None:
        return functools.partial(to_static, cache_size=cache_size)
    if isinstance(fn, StaticFunction):
        return fn
    if not callable(fn):
        raise InvalidArgumentError(f"to_static: expected a function or method, got {type(fn).__name__}. Fix: "
                                   f"decorate a function with @hwadapter.jit.to_static")
    return StaticFunction(fn, cache_size)


def get_graph(fn, *args, **kwargs):
    """The Graph of `fn` (a to_static function, a method of one, or a plain function) for these arguments."""
    if isinstance(fn, _Bound):
        fn = fn.static
    if not isinstance(fn, StaticFunction):
        fn = StaticFunction(fn)
    return fn.get_graph(*args, **kwargs)


def _example(spec, i: int):
    """An input of `input_spec` as a Tensor: a Tensor as is, an array, or (shape, dtype) / an object with .shape and
    .dtype (zeros: only the signature is traced)."""
    if isinstance(spec, Tensor):
        return spec
    if isinstance(spec, np.ndarray):
        return to_tensor(spec)
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], (tuple, list)):
        shape, dtype = spec
    elif hasattr(spec, "shape") and hasattr(spec, "dtype"):
        shape, dtype = spec.shape, spec.dtype
    else:
        fix = "pass a Tensor, a numpy array, or (shape, dtype) for each input"
        raise InvalidArgumentError(f"jit.save: input_spec[{i}] is a {type(spec).__name__}, not an input. Fix: {fix}",
                                   fix=fix)
    fix = "give each input a shape of non-negative integers and a dtype hwadapter has (e.g. ((2, 3), 'float32'))"
    try:
        dims = tuple(shape)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
            raise ValueError(f"shape {dims}")
        check_rank("jit.save", dims, f"input_spec[{i}]")
        kind = _dt.as_dtype(dtype)
    except (TypeError, ValueError, HwAdapterError) as err:
        raise InvalidArgumentError(f"jit.save: input_spec[{i}] is not a shape and dtype hwadapter can trace with "
                                   f"({type(err).__name__}: {err}). Fix: {fix}", fix=fix) from None
    check_fits(f"jit.save: input_spec[{i}]", dims, kind, None, what="its example input")
    return to_tensor(np.zeros(dims, kind))


def save(fn, path, input_spec, name: str | None = None) -> str:
    """Trace `fn` for `input_spec` (one Tensor, array or (shape, dtype) per positional argument) and write its graph
    as an ONNX model (opset 18) that onnx.checker accepts; the path. An op without an ONNX form raises ExportError
    naming it, before anything is written. Needs the onnx package (pip install 'hwadapter[onnx]')."""
    # lazy: onnx is an optional package, and the ONNX frontend costs ~140 ms that tracing does not need
    from .onnx import export
    from .onnx.reader import _onnx  # lazy: as above
    _onnx()  # the clear "not installed" error
    target = _output(path)
    if name is not None and not isinstance(name, str):
        raise InvalidArgumentError(f"jit.save: name is a {type(name).__name__}, not a str",
                                   fix="pass name='my_model', or leave it out (the function's name)")
    if input_spec is None or isinstance(input_spec, (str, bytes, Tensor, np.ndarray)) or \
            not isinstance(input_spec, (list, tuple)):
        fix = "pass input_spec=[...]: one Tensor, numpy array or (shape, dtype) per positional argument of the function"
        raise InvalidArgumentError(f"jit.save: input_spec is {type(input_spec).__name__}, not a list of inputs. "
                                   f"Fix: {fix}", fix=fix)
    static = fn.static if isinstance(fn, _Bound) else fn
    if not callable(static):
        raise InvalidArgumentError(f"jit.save: fn is a {type(fn).__name__}, not a function or method",
                                   fix="pass the function (or to_static function, or method) to save")
    args = [_example(s, i) for i, s in enumerate(input_spec)]
    _takes(static, args)
    graph = get_graph(fn, *args)
    label = name or getattr(fn, "__name__", None) or "hwadapter"
    try:
        return export.save(graph, target, name=label)
    except OSError as err:
        raise InvalidArgumentError(f"jit.save: cannot write {target}: {err.strerror or err}",
                                   fix="give a path in a directory this user can write, on a disk with room") from None


def _output(path) -> str:
    """The path jit.save writes, refused before anything is traced when it is not a path to a writable file."""
    fix = "pass a file path such as 'model.onnx' in a directory this user can write"
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        raise InvalidArgumentError(f"jit.save: path is a {type(path).__name__}, not a file path", fix=fix) from None
    if not text or "\0" in text:
        raise InvalidArgumentError(f"jit.save: path {text!r} is not a file path", fix=fix)
    target = Path(text)
    if target.is_dir():
        raise InvalidArgumentError(f"jit.save: path {text} is a directory", fix=fix)
    parent = target.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise InvalidArgumentError(f"jit.save: {parent} is not a directory this user can write (for {text})",
                                   fix=fix)
    return text


def _takes(fn, args: list) -> None:
    """Refuse an input_spec with more or fewer inputs than `fn` takes, before it is traced."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: its own error says it when it is called
        return
    try:
        sig.bind(*args)
    except TypeError as err:
        fix = "give input_spec one entry per positional argument of the function"
        raise InvalidArgumentError(f"jit.save: input_spec has {len(args)} input(s), and "
                                   f"{getattr(fn, '__qualname__', fn)}{sig} cannot take them ({err})",
                                   fix=fix) from None
