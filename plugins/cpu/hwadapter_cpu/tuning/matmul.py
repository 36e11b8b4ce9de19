"""float32 matmul for the CPU on the device's threads (crew.c): bands of rows of one product, or of columns when there
are few rows, each a single-threaded BLAS call (tasks.c); with very few rows (DOT_ROWS) bands of columns of tasks.c's
own dot products; everything else through the reference kernel.

Why its own loops for very few rows: BLAS rounds a column by the shape of the call it falls in (OpenBLAS picks its
kernel by the call's size; a narrower last band, or a call's last columns, take another path), so equal columns of
the right operand came out a few ulps apart in different bands, and the result depended on the number of threads.
tasks.c's task_dots sums every element in the same order wherever it lies, and with so few rows the product is bound
by reading the right operand, as BLAS's gemv is.

Why not numpy's own call: OpenBLAS's threads spin after each product and take a core from the kernels that follow
(a fifth of SegFormer's run was OpenBLAS's idle threads spinning while products up to 2^23 multiply-adds went to
numpy's threaded call; with four products of 2^20 still going there it ran at 1.45x its time without). Products up
to TINY, which OpenBLAS runs on one thread itself, stay numpy's calls; up to ALONE they run on the calling thread;
medium ones (up to MEDIUM) are cut into narrower bands, so that every thread of the crew has one."""
from __future__ import annotations

import numpy as np

from hwadapter.plugin import meta, reference

from .blas import COLUMNS, ROWS, single_blas, split
from .blasconv import ACTIVATIONS, COLUMNS_, DOTS_, LINEAR, ROWS_, SLOTS
from .segments import Record, runner_of
from .threads import UNITS_PER_PART

#: OpenBLAS's own one-thread bound (65536 * GEMM_MULTITHREAD_THRESHOLD, 4 by default) in multiply-adds
TINY = 1 << 18
#: Up to this many multiply-adds a product runs on the calling thread alone: sharing it saves less than a hand-over
#: to the crew risks, a helper that is late (woken, or its core taken by another process) holding it back (a small
#: MLP's to_static step, 64 x 256 by 256 x 256: 0.72-1.54 ms shared, 0.74-0.78 alone, runs of benchmarks/training.py)
ALONE = 1 << 22
#: Up to this many multiply-adds a product's bands may be half of ROWS and COLUMNS: narrower bands pack the other
#: operand more often, but with bands of the full least a training step's products (64 x 256 by 256 x 256) had one
MEDIUM = 1 << 23
#: at most this many rows: tasks.c's dot products (memory-bound, each element summed alike) instead of BLAS
DOT_ROWS = 4
#: the activations a fused linear layer's tasks apply in C bit for bit as the unfused kernels do (so that a to_static
#: step equals the eager one), and so the ones the kernel declares: depthwise.c's sigmoid, tanh and GELU are a few ulp
#: from numpy's (conv2d's epilogue accepts that; the reference, in float64, is many times slower on a transformer's
#: activations than the unfused chain, so those stay unfused here)
EXACT = frozenset({"relu", "relu6"})


def _slots(epilogue) -> dict:
    """tasks.c's parameter slots, zero but a linear epilogue's (bias, activation code) when it is given."""
    values = dict.fromkeys(SLOTS, 0)
    if epilogue is not None:
        bias, act = epilogue
        values.update(bias=0 if bias is None else bias.ctypes.data, epilogue=1, act=act)
    return values


