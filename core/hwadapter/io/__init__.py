"""Data for training: `Dataset`, `TensorDataset` and `DataLoader`, with paddle.io's names and semantics."""
from __future__ import annotations

from .collate import default_collate_fn
from .dataset import Dataset, TensorDataset
from .loader import DataLoader

__all__ = ["Dataset", "TensorDataset", "DataLoader", "default_collate_fn"]
