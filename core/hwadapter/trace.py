"""Tracing: a function run over symbolic tensors records a Graph; the eager path pays nothing for it.

A symbolic tensor is an ordinary Tensor whose device is a TracingDevice (wrapping the real one) and whose data is a
Symbol (a name, shape and dtype; no memory). The TracingDevice's routes answer every (op, dtypes) with a recorder that
appends a Node and returns Symbols shaped by hwadapter.api.meta, so the dispatcher runs unchanged. Concrete tensors
that meet symbolic ones (closure weights, hw.zeros made inside the function) and Python scalars become constants.
Reading values (bool, float, int, item, numpy) raises TracingError naming the user's line.
"""
from __future__ import annotations

import contextvars
import inspect
import linecache
import os
import sys

import numpy as np

from .api.errors import InvalidArgumentError, TracingError
from .api import meta
from .runtime.device import Device
from .runtime.memory import DeviceArray
from .dispatch import tensor as _dispatch_tensor
from .dispatch.tensor import wrap
from .tensor import Tensor, _make
from .api.ir import Graph, Node, Value

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../hwadapter


class Symbol(DeviceArray):
    """A traced value: the name of a graph value with its shape and dtype, on a TracingDevice; it holds no memory."""

    __slots__ = ("name",)
    symbolic = True
    nbytes = 0  # no memory of its own: the dispatcher's ownership check (no block, 0 bytes) passes

    def numpy(self, stream=None):
        raise read_error(self)

    def __repr__(self):
        return f"Symbol(%{self.name}: {self.dtype.name}{list(self.shape)})"


def _symbol(device, name: str, shape, dtype) -> Symbol:
    s = object.__new__(Symbol)
    s.device, s.block, s.handle, s.shape, s.dtype, s.name = device, None, None, tuple(shape), np.dtype(dtype), name
    return s


# --- errors that name the user's line ---------------------------------------------------------------------------
_WHAT = {"__bool__": "used a traced tensor as a Python bool (an `if`, `while`, `and`/`or` or `assert` on it)",
         "__float__": "converted a traced tensor to a Python float", "__int__": "converted a traced tensor to a "
         "Python int", "__index__": "used a traced tensor as a Python index", "item": "read a traced tensor's value "
         "with .item()", "tolist": "read a traced tensor's values with .tolist()", "__array__": "converted a traced "
         "tensor to a numpy array", "numpy": "read a traced tensor's values with .numpy()", "transfer": "moved a "
         "traced tensor to another device", "__repr__": "printed a traced tensor's values",
         "__reduce__": "pickled a traced tensor", "getitem": "indexed with a traced tensor's value (use gather)"}


def user_frame():
    """(file, line, function) of the innermost frame outside the hwadapter package: the user's code."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame = frame.f_back
    if frame is None:
        return "<unknown>", 0, "?"
    name, outer = frame.f_code.co_name, frame
    while name.startswith("__hw_") and outer.f_back is not None:  # a branch or body function to_static wrote
        outer = outer.f_back
        if outer.f_code.co_filename == frame.f_code.co_filename and not outer.f_code.co_name.startswith("__hw_"):
            name = outer.f_code.co_name
    return frame.f_code.co_filename, frame.f_lineno, name


def _how() -> str:
    """What the user did, in words: the outermost hwadapter frame below the user's code says (bool(), item(), ...)."""
    frame, what = sys._getframe(1), "read a traced tensor's values"
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        what = _WHAT.get(frame.f_code.co_name, what)
        frame = frame.f_back
    return what


def read_error(symbol: Symbol | None = None) -> TracingError:
    """The TracingError for reading values while tracing, naming the user's file:line and the fix."""
    path, line, func = user_frame()
    code = linecache.getline(path, line).strip()
    value = f" (%{symbol.name}: {symbol.dtype.name}{list(symbol.shape)})" if symbol is not None else ""
    fix = ("to_static converts `if`, `while` and `for ... in range` on tensors in functions it can read the source of "
           "(not in lambdas, or functions marked not_to_static): write the branch as one of those, or call "
           "hw.static.nn.cond / while_loop, or hw.where(cond, a, b) to choose per element; control flow on shapes "
           "(x.shape, len(x), x.ndim) is fine")
    code = f"`{code}` " if code else ""
    err = TracingError(f"{path}:{line} (in {func}): {code}{_how()}{value} while tracing with "
                       f"hwadapter.jit.to_static. A traced tensor has a shape and a dtype but no values yet. "
                       f"Fix: {fix}", fix=fix)
    raised = _raised.get()
    if raised is not None:  # kept for trace(): a function that catches this error must not get a trace anyway
        raised.append(err)
    return err