def matmul_kernel(transforms, tasks=None):
    """matmul on `transforms`' library and crew (blasconv.py's): float32 products with a 2-D right operand split into
    bands, batched ones (`tasks`: rows.py's Rows) as one product per batch item shared by the crew, the rest as the
    reference kernel runs them; a fused bias and ReLU or ReLU6 (a linear layer's epilogue) applied by each band's task
    while it is in the cache, else on the crew after the product; another fused activation as the reference does."""
    def matmul(x, y, bias=None, transpose_x=False, transpose_y=False, activation=None):
        bias, transpose_x, transpose_y = reference.old_positional(bias, transpose_x, transpose_y)
        if bias is None and activation is None:
            return product(x, y, transpose_x, transpose_y)[0]
        if x.dtype != np.float32 or y.dtype != np.float32 or (bias is not None and bias.dtype != np.float32) or \
                transforms.lib() is None or transforms.crew() is None:
            return reference.matmul(x, y, bias, transpose_x=transpose_x, transpose_y=transpose_y,
                                    activation=activation)
        if bias is not None and bias.shape != (y.shape[-2] if transpose_y else y.shape[-1],):
            meta.result_meta("matmul", (x.shape, y.shape, bias.shape), (x.dtype, y.dtype),
                             {"transpose_x": transpose_x, "transpose_y": transpose_y})  # its rule names the mismatch
        bias = None if bias is None else np.ascontiguousarray(bias)  # checked: one value per output column
        exact = activation in EXACT  # C computes these as the unfused kernels do; the rest as the reference does
        epilogue = (bias, ACTIVATIONS[activation] if exact else 0)
        out, done = product(x, y, transpose_x, transpose_y, epilogue)
        if not done and out.size and (bias is not None or exact):  # made elsewhere: the epilogue after it
            n = out.shape[-1]
            if out.size < 2 * UNITS_PER_PART:  # one part, the caller's, either way: numpy, as the unfused kernels
                if bias is not None:  # (a phase call cost several times a batch-1 linear layer's product)
                    np.add(out, bias, out=out)
                return out if activation is None else reference.conv_epilogue(activation)(out)
            values = _slots(epilogue)
            values.update(out=out.ctypes.data, ow=n)
            params = np.array([values[s] for s in SLOTS], np.int64)
            transforms.phase(transforms.lib(), LINEAR, params, split(out.size // n, 2 * transforms.threads), "matmul")
        return out if activation is None or exact else reference.conv_epilogue(activation)(out)

    def product(x, y, transpose_x, transpose_y, epilogue=None):
        """(x @ y, whether its tasks applied `epilogue`: a linear epilogue's (bias, activation code), or None)."""
        if y.ndim > 2 and x.ndim >= 2 and x.dtype == y.dtype == np.float32 and int(np.prod(y.shape[:-2])) == 1:
            # one right operand: the product of a 2-D one, with the batch dimensions both operands broadcast to
            try:
                batch = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
            except ValueError:
                return reference.matmul(x, y, transpose_x=transpose_x, transpose_y=transpose_y), False
            out, done = product(x, y.reshape(y.shape[-2:]), transpose_x, transpose_y, epilogue)
            return out.reshape(*batch, *out.shape[-2:]), done
        if y.ndim > 2 and tasks is not None:
            out = batched(tasks, transforms, x, y, transpose_x, transpose_y)
            if out is not None:
                return out, False
        if not (x.dtype == y.dtype == np.float32 and x.ndim >= 2 and y.ndim == 2 and x.size and y.size):
            return reference.matmul(x, y, transpose_x=transpose_x, transpose_y=transpose_y), False
        a = np.swapaxes(x, -1, -2) if transpose_x else x
        k, n = (y.shape[1], y.shape[0]) if transpose_y else y.shape
        rows = a.size // a.shape[-1]
        # a mismatch: the reference names it; a tiny product: OpenBLAS runs it on one thread itself, no crew needed
        lib = transforms.lib() if a.shape[-1] == k and rows * k * n > TINY else None
        if lib is None or transforms.crew() is None:
            return reference.matmul(x, y, transpose_x=transpose_x, transpose_y=transpose_y), False
        a2, b = np.ascontiguousarray(a).reshape(rows, k), np.ascontiguousarray(y)
        out = np.empty((*a.shape[:-1], n), np.float32)
        values = _slots(epilogue)
        values.update(x=a2.ctypes.data, weight=b.ctypes.data, out=out.ctypes.data, sgemm=transforms.sgemm[0],
                      ilp64=int(transforms.sgemm[1]), c=k, oh=rows, ow=n, transb=int(transpose_y))
        params = np.array([values[s] for s in SLOTS], np.int64)
        parts = 2 * transforms.threads
        if rows <= DOT_ROWS:
            kind, ranges = DOTS_, split(n, parts, COLUMNS)  # no packing per band: sharing pays sooner
        elif rows * k * n <= ALONE:
            kind, ranges = ROWS_, [(0, rows)]
        else:  # each band packs all of the other operand: cut the larger one
            cut = 2 if rows * k * n <= MEDIUM else 1
            if rows >= n and rows >= 2 * ROWS // cut:
                kind, ranges = ROWS_, _bands(rows, transforms.threads, ROWS // cut)
            else:
                kind, ranges = COLUMNS_, _bands(n, transforms.threads, COLUMNS // cut)
        with single_blas():
            transforms.phase(lib, kind, params, ranges, "matmul")
        return out, epilogue is not None

    def lower(ins, outs, attrs, consts):
        """A product of few rows (tasks.c's dot products, with its bias and exact activation) as a segment record
        (segments.py); None for the others."""
        runner = runner_of(transforms.device)
        transpose_x, transpose_y = attrs.get("transpose_x", False), attrs.get("transpose_y", False)
        activation = attrs.get("activation")
        if runner is None or not runner.ready() or transforms.lib() is None or transforms.crew() is None or \
                transpose_x or any(d != np.float32 for _, d in ins) or len(ins[0][0]) < 2 or len(ins[1][0]) != 2 or \
                (activation is not None and activation not in EXACT):
            return None
        (x_shape, _), (y_shape, _) = ins[0], ins[1]
        k, n = (y_shape[1], y_shape[0]) if transpose_y else y_shape
        rows = int(np.prod(x_shape[:-1]))
        if x_shape[-1] != k or not rows or not n or rows > DOT_ROWS or rows * k * n <= TINY:
            return None  # the kernel runs these otherwise
        def where(j):
            return ("const", np.ascontiguousarray(consts[j])) if j in consts else ("in", j) if j < len(ins) else None
        fused = len(ins) > 2 or activation is not None
        values = dict.fromkeys(SLOTS, 0)
        values.update(c=k, oh=rows, ow=n, transb=int(transpose_y), epilogue=int(fused),
                      act=ACTIVATIONS[activation] if activation else 0)
        spans = np.array(split(n, 2 * transforms.threads, COLUMNS), np.int64)
        template = np.array([values[slot] for slot in SLOTS], np.int64)
        return runner.lowered([Record(transforms.entry["hwa_phase"], transforms.crew(), DOTS_, template,
                                      spans.ctypes.data, len(spans), 1,
                                      [(_SLOT["x"], where(0), 0), (_SLOT["weight"], where(1), 0),
                                       (_SLOT["out"], ("out", 0), 0), (_SLOT["bias"], where(2), 0)])],
                              keep=(spans,))

    matmul.lower = lower
    matmul.__name__ = matmul.__qualname__ = "matmul"
    matmul.epilogues = EXACT  # graph fusion may give it a linear layer's bias and these activations
    return matmul


_SLOT = {name: SLOTS.index(name) for name in ("x", "weight", "out", "bias")}


def _bands(size: int, threads: int, least: int) -> list:
    """range(size) in 2 or 1 bands per thread of at least `least` (a count the threads share evenly), else whole."""
    for parts in (2 * threads, threads):
        if size // parts >= least:
            return split(size, parts)
    return [(0, size)]


def batched(tasks, transforms, x, y, tx: bool, ty: bool):
    """x @ y for float32 operands with batch dimensions, one single-threaded BLAS call per batch item (rows.c) in
    parts on the crew, or None where that does not apply: an operand's batch dimensions must be the broadcast ones or
    all of size 1 (then shared by every item)."""
    if not (x.dtype == y.dtype == np.float32 and x.ndim >= 2 and y.ndim >= 2 and x.size and y.size):
        return None
    m, k = (x.shape[-1], x.shape[-2]) if tx else x.shape[-2:]
    k2, n = (y.shape[-1], y.shape[-2]) if ty else y.shape[-2:]
    try:
        batch = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except ValueError:
        return None  # the reference names the mismatch
    count = int(np.prod(batch))
    full = [(1,) * (len(batch) - a.ndim + 2) + a.shape[:-2] == batch for a in (x, y)]  # an item per batch item
    shared = [int(np.prod(a.shape[:-2])) == 1 for a in (x, y)]  # one item for all
    if k != k2 or count < 2 or not all(f or s for f, s in zip(full, shared)) or not tasks.ready() \
            or transforms.lib() is None or transforms.sgemm is None:
        return None
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    out = np.empty((*batch, m, n), np.float32)
    sgemm, ilp64 = transforms.sgemm
    params = np.array([sgemm, int(ilp64), x.ctypes.data, y.ctypes.data, out.ctypes.data, count, m, n, k, int(tx),
                       int(ty), x.shape[-1], y.shape[-1], 0 if shared[0] else m * k, 0 if shared[1] else k * n],
                      np.int64)
    with single_blas():
        tasks.run("hwa_batched_matmul", params, count * m * n)
    return out
