"""The one C-family renderer: turns a Program into C, OpenCL C or CUDA C through a Dialect.

Structure of every entry point: one work *unit* per element of the kept
(non-reduced) index space, spread over the grid by the dialect's loop.  Values
that do not vary along the reduced axes are computed once per unit; each
reduction depth gets one loop over the reduced space (independent reductions
share it); full-shape outputs are written in a last loop.  Elementwise
programs have no loops at all: one unit is one element.
"""

from collections import OrderedDict

from . import dtypes as dt
from .cfuncs import guarded
from .functors import FUNCTORS
from .ir import Apply, Const, CycleLoad, Load, Reduce, operands

INDENT = "    "


class _Ctx:
    """What functor renderers see: dialect questions plus helper registration."""

    def __init__(self, dialect):
        self.dialect = dialect
        self.helpers = OrderedDict()
        self.uses = set()

    def ctype(self, d):
        self.uses.add(dt.register(d))
        return self.dialect.ctype(d)

    def utype(self, d):
        return self.dialect.utype(d)

    def lit(self, value, d):
        return self.dialect.lit(value, d)

    def call(self, fn, d, *args):
        return self.dialect.call(fn, d, *args)

    def helper(self, kind, d):
        name, code, deps = self.dialect.helper(kind, d)
        for dep in deps:
            self.helper(*dep)
        if name not in self.helpers:
            self.helpers[name] = code
        return name


class _Scope:
    """Statements of the per-unit body (loop=False) or of one loop over the reduced space."""

    def __init__(self, loop):
        self.loop = loop
        self.lines = []
        self.names = {}
        self.coords = False
        self.flat = None


