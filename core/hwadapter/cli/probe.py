"""The parent side of plugin probes: each plugin loaded and checked in a child process with a time limit."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from hwadapter.api.config import PROBE_TIMEOUT, config, probe_timeout
from hwadapter.api.errors import HwAdapterError
from hwadapter.runtime.discovery import FAILED, PluginRecord, registry

from .common import _check, _positive_seconds, plugin_info
from .probe_child import _BOOT, _PROTOCOL, _STEPS


def _child_env() -> dict:
    env = dict(os.environ)
    env.update(HWADAPTER_PLUGINS=",".join(config.plugins), HWADAPTER_DISABLE_PLUGINS=",".join(config.disable_plugins),
               HWADAPTER_FALLBACK_DEVICE=config.fallback_device, HWADAPTER_FALLBACK=config.fallback)
    return env


class _Probe:
    """One child process checking one plugin; its output goes to files, so a chatty plugin cannot block it."""

    def __init__(self, name: str, limit: float):
        self.name, self.limit = name, limit
        self.out, self.err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self.deadline = time.monotonic() + limit
        self.proc = subprocess.Popen([sys.executable, "-c", _BOOT, json.dumps(sys.path), name, repr(self.deadline)],
                                     stdin=subprocess.DEVNULL, stdout=self.out, stderr=self.err, env=_child_env(),
                                     start_new_session=True)  # its own group: a timeout kills what it started too
        self.timed_out = False

    def poll(self) -> bool:
        """True once the child has ended (killing it when past its deadline)."""
        if self.proc.poll() is not None:
            return True
        if time.monotonic() < self.deadline:
            return False
        self.timed_out = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        return True

    def result(self) -> dict:
        """The child's report, or a failed record saying how and where it died."""
        messages, stderr = _messages(self.out), _read(self.err)
        done = [payload for kind, payload in messages if kind == "result"]
        if done and self.proc.returncode == 0 and not self.timed_out:
            return done[-1]
        stages = [payload for kind, payload in messages if kind == "stage"]
        return self._died(stages[-1] if stages else "start", stderr)

    def _died(self, stage: str, stderr: str) -> dict:
        record = PluginRecord(self.name, registry.entry_points().get(self.name, "?"), FAILED)
        step, rc = _STEPS.get(stage, stage), self.proc.returncode
        disable = (f"until then, keep it out of every process with HWADAPTER_DISABLE_PLUGINS={self.name} (a disabled "
                   f"plugin is never imported)")
        if self.timed_out:
            record.cause = f"the plugin did not finish {step} within {self.limit:g} s: it hangs or is very slow"
            record.fix = (f"check the device and its driver (a hung driver, a device held by another process); if it "
                          f"is only slow, raise the limit with HWADAPTER_PROBE_TIMEOUT=<seconds> (or --timeout); "
                          f"{disable}")
        else:
            how = (f"crashed the Python process in {step} (killed by signal {_signal_name(-rc)})" if rc < 0 else
                   f"ended the Python process in {step} (exit status {rc})")
            record.cause = f"the plugin {how}"
            record.fix = (f"a bug in the plugin or its driver: report it to the plugin's vendor with the stack from "
                          f"`hwadapter doctor --verbose`; {disable}")
        return plugin_info(record) | {"details": stderr[-6000:], "checks": []}


def _read(file) -> str:
    file.seek(0)
    text = file.read().decode(errors="replace")
    file.close()
    return text


def _messages(file) -> list:
    """The [kind, payload] lines the child wrote (anything else there is ignored)."""
    out = []
    for line in _read(file).split("\n"):  # not splitlines(): it would split at the protocol's \x1e too
        if line.startswith(_PROTOCOL):
            try:
                kind, payload = json.loads(line[len(_PROTOCOL):])
            except ValueError:
                continue
            out.append((kind, payload))
    return out


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return str(number)


def _settle(info: dict) -> dict:
    """A plugin that loads but fails a check at first use is failed, with that check as its cause."""
    fails = [c for c in info.get("checks", []) if c[0] == "FAIL"]
    if info["status"] == "ok" and fails:
        info["status"], info["cause"], info["fix"] = FAILED, fails[0][1], fails[0][2]
        info["checks"] = [c for c in info["checks"] if c is not fails[0]]
        info["device_count"], info["devices"] = 0, []
    return info


def probe_all(limit: float) -> list[dict]:
    """Every plugin's info, sorted by type: refused ones decided here, the rest loaded and checked in child processes
    (several at a time), each stopped after `limit` seconds."""
    infos, waiting = [], []
    for name in registry.entry_points():
        refused = registry.precheck(name)
        if refused is not None:
            infos.append(plugin_info(refused) | {"details": refused.details, "checks": []})
        else:
            waiting.append(name)
    running: list[_Probe] = []
    slots = max(4, os.cpu_count() or 1)
    while waiting or running:
        while waiting and len(running) < slots:
            running.append(_Probe(waiting.pop(0), limit))
        for probe in [p for p in running if p.poll()]:
            running.remove(probe)
            infos.append(probe.result())
        if running:
            time.sleep(0.02)
    return sorted((_settle(i) for i in infos), key=lambda i: i["type"])


def _probe_limit(args, notes: list) -> float:
    if getattr(args, "timeout", None) is not None:
        return args.timeout
    try:
        return probe_timeout()
    except HwAdapterError as err:
        notes.append(_check("FAIL", str(err), err.fix))
        return PROBE_TIMEOUT


def _add_timeout(p) -> None:
    p.add_argument("--timeout", type=_positive_seconds, metavar="SECONDS",
                   help="time limit for each plugin's probe (default: HWADAPTER_PROBE_TIMEOUT, else 20)")
