"""Handwritten kernels (kernels/*.cl) for the ops kernel primitives cannot express: GEMM, convolution, pooling and
its gradients, argmax/argmin and data movement.

Each op has a planner, (runtime, shapes, dtypes, attrs) -> Plan (plans.py), cached per runtime and shape (`plans`);
`register` hands the kernel registry one eager function per op that runs the op's plan.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from hwadapter.plugin import (BoundedCache, InvalidArgumentError, contiguous_strides as contiguous, freeze, meta,
                              shapes as rules)

from .plans import (ALL, BITS, FLOATS, MAXB, MAXD, NUMERIC, Plan, Step, bits_options, build, fixing, make_step,
                    merge_axes, type_options)


#: The activations conv2d takes as an epilogue (attribute "activation"), declared on its kernel for graph fusion.
EPILOGUES = frozenset({"relu", "sigmoid", "tanh", "gelu"})


# --- GEMM -------------------------------------------------------------------------------------------------------
def cpu_vectors(rt, acc_size: int) -> tuple[int, int]:
    """(lanes, registers) of the SIMD unit the device's compiler targets, for `acc_size`-byte values: lanes from the
    device's preferred vector width (a power of two from 2 to 16: OpenCL's vector types); 32 registers with 64-byte
    vectors (AVX-512), else 16 (AVX2, AVX, SSE)."""
    d = rt.device
    preferred = d.preferred_vector_width_float if acc_size <= 4 else d.preferred_vector_width_double
    lanes = 1 << (min(16, max(2, preferred or d.preferred_vector_width_long)).bit_length() - 1)
    return lanes, 32 if lanes * acc_size >= 64 else 16


def _gemm_config(rt, m: int, n: int, acc_size: int) -> dict:
    """Tile sizes (kernels/gemm.cl macros) for an m x n result on this device, with `acc_size`-byte accumulators."""
    if not rt.is_cpu and rt.device.max_work_group_size >= 256:
        return dict(TM=64, TN=64, TK=16, RM=4, RN=1, VW=4, WG=256)  # one 4x4 micro-tile per work item
    # CPUs: one work item per tile, an RM x (RN vectors) register micro-kernel in the device's own vector width. It
    # must fit the register file (RM * RN accumulators, RN values of B, one broadcast of A), or every FMA spills:
    # 6 x 2 on AVX2's 16 registers (BLIS's Haswell kernel), 8 x 2 on AVX-512's 32. About 96 rows per tile, so the B
    # panel each tile packs serves enough rows; smaller tiles when the matrix is thin, so little work is padding.
    lanes, registers = cpu_vectors(rt, acc_size)
    wide = n > 128
    rn = 2 if wide else 1
    rm = max(1, min(8, (registers - rn - 1) // rn))
    return dict(TM=rm * -(-96 // rm) if m > 32 else rm, TN=max(256 if wide else 32, rn * lanes),
                TK=128 if acc_size <= 4 else 64, RM=rm, RN=rn, VW=lanes, WG=1)


def _gemv_config(rt, m: int, acc_size: int) -> dict:
    """Block sizes (kernels/gemv.cl macros) for a result of m <= GEMV_ROWS rows on this device."""
    if not rt.is_cpu:  # one column per work item: a group's loads of each row of B are contiguous
        return dict(ROWS=min(m, 8), VW=1, RN=1, WG=min(64, rt.device.max_work_group_size))
    # CPUs: ROWS x RN vector accumulators, ROWS broadcasts of A and one vector of B in the register file (ROWS up to 4,
    # 8 with 32 registers; RN a power of two up to 8): 1 x 8, 2 x 4, 3 x 4, 4 x 2 in AVX2's 16 registers. Independent
    # of n, so products of as many rows share a program (a 1 x 256 result is 4 work items: two per core of 2).
    lanes, registers = cpu_vectors(rt, acc_size)
    rows = min(m, 1 << (min(8, (registers - 1) // 2).bit_length() - 1))
    rn = 1 << (max(1, min(8, (registers - 1 - rows) // rows)).bit_length() - 1)
    return dict(ROWS=rows, VW=lanes, RN=rn, WG=1)


#: Results of at most this many rows take kernels/gemv.cl. The GEMM's CPU tiles suit large products; for few rows
#: they leave cores idle (a 1 x 256 result was one work item) and pack panels into local memory for little reuse.
#: Measured on PoCL (docs/performance.md): gemv is faster up to about this many rows, where the GEMM's reuse of B
#: starts to pay.
GEMV_ROWS = 64


def gemm_step(rt, dtype, m, n, k, a, sa, b, sb, c, batch, bias=None, activation=None) -> Step:
    """C = act(A @ B (+ bias per row)) over batch axes: a/b/c/bias are buffer refs, sa/sb (row, column) element
    strides, batch a list of [size, a stride, b stride, bias stride]; `activation` one of EPILOGUES or None."""
    dt = np.dtype(dtype)
    acc = {"f": None, "i": "long", "u": "ulong"}[dt.kind]  # integer products wrap, in the unsigned type for unsigned
    # inputs: C's signed overflow is undefined
    if len(batch) > MAXB:
        raise InvalidArgumentError(f"matmul on {rt.name}: {len(batch)} batch axes that cannot be merged (at most "
                                   f"{MAXB}). Fix: reshape the inputs to fewer batch dimensions")
    options = type_options(rt, dt, acc)
    if bias is not None:
        options += " -DBIAS"
    if activation is not None:  # applied to each result as it is stored (ACT in kernels/common.cl)
        options += f" -DACT_{activation.upper()}"
    geometry = np.zeros((4, MAXB), np.int64)  # the Batch struct: unused leading axes have size 1, stride 0
    geometry[0] = 1
    for i, dim in enumerate(batch):
        geometry[:, MAXB - len(batch) + i] = dim
    count = math.prod(d[0] for d in batch)
    args = [a, b, c, bias, *(np.int64(v) for v in (m, n, k, *sa, *sb)), geometry.reshape(-1)]
    acc_size = 8 if acc in ("long", "ulong") or dt == np.float64 else 4
    if m <= GEMV_ROWS:
        cfg = _gemv_config(rt, m, acc_size)
        program, key = build(rt, "gemv", options + "".join(f" -D{key}={v}" for key, v in cfg.items()))
        cols = -(-n // (cfg["VW"] * cfg["RN"]))
        g = (-(-cols // cfg["WG"]) * cfg["WG"], -(-m // cfg["ROWS"]), count)
        return Step(program, "gemv", g, (cfg["WG"], 1, 1), args, key)
    cfg = _gemm_config(rt, m, n, acc_size)
    program, key = build(rt, "gemm", options + "".join(f" -D{key}={v}" for key, v in cfg.items()))
    g = (-(-n // cfg["TN"]) * cfg["WG"], -(-m // cfg["TM"]), count)
    return Step(program, "gemm", g, (cfg["WG"], 1, 1), args, key)


def plan_matmul(rt, shapes, dtypes, transpose_x=False, transpose_y=False) -> Plan:
    """numpy's matmul: 1-D operands become a row / a column, transposes become strides, batch axes broadcast."""
    xs, ys = shapes
    out = rules.matmul(xs, ys, transpose_x, transpose_y)
    x2 = (1,) + xs if len(xs) == 1 else xs
    y2 = ys + (1,) if len(ys) == 1 else ys
    sx, sy = contiguous(x2), contiguous(y2)
    (m, k), sa = ((x2[-1], x2[-2]), (sx[-1], sx[-2])) if transpose_x and len(xs) >= 2 else (x2[-2:], sx[-2:])
    (_, n), sb = ((y2[-1], y2[-2]), (sy[-1], sy[-2])) if transpose_y and len(ys) >= 2 else (y2[-2:], sy[-2:])
    batch = rules.broadcast("matmul", x2[:-2], y2[:-2])

    def bstrides(shape, strides):  # right-aligned; broadcast axes step by 0
        pad = len(batch) - len(shape)
        return [0 if i < pad or shape[i - pad] == 1 else strides[i - pad] for i in range(len(batch))]
    plan = Plan([(out, dtypes[0])])
    if math.prod(out):
        dims = merge_axes(batch, bstrides(x2[:-2], sx[:-2]), bstrides(y2[:-2], sy[:-2]), [0] * len(batch))
        plan.steps.append(gemm_step(rt, dtypes[0], m, n, k, ("in", 0), sa, ("in", 1), sb, ("out", 0), dims))
    return plan


