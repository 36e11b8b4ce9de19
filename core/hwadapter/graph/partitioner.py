"""The partitioner: each node of a graph to a device of a priority list, convex same-device subgraphs, copies."""
from __future__ import annotations

import heapq
import logging

from ..api.config import config
from ..api.control import CONTROL
from ..dispatch.dispatcher import native_route
from ..api.errors import InvalidArgumentError
from ..runtime.device import devices as _devices
from . import resolve
from ..api.ir import Graph, Node, Value
from .memory import plan_memory
from .plan import Plan, Subgraph

log = logging.getLogger("hwadapter")
_MAX_PAIR_TRIES = 4000  # merging clusters that share no edge costs a graph walk each: bounded on huge graphs


def claimed(device, graph) -> set:
    """Names of the nodes of `graph` that `device`'s subgraph backend can compile (none without a backend)."""
    backend = device.subgraph
    return set(backend.supported_nodes(graph)) if backend is not None else set()


def supports(op: str, device, dtypes: tuple) -> bool:
    """Whether `device` runs `op` for `dtypes` with its own kernel or kernel-primitive program (no fallback)."""
    return native_route(op, device, dtypes) is not None


def _passes():
    """hwadapter.graph.passes, or None while it is not there (the partitioner works without it)."""
    try:
        from . import passes  # lazy: the passes are optional to partitioning, and import the op set
    except ImportError:
        return None
    return passes


def _override(table, node, what: str) -> list:
    """The devices `table` ({node name or op: device or devices}) names for `node`: its name first, then its op."""
    if not table:
        return []
    entry = table.get(node.name, table.get(node.op))
    if entry is None:
        return []
    specs = [entry] if isinstance(entry, str) or not hasattr(entry, "__iter__") else list(entry)
    try:
        return [_devices.get(s) for s in specs]
    except Exception as err:
        raise InvalidArgumentError(f"partition: the {what} entry for node {node.name!r} (op {node.op!r}) names an "
                                   f"unusable device: {err}", fix=f"fix the {what}= argument") from None


def _assign(graph, devs, fallback, pin, forbid) -> tuple[dict, dict]:
    """(node -> Device, node -> how: "subgraph" | "kernel" | "codegen" | "pinned" | "fallback")."""
    claims = {d: claimed(d, graph) for d in devs}
    where, how = {}, {}
    for node in graph.nodes:
        dtypes = tuple(graph.values[i].dtype for i in node.inputs)
        pinned = _override(pin, node, "pin")
        banned = set(_override(forbid, node, "forbid"))
        if pinned:
            where[node.name], how[node.name] = pinned[0], "pinned"
            continue
        if node.op in CONTROL:  # its step runs plans of its own over the devices; it keeps its values on the first
            where[node.name], how[node.name] = next((d for d in devs if d not in banned), fallback), "control"
            continue
        for d in devs:
            if d in banned:
                continue
            if node.name in claims[d]:
                where[node.name], how[node.name] = d, "subgraph"
                break
            kind = native_route(node.op, d, dtypes) if supports(node.op, d, dtypes) else None
            if kind is not None:
                where[node.name], how[node.name] = d, kind
                break
        else:
            if fallback in banned:
                raise InvalidArgumentError(
                    f"partition: node {node.name!r} (op {node.op!r}) can run on none of "
                    f"{', '.join(str(d) for d in devs if d not in banned) or 'the devices allowed'}, and its fallback "
                    f"device {fallback} is forbidden", fix="allow the fallback device for it, or add a device that "
                    "runs it")
            where[node.name], how[node.name] = fallback, "fallback"
    return where, how


def _edges(graph) -> tuple[list, list]:
    """(predecessors, successors) of each node index."""
    producer = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs}
    preds = [sorted({producer[v] for v in n.inputs if v in producer}) for n in graph.nodes]
    succs = [[] for _ in graph.nodes]
    for i, ps in enumerate(preds):
        for p in ps:
            succs[p].append(i)
    return preds, succs


def _cycle_if_merged(group: set, succs, unit) -> bool:
    """Whether some path leaves `group` and comes back into it, where `unit(i)` is the set of nodes that run as one
    with node i (its group): a path through any node of another group continues from all of that group's nodes."""
    stack = [s for i in group for s in succs[i] if s not in group]
    seen = set(stack)
    while stack:
        for j in unit(stack.pop()):
            for s in succs[j]:
                if s in group:
                    return True
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
    return False


