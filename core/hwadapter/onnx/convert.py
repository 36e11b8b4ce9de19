"""ONNX graph -> hwadapter Graph: walk the nodes, call each op type's converter, fold what is constant.

`convert` returns a `Conversion`: the graph, or the graph input whose value a converter needs (a Reshape's shape fed
as an input) before the model can be converted, which the caller supplies by converting again with that input as a
constant (OnnxModel.run does, per value). Constants are computed by the graph layer's one folder
(`hwadapter.graph.passes.fold.evaluate`), the one the `fold` pass uses."""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import numpy as np

from ..api.errors import HwAdapterError, InvalidArgumentError
from ..runtime.memory import check_fits
from ..api.ir import Graph, Node, Value
from ..api import admit, meta
from ..api.shapes import normalize_axes
from ..graph.passes.fold import evaluate
from .boundary import bind_input, output_value, value_type
from .node import OnnxNode, UnsupportedOpError, tensor_array, to_dtype
from .ops import DEFAULT_DOMAINS, TRAINING_DOMAIN, VALUE_INPUTS, load_all, op_key
from .values import Seq, describe, flatten, is_tensor

# DEFAULT_DOMAINS: the default ONNX domain, spelled "" or "ai.onnx"; of the other domains only TRAINING_DOMAIN's
# optimizers have converters (keyed "domain:op", ops.op_key)
MIN_OPSET = 7  # older models use semantics (consumed_inputs, broadcast attributes) we do not convert: refused


_REDUCTIONS = ("sum", "prod", "max", "min", "mean")  # kernels take `axis` as a tuple, never None or an int


@dataclass(frozen=True)
class ValueNeed:
    """A converter needs the value of graph input `input` (a shape, axes, a scale) to convert the model: convert again
    with it as a constant once its value is known (OnnxModel.run does, keyed by the value). `message` and `fix` say
    which node needs it, for an error where no value can be given."""
    input: str
    message: str
    fix: str

    def error(self) -> UnsupportedOpError:
        return UnsupportedOpError(self.message, fix=self.fix)


@dataclass(frozen=True)
class Conversion:
    """What `convert` gives: `graph`, the hwadapter Graph, or (graph None) `need`, the input value it waits for;
    `outputs`, per graph output of the model, its value over the graph's outputs: a ref, or a values.Seq or
    values.Opt of them (the graph's outputs are those refs, each once)."""
    graph: Graph | None
    need: ValueNeed | None = None
    outputs: tuple = ()