def plan_conv2d(rt, shapes, dtypes, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                activation=None) -> Plan:
    """im2col (skipped for 1x1, stride-1, unpadded kernels) and one GEMM per (image, group), with the activation
    epilogue (if any) in the GEMM's store."""
    if activation is not None and activation not in EPILOGUES:
        raise InvalidArgumentError(f"conv2d on {rt.name}: unknown activation {activation!r}. Fix: use one of "
                                   f"{sorted(EPILOGUES)} or None")
    (n, c, h, w), (o, cg, kh, kw) = shapes[0], shapes[1]
    pt, pb, pl, pr = padding
    oh = rules.window_out("conv2d", h, kh, stride[0], dilation[0], pt + pb)
    ow = rules.window_out("conv2d", w, kw, stride[1], dilation[1], pl + pr)
    g, og, kc, p = groups, o // groups, cg * kh * kw, oh * ow
    plan = Plan([((n, o, oh, ow), dtypes[0])])
    if not n * o * p:
        return plan
    bias = ("in", 2) if len(shapes) > 2 else None
    if (kh, kw, *stride, *dilation) == (1,) * 6 and not any(padding):
        cols, col_batch = ("in", 0), [c * h * w, cg * h * w]  # x already is the (kc x p) matrix of each group
    else:
        plan.temps.append(((n, g, kc, p), dtypes[0]))
        geometry = np.array([n, g, cg, h, w, kh, kw, oh, ow, *stride, pt, pl, *dilation], np.int64)
        total = n * g * kc * p
        plan.steps.append(make_step(rt, "conv", "im2col", bits_options(dtypes[0]), total,
                                    [("in", 0), ("tmp", 0), geometry, np.int64(total)]))
        cols, col_batch = ("tmp", 0), [g * kc * p, kc * p]
    batch = merge_axes((n, g), [0, og * kc], col_batch, [0, og])
    plan.steps.append(gemm_step(rt, dtypes[0], og, p, kc, ("in", 1), (kc, 1), cols, (p, 1), ("out", 0), batch, bias,
                                activation))
    return plan


