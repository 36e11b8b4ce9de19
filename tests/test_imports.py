"""Every hwadapter module imports on its own; imports go down the floors (plugin API, device, dispatch, graph,
frontend), never up, and form no cycle; every function-level import says why it is lazy, and there are no more of
them than there were; a plugin's `import hwadapter.plugin` loads nothing above the device floor.

The checks walk core/hwadapter/**/*.py, so a new module is covered without touching this file.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


PACKAGE = "hwadapter"
PACKAGE_DIR = Path(__file__).parents[1] / "core" / PACKAGE
KP_DIR = Path(__file__).parents[1] / "kernel_primitives" / "hwadapter_kp"

#: The floors, bottom first: a module imports (at module level) only modules of its own floor or below.
FLOORS = ("plugin API", "device", "dispatch", "graph", "frontend")
#: Function-level imports in core/hwadapter and hwadapter_kp: this number may only go down (lazy imports hide
#: cycles and costs; each one that stays says why, see test_every_function_level_import_says_why).
FUNCTION_LEVEL_IMPORTS_AT_MOST = 52


def floor(module: str) -> int:
    """The floor of a module of the core, by its folder: api/ is the plugin API, runtime/ (and hwadapter.plugin,
    the plugin's facade over both) the device, dispatch/, graph/; everything else is the frontend."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    return {"api": 0, "runtime": 1, "plugin": 1, "dispatch": 2, "graph": 3}.get(top, 4)


# ----------------------------------------------------------------------------------------------------------------
# The modules of a package, from its files

def module_files(package_dir: Path = PACKAGE_DIR, package: str = PACKAGE) -> dict[str, Path]:
    """Module name -> source file for every .py under package_dir (`pkg/__init__.py` is the module `pkg`).

    Only .py sources: the compiled `_native` extension is not among them, by construction."""
    modules = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        if any(not p.isidentifier() for p in parts):
            continue  # not importable by name (e.g. a stray `foo-bar.py`)
        modules[".".join([package, *parts])] = path
    return modules


# ----------------------------------------------------------------------------------------------------------------
# 1. Each module imports alone in a fresh interpreter

def _import_alone(module: str) -> tuple[str, int, str]:
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True,
                          timeout=120, cwd=PACKAGE_DIR.parents[1])
    return module, proc.returncode, proc.stderr


def test_every_module_imports_alone_in_a_fresh_interpreter():
    modules = sorted(module_files())
    assert len(modules) > 10 and "hwadapter.runtime.native" in modules and "hwadapter.plugin" in modules
    with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 2)) as pool:
        results = list(pool.map(_import_alone, modules))
    failures = [(m, rc, err) for m, rc, err in results if rc != 0]
    report = "\n\n".join(
        f"python -c 'import {m}' exited {rc}; stderr tail:\n" + "\n".join(err.strip().splitlines()[-6:])
        for m, rc, err in failures)
    assert not failures, f"{len(failures)} of {len(modules)} modules fail to import alone:\n\n{report}"


# ----------------------------------------------------------------------------------------------------------------
# 2. The module-level import graph and its cycles

def _is_type_checking(test: ast.expr) -> bool:
    """`if TYPE_CHECKING:` or `if typing.TYPE_CHECKING:` (any module alias)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module is executed: top level and inside top-level compound
    statements (if/else, try/except/else/finally, with, for, while), but not in function or class bodies and not
    in the body of `if TYPE_CHECKING:` (its `else:` does run)."""
    found = []

    def walk(stmts):
        for node in stmts:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            elif isinstance(node, ast.If):
                if not _is_type_checking(node.test):
                    walk(node.body)
                walk(node.orelse)
            elif isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))):
                walk(node.body)
                for handler in node.handlers:
                    walk(handler.body)
                walk(node.orelse)
                walk(node.finalbody)
            elif isinstance(node, (ast.With, ast.AsyncWith, ast.For, ast.AsyncFor, ast.While)):
                walk(node.body)
                walk(getattr(node, "orelse", []))

    walk(tree.body)
    return found


