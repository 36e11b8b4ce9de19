"""float32 conv2d as BLAS products with the data movement around them in C (transforms.c): the default on a machine
with a C compiler.

3x3 stride-1 convolutions run as Winograd F(4x4,3x3) on larger images (36 products of (K, C) transformed weights by
(C, tiles) transformed inputs, 4x fewer multiplications than im2col's one product) and F(2x2,3x3) on smaller ones
(16 products, 2.25x fewer); the weights are transformed once per plan (`prepack`), which also maps identical filters
to their first copy so their channels come out bit-identical. Every other ungrouped convolution is im2col + one
product. Each image's work is cut into independent tasks (bands of output rows: their patches or transforms, their
products, their output with the bias, residual and relu) that the device's crew shares (crew.py), BLAS running
single-threaded in each; scratch is kept per thread between calls (fresh megabytes per call cost page faults).
Anything else (other dtypes, groups, no compiler) is conv.py's numpy.
"""
from __future__ import annotations

import ctypes
import logging
import threading
from functools import partial
from pathlib import Path

import numpy as np

from hwadapter.plugin import load_source, meta, reference

from .conv import _EPILOGUE, conv2d
from .crew import COLUMNS, ROWS, SPLIT_FLOPS, Crew, single_blas, split

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("transforms.c")
#: Winograd where the products stay large enough for BLAS to run them well (measured on ResNet-50's layers)
MIN_TILES, MIN_TILES4, MIN_CHANNELS = 32, 49, 16


# Winograd F(2,3)'s and F(4,3)'s filter transforms G; G w G^T of every 3x3 filter at once is one product with
# kron(G, G): (9, n*n), a filter's 9 taps -> its transformed values, i*n + j
_G = {2: np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]]),
      4: np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                   [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])}
_GG = {tile: np.kron(g, g).T.copy() for tile, g in _G.items()}  # float64: the transform rounds once, to float32


class Packed:
    """A conv2d weight prepared once per plan: `weight` as given; `u` its (n*n, K, C) Winograd F(tile, 3) transform
    G w G^T (as planes i*n + j, n = tile + 2) or None; `rep` the first filter identical to each (an int64 row map) or
    None when all differ."""
    __slots__ = ("weight", "tile", "u", "rep")

    def __init__(self, weight: np.ndarray, tile: int = 2):
        self.weight, self.tile, self.u, self.rep = weight, tile, None, _first_copies(weight)
        if tile:  # a few ms for 512 channels: once per plan, not per call
            k, c = weight.shape[:2]
            u = np.matmul(weight.reshape(k * c, 9).astype(np.float64), _GG[tile])  # (K*C, n*n)
            self.u = np.ascontiguousarray(u.T, np.float32).reshape(-1, k, c)


def _first_copies(weight: np.ndarray):
    """For each filter, the first one bit-identical to it; None when no two are.

    OpenBLAS rounds the rows of one product differently (its kernel's register blocks sum in another order), so
    identical filters would give channels a few ulps apart; reading each channel from its first copy's row makes
    them bit-identical, as exact arithmetic has them (the onnx light models' fills need it: SqueezeNet's 1000 equal
    logits of 1e10 must stay equal for its uniform softmax). The map costs nothing per call: the Winograd output
    transform and the epilogue read that row instead of their own."""
    rows = np.ascontiguousarray(weight).reshape(weight.shape[0], -1)
    first: dict = {}
    rep = np.array([first.setdefault(row.tobytes(), k) for k, row in enumerate(rows)], np.int64)  # bit-identical
    return None if len(first) == len(rows) else rep