class Context:
    """What converters build with: refs (graph value names) for ONNX names, constants, and nodes added by `op`."""

    def __init__(self, opset: int, model=None):
        self.opset, self.model = opset, model
        self.values: dict = {}
        self.constants: dict = {}
        self.nodes: list = []
        self.names: dict = {}  # ONNX value name -> ref
        self.node: OnnxNode | None = None  # the ONNX node being converted (for names and errors)
        self.graph_inputs: set = set()  # refs of the graph's (run-time) inputs
        self._count = 0

    # --- refs ----------------------------------------------------------------------------------------------
    def input(self, node: OnnxNode, i: int):
        """The ref of the node's i-th input, or None when it is omitted (absent or ''); an error naming the node when
        it is a sequence or optional (`value` takes those)."""
        v = self.value(node, i)
        if v is not None and not is_tensor(v):
            raise InvalidArgumentError(f"onnx: {node.where()}: its input {i} ({node.inputs[i]!r}) is {describe(v)}; "
                                       f"{node.op_type} takes a tensor there", fix="take a tensor out of it first "
                                       "(SequenceAt, ConcatFromSequence, OptionalGetElement)")
        return v

    def value(self, node: OnnxNode, i: int):
        """The node's i-th input of any kind: a ref, a values.Seq or values.Opt; None when it is omitted."""
        if i >= len(node.inputs) or not node.inputs[i]:
            return None
        return self.names[node.inputs[i]]

    def sequence(self, node: OnnxNode, i: int) -> Seq:
        """The node's i-th input, a sequence; an error naming the node when it is anything else or omitted."""
        v = self.value(node, i)
        if not isinstance(v, Seq):
            what = "omitted" if v is None else describe(v)
            raise InvalidArgumentError(f"onnx: {node.where()}: its input {i} "
                                       f"({node.inputs[i] if i < len(node.inputs) else ''!r}) is {what}; "
                                       f"{node.op_type} takes a sequence there",
                                       fix="give it a sequence (SequenceConstruct, SplitToSequence, SequenceEmpty)")
        return v

    def inputs(self, node: OnnxNode) -> list:
        """Refs of all the node's inputs (None for omitted ones)."""
        return [self.input(node, i) for i in range(len(node.inputs))]

    def shape(self, ref) -> tuple:
        return self._value(ref).shape

    def dtype(self, ref) -> np.dtype:
        return self._value(ref).dtype

    def _value(self, ref):
        """The Value of `ref`; an error naming the node when it is an input the node omits ('' or absent)."""
        if ref is None:
            self.fail(self.node, "an input its conversion needs is omitted (named '' or absent)",
                      fix="give the node that input: only inputs the ONNX operator marks optional may be omitted")
        if not is_tensor(ref):  # a sequence or optional where a converter (or ctx.op) needs a tensor
            where = self.node.where() if self.node is not None else "the model"
            raise InvalidArgumentError(f"onnx: {where}: {describe(ref)} is used where a tensor is needed",
                                       fix="take a tensor out of it first (SequenceAt, ConcatFromSequence, "
                                           "OptionalGetElement)")
        return self.values[ref]

    def const(self, ref):
        """The ref's numpy array if it is a constant (initializer, Constant, or folded), else None."""
        return None if ref is None else self.constants.get(ref)

    def require_const(self, node: OnnxNode, i: int, what: str) -> np.ndarray:
        """The node's i-th input as a numpy array; an error naming the node when it is not known before running. An
        input computed from a graph input's value is known once the model is converted per that value: the
        converter declares it (`@converter(..., values=...)`), and `convert` asks for the value before calling it."""
        ref = self.input(node, i)
        arr = self.const(ref)
        if arr is not None:
            return arr
        source = self.value_source(ref)
        if source is not None:  # convert() stops before a converter that declares this input: this one did not
            self.fail(node, f"its {what} (input {i}) is computed from graph input {source!r}, and its converter does "
                      f"not declare that it reads input {i}'s value", fix="declare it: @converter(..., values=...)")
        self.fail(node, f"its {what} (input {i}) must be known before running, but it is computed at run time",
                  fix="export the model with this input as an initializer or constant")

    def value_need(self, node: OnnxNode, i: int) -> ValueNeed | None:
        """What the node's i-th input, whose value its converter reads, waits for: None when it is known (or omitted,
        or never known: require_const then says so), else the graph input to convert the model per value of."""
        ref = self.input(node, i)
        if ref is None or ref in self.constants:
            return None
        source = self.value_source(ref)
        if source is None:
            return None
        name = node.inputs[i]
        if source == ref:
            return ValueNeed(source, f"onnx: {node.where()}: its input {i} ({name!r}) is graph input {source!r}, "
                             "whose value must be known to convert the model", fix="run it: the model is converted "
                             "per value of this input (or pass the input as an initializer)")
        return ValueNeed(source, f"onnx: {node.where()}: its input {i} ({name!r}) is computed from graph input "
                         f"{source!r}, whose value must be known to convert the model",
                         fix="run it: the model is converted per value of this input")

    def value_source(self, ref):
        """The graph input whose value would make (the not constant) `ref` known: `ref` itself when it is a graph
        input, else the first small graph input it is computed from; None when there is none."""
        if ref in self.graph_inputs:
            return ref
        return self._small_input_behind(ref)

    #: the most elements a graph input may have for the model to be converted per its value when a value a
    #: converter needs is computed from it (sizes, shapes, axes are small; data is not)
    VALUE_INPUT_LIMIT = 64

    def _small_input_behind(self, ref):
        """The first small graph input that the (not constant) `ref` is computed from, or None."""
        producer = {out: n for n in self.all_nodes() for out in n.outputs}
        todo, seen = [ref], set()
        while todo:
            r = todo.pop()
            if r in seen or r is None:
                continue
            seen.add(r)
            if r in self.graph_inputs:
                if int(np.prod(self.shape(r))) <= self.VALUE_INPUT_LIMIT:
                    return r
                continue
            if r in producer:
                todo.extend(producer[r].inputs)
        return None

    def all_nodes(self) -> list:
        """The nodes that make the values this context sees (a branch's or body's scope sees its outer ones too)."""
        return self.nodes

    def constant(self, array, dtype=None) -> str:
        """A new constant ref holding `array`."""
        arr = np.array(array, dtype=dtype) if dtype is not None or not isinstance(array, np.ndarray) else array
        name = self._fresh("const")
        self.values[name] = Value(name, tuple(arr.shape), arr.dtype)
        self.constants[name] = arr
        return name

    # --- ops -----------------------------------------------------------------------------------------------
    def op(self, op: str, *refs, n_outputs: int = 1, **attrs):
        """Add hwadapter op `op` on refs (attributes as the kernel takes them); its output ref (a tuple if several).
        With every input constant, the op runs now on the reference kernel and its result is a constant."""
        shapes = tuple(self.shape(r) for r in refs)
        dtypes = tuple(self.dtype(r) for r in refs)
        if op in _REDUCTIONS and refs and "axis" in attrs:  # as the frontend passes it: sorted non-negative axes
            try:
                attrs["axis"] = normalize_axes(op, attrs["axis"], len(shapes[0]))
            except HwAdapterError as err:
                self.fail(self.node, f"hwadapter op {op!r} rejects axis {attrs['axis']!r}: {err}")
        refused = admit.refusal(op, dtypes)
        if refused is not None:  # a combination the frontend never emits: no kernel is written for it
            self.fail(self.node, f"hwadapter op {op!r} does not take {[str(d) for d in dtypes]}: {refused[0]}",
                      fix=refused[1])
        try:
            metas = meta.result_meta(op, shapes, dtypes, attrs)
        except HwAdapterError as err:
            self.fail(self.node, f"hwadapter op {op!r} rejects it: {err}", fix=getattr(err, "fix", ""))
        except (ValueError, TypeError, IndexError, KeyError) as err:
            self.fail(self.node, f"hwadapter op {op!r} rejects its inputs {list(zip(shapes, map(str, dtypes)))}: {err}")
        if metas is None:
            raise InvalidArgumentError(f"onnx: hwadapter has no op {op!r}")
        if len(metas) != n_outputs and not (op in meta.MULTI_OUTPUT and n_outputs == len(metas)):
            self.fail(self.node, f"hwadapter op {op!r} makes {len(metas)} outputs, the converter expected {n_outputs}")
        arrays = [self.constants.get(r) for r in refs]
        outs = None
        if refs and all(a is not None for a in arrays):  # every input constant: fold, if it fits in memory
            for shape, dt in metas:
                self.fits(shape, dt)
            outs = evaluate(op, attrs, arrays, expected=[(tuple(shape), np.dtype(dt)) for shape, dt in metas])
        if outs is not None:
            names = tuple(self.constant(o) for o in outs)
        else:
            base = self._fresh(op)
            names = tuple(f"{base}:{k}" for k in range(len(metas))) if len(metas) > 1 else (base,)
            for v, (shape, dt) in zip(names, metas):
                self.values[v] = Value(v, tuple(shape), np.dtype(dt))
            self.nodes.append(Node(base, op, tuple(refs), names, dict(attrs)))
        return names[0] if n_outputs == 1 else names

    def fits(self, shape, dtype, what: str = "its result") -> None:
        """Refuse (OutOfMemoryError naming the node, the size and the host's memory) a value computed at conversion
        that the host could not hold, before it is made: a tiny model may ask for terabytes."""
        check_fits(f"onnx: {self.node.where() if self.node is not None else 'the model'}", shape, dtype, None,
                   what=what)

    def cast(self, ref, dtype):
        """ref as `dtype` (no node when it already is)."""
        dtype = np.dtype(dtype)
        return ref if self.dtype(ref) == dtype else self.op("cast", ref, dtype=dtype)

    def fail(self, node: OnnxNode | None, why: str, fix: str = "") -> None:
        """Raise UnsupportedOpError naming the ONNX node, its op and opset."""
        where = node.where() if node is not None else "the model"
        raise UnsupportedOpError(f"onnx: {where}: {why}", fix=fix or "see docs/onnx.md for what is supported")

    def _fresh(self, stem: str) -> str:
        self._count += 1
        prefix = re.sub(r"[^A-Za-z0-9_./-]", "_", self.node.name) + "/" if self.node is not None else ""
        return f"{prefix}{stem}_{self._count}"