# --- pooling and arg-reductions ---------------------------------------------------------------------------------
def _max_options(dtype) -> str:
    """-DMAX and LOWEST, max's identity (padding never wins)."""
    dt = np.dtype(dtype)
    low = "-INFINITY" if dt.kind == "f" else "0" if dt.kind == "b" else f"({np.iinfo(dt).min + 1}L-1)"
    return f"-DMAX -DLOWEST={low}"


def _pool(rt, op, shapes, dtypes, kernel_size, stride, padding, ceil_mode, exclusive=True) -> Plan:
    n, c, h, w = shapes[0]
    pt, pb, pl, pr = padding
    oh = rules.pool_out(h, kernel_size[0], stride[0], pt, pb, ceil_mode)
    ow = rules.pool_out(w, kernel_size[1], stride[1], pl, pr, ceil_mode)
    plan = Plan([((n, c, oh, ow), dtypes[0])])
    if n * c * oh * ow:
        mode = _max_options(dtypes[0]) if op == "max_pool2d" else "-DEXCLUSIVE" * bool(exclusive)
        geometry = np.array([n * c, h, w, oh, ow, *kernel_size, *stride, pt, pl], np.int64)
        plan.steps.append(make_step(rt, "pool", "pool2d", f"{type_options(rt, dtypes[0])} {mode}", n * c * oh * ow,
                                    [("in", 0), ("out", 0), geometry]))
    return plan


def plan_max_pool2d(rt, shapes, dtypes, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False):
    return _pool(rt, "max_pool2d", shapes, dtypes, kernel_size, stride, padding, ceil_mode)


def plan_avg_pool2d(rt, shapes, dtypes, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False,
                    exclusive=True):
    return _pool(rt, "avg_pool2d", shapes, dtypes, kernel_size, stride, padding, ceil_mode, exclusive)


def _adaptive(rt, mode, shapes, dtypes, output_size) -> Plan:
    n, c, h, w = shapes[0]
    oh, ow = output_size
    plan = Plan([((n, c, oh, ow), dtypes[0])])
    if n * c * oh * ow:
        plan.steps.append(make_step(rt, "pool", "adaptive_pool2d", f"{type_options(rt, dtypes[0])} {mode}",
                                    n * c * oh * ow, [("in", 0), ("out", 0), *map(np.int64, (n * c, h, w, oh, ow))]))
    return plan


