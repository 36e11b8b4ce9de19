"""The tape and the backward pass: ops record a Node when an input needs a gradient; backward runs the vjp rules of
hwadapter.autograd.rules over the recorded nodes, newest first, in hwadapter's own ops (so it runs on every device,
and inside a to_static trace it is recorded into the same graph as the forward)."""
from __future__ import annotations

import contextlib
import itertools
import threading
import weakref

import numpy as np

from ..api.errors import InvalidArgumentError, KernelExecutionError, UnsupportedDTypeError
from ..dispatch import dispatcher
from ..dispatch.dispatcher import dispatch
from ..dispatch.tensor import GradState, Tensor, wrap
from ..trace import active as _tracing
from .registry import RULES

_seq = itertools.count()
_FLOAT16 = np.dtype(np.float16)
_FLOAT32 = np.dtype(np.float32)


# --- grad mode ----------------------------------------------------------------------------------------------------
class _Mode(threading.local):
    enabled = True


_mode = _Mode()


def is_grad_enabled() -> bool:
    """True unless inside no_grad (or set_grad_enabled(False))."""
    return _mode.enabled


class _Switch(contextlib.ContextDecorator):
    """Recording set to `mode` inside the block, and back to what it was after. As a decorator, a fresh switch per
    call, so that recursion and threads each restore their own mode."""

    mode = True

    def __new__(cls, fn=None):
        switch = super().__new__(cls)
        return switch(fn) if callable(fn) else switch  # @hw.no_grad without parentheses decorates fn

    def __init__(self, fn=None):
        pass

    def __enter__(self):
        self.prev, _mode.enabled = _mode.enabled, self.mode
        return self

    def __exit__(self, *exc):
        _mode.enabled = self.prev
        return False

    def _recreate_cm(self):
        return type(self)()


class no_grad(_Switch):
    """Inside it ops record nothing: results need no gradient and hold no activations."""

    mode = False


class enable_grad(_Switch):
    """Record again inside a no_grad block."""

    mode = True


class set_grad_enabled(_Switch):
    """Turn recording on or off: as a call (at once), a context manager (until its end) or a decorator (inside each
    call of the function only)."""

    def __init__(self, mode: bool):
        self.mode = bool(mode)
        self.prev, _mode.enabled = _mode.enabled, self.mode

    def __enter__(self):
        _mode.enabled = self.mode  # prev was taken when it was made (the call that set the mode)
        return self

    def __call__(self, fn):
        _mode.enabled = self.prev  # a decorator: nothing changes until the function is called
        return super().__call__(fn)

    def _recreate_cm(self):
        return set_grad_enabled(self.mode)


# --- the tape -----------------------------------------------------------------------------------------------------
class Node:
    """One recorded op: what its vjp rule needs (inputs, their versions, attributes, outputs) and which inputs want a
    gradient. Rules read `inputs`, `attrs`, `needs` and `output(i)`."""

    __slots__ = ("op", "inputs", "versions", "attrs", "needs", "outs", "meta", "seq", "freed", "__weakref__")

    def __init__(self, op, inputs, attrs, needs, outs):
        self.op, self.inputs, self.attrs, self.needs = op, inputs, attrs or {}, needs
        self.versions = tuple([0 if t._ag is None else t._ag.version for t in inputs])
        self.outs = outs  # the outputs' data, detached (no cycle from an output back to itself)
        self.meta = ((outs[0].shape, outs[0].dtype),) if len(outs) == 1 else tuple([(o.shape, o.dtype) for o in outs])
        self.seq, self.freed = next(_seq), False

    def output(self, i: int = 0) -> Tensor:
        """Output i, for rules that reuse their forward's result: without autograd state, except while a backward
        records (create_graph), where it is this node's output again, so higher derivatives flow through it."""
        data = self.outs[i]
        if not self.inputs:
            return data
        out = wrap(data, self.inputs[0]._device)
        if _mode.enabled and _is_float(out):
            out._ag = GradState(stop=False, node=self, index=i)
        return out

    def __repr__(self):
        return f"<Node {self.op} #{self.seq}>"


def _is_float(t) -> bool:
    return t._dtype.kind == "f"


