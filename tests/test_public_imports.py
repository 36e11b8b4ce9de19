"""Plugins, bridges and the conformance kit import only hwadapter's public names.

The rule, by who imports:

* **Plugins** (`plugins/`, and the vendor template `examples/native_plugin/`) implement the plugin API: from
  hwadapter they import `hwadapter.plugin` and nothing else, plus `hwadapter_kp` (the kernel-primitive language).
* **Hosts**: the bridges (`bridges/`) and the conformance kit (`core/hwadapter/conformance/`, which is what vendors
  read) use hwadapter from outside: `hwadapter` itself, `hwadapter.plugin`, `hwadapter.host` (the host API),
  `hwadapter.device`, the frontend's public packages (`hwadapter.graph`, `hwadapter.onnx` and its documented runner
  `hwadapter.onnx.nodetests`, `hwadapter.jit`, `hwadapter.nn`, `hwadapter.profiler`, `hwadapter.kp`,
  `hwadapter.conformance`) and `hwadapter_kp`. The kit also imports its own modules (`hwadapter.conformance.*`).
* Everyone: no imported name starts with `_` (outside the caller's own package), a name imported from a module
  that lists `__all__` is listed there, and no module on the way starts with `_` (`hwadapter._native`,
  `hwadapter_kp._x`). `hwadapter.api.*`, `hwadapter.runtime.*`, `hwadapter.dispatch.*`, `hwadapter.graph.*`
  submodules, `hwadapter.ops.*`, `hwadapter.tensor` and `hwadapter.cli.*` are internals: what a plugin or a host
  needs from them is re-exported by `hwadapter.plugin` or `hwadapter.host`.

`from package import name` where `package.name` is a module is judged as an import of that module. Import
statements are found anywhere in a file (function-level ones included), and in string constants too: the kit and
the bridge run child Python processes from code held in strings.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
CORE = ROOT / "core"
KIT = CORE / "hwadapter" / "conformance"

PLUGIN_MODULES = {"hwadapter.plugin"}
HOST_MODULES = {"hwadapter", "hwadapter.plugin", "hwadapter.host", "hwadapter.device", "hwadapter.graph",
                "hwadapter.onnx", "hwadapter.onnx.nodetests", "hwadapter.jit", "hwadapter.nn", "hwadapter.profiler",
                "hwadapter.kp", "hwadapter.conformance", "hwadapter.distributed", "hwadapter.distributed.launch"}
#: An import line inside a string constant (child code).
_CODE_LINE = re.compile(r"^\s*(from\s+hwadapter\S*\s+import\s+[^\n]+|import\s+hwadapter\S*[^\n]*)$", re.M)


def _exported(module: str) -> set[str] | None:
    """The names a core module lists in a literal `__all__` (None when it lists none)."""
    path = CORE.joinpath(*module.split("."))
    path = path.with_suffix(".py") if path.with_suffix(".py").is_file() else path / "__init__.py"
    if not path.is_file():
        return None
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            try:
                return set(ast.literal_eval(node.value))
            except ValueError:
                return None  # computed (hwadapter's own adds the op set): judged by the leading underscore alone
    return None


def _is_module(name: str) -> bool:
    """True when `name` (hwadapter.x.y) is a module or package of the core's source tree."""
    path = CORE.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _package_of(path: Path) -> str | None:
    """The dotted package a core file belongs to (for relative imports), None outside core/."""
    try:
        rel = path.relative_to(CORE)
    except ValueError:
        return None
    parts = list(rel.with_suffix("").parts)
    return ".".join(parts[:-1])


