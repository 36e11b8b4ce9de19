"""Control flow: If, Loop and Scan, whose branches and bodies are ONNX graphs that read outer values by name.

A branch or body converts in a Scope of its own (it sees the outer values; its nodes and new values are its own). If
becomes a cond node, or its branch inline when the condition is known. A Loop or Scan whose trip count is known at
conversion (a constant, or a graph input the model is converted per value of) and that cannot stop early is
unrolled up to UNROLL iterations, so each iteration's number is a constant its body may slice with; any other Loop
becomes a while_loop node (its carried values keep their shapes; scan outputs then need a known trip count).

Sequences and optionals (values.Seq, values.Opt) are lists known at conversion: a Loop carrying one is unrolled (its
trip count and condition read as values), and an If whose branches give them with a run-time condition needs
branches of one structure (the cond node chooses between their tensors); branches of different lengths make the model
convert per value of the condition, or are refused when it is computed at run time."""
from __future__ import annotations

import numpy as np

from ...api.ir import Graph
from ..convert import Context, ValueNeeded, convert_nodes
from ..node import tensor_array, to_dtype
from ..values import describe, flatten, is_tensor, rebuild, structure
from . import converter
from .tensor import reshape, slice_axes

#: iterations a Loop or Scan with a known trip count is unrolled up to; longer loops run as while_loop nodes
UNROLL = 64
_I64, _BOOL = np.dtype(np.int64), np.dtype(np.bool_)


class Scope(Context):
    """The context of a branch or body: the outer values, names and constants visible, its nodes its own."""

    def __init__(self, outer: Context, label: str):
        super().__init__(outer.opset, outer.model)
        self.values, self.constants, self.names = dict(outer.values), dict(outer.constants), dict(outer.names)
        self.graph_inputs = outer.graph_inputs
        self.label, self.outer = label, outer
        self.node = outer.node  # until its own nodes convert: what its ops' errors name

    def all_nodes(self) -> list:
        return self.outer.all_nodes() + self.nodes

    def fail(self, node, why: str, fix: str = "") -> None:
        """Context.fail, saying which branch or body the node is in."""
        super().fail(node, f"{why} (in {self.label})", fix)

    def _fresh(self, stem: str) -> str:
        return f"{self.label}/{super()._fresh(stem)}"


def body(outer: Context, proto, label: str, bound: dict) -> tuple:
    """(Scope, output refs) of the GraphProto `proto` converted with its inputs bound ({input index: ref})."""
    scope = Scope(outer, f"{outer.node.name}/{label}")
    for i, ref in bound.items():
        scope.names[proto.input[i].name] = ref
    for init in proto.initializer:
        to_dtype(init.data_type, f"initializer {init.name!r}")
        scope.names[init.name] = scope.constant(tensor_array(init, f"initializer {init.name!r} of {label}"))
    need = convert_nodes(scope, proto.node)
    if need is not None:
        raise ValueNeeded(need)
    outs = []
    for o in proto.output:
        if o.name not in scope.names:
            outer.fail(outer.node, f"its {label} graph's output {o.name!r} is made by none of its nodes",
                       fix="the model is malformed: check it with onnx.checker.check_model")
        outs.append(scope.names[o.name])
    return scope, outs


def inline(outer: Context, scope: Scope) -> None:
    """The scope's nodes and values added to the outer context (a branch taken, an iteration unrolled)."""
    outer.nodes += scope.nodes
    outer.values.update(scope.values)
    outer.constants.update(scope.constants)


def reads(scope: Scope, formals: list, outs: list) -> list:
    """The outer values a scope reads (in order of first use): neither made in it, nor bound, nor constants."""
    made = set(formals) | {o for n in scope.nodes for o in n.outputs}
    found: dict = {}
    for r in [i for n in scope.nodes for i in n.inputs] + list(outs):
        if r not in made and r not in scope.constants:
            found.setdefault(r, None)
    return list(found)


def graph_of(scope: Scope, formals: list, outs: list, captures: list) -> Graph:
    """The scope as a graph taking `formals` then `captures`, giving `outs`; the constants it reads its own."""
    names = set(formals) | set(captures) | set(outs)
    for n in scope.nodes:
        names.update(n.inputs)
        names.update(n.outputs)
    consts = {k: scope.constants[k] for k in names if k in scope.constants and k not in captures}
    return Graph(list(scope.nodes), {k: scope.values[k] for k in names}, list(formals) + list(captures),
                 list(outs), consts).validate()


