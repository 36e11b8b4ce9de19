"""`hwadapter run MODEL.onnx` and `hwadapter partition MODEL.onnx`, in-process through cli.main and as a user runs
them, on small models written with onnx.helper; results checked against numpy and onnxruntime."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import hwadapter as hw  # noqa: E402
from hwadapter import cli  # noqa: E402

SCRIPT = Path(sys.executable).with_name("hwadapter")
W = np.linspace(-1, 1, 4).astype(np.float32)


def _oracle(x: np.ndarray) -> np.ndarray:
    """What the small model computes, in numpy: relu(x * w) + x, then exp of minus that."""
    y = np.maximum(x * W, 0) + x
    return np.exp(-y)


def _small_model(path: Path, batch="N") -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [batch, 4])
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Add", ["r", "x"], ["y"]), helper.make_node("Neg", ["y"], ["n"]),
             helper.make_node("Exp", ["n"], ["z"])]
    g = helper.make_graph(nodes, "small", [x], [z], [numpy_helper.from_array(W, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


@pytest.fixture
def small(tmp_path) -> Path:
    return _small_model(tmp_path / "small.onnx")


def _main(capsys, *argv) -> tuple[int, str, str]:
    status = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def _user(*args, COLUMNS="200") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HWADAPTER_")}
    env.update(COLUMNS=COLUMNS)
    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "hwadapter.cli"]
    return subprocess.run(cmd + [str(a) for a in args], env=env, capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def _second_device() -> str:
    """opencl:0 where there is one (the user's example), else cpu."""
    return "opencl:0" if "opencl:0" in hw.device.get_available_device() else "cpu"


# --- run -------------------------------------------------------------------------------------------------------
def test_run_with_an_input_file_computes_what_numpy_computes(capsys, small, tmp_path):
    x = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    status, out, err = _main(capsys, "run", small, "--device", _second_device(), "--input", f"x={tmp_path / 'x.npy'}",
                             "--save-outputs", tmp_path / "out")
    assert status == 0, err
    assert "outputs" in out and "(5, 4)" in out and "float32" in out
    np.testing.assert_allclose(np.load(tmp_path / "out" / "z.npy"), _oracle(x), rtol=1e-6, atol=1e-7)


def test_random_inputs_are_seeded_and_open_dims_take_shape(capsys, small, tmp_path):
    for seed, where in ((0, "a"), (0, "b"), (1, "c")):
        status, _, err = _main(capsys, "run", small, "--seed", seed, "--shape", "x=2,4", "--save-outputs",
                               tmp_path / where)
        assert status == 0, err
    a, b, c = (np.load(tmp_path / w / "z.npy") for w in "abc")
    assert a.shape == (2, 4)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)  # the documented random input
    np.testing.assert_allclose(a, _oracle(x), rtol=1e-6)


def test_bench_prints_a_latency_table(capsys, small):
    status, out, err = _main(capsys, "run", small, "--bench", "4")
    assert status == 0, err
    assert "latency (4 runs after a warm-up)" in out
    row = next(line for line in out.splitlines() if "hwadapter (cpu" in line)
    figures = [float(v) for v in row.replace("│", " ").split()[3:]]
    assert len(figures) == 5 and figures[0] <= figures[1] <= figures[4]  # min <= median <= max


def test_compare_with_onnxruntime_reports_errors_and_the_speed_ratio(capsys, small):
    pytest.importorskip("onnxruntime")
    status, out, err = _main(capsys, "run", small, "--device", _second_device(), "--compare", "onnxruntime",
                             "--bench", "3")
    assert status == 0, err
    assert "hwadapter vs onnxruntime" in out and "onnxruntime (CPU EP)" in out
    table = out[out.index("hwadapter vs onnxruntime"):]
    row = next(line for line in table.splitlines() if line.strip("│ ").startswith("z "))
    abs_err, rel_err = (float(v) for v in row.replace("│", " ").split()[1:3])
    assert abs_err < 1e-6 and rel_err < 1e-5
    assert "x onnxruntime's time" in out