#: The read errors raised during the trace in progress (None outside a trace).
_raised: contextvars.ContextVar = contextvars.ContextVar("hwadapter_trace_errors", default=None)
#: The Tracer of the trace in progress (None outside a trace).
_active: contextvars.ContextVar = contextvars.ContextVar("hwadapter_tracer", default=None)


def active():
    """The Tracer recording now, or None."""
    return _active.get()


# --- the tracing device -----------------------------------------------------------------------------------------
class _Runtime:
    """What the dispatcher and the frontend ask of a tracing device's runtime: no host memory; the real sizes."""

    host_memory = False

    def __init__(self, base):
        self.base = base

    def memory_info(self):
        return self.base.runtime.memory_info()


class _Recorders(dict):
    """The tracing device's routes: (op, dtypes) -> a recorder of op (made on first use, then a dict hit)."""

    def __init__(self, tracer):
        super().__init__()
        self.tracer = tracer

    def get(self, key, default=None):
        fn = dict.get(self, key)
        if fn is None:
            op, tracer = key[0], self.tracer

            def fn(*datas, **attrs):
                return tracer.record(op, datas, attrs)
            fn.__qualname__ = f"record_{op}"
            fn.route = "trace"  # what the profiler shows for ops recorded while tracing
            self[key] = fn
        return fn

    def __missing__(self, key):
        return self.get(key)


class TracingDevice(Device):
    """The device of symbolic tensors: it wraps the real device (`base`) and records ops instead of running them."""

    def __init__(self, base: Device, tracer: "Tracer"):
        super().__init__(base.record, base.index)
        self.base, self.tracer = base, tracer
        self.routes = _Recorders(tracer)
        self._runtime = _Runtime(base)
        self._str = f"{base} (tracing)"

    def constant(self, value):
        """A host array (a Python scalar, hw.zeros made inside the function) as a graph constant's symbol."""
        return self.tracer.constant(np.asarray(value))

    def empty(self, shape, dtype):
        raise InvalidArgumentError(f"{self}: uninitialised memory cannot be traced. Fix: use hw.zeros or hw.full")

    def where(self) -> str:
        """file:line of the user's code being traced now."""
        path, line, _ = user_frame()
        return f"{path}:{line}"

    def lift(self, tensor: Tensor) -> Tensor:
        """A concrete tensor of the real device that meets symbolic ones (a closure weight) as a graph constant."""
        return self.tracer.lift(tensor)

    def __repr__(self):
        return f"TracingDevice('{self.base}')"

    def __reduce__(self):
        raise read_error()