_DATA_SHAPE = "its output shape depends on the input values, and hwadapter graphs have static shapes"
_RANDOM = "random numbers: hwadapter has no random generator matching onnx's"
_QUANT = "quantized arithmetic (scales, zero points) is not converted"
_STRINGS = "strings have no hwadapter dtype"
_SIGNAL = "signal processing (complex values, windows) is not converted"
_RNN = "recurrent layers are not converted (export them unrolled)"
_GRADIENT = ("it differentiates the part of the model's graph its xs/zs/y attributes name, and the importer "
             "converts node by node: it has no graph-level gradient")

#: Why hwadapter does not convert an op type at all ("domain:op" for other domains): the reason in the error.
WHY_NOT: dict = {
    **dict.fromkeys(["NonZero", "Unique", "NonMaxSuppression", "Compress"], _DATA_SHAPE),
    **dict.fromkeys(["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
                     "Multinomial"], _RANDOM),
    **dict.fromkeys(["QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv",
                     "QLinearMatMul", "ConvInteger", "MatMulInteger"], _QUANT),
    **dict.fromkeys(["StringNormalizer", "StringConcat", "StringSplit", "RegexFullMatch"], _STRINGS),
    "TfIdfVectorizer": "n-gram counting is not converted (no hwadapter primitive for it)",
    **dict.fromkeys(["DFT", "STFT", "HannWindow", "HammingWindow", "BlackmanWindow", "MelWeightMatrix"], _SIGNAL),
    **dict.fromkeys(["LSTM", "GRU", "RNN"], _RNN),
    f"{TRAINING_DOMAIN}:Gradient": _GRADIENT,
    **dict.fromkeys(["CausalConvWithState", "LinearAttention", "SwiGLU", "TensorScatter", "Attention",
                     "RotaryEmbedding"], "an op of opset 23 or newer that no converter implements yet"),
    "AffineGrid": "no converter: sampling grids (spatial transformers) are not implemented",
    "Col2Im": "no converter: hwadapter has no col2im (patch folding) primitive",
    "DeformConv": "no converter: deformable convolution samples at data-dependent offsets",
    "RoiAlign": "no converter: regions of interest are sampled at data-dependent positions",
    "Det": "no converter: a determinant needs an LU factorisation, which hwadapter has no primitive for",
    "ImageDecoder": "image decoding (encoded bytes in, pixels out) is not a tensor op",
    "BitCast": "reinterpreting bits across dtypes is not converted",
}


