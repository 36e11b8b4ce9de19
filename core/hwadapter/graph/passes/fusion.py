"""Device-dependent fusion: elementwise/broadcast chains (with a trailing reduction) become one "fused" node,
conv2d followed by an activation becomes one conv2d with an `activation` epilogue, and matmul followed by the add of a
bias and an activation (a linear layer) one matmul with a bias input and that epilogue."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...api.errors import HwAdapterError
from ...api.meta import result_meta
from ...api.ir import Node
from .common import PassReport, constants_of, consumers, make_graph, toposort
from ...runtime.fused import REDUCTIONS, functor_nodes, kernel_name

#: Ops a conv2d can take as its epilogue (and the attribute value each becomes).
ACTIVATIONS = frozenset({"relu", "sigmoid", "tanh", "gelu"})


def _kernel(device, op: str, dtypes):
    """`device`'s own `op` kernel (conv2d, matmul) for inputs of `dtypes`, or None."""
    from ...runtime.device import devices  # lazy: device lookup loads plugins
    try:
        dev = devices.get(device) if isinstance(device, str) else device
        return dev.kernels.find(op, tuple(np.dtype(d) for d in dtypes))
    except HwAdapterError:
        return None


def linear_epilogues(device, dtypes=("float32", "float32")) -> frozenset:
    """The activations `device`'s matmul kernel for inputs of `dtypes` applies after a fused bias: its `epilogues`
    attribute (the reference kernel and the CPU's tuned one declare them); empty when it declares none."""
    return frozenset(getattr(_kernel(device, "matmul", dtypes), "epilogues", None) or ())


def conv_epilogues(device, dtypes=("float32", "float32")) -> frozenset:
    """The activations `device`'s conv2d kernel for inputs of `dtypes` applies as an epilogue: what the kernel
    declares in its `epilogues` attribute (the CPU reference kernel and the OpenCL GEMM do). Empty when the device
    has no conv2d kernel of its own or declares none; the partitioner may ask this too."""
    return frozenset(getattr(_kernel(device, "conv2d", dtypes), "epilogues", None) or ())


def conv_residual(device, dtypes=("float32", "float32", "float32")) -> bool:
    """Whether `device`'s conv2d kernel for inputs of `dtypes` takes a fused residual input (its `residual`
    attribute: a fourth input, the output's shape, added after the bias and before the activation)."""
    return bool(getattr(_kernel(device, "conv2d", dtypes), "residual", False))


def fuse_conv_residual(graph, assignment: dict, takes_residual=conv_residual):
    """conv2d with a bias and no epilogue whose only reader is an `add` of a tensor of the same shape and dtype (a
    residual connection), on one device whose conv2d kernel takes a residual -> one conv2d with that tensor as its
    fourth input, producing the add's output (an activation after it is folded next, by fuse_conv_activation)."""
    readers = consumers(graph.nodes)
    producer = {o: n for n in graph.nodes for o in n.outputs}
    outputs, assignment = set(graph.outputs), dict(assignment)
    replaced, dropped = {}, set()
    for add in graph.nodes:
        if add.op != "add" or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
            continue
        for side in (0, 1):
            conv = producer.get(add.inputs[side])
            other = add.inputs[1 - side]
            if conv is None or conv.op != "conv2d" or len(conv.inputs) != 3 or conv.attrs.get("activation"):
                continue
            y, dev = conv.outputs[0], assignment.get(conv.name)
            if conv.name in replaced or y in outputs or len(readers.get(y, ())) != 1 or dev is None or \
                    assignment.get(add.name) != dev:
                continue
            yv, ov, av = graph.values[y], graph.values[other], graph.values[add.outputs[0]]
            if not (yv.shape == ov.shape == av.shape and yv.dtype == ov.dtype == av.dtype):
                continue  # no broadcasting and no type promotion: the add is exactly out + residual
            if not takes_residual(dev, tuple(graph.values[i].dtype for i in conv.inputs) + (ov.dtype,)):
                continue
            replaced[conv.name] = replace(conv, inputs=tuple(conv.inputs) + (other,), outputs=add.outputs)
            dropped.add(add.name)
            assignment.pop(add.name, None)
            break
    if not dropped:
        return graph, assignment, 0
    # the residual may be computed after the conv in the old order (the add came after both): order again
    return _folded(graph, replaced, dropped, order=toposort), assignment, len(dropped)