class _Renderer:
    def __init__(self, program, dialect):
        self.p, self.d, self.lay = program, dialect, program.layout
        self.ctx = _Ctx(dialect)
        self.top = _Scope(loop=False)
        self.count = 0
        self.bases = {}
        self.done_passes = set()
        self.passes = _passes(program)
        self.I = dialect.index_type
        self.need_kept, self.need_reduced = _needed_coords(program)
        # rows: an elementwise program over several axes loops over rows and, inside, along the last axis, so that
        # the inner loop's indices are affine (vectorisable) instead of unravelled with a division per element
        self.rows = (dialect.row_loops and not program.has_reduce and len(self.lay.kept_axes) >= 2
                     and bool(self.need_kept))
        self.row_lines = []

    # --- naming and statements ----------------------------------------------------------
    def fresh(self, hint):
        name = f"v{self.count}_{hint}"
        self.count += 1
        return name

    def define(self, scope, hint, d, expr):
        name = self.fresh(hint)
        scope.lines.append(f"const {self.ctx.ctype(d)} {name} = {expr};")
        return name

    # --- indexing ---------------------------------------------------------------------------
    def kept_coords(self):
        if not self.top.coords:
            self.top.coords = True
            if self.rows:  # the last coordinate is the inner loop's; the others are the row's, once per row
                self.row_lines = _unravel("row", "rest", self.lay.kept_axes[:-1], self.need_kept, self.I)
            else:
                self.top.lines += _unravel("unit", "rest", self.lay.kept_axes, self.need_kept, self.I)
        return self.top

    def reduced_coords(self, scope):
        if not scope.coords:
            scope.coords = True
            scope.lines += _unravel("r", "r_rest", self.lay.reduced_axes, self.need_reduced, self.I)

    def flat(self, scope):
        if not scope.loop:
            return "unit"       # only reached when there is no reduced axis: units are elements
        if scope.flat is None:
            if self.lay.reduced_trailing:
                expr = "unit * n_reduce + r"
            else:
                self.kept_coords()
                self.reduced_coords(scope)
                expr = "i0"
                for g in range(1, len(self.lay.groups)):
                    expr = f"({expr}) * size{g} + i{g}" if g > 1 else f"{expr} * size{g} + i{g}"
            scope.flat = "flat"
            scope.lines.append(f"const {self.I} flat = {expr};")
        return scope.flat

    def base(self, param):
        if param not in self.bases:
            terms = [self.step(param, g) for g in self.lay.kept_axes if not self.lay.bcast[param][g]]
            if terms:
                self.kept_coords()
                self.top.lines.append(f"const {self.I} {param}_base = {' + '.join(terms)};")
                self.bases[param] = f"{param}_base"
            else:
                self.bases[param] = None
        return self.bases[param]

    def step(self, param, g):
        """The offset term of kept axis g in `param`: a row-major input's last axis has stride 1 (rows: stated, so the
        inner loop reads contiguously)."""
        if self.rows and g == self.lay.kept_axes[-1] and not self.p.accesses[param].strided:
            return f"i{g}"
        return f"i{g} * {param}_stride{g}"

    def offset(self, param, scope):
        if param in self.lay.flat:
            return self.flat(scope)
        terms = [self.base(param)] if self.base(param) else []
        if scope.loop:
            reduced = [g for g in self.lay.reduced_axes if not self.lay.bcast[param][g]]
            if reduced:
                self.reduced_coords(scope)
            terms += [f"i{g} * {param}_stride{g}" for g in reduced]
        return " + ".join(terms) or "0"

    # --- values ---------------------------------------------------------------------------------
    def value(self, node, scope):
        if id(node) not in self.p.full:
            scope = self.top
        name = scope.names.get(id(node))
        if name is None:
            name = scope.names[id(node)] = self.emit(node, scope)
        return name

    def emit(self, node, scope):
        if isinstance(node, Const):
            return self.ctx.lit(node.value, node.dtype)
        if isinstance(node, Load):
            expr = self.d.load(node.param, self.offset(node.param, scope), node.dtype, self.ctx.helper)
            return self.define(scope, node.param, node.dtype, expr)
        if isinstance(node, CycleLoad):
            expr = self.d.load(node.param, f"{self.flat(scope)} % {node.param}_period", node.dtype, self.ctx.helper)
            return self.define(scope, node.param, node.dtype, expr)
        if isinstance(node, Apply):
            args = [self.value(a, scope) for a in node.args]
            regs = [dt.register(a.dtype) for a in node.args]
            expr = node.functor.render(self.ctx, args, regs, dict(node.attrs))
            if expr in args:
                return expr     # identity, or a cast that does not change the register type
            return self.define(scope, node.functor.name, node.dtype, expr)
        assert isinstance(node, Reduce)
        self.emit_pass(self.passes[id(node)])
        return self.top.names[id(node)]

    def emit_pass(self, depth):
        if depth in self.done_passes:
            return
        for shallower in range(1, depth):   # a pass reads the results of every shallower one
            self.emit_pass(shallower)
        self.done_passes.add(depth)
        reduces = [n for n in self.p.nodes if isinstance(n, Reduce) and self.passes[id(n)] == depth]
        loop = _Scope(loop=True)
        accs = []
        names = ", ".join(rd.reducer.name for rd in reduces)
        self.top.lines.append(f"/* reduction pass {depth}: {names} */")
        for rd in reduces:
            acc = f"acc{self.count}_{rd.reducer.name}"
            self.count += 1
            ident = rd.reducer.identity(rd.dtype)
            self.top.lines.append(f"{self.ctx.ctype(rd.dtype)} {acc} = {self.ctx.lit(ident, rd.dtype)};")
            accs.append(acc)
        for rd, acc in zip(reduces, accs):
            v = self.value(rd.arg, loop)
            reg = dt.register(rd.dtype)
            if dt.register(rd.arg.dtype) != reg:
                v = FUNCTORS["cast"].render(self.ctx, [v], [dt.register(rd.arg.dtype)], {"dtype": rd.dtype})
                v = self.define(loop, "widen", rd.dtype, v)
            combine = FUNCTORS[rd.reducer.combine].render(self.ctx, [acc, v], [reg, reg], {})
            loop.lines.append(f"{acc} = {combine};")
        self.close_loop(loop)
        for rd, acc in zip(reduces, accs):
            if rd.reducer.name == "mean":
                acc = self.define(self.top, "mean", rd.dtype, f"{acc} / ({self.ctx.ctype(rd.dtype)})n_reduce")
            self.top.names[id(rd)] = acc

    def close_loop(self, loop, comment=None):
        if comment:
            self.top.lines.append(f"/* {comment} */")
        self.top.lines.append(f"for ({self.I} r = 0; r < n_reduce; ++r) {{")
        self.top.lines += [INDENT + line for line in loop.lines]
        self.top.lines.append("}")

    def store(self, store, scope, offset):
        param = next(p for p in self.p.params if p.name == store.param)
        v = self.value(store.value, scope)
        scope.lines.append(self.d.store(param.name, offset, v, param.dtype, self.ctx.helper))

    # --- assembly --------------------------------------------------------------------------------
    def body(self):
        for s in self.p.stores:
            if s.kind == "kept":
                self.store(s, self.top, "unit")
        full = [s for s in self.p.stores if s.kind == "full"]
        if full and self.p.has_reduce:
            loop = _Scope(loop=True)
            for s in full:
                self.store(s, loop, self.flat(loop))
            self.close_loop(loop, "write " + ", ".join(s.param for s in full))
        else:
            for s in full:
                self.store(s, self.top, "unit")
        return self.top.lines

    def render(self):
        body = self.body()
        p, d, lay = self.p, self.d, self.lay
        for param in p.params:
            self.ctx.uses.add(param.dtype)
        sizes = [f"size{g}" for g in range(len(lay.groups))]
        kept = " * ".join(sizes[g] for g in lay.kept_axes) or "1"
        pre = [f"const {self.I} n_units = {kept};"]
        if p.has_reduce:
            reduced = " * ".join(sizes[g] for g in lay.reduced_axes) or "1"
            pre.append(f"const {self.I} n_reduce = {reduced};")
        work = "n_units * n_reduce" if p.has_reduce else "n_units"
        if self.rows:
            outer, inner, closing = d.row_loop(self.lay.kept_axes[-1], work)
            opening, depth = outer + [INDENT + x for x in self.row_lines] + inner, 2
        else:
            opening, closing, depth = d.grid_loop(vectorizable=not p.has_reduce, work=work)
        buffers = [(q.name, d.storage_type(q.dtype), q.is_input) for q in p.params]
        scalars = p.scalar_arg_names()
        lines = _header(p, d, scalars)
        lines += d.features_prelude(self.ctx.uses)
        for name, code in self.ctx.helpers.items():
            lines += ["", *_guard(name, code).split("\n")]
        inside = [INDENT + x for x in pre + opening] + [INDENT * (depth + 1) + x for x in body]
        lines += ["", *d.entry(p.name, buffers, scalars, inside + [INDENT + x for x in closing]), ""]
        return "\n".join(lines)


