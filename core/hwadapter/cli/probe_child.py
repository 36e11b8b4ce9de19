"""The child side of a plugin probe: load one plugin, check its device 0 at first use, report to the parent."""
from __future__ import annotations

import faulthandler
import json
import os
import time

import numpy as np

from hwadapter.runtime import contract
from hwadapter.runtime.device import devices
from hwadapter.runtime.discovery import registry
from hwadapter.runtime.memory import DeviceArray

from .common import _check, codegen_status, level_words, plugin_info

_PROTOCOL = "\x1ehwadapter-probe "  # starts every line the child writes for the parent
#: What the child was doing at each stage it reports, for the message when it never finished.
_STEPS = {"start": "starting the probe (before the plugin was imported)", "import": "the import of its module",
          "construct": "its constructor", "device_count": "device_count()", "create_runtime": "create_runtime(0)",
          "round_trip": "properties() and allocate/copy/free on device 0",
          "register_kernels": "register_kernels", "codegen_backend": "codegen_backend() / available()",
          "subgraph_backend": "subgraph_backend()", "report": "reporting its result"}
_BOOT = ("import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
         "from hwadapter.cli.probe_child import probe_main; sys.exit(probe_main(sys.argv[2], float(sys.argv[3])))")
#: Seconds before its deadline a probe prints its stack, so a hang says where it hangs.
_DUMP_MARGIN = 1.0


def _deep_checks(record, stage) -> tuple[list, dict]:
    """What device 0 of an ok plugin does at first use: its runtime, kernels (op names and dtypes checked by the
    registrar), compiler and subgraph backends. Returns (checks as [level, message, fix], facts for the settings)."""
    checks, facts, levels = [], {"kernels": None, "host_memory": None}, level_words(record.levels)
    if not levels:
        checks.append(_check("FAIL", "the plugin provides no level: it overrides none of register_kernels (op), "
                                     "codegen_backend or subgraph_backend, so no op could run on it",
                             "implement at least one level (docs/vendor-guide.md); a plugin bug: report it to "
                             "its vendor"))
    dev = devices.get(f"{record.name}:0")
    stage("create_runtime")
    try:
        facts["host_memory"] = bool(dev.runtime.host_memory)
    except Exception as err:
        checks.append(_failed("create_runtime(0) failed", err, "check the device's driver; if it is fine, report "
                                                               "this to the plugin's vendor"))
        return checks, facts
    stage("round_trip")
    checks += _round_trip(dev)
    if "op" in levels:
        stage("register_kernels")
        try:
            facts["kernels"] = len(dev.kernels.ops())
        except Exception as err:
            checks.append(_failed("register_kernels failed", err, "a plugin bug: report it to its vendor"))
    if "compiler" in levels:
        stage("codegen_backend")
        facts["codegen"], check = _codegen_check(record)
        checks.append(check)
    if "subgraph" in levels:
        stage("subgraph_backend")
        checks += _subgraph_checks(dev)
    return checks, facts


def _round_trip(dev) -> list:
    """What every tensor of the device does, through the core's checked calls: properties(), then (separate memory)
    allocate, copy to the device and back, free. A plugin whose allocate returns None fails here, not in the user's
    process."""
    try:
        dev.properties()
        if not dev.host_memory:
            data = np.arange(64, dtype=np.float32)
            back = DeviceArray.from_numpy(dev, data).numpy()  # the block returns to the cache here
            dev.allocator.empty_cache()  # and to the runtime (free)
            if not np.array_equal(back, data):
                raise contract.broken(dev, "Runtime.copy_h2d() then copy_d2h()", "gave back other values than were "
                                           f"copied ({back[:4].tolist()}... for {data[:4].tolist()}...)")
    except Exception as err:
        return [_failed("the runtime failed the round trip (properties, allocate, copy to the device and back, free)",
                        err, "a plugin bug: report it to its vendor")]
    return []


def _failed(what: str, err: Exception, fix: str) -> list:
    return _check("FAIL", f"{what}: {err}", getattr(err, "fix", "") or fix)


def _codegen_check(record) -> tuple[bool, list]:
    usable, why, ops = codegen_status(record)
    if usable:
        return True, _check("ok", f"compiler backend usable: {len(ops)} ops written in kernel primitives compile "
                                  f"for it")
    return False, _check("warn", f"compiler backend unavailable: {why}", f"see the cause; until then ops without a "
                                 f"kernel on {record.name} fall back instead of being generated")


def _subgraph_checks(dev) -> list:
    try:
        if dev.subgraph is None:
            return [_check("warn", "subgraph_backend() returned None: graphs run op by op",
                           "a plugin without a subgraph level should not override subgraph_backend")]
    except Exception as err:
        return [_check("FAIL", f"subgraph_backend() raised {type(err).__name__}: {err}",
                       "a plugin bug: report it to its vendor")]
    return []


def probe_main(name: str, deadline: float) -> int:
    """In the child: load plugin `name`, check its device 0, and write the result for the parent (`probe_all`), which
    kills it at `deadline` (time.monotonic(), the same clock in every process)."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the plugin prints goes to stderr, never into the protocol

    def send(kind: str, payload) -> None:
        protocol.write(_PROTOCOL + json.dumps([kind, payload], default=str) + "\n")
        protocol.flush()  # before the next step, which may crash the process

    faulthandler.enable()  # a crash prints the Python stack to stderr, which the parent keeps as the details
    # and so does a hang, just before the parent kills it
    faulthandler.dump_traceback_later(max(deadline - time.monotonic() - _DUMP_MARGIN, 0.1))
    stage = lambda step: send("stage", step)  # noqa: E731
    registry.on_stage = stage
    record = registry.get(name)
    info = plugin_info(record) | {"details": record.details, "checks": []}
    if record.ok:
        info["checks"], facts = _deep_checks(record, stage)
        info.update(facts)
    stage("report")
    send("result", info)
    faulthandler.cancel_dump_traceback_later()
    return 0