def record(op: str, inputs: tuple, attrs, result):
    """The dispatcher's grad hook: give `result` a Node when an input needs a gradient and recording is on. Inside a
    to_static trace, an op whose inputs are all concrete but read device state (a parameter, a buffer) is recorded
    into the trace instead, and that result returned: state changes between calls, so it is never a constant."""
    tracer = _tracing()
    if tracer is not None and inputs[0]._device is not tracer.device:
        return dispatch(op, tuple(tracer.lift(t) if t._ag is not None else t for t in inputs), attrs)
    if not _mode.enabled:
        return None
    needs, want = [], False  # the hot path of every op on a parameter: loops, not generators
    for t in inputs:
        ag = t._ag
        need = ag is not None and not ag.stop and t._dtype.kind == "f"
        needs.append(need)
        want = want or need
    if not want:
        return None
    if type(result) is not tuple:
        if result._dtype.kind != "f":  # comparisons, argmax, integer results: no gradient flows
            return None
        result._ag = GradState(False, Node(op, inputs, attrs, tuple(needs), (result._data,)), 0)
        if tracer is not None:  # a traced value that needs a gradient: a control node reading it passes it on
            tracer.grad_states[result._data.name] = result._ag
        return None
    if not any(o._dtype.kind == "f" for o in result):
        return None
    node = Node(op, tuple(inputs), attrs, tuple(needs), tuple(o._data for o in result))
    for i, o in enumerate(result):
        if o._dtype.kind == "f":
            o._ag = GradState(stop=False, node=node, index=i)
            if tracer is not None:
                tracer.grad_states[o._data.name] = o._ag
    return None


dispatcher.grad_hook = record


# --- backward -----------------------------------------------------------------------------------------------------
#: Watchers of backward passes that accumulate into .grad (hw.DataParallel): each has `ready(leaf)`, called as soon as
#: a leaf's .grad holds this pass's total while the pass goes on (its all-reduce can start then), and `finished()`,
#: called once the pass is done.
watchers: weakref.WeakSet = weakref.WeakSet()


def _last_uses(nodes: list) -> dict:
    """id(leaf) -> the position in `nodes` of the last node that passes it a gradient."""
    last = {}
    for i, node in enumerate(nodes):
        for t, need in zip(node.inputs, node.needs):
            if need and t._ag is not None and t._ag.node is None:
                last[id(t)] = i
    return last


def _nodes(roots: list) -> list:
    """Every node that the roots' results were computed through, newest first (a topological order)."""
    seen, stack = {}, [t._ag.node for t in roots if t._ag is not None and t._ag.node is not None]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        for t in node.inputs:
            ag = t._ag
            if ag is not None and ag.node is not None and id(ag.node) not in seen:
                stack.append(ag.node)
    return sorted(seen.values(), key=lambda n: n.seq, reverse=True)


def fit(g: Tensor, shape: tuple, dtype: np.dtype) -> Tensor:
    """A gradient computed for a broadcast result brought back to its input's shape and dtype: the one place where
    broadcasting is undone (sums over the axes broadcasting added or stretched)."""
    if g.shape != shape:
        lead = g.ndim - len(shape)
        axes = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(shape) if s == 1 and g.shape[lead + i] != 1)
        if axes:
            g = dispatch("sum", (g,), {"axis": axes, "keepdim": False})
        if g.shape != shape:
            g = dispatch("reshape", (g,), {"shape": tuple(shape)})
    if g._dtype != dtype and not (dtype == _FLOAT16 and g._dtype == _FLOAT32):
        g = dispatch("cast", (g,), {"dtype": dtype.name})
    return g


def _add(a: Tensor | None, b: Tensor) -> Tensor:
    """a + b, float16 gradients adding up in float32."""
    if a is None:
        return b
    if a._dtype == _FLOAT16 or b._dtype == _FLOAT16:
        a, b = (t if t._dtype == _FLOAT32 else dispatch("cast", (t,), {"dtype": "float32"}) for t in (a, b))
    elif a._dtype != b._dtype:
        b = dispatch("cast", (b,), {"dtype": a._dtype.name})
    return dispatch("add", (a, b))


def _as(t: Tensor, dtype: np.dtype) -> Tensor:
    return t if t._dtype == dtype else dispatch("cast", (t,), {"dtype": dtype.name})


def _check_versions(node: Node) -> None:
    for i, (t, v) in enumerate(zip(node.inputs, node.versions)):
        now = 0 if t._ag is None else t._ag.version
        if now != v:
            raise InvalidArgumentError(
                f"backward: input {i} of op {node.op!r} (shape {list(t.shape)}, on {t._device}) was changed in place "
                f"(set_value or an in-place method, version {v} -> {now}) after {node.op!r} used it, and its gradient "
                f"needs the old value. Fix: change it after backward(), or change a copy (x = x.detach() or "
                f"hw.assign) instead")


