"""Models with graph control flow that several test modules run (as Layers, built with hw.static.nn)."""
from __future__ import annotations

import hwadapter as hw
from hwadapter import nn


class Branchy(nn.Layer):
    """The issue's example: relu(fc1(x)) or fc1(x), by the mean of x, then fc2."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.relu = nn.Linear(4, 8), nn.Linear(8, 2), nn.ReLU()

    def forward(self, x):
        x = hw.static.nn.cond(x.mean() > 0.5, lambda: self.relu(self.fc1(x)), lambda: self.fc1(x))
        return self.fc2(x)


def nested(x, n):
    """A cond inside a while_loop's body inside a cond: n times, add x on even steps and subtract 1 on odd ones."""
    def body(i, acc):
        step = hw.static.nn.cond(i % 2 == 0, lambda: acc + x, lambda: acc - 1.0)
        return [i + 1, step]
    return hw.static.nn.cond(n > 0, lambda: hw.static.nn.while_loop(lambda i, a: i < n, body,
                                                                      [hw.to_tensor(0), x])[1],
                             lambda: x * 0.0)
