"""A specialised kernel: the analysed IR plus the launch contract (bind, output shapes, source)."""

import hashlib
import math
from typing import NamedTuple

from . import codegen, debug
from .dialects import get_dialect
from .errors import KernelError
from .ir import Apply, CycleLoad, Load, Reduce, describe, operands, topo_order
from .layout import as_layout, bcast_pattern, broadcast_domain, coalesce, is_contiguous


class Launch(NamedTuple):
    """What a launch needs besides the buffers: parallel work items and the int64 scalar arguments."""

    global_size: int
    scalar_args: tuple


class Program:
    """A kernel specialised on dtypes, ranks, broadcast pattern and reduced axes (never on sizes)."""

    def __init__(self, kernel_name, params, accesses, rank, reduce_axes, has_reduce, stores, attrs):
        self.kernel_name = kernel_name
        self.params = tuple(params)
        self.accesses = {a.param: a for a in accesses}
        self.rank = rank
        self.reduce_axes = reduce_axes
        self.has_reduce = has_reduce
        self.stores = tuple(stores)
        self.attrs = dict(attrs)
        self.nodes = tuple(topo_order(s.value for s in self.stores))
        self.full = _full_level(self.nodes, self.accesses, reduce_axes, has_reduce)
        for store in self.stores:
            # a value built from reductions that does not vary along the reduced axes has the reduced shape
            tops = frontier_reduces(store.value)
            if tops and id(store.value) not in self.full:
                store.kind = "kept"
                keep = {r.keepdims for r in tops}
                if len(keep) > 1:
                    raise KernelError(f"kernel {kernel_name!r}: output {store.param!r} mixes reductions with "
                                      f"and without keepdims")
                store.keepdims = keep.pop()
        self.layout = coalesce(rank, reduce_axes, accesses)
        self.name = f"{kernel_name}_{hashlib.sha1(self.signature().encode()).hexdigest()[:10]}"
        self._sources = {}

    # --- description ---------------------------------------------------------------
    @property
    def inputs(self) -> tuple:
        """Input params in order."""
        return tuple(p for p in self.params if p.is_input)

    @property
    def outputs(self) -> tuple:
        """Output params in order."""
        return tuple(p for p in self.params if not p.is_input)

    def ir(self) -> str:
        """Readable listing of the program's IR."""
        return describe(self.nodes, self.stores)

    def signature(self) -> str:
        """Everything the generated code depends on; equal signatures give equal sources."""
        lay = self.layout
        lines = [f"kernel {self.kernel_name}", f"has_reduce {self.has_reduce}", f"reduced {lay.reduced}"]
        lines += [f"param {p.name} {p.kind} {p.dtype}" for p in self.params]
        for p in self.inputs:
            acc = self.accesses[p.name]
            lines.append(f"access {p.name} {acc.mode} {lay.bcast.get(p.name)} flat={p.name in lay.flat} "
                         f"strided={acc.strided}")
        return "\n".join(lines + [self.ir()])

    def scalar_arg_names(self) -> tuple:
        """Names of the runtime int64 arguments, in call order after the buffers."""
        lay = self.layout
        names = [f"size{g}" for g in range(len(lay.groups))]
        for p in self.inputs:
            acc = self.accesses[p.name]
            if acc.mode == "domain" and p.name not in lay.flat:
                names += [f"{p.name}_stride{g}" for g, b in enumerate(lay.bcast[p.name]) if not b]
        names += [f"{p.name}_period" for p in self.inputs if self.accesses[p.name].mode == "cycle"]
        return tuple(names)

    # --- source ----------------------------------------------------------------------
    def source(self, dialect="c") -> str:
        """Generated source for a dialect name or instance ("c", "opencl", "cuda")."""
        d = get_dialect(dialect)
        if d not in self._sources:
            self._sources[d] = codegen.render(self, d)
        text = self._sources[d]
        debug.maybe_dump(self.name, d.extension, text)
        return text

    # --- launch contract -------------------------------------------------------------------
    def domain(self, inputs) -> tuple:
        """Domain shape for ``inputs`` (arrays, Layouts or shapes); checks they fit this specialisation."""
        return self._domain(self._layouts(inputs))

    def _domain(self, layouts) -> tuple:
        entries = [(n, layouts[n].shape, a.offset) for n, a in self.accesses.items() if a.mode == "domain"]
        domain = broadcast_domain(self.kernel_name, entries, self.rank)
        for name, acc in self.accesses.items():
            shape = layouts[name].shape
            if len(shape) != acc.rank:
                raise self._mismatch(name, f"rank {len(shape)}, specialised for rank {acc.rank}")
            if acc.mode == "domain" and bcast_pattern(shape, acc.offset, self.rank) != acc.bcast:
                raise self._mismatch(name, f"shape {shape} broadcasts differently than the specialisation")
            if acc.full and tuple(shape) != domain:
                raise self._mismatch(name, f"shape {shape} must equal the iteration shape {domain}")
        return domain

    def output_shapes(self, inputs) -> dict:
        """Shapes of the outputs for the given input shapes (or arrays)."""
        domain = self.domain(inputs)
        return {s.param: self._store_shape(s, domain) for s in self.stores}

    def bind(self, inputs, dialect="c") -> Launch:
        """Global size and ordered int64 scalar args (sizes, strides, periods) for a launch."""
        layouts = self._layouts(inputs)
        domain = self._domain(layouts)
        lay = self.layout
        sizes = [math.prod([domain[a] for a in g]) for g in lay.groups]
        args = list(sizes)
        for p in self.inputs:
            acc, layout = self.accesses[p.name], layouts[p.name]
            if acc.mode == "domain" and not acc.strided and not is_contiguous(layout):
                raise self._mismatch(p.name, "is not contiguous; specialise with strided=[...] for it")
            if acc.mode == "domain" and p.name not in lay.flat:
                args += [layout.strides[acc.dim(g[-1])] for g, b in zip(lay.groups, lay.bcast[p.name]) if not b]
        n_units = math.prod([sizes[g] for g in lay.kept_axes])
        n_domain = math.prod(domain)
        for p in self.inputs:
            if self.accesses[p.name].mode == "cycle":
                period = math.prod(layouts[p.name].shape)
                if period == 0 and n_domain:
                    raise self._mismatch(p.name, "is empty but is cycled over a non-empty domain")
                if not is_contiguous(layouts[p.name]):
                    raise self._mismatch(p.name, "is cycled and must be contiguous")
                args.append(period)
        self._check_empty_reduction(sizes, n_units)
        return Launch(get_dialect(dialect).global_size(n_units), tuple(args))

    def local_size(self, dialect="c") -> int:
        """Work-group / block size the dialect's schedule launches with."""
        return get_dialect(dialect).schedule.local_size

    # --- helpers --------------------------------------------------------------------------
    def _layouts(self, inputs):
        missing = [n for n in self.accesses if n not in inputs]
        if missing:
            raise KernelError(f"kernel {self.kernel_name!r}: missing input(s) {missing}")
        return {n: as_layout(inputs[n]) for n in self.accesses}

    def _mismatch(self, name, what):
        return KernelError(f"kernel {self.kernel_name!r}: input {name!r} {what}; specialise again for it")

    def _store_shape(self, store, domain):
        if store.kind == "full":
            return domain
        if store.keepdims:
            return tuple(1 if a in self.reduce_axes else s for a, s in enumerate(domain))
        return tuple(s for a, s in enumerate(domain) if a not in self.reduce_axes)

    def _check_empty_reduction(self, sizes, n_units):
        n_reduce = math.prod([sizes[g] for g in self.layout.reduced_axes])
        if n_reduce or not n_units:
            return
        # full-shape outputs are empty then; only reduced-shape outputs could observe the missing identity
        for store in self.stores:
            for node in topo_order([store.value]) if store.kind == "kept" else ():
                if isinstance(node, Reduce) and node.reducer.name in ("max", "min"):
                    raise KernelError(f"kernel {self.kernel_name!r}: reduction {node.reducer.name!r} "
                                      f"over an empty extent has no identity")


def _full_level(nodes, accesses, reduce_axes, has_reduce) -> frozenset:
    """ids of nodes that vary along the reduced axes (computed inside the reduction loops)."""
    full = set()
    for n in nodes:
        if isinstance(n, Load):
            if not all(accesses[n.param].bcast[a] for a in reduce_axes):
                full.add(id(n))
        elif isinstance(n, CycleLoad):
            if has_reduce:
                full.add(id(n))
        elif isinstance(n, Apply) and any(id(a) in full for a in n.args):
            full.add(id(n))
    return frozenset(full)


def frontier_reduces(value) -> list:
    """Reduce nodes reachable from ``value`` without passing through another Reduce."""
    found, seen, stack = [], set(), [value]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, Reduce):
            found.append(n)
        else:
            stack.extend(operands(n))
    return found