def _why_not(domain: str, op_type: str) -> str:
    key = op_key(domain, op_type)
    if key in WHY_NOT:
        return WHY_NOT[key]
    if domain == TRAINING_DOMAIN:
        return "no converter: of this domain hwadapter converts Adagrad, Adam and Momentum"
    if domain not in DEFAULT_DOMAINS:
        return f"hwadapter converts only the default onnx domain and {TRAINING_DOMAIN}'s optimizers, not {domain}"
    return "no converter"


def check_supported(model) -> None:
    """Raise UnsupportedOpError listing every op of the model without a converter, before anything is built."""
    converters = load_all()
    missing: dict = {}
    _check_nodes(model, model.graph.node, converters, missing)
    if missing:
        listed = ", ".join(f"{t} (domain {d}, opset {opset_of(model, d)}; first at node {name!r}): {_why_not(d, t)}"
                           for (d, t), name in sorted(missing.items()))
        raise UnsupportedOpError(f"onnx: the model uses ops hwadapter cannot convert: {listed}",
                                 fix="docs/onnx.md lists what is supported and why the rest is not")


#: ops whose graph attributes (branches, bodies) are converted: their nodes are checked too
GRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def _check_nodes(model, nodes, converters, missing: dict) -> None:
    """Fill `missing` ({(domain, op): first node}) with the ops of `nodes` (and of their branches and bodies) that
    have no converter; a graph attribute of any other op is refused."""
    for i, n in enumerate(nodes):
        name = n.name or f"{n.op_type}_{i}"
        graphs = [a for a in n.attribute if a.type in (a.GRAPH, a.GRAPHS)]
        if op_key(n.domain, n.op_type) not in converters:
            missing.setdefault((n.domain or "ai.onnx", n.op_type), name)
        elif graphs and (n.domain not in DEFAULT_DOMAINS or n.op_type not in GRAPH_OPS):
            raise UnsupportedOpError(f"onnx: node {name!r} ({n.op_type}, opset {opset_of(model, n.domain)}) has a "
                                     f"subgraph attribute {graphs[0].name!r}, which hwadapter does not convert",
                                     fix="remove the attribute: only If, Loop, Scan and SequenceMap take graphs")
        for a in graphs:
            for g in ([a.g] if a.type == a.GRAPH else list(a.graphs)):
                _check_nodes(model, g.node, converters, missing)