def plan_adaptive_avg_pool2d(rt, shapes, dtypes, output_size=(1, 1)):
    return _adaptive(rt, "", shapes, dtypes, output_size)


def plan_adaptive_max_pool2d(rt, shapes, dtypes, output_size=(1, 1)):
    return _adaptive(rt, _max_options(dtypes[0]), shapes, dtypes, output_size)


def _pool_grad(rt, op, shapes, dtypes, scalars) -> Plan:
    """A pooling gradient: one work item per element of x (kernels/pool.cl, kernel `op`)."""
    x = shapes[0]
    plan = Plan([(x, dtypes[0])])
    if math.prod(x):  # an empty grad (no window) still writes zeros: every element sums no window
        plan.steps.append(make_step(rt, "pool", op, type_options(rt, dtypes[0]), math.prod(x),
                                    [("in", 0), ("in", 1), ("out", 0), *scalars]))
    return plan


# The pooling gradients have no frontend function (the autograd engine dispatches them): their rules check the call.
def plan_max_pool2d_grad(rt, shapes, dtypes, **attrs):
    meta.result_meta("max_pool2d_grad", shapes, dtypes, attrs)
    (kh, kw), (sh, sw), (pt, _, pl, _), _ = meta.pool_grad_attrs("max_pool2d_grad", attrs)
    (n, c, h, w), (oh, ow) = shapes[0], shapes[1][2:]
    return _pool_grad(rt, "max_pool2d_grad", shapes, dtypes,
                      [np.array([n * c, h, w, oh, ow, kh, kw, sh, sw, pt, pl], np.int64)])


def plan_adaptive_max_pool2d_grad(rt, shapes, dtypes, **attrs):
    meta.result_meta("adaptive_max_pool2d_grad", shapes, dtypes, attrs)
    (n, c, h, w), (oh, ow) = shapes[0], shapes[1][2:]
    return _pool_grad(rt, "adaptive_max_pool2d_grad", shapes, dtypes, list(map(np.int64, (n * c, h, w, oh, ow))))


def _arg(rt, which, shapes, dtypes, axis=None, keepdim=False) -> Plan:
    shape = shapes[0]
    if axis is None:
        outer, n, inner = 1, math.prod(shape), 1
        out = (1,) * len(shape) if keepdim else ()
    else:
        outer, n, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
        out = rules.reduce(shape, (axis,), keepdim)
    plan = Plan([(out, np.dtype(np.int64))])
    if outer * inner:
        options = f"{type_options(rt, dtypes[0])} -D{which}"
        plan.steps.append(make_step(rt, "arg", "argbest", options, outer * inner,
                                    [("in", 0), ("out", 0), *map(np.int64, (outer, n, inner))]))
    return plan


def plan_argmax(rt, shapes, dtypes, axis=None, keepdim=False):
    return _arg(rt, "ARGMAX", shapes, dtypes, axis, keepdim)


def plan_argmin(rt, shapes, dtypes, axis=None, keepdim=False):
    return _arg(rt, "ARGMIN", shapes, dtypes, axis, keepdim)


# --- data movement ----------------------------------------------------------------------------------------------
def _copy_step(rt, dtype, src, dst, shape, src_strides, dst_strides, src_offset=0, dst_offset=0) -> Step | None:
    """A strided_copy launch (None when there is nothing to copy), after merging axes."""
    total = math.prod(shape)
    if not total:
        return None
    dims = merge_axes(shape, src_strides, dst_strides)
    if len(dims) > MAXD:
        raise InvalidArgumentError(f"{rt.name}: a copy over {len(dims)} axes that cannot be merged (at most {MAXD}). "
                                   f"Fix: reshape to fewer dimensions first")
    geometry = np.zeros(3 + 3 * MAXD, np.int64)
    geometry[:3] = len(dims), src_offset, dst_offset
    for i, (size, s, d) in enumerate(dims):
        geometry[3 + i], geometry[3 + MAXD + i], geometry[3 + 2 * MAXD + i] = size, s, d
    return make_step(rt, "move", "strided_copy", bits_options(dtype), total, [src, dst, geometry, np.int64(total)])