def _metas(ctx, refs) -> list:
    return [(tuple(ctx.shape(r)), np.dtype(ctx.dtype(r))) for r in refs]


def _show(metas) -> str:
    return ", ".join(f"{d.name}{list(s)}" for s, d in metas)


def _scalar(ctx, node, ref, dtype, what: str):
    """A one-element value as a 0-d ref of `dtype` (cast when it differs); an error naming it otherwise."""
    if int(np.prod(ctx.shape(ref))) != 1:
        ctx.fail(node, f"its {what} has shape {list(ctx.shape(ref))}; it must hold one element")
    return ctx.cast(reshape(ctx, ref, ()), dtype)


@converter("If")
def if_op(ctx, node):
    pred = ctx.input(node, 0)
    branches = {"then": node.graph("then_branch"), "else": node.graph("else_branch")}
    known = ctx.const(pred)
    if known is not None:  # decided now: the branch taken, inline
        if known.size != 1:
            ctx.fail(node, f"its condition has {known.size} elements; it must hold one")
        label = "then" if bool(known.reshape(-1)[0]) else "else"
        scope, outs = body(ctx, branches[label], label, {})
        inline(ctx, scope)
        return tuple(outs)
    pred = _scalar(ctx, node, pred, _BOOL, "condition")
    done = {label: body(ctx, g, label, {}) for label, g in branches.items()}
    (t_scope, t_values), (e_scope, e_values) = done["then"], done["else"]
    if list(map(structure, t_values)) != list(map(structure, e_values)):
        need = ctx.value_need(node, 0)
        if need is not None:  # known per value of a graph input: convert per value, then one branch is inlined
            raise ValueNeeded(need)
        ctx.fail(node, f"its branches give values of different kinds or lengths (then: "
                       f"{', '.join(map(describe, t_values))}; else: {', '.join(map(describe, e_values))}), and its "
                       "condition is computed when it runs: sequences and optionals are lists known at conversion",
                 fix="make both branches give sequences of one length (or optionals both empty or both not)")
    t_outs = [r for v in t_values for r in flatten(v)]
    e_outs = [r for v in e_values for r in flatten(v)]
    if _metas(t_scope, t_outs) != _metas(e_scope, e_outs):
        ctx.fail(node, f"its branches give different outputs (then: {_show(_metas(t_scope, t_outs))}; else: "
                       f"{_show(_metas(e_scope, e_outs))}), and hwadapter graphs have static shapes")
    if not t_outs:  # empty sequences or optionals only: nothing to choose when it runs
        return tuple(t_values)
    captures = list(dict.fromkeys(reads(t_scope, [], t_outs) + reads(e_scope, [], e_outs)))
    attrs = {"then": graph_of(t_scope, [], t_outs, captures), "else": graph_of(e_scope, [], e_outs, captures)}
    out = ctx.op("cond", pred, *captures, n_outputs=len(t_outs), **attrs)
    chosen = iter(out if isinstance(out, tuple) else (out,))
    return tuple(rebuild(v, chosen) for v in t_values)


def _loop_values(ctx, node) -> tuple:
    """The inputs whose values a Loop's converter reads: its trip count and first condition when it has scan outputs
    (their length must be known) or carries a sequence or optional (unrolled only); none otherwise (a while_loop takes
    them at run time)."""
    carried = max(len(node.inputs) - 2, 0)
    scans = len(node.graph("body").output) - 1 - carried
    lists = any(v is not None and not is_tensor(v) for v in (ctx.value(node, i) for i in range(2, len(node.inputs))))
    return tuple(i for i in (0, 1) if (scans > 0 or lists) and ctx.input(node, i) is not None)


