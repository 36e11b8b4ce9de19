"""Trains small Paddle models on one device and writes their losses and final parameters as JSON.

Run by tests/test_paddle_training.py (and benchmarks/paddle_overhead.py) in a child process, on a bridged device and on
Paddle's CPU alike: argv = OUT_JSON DEVICE CASES STEPS, CASES a comma-separated list of model:optimizer:mode
(model mlp, cnn or block; optimizer sgd or adam; mode eager or static). Weights come from numpy, so every device starts
from the same ones; the data are fixed.
"""
import json
import sys

import numpy as np
import paddle


class Block(paddle.nn.Layer):
    """A transformer block: embedding, layer norm, one attention head, a GELU feed-forward, a classifier."""

    def __init__(self, vocab=11, width=8):
        super().__init__()
        self.emb = paddle.nn.Embedding(vocab, width)
        self.ln = paddle.nn.LayerNorm(width)
        self.q, self.k, self.v = (paddle.nn.Linear(width, width) for _ in range(3))
        self.ff1, self.ff2 = paddle.nn.Linear(width, 2 * width), paddle.nn.Linear(2 * width, width)
        self.gelu = paddle.nn.GELU()
        self.head = paddle.nn.Linear(width, 5)
        self.scale = width ** -0.5

    def forward(self, ids):
        h = self.ln(self.emb(ids))
        att = paddle.nn.functional.softmax(paddle.matmul(self.q(h), self.k(h), transpose_y=True) * self.scale, axis=-1)
        h = h + paddle.matmul(att, self.v(h))
        h = h + self.ff2(self.gelu(self.ff1(h)))
        return self.head(h.mean(axis=1))


def build(model):
    if model == "mlp":
        return paddle.nn.Sequential(paddle.nn.Linear(8, 16), paddle.nn.ReLU(), paddle.nn.Linear(16, 5))
    if model == "cnn":
        return paddle.nn.Sequential(paddle.nn.Conv2D(3, 4, 3, padding=1), paddle.nn.BatchNorm2D(4), paddle.nn.ReLU(),
                                    paddle.nn.MaxPool2D(2), paddle.nn.Conv2D(4, 6, 3), paddle.nn.ReLU(),
                                    paddle.nn.AvgPool2D(2), paddle.nn.Flatten(), paddle.nn.Linear(6, 5))
    return Block()


def data(model, batch=8):
    r = np.random.RandomState(0)
    x = {"mlp": lambda: r.rand(batch, 8).astype("float32"), "cnn": lambda: r.rand(batch, 3, 8, 8).astype("float32"),
         "block": lambda: r.randint(0, 11, (batch, 6)).astype("int64")}[model]()
    return x, (np.arange(batch) % 5).astype("int64")


def train(device, model, opt, mode, steps):
    paddle.set_device(device)
    net = build(model)
    r = np.random.RandomState(5)
    for p in net.parameters():
        p.set_value((r.rand(*p.shape) - 0.5).astype("float32"))
    optimizer = (paddle.optimizer.Adam if opt == "adam" else paddle.optimizer.SGD)(learning_rate=0.05,
                                                                                  parameters=net.parameters())
    forward = paddle.jit.to_static(net, full_graph=True) if mode == "static" else net
    x, y = (paddle.to_tensor(a) for a in data(model))
    losses = []
    for _ in range(steps):
        loss = paddle.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        losses.append(float(loss))
    return {"losses": losses, "params": [p.numpy().ravel().tolist() for p in net.parameters()]}


if __name__ == "__main__":
    out, device, cases, steps = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
    result = {case: train(device, *case.split(":"), steps) for case in cases}
    with open(out, "w") as f:
        json.dump(result, f)