def _imports(tree: ast.AST, path: Path):
    """(line, module, imported name or None) for every import statement in the tree."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, None
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                package = _package_of(path)
                if package is None:
                    continue  # a relative import inside a plugin's or bridge's own package
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            for alias in node.names:
                yield node.lineno, module, alias.name


def _all_imports(path: Path):
    """_imports of the file and of the import lines in its string constants."""
    tree = ast.parse(path.read_text(), str(path))
    yield from _imports(tree, path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "hwadapter" in node.value:
            for match in _CODE_LINE.finditer(node.value):
                try:
                    inner = ast.parse(match.group(0).strip())
                except SyntaxError:
                    continue  # prose that looks like an import
                for _, module, name in _imports(inner, path):
                    yield node.lineno, module, name


def _resolved(module: str, name: str | None) -> tuple[str, str | None]:
    """`from package import name` where package.name is a module: (that module, None)."""
    if name is not None and name != "*" and _is_module(f"{module}.{name}"):
        return f"{module}.{name}", None
    return module, name


def _private(module: str, name: str | None) -> bool:
    return any(p.startswith("_") for p in module.split(".")) or (name is not None and name.startswith("_"))


def violations(path: Path, allowed: set[str], own: str | None = None) -> list[str]:
    """`file:line: import` for each import of a hwadapter name this file may not use."""
    out = []
    for line, module, name in _all_imports(path):
        if not (module == "hwadapter" or module.startswith(("hwadapter.", "hwadapter_kp"))):
            continue
        module, name = _resolved(module, name)
        said = f"from {module} import {name}" if name else f"import {module}"
        if own and (module == own or module.startswith(own + ".")):
            continue  # the caller's own package, private modules included
        if _private(module, name):
            out.append(f"{path.relative_to(ROOT)}:{line}: {said} (a private name)")
        elif module == "hwadapter_kp" or module.startswith("hwadapter_kp."):
            continue
        elif module not in allowed:
            out.append(f"{path.relative_to(ROOT)}:{line}: {said} (not public to this caller)")
        elif name not in (None, "*") and name not in (_exported(module) or {name}):
            out.append(f"{path.relative_to(ROOT)}:{line}: {said} (not in {module}.__all__)")
    return out


def _files(*folders: Path) -> list[Path]:
    return sorted(p for folder in folders for p in folder.rglob("*.py") if "egg-info" not in str(p))


def test_plugins_import_only_the_plugin_api():
    files = _files(ROOT / "plugins", ROOT / "examples" / "native_plugin")
    assert files
    found = [v for path in files for v in violations(path, PLUGIN_MODULES)]
    assert not found, "plugins import hwadapter beyond hwadapter.plugin:\n" + "\n".join(found)


def test_bridges_import_only_public_host_names():
    files = _files(ROOT / "bridges")
    assert files
    found = [v for path in files for v in violations(path, HOST_MODULES)]
    assert not found, "bridges import private hwadapter names:\n" + "\n".join(found)


def test_the_conformance_kit_imports_only_public_host_names():
    found = [v for path in _files(KIT) for v in violations(path, HOST_MODULES, own="hwadapter.conformance")]
    assert not found, "the conformance kit imports private hwadapter names:\n" + "\n".join(found)


@pytest.mark.parametrize("code, bad", [
    ("from hwadapter.dispatch.dispatcher import own", True),
    ("from hwadapter import dispatch", True),
    ("from hwadapter.host import own_kernel", False),
    ("from hwadapter.plugin import _secret", True),
    ("import hwadapter._native", True),
    ("from hwadapter import host, Tensor", False),
    ("def f():\n    from hwadapter.runtime.discovery import registry", True),
    ("CHILD = '''\nimport numpy\nfrom hwadapter.runtime.native import load_library\n'''", True),
    ("from hwadapter_kp import ir", False),
    ("from hwadapter.device import devices", True),
    ("from hwadapter.device import set_device", False),
])
def test_the_rule_on_synthetic_files(tmp_path, code, bad):
    path = tmp_path / "mod.py"
    path.write_text(code + "\n")
    global ROOT
    root, ROOT = ROOT, tmp_path
    try:
        found = violations(path, HOST_MODULES)
    finally:
        ROOT = root
    assert bool(found) == bad, found


def test_import_hwadapter_host_loads_no_graph_pass_executor_or_onnx():
    import subprocess
    import sys
    code = ("import sys, hwadapter; before = set(sys.modules); import hwadapter.host; "
            "print(sorted(m for m in set(sys.modules) - before))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    added = ast.literal_eval(proc.stdout.strip().splitlines()[-1])
    heavy = [m for m in added if m.startswith(("hwadapter.graph.passes", "hwadapter.graph.executor", "hwadapter.onnx",
                                               "onnx"))]
    assert not heavy, f"import hwadapter.host loads {heavy}"
