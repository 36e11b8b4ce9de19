"""`hwadapter new-plugin`: names a user may mistype get the fix and exit 2; each level's package imports, registers
through the entry point its pyproject declares and keeps the runtime, op, subgraph and compiler contracts, checked in
one child process per level (the package on PYTHONPATH beside a dist-info: no install); and, marked slow, the whole
vendor path: a wheel of this checkout and the generated packages pip-installed in a fresh virtual environment, where
`hwadapter devices` lists them and `hwadapter conformance NAME` passes.

Run as a script (`python tests/test_scaffold.py TYPE LEVEL`), this file is the child process's checks.
"""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import tomllib
import venv
from xml.etree import ElementTree
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).parents[1]
LEVELS = ("op", "subgraph", "compiler")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWADAPTER_") and k != "PYTHONPATH"}
    env.update(extra)
    return env


def register(root: Path, *aliases: str) -> str:
    """A dist-info beside the generated package declaring its pyproject's entry point (and the same plugin under
    `aliases`), as pip would install it; returns the entry point's name."""
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    (name, target), = project["entry-points"]["hwadapter.plugins"].items()
    info = root / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = [f"{n} = {target}" for n in (name, *aliases)]
    (info / "entry_points.txt").write_text("[hwadapter.plugins]\n" + "\n".join(lines) + "\n")
    return name


# ----------------------------------------------------------------------------------------------------------------
# Tests

def _new_plugin(capsys, *args) -> tuple[int, str, str]:
    from hwadapter.cli import main
    code = main(["new-plugin", *args])
    out, err = capsys.readouterr()
    return code, out, " ".join(err.split())  # rich may fold a long line


@pytest.mark.parametrize("name, says", [
    ("Acme", ["lower case", "Fix: hwadapter new-plugin acme"]),
    ("acme-npu", ["Python identifier", "Fix: hwadapter new-plugin acme_npu"]),
    ("Acme-NPU", ["Fix: hwadapter new-plugin acme_npu"]),
    ("3dfx", ["starts with a letter"]),
    ("cpu", ["taken by the CPU reference plugin"]),
    ("opencl", ["taken by the OpenCL reference plugin"]),
    ("kp", ["hwadapter_kp"]),
    ("testdev", ["already registers the device type 'testdev'", "hwadapter_testdev:TestDevPlugin"]),
    ("TestDev", ["lower case", "choose another name ('testdev' cannot be one here either)"]),
    ("class", ["Python keyword", "hwadapter new-plugin class_dev"]),
])
def test_a_name_that_cannot_be_a_new_type_is_refused_with_the_fix(tmp_path, capsys, name, says):
    code, out, err = _new_plugin(capsys, name, "--dir", str(tmp_path))
    assert code == 2, out + err
    assert err.startswith(f"error: {name!r} cannot be a plugin name"), err
    for text in says:
        assert text in err
    assert not any(tmp_path.iterdir())


def test_an_existing_folder_is_refused_unless_forced(tmp_path, capsys):
    assert _new_plugin(capsys, "acme", "--dir", str(tmp_path))[0] == 0
    root = tmp_path / "hwadapter-acme"
    (root / "NOTES.txt").write_text("mine")
    (root / "hwadapter_acme" / "kernels.py").write_text("edited")
    code, _, err = _new_plugin(capsys, "acme", "--dir", str(tmp_path), "--level", "subgraph")
    assert code == 2 and "already exists" in err and "--force" in err
    assert (root / "hwadapter_acme" / "kernels.py").read_text() == "edited"
    code, out, _ = _new_plugin(capsys, "acme", "--dir", str(tmp_path), "--force")
    assert code == 0 and "hwadapter conformance acme" in out
    assert (root / "NOTES.txt").read_text() == "mine"
    assert "def add" in (root / "hwadapter_acme" / "kernels.py").read_text()


@pytest.mark.parametrize("level", LEVELS)
def test_the_package_is_complete_and_never_names_its_own_type(tmp_path, capsys, level):
    code, out, _ = _new_plugin(capsys, "acme_npu", "--level", level, "--dir", str(tmp_path))
    assert code == 0
    root = tmp_path / "hwadapter-acme_npu"
    project = tomllib.loads((root / "pyproject.toml").read_text())
    assert project["project"]["name"] == "hwadapter-acme_npu"
    assert any(d.startswith("hwadapter>=") for d in project["project"]["dependencies"])
    assert project["project"]["entry-points"]["hwadapter.plugins"] == {"acme_npu": "hwadapter_acme_npu:AcmeNpuPlugin"}
    readme = (root / "README.md").read_text()
    for step in ("pip install -e '.[test]'", "hwadapter devices", "hwadapter conformance acme_npu", "pip wheel"):
        assert step in readme
    assert "hwadapter.conformance.run(DEVICE_TYPE" in (root / "tests" / "test_conformance.py").read_text()
    sources = sorted((root / "hwadapter_acme_npu").glob("*.py"))
    assert {p.name for p in sources} >= {"__init__.py", "runtime.py"}
    for path in sources:
        strings = [n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
                   and isinstance(n.value, str)]
        assert not [s for s in strings if "acme_npu" in s], f"{path.name} names its device type in a string"
    text = "".join(p.read_text() for p in root.rglob("*") if p.is_file())
    assert not re.search(r"\$\{?(name|Name|package|level|hwadapter_version|api_major|api_minor)\b", text)  # all filled


