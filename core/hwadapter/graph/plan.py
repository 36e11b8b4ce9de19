"""Plan: a partitioned graph (assignment, subgraphs, copies, memory plan, pass reports) that can say and draw what
runs where, and run."""
from __future__ import annotations

import copy
import dataclasses
import io
from collections import Counter
from dataclasses import dataclass

from . import executor, svg
from .schedule import schedule
from .steps import Run

try:
    from .straight import Straight
except ImportError:  # straight.py is an optional faster form: without it plans run through the executor's loop
    Straight = None


@dataclass(frozen=True)
class Subgraph:
    """Nodes (in order, contiguous in the plan's graph) that one device's subgraph backend compiles into one program."""
    name: str
    device: str
    nodes: tuple


class Plan:
    """What `hwadapter.graph.partition` returns, built once and then only run: `.graph` (final, with copy nodes),
    `.assignment` (node -> device), `.subgraphs`, `.copies` (copy node names), `.memory` (MemoryPlan: liveness reuse
    and in-place steps), `.passes` (pass reports), `.schedule` (the resolved steps) and `.straight` (the same steps
    as one generated function, or None)."""

    def __init__(self, graph, assignment, subgraphs, copies, memory, passes, *, devices=(), how=None,
                 fallbacks=(), disabled=frozenset(), input_devices=None, where=None, resolved=None):
        self.graph, self.assignment, self.subgraphs, self.copies = graph, assignment, list(subgraphs), list(copies)
        self.memory, self.passes, self.devices = memory, list(passes), list(devices)
        #: node -> how its device runs it: "subgraph", "kernel", "codegen", "pinned", "fallback" or "copy".
        self.how = dict(how or {})
        #: nodes that no device before the fallback device could run.
        self.fallbacks = list(fallbacks)
        #: names of the passes switched off (None: passes were off altogether).
        self.disabled = disabled
        #: graph input -> the device it is staged on (where it is first read).
        self.input_devices = dict(input_devices or {})
        #: every step resolved: kernels and programs, slots, in-place writes, constants uploaded and prepacked
        self.schedule = schedule(self, where, resolved)
        self.straight = Straight(self.schedule) if Straight is not None else None

    def run(self, inputs, device=None) -> list:
        """Run the plan on `inputs` (Tensors or arrays, a list in graph input order or a dict by name); the outputs as
        Tensors on `device` (default: the device of the first input Tensor, else the first device of the plan)."""
        return executor.run(self, inputs, device)

    def replaced(self, name: str, call) -> "Plan":
        """A copy of this plan whose step `name` runs `call` (out of place): how tests inject a faulty kernel. A
        segment holding that step runs its steps one by one."""
        def opened(seg):  # a segment holding the step: its steps one by one
            inside = seg.run is Run.SEGMENT and any(p.name == name for p in seg.call.parts)
            return seg.call.parts if inside else (seg,)
        steps = tuple(dataclasses.replace(st, call=call, into=None) if st.name == name else st
                      for seg in self.schedule.steps for st in opened(seg))
        if len(steps) == len(self.schedule.steps) and all(a is b for a, b in zip(steps, self.schedule.steps)):
            raise KeyError(f"plan has no step {name!r}")
        new = copy.copy(self)
        new.schedule = dataclasses.replace(self.schedule, steps=steps)
        new.straight = Straight(new.schedule) if Straight is not None else None
        return new

    def summary(self) -> str:
        """A text table: nodes per device, subgraphs, fallbacks, copies, planned vs naive peak bytes, passes."""
        # lazy: only a summary needs rich, and a plan is made on every traced call's first run
        from rich.console import Console
        from rich.table import Table
        per_device = Counter(self.assignment[n.name] for n in self.graph.nodes if n.op != "copy")
        table = Table(title="hwadapter plan", show_lines=False)
        for col in ("device", "nodes", "subgraphs", "subgraph nodes", "fallbacks", "copies in"):
            table.add_column(col, justify="left" if col == "device" else "right")
        fallbacks = set(self.fallbacks)
        for dev in sorted(set(self.assignment.values()), key=lambda d: (d not in self.devices, d)):
            sgs = [s for s in self.subgraphs if s.device == dev]
            table.add_row(dev, str(per_device.get(dev, 0)), str(len(sgs)), str(sum(len(s.nodes) for s in sgs)),
                          str(sum(1 for n, d in self.assignment.items() if d == dev and n in fallbacks)),
                          str(sum(1 for c in self.copies if self.assignment[c] == dev)))
        out = io.StringIO()
        console = Console(file=out, width=110, color_system=None, force_terminal=False)
        console.print(table)
        mem = self.memory
        saved = 100.0 * (1 - mem.planned_peak / mem.naive_peak) if mem.naive_peak else 0.0
        console.print(f"copies: {len(self.copies)}   fallbacks: {len(self.fallbacks)}"
                      + (f" ({', '.join(self.fallbacks[:8])}{', ...' if len(self.fallbacks) > 8 else ''})"
                         if self.fallbacks else ""))
        inplace = len(getattr(mem, "inplace", ()))
        console.print(f"peak memory: planned {mem.planned_peak} bytes vs naive {mem.naive_peak} bytes "
                      f"({saved:.0f}% less; {inplace} node{'' if inplace == 1 else 's'} in place)")
        if self.disabled is None:
            console.print("passes: off")
        else:
            ran = ", ".join(f"{r.name} ({r.nodes_before}->{r.nodes_after})" for r in self.passes
                            if getattr(r, "note", "") != "disabled") or "none"
            console.print(f"passes run: {ran}")
            console.print(f"passes disabled: {', '.join(sorted(self.disabled)) or 'none'}")
        for s in self.subgraphs:
            console.print(f"{s.name} on {s.device}: {len(s.nodes)} nodes ({', '.join(s.nodes[:6])}"
                          f"{', ...' if len(s.nodes) > 6 else ''})")
        return out.getvalue()

    def save_svg(self, path) -> str:
        """Draw the plan as SVG (Graphviz `dot` when on PATH, else a built-in layered layout); returns the path."""
        text = svg.render(self)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return str(path)

    def __repr__(self):
        return (f"<Plan {len(self.graph.nodes)} nodes on {', '.join(sorted(set(self.assignment.values())))}: "
                f"{len(self.subgraphs)} subgraphs, {len(self.copies)} copies>")
