"""Per-op overhead of a small `add` and the latency of an MLP and a small CNN on a bridged Paddle device, against
Paddle's own CPU in the same run.

    hwadapter paddle install cdemo --dir /tmp/pd
    CUSTOM_DEVICE_ROOT=/tmp/pd python benchmarks/paddle_overhead.py [cdemo:0]

With the kernels library installed, `add` (float32) on the device is a phi kernel calling the device library's C
kernel; `subtract` has no kernel in cdemo, so it shows the price of Paddle's CPU fallback (its kernel plus the copies
through the device library) in the same run. The MLP (Linear, ReLU) runs matmul and add on the device's kernels and
relu through the fallback. The small CNN (tests/test_paddle_reference.py's: Conv2D, BatchNorm2D, ReLU, MaxPool2D,
Conv2D, ReLU, Flatten, Linear; batch 2, 3x12x12) runs conv2d, pool2d, add and matmul on the device's kernels where it
has them (hwa_cpu: the cpu plugin's Python kernels), batch_norm and relu through the fallback. Installed with
--runtime-only, every op on the device falls back.

Under to_static, Paddle's executor starts and joins a thread for each device event between a device op and a
fallback op (docs/paddle-bridge.md, Limits): compare a run with FLAGS_new_executor_serial_run=1 in the environment.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import paddle
from rich.progress import track

sys.path.insert(0, str(Path(__file__).parent))
from _util import best_seconds, table  # noqa: E402


def mlp():
    """The MLP (64-256-256-10, ReLU; eval mode), seeded alike on every device."""
    paddle.seed(0)
    net = paddle.nn.Sequential(paddle.nn.Linear(64, 256), paddle.nn.ReLU(), paddle.nn.Linear(256, 256),
                               paddle.nn.ReLU(), paddle.nn.Linear(256, 10))
    net.eval()
    return net


def cnn():
    """The small CNN of tests/test_paddle_reference.py (eval mode) and its input, on the current device."""
    paddle.seed(11)
    net = paddle.nn.Sequential(paddle.nn.Conv2D(3, 8, 3, padding=1), paddle.nn.BatchNorm2D(8), paddle.nn.ReLU(),
                               paddle.nn.MaxPool2D(2), paddle.nn.Conv2D(8, 4, 3), paddle.nn.ReLU(),
                               paddle.nn.Flatten(), paddle.nn.Linear(4 * 4 * 4, 5))
    net.eval()
    return net, paddle.to_tensor(np.random.default_rng(1).standard_normal((2, 3, 12, 12)).astype("float32"))


def cases():
    """(name, fn) on the current device: each a call to time."""
    a = paddle.to_tensor(np.ones(16, "float32"))
    b = paddle.to_tensor(np.ones(16, "float32"))
    net, static_net = mlp(), paddle.jit.to_static(mlp(), full_graph=True)  # to_static converts in place: its own
    x = paddle.to_tensor(np.random.default_rng(0).standard_normal((32, 64)).astype("float32"))
    cnn_net, image = cnn()
    return [("add float32[16]", lambda: paddle.add(a, b)), ("subtract float32[16]", lambda: paddle.subtract(a, b)),
            ("MLP eager", lambda: net(x)), ("MLP to_static", lambda: static_net(x)),
            ("MLP + .numpy()", lambda: net(x).numpy()), ("CNN eager", lambda: cnn_net(image))]


def main(device: str) -> None:
    types = paddle.device.get_all_custom_device_type()
    print(f"paddle {paddle.__version__}; custom devices {types}")
    if device.split(":")[0] not in types:
        sys.exit(f"{device} is not a Paddle device in this process (custom devices: {types}). Fix: `hwadapter paddle "
                 f"install <type> --dir DIR` (cdemo: after `pip install examples/native_plugin`), then run with "
                 f"CUSTOM_DEVICE_ROOT=DIR")
    seconds = {}
    for place in ("cpu", device):
        paddle.set_device(place)
        with paddle.no_grad():
            for name, fn in track(cases(), description=f"timing on {place}", transient=True):
                seconds[place, name] = best_seconds(fn)
    rows = [[name, f"{seconds['cpu', name] * 1e6:.1f}", f"{seconds[device, name] * 1e6:.1f}",
             f"{seconds[device, name] / seconds['cpu', name]:.1f}x"] for place, name in seconds if place == "cpu"]
    table(f"{device} against Paddle's CPU (µs per call, best of 5)", ["", "Paddle CPU", device, "ratio"], rows)
    print("On the device, add and subtract run a registered kernel where `hwadapter paddle status` lists one (cdemo: "
          "a C kernel for add only, so its subtract shows Paddle's CPU fallback), else the fallback.")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cdemo:0")
