"""float32 conv2d as BLAS products with the data movement around them in C (transforms.c): the default on a machine
with a C compiler.

3x3 stride-1 convolutions run as Winograd F(4x4,3x3) on larger images (36 products of (K, C) transformed weights by
(C, tiles) transformed inputs, 4x fewer multiplications than im2col's one product) and F(2x2,3x3) on smaller ones
(16 products, 2.25x fewer); the weights are transformed once per plan (`prepack`), which also maps identical filters
to their first copy so their channels come out bit-identical. Every other ungrouped convolution is im2col + one
product. Each image's work is cut into phases of independent tasks (`Image.phases`: bands of output rows, each its
patches or transforms, its products and its output with the bias, residual and relu; or, with few pixels, blocks of
output channels). The device's threads (crew.c) run them in C (tasks.c), calling numpy's own cblas_sgemm
single-threaded, without the GIL; where that BLAS cannot be called from C, the same tasks run in Python on the calling
thread, through numpy's matmul. Grouped convolutions run as bands of one product per group, or, on images with too
few rows to share, as tasks of whole groups. Depthwise convolutions (one input channel per group) are no product at
all: depthwise.c convolves each plane directly, the bias, residual and every fused activation included, in tasks of
output planes over the whole batch. Anything else (other dtypes, no compiler) is the reference kernel.
"""
from __future__ import annotations

import ctypes
import logging
import os
import threading
from pathlib import Path

import numpy as np

from hwadapter.plugin import BoundedCache, InvalidArgumentError, meta, reference

from .blas import COLUMNS, ROWS, SPLIT_FLOPS, cores, single_blas, split
from .calls import caller
from .clib import CLibrary
from .segments import Record, runner_of

#: how long the crew's threads watch for the next call before sleeping (HWADAPTER_CPU_SPIN_MS overrides it), and a
#: caller for its call's last ranges to finish: on a virtual machine a sleeping thread's wake-up can take milliseconds
#: when the host is busy (BERT-base took 420-550 ms a run with 200 us both, 200-280 ms with these, alternated on one
#: busy host; a caller waiting for a helper's band of a large product slept and was woken late)
SPIN_NS, WAIT_NS = 5_000_000, 20_000_000


def spin_ns() -> int:
    """HWADAPTER_CPU_SPIN_MS in nanoseconds (default SPIN_NS): 0 gives the core back as soon as a call is done."""
    text = os.environ.get("HWADAPTER_CPU_SPIN_MS")
    if text is None:
        return SPIN_NS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1e6:
        raise InvalidArgumentError(f"HWADAPTER_CPU_SPIN_MS={text!r} is not a number of milliseconds from 0",
                                   fix=f"unset it (default {SPIN_NS / 1e6:g} ms) or set it to e.g. 0 or 2")
    return int(value * 1e6)

log = logging.getLogger(__name__)
#: one library: the tasks call the transforms, the crew runs the tasks
SOURCES = tuple(Path(__file__).with_name(name)
                for name in ("crew.c", "depthwise.c", "transforms.c", "igemm.c", "sgemm.c", "tasks.c"))
#: Winograd where the products stay large enough for BLAS to run them well (measured on ResNet-50's layers)
MIN_TILES, MIN_TILES4, MIN_CHANNELS = 32, 49, 16


# Winograd F(2,3)'s and F(4,3)'s filter transforms G; G w G^T of every 3x3 filter at once is one product with
# kron(G, G): (9, n*n), a filter's 9 taps -> its transformed values, i*n + j
_G = {2: np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]]),
      4: np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                   [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])}
_GG = {tile: np.kron(g, g).T.copy() for tile, g in _G.items()}  # float64: the transform rounds once, to float32


