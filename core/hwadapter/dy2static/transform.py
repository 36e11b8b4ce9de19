"""The source transformation behind to_static's control flow: a function's `if`, `while` and `for ... in range(...)`
statements become calls of runtime.py (`_jst.ifelse`, `_jst.while_`) over functions holding their bodies, so that a
condition on a traced tensor becomes a cond or while_loop node and one on Python values stays Python. `return`,
`break` and `continue` inside them become flags first; `and`, `or` and `not` in conditions become `_jst.and_`, `or_`,
`not_`; calls go through `_jst.call`, which converts the user's functions they reach. Line numbers are kept, so
errors and tracebacks name the user's own file and line."""
from __future__ import annotations

import ast
import itertools

RET_FLAG, RET_VAL = "__hw_ret_flag", "__hw_ret_val"
_BUILTINS = frozenset({"range", "len", "isinstance", "print", "super", "type", "int", "float", "bool", "str", "list",
                       "tuple", "dict", "set", "min", "max", "abs", "sum", "zip", "enumerate", "getattr", "setattr",
                       "hasattr", "locals", "iter", "next", "repr", "sorted", "reversed", "any", "all", "map"})


def _name(id_: str, ctx=None) -> ast.Name:
    return ast.Name(id=id_, ctx=ctx or ast.Load())


def _jst(attr: str) -> ast.Attribute:
    return ast.Attribute(value=_name("_jst"), attr=attr, ctx=ast.Load())


def _call(fn, *args) -> ast.Call:
    return ast.Call(func=fn, args=list(args), keywords=[])


def _const(v) -> ast.Constant:
    return ast.Constant(value=v)


def _tuple(elts, store: bool = False) -> ast.Tuple:
    return ast.Tuple(elts=list(elts), ctx=ast.Store() if store else ast.Load())


def _assign(names, value) -> ast.Assign:
    return ast.Assign(targets=[_tuple([_name(n, ast.Store()) for n in names], store=True)], value=value)


def _set(name: str, value) -> ast.Assign:
    return ast.Assign(targets=[_name(name, ast.Store())], value=value)


def assigned(stmts) -> list:
    """Names the statements bind (in order of first binding), not looking into nested functions, classes,
    lambdas or comprehensions (their names are their own), but counting the names of functions they define."""
    out: dict = {}

    class Finder(ast.NodeVisitor):
        def visit_Name(self, node):
            if isinstance(node.ctx, (ast.Store, ast.Del)):
                out.setdefault(node.id, None)

        def visit_FunctionDef(self, node):
            out.setdefault(node.name, None)

        visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

        def visit_Lambda(self, node):
            pass

        visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_Lambda

        def visit_Import(self, node):
            for a in node.names:
                out.setdefault((a.asname or a.name).split(".")[0], None)

        visit_ImportFrom = visit_Import

    for s in stmts:
        Finder().visit(s)
    return [n for n in out if not n.startswith(_GENERATED)]


#: the functions the conversion defines: never variables of the statements around them
_GENERATED = ("__hw_true_", "__hw_false_", "__hw_cond_", "__hw_body_")


def _contains(stmts, kinds, stop=(ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) -> bool:
    """Whether any statement holds a node of `kinds` outside nested scopes (and, for break/continue, loops)."""
    for s in stmts:
        if isinstance(s, stop):  # a nested scope (or loop) statement: what is inside it is its own
            continue
        for node in _walk(s, stop):
            if isinstance(node, kinds):
                return True
    return False


def _walk(node, stop):
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, stop):
            yield from _walk(child, stop)


def _guarded(stmts: list, flags: tuple) -> list:
    """`stmts` with everything after a statement that may set one of `flags` under `if not (flag or ...):`."""
    out = []
    for k, s in enumerate(stmts):
        out.append(s)
        if k + 1 < len(stmts) and any(_sets(s, f) for f in flags):
            test = _name(flags[0]) if len(flags) == 1 else ast.BoolOp(op=ast.Or(), values=[_name(f) for f in flags])
            guard = ast.If(test=ast.UnaryOp(op=ast.Not(), operand=test), body=_guarded(stmts[k + 1:], flags),
                           orelse=[])
            out.append(ast.copy_location(guard, stmts[k + 1]))
            break
    return out


