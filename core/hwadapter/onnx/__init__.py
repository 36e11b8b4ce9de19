"""ONNX models on hwadapter devices: `load` imports a model as graphs, `backend` is onnx's Backend API, `save` exports.

The onnx package is needed only here (`pip install hwadapter[onnx]`); `import hwadapter` never imports it.
"""
from __future__ import annotations

from .model import OnnxModel, load

__all__ = ["OnnxModel", "load"]
