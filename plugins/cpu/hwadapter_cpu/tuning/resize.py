"""float32 linear and cubic resize of the last two axes as two products with interpolation matrices: each matrix is
the reference kernel's own resize of an identity (so every coordinate mode, antialias and exclude_outside weigh as
the reference's do), made once per shape and run by the tuned matmul on the device's crew. Inputs with nan or inf go
to the reference: a product weighs every sample, and 0 x inf is nan where the reference never reads the sample."""
from __future__ import annotations

import numpy as np

from hwadapter.plugin import BoundedCache, reference

_matrices = BoundedCache(64)


def _matrix(in_len: int, out_len: int, scale: float, attrs: tuple) -> np.ndarray:
    """(out_len, in_len) float32: row i weighs the input samples output position i blends."""
    def make():
        mode, coord, a, exclude, antialias = attrs
        eye = np.eye(in_len)
        w = reference.resize(eye, (out_len, in_len), (scale, 1.0), mode=mode, coordinate_transformation_mode=coord,
                             cubic_coeff_a=a, exclude_outside=exclude, antialias=antialias)
        return np.ascontiguousarray(w, np.float32)
    return _matrices.get_or_make((in_len, out_len, scale, attrs), make)


def resize_kernel(matmul):
    """ONNX Resize for `matmul`'s device (the tuned float32 matmul): linear and cubic over the last two axes of float32
    as products, the rest as the reference kernel runs it."""
    def resize(x, sizes, scales, mode="nearest", coordinate_transformation_mode="half_pixel",
               nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75, exclude_outside=False, extrapolation_value=0.0,
               roi=None, antialias=False):
        kept = x.ndim >= 2 and tuple(int(s) for s in sizes[:-2]) == x.shape[:-2] and \
            all(np.isclose(s, 1.0) for s in scales[:-2])
        if not (x.dtype == np.float32 and mode in ("linear", "cubic") and kept and x.size and all(sizes)
                and coordinate_transformation_mode != "tf_crop_and_resize" and np.isfinite(x).all()):
            return reference.KERNELS["resize"](x, sizes, scales, mode, coordinate_transformation_mode, nearest_mode,
                                               cubic_coeff_a, exclude_outside, extrapolation_value, roi, antialias)
        attrs = (mode, coordinate_transformation_mode, float(cubic_coeff_a), bool(exclude_outside), bool(antialias))
        (h, w), (oh, ow) = x.shape[-2:], (int(sizes[-2]), int(sizes[-1]))
        wh = _matrix(h, oh, float(scales[-2]), attrs)
        ww = _matrix(w, ow, float(scales[-1]), attrs)
        rows = matmul(np.ascontiguousarray(x).reshape(-1, w), ww, transpose_y=True)  # every row across: (B*h, ow)
        return matmul(wh, rows.reshape(-1, h, ow)).reshape(*x.shape[:-2], oh, ow)  # then down each column
    resize.__name__ = resize.__qualname__ = "resize"
    return resize
