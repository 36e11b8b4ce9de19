"""hwadapter as an ONNX backend (onnx.backend.base.Backend): prepare a model for a device list, run it."""
from __future__ import annotations

import onnx.backend.base as base

from ..api.errors import HwAdapterError
from ..runtime.device import devices as registry
from .model import OnnxModel
from .reader import read_model

#: onnx's device names (onnx.backend.base.DeviceType) -> hwadapter device types.
_ONNX_DEVICES = {"CPU": "cpu", "CUDA": "cuda"}


def devices_for(device: str) -> list:
    """The hwadapter device list for an onnx device string ("CPU", "CUDA:0") or a hwadapter one ("opencl:0")."""
    name = str(device)
    kind, _, index = name.partition(":")
    kind = _ONNX_DEVICES.get(kind.upper(), kind.lower())
    dev = f"{kind}:{index}" if index else kind
    return [dev] if kind == "cpu" else [dev, "cpu"]


class HwAdapterRep(base.BackendRep):
    """A prepared model: `run(inputs)` returns the outputs in the model's output order."""

    def __init__(self, model: OnnxModel, devices: list):
        self.model, self.devices = model, devices

    def run(self, inputs, **kwargs):
        if not isinstance(inputs, (list, tuple, dict)):
            inputs = [inputs]
        return tuple(self.model.run(inputs, devices=self.devices))


class HwAdapterBackend(base.Backend):
    """onnx's Backend API over hwadapter devices: "CPU", "CUDA" and every plugin's device strings."""

    @classmethod
    def prepare(cls, model, device: str = "CPU", **kwargs) -> HwAdapterRep:
        devices = devices_for(device)
        for d in devices:
            registry.get(d)  # an unknown or unusable device fails here, naming it, before the model is converted
        proto = read_model(model)
        m = OnnxModel(proto, kwargs.get("input_shapes"))
        if any(dims is None and name not in m.input_shapes for name, (dims, _) in m.declared().items()):
            return HwAdapterRep(m, devices)  # an input of unknown rank: converted when it first runs
        # convert now: an unsupported op or attribute fails in prepare, before anything runs; a model whose
        # conversion needs an input's value (a shape fed as an input) is converted at run, per value
        m.conversion()
        return HwAdapterRep(m, devices)

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            registry.get(devices_for(device)[0])
        except HwAdapterError:
            return False
        return True


prepare = HwAdapterBackend.prepare
run_model = HwAdapterBackend.run_model
supports_device = HwAdapterBackend.supports_device