def _freed(node: Node) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"backward: op {node.op!r} was already differentiated through, and its saved tensors were freed. Fix: pass "
        f"retain_graph=True to the first backward() (or hw.grad) to run backward through the same graph again")


def _rule(node: Node):
    rule = RULES.get(node.op)
    if rule is None:
        raise InvalidArgumentError(
            f"backward: op {node.op!r} (on {node.inputs[0]._device}) has no gradient rule, so no gradient flows "
            f"through it. Fix: compute this part under hw.no_grad() or with detached inputs (x.detach()), or express "
            f"it with differentiable ops")
    return rule


def _vjp(node: Node, grads: list) -> tuple:
    """The input gradients of one node: the device's fused backward kernel `<op>_vjp` when its plugin registered one,
    else the op's rule in hwadapter ops (always while recording, create_graph: a kernel's result has no rule to
    differentiate it again)."""
    fused = None if _mode.enabled else _fused_kernel(node)
    if fused is not None and all(g is not None for g in grads):
        out = dispatch(fused, tuple(node.inputs) + tuple(grads), node.attrs)
        out = _checked_vjp(node, fused, out)
        return tuple(g if need else None for g, need in zip(out, node.needs))
    return _rule(node)(node, *grads)


def _fused_kernel(node: Node):
    """`<op>_vjp` when the device of node's inputs (the real one, while tracing) has a kernel of it for these dtypes."""
    dev = node.inputs[0]._device
    dev = getattr(dev, "base", dev)
    name = f"{node.op}_vjp"
    dtypes = tuple(t._dtype for t in node.inputs) + tuple(d for _, d in node.meta)
    key = (name, dtypes, "vjp")  # kept with the device's routes (a 3-tuple: no op's route), forgotten with them
    routes = getattr(dev, "routes", None)
    hit = routes.get(key, key) if routes is not None else key
    if hit is not key:
        return hit
    try:
        found = name if dev.kernels.find(name, dtypes) is not None else None
    except Exception:  # a device without a registrar (or one that cannot list its kernels): the rules serve
        found = None
    if routes is not None:
        routes[key] = found
    return found


def _checked_vjp(node: Node, name: str, out) -> tuple:
    """A fused backward kernel's result as one gradient per input, each of its input's shape and dtype, or a
    KernelExecutionError naming the plugin (a wrong gradient shape would otherwise be broadcast away by fit)."""
    grads = out if type(out) is tuple else (out,)
    if (len(node.inputs) == 1) != (type(out) is not tuple) or len(grads) != len(node.inputs) or any(
            tuple(g.shape) != tuple(t.shape) or g._dtype != t._dtype for g, t in zip(grads, node.inputs)):
        dev = node.inputs[0]._device
        want = ", ".join(f"{t._dtype.name}{list(t.shape)}" for t in node.inputs)
        got = ", ".join(f"{g._dtype.name}{list(g.shape)}" for g in grads)
        shape = "one array" if len(node.inputs) == 1 else f"a list of {len(node.inputs)}"
        raise KernelExecutionError(
            f"op {name!r} on {dev}: the plugin's fused backward kernel returned "
            f"{'a list of ' if type(out) is tuple else ''}({got}); expected {shape}: one gradient per input of "
            f"{node.op!r}, of its shape and dtype ({want}). "
            f"This is a bug in the plugin. Fix: report it to the plugin's vendor; meanwhile switch the plugin off "
            f"with HWADAPTER_DISABLE_PLUGINS={getattr(dev, 'base', dev).type}")
    return grads


