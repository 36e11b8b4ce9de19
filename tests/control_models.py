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