@converter("Loop", values=_loop_values)
def loop(ctx, node):
    proto = node.graph("body")
    m_ref, c_ref = ctx.input(node, 0), ctx.input(node, 1)
    v = [ctx.value(node, i) for i in range(2, len(node.inputs))]  # sequences and optionals too: unrolled only
    scans = len(proto.output) - 1 - len(v)
    if len(proto.input) != 2 + len(v) or scans < 0:
        ctx.fail(node, f"its body takes {len(proto.input)} inputs and gives {len(proto.output)} outputs for "
                       f"{len(v)} loop-carried values: it must take 2 + {len(v)} and give at least 1 + {len(v)}")
    count = ctx.const(m_ref) if m_ref is not None else None
    first = ctx.const(c_ref) if c_ref is not None else np.array(True)
    if count is not None and first is not None:
        if not bool(first.reshape(-1)[0]):
            count = np.array(0)
        unrolled = _unrolled(ctx, node, proto, int(count.reshape(-1)[0]), v, scans)
        if unrolled is not None:
            return unrolled
    if scans:
        ctx.fail(node, "its scan outputs' length depends on values known only when it runs (its trip count or "
                       f"condition, or more than {UNROLL} iterations), and hwadapter graphs have static shapes",
                 fix="give the Loop a constant trip count and a condition that stays true, or no scan outputs")
    for k, r in enumerate(v):
        if r is None:
            ctx.fail(node, f"its loop-carried value {k} is omitted", fix="give the Loop every loop-carried value")
        if not is_tensor(r):
            ctx.fail(node, f"its loop-carried value {k} ({node.inputs[2 + k]!r}) is {describe(r)}, and it runs a "
                           f"number of iterations known only when it runs (or more than {UNROLL}): a loop carries "
                           "sequences and optionals only when it is unrolled",
                     fix=f"give the Loop a trip count known at conversion, at most {UNROLL}, and a condition that "
                         "stays true")
    return _while(ctx, node, proto, m_ref, c_ref, v)


def _unrolled(ctx, node, proto, count: int, v: list, scans: int):
    """The Loop's outputs with its `count` iterations converted one after another, or None (nothing added) when it
    may stop early (its condition computed at run time) or runs longer than UNROLL."""
    if count > UNROLL:
        return None
    if count == 0 and not scans:  # it never runs: its body is not converted (it may index an empty sequence)
        return tuple(v)
    mark = len(ctx.nodes)
    carried, stacked, true = list(v), [[] for _ in range(scans)], ctx.constant(np.array(True))
    for i in range(max(count, 1)):  # one iteration at least: a loop of none still needs its scan outputs' shapes
        bound = {0: ctx.constant(np.array(i, _I64)), 1: true, **{2 + k: r for k, r in enumerate(carried)}}
        scope, outs = body(ctx, proto, f"iteration_{i}", bound)
        cond = scope.const(outs[0])
        if cond is None:  # it may stop early: a while_loop
            del ctx.nodes[mark:]
            return None
        if count == 0:  # shapes only
            return tuple(carried) + tuple(_empty(ctx, scope, outs[1 + len(v) + k]) for k in range(scans))
        inline(ctx, scope)
        carried = outs[1:1 + len(v)]
        for k in range(scans):
            if not is_tensor(outs[1 + len(v) + k]):
                ctx.fail(node, f"its body's scan output {k} is {describe(outs[1 + len(v) + k])}; scan outputs are "
                               "tensors")
            stacked[k].append(outs[1 + len(v) + k])
        if not bool(cond.reshape(-1)[0]):
            break
    return tuple(carried) + tuple(_stack(ctx, refs, 0) for refs in stacked)


def _empty(ctx, scope, ref):
    shape, dtype = scope.shape(ref), scope.dtype(ref)
    return ctx.constant(np.zeros((0, *shape), dtype))


def _stack(ctx, refs: list, axis: int):
    """The refs (alike) stacked along a new axis `axis`."""
    shape = list(ctx.shape(refs[0]))
    parts = [reshape(ctx, r, shape[:axis] + [1] + shape[axis:]) for r in refs]
    return parts[0] if len(parts) == 1 else ctx.op("concat", *parts, axis=axis)


