"""The training demo: a small CNN trained on scikit-learn's digits for a few seconds on every available device, each
step one captured to_static plan (forward, backward, Adam update); the test accuracy per device in a table, and the
loss curves as a picture (build/demo/loss_curves.svg).

    python examples/train_digits.py [--seconds S] [--device D ...]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

import hwadapter as hw
from hwadapter import nn, optimizer

console = Console(width=max(Console().width, 120))
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def digits():
    """(train x, train y, test x, test y): 8x8 images in [0, 1] as (N, 1, 8, 8) float32, int64 labels; the last
    quarter of the shuffled set is the test set."""
    from sklearn.datasets import load_digits  # lazy: scikit-learn is needed by the demo only
    d = load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))
    x = (d.images[order] / 16.0).astype("float32")[:, None]
    y = d.target[order].astype("int64")
    cut = len(y) * 3 // 4
    return x[:cut], y[:cut], x[cut:], y[cut:]


def cnn():
    return nn.Sequential(nn.Conv2D(1, 16, 3, padding=1), nn.BatchNorm2D(16), nn.ReLU(), nn.MaxPool2D(2),
                         nn.Flatten(), nn.Linear(16 * 4 * 4, 10))


def train(device: str, seconds: float, data) -> dict:
    """Train on `device` for about `seconds` (whole epochs): {losses (per step), accuracy, steps, seconds}."""
    hw.set_device(device)
    hw.seed(0)
    xtr, ytr, xte, yte = data
    model = cnn()
    opt = optimizer.Adam(learning_rate=3e-3, parameters=model.parameters())
    loss_fn = nn.CrossEntropyLoss()

    @hw.jit.to_static
    def train_step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.clear_grad()
        return loss

    loader = hw.io.DataLoader(hw.io.TensorDataset([xtr, ytr]), batch_size=64, shuffle=True, drop_last=True,
                              seed=0)
    losses, start = [], time.perf_counter()
    while time.perf_counter() - start < seconds or not losses:
        model.train()
        for x, y in loader:
            losses.append(train_step(x.to(device), y.to(device)))
        losses = [float(v) if not isinstance(v, float) else v for v in losses]  # one read-back per epoch
    took = time.perf_counter() - start
    model.eval()
    with hw.no_grad():
        logits = model(hw.to_tensor(xte, device=device))
    accuracy = float((logits.numpy().argmax(-1) == yte).mean())
    return {"losses": losses, "accuracy": accuracy, "steps": len(losses), "seconds": took}


def loss_svg(curves: dict, path: Path) -> None:
    """The loss curves (one line per device, smoothed over 10 steps) as an SVG picture."""
    w, h, pad = 640, 360, 48
    longest = max(len(c) for c in curves.values())
    top = max(max(c) for c in curves.values())
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="12"><rect width="100%" height="100%" fill="white"/>',
             f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">digits CNN: training loss per step</text>',
             f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad / 2}" y2="{h - pad}" stroke="black"/>',
             f'<line x1="{pad}" y1="{pad / 2 + 10}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
             f'<text x="{w / 2}" y="{h - 12}" text-anchor="middle">step</text>',
             f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">loss</text>']
    for frac in (0, 0.5, 1):
        y = h - pad - frac * (h - 1.5 * pad - 10)
        parts.append(f'<text x="{pad - 6}" y="{y + 4}" text-anchor="end">{top * frac:.2f}</text>')
        steps = int(frac * (longest - 1))
        x = pad + frac * (w - 1.5 * pad)
        parts.append(f'<text x="{x}" y="{h - pad + 16}" text-anchor="middle">{steps}</text>')
    for i, (name, c) in enumerate(curves.items()):
        smooth = np.convolve(c, np.ones(10) / 10, mode="valid") if len(c) > 10 else np.asarray(c)
        pts = " ".join(f"{pad + j / max(longest - 1, 1) * (w - 1.5 * pad):.1f},"
                       f"{h - pad - v / top * (h - 1.5 * pad - 10):.1f}" for j, v in enumerate(smooth))
        color = COLORS[i % len(COLORS)]
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>')
        parts.append(f'<text x="{w - pad * 3}" y="{40 + 16 * i}" fill="{color}">{name}</text>')
    parts.append("</svg>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts))


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--device", action="append")
    ap.add_argument("--out", default="build/demo/loss_curves.svg")
    args = ap.parse_args(argv)
    data = digits()
    devices = args.device or list(hw.device.get_available_device())
    table = Table("device", "steps", "seconds", "steps/s", "final loss", "test accuracy",
                  title="digits CNN (conv-bn-relu-pool-linear), Adam, batch 64, each step one to_static plan")
    results = {}
    with console.status("training") as status:
        for d in devices:
            status.update(f"training on {d}")
            r = results[d] = train(d, args.seconds, data)
            table.add_row(d, str(r["steps"]), f"{r['seconds']:.1f}", f"{r['steps'] / r['seconds']:.0f}",
                          f"{np.mean(r['losses'][-10:]):.3f}", f"{r['accuracy']:.1%}")
    console.print(table)
    path = Path(args.out)
    loss_svg({d: r["losses"] for d, r in results.items()}, path)
    console.print(f"loss curves: {path}")
    return results


if __name__ == "__main__":
    main()
