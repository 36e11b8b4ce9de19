"""max_pool2d for the CPU: the maximum of kh*kw strided views, one elementwise pass each.

The reference kernel reduces a (N, C, OH, OW, kh, kw) window view over its last two axes, which numpy walks with
a stride per element: 60 ms for ResNet-50's first pool, against 2 ms for nine `np.maximum` passes over whole planes.
"""
from __future__ import annotations

import numpy as np

from hwadapter.plugin import shapes


def max_pool2d(x, kernel_size=(2, 2), stride=(2, 2), padding=(0, 0, 0, 0), ceil_mode=False):
    """The reference max_pool2d's semantics: padding never wins (it is the dtype's lowest value)."""
    (kh, kw), (sh, sw) = kernel_size, stride
    pt, pb, pl, pr = padding
    n, c, h, w = x.shape
    oh, ow = shapes.pool_out(h, kh, sh, pt, pb, ceil_mode), shapes.pool_out(w, kw, sw, pl, pr, ceil_mode)
    low = -np.inf if x.dtype.kind == "f" else (False if x.dtype == np.bool_ else np.iinfo(x.dtype).min)
    need_h, need_w = (oh - 1) * sh + kh, (ow - 1) * sw + kw  # rows and columns the windows span, padding included
    xp = np.full((n, c, max(need_h, pt + h), max(need_w, pl + w)), low, x.dtype)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    out = None
    for i in range(kh):
        for j in range(kw):
            view = xp[:, :, i:i + (oh - 1) * sh + 1:sh, j:j + (ow - 1) * sw + 1:sw]
            out = view.copy() if out is None else np.maximum(out, view, out=out)
    return out