def _while(ctx, node, proto, m_ref, c_ref, v: list):
    """A while_loop node of carried (iteration, condition, *v): the body with the iteration's number and condition,
    the loop's test `condition and iteration < trip count`."""
    start = [ctx.constant(np.array(0, _I64)),
             _scalar(ctx, node, c_ref, _BOOL, "condition") if c_ref is not None else ctx.constant(np.array(True))]
    count = _scalar(ctx, node, m_ref, _I64, "trip count") if m_ref is not None else None
    carried = start + list(v)
    formals = [_formal(ctx, r) for r in carried]
    scope, outs = body(ctx, proto, "body", dict(enumerate(formals)))
    if not all(map(is_tensor, outs)):
        ctx.fail(node, f"its body gives {', '.join(map(describe, outs))}: a while_loop carries tensors only")
    one = scope.constant(np.array(1, _I64))
    step = [scope.op("add", formals[0], one), _scalar(scope, node, outs[0], _BOOL, "body's condition output")]
    if _metas(scope, outs[1:]) != _metas(ctx, v):
        ctx.fail(node, f"its body turns the loop-carried values ({_show(_metas(ctx, v))}) into "
                       f"({_show(_metas(scope, outs[1:]))}): a while_loop keeps their shapes and dtypes")
    t_formals = [_formal(ctx, r) for r in carried]
    t_scope = Scope(ctx, f"{node.name}/cond")
    test = t_formals[1]
    if count is not None:
        test = t_scope.op("logical_and", test, t_scope.op("less", t_formals[0], count))
    return _while_node(ctx, carried, (scope, formals, step + list(outs[1:])), (t_scope, t_formals, test))[2:]


def _while_node(ctx, carried: list, body_side: tuple, test_side: tuple) -> tuple:
    """The outputs of one while_loop node over `carried`: body_side (scope, formals, next values) and test_side
    (scope, formals, predicate), each scope's outer reads its operands."""
    (scope, formals, nxt), (t_scope, t_formals, test) = body_side, test_side
    captures = list(dict.fromkeys(reads(scope, formals, nxt) + reads(t_scope, t_formals, [test])))
    attrs = {"cond": graph_of(t_scope, t_formals, [test], captures), "body": graph_of(scope, formals, nxt, captures),
             "carried": len(carried), "max_iters": None}
    return tuple(ctx.op("while_loop", *carried, *captures, n_outputs=len(carried), **attrs))


def _formal(ctx: Context, ref) -> str:
    """A new value standing for `ref` (its shape and dtype) inside a body: a loop variable."""
    name = ctx._fresh("carried")
    v = ctx.values[ref]
    ctx.values[name] = type(v)(name, v.shape, v.dtype)
    return name


@converter("Scan")
def scan(ctx, node):
    proto = node.graph("body")
    n_scan = node.int("num_scan_inputs", lo=1)
    ins = ctx.inputs(node)
    batched = ctx.opset < 9  # opset 8: a batch axis first, scan axis 1, and sequence_lens first
    if batched:
        if ins and ins[0] is not None:
            ctx.fail(node, "its sequence_lens input is given: scans of unequal lengths are not converted",
                     fix="pad the sequences and drop sequence_lens")
        ins = ins[1:]
    states, xs = ins[:len(ins) - n_scan], ins[len(ins) - n_scan:]
    n_out = len(proto.output) - len(states)
    if len(proto.input) != len(ins) or n_scan > len(ins) or n_out < 0:
        ctx.fail(node, f"its body takes {len(proto.input)} inputs and gives {len(proto.output)} outputs for "
                       f"{len(states)} states and {n_scan} scan inputs: it must take {len(states) + n_scan} and give "
                       f"at least {len(states)}")
    in_axes = node.ints("scan_input_axes", [0] * n_scan) if not batched else [0] * n_scan
    in_dirs = node.ints("scan_input_directions", None) or node.ints("directions", None) or [0] * n_scan
    out_axes = node.ints("scan_output_axes", [0] * n_out) if not batched else [0] * n_out
    out_dirs = node.ints("scan_output_directions", [0] * n_out)
    if len(in_axes) != n_scan or len(in_dirs) != n_scan or len(out_axes) != n_out or len(out_dirs) != n_out:
        ctx.fail(node, "its scan axes or directions do not match its scan inputs and outputs in number")
    if not batched:
        return _scan(ctx, node, proto, states, xs, in_axes, in_dirs, out_axes, out_dirs)
    batch = ctx.shape(xs[0])[0]
    per = [_scan(ctx, node, proto, [_take(ctx, s, 0, b) for s in states], [_take(ctx, x, 0, b) for x in xs],
                 in_axes, in_dirs, out_axes, out_dirs) for b in range(batch)]
    return tuple(_stack(ctx, [p[k] for p in per], 0) for k in range(len(proto.output)))