def _plan_copy(rt, dtype, out_shape, src_strides, src_offset=0) -> Plan:
    plan = Plan([(out_shape, dtype)])
    step = _copy_step(rt, dtype, ("in", 0), ("out", 0), out_shape, src_strides, contiguous(out_shape), src_offset)
    plan.steps += [step] if step else []
    return plan


def plan_reshape(rt, shapes, dtypes, shape) -> Plan:
    return Plan([(tuple(shape), dtypes[0])], aliases={0: 0})


def plan_transpose(rt, shapes, dtypes, perm) -> Plan:
    strides = contiguous(shapes[0])
    return _plan_copy(rt, dtypes[0], tuple(shapes[0][p] for p in perm), [strides[p] for p in perm])


def plan_slice(rt, shapes, dtypes, axes, starts, ends, steps) -> Plan:
    out, strides, offset = list(shapes[0]), contiguous(shapes[0]), 0
    strides = list(strides)
    for a, s, e, st in zip(axes, starts, ends, steps):
        out[a] = len(range(s, -1 if e is None else e, st))
        offset += s * strides[a] if out[a] else 0
        strides[a] *= st
    return _plan_copy(rt, dtypes[0], tuple(out), strides, offset)


def plan_expand(rt, shapes, dtypes, shape) -> Plan:
    xs, shape = shapes[0], tuple(shape)
    pad = len(shape) - len(xs)
    strides = contiguous(xs)
    return _plan_copy(rt, dtypes[0], shape,
                      [0 if i < pad or xs[i - pad] == 1 else strides[i - pad] for i in range(len(shape))])


def plan_concat(rt, shapes, dtypes, axis=0) -> Plan:
    out = list(shapes[0])
    out[axis] = sum(s[axis] for s in shapes)
    dst, plan, at = contiguous(out), Plan([(tuple(out), dtypes[0])]), 0
    for i, s in enumerate(shapes):
        step = _copy_step(rt, dtypes[0], ("in", i), ("out", 0), s, contiguous(s), dst, 0, at * dst[axis])
        plan.steps += [step] if step else []
        at += s[axis]
    return plan


def plan_split(rt, shapes, dtypes, sections, axis=0) -> Plan:
    src = contiguous(shapes[0])
    plan, at = Plan([]), 0
    for i, size in enumerate(sections):
        part = tuple(size if a == axis else s for a, s in enumerate(shapes[0]))
        plan.outputs.append((part, dtypes[0]))
        step = _copy_step(rt, dtypes[0], ("in", 0), ("out", i), part, src, contiguous(part), at * src[axis])
        plan.steps += [step] if step else []
        at += size
    return plan


def plan_gather(rt, shapes, dtypes, axis=0) -> Plan:
    """The kernel flags an index out of range in a status buffer; eager calls read it back and raise."""
    xs, idx = shapes
    n, out = xs[axis], xs[:axis] + tuple(idx) + xs[axis + 1:]
    plan, total = Plan([(out, dtypes[0])], temps=[((2,), np.dtype(np.int64))], zero=[0]), math.prod(out)

    def check(temps):
        found, index = temps[0].numpy()
        if found:
            raise InvalidArgumentError(f"gather on {rt.name}: index {index} is out of range for axis {axis} of size "
                                       f"{n} (valid: {-n}..{n - 1}). Fix: pass indices within the axis (negative "
                                       f"ones count from its end), e.g. clip them to that range")
    if total:
        plan.check = check
        plan.steps.append(make_step(rt, "move", "gather", bits_options(dtypes[0]), total,
                                    [("in", 0), ("in", 1), ("out", 0), ("tmp", 0),
                                     *map(np.int64, (n, math.prod(idx), math.prod(xs[axis + 1:]), total))]))
    return plan


_PAD_MODES = {"constant": 0, "reflect": 1, "replicate": 2, "circular": 3}