class Tracer:
    """Records the ops of one traced call into nodes, values and constants."""

    def __init__(self, base: Device):
        self.device = TracingDevice(base, self)
        self.nodes, self.values, self.inputs, self.constants = [], {}, [], {}
        self._scalars, self._lifted, self._count, self._made = {}, {}, 0, 0
        #: value name -> the autograd state of the tensor holding it (a parameter, a result that needs a gradient):
        #: what a control node's operands carry, so that its result needs a gradient when they do
        self.grad_states: dict = {}
        # device state (tensors with autograd state: parameters, buffers, optimizer state, grads): read as extra
        # graph inputs each call, and what the traced call set them to written back after it
        self.state: list = []  # (input name, tensor) read
        self.writes: dict = {}  # id(tensor) -> (tensor, its data, device and dtype before the trace)
        self.grads: dict = {}  # id(tensor) -> (tensor, its .grad before the trace)
        self.grad_reads: list = []  # (input name, GradState) whose .grad from before the trace the graph reads
        self._grad_lifted: dict = {}  # id(GradState) -> the symbolic stand-in of its .grad

    def _name(self) -> str:
        name = str(self._count)
        self._count += 1
        return name

    def input(self, name: str, tensor: Tensor) -> Tensor:
        """A symbolic stand-in for graph input `name`, shaped like `tensor`."""
        self.values[name] = Value(name, tuple(tensor.shape), tensor.dtype)
        self.inputs.append(name)
        return _make(_symbol(self.device, name, tensor.shape, tensor.dtype), self.device)

    def constant(self, arr: np.ndarray) -> Symbol:
        """The symbol of a constant holding a copy of `arr` (small ones shared by value: `x * 2` twice is one)."""
        key = (arr.dtype.str, arr.shape, arr.tobytes()) if arr.size <= 16 else None
        if key is not None and key in self._scalars:
            return self._scalars[key]
        name = f"c{len(self.constants)}"
        while name in self.values:  # an argument called c0
            name += "_"
        self.constants[name] = np.array(arr, order="C", copy=True)
        self.values[name] = Value(name, tuple(arr.shape), arr.dtype)
        s = _symbol(self.device, name, arr.shape, arr.dtype)
        if key is not None:
            self._scalars[key] = s
        return s

    def lift(self, tensor: Tensor) -> Tensor:
        """`tensor` (concrete) as a symbolic constant, once per tensor however often it is used; a tensor with
        autograd state (a parameter, buffer or gradient: it changes between calls) as a state input instead, sharing
        that state, so that gradients reach the tensor itself."""
        hit = self._lifted.get(id(tensor))
        if hit is None:
            if tensor._ag is not None:
                name = f"state{len(self.state)}"
                while name in self.values:
                    name += "_"
                self.values[name] = Value(name, tuple(tensor.shape), tensor.dtype)
                self.inputs.append(name)
                self.state.append((name, tensor))
                lifted = _make(_symbol(self.device, name, tensor.shape, tensor.dtype), self.device)
                lifted._ag = self.grad_states[name] = tensor._ag
            else:
                lifted = _make(self.constant(tensor.numpy()), self.device)
            hit = self._lifted[id(tensor)] = (tensor, lifted)  # holds tensor: its id stays its
        return hit[1]

    def lift_grad(self, ag) -> Tensor:
        """The .grad a state held before the trace, as a state input read at each run (not a constant: it changes
        between calls, e.g. gradients accumulated over micro-batches)."""
        hit = self._grad_lifted.get(id(ag))
        if hit is None:
            grad = ag.grad
            name = f"grad{len(self.grad_reads)}"
            while name in self.values:
                name += "_"
            self.values[name] = Value(name, tuple(grad.shape), grad.dtype)
            self.inputs.append(name)
            self.state.append((name, GradOf(ag)))  # in input order with the other state reads
            self.grad_reads.append((name, ag))
            hit = self._grad_lifted[id(ag)] = _make(_symbol(self.device, name, grad.shape, grad.dtype), self.device)
        return hit

    def assign(self, tensor: Tensor, value: Tensor) -> None:
        """tensor.set_value(value) inside the trace: from here on `tensor` is the symbolic value; after the trace it
        gets its own data back, and each run of the graph writes the value into it."""
        if value._device is not self.device:
            value = self.lift(value)
        if id(tensor) not in self.writes:
            if tensor._device is not self.device:
                self.lift(tensor)  # read before it is written: its value on entry is a state input
            self.writes[id(tensor)] = (tensor, tensor._data, tensor._device, tensor._dtype)
        tensor._data, tensor._device, tensor._dtype = value._data, value._device, value._dtype

    def grad_changing(self, tensor: Tensor) -> None:
        """tensor's .grad is about to change inside the trace: keep what it was, to restore and to write back."""
        ag = tensor._ag  # keyed by the state, which a lifted tensor shares with the tensor it stands for
        if id(ag) not in self.grads:
            self.grads[id(ag)] = (tensor, ag.grad)

    def restore(self) -> tuple[list, list]:
        """Give every written tensor and .grad back what it held before the trace: ([(tensor, output name)] of the
        writes, [(tensor, output name or None)] of the grads) for the graph's outputs."""
        writes = []
        for tensor, data, device, dtype in self.writes.values():
            writes.append((tensor, self.output(tensor)))
            tensor._data, tensor._device, tensor._dtype = data, device, dtype
        grads = []
        for tensor, old in self.grads.values():
            now = tensor._ag.grad
            grads.append((tensor, None if now is None else self.output(now)))
            tensor._ag.grad = old
        return writes, grads

    def record(self, op: str, datas, attrs: dict):
        """Append a node of op over `datas` (symbols) and return its output symbols, shaped by ops/meta."""
        syms = [d if isinstance(d, Symbol) and d.device is self.device else self.constant(_host(d)) for d in datas]
        shapes, dtypes = tuple(s.shape for s in syms), tuple(s.dtype for s in syms)
        due = meta.result_meta(op, shapes, dtypes, attrs)
        if due is None:
            path, line, _ = user_frame()
            raise TracingError(f"{path}:{line}: op {op!r} has no shape rule (hwadapter.api.meta), so it cannot be "
                               f"traced. Fix: call it outside the traced function, or give it a rule",
                               fix="call it outside the traced function")
        index, self._made = self._made, self._made + 1  # unique across branches and bodies too
        outs = []
        for shape, dtype in due:
            name = self._name()
            self.values[name] = Value(name, tuple(shape), np.dtype(dtype))
            outs.append(_symbol(self.device, name, shape, dtype))
        self.nodes.append(Node(f"{op}_{index}", op, tuple(s.name for s in syms), tuple(s.name for s in outs),
                               dict(attrs)))
        return outs if op in meta.MULTI_OUTPUT or len(outs) != 1 else outs[0]  # several: a fused backward kernel

    def placeholder(self, shape, dtype) -> Tensor:
        """A symbolic value nothing produces: a loop variable's stand-in inside a while_loop's cond and body."""
        name = self._name()
        self.values[name] = Value(name, tuple(shape), np.dtype(dtype))
        return _make(_symbol(self.device, name, shape, dtype), self.device)

    def region(self, fn, args: tuple, what: str):
        """Run `fn(*args)` recording into a list of its own: (its nodes, its output names, their structure). `what`
        names the branch or body in errors. Device state may not change inside (it would change on either path)."""
        saved, self.nodes = self.nodes, []
        writes, grads = len(self.writes), len(self.grads)
        try:
            result = fn(*args)
            leaves: list = []
            structure = flatten(result, "out", leaves)
            outputs = [self.output(t) for _, t in leaves]
            nodes = self.nodes
        finally:
            self.nodes = saved
        if len(self.writes) != writes or len(self.grads) != grads:
            path, line, _ = user_frame()
            fix = "update parameters and gradients outside the branch or loop (after it returns)"
            raise TracingError(f"{path}:{line}: {what} changes a tensor's value or gradient (set_value, an optimizer "
                               f"step, backward); under to_static only straight-line code may. Fix: {fix}", fix=fix)
        return nodes, outputs, structure

    def body(self, nodes: list, bound: list, outputs: list, operands: list) -> Graph:
        """The graph of a region's `nodes` taking `bound` (a loop's stand-ins) then `operands` (the outer values it
        reads), giving `outputs`; the constants it reads are its own."""
        names = set(bound) | set(operands) | set(outputs)
        for n in nodes:
            names.update(n.inputs)
            names.update(n.outputs)
        consts = {k: self.constants[k] for k in names if k in self.constants and k not in operands}
        return Graph(list(nodes), {k: self.values[k] for k in names}, list(bound) + list(operands), list(outputs),
                     consts).validate()

    def reads(self, nodes: list, outputs: list, bound: list) -> list:
        """The values a region reads from outside it, in order of first use: neither made inside, nor `bound`, nor
        constants (which the region's graph holds itself)."""
        made = set(bound) | {o for n in nodes for o in n.outputs}
        out: dict = {}
        for name in [i for n in nodes for i in n.inputs] + list(outputs):
            if name not in made and name not in self.constants:
                out.setdefault(name, None)
        return list(out)

    def symbolic(self, name: str) -> Tensor:
        """A tensor of value `name` carrying its autograd state, as an input of a control node."""
        v = self.values[name]
        t = _make(_symbol(self.device, name, v.shape, v.dtype), self.device)
        t._ag = self.grad_states.get(name)
        return t

    def output(self, tensor: Tensor) -> str:
        """The graph value name of a returned tensor (a concrete one becomes a constant)."""
        if tensor._device is not self.device:
            tensor = self.lift(tensor)
        return tensor._data.name

    def graph(self, outputs: list) -> Graph:
        """The recorded graph with these outputs, validated."""
        return Graph(list(self.nodes), dict(self.values), list(self.inputs), list(outputs),
                     dict(self.constants)).validate()


