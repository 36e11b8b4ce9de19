"""The README's variable table lists every HWADAPTER_* environment variable the code reads, and no other (the
architecture's rule; HWADAPTER_PROBE_TIMEOUT and HWADAPTER_INCLUDE were missing from it)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
SOURCES = ("core", "kernel_primitives", "plugins", "bridges", "benchmarks", "examples", "scripts")
NAME = re.compile(r"\bHWADAPTER_[A-Z][A-Z0-9_]*\b")


def _read_by_the_code() -> dict[str, str]:
    """variable -> a file that names it; C include guards (…_H) are not variables."""
    found: dict[str, str] = {}
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in (".py", ".c", ".h", ".cpp", "") or not path.is_file() or ".egg-info" in str(path):
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for name in NAME.findall(text):
                if not name.endswith("_H"):
                    found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def test_the_readme_table_lists_every_variable_the_code_reads():
    readme = (ROOT / "README.md").read_text()
    table = set(re.findall(r"^\| `(HWADAPTER_[A-Z0-9_]+)` \|", readme, flags=re.M))
    code = _read_by_the_code()
    missing = {name: where for name, where in code.items() if name not in table}
    assert not missing, f"read by the code but not in the README's Configuration table: {missing}"
    stale = table - set(code)
    assert not stale, f"in the README's table but read nowhere: {sorted(stale)}"
