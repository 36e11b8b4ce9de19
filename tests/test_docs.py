"""Every Python code block of the kernel-primitives guide runs, top to bottom, in one namespace."""
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[1] / "docs"


def _blocks(name: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(), flags=re.S)


def test_guide_has_examples_for_every_primitive():
    text = "\n".join(_blocks("kernel-primitives.md"))
    for primitive in ("kp.init", "kp.read(", "kp.read_broadcast", "kp.read_reduce", "kp.write", "kp.unary",
                      "kp.binary", "kp.ternary", "kp.cycle_binary", "kp.reduce", "kp.fuse", "kp.register_op",
                      "kp.interpret"):
        assert primitive in text, f"the guide has no runnable example of {primitive}"


def test_kernel_primitives_guide_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(tmp_path))
    namespace: dict = {}
    blocks = _blocks("kernel-primitives.md")
    assert len(blocks) >= 10
    for i, block in enumerate(blocks):
        try:
            exec(compile(block, f"kernel-primitives.md block {i}", "exec"), namespace)
        except Exception as err:  # name the failing block
            pytest.fail(f"block {i} of docs/kernel-primitives.md failed: {type(err).__name__}: {err}\n{block}")


def test_readme_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.setenv("HWADAPTER_CACHE_DIR", str(tmp_path))
    namespace: dict = {}
    blocks = re.findall(r"```python\n(.*?)```", (DOCS.parent / "README.md").read_text(), flags=re.S)
    assert len(blocks) >= 2
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md block {i}", "exec"), namespace)