def _folded(graph, replaced: dict, dropped: set, order=list, gone=()):
    """`graph` with convs replaced (name -> new node, producing the dropped node's output) and `dropped` gone (with
    the values in `gone`, which only dropped nodes read)."""
    nodes = order([replaced.get(n.name, n) for n in graph.nodes if n.name not in dropped])
    gone = {graph.node(c).outputs[0] for c in replaced} | set(gone)  # each conv's old output: now nothing produces it
    values = {k: v for k, v in graph.values.items() if k not in gone}
    return make_graph(nodes, values, graph.inputs, graph.outputs, constants_of(graph))


def _is_activation(node) -> bool:
    return node.op in ACTIVATIONS and not (node.op == "gelu" and node.attrs.get("approximate", False))


def _epilogue_of(node, producer: dict, readers: dict, constants=None):
    """(the activation's input, its name, the nodes it replaces) when `node` ends an activation of one tensor that
    nothing else reads: an ACTIVATIONS op; clip to [0, 6] ("relu6"); mul(y, sigmoid(y)) ("silu"); the exact GELU
    written with erf, as torch exports it (`constants`: the graph's, for its 0.5, 1 and sqrt 2); else None."""
    if _is_activation(node):
        return node.inputs[0], node.op, (node,)
    if node.op == "clip" and node.attrs.get("min") == 0 and node.attrs.get("max") == 6:
        return node.inputs[0], "relu6", (node,)
    if node.op != "mul" or len(node.inputs) != 2 or node.inputs[0] == node.inputs[1]:
        return None
    for side in (0, 1):
        y, s = node.inputs[side], node.inputs[1 - side]
        sig = producer.get(s)
        if sig is not None and sig.op == "sigmoid" and sig.inputs[0] == y and \
                len(readers.get(s, ())) == 1 and len(readers.get(y, ())) == 2:
            return y, "silu", (sig, node)
    return None if constants is None else _erf_gelu(node, producer, readers, constants)


def _scalar(name, constants, value) -> bool:
    """Whether value `name` is a constant holding one number equal to `value` (to float32 rounding)."""
    c = constants.get(name)
    return c is not None and c.size == 1 and c.dtype.kind == "f" and abs(float(c.reshape(-1)[0]) - value) <= \
        1e-6 * abs(value)


def _erf_gelu(node, producer, readers, constants):
    """(y, "gelu", its nodes) when `node` ends y * (erf(y / sqrt 2) + 1) * 0.5 (torch's export; or y / sqrt 2 as a
    mul by 1 / sqrt 2, or 0.5 * y first, as Hugging Face writes it), each step read only by the next; else None."""
    def one_reader(*nodes):
        return all(len(readers.get(n.outputs[0], ())) == 1 for n in nodes)

    def erf_of(a):  # a = erf(y / sqrt 2) + 1 -> (y, its nodes)
        if a is None or a.op != "add" or len(a.inputs) != 2:
            return None
        for e_name, one in (a.inputs, a.inputs[::-1]):
            e = producer.get(e_name)
            if e is None or e.op != "erf" or not _scalar(one, constants, 1.0):
                continue
            d = producer.get(e.inputs[0])
            if d is None or len(d.inputs) != 2:
                continue
            if d.op == "div" and _scalar(d.inputs[1], constants, 2 ** 0.5) or \
                    d.op == "mul" and _scalar(d.inputs[1], constants, 2 ** -0.5):
                return (d.inputs[0], (d, e, a)) if one_reader(d, e) else None
        return None

    for inner_name, other in (node.inputs, node.inputs[::-1]):
        inner = producer.get(inner_name)
        if inner is None or inner.op != "mul" or len(inner.inputs) != 2 or not one_reader(inner):
            continue
        for y, rest in (inner.inputs, inner.inputs[::-1]):
            if _scalar(other, constants, 0.5):  # (y * (erf(...) + 1)) * 0.5
                found = erf_of(producer.get(rest))
            elif _scalar(rest, constants, 0.5):  # (0.5 * y) * (erf(...) + 1)
                found = erf_of(producer.get(other))
            else:
                continue
            if found is not None and found[0] == y and one_reader(found[1][2]) and len(readers.get(y, ())) == 2:
                return y, "gelu", (*found[1], inner, node)
    return None