def _take(ctx, x, axis: int, i: int):
    """x's i-th entry along `axis`, that axis dropped."""
    shape = list(ctx.shape(x))
    return reshape(ctx, slice_axes(ctx, x, {axis: (i, i + 1, 1)}), shape[:axis] + shape[axis + 1:])


def _scan(ctx, node, proto, states: list, xs: list, in_axes, in_dirs, out_axes, out_dirs):
    """One Scan (opset 9 form) unrolled over its scan inputs' length."""
    axes = [a + len(ctx.shape(x)) if a < 0 else a for a, x in zip(in_axes, xs)]
    lengths = {ctx.shape(x)[a] for x, a in zip(xs, axes)}
    if len(lengths) != 1:
        ctx.fail(node, f"its scan inputs have different lengths {sorted(lengths)} along their scan axes")
    length = lengths.pop()
    if length > UNROLL:
        return _scan_loop(ctx, node, proto, states, xs, axes, in_dirs, out_axes, out_dirs, length)
    carried, stacked = list(states), [[] for _ in out_axes]
    for t in range(length):
        slices = [_take(ctx, x, a, length - 1 - t if d else t) for x, a, d in zip(xs, axes, in_dirs)]
        scope, outs = body(ctx, proto, f"step_{t}", dict(enumerate(carried + slices)))
        inline(ctx, scope)
        carried = outs[:len(states)]
        for k, ref in enumerate(outs[len(states):]):
            stacked[k].append(ref)
    if length == 0:
        ctx.fail(node, "its scan inputs are empty, so its scan outputs' shapes are unknown")
    outs = []
    for refs, a, d in zip(stacked, out_axes, out_dirs):
        refs = refs[::-1] if d else refs
        rank = len(ctx.shape(refs[0])) + 1
        outs.append(_stack(ctx, refs, a + rank if a < 0 else a))
    return tuple(carried) + tuple(outs)


def _scan_loop(ctx, node, proto, states: list, xs: list, axes, in_dirs, out_axes, out_dirs, length: int):
    """A Scan longer than UNROLL as one while_loop over (step, states, one buffer per scan output): each step gathers
    its slice of every scan input and scatters its outputs into the buffers, which are then its stacked outputs."""
    probe, outs = body(ctx, proto, "shapes", dict(enumerate(states + [_take(ctx, x, a, 0) for x, a in zip(xs, axes)])))
    elems = [(tuple(probe.shape(r)), np.dtype(probe.dtype(r))) for r in outs[len(states):]]  # the probe is dropped
    carried = [ctx.constant(np.array(0, _I64))] + list(states) + [ctx.constant(np.zeros((length, *s), d))
                                                                  for s, d in elems]
    formals, t_formals = [_formal(ctx, r) for r in carried], [_formal(ctx, r) for r in carried]
    scope = Scope(ctx, f"{node.name}/scan")
    step, last = formals[0], scope.constant(np.array(length - 1, _I64))
    flipped = scope.op("sub", last, step)
    slices = [scope.op("gather", x, flipped if d else step, axis=a) for x, a, d in zip(xs, axes, in_dirs)]
    inner, outs = body(scope, proto, "step", dict(enumerate(formals[1:1 + len(states)] + slices)))
    inline(scope, inner)
    buffers = []
    for k, ((shape, _), ref) in enumerate(zip(elems, outs[len(states):])):
        at = reshape(scope, flipped if out_dirs[k] else step, (1, 1))
        buffers.append(scope.op("scatter_nd", formals[1 + len(states) + k], at, reshape(scope, ref, (1, *shape)),
                                reduction="none"))
    b_outs = [scope.op("add", step, scope.constant(np.array(1, _I64)))] + list(outs[:len(states)]) + buffers
    t_scope = Scope(ctx, f"{node.name}/scan_test")
    test = t_scope.op("less", t_formals[0], t_scope.constant(np.array(length, _I64)))
    final = _while_node(ctx, carried, (scope, formals, b_outs), (t_scope, t_formals, test))
    stacked = []
    for buf, a in zip(final[1 + len(states):], out_axes):
        rank = len(ctx.shape(buf))
        a = a + rank if a < 0 else a
        stacked.append(buf if a == 0 else ctx.op("transpose", buf, perm=tuple(list(range(1, a + 1)) + [0] +
                                                                          list(range(a + 1, rank)))))
    return tuple(final[1:1 + len(states)]) + tuple(stacked)