def _host(data) -> np.ndarray:
    return data if isinstance(data, np.ndarray) else data.numpy()


def is_symbolic(x) -> bool:
    """True for a tensor being traced."""
    return isinstance(x, Tensor) and isinstance(x._device, TracingDevice)


# --- tracing a call -------------------------------------------------------------------------------------------------
def flatten(obj, path: str, leaves: list) -> object:
    """The structure of `obj` with each Tensor replaced by its index in `leaves` (appended with its path name)."""
    if isinstance(obj, Tensor):
        leaves.append((path, obj))
        return _Leaf(len(leaves) - 1)
    if isinstance(obj, (tuple, list)):
        return type(obj)(flatten(v, f"{path}_{i}", leaves) for i, v in enumerate(obj))
    if isinstance(obj, dict):
        return {k: flatten(v, f"{path}_{k}", leaves) for k, v in obj.items()}
    return obj


def unflatten(structure, leaves: list):
    """`flatten`'s structure with its leaves put back."""
    if isinstance(structure, _Leaf):
        return leaves[structure.index]
    if isinstance(structure, (tuple, list)):
        return type(structure)(unflatten(v, leaves) for v in structure)
    if isinstance(structure, dict):
        return {k: unflatten(v, leaves) for k, v in structure.items()}
    return structure


