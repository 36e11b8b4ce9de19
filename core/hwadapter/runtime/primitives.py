"""The op set written in kernel primitives: which hwadapter_kp kernel runs each op, and how attributes map."""

import numpy as np

import hwadapter_kp as kp
from hwadapter_kp import library

from ..api import meta
from .primitive_op import PrimitiveOp

_SAME = {"abs", "neg", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu", "erf", "sin", "cos",
         "floor", "ceil", "round", "sign"}
_BINARY = {"add": "add", "sub": "sub", "mul": "mul", "div": "div", "pow": "pow", "maximum": "max",
           "minimum": "min", "mod": "mod"}
_COMPARE = {"equal": "eq", "not_equal": "ne", "less": "lt", "less_equal": "le", "greater": "gt",
            "greater_equal": "ge", "logical_and": "logical_and", "logical_or": "logical_or",
            "logical_xor": "logical_xor"}


def _same_dtype(attrs, dtypes):
    return {"U": np.dtype(dtypes[0]).name}


def _bool_out(attrs, dtypes):
    return {"U": "bool"}


@kp.kernel(name="gelu")
def _gelu(x: kp.In["T"], out: kp.Out["T"], *, approximate=False):
    """Exact (erf) gelu, or the tanh approximation; float16 is computed in float32."""
    cd = "float32" if x.dtype == "float16" else x.dtype
    v = kp.cast(kp.read(x), cd)
    if approximate:
        inner = kp.init(0.7978845608028654, cd) * (v + kp.init(0.044715, cd) * v * v * v)
        # 0.5 v (1 + tanh(u)) == v / (1 + exp(-2u)): no cancellation for large negative v; below -40 that is -0.0
        # in every precision, and at -inf it would be -inf / inf = nan: the limit, -0.0, is written out
        y = kp.ternary("where", kp.binary("lt", v, kp.init(-40.0, cd)), kp.init(-0.0, cd),
                       v / (kp.init(1.0, cd) + kp.unary("exp", kp.init(-2.0, cd) * inner)))
    else:
        y = kp.unary("gelu", v)
    kp.write(out, kp.cast(y, x.dtype))


def _reduce_attrs(attrs, dtypes):
    return {"axis": tuple(attrs["axis"]), "keepdims": attrs.get("keepdim", False)}


class _Checked:
    """A library kernel of an op no frontend function validates (the optimizers dispatch their updates themselves):
    the op's rule (hwadapter.api.meta) checks the inputs and attributes before it is specialised, once per input
    signature (a bad call is never cached)."""

    def __init__(self, op: str, kernel):
        self.op, self.kernel, self.name = op, kernel, kernel.name

    def specialize_for(self, inputs, dtypes=None, **attrs):
        given = list(inputs.values())
        meta.result_meta(self.op, tuple(v.shape for v in given), tuple(v.dtype for v in given), attrs)
        return self.kernel.specialize_for(inputs, dtypes, **attrs)


def op_set() -> dict[str, PrimitiveOp]:
    """Every primitive-expressible op of the op set, by name."""
    ops = {}
    for op in _SAME:
        ops[op] = PrimitiveOp(library.get(op), ("x",), bind=_same_dtype)
    ops["logical_not"] = PrimitiveOp(library.get("logical_not"), ("x",), bind=_bool_out)
    ops["gelu"] = PrimitiveOp(_gelu, ("x",))
    for op, name in _BINARY.items():
        ops[op] = PrimitiveOp(library.get(name), ("x", "y"), bind=_same_dtype)
    for op, name in _COMPARE.items():
        ops[op] = PrimitiveOp(library.get(name), ("x", "y"), bind=_bool_out)
    ops["where"] = PrimitiveOp(library.get("where"), ("cond", "x", "y"))
    ops["cast"] = PrimitiveOp(library.get("cast"), ("x",), attrs=lambda a, d: {},
                               bind=lambda a, d: {"U": a["dtype"]})
    ops["clip"] = PrimitiveOp(library.get("clip"), ("x",))
    for op in ("sum", "mean", "max", "min", "prod"):
        ops[op] = PrimitiveOp(library.get(f"reduce_{op}"), ("x",), attrs=_reduce_attrs, bind=_same_dtype)
    for op in ("softmax", "log_softmax"):
        ops[op] = PrimitiveOp(library.get(op), ("x",))
    ops["layer_norm"] = PrimitiveOp(
        library.get("layer_norm"), ("x", "weight", "bias"), outputs=("out",),
        attrs=lambda a, d: {"begin_norm_axis": a["begin_axis"], "epsilon": a["epsilon"]})
    ops["batch_norm"] = PrimitiveOp(library.get("batch_norm"), ("x", "running_mean", "running_var", "weight", "bias"))
    for op, (tensors, scalars) in meta.UPDATE_INPUTS.items():  # one program per parameter, every output returned
        kernel = library.get(op)
        ops[op] = PrimitiveOp(_Checked(op, kernel), tensors + scalars,
                              outputs=tuple(p.name for p in kernel.params if p.kind == "out"))
    return ops