def _guard(name, code):
    return guarded(name, code)


def _unravel(index, rest, axes, needed, I):
    """Statements splitting row-major ``index`` into the ``needed`` coordinates i<axis> over ``axes``."""
    needed = [g for g in axes if g in needed]
    if not needed:
        return []
    if len(axes) == 1:
        return [f"const {I} i{axes[0]} = {index};"]
    lines = [f"{I} {rest} = {index};"]
    for g in reversed(axes[1:]):
        if g in needed:
            lines.append(f"const {I} i{g} = {rest} % size{g};")
        if g == needed[0]:
            return lines
        lines.append(f"{rest} /= size{g};")
    return lines + [f"const {I} i{axes[0]} = {rest};"]


def _needed_coords(program):
    """Coordinates the body uses: strided input dims, plus all of them for a non-trailing flat index."""
    lay = program.layout
    kept, reduced = set(), set()
    flat_users = [s for s in program.stores if s.kind == "full"]
    for n in program.nodes:
        if isinstance(n, Load) and n.param not in lay.flat:
            bc = lay.bcast[n.param]
            kept |= {g for g in lay.kept_axes if not bc[g]}
            reduced |= {g for g in lay.reduced_axes if not bc[g]}
        elif isinstance(n, (CycleLoad, Load)):
            flat_users.append(n)
    if program.has_reduce and lay.reduced_axes and not lay.reduced_trailing and flat_users:
        kept |= set(lay.kept_axes)
        reduced |= set(lay.reduced_axes)
    return kept, reduced


def _passes(program):
    """id(node) -> number of nested reductions below it; reductions of equal depth share one loop."""
    depth = {}
    for n in program.nodes:
        below = max((depth[id(a)] for a in operands(n)), default=0)
        depth[id(n)] = below + 1 if isinstance(n, Reduce) else below
    return depth


def _header(p, d, scalars):
    lay = p.layout
    params = ", ".join(f"{q.name}: {q.dtype} {q.kind}" for q in p.params)
    kept = ", ".join(map(str, lay.kept_axes)) or "-"
    reduced = ", ".join(map(str, lay.reduced_axes)) or "-"
    return ["/*",
            f" * hwadapter_kp kernel {p.kernel_name!r}, entry {p.name}",
            f" * dialect: {d.title}",
            f" * params: {params}",
            f" * iteration: {len(lay.groups)} coalesced axes; parallel over ({kept}); reduced ({reduced})",
            f" * int64 args after the buffers: {', '.join(scalars) or '-'}",
            f" * schedule: {d.describe_schedule()}",
            " */"]


def render(program, dialect) -> str:
    """Source of ``program`` in ``dialect``."""
    return _Renderer(program, dialect).render()