def clusters(graph, key: list, succs) -> list[set]:
    """Node indices grouped into maximal convex groups of equal `key` (None: a node stays alone): producer-consumer
    pairs first, in node order, then groups that share no edge; a merge that would close a cycle is not made."""
    owner = list(range(len(graph.nodes)))
    groups = {i: {i} for i in range(len(graph.nodes))}

    def merge(a, b) -> bool:
        if a == b:
            return True
        union = groups[a] | groups[b]
        if _cycle_if_merged(union, succs, lambda i: groups[owner[i]]):
            return False
        for i in groups[b]:
            owner[i] = a
        groups[a] = union
        del groups[b]
        return True

    for i in range(len(graph.nodes)):
        if key[i] is None:
            continue
        for s in succs[i]:
            if key[s] == key[i]:
                merge(owner[i], owner[s])
    tries = 0
    ids = sorted(g for g in groups if key[g] is not None)
    for x, a in enumerate(ids):
        for b in ids[x + 1:]:
            if a in groups and b in groups and key[a] == key[b] and tries < _MAX_PAIR_TRIES:
                tries += 1
                merge(a, b)
    return list(groups.values())


def _order(groups: list, preds) -> list[list]:
    """The groups in a topological order of the group graph (stable: by first node), each group's nodes in order."""
    owner = {i: g for g, members in enumerate(groups) for i in members}
    deps = [set() for _ in groups]
    for g, members in enumerate(groups):
        for i in members:
            deps[g] |= {owner[p] for p in preds[i] if owner[p] != g}
    users = [[] for _ in groups]
    for g, ds in enumerate(deps):
        for d in ds:
            users[d].append(g)
    waiting = [len(ds) for ds in deps]
    ready = [(min(m), g) for g, m in enumerate(groups) if not waiting[g]]
    heapq.heapify(ready)
    out = []
    while ready:
        _, g = heapq.heappop(ready)
        out.append(sorted(groups[g]))
        for u in users[g]:
            waiting[u] -= 1
            if not waiting[u]:
                heapq.heappush(ready, (min(groups[u]), u))
    if len(out) != len(groups):  # clusters() never merges into a cycle: this is a bug, say so loudly
        raise InvalidArgumentError("partition: the subgraphs form a cycle (a partitioner bug)", fix="report it")
    return out


def _disabled(passes) -> frozenset | None:
    """Names of the passes switched off, or None when passes are off altogether."""
    if passes is True:
        return frozenset()
    if passes is False or passes is None:
        return None
    return frozenset(passes)


def partition(graph, devices=None, *, min_subgraph: int = 2, pin=None, forbid=None, passes=True) -> Plan:
    """Split `graph` over `devices` (a priority list) into a Plan: each node goes to the first device whose subgraph
    backend claims it, else that runs it with a kernel or codegen, else the fallback device; maximal convex regions
    of at least `min_subgraph` claimed nodes of one device become compiled subgraphs; copies are explicit nodes.
    `pin` / `forbid`: {node name or op: device (or devices)}; `passes`: False, or the names of passes to disable
    ("inplace": no step writes its output over an input). Without `devices`: the current device, then the fallback
    device."""
    if devices is None:
        devices = [str(_devices.current()), config.fallback_device]
    if isinstance(devices, str):
        devices = [devices]
    devs = list(dict.fromkeys(_devices.get(d) for d in devices))
    if not devs:
        raise InvalidArgumentError("partition: no devices given", fix="pass a priority list of devices, e.g. devices=[str(hw.get_device())]")
    fallback = _devices.get(config.fallback_device)
    disabled, reports, mod = _disabled(passes), [], _passes()
    if disabled is not None and mod is not None and hasattr(mod, "optimize"):
        graph, reports = mod.optimize(graph, disable=disabled)
        reports = list(reports)
    where, how = _assign(graph, devs, fallback, pin, forbid)
    if disabled is not None and mod is not None and hasattr(mod, "fuse") and "fuse" not in disabled:
        graph, where, how = _fused(mod, graph, where, how, disabled, reports)

    def nested(sub):  # a branch or body of a control node: planned alike, over the same devices
        return partition(sub, [str(d) for d in devs], min_subgraph=min_subgraph, pin=pin, forbid=forbid,
                         passes=passes)
    return _build(graph, devs, fallback, where, how, min_subgraph, reports, disabled, nested)