_CONSTANT_VALUES = ("value", "value_float", "value_floats", "value_int", "value_ints", "value_string",
                    "value_strings", "sparse_value")


def check_graph(model) -> None:
    """Refuse, once on load and naming the node, a graph whose meaning is ambiguous: an input declared twice, two
    nodes writing one value (which one would win?), a node writing over a graph input or initializer, more inputs
    than the operator takes (they would be ignored) or outputs than it makes, an attribute given twice, a Constant
    with other than one value, an initializer of negative shape."""
    g = model.graph
    fix = "the model is malformed: check it with onnx.checker.check_model, and fix its exporter"
    declared, made = set(), {}
    for vi in g.input:
        if vi.name in declared:
            raise UnsupportedOpError(f"onnx: graph input {vi.name!r} is declared twice", fix=fix)
        declared.add(vi.name)
    for t in g.initializer:
        if any(d < 0 for d in t.dims):
            raise UnsupportedOpError(f"onnx: initializer {t.name!r} has a negative dimension in its shape "
                                     f"{tuple(t.dims)}", fix=fix)
    fixed = declared | {t.name for t in g.initializer}
    for i, n in enumerate(g.node):
        name = n.name or f"{n.op_type}_{i}"
        where = f"node {name!r} ({n.op_type})"
        for out in filter(None, n.output):
            if out in fixed:
                raise UnsupportedOpError(f"onnx: {where} writes {out!r}, which is a graph input or initializer",
                                         fix=fix)
            if out in made:
                raise UnsupportedOpError(f"onnx: {where} writes {out!r}, which node {made[out]!r} writes too",
                                         fix=fix)
            made[out] = name
        if n.op_type == "Constant" and n.domain in DEFAULT_DOMAINS:
            values = [a.name for a in n.attribute if a.name in _CONSTANT_VALUES]
            if len(values) != 1:
                raise UnsupportedOpError(f"onnx: {where} has {len(values)} values ({', '.join(values) or 'none'}); "
                                         f"a Constant has exactly one", fix=fix)
        names = [a.name for a in n.attribute]
        twice = sorted({a for a in names if names.count(a) > 1})
        if twice:
            raise UnsupportedOpError(f"onnx: {where} gives attribute {twice[0]!r} {names.count(twice[0])} times "
                                     f"(which one would hold?)", fix=fix)
        schema = _schema(n, opset_of(model, n.domain))
        if schema is not None and len(n.input) > schema.max_input:
            raise UnsupportedOpError(f"onnx: {where} has {len(n.input)} inputs; the operator takes at most "
                                     f"{schema.max_input}, so the rest would be ignored", fix=fix)
        if schema is not None and len(n.output) > schema.max_output:
            raise UnsupportedOpError(f"onnx: {where} has {len(n.output)} outputs; the operator makes at most "
                                     f"{schema.max_output}, so the rest would never be written", fix=fix)


def _schema(node, opset: int):
    """The node's operator schema at `opset`, or None when onnx has none for it."""
    onnx = sys.modules["onnx"]  # loaded: the model is an onnx ModelProto (onnx stays optional to import this module)
    try:
        return onnx.defs.get_schema(node.op_type, opset, node.domain)
    except Exception:  # noqa: BLE001 - no schema: an unknown op, refused by check_supported
        return None


