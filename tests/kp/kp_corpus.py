"""The test corpus: library kernels over several dtypes, ranks, broadcasts and attrs, with inputs."""

from typing import NamedTuple

import numpy as np

from hwadapter_kp import library

FLOAT_UNARY = ("exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "sigmoid", "gelu", "erf", "sin", "cos",
               "floor", "ceil", "round")
NUMERIC_UNARY = ("neg", "abs", "relu", "sign")
ARITH = ("add", "sub", "mul", "div", "max", "min", "pow", "mod")
COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
LOGICAL = ("logical_and", "logical_or", "logical_xor")


class Case(NamedTuple):
    """One corpus entry: a library kernel, its inputs and attrs."""

    id: str
    kernel: object
    inputs: dict
    attrs: dict
    dtypes: dict

    def program(self):
        """The program specialised for this case's inputs."""
        return self.kernel.specialize_for(self.inputs, self.dtypes, **self.attrs)


def values(rng, shape, dtype, low=-3.0, high=3.0):
    """Random test values of ``dtype``; ints in [low, high], bools half true."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        lo = max(int(low), np.iinfo(dtype).min)
        return rng.integers(lo, int(high) + 1, shape).astype(dtype)
    return rng.uniform(low, high, shape).astype(dtype)


def whole_range(rng, shape, dtype):
    """Integers over the dtype's whole range, its extremes among them (where they fit): wrapping is exercised."""
    info = np.iinfo(dtype)
    out = rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    flat = out.reshape(-1)
    flat[:2] = [info.min, info.max][:flat.size]
    return out


def _unary_inputs(rng, op, dtype, shape):
    if op in ("log", "sqrt", "rsqrt"):
        return values(rng, shape, dtype, 0.1, 4.0)
    if op == "reciprocal":
        return np.where(rng.random(shape) < 0.5, -1, 1).astype(dtype) * values(rng, shape, dtype, 0.25, 3.0)
    if op == "round":   # include exact .5 ties: half to even
        return (rng.integers(-8, 8, shape) / 2).astype(dtype) + values(rng, shape, dtype, 0, 0)
    return values(rng, shape, dtype)


def _binary_inputs(rng, op, dtype, xs, ys):
    x = values(rng, xs, dtype)
    y = values(rng, ys, dtype)
    if op == "pow":
        if np.dtype(dtype).kind == "f":
            x = values(rng, xs, dtype, 0.2, 2.0)
        else:
            y = values(rng, ys, dtype, 0, 3)
    if op in ("div", "mod") and np.dtype(dtype).kind == "f":
        y = np.where(np.abs(y) < 0.25, 0.5, y).astype(dtype)
    return {"x": x, "y": y}