def plan_pad(rt, shapes, dtypes, pads, mode="constant", value=0.0) -> Plan:
    xs = shapes[0]
    out = tuple(s + a + b for s, (a, b) in zip(xs, pads))
    plan, total = Plan([(out, dtypes[0])]), math.prod(out)
    if not total:
        return plan
    dims = []  # (out size, in size, before); neighbouring unpadded axes merge
    for s, o, (a, _) in zip(xs, out, pads):
        if dims and s == o and dims[-1][0] == dims[-1][1]:
            dims[-1] = (dims[-1][0] * s, dims[-1][1] * s, 0)
        else:
            dims.append((o, s, a))
    if len(dims) > MAXD:
        raise InvalidArgumentError(f"pad on {rt.name}: {len(dims)} axes after merging (at most {MAXD}). Fix: reshape "
                                   f"to fewer dimensions first")
    geometry = np.zeros(2 + 3 * MAXD, np.int64)
    geometry[0], geometry[-1] = len(dims), _PAD_MODES[mode]
    for i, (o, s, a) in enumerate(dims):
        geometry[1 + i], geometry[1 + MAXD + i], geometry[1 + 2 * MAXD + i] = o, s, a
    dt = np.dtype(dtypes[0])
    bits = np.asarray(value).astype(dt).reshape(1).view(BITS[dt.itemsize][0])[0]
    plan.steps.append(make_step(rt, "move", "pad", bits_options(dt), total,
                                [("in", 0), ("out", 0), geometry, bits, np.int64(total)]))
    return plan


#: op -> (planner, dtypes it takes)
PLANNERS = {
    "matmul": (plan_matmul, NUMERIC), "conv2d": (plan_conv2d, FLOATS),
    "max_pool2d": (plan_max_pool2d, ALL), "avg_pool2d": (plan_avg_pool2d, FLOATS),
    "adaptive_avg_pool2d": (plan_adaptive_avg_pool2d, FLOATS), "adaptive_max_pool2d": (plan_adaptive_max_pool2d, ALL),
    "max_pool2d_grad": (plan_max_pool2d_grad, FLOATS),
    "adaptive_max_pool2d_grad": (plan_adaptive_max_pool2d_grad, FLOATS),
    "argmax": (plan_argmax, ALL), "argmin": (plan_argmin, ALL),
    "reshape": (plan_reshape, ALL), "transpose": (plan_transpose, ALL), "concat": (plan_concat, ALL),
    "split": (plan_split, ALL), "slice": (plan_slice, ALL), "gather": (plan_gather, ALL),
    "expand": (plan_expand, ALL), "pad": (plan_pad, ALL),
}


_plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # runtime -> its BoundedCache of plans


def plans(rt) -> BoundedCache:
    """The plans made for runtime `rt`, per op, shapes, dtypes and attributes."""
    cache = _plans.get(rt)
    if cache is None:
        cache = _plans.setdefault(rt, BoundedCache(4096))
    return cache


def plan(op: str, rt, shapes, dtypes, attrs: dict, fixed: bool = False) -> Plan:
    """The op's plan for these shapes, dtypes and attributes (cached per runtime: `plans`); `fixed`: its kernels built
    for this geometry (plans.fixing), for a subgraph."""
    key = (op, tuple(shapes), tuple(dtypes), tuple(sorted((k, freeze(v)) for k, v in attrs.items())), fixed)
    return plans(rt).get_or_make(key, lambda: _make(op, rt, tuple(shapes), tuple(dtypes), attrs, fixed))


def _make(op: str, rt, shapes: tuple, dtypes: tuple, attrs: dict, fixed: bool) -> Plan:
    if not fixed:
        return PLANNERS[op][0](rt, shapes, dtypes, **attrs)
    with fixing():
        return PLANNERS[op][0](rt, shapes, dtypes, **attrs)


def _eager(op: str):
    def kernel(*arrays, **attrs):
        rt = arrays[0].device.runtime
        p = plan(op, rt, tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), attrs)
        outs = p.run(arrays, rt.default_stream)
        return outs if op == "split" else outs[0]
    kernel.__name__ = kernel.__qualname__ = op
    return kernel


def reshape(x, shape):
    """Zero-copy: the same block with another shape."""
    return x.reshape(shape)


def register(kernels) -> None:
    """Register every handwritten kernel with its dtypes."""
    for op, (_, dtypes) in PLANNERS.items():
        fn = reshape if op == "reshape" else _eager(op)
        if op == "conv2d":
            fn.epilogues = EPILOGUES
        kernels.register(op, fn, dtypes=dtypes)