def inline_functions(model):
    """The model with its local functions (FunctionProto) inlined: their nodes are plain nodes then."""
    if not len(model.functions):
        return model
    from onnx import inliner  # lazy: onnx is an optional package (the onnx extra)
    try:
        return inliner.inline_local_functions(model)
    except Exception as err:  # noqa: BLE001 - onnx's inliner refuses malformed functions
        raise UnsupportedOpError(f"onnx: the model's local functions cannot be inlined ({type(err).__name__}: "
                                 f"{str(err).strip().splitlines()[0] if str(err).strip() else ''})",
                                 fix="check the model with onnx.checker.check_model") from None


def check_opset(model) -> None:
    """Refuse, on load, a model with default-domain nodes that imports no default-domain opset, or one older than
    MIN_OPSET: its ops would be read with semantics they did not have then. (A model of only other domains' nodes, as
    onnx's optimizer cases, need not import it.)"""
    fix = "upgrade the model: onnx.version_converter.convert_version(model, 13)"
    versions = [int(imp.version) for imp in model.opset_import if imp.domain in DEFAULT_DOMAINS]
    if not versions and not any(n.domain in DEFAULT_DOMAINS for n in model.graph.node):
        return
    if not versions:
        raise UnsupportedOpError("onnx: the model imports no opset of the default onnx domain, so which version of "
                                 "its ops it means is unknown", fix="give it an opset_import of domain '' "
                                                                    f"(version {MIN_OPSET} or newer)")
    if min(versions) < MIN_OPSET:
        raise UnsupportedOpError(f"onnx: the model's default-domain opset is {min(versions)}; hwadapter converts "
                                 f"opset {MIN_OPSET} and newer (older ops had other semantics"
                                 f"{_legacy(model, min(versions))})", fix=fix)


def _legacy(model, opset: int) -> str:
    """'; node ... takes legacy broadcast attributes' for the model's first node that does (before opset 7 the
    arithmetic ops broadcast their own way, with `broadcast`/`axis`), else ''."""
    for i, n in enumerate(model.graph.node):
        if n.domain in DEFAULT_DOMAINS and n.op_type in _LEGACY_BROADCAST and \
                {"broadcast", "axis"} & {a.name for a in n.attribute}:
            return f"; node {n.name or f'{n.op_type}_{i}'!r} ({n.op_type}, opset {opset}) takes the legacy " \
                   "broadcast/axis attributes"
    return ""


_LEGACY_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "And", "Or", "Xor", "Equal", "Greater", "Less",
                               "PRelu", "Gemm"})


def opset_of(model, domain: str = "") -> int:
    """The model's opset version of `domain` (default: the default onnx domain); 1 when it imports none."""
    domains = DEFAULT_DOMAINS if domain in DEFAULT_DOMAINS else (domain,)
    for imp in model.opset_import:
        if imp.domain in domains:
            return int(imp.version)
    return 1


def convert(model, shapes: dict, values: dict | None = None) -> Conversion:
    """The model's graph as a hwadapter Graph, for graph inputs of `shapes` ({name: signature}: a shape; for a
    sequence input a boundary.SeqShape, whose tensors become graph inputs `name[i]`; None for an empty optional);
    `values` ({graph input: array}) turns those inputs into constants. A converter that reads an input's value
    (`VALUE_INPUTS`) computed from a graph input not in `values` is not called: the Conversion then names that input
    (`need`) instead of a graph. The model's functions are inlined and its graph, ops and opset checked already
    (OnnxModel does that once, not per signature)."""
    opset = opset_of(model)
    values = values or {}
    ctx = Context(opset, model)
    g = model.graph
    for init in g.initializer:
        to_dtype(init.data_type, f"initializer {init.name!r}")
        arr = tensor_array(init, f"initializer {init.name!r}")
        ctx.values[init.name] = Value(init.name, tuple(arr.shape), arr.dtype)
        ctx.constants[init.name] = arr
        ctx.names[init.name] = init.name
    inputs = []
    for vi in g.input:
        if vi.name in ctx.constants:
            continue  # an initializer listed as an input (before IR version 4): a constant
        vt = value_type(vi.type, f"graph input {vi.name!r}")
        ctx.names[vi.name] = bind_input(ctx, vi.name, vt, shapes[vi.name], values, inputs)
    need = convert_nodes(ctx, g.node)
    if need is not None:
        return Conversion(None, need)
    ctx.node = None
    layout = []
    for o in g.output:
        vt = value_type(o.type, f"graph output {o.name!r}")
        if o.name not in ctx.names:
            raise InvalidArgumentError(f"onnx: graph output {o.name!r} is made by no node, input or initializer",
                                       fix="the model is malformed: check it with onnx.checker.check_model")
        layout.append(output_value(o.name, vt, ctx.names[o.name]))
    outputs = list(dict.fromkeys(r for v in layout for r in flatten(v)))  # each ref once: a sequence may repeat one
    return Conversion(_prune(ctx, inputs, outputs), outputs=tuple(layout))