def fuse_conv_activation(graph, assignment: dict, epilogues=conv_epilogues):
    """conv2d (+bias) whose output only an activation reads (one op, or the sigmoid and mul of SiLU), on the same
    device, whose conv2d kernel takes that activation -> one conv2d with attribute `activation`, producing the
    activation's output."""
    readers = consumers(graph.nodes)
    producer = {o: n for n in graph.nodes for o in n.outputs}
    outputs, assignment = set(graph.outputs), dict(assignment)
    replaced, dropped, gone = {}, set(), set()
    constants = constants_of(graph)
    for act in graph.nodes:
        found = _epilogue_of(act, producer, readers, constants)
        conv = producer.get(found[0]) if found else None
        if conv is None or conv.op != "conv2d" or conv.attrs.get("activation") is not None or conv.name in replaced:
            continue
        _, name, chain = found
        y, dev = conv.outputs[0], assignment.get(conv.name)
        inner = [o for n in chain[:-1] for o in n.outputs]  # what only the chain reads (the sigmoid's output, ...)
        if y in outputs or not _only_chain(y, chain, readers, outputs, inner) or dev is None or \
                any(assignment.get(n.name) != dev for n in chain):
            continue
        if name not in epilogues(dev, tuple(graph.values[i].dtype for i in conv.inputs)):
            continue
        replaced[conv.name] = replace(conv, outputs=act.outputs, attrs={**conv.attrs, "activation": name})
        for n in chain:
            dropped.add(n.name)
            assignment.pop(n.name, None)
        gone.update(inner)
    return _folded(graph, replaced, dropped, gone=gone), assignment, len(replaced)


def _only_chain(y, chain, readers, outputs, inner) -> bool:
    """Whether the activation `chain` alone reads y and its inner values, none of which the graph outputs."""
    names = {n.name for n in chain}
    return not any(o in outputs for o in inner) and \
        all(r.name in names for v in (y, *inner) for r in readers.get(v, ()))


def fuse_linear_epilogue(graph, assignment: dict, epilogues=linear_epilogues):
    """matmul (two inputs, no epilogue) whose only reader is the add of a vector as long as its last dimension (a
    bias), an activation, or the add and then an activation, all on one device whose matmul kernel declares that
    activation -> one matmul with the bias as a third input and attribute `activation`."""
    readers = consumers(graph.nodes)
    producer = {o: n for n in graph.nodes for o in n.outputs}
    outputs, assignment, constants = set(graph.outputs), dict(assignment), constants_of(graph)
    activations = {}  # activation input -> (name, chain)
    for node in graph.nodes:
        found = _epilogue_of(node, producer, readers, constants)
        if found is not None:
            activations.setdefault(found[0], found[1:])
    replaced, dropped, gone = {}, set(), set()
    for mm in graph.nodes:
        if mm.op != "matmul" or len(mm.inputs) != 2 or mm.attrs.get("activation") is not None:
            continue
        y, dev = mm.outputs[0], assignment.get(mm.name)
        yv = graph.values[y]
        if dev is None or y in outputs or not yv.shape:
            continue
        kinds = epilogues(dev, tuple(graph.values[i].dtype for i in mm.inputs))
        if not kinds:
            continue
        end, bias, chain, name = y, None, [], None
        add = readers.get(y, [None])[0] if len(readers.get(y, ())) == 1 else None
        if add is not None and add.op == "add" and len(add.inputs) == 2 and add.inputs[0] != add.inputs[1] and \
                assignment.get(add.name) == dev:
            b = add.inputs[1] if add.inputs[0] == y else add.inputs[0]
            bv, av = graph.values[b], graph.values[add.outputs[0]]
            if bv.shape == (yv.shape[-1],) and bv.dtype == yv.dtype == av.dtype and av.shape == yv.shape:
                end, bias, chain = add.outputs[0], b, [add]
        act = activations.get(end)
        if act is not None and end not in outputs and act[0] in kinds:
            inner = [o for n in act[1][:-1] for o in n.outputs]
            if _only_chain(end, act[1], readers, outputs, inner) and \
                    all(assignment.get(n.name) == dev for n in act[1]):
                name = act[0]
                gone.update(inner)
                if chain:
                    gone.add(end)
                chain += list(act[1])
        if not chain:
            continue
        attrs = dict(mm.attrs) if name is None else {**mm.attrs, "activation": name}
        inputs = tuple(mm.inputs) + (() if bias is None else (bias,))
        replaced[mm.name] = replace(mm, inputs=inputs, outputs=chain[-1].outputs, attrs=attrs)
        for n in chain:
            dropped.add(n.name)
            assignment.pop(n.name, None)
    if not replaced:
        return graph, assignment, 0
    # the bias may be computed after the matmul in the old order: order again
    return _folded(graph, replaced, dropped, order=toposort, gone=gone), assignment, len(replaced)