@pytest.mark.parametrize("level", LEVELS)
def test_each_level_registers_and_keeps_its_contracts(tmp_path, capsys, level):
    """The package on PYTHONPATH with its entry point, and the same plugin registered as `renamed` too: the checks
    run on `renamed:0`, so a plugin that wrote its own type anywhere would fail them."""
    assert _new_plugin(capsys, "acme", "--level", level, "--dir", str(tmp_path))[0] == 0
    root = tmp_path / "hwadapter-acme"
    assert register(root, "renamed") == "acme"
    proc = subprocess.run([sys.executable, __file__, "renamed", level, "acme"], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path,
                          env=_env(PYTHONPATH=str(root), HWADAPTER_CACHE_DIR=str(tmp_path / "cache")))
    assert proc.returncode == 0 and f"checked renamed:0 at the {level} level" in proc.stdout, proc.stdout + proc.stderr


def test_the_templates_are_package_data():
    """Every template matches the package-data glob of pyproject.toml, so a wheel carries it."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = setuptools["package-data"]["hwadapter.scaffold"]
    scaffold = ROOT / "core" / "hwadapter" / "scaffold"
    shipped = {p for g in globs for p in scaffold.glob(g)}
    files = {p for p in (scaffold / "templates").rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    assert len(files) >= 13 and files == shipped, files ^ shipped


def test_the_kit_passes_on_the_op_level_package(tmp_path, capsys):
    """`hwadapter conformance` (helper processes and all) on a generated package: its runtime, the part every level
    shares, and its kernels. The other levels' sections run in the slow test below."""
    assert _new_plugin(capsys, "acme", "--dir", str(tmp_path))[0] == 0
    root = tmp_path / "hwadapter-acme"
    register(root)
    junit = tmp_path / "kit.xml"
    cmd = [sys.executable, "-m", "hwadapter.cli", "conformance", "acme", "--section", "runtime", "--section", "kernels",
           "--junit", str(junit)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path,
                          env=_env(PYTHONPATH=str(root), HWADAPTER_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    suites = {s.get("name"): s for s in ElementTree.parse(junit).getroot().iter("testsuite")}
    assert set(suites) == {"runtime", "kernels"}, suites
    for suite in suites.values():
        assert int(suite.get("tests")) > 0 and suite.get("failures") == suite.get("errors") == "0", suite.attrib


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_the_vendor_path_in_a_fresh_virtual_environment(tmp_path):
    """A wheel of this checkout in a fresh venv; there, `hwadapter new-plugin` at each level (templates from the
    wheel's package data), the packages pip-installed from their folders, each listed by `hwadapter devices` and
    passing `hwadapter conformance NAME`: all as subprocesses."""
    wheels = tmp_path / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", wheels, ROOT], timeout=900)
    wheel, = wheels.glob("hwadapter-*.whl")
    venv.create(tmp_path / "venv", with_pip=True)
    python, hwadapter = tmp_path / "venv" / "bin" / "python", tmp_path / "venv" / "bin" / "hwadapter"
    env = _env(HWADAPTER_CACHE_DIR=str(tmp_path / "cache"), COLUMNS="200")
    _run([python, "-m", "pip", "install", "-q", wheel], timeout=900, env=env)
    names = [f"acme_{level}" for level in LEVELS]
    for name, level in zip(names, LEVELS):
        _run([hwadapter, "new-plugin", name, "--level", level], cwd=tmp_path, timeout=60, env=env)
    _run([python, "-m", "pip", "install", "-q", *[f"./hwadapter-{n}[test]" for n in names]], cwd=tmp_path,
         timeout=900, env=env)
    listed = _run([hwadapter, "devices"], timeout=300, env=env, cwd=tmp_path).stdout
    for name in names:
        assert f"{name}:0" in listed, listed
    for name, level in zip(names, LEVELS):
        report = tmp_path / f"{name}.md"
        proc = subprocess.run([str(hwadapter), "conformance", name, "--report", str(report)], capture_output=True,
                              text=True, timeout=600, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert level in report.read_text()
    # the package's own test runs the kit too (through hwadapter.conformance.run)
    _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", tmp_path / f"hwadapter-{names[0]}" / "tests"],
         cwd=tmp_path, timeout=600, env=env)


# ----------------------------------------------------------------------------------------------------------------
# The child process's checks: `python tests/test_scaffold.py TYPE LEVEL ALSO_REGISTERED`

def _check_runtime(dev) -> None:
    """What the kit cannot see: the runtime's messages name the device by the name it is registered under (the
    runtime contract itself is the kit's, test_the_kit_passes_on_the_op_level_package)."""
    from hwadapter.plugin import InvalidArgumentError, OutOfMemoryError
    rt = dev.runtime
    a = rt.allocate(16)
    rt.free(a)
    for call, error in ((lambda: rt.free(a), InvalidArgumentError),
                        (lambda: rt.allocate(rt.properties().total_memory + 1), OutOfMemoryError)):
        try:
            call()
            raise AssertionError(f"no {error.__name__}")
        except error as err:
            assert str(err).startswith(f"{dev}: "), err


def _close(got, want) -> None:
    assert got.numpy().dtype == want.dtype and tuple(got.shape) == want.shape, (got, want.dtype, want.shape)
    tol = 2e-3 if want.dtype == np.float16 else 1e-5
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol, equal_nan=True)


def _check_op(hw, name) -> None:
    from hwadapter.dispatch import fallback
    rng = np.random.default_rng(1)
    for dt in ("float32", "float16"):
        x, y = rng.standard_normal((3, 4)).astype(dt), rng.standard_normal(4).astype(dt)
        x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
        tx, ty, m = hw.to_tensor(x), hw.to_tensor(y), rng.standard_normal((4, 5)).astype(dt)
        with np.errstate(all="ignore"):
            for got, want in ((tx + ty, x + y), (tx * ty, x * y), (hw.relu(tx), np.maximum(x, 0)),
                              (tx @ hw.to_tensor(m), x @ m), (hw.to_tensor(y) @ hw.to_tensor(m), y @ m)):
                assert str(got.device) == f"{name}:0"
                _close(got, want)
        empty = hw.to_tensor(np.zeros((0, 3), dt))
        _close(empty + empty, np.zeros((0, 3), dt))
    assert fallback.count() == 0, fallback.report()
    _close(hw.exp(tx), np.exp(x))  # no kernel here: it runs on the CPU and is counted
    assert fallback.count("exp", f"{name}:0") == 1, fallback.report()


def _check_subgraph(hw, dev, name) -> None:
    from hwadapter.plugin import DeviceArray
    rng = np.random.default_rng(2)

    @hw.jit.to_static
    def block(x, w, b):
        return hw.exp(hw.relu(x @ w + b) * 0.5)  # exp is not claimed: it runs on the next device

    x, w, b = (rng.standard_normal(s).astype("float32") for s in ((5, 8), (8, 3), (3,)))
    args = [hw.to_tensor(a) for a in (x, w, b)]
    graph = hw.jit.get_graph(block, *args)
    plan = hw.graph.partition(graph, devices=[f"{name}:0", "cpu"])
    assert [s.device for s in plan.subgraphs] == [f"{name}:0"] and len(plan.subgraphs[0].nodes) == 4, plan.summary()
    (got,) = plan.run(args)
    np.testing.assert_allclose(got.numpy(), np.exp(np.maximum(x @ w + b, 0) * 0.5), rtol=1e-5)
    sub = graph.subgraph(plan.subgraphs[0].nodes)
    exe = dev.subgraph.compile(sub)
    again = dev.subgraph.deserialize(exe.serialize())
    inputs = [DeviceArray.from_numpy(dev, rng.standard_normal(sub.values[i].shape).astype(sub.values[i].dtype))
              for i in sub.inputs]
    for one, other in zip(exe.run(inputs), again.run(inputs)):
        assert np.array_equal(one.numpy(), other.numpy())


def _check_compiler(hw, dev, name) -> None:
    from hwadapter.dispatch import fallback
    assert dev.codegen is not None, dev.codegen_unavailable
    rng = np.random.default_rng(3)
    for dt in ("float32", "float16", "int32"):
        x = (rng.standard_normal((3, 5)) * 4).astype(dt)
        t = hw.to_tensor(x)
        total = x.sum(1, dtype=np.float32).astype(dt) if dt == "float16" else x.sum(1)  # integers sum in int64
        for got, want in ((t + t, x + x), (hw.abs(t), np.abs(x)), (t.sum(axis=1), total)):
            assert str(got.device) == f"{name}:0"
            _close(got, want)
    assert fallback.count() == 0, fallback.report()


def _main(name: str, level: str, also: str) -> None:
    import hwadapter as hw
    from hwadapter.runtime.device import get
    from hwadapter.runtime.discovery import registry
    for t in (name, also):
        record = registry.get(t)
        assert record is not None and record.ok, f"{t}: {record and record.explain()}"
        assert record.levels == [{"compiler": "codegen"}.get(level, level)], record.levels
    dev = get(f"{name}:0")
    _check_runtime(dev)
    hw.set_device(f"{name}:0")
    {"op": lambda: _check_op(hw, name), "subgraph": lambda: _check_subgraph(hw, dev, name),
     "compiler": lambda: _check_compiler(hw, dev, name)}[level]()
    print(f"checked {name}:0 at the {level} level")


if __name__ == "__main__":
    _main(*sys.argv[1:4])
