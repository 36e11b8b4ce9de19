"""Linear algebra: matmul."""
from __future__ import annotations

from ..dispatch.dispatcher import dispatch
from ..api import shapes
from ._common import _NUMERIC, _check, _promote, _tensor, check_size


def matmul(x, y, transpose_x=False, transpose_y=False):
    """Matrix product with numpy's batching, broadcasting and 1-D rules."""
    transpose_x, transpose_y = shapes.flag("matmul", "transpose_x", transpose_x), \
        shapes.flag("matmul", "transpose_y", transpose_y)
    x, y = _promote("matmul", _tensor("matmul", x), _tensor("matmul", y))
    _check("matmul", x, _NUMERIC, "numeric (non-bool)")
    check_size("matmul", shapes.matmul(x.shape, y.shape, transpose_x, transpose_y), x._dtype, x._device)
    if not (transpose_x or transpose_y):
        return dispatch("matmul", (x, y))
    return dispatch("matmul", (x, y), {"transpose_x": transpose_x, "transpose_y": transpose_y})