def igemm_weights(w: np.ndarray, groups: int, rows: int) -> np.ndarray:
    """igemm.c's weights: (groups, blocks, taps, rows), each block `rows` output channels of a group (zero past its
    last), its taps (input channel, kh, kw) in order."""
    o, taps = w.shape[0], int(np.prod(w.shape[1:]))
    og = o // groups
    blocks = -(-og // rows)
    a = np.zeros((groups, blocks * rows, taps), np.float32)
    a[:, :og] = w.reshape(groups, og, taps)
    return np.ascontiguousarray(a.reshape(groups, blocks, rows, taps).transpose(0, 1, 3, 2))


class Packed:
    """A conv2d weight prepared once per plan: `weight` as given; `u` its (n*n, K, C) Winograd F(tile, 3) transform
    G w G^T (as planes i*n + j, n = tile + 2) or None; `rep` the first filter identical to each (an int64 row map) or
    None when all differ; `a` igemm.c's packing (igemm_weights) where the plan routes it there, else None."""
    __slots__ = ("weight", "tile", "u", "rep", "a")

    def __init__(self, weight: np.ndarray, tile: int = 2, a=None):
        self.weight, self.tile, self.u, self.rep, self.a = weight, tile, None, _first_copies(weight), a
        if tile:  # once per plan, not per call
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


#: igemm.c takes a conv2d up to this many taps (input channels x kh x kw) per output: past it BLAS's blocking wins
#: (ResNet's 3x3 512->512 over 7x7 went to BLAS until igemm.c read each block of weights once for every strip,
#: prefetched: then igemm.c won it, alone and in the whole model). Winograd F(4,3) takes 3x3 layers over at least
#: IGEMM_WINOGRAD4 input channels, or half as many on images of IGEMM_WINOGRAD4_PIXELS or more (each kernel alone,
#: alternated: igemm.c won SqueezeNet's 32->128 over 27x27, F(4,3) won 32->96 over 56x56 and every layer over 64
#: channels, 48->128 over 28x28 was even). F(2,3) takes those of at least IGEMM_WINOGRAD2 input and output channels,
#: whose tasks share channels evenly (WINOGRAD_CHANNELS; it won 128->128 to 256->256 over 14x14 on the AMD host,
#: igemm.c 96->128 and 64->256 over 13x13; with bands of 4 and 3 tile rows it had lost every layer).
IGEMM_TAPS, IGEMM_WINOGRAD4, IGEMM_WINOGRAD4_PIXELS, IGEMM_WINOGRAD2 = 16384, 64, 1600, 128
#: the most scratch bytes a thread's run of strips may gather (igemm.c's span): more strips run in several runs
SPAN_BYTES = 1 << 22


def _igemm(w_shape, tile: int, x_shape=None) -> bool:
    """Whether a conv2d of this weight over inputs of x_shape, where the plan would run Winograd F(tile, 3) (0:
    none), runs as igemm.c's."""
    o, c, kh, kw = w_shape
    big = x_shape is not None and x_shape[2] * x_shape[3] >= IGEMM_WINOGRAD4_PIXELS
    winograd = (tile == 4 and (c >= IGEMM_WINOGRAD4 or (big and c >= IGEMM_WINOGRAD4 // 2))) or \
        (tile == 2 and min(c, o) >= IGEMM_WINOGRAD2)
    return c * kh * kw < IGEMM_TAPS and not winograd


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


def _ptr(a) -> int:
    return 0 if a is None else a.ctypes.data



# tasks.c's parameter slots and task kinds (ROWS_, COLUMNS_, DOTS_: matmul.py's)
SLOTS = ("x out weight bias res rep cols raw sgemm ilp64 failed c h iw o oh ow kh kw sh sw pt pl dh dw relu epilogue "
         "direct tile tw groups transb act parts span").split()
WINOGRAD, BAND, PATCHES, BLOCK, STORE, ROWS_, COLUMNS_, DOTS_, DEPTHWISE, GROUPS, IGEMM, LINEAR, \
    WINOGRAD_CHANNELS = range(13)
_X, _OUT, _WEIGHT, _BIAS, _RES = (SLOTS.index(s) for s in ("x", "out", "weight", "bias", "res"))
#: depthwise.c's activation codes (slot "act")
ACTIVATIONS = {None: 0, "relu": 1, "sigmoid": 2, "tanh": 3, "gelu": 4, "relu6": 5, "silu": 6}
#: a depthwise conv2d of fewer multiply-adds runs as one task: the crew's hand-over would cost more than it saves
DEPTHWISE_SPLIT = 1 << 16


class Image:
    """One image's conv2d: its arrays and geometry, the phases its work is cut into (tasks.c's kinds, each with
    ranges that threads share) and the same tasks in Python (numpy's matmul) for a BLAS C cannot call."""

    def __init__(self, transforms, x, w, u, tile, bias, res, rep, out, stride, padding, dilation, relu, groups=1):
        (self.c, self.h, self.iw), (self.o, self.oh, self.ow) = x.shape, out.shape
        self.t, self.x, self.out, self.bias, self.res, self.rep, self.relu = transforms, x, out, bias, res, rep, relu
        (_, _, self.kh, self.kw), (self.sh, self.sw), (self.dh, self.dw) = w.shape, stride, dilation
        self.pt, self.pl, self.groups = padding[0], padding[2], groups
        self.points, self.k = self.oh * self.ow, self.c // groups * self.kh * self.kw  # k: a group's patch rows
        self.tile, self.tw = tile, -(-self.ow // tile) if tile else 0
        self.weight = u if tile else np.ascontiguousarray(w.reshape(self.o, self.k))
        self.direct = not tile and self.kh == self.kw == 1 and stride == (1, 1) and not any(padding)
        self.epilogue = bias is not None or res is not None or relu or rep is not None
        self.cols = self.raw = None

    def phases(self, parts: int) -> list:
        """[(kind, [(start, end), ...])]: phases run one after the other, each one's ranges by any thread."""
        if self.tile:  # bands of at least 16 tiles: fewer make the products too thin for BLAS
            rows = -(-self.oh // self.tile)
            bands = split(rows, parts, -(-16 // self.tw))
            if parts > 1 and rows % len(bands) and self.rep is None and self.o >= parts * ROWS:
                return [(WINOGRAD_CHANNELS, split(self.o, parts, ROWS))]  # bands of unequal rows: channels instead
            return [(WINOGRAD, bands)]
        small = self.o * self.points * self.k < SPLIT_FLOPS
        # bands when there are many pixels, few channels or groups (each band's product packs the weights again)
        if small or self.points >= 2 * COLUMNS or self.o < 2 * ROWS or self.groups > 1:
            least = self.oh if small else max(-(-self.oh // parts), -(-COLUMNS // self.ow))
            bands = split(self.oh, parts, least)
            if self.groups > 1 and not small and len(bands) < parts:  # too few rows to share: groups apart instead
                return [(GROUPS, split(self.groups, 4 * parts))]  # small tasks: a busy thread holds back less
            return [(BAND, bands)]
        phases = []
        if not self.direct:  # few pixels, many channels: the whole image's patches, shared by blocks of channels
            self.cols = np.empty((self.k, self.points), np.float32)
            phases.append((PATCHES, split(self.c, parts)))
        blocks = split(self.o, parts, ROWS)
        phases.append((BLOCK, blocks))
        if self.rep is not None:  # a row may read another block's: the raw product apart, then a store phase
            self.raw = np.empty((self.o, self.points), np.float32)
            phases.append((STORE, blocks))
        return phases

    def params(self, sgemm) -> np.ndarray:
        """tasks.c's parameters (pointers as integers); sgemm: (address, ilp64) of cblas_sgemm."""
        values = dict(x=_ptr(self.x), out=_ptr(self.out), weight=_ptr(self.weight), bias=_ptr(self.bias),
                      res=_ptr(self.res), rep=_ptr(self.rep), cols=_ptr(self.cols), raw=_ptr(self.raw),
                      sgemm=sgemm[0], ilp64=int(sgemm[1]), failed=0, relu=int(self.relu),
                      epilogue=int(self.epilogue), direct=int(self.direct))
        values["transb"] = values["act"] = values["parts"] = values["span"] = 0
        return np.array([values[s] if s in values else getattr(self, s) for s in SLOTS], np.int64)

    # the same tasks in Python, for a BLAS that C cannot call: numpy's matmul, the transforms through ctypes
    def winograd(self, ty0, ty1, o0=0, o1=None):
        """Tile rows [ty0, ty1), output channels [o0, o1) (all by default; rep only with all), as tasks.c's."""
        o1 = self.o if o1 is None else o1
        lib, planes, tiles, plane = self.t.lib(), len(self.weight), (ty1 - ty0) * self.tw, self.oh * self.ow * 4
        v, m = self.t.take("v", (planes, self.c, tiles)), self.t.take("m", (planes, o1 - o0, tiles))
        forward, back = ((lib.hwa_winograd_input, lib.hwa_winograd_output) if self.tile == 2 else
                         (lib.hwa_winograd4_input, lib.hwa_winograd4_output))
        forward(_ptr(self.x), v.ctypes.data, self.c, self.h, self.iw, self.pt, self.pl, self.tw, ty0, ty1)
        np.matmul(self.weight[:, o0:o1], v, out=m)
        back(m.ctypes.data, _ptr(self.out) + o0 * plane, _ptr(self.bias) and _ptr(self.bias) + o0 * 4,
             _ptr(self.res) and _ptr(self.res) + o0 * plane, _ptr(self.rep), o1 - o0, self.tw, self.oh, self.ow,
             self.relu, ty0, ty1)

    def winograd_channels(self, o0, o1):
        self.winograd(0, -(-self.oh // self.tile), o0, o1)

    def band(self, y0, y1):
        lib, q0, q1, groups = self.t.lib(), y0 * self.ow, y1 * self.ow, self.groups
        cg, og, rows = self.c // groups, self.o // groups, self.out.reshape(self.o, -1)
        for g in range(groups):
            x = self.x[g * cg:(g + 1) * cg]
            if self.direct:
                patches = x.reshape(cg, -1)[:, q0:q1]
            else:
                patches = self.t.take("cols", (self.k, q1 - q0))
                lib.hwa_im2col(_ptr(x), patches.ctypes.data, cg, self.h, self.iw, self.kh, self.kw, self.sh,
                               self.sw, self.pt, self.pl, self.dh, self.dw, self.ow, y0, y1)
            np.matmul(self.weight[g * og:(g + 1) * og], patches, out=rows[g * og:(g + 1) * og, q0:q1])
        if self.epilogue:
            lib.hwa_epilogue(_ptr(self.out), _ptr(self.bias), _ptr(self.res), _ptr(self.rep), self.points,
                             self.relu, 0, self.o, q0, q1)

    def group(self, g0, g1):
        lib, cg, og = self.t.lib(), self.c // self.groups, self.o // self.groups
        rows = self.out.reshape(self.o, -1)
        for g in range(g0, g1):
            x = self.x[g * cg:(g + 1) * cg]
            if self.direct:
                patches = x.reshape(cg, -1)
            else:
                patches = self.t.take("cols", (self.k, self.points))
                lib.hwa_im2col(_ptr(x), patches.ctypes.data, cg, self.h, self.iw, self.kh, self.kw, self.sh, self.sw,
                               self.pt, self.pl, self.dh, self.dw, self.ow, 0, self.oh)
            np.matmul(self.weight[g * og:(g + 1) * og], patches, out=rows[g * og:(g + 1) * og])
        if self.epilogue:
            lib.hwa_epilogue(_ptr(self.out), _ptr(self.bias), _ptr(self.res), _ptr(self.rep), self.points, self.relu,
                             g0 * og, g1 * og, 0, self.points)

    def patches(self, c0, c1):
        self.t.lib().hwa_im2col(
            _ptr(self.x) + c0 * self.h * self.iw * 4, _ptr(self.cols) + c0 * self.kh * self.kw * self.points * 4,
            c1 - c0, self.h, self.iw, self.kh, self.kw, self.sh, self.sw, self.pt, self.pl, self.dh, self.dw,
            self.ow, 0, self.oh)

    def block(self, a, z):
        source = self.x.reshape(self.c, -1) if self.direct else self.cols
        into = (self.out.reshape(self.o, -1) if self.raw is None else self.raw)[a:z]
        np.matmul(self.weight[a:z], source, out=into)
        if self.raw is None and self.epilogue:
            self.t.lib().hwa_epilogue(_ptr(self.out), _ptr(self.bias), _ptr(self.res), 0, self.points, self.relu,
                                      a, z, 0, self.points)

    def store(self, a, z):
        self.t.lib().hwa_store(_ptr(self.out), _ptr(self.raw), _ptr(self.bias), _ptr(self.res), _ptr(self.rep),
                               self.points, 0, self.points, a, z, self.relu)


class Transforms:
    """The C of one device's conv2d and matmul (crew.c, transforms.c, depthwise.c, tasks.c as one library), compiled on
    first use (None when it cannot be built here), and who runs each phase's tasks: the device's threads (crew.c),
    calling numpy's BLAS from C without the GIL, or, when that BLAS cannot be called from C, the calling thread in
    Python (depthwise.c's tasks, which need no BLAS, in C on the calling thread)."""

    def __init__(self, device, native: bool = True):
        self.device = device
        self.threads = cores()
        self.native = native  # False: the Python form even where the crew could run (tests compare both)
        self._sgemm = self._native_crew = None
        self.cols = self.rows = 0  # igemm.c's register tile (0: not built for this machine)
        self._local = threading.local()  # .scratch: name -> a float32 array the thread keeps for its next task
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        self.lib = CLibrary(device, SOURCES, {
            "hwa_phase": (i64, [ptr, i64, ptr, ptr, i64]), "hwa_crew_new": (ptr, [i64, i64, i64]),
            "hwa_im2col": (None, [ptr] * 2 + [i64] * 14), "hwa_winograd_input": (None, [ptr] * 2 + [i64] * 8),
            "hwa_winograd_output": (None, [ptr] * 5 + [i64] * 7), "hwa_winograd4_input": (None, [ptr] * 2 + [i64] * 8),
            "hwa_winograd4_output": (None, [ptr] * 5 + [i64] * 7), "hwa_epilogue": (None, [ptr] * 4 + [i64] * 6),
            "hwa_store": (None, [ptr] * 5 + [i64] * 6), "hwa_depthwise_layout": (i64, [i64] * 5),
            "hwa_igemm_cols": (i64, []), "hwa_igemm_rows": (i64, [])},
            "conv2d runs in numpy", ready=self._ready)
        # signature -> Transforms._depthwise_plan's, _igemm_plan's: a model has a few dozen signatures
        self._depthwise_plans, self._igemm_plans = BoundedCache(256), BoundedCache(256)

    def _ready(self, lib) -> None:
        """igemm.c's tile, and the crew once numpy's cblas_sgemm has been found and checked through the new library."""
        self.cols, self.rows = lib.hwa_igemm_cols(), lib.hwa_igemm_rows()
        self.call = caller(self.device)
        self.entry = {name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
                      for name in ("hwa_phase", "hwa_crew_call")}
        self._sgemm = self._checked_sgemm(lib)
        if self._sgemm is not None:
            self._native_crew = lib.hwa_crew_new(self.threads - 1, spin_ns(), WAIT_NS)

    def _checked_sgemm(self, lib):
        """numpy's cblas_sgemm for tasks.c, once it gave a small product right through C; None otherwise."""
        found = single_blas.sgemm()
        if found is None:
            log.info("%s: conv2d runs on one thread in Python: numpy's BLAS has no cblas_sgemm C can call", self.device)
            return None
        x, w = np.arange(12, dtype=np.float32).reshape(1, 3, 2, 2), np.arange(-3, 3, dtype=np.float32).reshape(2, 3, 1, 1)
        out = np.zeros((2, 2, 2), np.float32)
        image = Image(self, x[0], w, None, 0, None, None, None, out, (1, 1), (0, 0, 0, 0), (1, 1), False)
        if lib.hwa_phase(None, BAND, image.params(found).ctypes.data, np.array([0, 2], np.int64).ctypes.data, 1) \
                or not np.array_equal(out.reshape(2, 4), w.reshape(2, 3) @ x.reshape(3, 4)):
            log.warning("%s: numpy's cblas_sgemm gave a wrong product through C; conv2d runs on one thread in Python",
                        self.device)
            return None
        return found

    def take(self, name: str, shape) -> np.ndarray:
        """This thread's float32 scratch array `name` of `shape` (kept between calls: fresh megabytes fault in)."""
        size = int(np.prod(shape))
        scratch = self._local.__dict__.setdefault("scratch", {})
        buf = scratch.get(name)
        if buf is None or buf.size < size:
            buf = scratch[name] = np.empty(size, np.float32)
        return buf[:size].reshape(shape)

    def __call__(self, lib, x, w, bias, residual, stride, padding, dilation, activation, groups=1):
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
        if not (stride == (1, 1) and dilation == (1, 1) and groups == 1):
            tile = 0
        native = self.crew()
        with single_blas():
            for i in range(n):  # one image at a time, in phases of independent tasks
                image = Image(self, x[i], w, u, tile, b, None if r is None else r[i], rep, out[i], stride, padding,
                              dilation, ACTIVATIONS.get(activation, 0), groups)
                phases = image.phases(self.threads)
                if native is not None:
                    params = image.params(self._sgemm)
                    for kind, ranges in phases:
                        self.phase(lib, kind, params, ranges, "conv2d")
                    continue
                tasks = {WINOGRAD: image.winograd, WINOGRAD_CHANNELS: image.winograd_channels, BAND: image.band,
                         PATCHES: image.patches, BLOCK: image.block, STORE: image.store, GROUPS: image.group}
                for kind, ranges in phases:
                    for a, z in ranges:
                        tasks[kind](a, z)
        if activation not in ACTIVATIONS:
            out = reference.conv_epilogue(activation)(out)
        return out

    def dots(self, lib, x, w, bias, residual, activation):
        """A 1x1 conv2d over few pixels (_few_pixels) as tasks.c's dot products of each pixel's channels with each
        filter, the bias and activation applied by each band's task; columns shared by the crew."""
        n, c, h, wd = x.shape
        o = w.shape[0]
        if residual is not None:  # the op's own rule names a residual of another shape
            meta.result_meta("conv2d", (x.shape, w.shape, (o,), residual.shape), (x.dtype, w.dtype), {})
        rows = np.ascontiguousarray(x.reshape(n, c, h * wd).transpose(0, 2, 1))  # (n * pixels, c): a few floats
        filters = np.ascontiguousarray(w.reshape(o, c))
        out = np.empty((n * h * wd, o), np.float32)
        b = None if bias is None else np.ascontiguousarray(bias)
        values = dict.fromkeys(SLOTS, 0)
        values.update(x=rows.ctypes.data, weight=filters.ctypes.data, out=out.ctypes.data, c=c, oh=n * h * wd, ow=o,
                      transb=1, epilogue=1, bias=0 if b is None else b.ctypes.data,
                      act=ACTIVATIONS.get(activation, 0) if residual is None else 0)
        params = np.array([values[slot] for slot in SLOTS], np.int64)
        self.phase(lib, DOTS_, params, split(o, 2 * self.threads, COLUMNS), "conv2d")
        out = np.ascontiguousarray(out.reshape(n, h * wd, o).transpose(0, 2, 1)).reshape(n, o, h, wd)
        if residual is not None:  # added before the activation, as the fused op defines
            out += residual
            if activation is not None:
                return reference.conv_epilogue(activation)(out)
        if activation not in ACTIVATIONS:
            out = reference.conv_epilogue(activation)(out)
        return out

    def igemm(self, lib, x, w, bias, residual, stride, padding, dilation, activation, groups=1):
        """An ungrouped or grouped conv2d as igemm.c's implicit product on the crew, image by image: its plan (shapes,
        parameters but the arrays, the tasks' ranges) made once per signature; the weights packed at plan time
        (Packed.a), else now."""
        a = w.a if isinstance(w, Packed) and w.a is not None else None
        weight = w.weight if isinstance(w, Packed) else w
        key = (x.shape, weight.shape, None if residual is None else residual.shape, stride, padding, dilation,
               activation, groups)
        shape, template, _, spans, count = self._igemm_plans.get_or_make(key, lambda: self._igemm_plan(
            x.shape, weight.shape, residual, stride, padding, dilation, activation, groups))
        out = np.empty(shape, np.float32)
        if out.size == 0:
            return out
        if a is None:  # not packed at plan time: now, for this call
            a = igemm_weights(weight, groups, self.rows)
        x = np.ascontiguousarray(x)
        bias = None if bias is None else np.ascontiguousarray(bias)
        residual = None if residual is None else np.ascontiguousarray(residual)
        step_x, step_out = x[0].nbytes, out[0].nbytes  # image after image, in one call
        if self.call(self.entry["hwa_phase"], self._native_crew, IGEMM, template, spans, count, shape[0],
                     _X, x, step_x, _OUT, out, step_out, _RES, residual, step_out, _WEIGHT, a, 0, _BIAS, bias, 0):
            raise MemoryError(f"{self.device}: conv2d could not allocate its scratch")
        return out

    def _igemm_plan(self, x_shape, w_shape, residual, stride, padding, dilation, activation, groups):
        """(output shape, tasks.c's parameters but the arrays, the tasks' ranges of units, their count) for igemm.c:
        units of a run of strips of pixels (one strip, or all of a small image's) and a part of its blocks of
        channels, parts enough for every thread to share when runs are few; one task for little work, where sharing
        costs more than it saves."""
        n, c, h, wd = x_shape
        o, cg, kh, kw = w_shape
        (((_, _, oh, ow), _),) = meta.result_meta(  # the op's own rule; it also refuses a residual of another shape
            "conv2d", (x_shape, w_shape, *(() if residual is None else ((o,), residual.shape))),
            (np.float32, np.float32), {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups})
        strips = -(-oh * ow // self.cols)
        blocks = -(-o // groups // self.rows)
        small = o * oh * ow * cg * kh * kw < SPLIT_FLOPS
        # more output channels than pixels: a unit's strips are every strip, each block of weights read once for all
        # (once per strip, the weights of ResNet's 14x14 and 7x7 layers came from memory again and again), in parts
        # enough for 2 per thread (4 per thread lost: each part gathers the strips' patches again)
        span = min(strips, max(1, SPAN_BYTES // (cg * kh * kw * self.cols * 4))) if o // groups >= oh * ow else 1
        runs = groups * -(-strips // span)
        parts = 1 if small else min(blocks, -(-(4 if span == 1 else 2) * self.threads // runs))
        ranges = [(0, runs)] if small else split(runs * parts, 4 * self.threads)
        values = dict.fromkeys(SLOTS, 0)
        values.update(c=c, h=h, iw=wd, o=o, oh=oh, ow=ow, kh=kh, kw=kw, sh=stride[0], sw=stride[1], pt=padding[0],
                      pl=padding[2], dh=dilation[0], dw=dilation[1], act=ACTIVATIONS[activation], groups=groups,
                      parts=parts, span=span)
        spans = np.array(ranges, np.int64)
        return (n, o, oh, ow), np.array([values[s] for s in SLOTS], np.int64), spans, spans.ctypes.data, len(ranges)

    def igemm_takes(self, w) -> bool:
        """Whether a conv2d of this weight (Packed: as the plan chose) runs as igemm.c's implicit product: where it is
        built and the crew runs."""
        if isinstance(w, Packed):  # the plan chose
            return w.a is not None and self.crew() is not None
        return self.cols > 0 and self.crew() is not None and _igemm(w.shape, 0)

    def depthwise(self, lib, x, w, bias, residual, stride, padding, dilation, activation):
        """A depthwise conv2d (groups == input channels, w of (channels * m, 1, kh, kw)) in C (depthwise.c): the whole
        batch as one phase of bands of output planes, on the crew when there is one, else on the calling thread."""
        key = (x.shape, w.shape, None if residual is None else residual.shape, stride, padding, dilation, activation)
        shape, template, _, spans, count = self._depthwise_plans.get_or_make(key, lambda: self._depthwise_plan(
            lib, x.shape, w.shape, residual, stride, padding, dilation, activation))
        out = np.empty(shape, np.float32)
        if out.size == 0:
            return out
        x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
        bias = None if bias is None else np.ascontiguousarray(bias)
        residual = None if residual is None else np.ascontiguousarray(residual)
        if self.call(self.entry["hwa_phase"], self.crew() or 0, DEPTHWISE, template, spans, count, 1, _X, x, 0,
                     _OUT, out, 0, _WEIGHT, w, 0, _BIAS, bias, 0, _RES, residual, 0):
            raise MemoryError(f"{self.device}: conv2d could not allocate its scratch")
        if activation not in ACTIVATIONS:
            out = reference.conv_epilogue(activation)(out)
        return out

    def _depthwise_plan(self, lib, x_shape, w_shape, residual, stride, padding, dilation, activation):
        """(output shape, tasks.c's parameters but the arrays, the tasks' ranges of output planes, their address, their
        count) for a depthwise conv2d of these shapes."""
        n, c, h, wd = x_shape
        o, _, kh, kw = w_shape
        (((_, _, oh, ow), _),) = meta.result_meta(  # the op's own rule; it also refuses a residual of another shape
            "conv2d", (x_shape, w_shape, *(() if residual is None else ((o,), residual.shape))),
            (np.float32, np.float32), {"stride": stride, "padding": padding, "dilation": dilation})
        planes = n * o
        layout = lib.hwa_depthwise_layout(planes, oh, ow, kh, kw)
        values = dict.fromkeys(SLOTS, 0)
        values.update(c=c, h=h, iw=wd, o=o, oh=oh, ow=ow, kh=kh, kw=kw, sh=stride[0], sw=stride[1], pt=padding[0],
                      pl=padding[2], dh=dilation[0], dw=dilation[1], act=ACTIVATIONS.get(activation, 0), tile=layout)
        # tasks take whole units of planes: the sixteen-plane layout's blocks, else an input plane's outputs (they
        # share its padded copy); one task for little work, where sharing costs more than it saves
        unit = layout or o // c
        units = -(-planes // unit)
        if planes * oh * ow * kh * kw < DEPTHWISE_SPLIT:
            ranges = [(0, planes)]
        elif units >= 2 * self.threads:
            ranges = [(a * unit, min(planes, z * unit)) for a, z in split(units, 4 * self.threads)]
        else:
            ranges = split(planes, 4 * self.threads)
        spans = np.array(ranges, np.int64)
        return (n, o, oh, ow), np.array([values[s] for s in SLOTS], np.int64), spans, spans.ctypes.data, len(ranges)

    @property
    def sgemm(self):
        """(address, ilp64) of the cblas_sgemm tasks.c calls (found and checked once the library loads), or None."""
        return self._sgemm

    def crew(self):
        """The crew (crew.c) when the tasks run in C; None when they run in Python."""
        return self._native_crew if self.native else None

    def phase(self, lib, kind: int, params: np.ndarray, ranges: list, op: str) -> None:
        """The task `kind` of tasks.c for each range, shared by the crew; returns when all are done."""
        spans = np.array(ranges, np.int64)
        if lib.hwa_phase(self._native_crew, kind, params.ctypes.data, spans.ctypes.data, len(ranges)):
            raise MemoryError(f"{self.device}: {op} could not allocate its scratch")


def _lowered_products(transforms, runner, x_shape, weight, bias, res, stride, padding, dilation, activation, groups):
    """A conv2d the Transforms run as Winograd or BLAS products, image by image, as segment records, one per phase
    (the patches and raw product phases share: scratch of the segment's arena); None for several images in several
    phases."""
    n, c, h, wd = x_shape
    u, rep, tile = (weight.u, weight.rep, weight.tile) if isinstance(weight, Packed) else (None, None, 0)
    w = weight.weight if isinstance(weight, Packed) else np.ascontiguousarray(weight)
    o, _, kh, kw = w.shape
    (((_, _, oh, ow), _),) = meta.result_meta("conv2d", (x_shape, w.shape), (np.float32, np.float32),
                                             {"stride": stride, "padding": padding, "dilation": dilation})
    if not (stride == (1, 1) and dilation == (1, 1) and groups == 1):
        tile = 0
    # placeholders with the shapes (never touched): the image's parameters but its arrays, and its phases
    x, out = np.empty((c, h, wd), np.float32), np.empty((o, oh, ow), np.float32)
    image = Image(transforms, x, w, u, tile, None, None, rep, out, stride, padding, dilation,
                  ACTIVATIONS[activation], groups)
    phases = image.phases(transforms.threads)
    scratch = {name: getattr(image, name).nbytes for name in ("cols", "raw") if getattr(image, name) is not None}
    if len(phases) > 1 and n > 1:  # phases share the image's scratch: one image at a time, as the kernel runs them
        return None
    template = image.params(transforms.sgemm)
    template[_BIAS] = template[_RES] = 0
    template[SLOTS.index("epilogue")] = int(bias is not None or res is not None or bool(ACTIVATIONS[activation]) or
                                            rep is not None)
    step_x, step_out = c * h * wd * 4, o * oh * ow * 4
    patches = [(_X, ("in", 0), step_x), (_OUT, ("out", 0), step_out), (_RES, res, step_out),
               (_WEIGHT, ("const", image.weight), 0), (_BIAS, bias, 0),
               (SLOTS.index("rep"), None if rep is None else ("const", rep), 0)]
    patches += [(SLOTS.index(name), ("scratch", name), 0) for name in scratch]
    records, keep = [], []
    for kind, ranges in phases:
        spans = np.array(ranges, np.int64)
        keep.append(spans)
        records.append(Record(transforms.entry["hwa_phase"], transforms.crew(), kind, template, spans.ctypes.data,
                              len(spans), n, patches, blas=True))
    return runner.lowered(records, keep=keep, scratch=scratch)


class _Shaped:
    """A residual's shape where a plan asks for the array's."""
    __slots__ = ("shape",)

    def __init__(self, shape):
        self.shape = tuple(shape)


#: Below this many multiply-adds per output element (in_channels * kh * kw), with several images, one product over the
#: whole batch beats the per-image tasks, whose set-up outweighs so little work per pixel (a first conv layer).
FEW = 32


def _few_channels(x, w, bias, residual, stride, padding, dilation, activation):
    """conv2d as one im2col over the whole batch and one BLAS product (groups=1), then bias, residual (of the
    result's shape), activation."""
    n, c, _, _ = x.shape
    o, _, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pb, pl, pr) = stride, dilation, padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr))) if any(padding) else x
    win = np.lib.stride_tricks.sliding_window_view(xp, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(2, 3))
    win = win[:, :, ::sh, ::sw, ::dh, ::dw]  # (n, c, oh, ow, kh, kw)
    oh, ow = win.shape[2], win.shape[3]
    out = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw) @ w.reshape(o, c * kh * kw).T
    if bias is not None:
        out += bias
    out = out.reshape(n, oh, ow, o).transpose(0, 3, 1, 2)
    if residual is not None:
        out = out + residual
    out = np.ascontiguousarray(out)
    if activation == "relu":
        np.maximum(out, 0, out=out)
    elif activation is not None:
        out = reference.conv_epilogue(activation)(out)
    return out


#: At most this many output pixels over the batch, a 1x1 convolution is a product with few rows: tasks.c's dot
#: products, which read the weights once at memory speed (a classifier written as a 1x1 conv over a pooled image)
DOT_PIXELS = 4


def _few_pixels(x_shape, w_shape, stride, padding, groups) -> bool:
    """A 1x1 convolution (no padding, groups=1) over at most DOT_PIXELS pixels in all."""
    n, _, h, w = x_shape
    return groups == 1 and w_shape[2:] == (1, 1) and not any(padding) and tuple(stride) == (1, 1) and \
        n * h * w <= DOT_PIXELS


def conv_kernel(device, native: bool = True, transforms=None):
    """conv2d for `device`: float32 convolutions through its Transforms (`transforms`, else new ones), the rest through
    the reference kernel. native=False: the tasks run in Python even where the crew could run them."""
    transforms = transforms if transforms is not None else Transforms(device, native)

    def conv2d_kernel(x, w, bias=None, residual=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                      groups=1, activation=None):
        weight = w.weight if isinstance(w, Packed) else w
        # channels that do not fit the groups: the reference kernel names the mismatch
        fits = x.ndim == weight.ndim == 4 and x.shape[1] == weight.shape[1] * groups and weight.shape[0] % groups == 0
        if x.dtype == weight.dtype == np.float32 and fits and x.size and weight.size and all(
                a is None or a.dtype == np.float32 for a in (bias, residual)):
            if groups == 1 and residual is None and x.shape[0] > 1 and \
                    weight.shape[1] * weight.shape[2] * weight.shape[3] <= FEW:
                return _few_channels(x, weight, bias, None, tuple(stride), tuple(padding), tuple(dilation),
                                     activation)
            lib = transforms.lib()
            if lib is not None and _few_pixels(x.shape, weight.shape, stride, padding, groups):
                return transforms.dots(lib, x, weight, bias, residual, activation)
            if lib is not None and weight.shape[1] == 1 and groups == x.shape[1]:
                return transforms.depthwise(lib, x, weight, bias, residual, tuple(stride), tuple(padding),
                                            tuple(dilation), activation)
            if lib is not None and transforms.igemm_takes(w):
                return transforms.igemm(lib, x, w, bias, residual, tuple(stride), tuple(padding), tuple(dilation),
                                        activation, groups)
            if lib is not None:
                return transforms(lib, x, w, bias, residual, tuple(stride), tuple(padding), tuple(dilation),
                                  activation, groups)
        return reference.conv2d(x, weight, bias, residual, stride, padding, dilation, groups, activation)

    def pack(weight, shapes, stride=(1, 1), dilation=(1, 1), groups=1, **_):
        """The weight prepared for the products this kernel will run on inputs of `shapes`, or None (nothing to do):
        Winograd's transform, else igemm.c's packing (not for depthwise convolutions, which read it as it is)."""
        if weight.dtype != np.float32 or weight.ndim != 4 or len(shapes[0]) != 4 or \
                (groups > 1 and weight.shape[1] == 1):
            return None
        tile = _winograd(weight.shape, shapes[0], stride, dilation, groups) if groups == 1 else 0
        if transforms.lib() is not None and transforms.cols and _igemm(weight.shape, tile, shapes[0]):
            return Packed(weight, 0, igemm_weights(weight, groups, transforms.rows))
        if groups != 1:
            return None
        packed = Packed(weight, tile)
        return packed if packed.u is not None or packed.rep is not None else None

    def lower(ins, outs, attrs, consts):
        """conv2d's step as segment records (segments.py): the implicit product, depthwise and few-pixel routes, with
        a constant (prepacked) weight where the route needs one; None for the others."""
        runner = runner_of(transforms.device)
        if runner is None or not runner.ready() or transforms.lib() is None or transforms.crew() is None or \
                any(d != np.float32 for _, d in ins) or len(ins[0][0]) != 4 or len(ins[1][0]) != 4:
            return None
        (x_shape, _), (w_shape, _) = ins[0], ins[1]
        stride, padding = tuple(attrs.get("stride", (1, 1))), tuple(attrs.get("padding", (0, 0, 0, 0)))
        dilation, groups = tuple(attrs.get("dilation", (1, 1))), attrs.get("groups", 1)
        activation, residual = attrs.get("activation"), (ins[3][0] if len(ins) > 3 else None)
        n, c = x_shape[:2]
        if activation not in ACTIVATIONS or c != w_shape[1] * groups or w_shape[0] % groups or not n or \
                (groups == 1 and residual is None and n > 1 and w_shape[1] * w_shape[2] * w_shape[3] <= FEW):
            return None
        weight = consts.get(1)
        bias = ("const", np.ascontiguousarray(consts[2])) if 2 in consts else ("in", 2) if len(ins) > 2 else None
        res = ("in", 3) if residual is not None else None
        if _few_pixels(x_shape, w_shape, stride, padding, groups):  # the kernel's dot products, one pixel each
            if x_shape[2] * x_shape[3] != 1 or res is not None:
                return None
            o = w_shape[0]
            values = dict.fromkeys(SLOTS, 0)
            values.update(c=c, oh=n, ow=o, transb=1, epilogue=1, act=ACTIVATIONS[activation])
            spans = np.array(split(o, 2 * transforms.threads, COLUMNS), np.int64)
            w = weight.weight if isinstance(weight, Packed) else weight  # packed for another route: the weight
            filters = ("in", 1) if w is None else ("const", np.ascontiguousarray(w.reshape(o, c)))
            template = np.array([values[slot] for slot in SLOTS], np.int64)
            return runner.lowered([Record(transforms.entry["hwa_phase"], transforms.crew(), DOTS_, template,
                                          spans.ctypes.data, len(spans), 1,
                                          [(_X, ("in", 0), 0), (_OUT, ("out", 0), 0), (_WEIGHT, filters, 0),
                                           (_BIAS, bias, 0)])], keep=(spans,))
        lib = transforms.lib()
        if w_shape[1] == 1 and groups == c:  # depthwise: the weight as it is, constant or not
            w = ("const", np.ascontiguousarray(weight)) if isinstance(weight, np.ndarray) else \
                ("in", 1) if weight is None else None
            if w is None:
                return None
            key = (x_shape, w_shape, residual, stride, padding, dilation, activation)
            shape, template, spans, address, count = transforms._depthwise_plans.get_or_make(key, lambda: (
                transforms._depthwise_plan(lib, x_shape, w_shape, residual and _Shaped(residual), stride, padding,
                                           dilation, activation)))
            return runner.lowered([Record(transforms.entry["hwa_phase"], transforms.crew(), DEPTHWISE, template,
                                          address, count, 1,
                                          [(_X, ("in", 0), 0), (_OUT, ("out", 0), 0), (_WEIGHT, w, 0),
                                           (_BIAS, bias, 0), (_RES, res, 0)])], keep=(spans,))
        if not isinstance(weight, (Packed, np.ndarray)):
            return None
        if not (isinstance(weight, Packed) and weight.a is not None):  # Winograd or BLAS products: one phase only
            return _lowered_products(transforms, runner, x_shape, weight, bias, res, stride, padding, dilation,
                                     activation, groups)
        key = (x_shape, w_shape, residual, stride, padding, dilation, activation, groups)
        shape, template, spans, address, count = transforms._igemm_plans.get_or_make(key, lambda: (
            transforms._igemm_plan(x_shape, w_shape, residual and _Shaped(residual), stride, padding, dilation,
                                   activation, groups)))
        step_x, step_out = int(np.prod(x_shape[1:])) * 4, int(np.prod(shape[1:])) * 4
        return runner.lowered([Record(transforms.entry["hwa_phase"], transforms.crew(), IGEMM, template, address,
                                      count, n, [(_X, ("in", 0), step_x), (_OUT, ("out", 0), step_out),
                                                 (_RES, res, step_out), (_WEIGHT, ("const", weight.a), 0),
                                                 (_BIAS, bias, 0)])], keep=(spans,))

    conv2d_kernel.lower = lower
    conv2d_kernel.__name__ = conv2d_kernel.__qualname__ = "conv2d"
    conv2d_kernel.epilogues = reference.CONV_ACTIVATIONS
    conv2d_kernel.residual = True  # takes a fused residual input (graph fusion asks before emitting one)
    conv2d_kernel.prepack = {1: pack}  # input 1, the weight, when it is a plan constant
    conv2d_kernel.transforms = transforms  # the library and crew that matmul.py shares
    return conv2d_kernel