class _Leaf:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __repr__(self):
        return f"<tensor {self.index}>"


def argument_names(fn, args: tuple, kwargs: dict) -> list:
    """(name, value) of each argument as `fn` binds them (positional names `arg0`... when it cannot say)."""
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return [(f"arg{i}", a) for i, a in enumerate(args)] + list(kwargs.items())
    named = []
    for name, value in bound.arguments.items():
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            named += [(f"{name}_{i}", v) for i, v in enumerate(value)]
        elif kind is inspect.Parameter.VAR_KEYWORD:
            named += list(value.items())
        else:
            named.append((name, value))
    return named


def trace(fn, args: tuple, kwargs: dict, device: Device):
    """Run `fn(*args, **kwargs)` over symbolic stand-ins of its tensors on `device`: (graph, output structure).
    The graph's inputs are the argument tensors in the order `flatten` finds them in args, then kwargs."""
    tracer = Tracer(device)
    leaves: list = []
    structure = flatten((args, kwargs), "", leaves)
    names = {}  # id(tensor) -> its names as fn's parameters bind it (x, xs_0, ...)
    for pname, value in argument_names(fn, args, kwargs):
        sub: list = []
        flatten(value, pname, sub)
        for path, t in sub:
            names.setdefault(id(t), []).append(path)
    symbolic, used = [], set()
    for position, (_, t) in enumerate(leaves):
        candidates = names.get(id(t)) or [f"in{position}"]
        name = next((c for c in candidates if c not in used), f"in{position}")
        name = name if name not in used else f"in{position}"
        used.add(name)
        symbolic.append(tracer.input(name, t))
    sargs, skwargs = unflatten(structure, symbolic)
    raised = []
    token, active_token = _raised.set(raised), _active.set(tracer)
    done = False
    try:
        result = fn(*sargs, **skwargs)
        if raised:  # the function caught a read error (try/except around a value-dependent branch): the trace would
            # record whichever branch the handler took, silently wrong for every later call
            first = raised[0]
            raise TracingError(f"{first} (the traced function caught this error and went on: a trace then records "
                               f"whatever the handler did, not what the values decide)", fix=first.fix)
        out = _finish(fn, tracer, result)
        done = True
        return out
    finally:
        _active.reset(active_token)
        _raised.reset(token)
        if not done:
            tracer.restore()
        tracer._lifted.clear()  # the captured tensors: their values are copied into the graph