class _Returns(ast.NodeTransformer):
    """`return x` inside control flow -> RET_VAL = x; RET_FLAG = True (and leaving the loop it is in); statements
    after one that may return run only while RET_FLAG is false; the function ends with `return RET_VAL`."""

    def __init__(self):
        self.loops = 0

    def run(self, fn: ast.FunctionDef) -> None:
        fn.body = self.block(fn.body)
        head = [_set(RET_FLAG, _const(False)), _set(RET_VAL, _const(None))]
        fn.body = [ast.copy_location(h, fn.body[0]) for h in head] + fn.body + [
            ast.copy_location(ast.Return(value=_name(RET_VAL)), fn.body[-1])]

    def block(self, stmts: list) -> list:
        stmts = [self.visit(s) for s in stmts]
        flat = []
        for s in stmts:
            flat.extend(s if isinstance(s, list) else [s])
        return _guarded(flat, (RET_FLAG,))  # its returns are flags now

    def visit_Return(self, node):
        out = [_set(RET_VAL, node.value or _const(None)), _set(RET_FLAG, _const(True))]
        if self.loops:
            out.append(ast.Break())
        return [ast.copy_location(s, node) for s in out]

    def _loop(self, node):
        self.loops += 1
        node.body = self.block(node.body)
        self.loops -= 1
        if any(_sets(s, RET_FLAG) and isinstance(s, (ast.While, ast.For)) for s in node.body):
            # an inner loop returned: this one stops too, at its next iteration (the rest of this one is guarded)
            stop = ast.If(test=_name(RET_FLAG), body=[ast.Break()], orelse=[])
            node.body = [ast.copy_location(stop, node.body[0])] + node.body
        node.orelse = self.block(node.orelse) if node.orelse else []
        return node

    def visit_While(self, node):
        return self._loop(node)

    def visit_For(self, node):
        return self._loop(node)

    def visit_If(self, node):
        node.body = self.block(node.body)
        node.orelse = self.block(node.orelse) if node.orelse else []
        return node

    def visit_With(self, node):
        node.body = self.block(node.body)
        return node

    def visit_Try(self, node):
        node.body, node.orelse, node.finalbody = self.block(node.body), self.block(node.orelse), \
            self.block(node.finalbody)
        for handler in node.handlers:
            handler.body = self.block(handler.body)
        return node

    def visit_FunctionDef(self, node):
        return node  # its returns are its own

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef


def _sets(stmt, flag: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == flag and isinstance(n.ctx, ast.Store)
               for n in _walk(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)))


