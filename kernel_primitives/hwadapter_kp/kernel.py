"""Kernels (the written-once definitions) and their specialisation into Programs."""

import inspect
import threading
from collections import OrderedDict

from . import dtypes as dt
from .dsl import ParamDecl, ParamRef, ParamSpec, check_param_name, run_trace
from .errors import KernelError
from .ir import Param, Reduce
from .layout import Access, as_layout, bcast_pattern, broadcast_domain, is_contiguous
from .program import Program

_CACHE_SIZE = 512


class Kernel:
    """A kernel written once; ``specialize`` turns it into a Program for given dtypes/ranks/attrs."""

    def __init__(self, name, params, body, attrs=None, example_shapes=None, doc=""):
        if not name.isidentifier():
            raise KernelError(f"kernel name {name!r} must be a C identifier")
        for p in params:
            check_param_name(name, p.name)
        if not any(p.kind == "out" for p in params):
            raise KernelError(f"kernel {name!r} has no output parameter")
        self.name = name
        self.params = tuple(params)
        self.body = body
        self.attrs = dict(attrs or {})       # attribute name -> default (inspect.Parameter.empty: required)
        self.example_shapes = dict(example_shapes or {})
        self.__doc__ = doc
        self._cache = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self):
        return f"<kp.Kernel {self.name}({', '.join(p.name for p in self.params)})>"

    @classmethod
    def from_function(cls, fn, name=None, example_shapes=None):
        """Build a kernel from a function annotated with kp.In/kp.Out; keyword-only args are attributes."""
        params, attrs = [], {}
        kname = name or fn.__name__
        # eval_str: modules with `from __future__ import annotations` hand us "kp.In['T']" strings
        try:
            signature = inspect.signature(fn, eval_str=True)
        except Exception:  # an annotation that cannot be evaluated is reported per parameter below
            signature = inspect.signature(fn)
        for p in signature.parameters.values():
            if p.kind == p.KEYWORD_ONLY:
                attrs[p.name] = p.default
            elif isinstance(p.annotation, ParamSpec):
                if p.default not in (p.empty, None):
                    raise KernelError(f"kernel {kname!r}: parameter {p.name!r} may only default to None")
                params.append(ParamDecl(p.name, p.annotation.kind, p.annotation.dtype, p.default is None))
            else:
                raise KernelError(f"kernel {kname!r}: parameter {p.name!r} needs a kp.In[...] or kp.Out[...] "
                                  f"annotation (or make it keyword-only to use it as an attribute)")
        return cls(kname, params, fn, attrs, example_shapes, (fn.__doc__ or "").strip())

    # --- specialisation ----------------------------------------------------------------
    def specialize(self, dtypes=None, shapes=None, strided=(), **attrs) -> Program:
        """Program for type-variable bindings ``dtypes``, input ``shapes`` (or arrays/Layouts) and attrs.

        Only ranks, extent-1 dims and the ``strided`` inputs (arbitrary strides) are
        baked in; sizes and strides are runtime arguments of ``Program.bind``.
        """
        shapes = dict(shapes or {})
        key = (tuple(sorted((dtypes or {}).items())),
               tuple(sorted((n, tuple(as_layout(v).shape)) for n, v in shapes.items())),
               tuple(sorted(strided)), tuple(sorted((k, repr(v)) for k, v in attrs.items())))
        with self._lock:
            program = self._cache.get(key)
        if program is None:
            program = self._specialize(dict(dtypes or {}), shapes, set(strided), attrs)
            with self._lock:
                self._cache[key] = program
                if len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
        return program

    def specialize_for(self, inputs, dtypes=None, **attrs) -> Program:
        """Program for concrete inputs (arrays or Layouts): binds type variables from array dtypes."""
        bound = dict(dtypes or {})
        for p in self.params:
            value = inputs.get(p.name)
            if p.kind == "in" and value is not None and hasattr(value, "dtype") and not dt.is_dtype(p.dtype):
                have = dt.normalize(value.dtype)
                if bound.setdefault(p.dtype, have) != have:
                    raise KernelError(f"kernel {self.name!r}: type variable {p.dtype!r} is {bound[p.dtype]} "
                                      f"but input {p.name!r} is {have}")
        strided = [n for n, v in inputs.items() if v is not None and not is_contiguous(as_layout(v))]
        shapes = {n: v for n, v in inputs.items() if v is not None}
        return self.specialize(bound, shapes, strided, **attrs)

    def source(self, dialect="c", dtypes=None, shapes=None, **attrs) -> str:
        """Source of an example specialisation (unbound type variables: float32; shapes: example)."""
        shapes = shapes or {p.name: self.example_shapes.get(p.name, (8,)) for p in self.params
                            if p.kind == "in" and (not p.optional or p.name in self.example_shapes)}
        bound = {p.dtype: "float32" for p in self.params if not dt.is_dtype(p.dtype)}
        bound.update(dtypes or {})
        return self.specialize(bound, shapes, **attrs).source(dialect)

    def _specialize(self, dtypes, shapes, strided, attrs):
        attrs = self._attrs(attrs)
        unknown = set(shapes) - {p.name for p in self.params if p.kind == "in"}
        if unknown:
            raise KernelError(f"kernel {self.name!r}: shapes given for unknown input(s) {sorted(unknown)}")
        refs, kwargs, layouts = {}, dict(attrs), {}
        for p in self.params:
            if p.kind == "in" and p.name not in shapes:
                if not p.optional:
                    raise KernelError(f"kernel {self.name!r}: missing shape for input {p.name!r}")
                kwargs[p.name] = None
                continue
            dtype = self._dtype(p, dtypes)
            if p.kind == "in":
                layouts[p.name] = as_layout(shapes[p.name])
            ndim = len(layouts[p.name].shape) if p.kind == "in" else None
            refs[p.name] = kwargs[p.name] = ParamRef(p.name, p.kind, dtype, ndim)
        trace = run_trace(self.name, refs, self.body, kwargs)
        return _build(self.name, refs, trace, layouts, strided, attrs)

    def _attrs(self, given):
        unknown = set(given) - set(self.attrs)
        if unknown:
            raise KernelError(f"kernel {self.name!r}: unknown attribute(s) {sorted(unknown)}; "
                              f"attributes are {sorted(self.attrs)}")
        out = {}
        for name, default in self.attrs.items():
            if name in given:
                out[name] = given[name]
            elif default is inspect.Parameter.empty:
                raise KernelError(f"kernel {self.name!r}: attribute {name!r} is required")
            else:
                out[name] = default
        return out

    def _dtype(self, p, dtypes):
        if dt.is_dtype(p.dtype):
            return p.dtype
        if p.dtype in dtypes:
            return dt.normalize(dtypes[p.dtype])
        if p.kind == "out":
            return None     # bound by what the body writes
        raise KernelError(f"kernel {self.name!r}: type variable {p.dtype!r} of input {p.name!r} is unbound; "
                          f"pass dtypes={{{p.dtype!r}: ...}}")


