"""A user's function with its control flow converted (transform.py), compiled from its own source with its own file
name and line numbers, its globals and its closure's cells (shared: a later trace sees them changed); cached per
function. Functions of
hwadapter, of installed packages and of the standard library, lambdas, generators, functions without source and
those marked with `not_to_static` are used as they are."""
from __future__ import annotations

import ast
import inspect
import logging
import os
import sys
import sysconfig
import textwrap
import types
import weakref

from . import runtime, transform

log = logging.getLogger("hwadapter")
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../hwadapter
_SKIP_DIRS = tuple({os.path.abspath(p) + os.sep for p in (
    sysconfig.get_paths().get("stdlib", ""), sysconfig.get_paths().get("purelib", ""),
    sysconfig.get_paths().get("platlib", ""), _PACKAGE) if p})
_cache: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
FLAG = "__hwadapter_not_to_static__"


def not_to_static(fn):
    """Decorator: `fn` runs as written inside to_static functions (its control flow is not converted)."""
    try:
        setattr(fn, FLAG, True)
    except AttributeError:  # a builtin: never converted anyway
        pass
    return fn


def convertible(fn) -> bool:
    """Whether `fn` is a Python function of the user's that to_static converts."""
    if not isinstance(fn, types.FunctionType) or getattr(fn, FLAG, False) or fn.__name__ == "<lambda>":
        return False
    code = fn.__code__
    if code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        return False
    path = os.path.abspath(code.co_filename)
    return not path.startswith(_SKIP_DIRS) and not code.co_filename.startswith("<")


def converted(fn):
    """`fn` with its control flow converted, or `fn` itself when it is not converted (see the module docstring)."""
    if not convertible(fn):
        return fn
    hit = _cache.get(fn)
    if hit is None:
        try:
            hit = _convert(fn)
        except (OSError, TypeError, ValueError, SyntaxError) as err:  # no source, one we cannot parse or bind
            log.debug("to_static: %s runs unconverted: %s", fn.__qualname__, err)
            hit = fn
        _cache[fn] = hit
    return hit


def _convert(fn):
    lines, first = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) != 1 or defs[0].name != fn.__name__:
        raise TypeError("its source is not one function definition")
    ast.increment_lineno(tree, first - 1)
    filename = fn.__code__.co_filename
    fn_def = transform.transform(defs[0], filename)
    free = list(fn.__code__.co_freevars)
    if "__class__" not in free and _uses_super(fn_def):
        free.append("__class__")
    if "_jst" in free or "_jst" in fn.__code__.co_names or "_jst" in fn.__code__.co_varnames:
        raise TypeError("it names `_jst`, the name converted code gives its helpers")
    free.append("_jst")
    factory = ast.FunctionDef(name="__hw_factory", args=ast.arguments(
        posonlyargs=[], args=[ast.arg(arg=n) for n in free], vararg=None, kwonlyargs=[], kw_defaults=[],
        kwarg=None, defaults=[]), body=[fn_def, ast.Return(value=ast.Name(id=fn_def.name, ctx=ast.Load()))],
        decorator_list=[], returns=None, type_params=[])
    module = ast.Module(body=[factory], type_ignores=[])
    ast.fix_missing_locations(module)
    code = compile(module, filename, "exec")  # our own transformation of the user's own source
    factory_code = next(c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == "__hw_factory")
    inner = next(c for c in factory_code.co_consts if isinstance(c, types.CodeType) and c.co_name == fn_def.name)
    # the function shares the original's closure cells: a closure variable changed later is seen by a later trace
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
    closure = tuple(cells[n] if n in cells else types.CellType(HELPERS if n == "_jst" else _owner(fn))
                    for n in inner.co_freevars)
    new = types.FunctionType(inner, fn.__globals__, fn.__name__, fn.__defaults__, closure)
    new.__kwdefaults__, new.__qualname__ = fn.__kwdefaults__, fn.__qualname__
    return new


def call(fn):
    """`fn` as converted code calls it (`_jst.call(fn)(...)`): converted when it is a user's Python function, a
    method of one, or a layer whose forward is one (not opted out)."""
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        conv = converted(fn.__func__)
        return fn if conv is fn.__func__ else types.MethodType(conv, fn.__self__)
    if isinstance(fn, types.FunctionType):
        return converted(fn)
    from ..nn.layer import Layer  # lazy: converted code may never call a layer, and nn is heavy to import
    if isinstance(fn, Layer) and type(fn).__call__ is Layer.__call__:  # its __call__ is forward: convert that
        forward = getattr(type(fn), "forward", None)
        if isinstance(forward, types.FunctionType) and "forward" not in vars(fn):
            conv = converted(forward)
            return fn if conv is forward else types.MethodType(conv, fn)
    return fn


#: what converted code names `_jst`: the runtime's helpers and `call`
HELPERS = types.SimpleNamespace(**{k: getattr(runtime, k) for k in runtime.HELPERS}, call=call)


def _uses_super(fn_def) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "__class__" for n in ast.walk(fn_def))


def _owner(fn):
    """The class a method is defined in (what a zero-argument super() needs), from its qualified name."""
    parts = fn.__qualname__.split(".")
    obj = sys.modules.get(fn.__module__)
    for p in parts[:-1]:
        obj = getattr(obj, p, None)
    if not isinstance(obj, type):
        raise TypeError("super() in a method whose class cannot be found")
    return obj