def _winograd(w_shape, x_shape, stride, dilation, groups) -> int:
    """The Winograd output tile (4, 2) a conv2d of these shapes runs with, or 0 for none (3x3, stride 1, products
    large enough for BLAS: F(4,3)'s transforms cost more and pay on larger images)."""
    o, c, kh, kw = w_shape
    if not (kh == kw == 3 and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1) and groups == 1
            and o >= MIN_CHANNELS and c >= MIN_CHANNELS):
        return 0
    for tile, least in ((4, MIN_TILES4), (2, MIN_TILES)):
        if -(-x_shape[2] // tile) * -(-x_shape[3] // tile) >= least:  # about: the padding is not counted
            return tile
    return 0


def _ptr(a) -> int | None:
    return None if a is None else a.ctypes.data


class Transforms:
    """transforms.c of one device, compiled on first use (None when it cannot be built here), the crew whose threads
    share each call, and each thread's scratch."""

    def __init__(self, device, crew: Crew | None = None):
        self.device = device
        self.crew = crew or Crew()
        self._lib = None
        self._lock = threading.Lock()
        self._local = threading.local()  # .scratch: name -> a float32 array the thread keeps for its next task

    def lib(self):
        if self._lib is None:
            with self._lock:
                if self._lib is None:
                    self._lib = self._load() or False
        return self._lib or None

    def _load(self):
        try:
            lib = load_source(self.device, SOURCE.read_text(), "hwa_im2col").library
        except Exception as err:  # no compiler, or one that fails: conv.py's numpy serves, and says so once
            log.warning("%s: conv2d runs in numpy, its C transforms are unavailable: %s", self.device, str(err))
            return None
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        for name, args in (("hwa_im2col", [ptr] * 2 + [i64] * 14), ("hwa_winograd_input", [ptr] * 2 + [i64] * 8),
                           ("hwa_winograd_output", [ptr] * 5 + [i64] * 7), ("hwa_winograd4_input", [ptr] * 2 + [i64] * 8),
                           ("hwa_winograd4_output", [ptr] * 5 + [i64] * 7), ("hwa_epilogue", [ptr] * 4 + [i64] * 6),
                           ("hwa_store", [ptr] * 5 + [i64] * 6)):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = None, args
        return lib

    def take(self, name: str, shape) -> np.ndarray:
        """This thread's float32 scratch array `name` of `shape` (kept between calls: fresh megabytes fault in)."""
        size = int(np.prod(shape))
        scratch = self._local.__dict__.setdefault("scratch", {})
        buf = scratch.get(name)
        if buf is None or buf.size < size:
            buf = scratch[name] = np.empty(size, np.float32)
        return buf[:size].reshape(shape)

    def __call__(self, lib, x, w, bias, residual, stride, padding, dilation, activation):
        n, c, h, wd = x.shape
        u, rep, tile = (w.u, w.rep, w.tile) if isinstance(w, Packed) else (None, None, 0)
        if isinstance(w, Packed):
            w = w.weight
        o, _, kh, kw = w.shape
        (((_, _, oh, ow), _),) = meta.result_meta(  # the op's own rule; it also refuses a residual of another shape
            "conv2d", (x.shape, w.shape, *(() if residual is None else ((o,), residual.shape))),
            (x.dtype, w.dtype), {"stride": stride, "padding": padding, "dilation": dilation})
        x = np.ascontiguousarray(x)
        b = None if bias is None else np.ascontiguousarray(bias)
        r = None if residual is None else np.ascontiguousarray(residual)
        out = np.empty((n, o, oh, ow), np.float32)
        if out.size == 0:
            return out
        relu = activation == "relu"
        with single_blas():
            for i in range(n):  # one image at a time, in phases of independent tasks (one phase but in one case)
                args = (x[i], None if r is None else r[i], out[i], b, rep, relu)
                if u is not None and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1):
                    phases = [self._winograd(lib, u, tile, padding, *args)]
                else:
                    phases = self._im2col(lib, w, stride, padding, dilation, *args)
                for tasks in phases:
                    self.crew.run(tasks)
        if activation not in (None, "relu"):
            out = _EPILOGUE[activation](out)
        return out

    def _winograd(self, lib, u, tile, padding, x, r, out, b, rep, relu) -> list:
        """Tasks for bands of tile rows: each transforms its tiles' input, runs the (tile + 2)^2 products on them
        and writes their output with the epilogue."""
        (c, h, wd), (o, oh, ow), (pt, _, pl, _) = x.shape, out.shape, padding
        th, tw, planes = -(-oh // tile), -(-ow // tile), len(u)
        xp, op, rp, bp, mp = x.ctypes.data, out.ctypes.data, _ptr(r), _ptr(b), _ptr(rep)
        forward, back = ((lib.hwa_winograd_input, lib.hwa_winograd_output) if tile == 2 else
                         (lib.hwa_winograd4_input, lib.hwa_winograd4_output))

        def band(y0, y1):
            tiles = (y1 - y0) * tw
            v, m = self.take("v", (planes, c, tiles)), self.take("m", (planes, o, tiles))
            forward(xp, v.ctypes.data, c, h, wd, pt, pl, tw, y0, y1)
            np.matmul(u, v, out=m)
            back(m.ctypes.data, op, bp, rp, mp, o, tw, oh, ow, relu, y0, y1)
        # bands of at least 16 tiles: fewer make the products too thin for BLAS
        return [partial(band, y0, y1) for y0, y1 in split(th, self.crew.threads, -(-16 // tw))]

    def _im2col(self, lib, w, stride, padding, dilation, x, r, out, b, rep, relu) -> list:
        """Phases of tasks. With many output pixels, bands of output rows (each: its patches, its product straight
        into the output's columns, the epilogue in place); with few, blocks of output channels: in place with their
        epilogue, or, under a row map (a row may read another block's), into shared scratch that a second phase
        stores."""
        (c, h, wd), (o, oh, ow), (_, _, kh, kw) = x.shape, out.shape, w.shape
        (sh, sw), (dh, dw), (pt, _, pl, _) = stride, dilation, padding
        wm = np.ascontiguousarray(w.reshape(o, c * kh * kw))
        direct = kh == kw == 1 and (sh, sw) == (1, 1) and not any(padding)
        xp, op, rp, bp, mp = x.ctypes.data, out.ctypes.data, _ptr(r), _ptr(b), _ptr(rep)
        parts, k, points = self.crew.threads, c * kh * kw, oh * ow
        flat = x.reshape(c, h * wd) if direct else None
        small = o * points * k < SPLIT_FLOPS
        rows, epilogue = out.reshape(o, points), b is not None or r is not None or relu or rep is not None

        def band(y0, y1):
            q0, q1 = y0 * ow, y1 * ow
            if direct:
                patches = flat[:, q0:q1]
            else:
                patches = self.take("cols", (k, q1 - q0))
                lib.hwa_im2col(xp, patches.ctypes.data, c, h, wd, kh, kw, sh, sw, pt, pl, dh, dw, ow, y0, y1)
            np.matmul(wm, patches, out=rows[:, q0:q1])  # straight into the output (BLAS takes its row stride)
            if epilogue:
                lib.hwa_epilogue(op, bp, rp, mp, points, relu, 0, o, q0, q1)
        if small or points >= 2 * COLUMNS or o < 2 * ROWS:  # each band's product packs the weights again
            least = oh if small else max(-(-oh // parts), -(-COLUMNS // ow))
            return [[partial(band, y0, y1) for y0, y1 in split(oh, parts, least)]]
        patches = flat
        if patches is None:
            patches = self.take("cols", (k, points))
            lib.hwa_im2col(xp, patches.ctypes.data, c, h, wd, kh, kw, sh, sw, pt, pl, dh, dw, ow, 0, oh)
        blocks = split(o, parts, ROWS)
        if rep is None:
            def block(a, z):
                np.matmul(wm[a:z], patches, out=rows[a:z])
                if epilogue:
                    lib.hwa_epilogue(op, bp, rp, None, points, relu, a, z, 0, points)
            return [[partial(block, a, z) for a, z in blocks]]
        raw = np.empty((o, points), np.float32)  # read by every task of the second phase: not a thread's scratch
        return [[partial(np.matmul, wm[a:z], patches, out=raw[a:z]) for a, z in blocks],
                [partial(lib.hwa_store, op, raw.ctypes.data, bp, rp, mp, points, 0, points, a, z, relu)
                 for a, z in blocks]]


def conv_kernel(device, crew: Crew | None = None):
    """conv2d for `device`: float32 ungrouped convolutions through its Transforms, the rest through conv.py."""
    transforms = Transforms(device, crew)

    def conv2d_kernel(x, w, bias=None, residual=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                      groups=1, activation=None):
        weight = w.weight if isinstance(w, Packed) else w
        if x.dtype == weight.dtype == np.float32 and groups == 1 and x.size and weight.size and all(
                a is None or a.dtype == np.float32 for a in (bias, residual)):
            lib = transforms.lib()
            if lib is not None:
                return transforms(lib, x, w, bias, residual, tuple(stride), tuple(padding), tuple(dilation),
                                  activation)
        return conv2d(x, weight, bias, residual, stride, padding, dilation, groups, activation)

    def pack(weight, shapes, stride=(1, 1), dilation=(1, 1), groups=1, **_):
        """The weight prepared for the products this kernel will run on inputs of `shapes`, or None (nothing to do)."""
        if weight.dtype != np.float32 or weight.ndim != 4 or len(shapes[0]) != 4 or groups != 1:
            return None
        packed = Packed(weight, _winograd(weight.shape, shapes[0], stride, dilation, groups))
        return packed if packed.u is not None or packed.rep is not None else None

    conv2d_kernel.__name__ = conv2d_kernel.__qualname__ = "conv2d"
    conv2d_kernel.epilogues = reference.CONV_ACTIVATIONS
    conv2d_kernel.residual = True  # takes a fused residual input (graph fusion asks before emitting one)
    conv2d_kernel.prepack = {1: pack}  # input 1, the weight, when it is a plan constant
    return conv2d_kernel
