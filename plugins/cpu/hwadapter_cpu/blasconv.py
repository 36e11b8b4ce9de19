"""float32 conv2d as BLAS products with the data movement around them in C (transforms.c): the default on a machine
with a C compiler.

3x3 stride-1 convolutions run as Winograd F(2x2,3x3): sixteen products of (K, C) transformed weights by (C, tiles)
transformed inputs, 2.25x fewer multiplications than im2col's one product; the weights are transformed once per plan
(`prepack`), which also maps identical filters to their first copy so their channels come out bit-identical. Every
other ungrouped convolution is im2col + one product. The patches and transforms are written by C
into scratch kept between calls (fresh megabytes per call cost page faults), and the bias, residual and relu are
applied in one pass as the result is written. Anything else (other dtypes, groups, no compiler) is conv.py's numpy.
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
from .crew import Crew, single_blas

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("transforms.c")
#: Winograd where the products stay large enough for BLAS to run them well (measured on ResNet-50's layers)
MIN_TILES, MIN_CHANNELS = 16, 16
#: products below this many multiply-adds run as one task: sharing them costs more than it saves
SPLIT_FLOPS = 1 << 21


# Winograd F(2,3)'s filter transform G (4x3); G w G^T of every 3x3 filter at once is one product with kron(G, G)
_G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float32)
_GG = np.kron(_G, _G).T.copy()  # (9, 16): a filter's 9 taps -> its 16 transformed values, i*4 + j


class Packed:
    """A conv2d weight prepared once per plan: `weight` as given; `u` its (16, K, C) Winograd transform G w G^T (as
    16 planes i*4 + j) or None; `rep` the first filter identical to each (an int64 row map) or None when all differ."""
    __slots__ = ("weight", "u", "rep")

    def __init__(self, weight: np.ndarray, winograd: bool = True):
        self.weight, self.u, self.rep = weight, None, _first_copies(weight)
        if winograd:  # a few ms for 512 channels: once per plan, not per call
            k, c = weight.shape[:2]
            u = np.matmul(weight.reshape(k * c, 9).astype(np.float32, copy=False), _GG)  # (K*C, 16)
            self.u = np.ascontiguousarray(u.T).reshape(16, k, c)


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


def _winograd(w_shape, x_shape, stride, dilation, groups) -> bool:
    """Whether a conv2d of these shapes runs as Winograd products (3x3, stride 1, large enough for BLAS)."""
    o, c, kh, kw = w_shape
    tiles = ((x_shape[2] - 1) // 2 + 1) * ((x_shape[3] - 1) // 2 + 1)  # about: the padding is not counted
    return (kh == kw == 3 and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1) and groups == 1
            and o >= MIN_CHANNELS and c >= MIN_CHANNELS and tiles >= MIN_TILES)


def _ptr(a) -> int | None:
    return None if a is None else a.ctypes.data


def _split(n: int, parts: int, least: int = 1) -> list:
    """[start, end) ranges cutting range(n) into at most `parts` pieces of at least `least` (the last may be less)."""
    step = max(least, -(-n // max(1, parts)))
    return [(a, min(n, a + step)) for a in range(0, n, step)]


class Transforms:
    """transforms.c of one device, compiled on first use (None when it cannot be built here), its scratch, and the
    crew whose threads share each call."""

    def __init__(self, device, crew: Crew | None = None):
        self.device = device
        self.crew = crew or Crew()
        self._lib = None
        self._lock = threading.Lock()
        self._scratch: dict = {}  # name -> a float32 array kept for the next call (one per name and thread at once)

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
        for name, args in (("hwa_im2col", [ptr] * 2 + [i64] * 14), ("hwa_winograd_input", [ptr] * 2 + [i64] * 9),
                           ("hwa_winograd_output", [ptr] * 5 + [i64] * 8), ("hwa_epilogue", [ptr] * 4 + [i64] * 4)):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = None, args
        return lib

    def take(self, name: str, shape) -> np.ndarray:
        """A float32 scratch array of `shape`, reusing the last one of that name when it is large enough."""
        size = int(np.prod(shape))
        with self._lock:
            buf = self._scratch.pop(name, None)
        if buf is None or buf.size < size:
            buf = np.empty(size, np.float32)
        return buf[:size].reshape(shape)

    def give(self, name: str, arr: np.ndarray) -> None:
        base = arr.base if arr.base is not None else arr
        with self._lock:
            self._scratch[name] = base.reshape(-1)

    def __call__(self, lib, x, w, bias, residual, stride, padding, dilation, activation):
        n, c, h, wd = x.shape
        u, rep = (w.u, w.rep) if isinstance(w, Packed) else (None, None)
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
        args = (x, b, r, out, rep, activation == "relu")
        with single_blas():
            if u is not None and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1):
                self._winograd(lib, u, padding, *args)
            else:
                self._im2col(lib, w, stride, padding, dilation, *args)
        if activation not in (None, "relu"):
            out = _EPILOGUE[activation](out)
        return out

    def _winograd(self, lib, u, padding, x, b, r, out, rep, relu):
        """Per image: the input transform, the 16 products, the output transform with the epilogue; each shared."""
        (n, c, h, wd), (_, o, oh, ow), (pt, _, pl, _) = x.shape, out.shape, padding
        th, tw = (oh + 1) // 2, (ow + 1) // 2
        v, m = self.take("v", (16, c, th * tw)), self.take("m", (16, o, th * tw))
        parts = 2 * self.crew.threads
        try:
            for i in range(n):
                xi, oi, ri = x[i].ctypes.data, out[i].ctypes.data, None if r is None else r[i].ctypes.data
                self.crew.run([partial(lib.hwa_winograd_input, xi, v.ctypes.data, c, h, wd, pt, pl, th, tw, a, z)
                               for a, z in _split(c, parts, 8)])
                self.crew.run([partial(np.matmul, u[j], v[j], out=m[j]) for j in range(16)])
                self.crew.run([partial(lib.hwa_winograd_output, m.ctypes.data, oi, _ptr(b), ri, _ptr(rep), o, th, tw,
                                       oh, ow, relu, a, z) for a, z in _split(o, parts, 8)])
        finally:
            self.give("v", v)
            self.give("m", m)

    def _im2col(self, lib, w, stride, padding, dilation, x, b, r, out, rep, relu):
        """Per image: the patches (none for a 1x1 stride-1 convolution), then row blocks of the product, each with
        its epilogue (one block with a row map: its rows read others)."""
        (n, c, h, wd), (_, o, oh, ow), (_, _, kh, kw) = x.shape, out.shape, w.shape
        (sh, sw), (dh, dw), (pt, _, pl, _) = stride, dilation, padding
        wm = np.ascontiguousarray(w.reshape(o, c * kh * kw))
        direct = kh == kw == 1 and (sh, sw) == (1, 1) and not any(padding)
        cols = None if direct else self.take("cols", (c * kh * kw, oh * ow))
        points, parts = oh * ow, 2 * self.crew.threads
        epilogue = b is not None or r is not None or relu or rep is not None
        # row blocks of at least 64: each block's product packs the whole right-hand side again
        blocks = [(0, o)] if rep is not None or o * points * c * kh * kw < SPLIT_FLOPS else _split(o, parts, 64)
        try:
            for i in range(n):
                if direct:
                    patches = x[i].reshape(c, h * wd)
                else:
                    self.crew.run([partial(lib.hwa_im2col, x[i].ctypes.data, cols.ctypes.data, h, wd, kh, kw, sh, sw,
                                           pt, pl, dh, dw, oh, ow, a, z) for a, z in _split(c, parts, 4)])
                    patches = cols
                rows = out[i].reshape(o, points)
                oi, ri = out[i].ctypes.data, None if r is None else r[i].ctypes.data

                def block(a, z, patches=patches, rows=rows, oi=oi, ri=ri):
                    np.matmul(wm[a:z], patches, out=rows[a:z])
                    if epilogue:
                        lib.hwa_epilogue(oi, _ptr(b), ri, _ptr(rep), points, relu, a, z)
                self.crew.run([partial(block, a, z) for a, z in blocks])
        finally:
            if cols is not None:
                self.give("cols", cols)


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