def _build(kernel, refs, trace, layouts, strided, attrs) -> Program:
    """Analyse a trace against the specialisation shapes into a Program."""
    params = []
    for name, ref in refs.items():
        dtype = ref.dtype if ref.kind == "in" else trace.out_dtypes[name]
        if ref.kind == "out" and name not in {s.param for s in trace.stores}:
            raise KernelError(f"kernel {kernel!r}: output {name!r} is never written")
        params.append(Param(name, dtype, ref.kind))
    params.sort(key=lambda p: p.kind != "in")    # entry points take all inputs, then all outputs
    inputs = [n for n, r in refs.items() if r.kind == "in"]
    domain_inputs = [n for n in inputs if trace.modes.get(n, "domain") == "domain"]
    if not domain_inputs:
        raise KernelError(f"kernel {kernel!r}: needs at least one input that defines the iteration shape")
    rank = max(trace.offsets.get(n, 0) + len(layouts[n].shape) for n in domain_inputs)
    offsets = {n: trace.offsets.get(n, rank - len(layouts[n].shape)) for n in domain_inputs}
    domain = broadcast_domain(kernel, [(n, layouts[n].shape, offsets[n]) for n in domain_inputs], rank)
    accesses = []
    for n in inputs:
        shape = layouts[n].shape
        if n in trace.full and tuple(shape) != domain:
            raise KernelError(f"kernel {kernel!r}: input {n!r} is read with read()/like= and must have the "
                              f"iteration shape {domain}, got {tuple(shape)}; use read_broadcast")
        if n in domain_inputs:
            accesses.append(Access(n, "domain", len(shape), offsets[n], bcast_pattern(shape, offsets[n], rank),
                                   n in strided, n in trace.full))
        else:
            accesses.append(Access(n, "cycle", len(shape), 0, (), n in strided, False))
    reduce_axes, has_reduce = _reduce_axes(kernel, trace, rank)
    return Program(kernel, params, accesses, rank, reduce_axes, has_reduce, trace.stores, attrs)


def _reduce_axes(kernel, trace, rank):
    specs = {r.axes for r in trace.nodes.values() if isinstance(r, Reduce)}
    if not specs:
        return (), False
    normalised = set()
    for spec in specs:
        axes = tuple(range(rank)) if spec is None else spec
        for a in axes:
            if not -rank <= a < rank:
                raise KernelError(f"kernel {kernel!r}: reduce axis {a} is out of range for rank {rank}")
        normalised.add(tuple(sorted({a % rank for a in axes})))
    if len(normalised) > 1:
        raise KernelError(f"kernel {kernel!r}: all reductions of one program must share their axes, "
                          f"got {sorted(normalised)}; split the kernel")
    return normalised.pop(), True
