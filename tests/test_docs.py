"""The documentation works as a user would run it: every Python block of the README and of docs/*.md runs (each page
top to bottom in one namespace, in a fresh interpreter that cannot see the test-only plugins), and every command and
`make` target the README shows works after `make demo`."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
# Runs one page's Python blocks in order in one namespace; a traceback names the page and the block. Each block's
# source is in linecache, as a notebook's cells are (to_static reads a function's source to convert it).
RUNNER = """
import linecache, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
namespace = {"__name__": "__main__"}
for i, block in enumerate(re.findall(r"^```python\\n(.*?)^```", text, flags=re.S | re.M)):
    name = f"{sys.argv[1]} python block {i}"
    linecache.cache[name] = (len(block), None, block.splitlines(True), name)
    exec(compile(block, name, "exec"), namespace)
"""


def _blocks(page: Path, lang: str = "python") -> list[str]:
    """The code blocks of a page fenced as ```lang (lang "" for plain fences): fences are paired in order."""
    fenced = re.findall(r"^```(\w*)\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    return [code for fence_lang, code in fenced if fence_lang == lang]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def _user_env(tmp_path) -> dict:
    """The environment of a user with default settings: none of the HWADAPTER_* a test or a developer may have set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWADAPTER_")}
    env["HWADAPTER_CACHE_DIR"] = str(tmp_path / "cache")
    return env


def _opencl_available() -> bool:
    import hwadapter as hw
    return hw.device.is_available("opencl")


RUNNABLE = [page for page in PAGES if _blocks(page)]


def test_pages_with_examples_are_all_run():
    assert {"README.md", "docs/devices.md", "docs/kernel-primitives.md", "docs/vendor-guide.md"} <= \
        {_name(p) for p in RUNNABLE}


def test_guide_has_examples_for_every_primitive():
    text = "\n".join(_blocks(DOCS / "kernel-primitives.md"))
    for primitive in ("kp.init", "kp.read(", "kp.read_broadcast", "kp.read_reduce", "kp.write", "kp.unary",
                      "kp.binary", "kp.ternary", "kp.cycle_binary", "kp.reduce", "kp.fuse", "kp.register_op",
                      "kp.interpret"):
        assert primitive in text, f"the guide has no runnable example of {primitive}"


@pytest.mark.parametrize("page", RUNNABLE, ids=_name)
def test_python_examples_run_as_a_user_runs_them(page, tmp_path):
    if '"opencl:0"' in "".join(_blocks(page)) and not _opencl_available():
        pytest.skip(f"{_name(page)} shows opencl:0 and this machine has no OpenCL device")
    result = subprocess.run([sys.executable, "-c", RUNNER, str(page)], cwd=tmp_path, env=_user_env(tmp_path),
                            capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, f"a Python block of {_name(page)} failed:\n{result.stderr[-4000:]}"


def _readme_shell_block_using_venv() -> str:
    blocks = [b for b in _blocks(ROOT / "README.md", lang="") if b.startswith(". .venv/bin/activate")]
    assert len(blocks) == 1, "the README's commands after `make demo` start by activating .venv"
    return blocks[0]


def test_readme_commands_work_after_make_demo(tmp_path):
    block = _readme_shell_block_using_venv()
    if not (ROOT / ".venv/bin/activate").exists():
        pytest.skip("no .venv here: `make demo` or `make test` creates it")
    result = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=_user_env(tmp_path),
                            capture_output=True, text=True, timeout=280)
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "Traceback" not in output, f"the README's commands failed:\n{output[-4000:]}"


def test_make_targets_the_docs_name_exist():
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    named = (re.findall(r"(?:`|^)make ([a-z][\w-]*)", page.read_text(), flags=re.M) for page in PAGES)
    targets = sorted({target for page_targets in named for target in page_targets})
    assert {"demo", "test", "devices", "doctor"} <= set(targets)
    for target in targets:  # -n: print the recipe, run nothing; an unknown target exits 2
        result = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"`make {target}` is in the docs but not in the Makefile: {result.stderr}"


def test_demo_runs_without_a_warning(tmp_path):
    """`make demo` is the first thing a user runs: it must pass, and print no warning (a compiler's included)."""
    env = _user_env(tmp_path)
    env["POCL_KERNEL_CACHE"] = "0"  # PoCL's own cache of built programs would hide its compiler's warnings
    result = subprocess.run([sys.executable, str(ROOT / "examples/demo.py")], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=280)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"the demo failed:\n{output[-4000:]}"
    warned = [line for line in output.splitlines() if re.search(r"warn", line, flags=re.I)]
    assert not warned, "the demo printed warnings:\n" + "\n".join(warned)
