"""Child processes for checks that load native libraries: a crash or a hang fails one check, not the caller."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Child code: error_of(fn, *args) -> [error type, message], or None when fn(*args) succeeds.
ERROR_OF = r"""
def error_of(fn, *args):
    try:
        fn(*args)
    except Exception as err:
        return [type(err).__name__, str(err)]
    return None
"""


def result_of(code: str, timeout: float, args: tuple = (), env: dict | None = None, what: str = "the child") -> dict:
    """Run `code` (with `args` as sys.argv[1:]) in a child Python with a time limit; the dict it printed as a line
    RESULT=<json>. `what` names the child in the failure."""
    try:
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                              env=env)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"{what} did not finish within {timeout:.0f} s (a hang?)\nstdout:\n{err.stdout}\nstderr:\n"
                    f"{err.stderr}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT="):
            return json.loads(line[len("RESULT="):])
    pytest.fail(f"{what} printed no result (exit {proc.returncode}: a crash?)\nstdout:\n{proc.stdout[-3000:]}\n"
                f"stderr:\n{proc.stderr[-3000:]}")
