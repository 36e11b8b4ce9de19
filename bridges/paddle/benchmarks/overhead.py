"""Per-op overhead of a small `add` and an MLP's latency on a bridged device against Paddle's own CPU, same run.

    hwadapter paddle install cdemo --dir /tmp/pd && CUSTOM_DEVICE_ROOT=/tmp/pd python bridges/paddle/benchmarks/overhead.py [cdemo:0]

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

import numpy as np
import paddle
from timing import per_call


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


def main(device: str) -> None:
    types = paddle.device.get_all_custom_device_type()
    print(f"paddle {paddle.__version__}; custom devices {types}")
    if device.split(":")[0] not in types:
        sys.exit(f"{device} is not a Paddle device in this process (custom devices: {types}). Fix: `hwadapter paddle "
                 f"install <type> --dir DIR` (cdemo: after `pip install examples/native_plugin`), then run with "
                 f"CUSTOM_DEVICE_ROOT=DIR")
    rows = []
    for place in ("cpu", device):
        paddle.set_device(place)
        a = paddle.to_tensor(np.ones(16, "float32"))
        b = paddle.to_tensor(np.ones(16, "float32"))
        add = per_call(lambda: paddle.add(a, b), 5000)
        sub = per_call(lambda: paddle.subtract(a, b), 2000)
        net = mlp()
        x = paddle.to_tensor(np.random.default_rng(0).standard_normal((32, 64)).astype("float32"))
        with paddle.no_grad():
            eager = per_call(lambda: net(x), 500)
            round_trip = per_call(lambda: net(x).numpy(), 500)
            static_net = paddle.jit.to_static(mlp(), full_graph=True)  # a net of its own: to_static converts in place
            static = per_call(lambda: static_net(x), 500)
            cnn_net, image = cnn()
            conv = per_call(lambda: cnn_net(image), 200)
        rows.append((place, add, sub, eager, static, round_trip, conv))
    print(f"{'device':10} {'add [16] us':>12} {'subtract [16] us':>17} {'MLP eager us':>13} {'MLP to_static us':>17} "
          f"{'MLP + .numpy() us':>18} {'CNN eager us':>13}")
    for place, add, sub, eager, static, rt, conv in rows:
        print(f"{place:10} {add * 1e6:12.1f} {sub * 1e6:17.1f} {eager * 1e6:13.1f} {static * 1e6:17.1f} "
              f"{rt * 1e6:18.1f} {conv * 1e6:13.1f}")
    print("On the device, add and subtract run a registered kernel where `hwadapter paddle status` lists one (cdemo: "
          "a C kernel for add only, so its subtract shows Paddle's CPU fallback), else the fallback.")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cdemo:0")