def _fused(mod, graph, where, how, disabled, reports):
    """The fuse pass over the assignment; a fused node's device claims it again (its subgraph backend may not)."""
    before = len(graph.nodes)
    out = mod.fuse(graph, {k: str(d) for k, d in where.items()}, lambda d: _devices.get(d).codegen is not None,
                   disable=disabled, reports=reports)
    new, assignment = out if isinstance(out, tuple) else (out, {k: str(d) for k, d in where.items()})
    where = {n.name: _devices.get(assignment[n.name]) for n in new.nodes}
    claims = {d: claimed(d, new) for d in set(where.values())}
    how = {n.name: ("subgraph" if n.name in claims[where[n.name]] else how.get(n.name, "codegen")) for n in new.nodes}
    log.debug("partition: fuse turned %d nodes into %d", before, len(new.nodes))
    return new, where, how


def _build(graph, devs, fallback, where, how, min_subgraph, reports, disabled, nested=None) -> Plan:
    """Group, order, insert copies and plan memory."""
    preds, succs = _edges(graph)
    key = [(where[n.name], "sg") if how[n.name] == "subgraph" else None for n in graph.nodes]
    units = _order(clusters(graph, key, succs), preds)
    constants = getattr(graph, "constants", {}) or {}
    home = {}  # value -> the Device it is made on
    for n in graph.nodes:
        for o in n.outputs:
            home[o] = where[n.name]
    for v in graph.inputs:  # an input lives where it is first read (the executor puts it there)
        users = [where[n.name] for u in units for n in (graph.nodes[i] for i in u) if v in n.inputs]
        home[v] = users[0] if users else devs[0]
    nodes, values, assignment, subgraphs, copies = [], dict(graph.values), {}, [], []
    moved = {}  # (value, Device) -> its copy's output name
    for unit in units:
        members = [graph.nodes[i] for i in unit]
        dev = where[members[0].name]
        rewired = []
        for n in members:
            ins = []
            for v in n.inputs:
                if v in constants or home[v] is dev:
                    ins.append(v)
                    continue
                if (v, dev) not in moved:
                    name = f"{v}@{dev}"
                    moved[(v, dev)] = name
                    values[name] = Value(name, values[v].shape, values[v].dtype)
                    copy = Node(f"copy_{len(copies)}", "copy", (v,), (name,), {"device": str(dev)})
                    copies.append(copy.name)
                    nodes.append(copy)
                    assignment[copy.name] = str(dev)
                    how[copy.name] = "copy"
                ins.append(moved[(v, dev)])
            rewired.append(Node(n.name, n.op, tuple(ins), n.outputs, n.attrs))
        nodes += rewired
        for n in rewired:
            assignment[n.name] = str(dev)
        if how[members[0].name] == "subgraph" and len(members) >= min_subgraph:
            subgraphs.append(Subgraph(f"subgraph_{len(subgraphs)}", str(dev), tuple(n.name for n in rewired)))
    kwargs = {"constants": dict(constants)} if hasattr(graph, "constants") else {}
    final = Graph(nodes, values, list(graph.inputs), list(graph.outputs), **kwargs)
    fallbacks = [n for n, h in how.items() if h == "fallback" and n in assignment]
    if fallback is not devs[0]:  # a node the preferred devices could not run, left to the fallback device
        fallbacks += [n.name for n in graph.nodes if how[n.name] not in ("fallback", "pinned")
                      and where[n.name] is fallback]
    on = {n: _devices.get(d) for n, d in assignment.items()}
    resolved = resolve.kernels(final, on, subgraphs, nested)  # the one resolution: the memory plan and the steps use it
    writers = resolve.writers(final, on, resolved) if "inplace" not in (disabled or ()) else ()
    memory = plan_memory(final, writers=writers, opaque=resolve.opaque(final, subgraphs))
    return Plan(final, assignment, subgraphs, copies, memory, reports,
                devices=[str(d) for d in devs], how={k: v for k, v in how.items() if k in assignment},
                fallbacks=fallbacks, disabled=disabled,
                input_devices={v: str(home[v]) for v in graph.inputs}, where=on, resolved=resolved)
