"""`hwadapter paddle trace`: a Paddle script on hwa_cpu, traced; its kernels' device calls and Paddle's CPU fallbacks
counted, checked against the calls the script makes.

The cpu plugin's shim is installed into a temporary folder (`hwadapter paddle install cpu --no-verify --dir D`:
about 30 s of compiling on an idle 2-core machine; the traced script is the check that Paddle loads it);
each traced script is a child of `python -m hwadapter.cli paddle trace` with a time limit. The oracle is the script:
it calls paddle.add three times, paddle.matmul once (both registered on hwa_cpu) and paddle.flip twice and
paddle.roll once, which no hwadapter op is mapped to (Paddle's CPU runs them).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from argparse import Namespace

import pytest
from paddle_needs import PADDLE_SKIP

_SKIP = PADDLE_SKIP

TIMEOUT = 180

SCRIPT = r"""
import sys
import numpy as np
import paddle
paddle.set_device("hwa_cpu:0")
a = paddle.to_tensor(np.arange(6, dtype="float32").reshape(2, 3))
b = paddle.to_tensor(np.ones((3, 2), "float32"))
for _ in range(3):
    c = paddle.add(a, a)
m = paddle.matmul(a, b)
f = paddle.flip(a, [0])
f = paddle.flip(f, [1])
r = paddle.roll(a, 1)
np.testing.assert_array_equal(f.numpy(), np.arange(6, dtype="float32").reshape(2, 3)[::-1, ::-1])
print("script stdout", m.numpy().tolist())
print("script stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""

STATIC = r"""
import numpy as np
import paddle
paddle.set_device("hwa_cpu:0")
def fn(t):
    return paddle.flip(paddle.add(t, t), [0])
static = paddle.jit.to_static(fn, full_graph=True)
x = paddle.to_tensor(np.ones((2, 3), "float32"))
for _ in range(4):
    out = static(x)
np.testing.assert_array_equal(out.numpy(), np.full((2, 3), 2, "float32"))
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """A shim folder with the cpu plugin installed as hwa_cpu (kernels library included)."""
    if _SKIP:
        pytest.skip(_SKIP)
    folder = tmp_path_factory.mktemp("paddle-trace")
    env = {k: v for k, v in os.environ.items() if k != "CUSTOM_DEVICE_ROOT"}
    proc = subprocess.run([sys.executable, "-m", "hwadapter.cli", "paddle", "install", "cpu", "--no-verify", "--dir",
                           str(folder)], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0 and "in Paddle: hwa_cpu" in proc.stdout, proc.stdout + proc.stderr
    return folder


def _trace(root, tmp_path, script: str, *options: str, args=()):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "CUSTOM_DEVICE_ROOT": str(root), "GLOG_minloglevel": "2"}
    return subprocess.run([sys.executable, "-m", "hwadapter.cli", "paddle", "trace", *options, "--", sys.executable,
                           str(path), *args], capture_output=True, text=True, timeout=TIMEOUT, env=env)


def _kernels(proc) -> dict:
    """The --json report (the last line of stdout): {kernel: its row} for hwa_cpu."""
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(k["type"] == "hwa_cpu" for k in report["kernels"]), report
    return report, {k["kernel"]: k for k in report["kernels"]}


def test_trace_counts_the_calls_the_script_made(root, tmp_path):
    proc = _trace(root, tmp_path, SCRIPT, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "script stdout [[3.0, 3.0], [12.0, 12.0]]" in proc.stdout
    assert "script stderr" in proc.stderr
    assert "fallbacking" not in proc.stderr and "kernel_factory" not in proc.stderr  # Paddle's lines were read here
    report, rows = _kernels(proc)
    assert rows["add"]["device_calls"] == 3 and rows["add"]["fallback_calls"] == 0
    assert rows["matmul"]["device_calls"] == 1 and rows["matmul"]["fallback_calls"] == 0
    assert rows["flip"] == {**rows["flip"], "device_calls": 0, "fallback_calls": 2, "dtypes": ["float32"]}
    assert rows["roll"]["fallback_calls"] == 1 and rows["roll"]["device_calls"] == 0
    assert "optable" in rows["flip"]["reason"]
    assert report["fell_back"] and report["processes"] == 1
    assert report["summary"]["hwa_cpu"]["fallback_kernels"] == 2
    assert report["summary"]["hwa_cpu"]["fallback_calls"] == 3


def test_strict_exits_3_and_the_scripts_status_passes_through(root, tmp_path):
    proc = _trace(root, tmp_path, SCRIPT, "--strict")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "fell back (3 calls)" in proc.stdout and "flip" in proc.stdout
    assert "Why they fell back" in proc.stdout
    proc = _trace(root, tmp_path, SCRIPT, "--strict", args=("5",))
    assert proc.returncode == 5, proc.stdout + proc.stderr  # the script's failure comes first
    assert "script stdout" in proc.stdout


def test_static_graph_fallbacks_are_ops_of_the_program(root, tmp_path):
    proc = _trace(root, tmp_path, STATIC, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, rows = _kernels(proc)
    # one program, lowered once: add on the device, flip on Paddle's CPU; add's kernel ran at each of 4 steps
    assert rows["add"]["static_device_ops"] == 1 and rows["add"]["device_calls"] == 4
    assert rows["flip"]["static_fallback_ops"] == 1 and rows["flip"]["device_calls"] == 0


def test_a_missing_command_says_so():
    if importlib.util.find_spec("hwadapter_paddle") is None:
        pytest.skip(_SKIP)
    proc = subprocess.run([sys.executable, "-m", "hwadapter.cli", "paddle", "trace", "--", "no-such-command-hwa"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 127 and "cannot run 'no-such-command-hwa'" in proc.stderr, proc.stderr
    from hwadapter_paddle import trace
    assert trace.main(Namespace(command=[], json=False, strict=False)) == 2


def test_log_reader_passes_the_rest_through():
    """Without Paddle: Paddle's lines are counted and swallowed, the script's (partial lines too) pass on."""
    if importlib.util.find_spec("hwadapter_paddle") is None:
        pytest.skip(_SKIP)
    from hwadapter_paddle import trace
    report, out = trace.Report(["x"], 0), []
    reader = trace.LogReader(report, out.append, min_severity=1)
    read, write = os.pipe()
    lines = [b"epoch 1\n",
             b"I1127 19:45:25.753652  3240 kernel_factory.cc:389] missing hwa_cpu kernel: relu, expected_kernel_key:"
             b"(hwa_cpu, Undefined(AnyLayout), float32), fallbacking to CPU one!\n",
             b"I1127 19:45:25.753652  3240 init.cc:1] below the user's GLOG_minloglevel\n",
             b"W1127 19:45:25.753652  3240 init.cc:1] a warning\n",
             b"I1127 19:45:26.0  77 pd_op_to_kernel_pass.cc:3662] op name pd_op.relu\n",
             b"I1127 19:45:26.0  77 pd_op_to_kernel_pass.cc:2925] Infer kernel backend from input 0 of op pd_op.relu\n",
             b"I1127 19:45:26.0  77 pd_op_to_kernel_pass.cc:535] memcpy_d2h kernel_key: (hwa_cpu, NCHW, float32)\n",
             b"I1127 19:45:26.0  77 pd_op_to_kernel_pass.cc:2712] [relu] selected kernel(is_valid: 1 ): (CPU, NCHW, "
             b"float32)\n",
             # an op whose input is already on the CPU (a shape): Paddle's own placement, not a fallback
             b"I1127 19:45:26.0  77 pd_op_to_kernel_pass.cc:3662] op name pd_op.assign\n",
             b"I1127 19:45:26.0  77 pd_op_to_kernel_pass.cc:2925] Infer kernel backend from input 0 of op pd_op.assign\n",
             b"I1127 19:45:26.0  77 pd_op_to_kernel_pass.cc:2712] [assign_raw] selected kernel(is_valid: 1 ): (CPU, "
             b"NCHW, int64)\n",
             b"I1127 19:45:26.0  77 pd_op_to_kernel_pass.cc:2933] need trans from Place(hwa_cpu:0) to CPU\n",
             b"progress 50%\r"]
    os.write(write, b"".join(lines))
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        reader.feed(stream)
    assert b"".join(out) == lines[0] + lines[3] + lines[-1]
    relu = report.kernels["hwa_cpu", "relu"]
    assert (relu.fallback_calls, relu.static_fallback_ops) == (1, 1)
    assert ("hwa_cpu", "assign_raw") not in report.kernels