def _parents(name: str) -> list[str]:
    """`a.b.c` -> [`a`, `a.b`]: the packages Python imports first when importing `a.b.c`."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def resolve_from(module: str, is_package: bool, level: int, target: str | None) -> str:
    """The absolute name of `from <level dots><target> import ...` written in `module`."""
    if level == 0:
        return target or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 > len(base) - 1:
        raise ImportError(f"{module}: relative import beyond the top-level package")
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def import_graph(modules: dict[str, Path], package: str = PACKAGE) -> dict[str, set[str]]:
    """module -> modules of `package` that executing it imports (directly) at module level.

    `from pkg import name` is an import of `pkg.name` when that module exists, else of `pkg`; importing `a.b.c`
    also imports `a` and `a.b`. That implicit parent import is left out only for packages enclosing the importing
    module itself: Python has already started those before the module's first line runs, so it is a no-op. (An
    explicit `from . import name` of a non-module name, or `import pkg`, still counts.)"""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        is_package = path.name == "__init__.py"
        own_parents = set(_parents(module))
        for node in module_level_imports(tree):
            explicit: list[str] = []
            if isinstance(node, ast.Import):
                explicit = [alias.name for alias in node.names]
            else:
                base = resolve_from(module, is_package, node.level, node.module)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    explicit.append(sub if alias.name != "*" and sub in modules else base)
            for name in explicit:
                targets = {name} | {p for p in _parents(name) if p not in own_parents}
                graph[module] |= {t for t in targets if t in modules and t != module
                                  and (t == package or t.startswith(package + "."))}
    return graph


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative). Every node is in exactly one component."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def _shortest_cycle_through(graph: dict[str, set[str]], start: str, allowed: set[str]) -> list[str] | None:
    """The shortest path start -> ... -> start inside `allowed` (BFS), as a list of nodes ending in start."""
    previous: dict[str, str] = {}
    queue = deque([start])
    seen = {start}
    while queue:
        node = queue.popleft()
        for child in sorted(graph.get(node, ())):
            if child not in allowed:
                continue
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [start, *reversed(path[:-1]), start] if node != start else [start, start]
            if child not in seen:
                seen.add(child)
                previous[child] = node
                queue.append(child)
    return None


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Readable cycles: for every node on a cycle (a component of 2+ nodes, or a self-import), the shortest cycle
    through it, without duplicates (rotations of one cycle count once). Each is `[a, b, ..., a]`."""
    cycles, seen = [], set()
    for component in strongly_connected_components(graph):
        members = set(component)
        if len(component) == 1 and component[0] not in graph.get(component[0], ()):
            continue
        for node in component:
            cycle = _shortest_cycle_through(graph, node, members)
            if cycle is None:
                continue
            ring = cycle[:-1]
            i = ring.index(min(ring))
            key = tuple(ring[i:] + ring[:i])
            if key not in seen:
                seen.add(key)
                cycles.append(list(key) + [key[0]])
    return sorted(cycles, key=lambda c: (len(c), c))


