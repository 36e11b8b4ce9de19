"""Op kernels of the CUDA plugin: cuBLAS (through cupy) for matmul and conv2d, CUDA C (kernels/*.cu) for pooling and
arg reductions, cupy array functions on views of the device memory for data movement. Every other op runs from
kernel primitives through the codegen backend.

Each kernel follows the core's convention `fn(*arrays, **attrs) -> DeviceArray(s)`; the optional `out=` (arrays of
the right shape and dtype) lets the subgraph backend write into memory it planned.
"""
from __future__ import annotations

import contextlib
import math
import threading
from pathlib import Path

import numpy as np

from hwadapter.plugin import CompileError, DeviceArray, InvalidArgumentError, meta, reference, shapes

SOURCE_DIR = Path(__file__).parent / "kernels"
CTYPES = {"float16": "__half", "float32": "float", "float64": "double", "int8": "signed char", "int16": "short",
          "int32": "int", "int64": "long long", "uint8": "unsigned char", "bool": "unsigned char"}
FLOAT = ("float16", "float32", "float64")
NUMERIC = FLOAT + ("int8", "int16", "int32", "int64", "uint8")
ALL = NUMERIC + ("bool",)
#: file -> {template: dtypes}: what is compiled at run time, and what the test suite compiles with nvcc.
TEMPLATES = {
    "pool.cu": {"max_pool2d": ALL, "avg_pool2d": FLOAT, "adaptive_avg_pool2d": FLOAT, "adaptive_max_pool2d": ALL,
                "max_pool2d_grad": FLOAT, "adaptive_max_pool2d_grad": FLOAT},
    "argreduce.cu": {f"{op}_{kind}": ALL for op in ("argmax", "argmin") for kind in ("rows", "blocks")},
}
BLOCK = 256  # threads per block; argreduce.cu's shared arrays assume it
_BLOCKS_FROM = 1024  # axis length from which a whole block, not one thread, reduces each output


def name_expressions(file: str) -> list[str]:
    """The template instantiations of a .cu file, e.g. "max_pool2d<float>"."""
    return sorted({f"{t}<{CTYPES[d]}>" for t, dtypes in TEMPLATES[file].items() for d in dtypes})


# --- device memory as cupy arrays ---------------------------------------------------------------------------
def view(a: DeviceArray):
    """A cupy ndarray over a DeviceArray's memory (no copy; it keeps the memory alive)."""
    cp = a.device.runtime.cp
    mem = cp.cuda.UnownedMemory(a.handle or 0, a.nbytes, a, a.device.index)
    return cp.ndarray(a.shape, a.dtype, cp.cuda.MemoryPointer(mem, 0))


@contextlib.contextmanager
def scope(device):
    """cupy calls inside run on `device` and its default stream, and allocate from the core's caching allocator."""
    rt = device.runtime
    cp = rt.cp

    def allocate(nbytes):  # cupy's temporaries become blocks of the core's allocator, not cupy's memory pool
        block = DeviceArray.empty(device, (nbytes,), np.uint8)
        return cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(block.handle or 0, nbytes, block, device.index), 0)

    with rt.device, rt.default_stream.cupy, cp.cuda.using_allocator(allocate):
        yield cp


def _out(x: DeviceArray, shape, dtype, out):
    return out if out is not None else DeviceArray.empty(x.device, shape, dtype)


# --- handwritten CUDA C -----------------------------------------------------------------------------------
_lock = threading.Lock()
_modules: dict = {}
_functions: dict = {}


def _module(cp, file: str):
    with _lock:
        if file not in _modules:
            from .codegen import OPTIONS, fp16_include_dirs, _nvrtc
            includes = [SOURCE_DIR, *fp16_include_dirs(cp, _nvrtc(cp).getVersion()[0])]
            _modules[file] = cp.RawModule(code=(SOURCE_DIR / file).read_text(), name_expressions=name_expressions(file),
                                          options=(*OPTIONS, *(f"-I{d}" for d in includes)))
        return _modules[file]


