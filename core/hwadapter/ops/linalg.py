"""Linear algebra: matmul."""
from __future__ import annotations

from ..dispatch.dispatcher import dispatch
from . import shapes
from ._common import _NUMERIC, _check, _promote, _tensor


def matmul(x, y, transpose_x=False, transpose_y=False):
    """Matrix product with numpy's batching, broadcasting and 1-D rules."""
    x, y = _promote("matmul", _tensor("matmul", x), _tensor("matmul", y))
    _check("matmul", x, _NUMERIC, "numeric (non-bool)")
    shapes.matmul(x.shape, y.shape, transpose_x, transpose_y)  # validates, naming the op
    if not (transpose_x or transpose_y):
        return dispatch("matmul", (x, y))
    return dispatch("matmul", (x, y), {"transpose_x": bool(transpose_x), "transpose_y": bool(transpose_y)})