class _Group:
    """A chain being grown: nodes of one device, closed once a reduction ends it."""

    def __init__(self, gid, device):
        self.id, self.device, self.members, self.closed = gid, device, [], False


def _grow(graph, assignment, can_fuse) -> list:
    """Groups of fusable nodes: each node joins a group of one of its producers when that keeps the graph of groups
    acyclic (no input of it comes, through whole groups, from that group), else starts one."""
    producer = {o: n for n in graph.nodes for o in n.outputs}
    readers = consumers(graph.nodes)
    group_of, groups, fusable_cache = {}, [], {}
    for node in graph.nodes:
        dev = assignment.get(node.name)
        ok = dev is not None and len(node.outputs) == 1 and len(node.inputs) > 0
        if ok:
            if dev not in fusable_cache:
                fusable_cache[dev] = bool(can_fuse(dev))
            dtypes = tuple(graph.values[i].dtype for i in node.inputs)
            ok = fusable_cache[dev] and functor_nodes(node, tuple(node.inputs), "r", dtypes) is not None
        if not ok:
            continue
        joined = None
        for i in node.inputs:
            p = producer.get(i)
            g = groups[group_of[p.name]] if p is not None and p.name in group_of else None
            if g is None or g.device != dev or g.closed:
                continue
            outside = {producer[j].name for j in node.inputs
                       if j in producer and group_of.get(producer[j].name) != g.id}
            if not outside or not _reaches(g, outside, groups, group_of, readers):
                joined = g
                break
        if joined is None:
            joined = _Group(len(groups), dev)
            groups.append(joined)
        joined.members.append(node)
        group_of[node.name] = joined.id
        joined.closed = node.op in REDUCTIONS
    return [g for g in groups if len(g.members) >= 2]


def _reaches(group, targets: set, groups, group_of, readers) -> bool:
    """Whether a node named in `targets` is downstream of `group`, a path through any node of a group continuing from
    all of that group's members (the group runs as one node)."""
    seen = {n.name for n in group.members}
    stack = list(group.members)
    while stack:
        for o in stack.pop().outputs:
            for r in readers.get(o, ()):
                gid = group_of.get(r.name)
                for m in (groups[gid].members if gid is not None else (r,)):
                    if m.name in seen:
                        continue
                    if m.name in targets:
                        return True
                    seen.add(m.name)
                    stack.append(m)
    return False


def _fused_node(graph, group, readers, taken_names):
    """The "fused" node computing `group`, or None when the fused kernel would not reproduce its values exactly
    (shapes or dtypes differ: e.g. an intermediate narrower than the chain's broadcast shape is used outside)."""
    members = {n.name for n in group.members}
    outputs_set = set(graph.outputs)
    ext_in, local = [], {}
    for n in group.members:
        for i in n.inputs:
            if i not in local and i not in ext_in and not any(i in m.outputs for m in group.members):
                ext_in.append(i)
    for k, i in enumerate(ext_in):
        local[i] = f"x{k}"
    ext_out = [n.outputs[0] for n in group.members
               if n.outputs[0] in outputs_set or any(r.name not in members for r in readers.get(n.outputs[0], ()))]
    for k, o in enumerate(ext_out):
        local[o] = f"y{k}"
    fnodes = []
    for k, n in enumerate(group.members):
        result = local.setdefault(n.outputs[0], f"t{k}")
        dtypes = tuple(graph.values[i].dtype for i in n.inputs)
        fnodes.extend(functor_nodes(n, tuple(local[i] for i in n.inputs), result, dtypes))
    f_in, f_out, fnodes = tuple(local[i] for i in ext_in), tuple(local[o] for o in ext_out), tuple(fnodes)
    attrs = {"nodes": fnodes, "inputs": f_in, "outputs": f_out, "name": kernel_name(fnodes, f_in, f_out)}
    try:
        meta = result_meta("fused", tuple(graph.values[i].shape for i in ext_in),
                           tuple(graph.values[i].dtype for i in ext_in), attrs)
    except Exception:  # the kernel-primitive builder refuses the chain (e.g. reductions over different axes)
        return None
    want = [(tuple(graph.values[o].shape), np.dtype(graph.values[o].dtype)) for o in ext_out]
    if [(tuple(s), np.dtype(d)) for s, d in meta] != want:
        return None
    name, k = f"fused_{group.id}", 0
    while name in taken_names:
        k += 1
        name = f"fused_{group.id}_{k}"
    return Node(name, "fused", tuple(ext_in), tuple(ext_out), attrs)


