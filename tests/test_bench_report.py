"""benchmarks/report.py, which `make bench` runs: it writes each runner's printed tables, dated and with the machine,
to one page (docs/performance.md), so that benchmark figures live there and not in docstrings. Runs stand-in runners:
the real ones take minutes."""
from __future__ import annotations

import datetime
import importlib.util
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).parents[1]


def _report():
    spec = importlib.util.spec_from_file_location("bench_report", ROOT / "benchmarks" / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _runner(path: Path, body: str) -> Path:
    path.write_text("import sys\n" + body)
    return path


def test_the_page_holds_the_date_the_machine_and_each_runners_tables(tmp_path, capsys):
    fast = _runner(tmp_path / "fast.py", "print('table of', sys.argv[1:])\nprint('PASS  1.00x')\n")
    broken = _runner(tmp_path / "broken.py", "print('half a table')\nsys.exit(3)\n")
    out = tmp_path / "performance.md"
    status = _report().main(["--run", f"{fast} --rounds 1", "--run", str(broken), "--out", str(out)])
    assert status == 1  # a runner failed: make bench fails, and the page says which
    text = out.read_text()
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    assert text.startswith(f"# Performance: the benchmarks' latest tables ({today})")
    for what, value in (("python", platform.python_version()), ("numpy", np.__version__)):
        assert f"| {what} | {value} |" in text
    assert "| cpu | " in text and "| cores | " in text and "make bench" in text
    assert f"## `{fast} --rounds 1`" in text and "table of ['--rounds', '1']\nPASS  1.00x\n```" in text
    assert f"## `{broken}`" in text and "**exit status 3**" in text and "half a table" in text
    assert "table of" in capsys.readouterr().out  # shown as it runs, too


def test_make_bench_writes_docs_performance_md_with_the_default_runners():
    report = _report()
    assert report.OUT == ROOT / "docs" / "performance.md"
    assert all((ROOT / "benchmarks" / r).is_file() for r in report.DEFAULT_RUNS)
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nbench:", 1)[1].split("\n\n", 1)[0]
    assert "benchmarks/report.py --out docs/performance.md" in recipe
    assert report.resolve("dispatch.py")[:2] == [sys.executable, str(ROOT / "benchmarks" / "dispatch.py")]