def test_cycle_finder_on_synthetic_graphs():
    assert find_cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    assert find_cycles({"a": {"a"}}) == [["a", "a"]]
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": set()}) == []  # a chain
    assert find_cycles({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) == []  # a diamond is no cycle
    # a three-cycle reached from a tail, plus an unrelated two-cycle
    graph = {"t": {"x"}, "x": {"y"}, "y": {"z"}, "z": {"x"}, "p": {"q"}, "q": {"p", "t"}}
    assert find_cycles(graph) == [["p", "q", "p"], ["x", "y", "z", "x"]]
    components = {tuple(c) for c in strongly_connected_components(graph)}
    assert ("x", "y", "z") in components and ("p", "q") in components and ("t",) in components
    # two cycles sharing a node: both are reported
    assert find_cycles({"a": {"b", "c"}, "b": {"a"}, "c": {"a"}}) == [["a", "b", "a"], ["a", "c", "a"]]
    # long rings: iterative, so no recursion limit
    ring = {i: {i + 1} for i in range(5000)} | {5000: {0}}
    assert [len(c) for c in strongly_connected_components(ring)] == [5001]
    ring = {f"m{i:03}": {f"m{i + 1:03}"} for i in range(200)} | {"m200": {"m000"}}
    assert find_cycles(ring) == [[f"m{i:03}" for i in range(201)] + ["m000"]]


def test_import_graph_on_a_synthetic_package(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text(
        "from __future__ import annotations\nimport os\nfrom typing import TYPE_CHECKING\n"
        "from . import b\n"                       # submodule -> pkg.b
        "from .sub.c import C\n"                  # pkg.sub.c, and its package pkg.sub
        "if TYPE_CHECKING:\n    from .d import D\nelse:\n    from . import e\n"
        "try:\n    from .f import F\nexcept ImportError:\n    pass\n"
        "def later():\n    from . import g\n"
        "class K:\n    from . import g\n")
    (pkg / "b.py").write_text("import pkg.sub.c\n")  # pkg.sub.c and pkg.sub; pkg encloses b: not an edge
    (pkg / "sub" / "__init__.py").write_text("from .. import CONST\n")  # a name from pkg/__init__: edge to pkg
    (pkg / "sub" / "c.py").write_text("from ..a import A\n")  # pkg.a (and pkg, which encloses c: no edge)
    for name in "defg":
        (pkg / f"{name}.py").write_text("")
    graph = import_graph(module_files(pkg, "pkg"), "pkg")
    assert graph["pkg"] == {"pkg.a"}
    assert graph["pkg.a"] == {"pkg.b", "pkg.sub", "pkg.sub.c", "pkg.e", "pkg.f"}
    assert graph["pkg.b"] == {"pkg.sub", "pkg.sub.c"}
    assert graph["pkg.sub"] == {"pkg"}
    assert graph["pkg.sub.c"] == {"pkg.a"}
    assert ["pkg.a", "pkg.sub.c", "pkg.a"] in find_cycles(graph)
    assert ["pkg", "pkg.a", "pkg.sub", "pkg"] in find_cycles(graph)
    assert resolve_from("pkg.sub.c", False, 2, "a") == "pkg.a"
    assert resolve_from("pkg.sub", True, 1, None) == "pkg.sub"
    assert resolve_from("pkg.sub", True, 2, "a") == "pkg.a"


def test_no_module_level_import_cycle_in_the_core():
    modules = module_files()
    graph = import_graph(modules)
    assert "hwadapter.runtime.native" in graph and "hwadapter.api.errors" in graph["hwadapter.plugin"]
    cycles = find_cycles(graph)
    assert not cycles, (f"{len(cycles)} module-level import cycles in core/hwadapter (imports run when the "
                        "module is executed; move one side into a function, or split the module):\n"
                        + "\n".join("  " + " -> ".join(c) for c in cycles))


# ----------------------------------------------------------------------------------------------------------------
# 3. The floors: imports go down, lazy imports say why, a plugin's import stays low

def test_floors_by_folder():
    assert [floor(m) for m in ("hwadapter.api.errors", "hwadapter.runtime.device", "hwadapter.plugin",
                               "hwadapter.dispatch.dispatcher", "hwadapter.graph.executor", "hwadapter.tensor",
                               "hwadapter", "hwadapter.onnx.convert")] == [0, 1, 1, 2, 3, 4, 4, 4]


def test_no_module_level_import_goes_up_a_floor():
    graph = import_graph(module_files())
    up = sorted((m, t) for m, targets in graph.items() for t in targets if floor(t) > floor(m))
    assert not up, ("module-level imports that go up a floor (the lower floor must not know the upper one: pass "
                    "what it needs down, as dispatch does with the tensor class):\n"
                    + "\n".join(f"  {m} ({FLOORS[floor(m)]}) imports {t} ({FLOORS[floor(t)]})" for m, t in up))


def function_level_imports(path: Path) -> list[tuple[int, bool]]:
    """(line, says why) of every import statement inside a function or method body of the file. Consecutive imports
    are one block; a block says why when a comment ends one of its lines or stands alone on the line above it."""
    lines = path.read_text().splitlines()
    tree = ast.parse("\n".join(lines), filename=str(path))
    spans = {}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    spans[node.lineno] = node.end_lineno
    found, block, why = [], [], False
    for start in sorted(spans):
        if not block or start != spans[block[-1]] + 1:  # a new block: is there a comment just above it?
            found += [(b, why) for b in block]
            above = lines[start - 2].strip() if start > 1 else ""
            block, why = [], above.startswith("#")
        block.append(start)
        why = why or any("#" in line for line in lines[start - 1:spans[start]])
    return found + [(b, why) for b in block]


def _lazy_imports() -> dict[str, list[tuple[int, bool]]]:
    files = sorted(PACKAGE_DIR.rglob("*.py")) + sorted(KP_DIR.rglob("*.py"))
    return {str(p.relative_to(PACKAGE_DIR.parents[1])): function_level_imports(p) for p in files}


def test_function_level_imports_are_found(tmp_path):
    src = tmp_path / "m.py"
    src.write_text("import os\ndef f():\n    import json  # lazy: why\n    # a reason above\n    import re\n"
                   "    from . import x\nclass K:\n    def g(self):\n        import sys\n")
    assert function_level_imports(src) == [(3, True), (5, True), (6, True), (9, False)]
    src.write_text("def f():\n    x = 1\n    import json\n    import re\n")
    assert function_level_imports(src) == [(3, False), (4, False)]


def test_every_function_level_import_says_why():
    found = _lazy_imports()
    silent = [f"  {path}:{line}" for path, imports in found.items() for line, why in imports if not why]
    assert not silent, (f"{len(silent)} function-level imports without a comment saying why they are lazy (a cost "
                        f"put off, an optional package, a plugin, a cycle avoided): say why, or import at module "
                        f"level:\n" + "\n".join(silent))
    count = sum(len(imports) for imports in found.values())
    assert count <= FUNCTION_LEVEL_IMPORTS_AT_MOST, (
        f"{count} function-level imports, more than the {FUNCTION_LEVEL_IMPORTS_AT_MOST} allowed: this number only "
        f"goes down; import at module level where the floors allow it")


def test_no_import_cycle_even_through_function_level_imports():
    """A cycle held together by a deferred import is still a cycle: none, counting the imports in functions too."""
    modules = module_files()
    graph = import_graph(modules)
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom):
                    base = resolve_from(module, path.name == "__init__.py", node.level, node.module)
                    names = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                graph[module] |= {n for n in names if n in modules and n != module}
    cycles = find_cycles(graph)
    assert not cycles, "import cycles through function-level imports:\n" + "\n".join(
        "  " + " -> ".join(c) for c in cycles)


def test_kernel_primitives_import_nothing_of_hwadapter():
    offenders = []
    for path in sorted(KP_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            offenders += [f"{path.name}:{node.lineno} {n}" for n in names if n.split(".")[0] == PACKAGE]
    assert not offenders, "hwadapter_kp is below everything and device-free:\n" + "\n".join(offenders)


def test_import_hwadapter_plugin_loads_nothing_above_the_device_floor():
    code = "import sys, hwadapter.plugin; print(' '.join(sorted(m for m in sys.modules if m.startswith('hwadapter'))))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                          cwd=PACKAGE_DIR.parents[1])
    loaded = [m for m in proc.stdout.split() if m == PACKAGE or m.startswith(PACKAGE + ".")]
    assert "hwadapter.plugin" in loaded and "hwadapter.api.interfaces" in loaded
    above = [m for m in loaded if m != PACKAGE and m != "hwadapter._native" and floor(m) > 1]
    assert not above, f"`import hwadapter.plugin` loads modules above the device floor: {above}"


if __name__ == "__main__":  # print the graph's cycles: python tests/test_imports.py
    for c in find_cycles(import_graph(module_files())):
        print(" -> ".join(c))