def run(roots: list, root_grads: list, retain: bool, create: bool, wanted: list | None = None,
        accumulate: bool = True) -> list | None:
    """Backpropagate root_grads from roots. Leaves' .grad accumulate (when `accumulate`); with `wanted`, the
    gradients of those tensors are returned instead (None where none flowed)."""
    nodes = _nodes(roots)
    pending: dict = {}  # (id(node), output index) or ("leaf", id) -> gradient so far (float16's in float32)
    leaves: dict = {}  # id -> leaf whose .grad gets this pass's total once, at its end (one rounding to float16)
    for t, g in zip(roots, root_grads):
        ag = t._ag
        if ag.node is None:
            if wanted is None:
                leaves[id(t)] = t
            pending[("leaf", id(t))] = _add(pending.get(("leaf", id(t))), g)
        else:
            key = (id(ag.node), ag.index)
            pending[key] = _add(pending.get(key), g)
    want_keys = {}
    if wanted is not None:
        for i, t in enumerate(wanted):
            ag = t._ag
            key = ("leaf", id(t)) if ag is None or ag.node is None else (id(ag.node), ag.index)
            want_keys.setdefault(key, []).append(i)
    early = watchers and wanted is None and accumulate  # leaves get their .grad as soon as it is whole
    last_use = _last_uses(nodes) if early else {}
    found = [None] * (len(wanted) if wanted is not None else 0)
    for key, idx in want_keys.items():  # a wanted tensor that is also a root
        if key in pending:
            for i in idx:
                found[i] = pending[key]
    with set_grad_enabled(create):
        for position, node in enumerate(nodes):
            grads = [pending.pop((id(node), i), None) for i in range(len(node.meta))]
            if all(g is None for g in grads):
                continue
            if node.freed:
                raise _freed(node)
            _check_versions(node)
            grads = [None if g is None else _as(g, d) for g, (_, d) in zip(grads, node.meta)]
            if len(grads) == 1 and grads[0] is None:
                continue
            in_grads = _vjp(node, grads)
            for t, need, g in zip(node.inputs, node.needs, in_grads):
                if not need or g is None:
                    continue
                g = fit(g, t.shape, t._dtype)
                ag = t._ag
                key = ("leaf", id(t)) if ag.node is None else (id(ag.node), ag.index)
                if key in want_keys:
                    for i in want_keys[key]:
                        found[i] = _add(found[i], g)
                    if ag.node is not None:
                        continue  # a wanted intermediate: nothing flows past it
                if ag.node is None:
                    if wanted is None and accumulate:
                        leaves[id(t)] = t
                        pending[key] = _add(pending.get(key), g)
                else:
                    pending[key] = _add(pending.get(key), g)
            if early:
                for t in node.inputs:
                    if last_use.get(id(t)) == position and id(t) in leaves:
                        _accumulate(leaves.pop(id(t)), pending.pop(("leaf", id(t))))
                        for w in watchers:
                            w.ready(t)
            if not retain:
                node.inputs, node.outs, node.freed = (), (), True
        for k, t in leaves.items():
            _accumulate(t, pending.pop(("leaf", k)))
            for w in (watchers if early else ()):
                w.ready(t)
    if early:
        for w in list(watchers):
            w.finished()
    if wanted is None:
        return None
    return [None if g is None else _as(g, t._dtype) for g, t in zip(found, wanted)]


def _accumulate(t: Tensor, g: Tensor) -> None:
    """Add g into leaf t's .grad (float16 adds up in float32 and is stored as float16)."""
    # g has t's shape: run() fits every gradient, _root_grad checks a root's
    old = t.grad  # inside a trace, a gradient from before it is a state input (Tensor.grad lifts it)
    new = _as(g if old is None else _add(old, g), t._dtype)
    set_grad(t, new if _mode.enabled else _detached(new))  # recording (create_graph): the grad keeps its graph


def _detached(t: Tensor) -> Tensor:
    return t if t._ag is None else wrap(t._data, t._device)


def set_grad(t: Tensor, g) -> None:
    """Set t's .grad (telling a trace in progress, which keeps it as state)."""
    if t._ag is None:
        t._ag = GradState()
    tracer = _tracing()
    if tracer is not None:
        tracer.grad_changing(t)
    t._ag.grad = g


def _root_grad(t: Tensor, g, what: str) -> Tensor:
    """The gradient to start from at root t: ones for a one-element t, else the given tensor, checked."""
    if g is None:
        if t.size != 1:
            raise InvalidArgumentError(
                f"{what}: the tensor has shape {list(t.shape)}, not one element, so its gradient must be given. Fix: "
                f"reduce it first (loss = y.sum() or y.mean()), or pass grad_tensor / grad_outputs of shape "
                f"{list(t.shape)}")
        return dispatch("cast", (_ones_like(t),), {"dtype": t._dtype.name})
    if not isinstance(g, Tensor):
        raise InvalidArgumentError(f"{what}: the given gradient is a {type(g).__name__}, not a Tensor. Fix: pass "
                                   f"hw.to_tensor(...) of shape {list(t.shape)}")
    if tuple(g.shape) != tuple(t.shape):
        raise InvalidArgumentError(f"{what}: the given gradient has shape {list(g.shape)}, but the tensor it is "
                                   f"for has shape {list(t.shape)}. Fix: pass a gradient of shape {list(t.shape)}")
    if g._device is not t._device and g._device is not getattr(t._device, "base", None):
        raise InvalidArgumentError(f"{what}: the given gradient is on {g._device}, the tensor on {t._device}. Fix: "
                                   f"move it with .to('{t._device}')")
    return _as(g, t._dtype)


