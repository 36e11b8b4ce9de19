"""A test plugin whose runtime breaks its contract on request, for tests/test_plugin_misbehaviour.py.

Not on sys.path unless a test puts this directory there. One entry point, misb (distribution hwadapter-misbehave 0.1):
one device with separate memory (numpy byte arrays) and no kernels, right in every call until HWT_MISBEHAVE names a
fault (read at each call, so a child process such as `hwadapter doctor`'s sees it too):

allocate_none, allocate_raises, allocate_memoryerror, copy_h2d_raises, copy_d2h_raises, copy_d2h_wrong, free_raises,
properties_raises, properties_wrong, synchronize_raises, runtime_none, runtime_int, runtime_raises, many_devices.
"""
from __future__ import annotations

import os

from hwadapter.plugin import DeviceProperties, HostBufferRuntime, Plugin


def _fault() -> str:
    return os.environ.get("HWT_MISBEHAVE", "")


class MisbehavingRuntime(HostBufferRuntime):
    """HostBufferRuntime, each call broken as HWT_MISBEHAVE says."""

    def properties(self):
        if _fault() == "properties_raises":
            raise KeyError("vendor_name")
        if _fault() == "properties_wrong":
            return {"name": "misb"}
        return DeviceProperties(name="misbehaving device", vendor="hwadapter tests", total_memory=1 << 24)

    def allocate(self, nbytes):
        if _fault() == "allocate_none":
            return None
        if _fault() == "allocate_raises":
            raise ValueError("acme_malloc: bad pool")
        if _fault() == "allocate_memoryerror":
            raise MemoryError()
        return super().allocate(nbytes)

    def free(self, handle):
        if _fault() == "free_raises":
            raise RuntimeError("acme_free: double free")

    def copy_h2d(self, dst, dst_offset, src, stream=None):
        if _fault() == "copy_h2d_raises":
            raise OSError("DMA engine timeout")
        super().copy_h2d(dst, dst_offset, src, stream)

    def copy_d2h(self, dst, src, src_offset, stream=None):
        if _fault() == "copy_d2h_raises":
            raise OSError("DMA engine timeout")
        super().copy_d2h(dst, src, src_offset, stream)
        if _fault() == "copy_d2h_wrong":
            dst.reshape(-1).view("uint8")[:] = 0

    def synchronize(self):
        if _fault() == "synchronize_raises":
            raise RuntimeError("acme_sync: device lost")


class MisbehavingPlugin(Plugin):
    """misb:0; misb:0..misb:999999999 under many_devices."""

    api_version = (2, 0)

    def device_count(self):
        return 10 ** 9 if _fault() == "many_devices" else 1

    def create_runtime(self, index):
        if _fault() == "runtime_none":
            return None
        if _fault() == "runtime_int":
            return 7
        if _fault() == "runtime_raises":
            raise OSError(f"acme_open({index}) failed")
        return MisbehavingRuntime(index)

    def register_kernels(self, kernels):
        pass  # ops fall back; the runtime is what these tests break
