"""Child processes for tests that load native libraries or Paddle: a crash or a hang fails one test, not pytest."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest


def result_of(code: str, timeout: float, env: dict | None = None) -> dict:
    """Run `code` in a child Python with a time limit; the dict it printed as a line RESULT=<json>."""
    try:
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"the child did not finish within {timeout:.0f} s\nstdout:\n{err.stdout}\nstderr:\n{err.stderr}")
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT="):
            return json.loads(line[len("RESULT="):])
    raise AssertionError(f"the child printed no result (exit {proc.returncode}: a crash?)\nstdout:\n"
                         f"{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