def fuse_chains(graph, assignment: dict, can_fuse):
    """Chains of elementwise/broadcast ops (and a trailing reduction) of one device for which can_fuse(device) is
    true -> one "fused" node each; values the rest of the graph reads, or graph outputs, stay its outputs."""
    assignment = dict(assignment)
    readers = consumers(graph.nodes)
    taken = {n.name for n in graph.nodes}
    replace_by, fused_count, ops_fused = {}, 0, 0
    for group in _grow(graph, assignment, can_fuse):
        node = _fused_node(graph, group, readers, taken)
        if node is None:
            continue
        taken.add(node.name)
        for m in group.members:
            replace_by[m.name] = node
            assignment.pop(m.name, None)
        assignment[node.name] = group.device
        fused_count += 1
        ops_fused += len(group.members)
    nodes, placed = [], set()
    for n in graph.nodes:
        f = replace_by.get(n.name)
        if f is None:
            nodes.append(n)
        elif f.name not in placed:
            nodes.append(f)
            placed.add(f.name)
    kept_values = {i for n in nodes for i in (*n.inputs, *n.outputs)} | set(graph.inputs) | set(graph.outputs) | \
        set(constants_of(graph))
    values = {k: v for k, v in graph.values.items() if k in kept_values}
    new = make_graph(toposort(nodes), values, graph.inputs, graph.outputs, constants_of(graph))
    return new, assignment, fused_count, ops_fused


def fuse(graph, assignment: dict, can_fuse, *, epilogues=conv_epilogues, residual=conv_residual,
         linear=linear_epilogues, disable=frozenset(), reports=None):
    """Device-dependent fusion of a graph whose nodes are assigned to devices (node name -> device string):
    conv2d + add of a residual -> conv2d with a residual input ("conv_residual"), conv2d + activation -> conv2d with
    an epilogue ("conv_epilogue"), matmul + bias + activation -> matmul with a bias input and an epilogue
    ("linear_epilogue"), then elementwise chains -> "fused" nodes ("fuse_chains"), never across devices.
    Returns (graph, assignment); PassReports go to `reports` if given."""
    if "fuse" in disable:
        return graph, dict(assignment)
    folds = (("conv_residual", lambda g, a: fuse_conv_residual(g, a, residual), "residual adds folded into conv2d"),
             ("conv_epilogue", lambda g, a: fuse_conv_activation(g, a, epilogues), "activations folded into conv2d"),
             ("linear_epilogue", lambda g, a: fuse_linear_epilogue(g, a, linear),
              "biases and activations folded into matmul"))
    for name, fold, what in folds:
        if name in disable:
            continue
        n0 = len(graph.nodes)
        graph, assignment, folded = fold(graph, assignment)
        if reports is not None:
            reports.append(PassReport(name, n0, len(graph.nodes), f"{folded} {what}"))
    n1 = len(graph.nodes)
    if "fuse_chains" not in disable:
        graph, assignment, count, ops = fuse_chains(graph, assignment, can_fuse)
        if reports is not None:
            reports.append(PassReport("fuse_chains", n1, len(graph.nodes), f"{ops} ops fused into {count} kernels"))
    return graph, dict(assignment)