_LOOPS = (ast.While, ast.For, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


class Transformer(ast.NodeTransformer):
    """The statements and expressions of one function, rewritten inner first (see the module's docstring)."""

    def __init__(self, filename: str, declared: set, first_arg: str | None):
        self.filename, self.declared, self.first_arg = filename, declared, first_arg  # first_arg: what super() gets
        self.count = itertools.count()

    def line(self, node) -> str:
        return f"{self.filename}:{getattr(node, 'lineno', 0)}"

    # --- expressions ---------------------------------------------------------------------------------------------
    def test(self, expr):
        """A condition: and / or / not as runtime calls that take traced tensors."""
        if isinstance(expr, ast.BoolOp):
            thunks = [ast.Lambda(args=_no_args(), body=self.test(v)) for v in expr.values]
            return _call(_jst("and_" if isinstance(expr.op, ast.And) else "or_"), *thunks)
        if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
            return _call(_jst("not_"), self.test(expr.operand))
        return expr

    def visit_Call(self, node):
        self.generic_visit(node)
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id in _BUILTINS | {"_jst"}:
            if fn.id == "super" and not node.args:  # super() needs the class cell a converted function lacks
                node.args = [_name("__class__"), _name(self.first_arg)] if self.first_arg else []
            return node
        if isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Name) and fn.value.id == "_jst":
            return node
        if isinstance(fn, (ast.Name, ast.Attribute)):
            node.func = ast.copy_location(_call(_jst("call"), fn), fn)
        return node

    def visit_IfExp(self, node):
        self.generic_visit(node)
        thunks = [ast.Lambda(args=_no_args(), body=v) for v in (node.body, node.orelse)]
        return ast.copy_location(_call(_jst("ifexp"), self.test(node.test), *thunks, _const(self.line(node))), node)

    # --- statements ----------------------------------------------------------------------------------------------
    def visit_FunctionDef(self, node):
        return node  # nested functions are converted when called (_jst.call), not here

    visit_AsyncFunctionDef = visit_ClassDef = visit_FunctionDef

    def _function(self, name: str, params: list, body: list, ret) -> ast.FunctionDef:
        args = ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params], vararg=None, kwonlyargs=[],
                             kw_defaults=[], kwarg=None, defaults=[])
        return ast.FunctionDef(name=name, args=args, body=list(body) + [ast.Return(value=ret)], decorator_list=[],
                               returns=None, type_params=[])

    def _loads(self, names: list) -> ast.Tuple:
        return _tuple([_call(_jst("load"), _call(_name("locals")), _const(n)) for n in names])

    def visit_If(self, node):
        self.generic_visit(node)
        if _contains(node.body + node.orelse, ast.Return):  # a branch function would return from itself
            raise SyntaxError(f"{self.line(node)}: a return here is not one to_static can convert")
        names = [n for n in assigned(node.body + node.orelse) if n not in self.declared]
        if any(n in self.declared for n in assigned(node.body + node.orelse)):
            return node  # global / nonlocal names: left to Python
        k = next(self.count)
        ret = _tuple([_name(n) for n in names])
        t = self._function(f"__hw_true_{k}", names, node.body, ret)
        f = self._function(f"__hw_false_{k}", names, node.orelse or [ast.Pass()], ret)
        call = _call(_jst("ifelse"), self.test(node.test), _name(t.name), _name(f.name), self._loads(names),
                     _tuple([_const(n) for n in names]), _const(self.line(node)))
        last = _assign(names, call) if names else ast.Expr(value=call)
        return [ast.copy_location(s, node) for s in (t, f, last)]

    def visit_While(self, node):
        node = self._breaks(node)
        if not isinstance(node, ast.While):
            return node
        self.generic_visit(node)
        if _contains(node.body, ast.Return):  # a body function would return from itself
            raise SyntaxError(f"{self.line(node)}: a return here is not one to_static can convert")
        if node.orelse or any(n in self.declared for n in assigned(node.body)):
            return node
        names = assigned(node.body)
        k = next(self.count)
        test = self._function(f"__hw_cond_{k}", names, [], self.test(node.test))
        body = self._function(f"__hw_body_{k}", names, node.body, _tuple([_name(n) for n in names]))
        call = _call(_jst("while_"), _name(test.name), _name(body.name), self._loads(names),
                     _tuple([_const(n) for n in names]), _const(self.line(node)))
        last = _assign(names, call) if names else ast.Expr(value=call)
        return [ast.copy_location(s, node) for s in (test, body, last)]

    def visit_For(self, node):
        """`for i in range(...)` as a while loop over a hidden counter (so a traced bound makes a while_loop, and `i`
        keeps Python's last value); any other for stays Python's."""
        rng = node.iter
        if not (isinstance(rng, ast.Call) and isinstance(rng.func, ast.Name) and rng.func.id == "range" and
                1 <= len(rng.args) <= 3 and not rng.keywords and not node.orelse and isinstance(node.target, ast.Name)):
            self.generic_visit(node)
            return node
        k = next(self.count)
        counter, stop, step = f"__hw_i_{k}", f"__hw_stop_{k}", f"__hw_step_{k}"
        args = rng.args
        start = args[0] if len(args) >= 2 else _const(0)
        end = args[1] if len(args) >= 2 else args[0]
        by = args[2] if len(args) == 3 else _const(1)
        head = [_set(counter, start), _set(stop, end), _set(step, by)]
        test = _call(_jst("in_range"), _name(counter), _name(stop), _name(step))
        bump = _set(counter, ast.BinOp(left=_name(counter), op=ast.Add(), right=_name(step)))
        body = [_set(node.target.id, _name(counter))] + node.body
        loop = ast.While(test=test, body=body, orelse=[])
        loop._bump = bump  # appended after the continue guard (see _breaks)
        out = [ast.copy_location(s, node) for s in head] + [ast.copy_location(loop, node)]
        for s in out:
            ast.fix_missing_locations(s)
        converted = self.visit_While(out[-1])
        return out[:-1] + (converted if isinstance(converted, list) else [converted])

    def _breaks(self, node: ast.While):
        """break / continue of this loop (not of loops inside it) as flags the loop's test and guards read."""
        bump = getattr(node, "_bump", None)
        has_break = _contains(node.body, ast.Break, stop=_LOOPS)
        has_continue = _contains(node.body, ast.Continue, stop=_LOOPS)
        if not has_break and not has_continue:
            if bump is not None:
                node.body = node.body + [ast.copy_location(bump, node)]
            return node
        k = next(self.count)
        brk, cont = f"__hw_break_{k}", f"__hw_continue_{k}"

        class Flags(ast.NodeTransformer):
            def visit_Break(self, n):
                return ast.copy_location(_set(brk, _const(True)), n)

            def visit_Continue(self, n):
                return ast.copy_location(_set(cont, _const(True)), n)

            def visit_While(self, n):
                return n  # an inner loop's break and continue are its own

            visit_For = visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_While

            def visit_If(self, n):  # what follows a break or continue in a branch runs only without it
                n.body = _guarded([self.visit(s) for s in n.body], flags)
                n.orelse = _guarded([self.visit(s) for s in n.orelse], flags)
                return n

        flags = tuple(f for f, used in ((brk, has_break), (cont, has_continue)) if used)
        body = _guarded([Flags().visit(s) for s in node.body], flags)
        if has_continue:
            body = [_set(cont, _const(False))] + body
        if bump is not None:
            body = body + [bump]
        test = node.test
        if has_break:
            test = ast.BoolOp(op=ast.And(), values=[ast.UnaryOp(op=ast.Not(), operand=_name(brk)), test])
        loop = ast.While(test=test, body=body, orelse=[])
        head = []
        if has_break:
            head.append(_set(brk, _const(False)))
        if has_continue:
            head.append(_set(cont, _const(False)))
        out = [ast.copy_location(s, node) for s in head] + [ast.copy_location(loop, node)]
        for s in out:
            ast.fix_missing_locations(s)
        converted = self.visit_While(out[-1])
        return out[:-1] + (converted if isinstance(converted, list) else [converted])


def _no_args() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None, defaults=[])


def transform(fn_def: ast.FunctionDef, filename: str) -> ast.FunctionDef:
    """The function definition with its control flow converted (in place)."""
    fn_def.decorator_list = []
    declared = {n for s in ast.walk(fn_def) if isinstance(s, (ast.Global, ast.Nonlocal)) for n in s.names}
    if _contains([s for s in fn_def.body if not isinstance(s, ast.Return)], ast.Return):  # a return inside a block
        _Returns().run(fn_def)
    args = fn_def.args.posonlyargs + fn_def.args.args
    t = Transformer(filename, declared, args[0].arg if args else None)
    body = []
    for s in fn_def.body:
        out = t.visit(s)
        body.extend(out if isinstance(out, list) else [out])
    fn_def.body = body
    return fn_def