def _ones_like(t: Tensor) -> Tensor:
    return wrap(t._device.constant(np.ones(t.shape, t._dtype)), t._device)


def _needs_grad(t, what: str) -> None:
    if not isinstance(t, Tensor):
        raise InvalidArgumentError(f"{what}: expected a Tensor, got {type(t).__name__}. Fix: pass the tensor "
                                   f"(e.g. the loss)")
    if t._dtype.kind != "f":
        raise UnsupportedDTypeError(f"{what}: a {t._dtype.name} tensor has no gradient; only floating-point results "
                                    f"are differentiable. Fix: differentiate a float result (cast before the "
                                    f"integer or bool op, not after)")
    if t._ag is None or t._ag.stop:
        raise InvalidArgumentError(
            f"{what}: the tensor (shape {list(t.shape)}) does not need a gradient: nothing it was computed from has "
            f"stop_gradient=False (or it was computed under hw.no_grad()). Fix: make the inputs parameters "
            f"(create_parameter, nn layers) or set x.stop_gradient = False before computing")


def backward(tensors, grad_tensors=None, retain_graph: bool = False) -> None:
    """Accumulate the gradients of `tensors` (a tensor or a list) into the .grad of every leaf they depend on."""
    ts = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    gs = list(grad_tensors) if isinstance(grad_tensors, (list, tuple)) else [grad_tensors] * len(ts) \
        if grad_tensors is None else [grad_tensors]
    if len(gs) != len(ts):
        raise InvalidArgumentError(f"backward: {len(ts)} tensor(s) but {len(gs)} gradient(s). Fix: pass one "
                                   f"grad_tensor per tensor")
    for t in ts:
        _needs_grad(t, "backward")
    roots = [_root_grad(t, g, "backward") for t, g in zip(ts, gs)]
    run(ts, roots, bool(retain_graph), False)


def tensor_backward(self, grad_tensor=None, retain_graph: bool = False) -> None:
    """Accumulate d(self)/d(leaf) into the .grad of every leaf this tensor depends on (paddle's Tensor.backward)."""
    backward([self], None if grad_tensor is None else [grad_tensor], retain_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         allow_unused: bool = False) -> list:
    """The gradients of `outputs` with respect to `inputs` (lists), returned rather than accumulated into .grad;
    create_graph=True records them too, for higher derivatives."""
    outs = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
    ins = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    for t in outs:
        _needs_grad(t, "grad")
    for i, t in enumerate(ins):
        if not isinstance(t, Tensor):
            raise InvalidArgumentError(f"grad: inputs[{i}] is a {type(t).__name__}, not a Tensor. Fix: pass tensors")
        if t._ag is None or t._ag.stop:
            raise InvalidArgumentError(f"grad: inputs[{i}] (shape {list(t.shape)}) has stop_gradient=True, so no "
                                       f"gradient is computed for it. Fix: set x.stop_gradient = False before "
                                       f"computing the outputs from it")
    if grad_outputs is None:
        gos = [None] * len(outs)
    else:
        gos = list(grad_outputs) if isinstance(grad_outputs, (list, tuple)) else [grad_outputs]
        if len(gos) != len(outs):
            raise InvalidArgumentError(f"grad: {len(outs)} output(s) but {len(gos)} grad_outputs. Fix: pass one per "
                                       f"output (None for ones)")
    roots = [_root_grad(t, g, f"grad (outputs[{i}])") for i, (t, g) in enumerate(zip(outs, gos))]
    retain = create_graph if retain_graph is None else bool(retain_graph)
    found = run(outs, roots, retain, bool(create_graph), wanted=ins)
    for i, g in enumerate(found):
        if g is None and not allow_unused:
            raise InvalidArgumentError(f"grad: inputs[{i}] (shape {list(ins[i].shape)}) was not used to compute the "
                                       f"outputs, so it has no gradient. Fix: pass allow_unused=True to get None "
                                       f"for it")
    if not create_graph:
        found = [None if g is None else _detached(g) for g in found]
    return found


__all__ = ["backward", "grad", "no_grad", "enable_grad", "is_grad_enabled", "set_grad_enabled", "Node", "fit",
           "set_grad"]