class ValueNeeded(Exception):
    """A converter inside a branch or body met a ValueNeed: carried out to `convert`, which returns it."""

    def __init__(self, need: ValueNeed):
        super().__init__(need.message)
        self.need = need


def convert_nodes(ctx: Context, protos) -> ValueNeed | None:
    """Convert the NodeProtos `protos` in order into `ctx` (ctx.names then maps their outputs); the ValueNeed of the
    first that waits for an input's value, else None."""
    converters = load_all()
    try:
        for i, proto in enumerate(protos):
            opset = ctx.opset if proto.domain in DEFAULT_DOMAINS else opset_of(ctx.model, proto.domain)
            node = OnnxNode(proto, i, opset)
            ctx.node = node
            for name in node.inputs:
                if name and name not in ctx.names:
                    ctx.fail(node, f"reads {name!r}, which no earlier node, input or initializer makes",
                             fix="the model is malformed or not topologically sorted: check it with onnx.checker")
            try:
                need = _value_need(ctx, node)
                if need is not None:
                    return need
                out = converters[op_key(node.domain, node.op_type)](ctx, node)
            except (HwAdapterError, ValueNeeded):
                raise
            except Exception as err:  # noqa: BLE001 - last resort: a case the converter's checks miss names the node
                raise _unexpected(node, err) from err
            outs = out if isinstance(out, (tuple, list)) else (out,)
            for name, ref in zip(node.outputs, outs):
                if name and ref is None:  # a converter passing an omitted input through (Identity of '')
                    ctx.fail(node, f"its output {name!r} would be an input it omits (named '' or absent)",
                             fix="give the node that input: only inputs the ONNX operator marks optional may be "
                                 "omitted")
                if name:
                    ctx.names[name] = ref
    except ValueNeeded as wait:
        return wait.need
    return None


def _unexpected(node: OnnxNode, err: Exception) -> InvalidArgumentError:
    """The error for a raw Python exception out of a converter (a check it lacks): naming the node, keeping the
    exception's type and message."""
    text = " ".join(str(err).split())[:200]
    return InvalidArgumentError(f"onnx: {node.where()}: its converter failed unexpectedly ({type(err).__name__}: "
                                f"{text})", fix="check the node's attributes and inputs against the onnx operator "
                                                "docs; if the model is valid, this is a hwadapter bug: please report it")


def _value_need(ctx: Context, node: OnnxNode) -> ValueNeed | None:
    """The first graph input whose value the node's converter reads (its VALUE_INPUTS) but the model has not been
    converted for; None when it can be called."""
    declared = VALUE_INPUTS.get(op_key(node.domain, node.op_type), ())
    for i in (declared(ctx, node) if callable(declared) else declared):
        need = ctx.value_need(node, i)
        if need is not None:
            return need
    return None


def _prune(ctx: Context, inputs: list, outputs: list) -> Graph:
    """The Graph of what the outputs need; constants only those read."""
    needed, nodes = set(outputs), []
    for n in reversed(ctx.nodes):
        if needed.intersection(n.outputs):
            nodes.append(n)
            needed.update(n.inputs)
    nodes.reverse()
    used = {v for n in nodes for v in n.inputs} | set(outputs)
    constants = {k: v for k, v in ctx.constants.items() if k in used}
    keep = set(inputs) | set(constants) | {v for n in nodes for v in n.outputs}
    values = {k: v for k, v in ctx.values.items() if k in keep}
    return Graph(nodes, values, list(inputs), list(outputs), constants)
