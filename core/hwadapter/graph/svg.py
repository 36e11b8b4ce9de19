"""A plan as a picture: Graphviz `dot` when it is on PATH, else a built-in layered layout; nodes coloured by device,
subgraphs boxed, copies drawn as dashed diamonds. Both give one <g class="node"> per node."""
from __future__ import annotations

import logging
import shutil
import subprocess
from xml.sax.saxutils import escape

from ..api.control import graphs_of

log = logging.getLogger("hwadapter")
PALETTE = ["#8ecae6", "#ffb703", "#90be6d", "#f28482", "#cdb4db", "#f6bd60", "#84a59d", "#e9c46a"]
_W, _H, _GAP_X, _GAP_Y, _PAD = 150, 36, 30, 50, 20


def colours(plan) -> dict:
    """Device -> fill colour, in the plan's device order."""
    devs = list(dict.fromkeys([*plan.devices, *sorted(set(plan.assignment.values()))]))
    return {d: PALETTE[i % len(PALETTE)] for i, d in enumerate(devs)}


def op_text(n) -> str:
    """A node's op as drawn: a control node's with the size of its branches or body."""
    graphs = graphs_of(n)
    if not graphs:
        return n.op
    return f"{n.op}: " + ", ".join(f"{key} {len(g.nodes)}" for key, g in graphs)


def to_dot(plan) -> str:
    """The plan in Graphviz's language: one cluster per subgraph, edges along values."""
    fill = colours(plan)
    lines = ["digraph plan {", '  rankdir=TB; node [shape=box, style="rounded,filled", fontname="Helvetica"];']
    boxed = {n: sg for sg in plan.subgraphs for n in sg.nodes}

    def node_line(n) -> str:
        dev = plan.assignment[n.name]
        shape = ', shape=diamond, style="dashed,filled"' if n.op == "copy" else ""
        label = f"copy to {n.attrs.get('device', dev)}" if n.op == "copy" else f"{n.name}\n{op_text(n)} [{dev}]"
        return f'  "{_q(n.name)}" [label="{_q(label)}", fillcolor="{fill[dev]}"{shape}];'
    for sg in plan.subgraphs:
        lines.append(f'  subgraph "cluster_{_q(sg.name)}" {{ label="{_q(sg.name)} on {_q(sg.device)}"; '
                     f'style=dashed; color="#333333";')
        lines += ["  " + node_line(plan.graph.node(name)) for name in sg.nodes]
        lines.append("  }")
    for n in plan.graph.nodes:
        if n.name not in boxed:
            lines.append(node_line(n))
    producer = {o: n.name for n in plan.graph.nodes for o in n.outputs}
    for v in plan.graph.inputs:
        lines.append(f'  "{_q(v)}" [shape=ellipse, style=solid, label="{_q(v)}"];')
    for n in plan.graph.nodes:
        for v in n.inputs:
            src = producer.get(v, v if v in plan.graph.inputs else None)
            if src is not None:
                lines.append(f'  "{_q(src)}" -> "{_q(n.name)}";')
    lines.append("}")
    return "\n".join(lines)


def _q(text) -> str:
    """Text inside a DOT double-quoted string (a newline becomes DOT's line break)."""
    return str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(plan) -> str:
    """SVG text of the plan: through `dot -Tsvg` when Graphviz is installed, else the built-in layout."""
    dot = shutil.which("dot")
    if dot is not None:
        try:
            proc = subprocess.run([dot, "-Tsvg"], input=to_dot(plan), capture_output=True, text=True, timeout=60)
            if proc.returncode == 0 and "<svg" in proc.stdout:
                return proc.stdout
            log.warning("hwadapter: Graphviz dot failed (%s); drawing the plan with the built-in layout",
                        proc.stderr.strip()[:200])
        except (OSError, subprocess.TimeoutExpired) as err:
            log.warning("hwadapter: Graphviz dot failed (%s); drawing the plan with the built-in layout", err)
    return layout_svg(plan)


def layout_svg(plan) -> str:
    """The built-in picture: nodes in layers by longest path from the inputs, subgraphs as dashed boxes."""
    graph, fill = plan.graph, colours(plan)
    producer = {o: i for i, n in enumerate(graph.nodes) for o in n.outputs}
    depth = []
    for n in graph.nodes:
        depth.append(1 + max((depth[producer[v]] for v in n.inputs if v in producer), default=-1))
    layers: dict = {}
    pos = {}
    for i, d in enumerate(depth):
        pos[i] = (len(layers.setdefault(d, [])), d)
        layers[d].append(i)

    def xy(i):
        col, row = pos[i]
        return _PAD + col * (_W + _GAP_X), _PAD + 30 + row * (_H + _GAP_Y)
    width = _PAD * 2 + max((len(v) for v in layers.values()), default=1) * (_W + _GAP_X)
    height = _PAD * 2 + 30 + (max(layers, default=0) + 1) * (_H + _GAP_Y)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="Helvetica" font-size="11">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
           'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>']
    legend_x = _PAD
    for dev, colour in fill.items():
        out.append(f'<g class="legend"><rect x="{legend_x}" y="{_PAD - 14}" width="12" height="12" fill="{colour}"/>'
                   f'<text x="{legend_x + 16}" y="{_PAD - 4}">{escape(dev)}</text></g>')
        legend_x += 30 + 7 * len(dev)
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    for sg in plan.subgraphs:
        pts = [xy(index[name]) for name in sg.nodes]
        x0, y0 = min(p[0] for p in pts) - 8, min(p[1] for p in pts) - 8
        x1, y1 = max(p[0] for p in pts) + _W + 8, max(p[1] for p in pts) + _H + 8
        out.append(f'<g class="subgraph" id="{escape(sg.name)}"><rect x="{x0}" y="{y0}" width="{x1 - x0}" '
                   f'height="{y1 - y0}" fill="none" stroke="#333" stroke-dasharray="6,3"/>'
                   f'<text x="{x0 + 4}" y="{y0 - 2}">{escape(sg.name)} on {escape(sg.device)}</text></g>')
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            if v in producer:
                (ax, ay), (bx, by) = xy(producer[v]), xy(i)
                out.append(f'<line class="edge" x1="{ax + _W / 2}" y1="{ay + _H}" x2="{bx + _W / 2}" y2="{by}" '
                           f'stroke="#555" marker-end="url(#arrow)"/>')
    for i, n in enumerate(graph.nodes):
        x, y = xy(i)
        dev = plan.assignment[n.name]
        out.append(f'<g class="node" id="node-{escape(n.name)}" data-device="{escape(dev)}" data-op="{escape(n.op)}">')
        if n.op == "copy":
            cx, cy = x + _W / 2, y + _H / 2
            out.append(f'<polygon points="{cx},{y} {x + _W},{cy} {cx},{y + _H} {x},{cy}" fill="{fill[dev]}" '
                       f'stroke="#333" stroke-dasharray="4,2"/>')
            text = f"copy to {n.attrs.get('device', dev)}"
        else:
            out.append(f'<rect x="{x}" y="{y}" width="{_W}" height="{_H}" rx="6" fill="{fill[dev]}" stroke="#333"/>')
            text = f"{n.name} ({op_text(n)})"
        out.append(f'<title>{escape(n.name)}: {escape(op_text(n))} on {escape(dev)}</title>'
                   f'<text x="{x + _W / 2}" y="{y + _H / 2 + 4}" text-anchor="middle">{escape(text[:26])}</text></g>')
    out.append("</svg>")
    return "\n".join(out)