def _function(runtime, file: str, template: str, dtype) -> object:
    """The compiled instantiation `template<dtype>` of a .cu file on a device (the whole file compiles at once)."""
    key = (runtime.index, template, np.dtype(dtype).name)
    fn = _functions.get(key)
    if fn is None:
        cp = runtime.cp
        with runtime.device:
            try:
                fn = _module(cp, file).get_function(f"{template}<{CTYPES[key[2]]}>")
            except cp.cuda.compiler.CompileException as err:  # NVRTC runs when the first function is asked for
                raise CompileError(f"{runtime.name}: NVRTC could not compile {file} ({template}). Fix: this is "
                                   f"a bug in hwadapter-cuda's kernels; report it with the log", source=err.source,
                                   log=err.get_message()) from None
        fn = _functions.setdefault(key, fn)
    return fn


def prepare(runtime, op: str, dtype) -> None:
    """Compile the handwritten kernels `op` uses for `dtype` now, not at its first launch."""
    for file, templates in TEMPLATES.items():
        for template, dtypes in templates.items():
            if (template == op or template.startswith(op + "_")) and np.dtype(dtype).name in dtypes:
                _function(runtime, file, template, dtype)


def _launch(fn, device, items: int, args, per_block=False) -> None:
    grid = min(items if per_block else -(-items // BLOCK), 2**31 - 1)  # kernels loop over whatever the grid misses
    args = tuple(np.uint64(a.handle or 0) if isinstance(a, DeviceArray) else np.int64(a) for a in args)
    rt = device.runtime
    with rt.device:
        fn((grid,), (BLOCK,), args, stream=rt.default_stream.cupy)


# --- linear algebra ------------------------------------------------------------------------------------------
def matmul(x, y, transpose_x=False, transpose_y=False, out=None):
    """cupy.matmul (cuBLAS for floats) with numpy's batching and 1-D rules."""
    out = _out(x, shapes.matmul(x.shape, y.shape, transpose_x, transpose_y), x.dtype, out)
    if out.size == 0:
        return out
    with scope(x.device) as cp:
        a, b, o = view(x), view(y), view(out)
        a = cp.swapaxes(a, -1, -2) if transpose_x and a.ndim >= 2 else a  # a view: cuBLAS transposes on the fly
        b = cp.swapaxes(b, -1, -2) if transpose_y and b.ndim >= 2 else b
        if o.ndim >= 2:
            cp.matmul(a, b, out=o)
        else:
            o[...] = cp.matmul(a, b)
    return out


def conv2d(x, w, bias=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, out=None):
    """im2col (a strided window view, copied once) and one batched cuBLAS matmul over (batch, group)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pb, pl, pr) = stride, dilation, padding
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (wd + pl + pr - (kw - 1) * dw - 1) // sw + 1
    out = _out(x, (n, o, oh, ow), x.dtype, out)
    if out.size == 0:
        return out
    acc = np.dtype(np.float32) if x.dtype == np.float16 else x.dtype  # float16 accumulates in float32
    with scope(x.device) as cp:
        xv = view(x).astype(acc, copy=False)
        if pt or pb or pl or pr:
            xv = cp.pad(xv, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        s = xv.strides
        win = cp.lib.stride_tricks.as_strided(xv, (n, c, kh, kw, oh, ow),
                                              (s[0], s[1], s[2] * dh, s[3] * dw, s[2] * sh, s[3] * sw))
        cols = win.reshape(n, groups, cg * kh * kw, oh * ow)  # copies: the im2col matrix, (c, kh, kw) like w's rows
        wg = view(w).astype(acc, copy=False).reshape(groups, o // groups, cg * kh * kw)
        res = view(out).reshape(n, groups, o // groups, oh * ow)  # (batch, group, out channel, pixel) is NCHW
        prod = cp.matmul(wg, cols, out=res) if acc == out.dtype else cp.matmul(wg, cols)
        prod = prod.reshape(n, o, oh * ow)
        if bias is not None:
            prod += view(bias).astype(acc, copy=False).reshape(1, o, 1)
        if acc != out.dtype:
            res.reshape(n, o, oh * ow)[...] = prod.astype(out.dtype)  # one rounding to float16, at the end
    return out


# --- pooling and arg reductions (CUDA C) ---------------------------------------------------------------------
def _pool(template, x, kernel_size, stride, padding, ceil_mode, extra_args=(), out=None):
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pb, pl, pr) = kernel_size, stride, padding
    oh, ow = shapes.pool_out(h, kh, sh, pt, pb, ceil_mode), shapes.pool_out(w, kw, sw, pl, pr, ceil_mode)
    out = _out(x, (n, c, oh, ow), x.dtype, out)
    if out.size:
        fn = _function(x.device.runtime, "pool.cu", template, x.dtype)
        _launch(fn, x.device, out.size, [x, out, n * c, h, w, oh, ow, kh, kw, sh, sw, pt, pl, *extra_args])
    return out


def max_pool2d(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False, out=None):
    """Max over windows; padding never wins."""
    return _pool("max_pool2d", x, kernel_size, stride, padding, ceil_mode, out=out)


def avg_pool2d(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False, exclusive=True,
               out=None):
    """Mean over windows; exclusive divides by the unpadded element count."""
    return _pool("avg_pool2d", x, kernel_size, stride, padding, ceil_mode, (int(exclusive),), out=out)


def _adaptive(template, x, output_size, out):
    n, c, h, w = x.shape
    oh, ow = output_size
    out = _out(x, (n, c, oh, ow), x.dtype, out)
    if out.size:
        fn = _function(x.device.runtime, "pool.cu", template, x.dtype)
        _launch(fn, x.device, out.size, [x, out, n * c, h, w, oh, ow])
    return out


def adaptive_avg_pool2d(x, output_size=(1, 1), out=None):
    """Average pooling to a fixed output size."""
    return _adaptive("adaptive_avg_pool2d", x, output_size, out)


def adaptive_max_pool2d(x, output_size=(1, 1), out=None):
    """Max pooling to a fixed output size."""
    return _adaptive("adaptive_max_pool2d", x, output_size, out)


def max_pool2d_grad(x, grad, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False, out=None):
    """The gradient of max_pool2d with respect to x: each window's grad to its first maximal element (the op's
    rule, hwadapter.api.meta, checks the call first: no frontend function does)."""
    meta.RULES["max_pool2d_grad"]((x.shape, grad.shape), (x.dtype, grad.dtype), {
        "kernel_size": kernel_size, "stride": stride, "padding": padding, "ceil_mode": ceil_mode})
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, _, pl, _) = kernel_size, stride, padding
    out = _out(x, x.shape, x.dtype, out)
    if out.size:
        fn = _function(x.device.runtime, "pool.cu", "max_pool2d_grad", x.dtype)
        _launch(fn, x.device, out.size, [x, grad, out, n * c, h, w, grad.shape[2], grad.shape[3], kh, kw, sh, sw,
                                         pt, pl])
    return out


def adaptive_max_pool2d_grad(x, grad, output_size=(1, 1), out=None):
    """The gradient of adaptive_max_pool2d with respect to x, over its windows."""
    meta.RULES["adaptive_max_pool2d_grad"]((x.shape, grad.shape), (x.dtype, grad.dtype), {"output_size": output_size})
    n, c, h, w = x.shape
    out = _out(x, x.shape, x.dtype, out)
    if out.size:
        fn = _function(x.device.runtime, "pool.cu", "adaptive_max_pool2d_grad", x.dtype)
        _launch(fn, x.device, out.size, [x, grad, out, n * c, h, w, grad.shape[2], grad.shape[3]])
    return out


def _arg(op, x, axis, keepdim, out):
    if axis is None:
        outer, n, inner = 1, x.size, 1
        shape = (1,) * x.ndim if keepdim else ()
    else:
        outer, n, inner = math.prod(x.shape[:axis]), x.shape[axis], math.prod(x.shape[axis + 1:])
        shape = shapes.reduce(x.shape, (axis,), keepdim)
    out = _out(x, shape, np.int64, out)
    if out.size:
        blocks = n >= _BLOCKS_FROM or out.size < BLOCK  # long axes, or too few outputs to busy the GPU otherwise
        fn = _function(x.device.runtime, "argreduce.cu", f"{op}_{'blocks' if blocks else 'rows'}", x.dtype)
        _launch(fn, x.device, out.size, [x, out, outer, n, inner], per_block=blocks)
    return out


def argmax(x, axis=None, keepdim=False, out=None):
    """Index (int64) of the first largest element; NaN counts as largest."""
    return _arg("argmax", x, axis, keepdim, out)


def argmin(x, axis=None, keepdim=False, out=None):
    """Index (int64) of the first smallest element; NaN counts as smallest."""
    return _arg("argmin", x, axis, keepdim, out)


# --- data movement (cupy on views of device memory) -------------------------------------------------------------
def reshape(x, shape, out=None):
    """The same memory with another shape (no copy)."""
    return x.reshape(shape)


def transpose(x, perm, out=None):
    """Permuted axes, copied into dense memory."""
    out = _out(x, tuple(x.shape[p] for p in perm), x.dtype, out)
    if out.size:
        with scope(x.device) as cp:
            view(out)[...] = cp.transpose(view(x), perm)
    return out


def concat(*xs, axis=0, out=None):
    """Join along an existing axis."""
    shape = list(xs[0].shape)
    shape[axis] = sum(x.shape[axis] for x in xs)
    out = _out(xs[0], shape, xs[0].dtype, out)
    if out.size:
        with scope(out.device) as cp:
            cp.concatenate([view(x) for x in xs], axis=axis, out=view(out))
    return out


def split(x, sections, axis=0, out=None):
    """Parts of the given sizes along an axis, each copied into dense memory."""
    outs, start = list(out or ()), 0
    with scope(x.device):
        xv = view(x)
        for i, size in enumerate(sections):
            shape = x.shape[:axis] + (size,) + x.shape[axis + 1:]
            if len(outs) <= i:
                outs.append(DeviceArray.empty(x.device, shape, x.dtype))
            if outs[i].size:
                view(outs[i])[...] = xv[(slice(None),) * axis + (slice(start, start + size),)]
            start += size
    return outs


def slice_op(x, axes, starts, ends, steps, out=None):
    """x[start:end:step] along axes, copied into dense memory."""
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = reference.slice_positions(s, e, st)  # absolute positions: a start of -1 is before the axis
    shape = tuple(len(range(*i.indices(n))) for i, n in zip(index, x.shape))
    out = _out(x, shape, x.dtype, out)
    if out.size:
        with scope(x.device):
            view(out)[...] = view(x)[tuple(index)]
    return out


def gather(x, index, axis=0, out=None):
    """Elements at integer indices along an axis (negative indices count from the end)."""
    out = _out(x, x.shape[:axis] + index.shape + x.shape[axis + 1:], x.dtype, out)
    with scope(x.device) as cp:
        iv, n = view(index), x.shape[axis]
        if index.size:
            lo, hi = int(iv.min()), int(iv.max())  # waits for the GPU, so bad indices raise as on the CPU
            if lo < -n or hi >= n:
                raise InvalidArgumentError(f"gather on {x.device}: index {hi if hi >= n else lo} is out of range for "
                                           f"axis {axis} of size {n} (valid: {-n}..{n - 1})")
        if out.size:
            cp.take(view(x), iv, axis=axis, out=view(out))  # cupy wraps negative indices, as numpy reads them
    return out


def expand(x, shape, out=None):
    """Broadcast to a shape, copied into dense memory."""
    out = _out(x, shape, x.dtype, out)
    if out.size:
        with scope(x.device) as cp:
            view(out)[...] = cp.broadcast_to(view(x), shape)
    return out


def pad(x, pads, mode="constant", value=0.0, out=None):
    """Pad every axis by (before, after): constant, reflect, replicate or circular."""
    out = _out(x, tuple(n + a + b for n, (a, b) in zip(x.shape, pads)), x.dtype, out)
    if out.size:
        with scope(x.device) as cp:
            ov = view(out)
            if mode == "constant":
                ov.fill(np.asarray(value).astype(x.dtype)[()])
                if x.size:
                    ov[tuple(slice(a, a + n) for n, (a, _) in zip(x.shape, pads))] = view(x)
            else:
                np_mode = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
                ov[...] = cp.pad(view(x), [(int(a), int(b)) for a, b in pads], mode=np_mode)
    return out


#: op -> (kernel, dtypes it is registered for; None for any).
KERNELS = {
    "matmul": (matmul, NUMERIC), "conv2d": (conv2d, FLOAT),
    **{op: (globals()[op], tuple(TEMPLATES["pool.cu"][op])) for op in TEMPLATES["pool.cu"]},
    "argmax": (argmax, ALL), "argmin": (argmin, ALL),
    **{op: (globals()[op], None) for op in ("reshape", "transpose", "concat", "split", "gather", "expand", "pad")},
    "slice": (slice_op, None),
}


def register(kernels) -> None:
    """Register every kernel of this module with the core (Plugin.register_kernels)."""
    for op, (fn, dtypes) in KERNELS.items():
        kernels.register(op, fn, dtypes)