def cases():
    """Every corpus case (deterministic)."""
    rng = np.random.default_rng(1234)
    out = []

    def add(cid, name, inputs, attrs=None, dtypes=None):
        out.append(Case(cid, library.get(name), inputs, attrs or {}, dtypes or {}))

    for op in FLOAT_UNARY:
        for dtype, shape in (("float32", (3, 5)), ("float16", (2, 3, 4)), ("float64", (7,))):
            add(f"{op}-{dtype}", op, {"x": _unary_inputs(rng, op, dtype, shape)})
    for op in NUMERIC_UNARY:
        for dtype in ("float32", "int8", "int32", "int64", "uint8"):
            add(f"{op}-{dtype}", op, {"x": values(rng, (4, 3), dtype)})
    add("logical_not-bool", "logical_not", {"x": values(rng, (5,), "bool")})
    add("logical_not-float32", "logical_not", {"x": np.array([0.0, 1.0, -2.0, 0.0], np.float32)})
    shapes = {"float32": ((3, 5), (5,)), "float16": ((2, 3, 4), (3, 1)), "int32": ((4, 1), (1, 6)),
              "int8": ((6,), (6,)), "float64": ((2, 3), (2, 3)), "int64": ((3,), ()), "uint8": ((2, 2), (2,))}
    for op in ARITH:
        for dtype in ("float32", "float16", "int32", "int8"):
            xs, ys = shapes[dtype]
            add(f"{op}-{dtype}", op, _binary_inputs(rng, op, dtype, xs, ys))
    for op, dtype in (("add", "float64"), ("div", "float64"), ("mod", "int64"), ("pow", "int64"),
                      ("sub", "uint8"), ("div", "uint8"), ("mul", "int64")):
        xs, ys = shapes[dtype]
        add(f"{op}-{dtype}", op, _binary_inputs(rng, op, dtype, xs, ys))
    for op in COMPARE:
        for dtype in ("float32", "int32"):
            add(f"{op}-{dtype}", op, {"x": values(rng, (3, 4), dtype), "y": values(rng, (4,), dtype)})
    for op in LOGICAL:
        add(f"{op}-bool", op, {"x": values(rng, (3, 4), "bool"), "y": values(rng, (3, 1), "bool")})
    add("where-float32", "where", {"cond": values(rng, (3, 4), "bool"), "x": values(rng, (4,), "float32"),
                                   "y": values(rng, (3, 1), "float32")})
    add("where-int64", "where", {"cond": values(rng, (5,), "bool"), "x": values(rng, (5,), "int64"),
                                 "y": values(rng, (), "int64")})
    for src, dst in (("float32", "float16"), ("float16", "float32"), ("float32", "int32"), ("int32", "float64"),
                     ("bool", "float32"), ("float32", "bool"), ("int64", "int8"), ("uint8", "int32"),
                     ("float64", "float16"), ("int8", "bool")):
        add(f"cast-{src}-{dst}", "cast", {"x": values(rng, (3, 4), src, -100, 100)}, dtypes={"U": dst})
    for dtype in ("uint16", "uint32", "uint64"):  # the whole range: wrapping, the top bit, unsigned literals
        for op in NUMERIC_UNARY:
            add(f"{op}-{dtype}", op, {"x": whole_range(rng, (4, 3), dtype)})
        for op in ARITH + COMPARE:
            x, y = whole_range(rng, (3, 5), dtype), whole_range(rng, (5,), dtype)
            if op == "pow":
                y = values(rng, (5,), dtype, 0, 9)
            add(f"{op}-{dtype}", op, {"x": x, "y": y})
        add(f"clip-{dtype}", "clip", {"x": whole_range(rng, (7,), dtype)},
            {"min": 3, "max": int(np.iinfo(dtype).max) - 5})
        for op in ("sum", "prod", "max", "min"):
            add(f"reduce_{op}-{dtype}-1", f"reduce_{op}", {"x": whole_range(rng, (4, 6), dtype)}, {"axis": 1})
        for dst in ("float16", "float32", "float64", "int8", "int64", "uint8", "uint16", "uint32", "uint64"):
            if dst != dtype:
                add(f"cast-{dtype}-{dst}", "cast", {"x": whole_range(rng, (3, 4), dtype)}, dtypes={"U": dst})
    # floats to unsigned types within their range (outside it the result is unspecified), uint64 beyond 2^63
    for src, dst, top in (("float32", "uint16", 65535.9), ("float64", "uint32", 4294967295.5),
                          ("float32", "uint64", 1.8e19), ("float64", "uint64", 1.8446744073709550e19)):
        x = np.concatenate([[0.0, 0.5, 1.99, top], rng.uniform(0, top, 12)]).astype(src)
        add(f"cast-{src}-{dst}", "cast", {"x": x}, dtypes={"U": dst})
    add("clip-float32", "clip", {"x": values(rng, (10,), "float32")}, {"min": -1.0, "max": 0.5})
    add("clip-int32", "clip", {"x": values(rng, (2, 5), "int32")}, {"min": -1})
    for op in ("sum", "mean", "max", "min", "prod"):
        add(f"reduce_{op}-float32-last", f"reduce_{op}", {"x": values(rng, (3, 4, 5), "float32", 0.5, 1.5)},
            {"axis": -1})
        add(f"reduce_{op}-float16-02k", f"reduce_{op}", {"x": values(rng, (3, 4, 5), "float16", 0.5, 1.5)},
            {"axis": (0, 2), "keepdims": True})
        add(f"reduce_{op}-float64-0", f"reduce_{op}", {"x": values(rng, (6, 2), "float64")}, {"axis": 0})
        if op != "mean":
            add(f"reduce_{op}-int32-all", f"reduce_{op}", {"x": values(rng, (4, 3), "int32")}, {"axis": None})
            add(f"reduce_{op}-bool-1", f"reduce_{op}", {"x": values(rng, (4, 3), "bool")}, {"axis": 1})
    for name in ("softmax", "log_softmax"):
        add(f"{name}-float32-last", name, {"x": values(rng, (4, 7), "float32", -20, 20)}, {"axis": -1})
        add(f"{name}-float16-mid", name, {"x": values(rng, (2, 5, 3), "float16")}, {"axis": 1})
        add(f"{name}-float64-0", name, {"x": values(rng, (5, 2), "float64")}, {"axis": 0})
    x = values(rng, (3, 4, 5), "float32")
    add("layer_norm-float32-wb", "layer_norm", {"x": x, "weight": values(rng, (4, 5), "float32"),
                                                "bias": values(rng, (4, 5), "float32")})
    add("layer_norm-float16-w", "layer_norm", {"x": x.astype(np.float16), "weight": values(rng, (5,), "float32")},
        {"begin_norm_axis": 2, "epsilon": 1e-3})
    add("layer_norm-float64", "layer_norm", {"x": values(rng, (6, 8), "float64")}, {"begin_norm_axis": -1})
    c = 3
    params = {"running_mean": values(rng, (c,), "float32"), "running_var": values(rng, (c,), "float32", 0.5, 2),
              "weight": values(rng, (c,), "float32"), "bias": values(rng, (c,), "float32")}
    add("batch_norm-float32-nchw", "batch_norm", {"x": values(rng, (2, c, 4, 3), "float32"), **params})
    add("batch_norm-float16-nc", "batch_norm", {"x": values(rng, (5, c), "float16"),
                                                "running_mean": params["running_mean"],
                                                "running_var": params["running_var"]})
    add("batch_norm-float32-nhwc", "batch_norm", {"x": values(rng, (2, 2, 2, c), "float32"), **params},
        {"channel_axis": -1})
    for dtype, shape, scalar in (("float32", (3, 4, 5), ()), ("float16", (6,), (1,)), ("float64", (2, 3), ())):
        p, g, m = (values(rng, shape, dtype) for _ in range(3))
        v = values(rng, shape, dtype, 0.0, 2.0)
        lr, b1p, b2p = (np.full(scalar, s, dtype) for s in (0.05, 0.9 ** 2, 0.999 ** 2))
        add(f"sgd_update-{dtype}", "sgd_update", {"param": p, "grad": g, "lr": lr}, {"weight_decay": 0.01})
        add(f"momentum_update-{dtype}", "momentum_update", {"param": p, "grad": g, "velocity": m, "lr": lr},
            {"use_nesterov": dtype != "float64"})
        add(f"adam_update-{dtype}", "adam_update", {"param": p, "grad": g, "m": m, "v": v, "lr": lr,
                                                    "beta1_pow": b1p, "beta2_pow": b2p},
            {"weight_decay": 0.1, "decoupled": dtype == "float32"})
    return out
