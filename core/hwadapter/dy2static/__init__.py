"""to_static's conversion of Python control flow on tensors (paddle's dy2static): `converted(fn)` is `fn` with its
`if`, `while` and `for ... in range` statements deciding at run time between Python and graph control flow."""
from __future__ import annotations

from .convert import converted, convertible, not_to_static

__all__ = ["converted", "convertible", "not_to_static"]