def test_compare_without_onnxruntime_says_how_to_install_it(capsys, small, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    status, out, err = _main(capsys, "run", small, "--compare", "onnxruntime")
    assert status == 1
    assert "onnxruntime is not installed" in err and "pip install onnxruntime" in err


def test_profile_writes_a_chrome_trace_and_prints_the_top_kernels(capsys, small, tmp_path):
    trace = tmp_path / "trace.json"
    status, out, err = _main(capsys, "run", small, "--profile", trace)
    assert status == 0, err
    doc = json.loads(trace.read_text())
    steps = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert steps and all(e["dur"] >= 0 for e in steps)
    assert "top kernels" in out and f"wrote {trace}" in out


@pytest.mark.parametrize("argv,message", [
    (["--input", "nope=x.npy"], "has no input 'nope'"),
    (["--input", "x"], "expected NAME=VALUE"),
    (["--shape", "x=a,b"], "whole numbers"),
    (["--shape", "x=-1,4"], "must not be negative"),
    (["--shape", "x=100000000000,4"], "random inputs are made up to"),
    (["--device", "nodev:0"], "nodev"),
    (["--profile", "/nonexistent-dir/trace.json"], "not a directory this user can write"),
])
def test_bad_arguments_are_named(capsys, small, argv, message):
    status, _, err = _main(capsys, "run", small, *argv)
    assert status == 2
    assert message in err


def test_a_pickled_input_file_is_refused_not_loaded(capsys, small, tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    status, _, err = _main(capsys, "run", small, "--input", f"x={tmp_path / 'obj.npy'}")
    assert status == 2 and "cannot read it as a .npy array" in err


def test_missing_truncated_and_unsupported_models_are_clear_errors(capsys, small, tmp_path):
    status, _, err = _main(capsys, "run", tmp_path / "none.onnx")
    assert status == 2 and "no such file" in err
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(small.read_bytes()[:40])
    status, _, err = _main(capsys, "run", cut)
    assert status == 2 and "cut.onnx" in err
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    onnx.save(m, str(tmp_path / "odd.onnx"))
    status, _, err = _main(capsys, "run", tmp_path / "odd.onnx")
    assert status == 2 and "Frobnicate" in err


def test_run_as_a_user_runs_it(small, tmp_path):
    dev = _second_device()
    proc = _user("run", small, "--device", dev, "--shape", "x=3,4", "--save-outputs", tmp_path / "o")
    assert proc.returncode == 0, proc.stderr
    assert f"on {dev}" in proc.stdout
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(np.load(tmp_path / "o" / "z.npy"), _oracle(x), rtol=1e-6)


def test_at_80_columns_every_figure_is_whole(tmp_path):
    """At 80 columns the outputs table once cut its statistics to `-3.0500…`, losing the exponent."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4])
    scale = np.array([1e-5, -3.05e-5, 1.234567e7, -2.5e-12], np.float32)
    g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["z"])], "scaled", [x], [z],
                          [numpy_helper.from_array(scale, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "scaled.onnx"))
    proc = _user("run", tmp_path / "scaled.onnx", "--save-outputs", tmp_path / "o", COLUMNS="80")
    assert proc.returncode == 0, proc.stderr
    table = [line for line in proc.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert "…" not in proc.stdout and max(len(line) for line in table) <= 80, proc.stdout
    out = np.load(tmp_path / "o" / "z.npy").astype(np.float64)
    row = next(line for line in proc.stdout.splitlines() if line.startswith("│ z "))
    stats = [float(cell) for cell in row.split("│")[4:7]]  # min, max, mean: as printed, exponents and all
    np.testing.assert_allclose(stats, [out.min(), out.max(), out.mean()], rtol=1e-3)


# --- partition -------------------------------------------------------------------------------------------------
def test_partition_takes_an_onnx_model_and_draws_it(capsys, small, tmp_path):
    svg = tmp_path / "plan.svg"
    status, out, err = _main(capsys, "partition", small, "--device", _second_device(), "--svg", svg,
                             "--shape", "x=2,4")
    assert status == 0, err
    assert "hwadapter plan" in out and f"wrote {svg}" in out
    assert ET.parse(svg).getroot().tag.endswith("svg")


def test_partition_of_a_bad_onnx_file_is_a_clear_error(capsys, small, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not a model" * 3)
    status, _, err = _main(capsys, "partition", bad)
    assert status == 2 and "bad.onnx" in err
    status, _, err = _main(capsys, "partition", small, "--shape", "y=1,4")
    assert status == 2 and "has no input 'y'" in err


@pytest.mark.parametrize("dim,message", [(10 ** 12, "random inputs are made up to")])
def test_a_huge_declared_input_is_refused(capsys, tmp_path, dim, message):
    path = _small_model(tmp_path / "m.onnx", batch=1)
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = dim
    onnx.save(model, str(path))
    status, out, err = _main(capsys, "run", path)
    assert status == 2 and message in err and "--shape x=" in err and "Traceback" not in out + err


def test_an_output_directory_that_is_a_file_is_refused_before_running(capsys, small, tmp_path):
    (tmp_path / "taken").write_text("a file")
    status, out, err = _main(capsys, "run", small, "--save-outputs", tmp_path / "taken")
    assert status == 2 and "not a directory" in err and "Traceback" not in out + err


def test_compare_on_a_model_of_a_newer_ir_version_compares_or_says_why(capsys, small):
    """onnx's make_model writes an IR version onnxruntime may not read yet: compared anyway, or a clear refusal."""
    pytest.importorskip("onnxruntime")
    model = onnx.load(str(small))
    model.ir_version = 14
    onnx.save(model, str(small))
    status, out, err = _main(capsys, "run", small, "--compare", "onnxruntime")
    assert "Traceback" not in out + err
    assert (status == 0 and "max abs error" in out) or (status == 1 and "onnxruntime cannot load" in err)


# --- a seeded fuzz of the options ----------------------------------------------------------------------------------
def _option_pool(tmp_path: Path, small: Path) -> dict:
    """Each option's values, good and bad: files of every kind, shapes, devices, paths that cannot be written."""
    good = tmp_path / "x.npy"
    np.save(good, np.ones((2, 4), np.float32))
    np.save(tmp_path / "f64.npy", np.ones((2, 4)))
    np.save(tmp_path / "wide.npy", np.ones((2, 5), np.float32))
    np.save(tmp_path / "ints.npy", np.ones((2, 4), np.int64))
    np.save(tmp_path / "scalar.npy", np.float32(1))
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    (tmp_path / "text.npy").write_text("not an array")
    (tmp_path / "cut.npy").write_bytes(good.read_bytes()[:60])
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("x")
    (tmp_path / "cut.onnx").write_bytes(small.read_bytes()[:50])
    (tmp_path / "empty.onnx").write_bytes(b"")
    files = ["x.npy", "f64.npy", "wide.npy", "ints.npy", "scalar.npy", "obj.npy", "text.npy", "cut.npy", "adir",
             "none.npy", "afile"]
    return {
        "model": [small, small, small, tmp_path / "cut.onnx", tmp_path / "empty.onnx", tmp_path / "adir",
                  tmp_path / "none.onnx", "/dev/null"],
        "--input": [f"x={tmp_path / f}" for f in files] + ["x", "=a.npy", "y=" + str(good), "x=", "x=\0"],
        "--shape": ["x=3,4", "x=-1,4", "x=0,4", "x=1e3,4", "x=a", "x=", "x=99999999999,4", "x=2**70,4", "y=1,4",
                    "x=1,2,3,4,5", "x=,,", "x=1" + ",1" * 70, "x=３,4", "x=2,3"],
        "--device": ["cpu", "cpu:0", "cpu:1", "opencl:0", "opencl:99", "", "nodev:0", "cpu:-1", "cpu:x", ":0",
                     "cpu:0:0", "CPU", "é:0", "cpu:" + "9" * 30],
        "--seed": ["0", "-1", str(2 ** 70), "x", "1.5", str(-2 ** 70)],
        "--bench": ["1", "0", "-3", "x", "2"],
        "--compare": ["onnxruntime", "torch"],
        "--profile": [tmp_path / "t.json", tmp_path / "adir", tmp_path / "afile" / "t.json", "/nonexistent/t.json",
                      "/proc/t.json", tmp_path / "new" / "t.json", ""],
        "--save-outputs": [tmp_path / "out", tmp_path / "afile", "/proc/out", "/dev/null", tmp_path / "a" / "b", ""],
        "--no-subgraphs": [None],
    }


def test_seeded_fuzz_of_run_options_never_prints_a_traceback(capsys, small, tmp_path):
    """Random mixes of good and bad option values: each run exits 0, or exits non-zero with a message that starts
    `hwadapter run:` (argparse's usage line for what argparse refuses), and never raises or prints a traceback."""
    rng = np.random.default_rng(22)
    pool = _option_pool(tmp_path, small)
    options = [k for k in pool if k != "model"]
    failures, outcomes = [], {"ok": 0, "refused": 0}
    for case in range(120):
        model = pool["model"][rng.integers(len(pool["model"]))]
        argv = ["run", str(model)]
        for opt in rng.choice(options, size=rng.integers(0, 4), replace=False):
            value = pool[opt][rng.integers(len(pool[opt]))]
            argv += [opt] if value is None else [opt, str(value)]
        try:
            status = cli.main(argv)
        except SystemExit as exit_:  # argparse refusing an option's type or choice: its usage line, status 2
            status = exit_.code
        except BaseException as err:  # noqa: BLE001 - what the fuzz looks for
            failures.append(f"{argv}: raised {type(err).__name__}: {err}")
            continue
        out = capsys.readouterr()
        text = out.out + out.err
        if "Traceback" in text or not isinstance(status, int):
            failures.append(f"{argv}: status {status!r}, printed a traceback:\n{text[-800:]}")
        elif status != 0 and not (out.err.lstrip().startswith("hwadapter run:") or "usage:" in out.err):
            failures.append(f"{argv}: status {status} without a message saying why:\n{text[-800:]}")
        else:
            outcomes["ok" if status == 0 else "refused"] += 1
    assert not failures, f"{len(failures)} of 120 cases:\n" + "\n".join(failures[:10])
    assert outcomes["ok"] >= 10 and outcomes["refused"] >= 30, outcomes  # the mix exercises both


def test_a_negative_declared_dim_is_open_and_takes_its_shape(capsys, tmp_path):
    """-1 (any negative) in a declared input shape is a dynamic dim, as onnxruntime reads it: --shape sets it."""
    path = _small_model(tmp_path / "m.onnx", batch=1)
    model = onnx.load(str(path))
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = -1
    onnx.save(model, str(path))
    status, out, err = _main(capsys, "run", path, "--shape", "x=3,4", "--save-outputs", tmp_path / "o")
    assert status == 0, err
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(np.load(tmp_path / "o" / "z.npy"), _oracle(x), rtol=1e-6)