def _finish(fn, tracer: Tracer, result):
    """(graph, output structure) of a traced call that returned `result`."""
    out_leaves: list = []
    out_structure = flatten(result, "out", out_leaves)
    if not out_leaves:
        raise TracingError(f"{_where(fn)}: a traced function must return a tensor, or a tuple, list or dict of "
                           f"tensors; it returned {type(result).__name__}. Fix: return tensors (compute numbers "
                           f"outside the traced function)", fix="return tensors")
    outputs = []
    for _, t in out_leaves:
        if isinstance(t._device, TracingDevice) and t._device is not tracer.device:
            raise TracingError(f"{_where(fn)}: returned a tensor of another trace. Fix: return tensors computed "
                               f"from this function's arguments", fix="return tensors of this trace")
        outputs.append(tracer.output(t))
    needs_grad = any(t._ag is not None and t._ag.node is not None and not t._ag.node.freed for _, t in out_leaves)
    absent = [t._ag for t, old in tracer.grads.values() if old is None]  # no .grad before: the graph reads none
    writes, grads = tracer.restore()
    state = State([t for _, t in tracer.state], [t for t, _ in writes], [t for t, _ in grads],
                  [name is not None for _, name in grads], len(outputs), needs_grad,
                  [ag for _, ag in tracer.grad_reads], absent)
    outputs += [name for _, name in writes] + [name for _, name in grads if name is not None]
    return tracer.graph(outputs), out_structure, state


class GradOf:
    """A state read of the .grad a GradState holds at each run."""

    __slots__ = ("ag",)

    def __init__(self, ag):
        self.ag = ag

    def now(self) -> Tensor:
        return wrap(self.ag.grad._data, self.ag.grad._device)


def _read_grad(ag):
    """Tensor.grad inside a trace: a gradient from before the trace is a state input (see Tracer.lift_grad)."""
    tracer, grad = _active.get(), ag.grad
    if tracer is None or is_symbolic(grad):
        return grad
    return tracer.lift_grad(ag)


_dispatch_tensor.read_grad = _read_grad


class State:
    """The device state of one trace: tensors read as extra inputs (after the arguments), written back from extra
    outputs (after the function's own), and whose .grad each run sets (to an output, or to None)."""

    __slots__ = ("reads", "writes", "grads", "grad_set", "results", "needs_grad", "grad_reads", "absent", "probes")

    def __init__(self, reads, writes, grads, grad_set, results, needs_grad, grad_reads=(), absent=()):
        self.reads, self.writes, self.grads, self.grad_set = reads, writes, grads, grad_set
        self.results, self.needs_grad = results, needs_grad  # the function's own outputs; one needs a gradient
        #: GradStates whose .grad the graph reads (it had one when traced), and those it had none (the graph starts
        #: them afresh): a call where either differs needs another trace (see `matches`)
        self.grad_reads, self.absent = list(grad_reads), list(absent)
        self.probes = self.grad_reads + self.absent

    def inputs(self) -> list:
        """The state tensors (and gradients read) to pass after the arguments, as they are now."""
        return [wrap(t._data, t._device) if type(t) is not GradOf else t.now() for t in self.reads]

    def presence(self) -> tuple:
        """Which of the probed states have a .grad now."""
        return tuple(ag.grad is not None for ag in self.probes)

    def matches(self) -> bool:
        """Whether the gradients are present now as when this was traced."""
        return all(ag.grad is not None for ag in self.grad_reads) and all(ag.grad is None for ag in self.absent)

    def update(self, outs: list) -> list:
        """Write the run's state outputs back; the function's own outputs."""
        extra = iter(outs[self.results:])
        for t in self.writes:
            new = next(extra)
            t._data, t._device, t._dtype = new._data, new._device, new._dtype
            t._ag.version += 1
        for t, has in zip(self.grads, self.grad_set):
            t._ag.grad = next(extra) if has else None
        return outs[:self.results]


def _where(fn) -> str:
    code = getattr(fn, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno} ({fn.__qualname__})" if code else repr(fn)
