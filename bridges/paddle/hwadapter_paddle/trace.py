"""`hwadapter paddle trace -- COMMAND`: run a Paddle script and say, per phi kernel, how many calls ran on each
bridged device and how many fell back to Paddle's CPU.

Device calls come from the kernels libraries' own counters (hwadapter_paddle_kernel_counts), read at the exit of
every traced Python process by a sitecustomize this module puts first on the child's PYTHONPATH (an existing one
still runs after it). Fallbacks come from Paddle's log, read from the child's stderr here: eager mode logs each
fallback call at VLOG(3) in kernel_factory.cc; a static program (paddle.jit.to_static) picks its kernels once, when
pd_op_to_kernel_pass lowers it (VLOG(6)), so its fallbacks are counted as ops of a program, each run once per step.
Both levels are raised with glog's SetVLOGLevel after `import paddle`: a GLOG_vmodule naming both is longer than 15
characters, which paddlepaddle 3.3.1 frees twice at exit (docs/paddle-bridge.md, "GLOG_vmodule").
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from . import kernels as _kernels, optable
from .bridge import MANIFEST, read_manifest

#: Exit status of --strict when any kernel fell back.
STRICT_STATUS = 3
OUT_ENV = "HWADAPTER_PADDLE_TRACE_OUT"

# The child's side, self-contained: the traced Python need not have hwadapter_paddle importable.
SITECUSTOMIZE = r'''"""hwadapter paddle trace: kernel counters written at exit, Paddle's kernel-selection log on."""
import os, sys


def _hwa_trace():
    import atexit
    out, pid, notes = os.environ.get("HWADAPTER_PADDLE_TRACE_OUT"), os.getpid(), []
    here = os.path.dirname(os.path.abspath(__file__))

    def loaded():
        found = set()
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split(None, 5)[5].strip() if len(line.split(None, 5)) == 6 else ""
                name = os.path.basename(path)
                if name.startswith("libhwadapter_paddle_") and name.endswith((".kernels", ".pykernels")):
                    found.add(path)
        return sorted(found)

    def write():
        if not out or os.getpid() != pid:  # a forked child holds a copy of the parent's counters
            return
        import ctypes, json
        libraries = []
        for path in loaded():
            try:
                lib = ctypes.CDLL(path)
                info, counts = lib.hwadapter_paddle_kernels_info, lib.hwadapter_paddle_kernel_counts
                info.restype = counts.restype = ctypes.c_char_p
                libraries.append({"path": path, "info": info().decode(errors="replace"),
                                  "counts": counts().decode(errors="replace")})
            except (OSError, AttributeError) as err:
                libraries.append({"path": path, "error": str(err)})
        try:
            with open(os.path.join(out, "%d.json" % pid), "w") as f:
                json.dump({"pid": pid, "argv": sys.argv, "libraries": libraries, "notes": notes}, f)
        except OSError:  # a process that outlived the traced command: its folder is gone
            pass

    def raise_vlog():
        """kernel_factory (eager fallbacks) to 3, pd_op_to_kernel_pass (static selection) to 6."""
        import ctypes
        try:
            lib = ctypes.CDLL(sys.modules["paddle.base.libpaddle"].__file__)
            set_level = lib._ZN6google12SetVLOGLevelEPKci
            set_level.argtypes, set_level.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
            set_level(b"kernel_factory", 3)
            set_level(b"pd_op_to_kernel_pass", 6)
        except Exception as err:
            notes.append("static-graph kernel selection not logged (glog's SetVLOGLevel: %s)" % err)

    class Hook:
        """Raises the log levels once `import paddle` has loaded libpaddle."""
        def find_spec(self, name, path=None, target=None):
            if name != "paddle":
                return None
            sys.meta_path.remove(self)
            import importlib.util
            spec = importlib.util.find_spec(name)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                run = spec.loader.exec_module

                def exec_module(module):
                    run(module)
                    raise_vlog()
                spec.loader.exec_module = exec_module
            return spec

    if out:
        atexit.register(write)
        if "paddle" in sys.modules:
            raise_vlog()
        else:
            sys.meta_path.insert(0, Hook())
    # The sitecustomize this one hides, if any, runs as Python would have run it.
    saved, mine = sys.path[:], sys.modules.pop("sitecustomize", None)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import importlib
        importlib.import_module("sitecustomize")
    except ModuleNotFoundError as err:
        if err.name != "sitecustomize":
            raise
        sys.modules["sitecustomize"] = mine
    finally:
        sys.path[:] = saved


_hwa_trace()
del _hwa_trace
'''

# glog's prefix: severity, date, time, thread id, file:line]
_GLOG = re.compile(r"^([IWEF])\d{4} \d\d:\d\d:\d\d\.\d+\s+(\d+) ([\w.\-]+):\d+\] ?(.*)$")
_GLOG_START = re.compile(rb"^[IWEF]\d{0,4}$|^[IWEF]\d{4} ")
_FALLBACK = re.compile(r"missing (\S+) kernel: (\S+), expected_kernel_key:\(([^,]+), [^,]+, ([^)]+)\)")
_SELECTED = re.compile(r"^\[(\S+)\] selected kernel\(is_valid: 1 \): \(([^,]+), [^,]+, ([^)]+)\)")
_PLACE = re.compile(r"Place\((\w+):\d+\)|trans from Place\(cpu\) to (\w+)")
_RAISED = ("kernel_factory.cc", "pd_op_to_kernel_pass.cc")  # files whose INFO lines only the trace asked for
_NOT_DEVICES = {"CPU", "cpu", "Undefined", "GPU", "GPUDNN", "ONEDNN", "XPU", "CUSTOM", "ALL_BACKEND"}
_SEVERITY = "IWEF"
_OP = re.compile(r"^op name pd_op\.(\w+)")
_D2H = re.compile(r"memcpy_d2h kernel_key: \((\w+),")
_INFERRED = "Infer kernel backend from input"
#: ops whose Paddle kernel is its CPU's only (paddlepaddle 3.3.1): they make the IntArray attributes (a reshape's
#: shape, a pool's kernel size) that kernels read on the host; a static program runs them there on any device.
HOST_OPS = {"full_int_array"}


@dataclass
class Kernel:
    """One phi kernel on one device type."""
    type: str
    kernel: str
    device_calls: int = 0      # its calls on the device (the kernels library's counter)
    fallback_calls: int = 0    # eager calls Paddle sent to its CPU kernel
    static_device_ops: int = 0  # ops of static programs lowered to the device's kernel
    static_fallback_ops: int = 0  # ops of static programs lowered to Paddle's CPU kernel (run once per step)
    static_placed_ops: int = 0  # CPU-selected ops without inputs, not yet judged (_drop_placed)
    dtypes: set = field(default_factory=set)
    reason: str = ""

    @property
    def fell_back(self) -> bool:
        return bool(self.fallback_calls or self.static_fallback_ops)

    def as_dict(self) -> dict:
        return {"type": self.type, "kernel": self.kernel, "device_calls": self.device_calls,
                "fallback_calls": self.fallback_calls, "static_device_ops": self.static_device_ops,
                "static_fallback_ops": self.static_fallback_ops, "dtypes": sorted(self.dtypes),
                "reason": self.reason}


@dataclass
class Report:
    """What one traced run did: per (type, kernel) counts, the command's status, the processes that reported."""
    command: list
    returncode: int
    kernels: dict = field(default_factory=dict)   # (type, kernel) -> Kernel
    processes: list = field(default_factory=list)  # each traced process's record (pid, argv, libraries)
    notes: list = field(default_factory=list)

    def kernel(self, type_: str, name: str) -> Kernel:
        return self.kernels.setdefault((type_, name), Kernel(type_, name))

    @property
    def fell_back(self) -> bool:
        return any(k.fell_back for k in self.kernels.values())

    def summary(self) -> dict:
        """Per device type: kernels that ran on it, kernels that fell back, fallback calls and static ops."""
        out: dict = {}
        for k in self.kernels.values():
            s = out.setdefault(k.type, {"device_kernels": 0, "fallback_kernels": 0, "device_calls": 0,
                                        "fallback_calls": 0, "static_fallback_ops": 0})
            s["device_kernels"] += bool(k.device_calls or k.static_device_ops)
            s["fallback_kernels"] += k.fell_back
            s["device_calls"] += k.device_calls
            s["fallback_calls"] += k.fallback_calls
            s["static_fallback_ops"] += k.static_fallback_ops
        return out

    def as_dict(self) -> dict:
        return {"command": self.command, "returncode": self.returncode, "fell_back": self.fell_back,
                "summary": self.summary(), "processes": len(self.processes), "notes": self.notes,
                "kernels": [k.as_dict() for k in sorted(self.kernels.values(), key=_order)]}


def _order(k: Kernel):
    return (k.type, not k.fell_back, k.kernel)


class LogReader:
    """Reads the child's stderr: Paddle's fallback and kernel-selection lines are counted into `report` and
    swallowed, every other line is passed to `sink` (bytes) as it comes."""

    def __init__(self, report: Report, sink, min_severity: int = 0):
        self.report, self.sink, self.min_severity = report, sink, min_severity
        self.place: dict[str, str] = {}    # thread id -> the custom type its static lowering last named
        self.pending: dict[str, list] = defaultdict(list)  # thread id -> CPU-selected ops before a type was named
        # thread id -> what the pass said of the op it is lowering: its inputs copied off a device, backend inferred
        # from its inputs (on the CPU when nothing was copied: Paddle's own placement, not a fallback)
        self.op: dict[str, dict] = defaultdict(dict)

    def feed(self, stream) -> None:
        """Read `stream` (a binary pipe) to its end; a partial line that cannot be glog's is passed on at once."""
        rest = b""
        while True:
            chunk = os.read(stream.fileno(), 65536)
            if not chunk:
                break
            lines = (rest + chunk).split(b"\n")
            rest = lines.pop()
            for line in lines:
                self.line(line + b"\n")
            if rest and not _GLOG_START.match(rest[:6]):
                self.sink(rest)
                rest = b""
        if rest:
            self.line(rest)
        self.close()

    def line(self, raw: bytes) -> None:
        m = _GLOG.match(raw.decode(errors="replace").rstrip("\n"))
        if m is None:
            self.sink(raw)
            return
        severity, thread, source, text = m.groups()
        if severity == "I" and source in _RAISED:
            self._count(thread, source, text)
            return
        if _SEVERITY.index(severity) >= self.min_severity:
            self.sink(raw)

    def _count(self, thread: str, source: str, text: str) -> None:
        fb = _FALLBACK.search(text)
        if fb:
            type_, name, _, dtype = fb.groups()
            k = self.report.kernel(type_, name)
            k.fallback_calls += 1
            k.dtypes.add(dtype.strip())
            return
        if source != "pd_op_to_kernel_pass.cc":
            return
        if _OP.search(text):
            self.op[thread] = {}
            return
        if _INFERRED in text:
            self.op[thread]["inferred"] = True
            return
        d2h = _D2H.search(text)
        if d2h and d2h.group(1) not in _NOT_DEVICES:
            self.op[thread]["copied"] = True
            return
        sel = _SELECTED.search(text)
        if sel:
            name, backend, dtype = sel.groups()
            if backend not in _NOT_DEVICES:  # lowered to a custom device's own kernel
                self.place[thread] = backend
                k = self.report.kernel(backend, name)
                k.static_device_ops += 1
                k.dtypes.add(dtype)
                self._settle(thread)
            elif backend == "CPU" and name not in HOST_OPS and (self.op[thread].get("copied")
                                                                  or not self.op[thread].get("inferred")):
                # a fallback: its inputs were copied off the device, or it has none (a `full` Paddle places on the
                # CPU by its place attribute is dropped later if the device has that kernel: _drop_placed)
                self.pending[thread].append((name, dtype, bool(self.op[thread].get("copied"))))
                if thread in self.place:
                    self._settle(thread)
            return
        for found in _PLACE.findall(text):
            type_ = found[0] or found[1]
            if type_ and type_ != "cpu":
                self.place[thread] = type_
                self._settle(thread)

    def _settle(self, thread: str) -> None:
        """CPU-selected ops of a thread that lowers programs for a custom type: its fallbacks."""
        type_ = self.place[thread]
        for name, dtype, copied in self.pending.pop(thread, []):
            k = self.report.kernel(type_, name)
            if copied:
                k.static_fallback_ops += 1
            else:
                k.static_placed_ops += 1  # no input: a fallback unless the device has the kernel (_drop_placed)
            k.dtypes.add(dtype)

    def close(self) -> None:
        self.pending.clear()  # a thread that never named a custom type lowered CPU programs: nothing fell back


def child_env(site: Path, out: Path, env: dict | None = None) -> dict:
    """The traced command's environment: our sitecustomize first on PYTHONPATH, INFO logging on."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join([str(site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env[OUT_ENV] = str(out)
    env["GLOG_minloglevel"] = "0"
    env.setdefault("GLOG_vmodule", "kernel_f*=3")  # eager fallbacks even where SetVLOGLevel fails; <= 15 chars
    return env


def run(command: list, env: dict | None = None, sink=None, report: Report | None = None) -> Report:
    """Run `command` traced; its stdout is inherited, its stderr (less Paddle's lines read here) goes to `sink`
    (default: this process's stderr), line by line and in order with the counting into `report` (a sink may read
    it as it goes: benchmarks/paddle_overhead.py counts per step). Raises OSError when the command cannot start."""
    if not command:
        raise ValueError("no command to trace: hwadapter paddle trace -- python train.py ...")
    base = dict(os.environ if env is None else env)
    try:
        min_severity = max(0, min(3, int(base.get("GLOG_minloglevel", "0"))))
    except ValueError:
        min_severity = 0
    if sink is None:
        def sink(data: bytes) -> None:
            sys.stderr.buffer.write(data)
            sys.stderr.buffer.flush()
    report = report if report is not None else Report(list(command), 0)
    with tempfile.TemporaryDirectory(prefix="hwadapter-paddle-trace-") as tmp:
        site, out = Path(tmp) / "site", Path(tmp) / "out"
        site.mkdir()
        out.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        proc = subprocess.Popen(command, env=child_env(site, out, base), stderr=subprocess.PIPE)
        reader = LogReader(report, sink, min_severity)
        thread = threading.Thread(target=reader.feed, args=(proc.stderr,), daemon=True)
        thread.start()
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the child; we wait for it
        try:
            report.returncode = proc.wait()
        finally:
            signal.signal(signal.SIGINT, previous)
        thread.join()
        proc.stderr.close()
        for path in sorted(out.glob("*.json")):
            try:
                report.processes.append(json.loads(path.read_text()))
            except (OSError, ValueError) as err:
                report.notes.append(f"a process's counters could not be read ({path.name}: {err})")
    _add_counters(report)
    _add_reasons(report, base)
    return report


def _fields(text: str) -> dict:
    return dict(part.split("=", 1) for part in text.split(";") if "=" in part)


def _add_counters(report: Report) -> None:
    for process in report.processes:
        report.notes.extend(process.get("notes") or [])
        for lib in process.get("libraries") or []:
            if "error" in lib:
                report.notes.append(f"{lib['path']}: no counters ({lib['error']})")
                continue
            type_ = _fields(lib["info"]).get("device_type", Path(lib["path"]).name)
            for name, calls in _fields(lib["counts"]).items():
                report.kernel(type_, name).device_calls += int(calls)
    if not report.processes:
        report.notes.append("no traced Python process exited normally (a process that ends with os._exit or a "
                            "signal, or runs Python with -S/-I, reports no counters)")
    elif not any(p.get("libraries") for p in report.processes):
        report.notes.append("no hwadapter-paddle kernels library was loaded: is CUSTOM_DEVICE_ROOT the shim folder "
                            "(`hwadapter paddle status`)?")


def _manifests(report: Report, env: dict) -> dict:
    """Paddle type -> its manifest entry, from the folders the kernels libraries were loaded from and
    CUSTOM_DEVICE_ROOT."""
    folders = {Path(lib["path"]).parent for p in report.processes for lib in p.get("libraries") or []}
    if env.get("CUSTOM_DEVICE_ROOT"):
        folders.add(Path(env["CUSTOM_DEVICE_ROOT"]))
    entries = {}
    for folder in folders:
        if (folder / MANIFEST).exists():
            for entry in read_manifest(folder).get("shims", {}).values():
                entries.setdefault(entry.get("paddle_type"), entry)
    return entries


def _phi_of(op: str) -> set:
    m = optable.BY_OP.get(op)
    return {p.phi for p in optable.phi_kernels(m)} if m else set()


def reason(entry: dict | None, phi: str, dtypes: set) -> str:
    """Why `phi` fell back on the type of manifest `entry`, as far as the install knows it."""
    if entry is None:
        return "not a hwadapter-paddle type in the shim folder"
    kernels = entry.get("kernels") or {}
    if not kernels.get("file"):
        return "installed without a kernels library (runtime only): " + str(kernels.get("error") or "not built")
    registered = [r for r in kernels.get("registered", []) + ((kernels.get("python") or {}).get("registered") or [])
                  if r.get("phi") == phi]
    have = {d for r in registered for d in r.get("dtypes", [])}
    if registered and dtypes - have:
        return f"registered for {', '.join(sorted(have))} only"
    for left in kernels.get("left", []) + ((kernels.get("python") or {}).get("left") or []):
        if left.get("phi") == phi or phi in _phi_of(left.get("op", "")):
            return left.get("why", "")
    mapped = [m.op for m in optable.TABLE if phi in {p.phi for p in optable.phi_kernels(m)}]
    if mapped:
        return f"the bridge maps hwadapter's {mapped[0]} to it; this plugin has no kernel for it"
    if phi in _composites():
        return "the bridge writes it in hwadapter's ops (training.py); this install did not register it: reinstall"
    return "the bridge has no kernel for it (neither optable.py nor training.py names it)"


def _composites() -> set:
    """The phi kernels training.py writes in hwadapter's ops (none where it is absent)."""
    try:
        from . import training
    except ImportError:
        return set()
    return set(getattr(training, "BY_PHI", {}))


def _drop_placed(report: Report, entries: dict) -> None:
    """A static op with no inputs that Paddle lowered to its CPU kernel: a fallback when the device has no kernel of
    that name, else Paddle's own placement (a `full` whose place attribute is the CPU)."""
    for k in report.kernels.values():
        if k.static_placed_ops:
            have = _kernels.expected((entries.get(k.type) or {}).get("kernels") or {"registered": []})
            if k.kernel not in have:
                k.static_fallback_ops += k.static_placed_ops
            k.static_placed_ops = 0


def _add_reasons(report: Report, env: dict) -> None:
    entries = _manifests(report, env)
    _drop_placed(report, entries)
    for k in report.kernels.values():
        if k.fell_back:
            k.reason = reason(entries.get(k.type), k.kernel, k.dtypes)


def render(report: Report, console=None) -> None:
    """The report as a rich table, a summary line per type, why kernels fell back (grouped) and the notes."""
    import shutil
    from rich.console import Console
    from rich.table import Table
    console = console or Console(width=None if sys.stdout.isatty() else max(120, shutil.get_terminal_size().columns))
    ordered = sorted(report.kernels.values(), key=_order)
    static = any(k.static_device_ops or k.static_fallback_ops for k in ordered)
    if ordered:
        table = Table(title="Paddle kernels: on the bridged device, or fallen back to Paddle's CPU")
        columns = ["type", "kernel", "dtype", "device calls", "fallback calls"] + (["static ops: device / CPU"]
                                                                                   if static else [])
        for name in columns:
            table.add_column(name, justify="left" if name in ("type", "kernel", "dtype") else "right")
        for k in ordered:
            cells = [k.type, f"[red]{k.kernel}[/]" if k.fell_back else k.kernel, ", ".join(sorted(k.dtypes)),
                     str(k.device_calls), f"[red]{k.fallback_calls}[/]" if k.fallback_calls else "0"]
            if static:
                cells.append(f"{k.static_device_ops} / {k.static_fallback_ops}"
                             if k.static_device_ops or k.static_fallback_ops else "")
            table.add_row(*cells)
        console.print(table)
    for type_, s in sorted(report.summary().items()):
        line = (f"{s['device_kernels']} kernels ran on {type_}, {s['fallback_kernels']} fell back "
                f"({s['fallback_calls']} calls)")
        if s["static_fallback_ops"]:
            line += (f"; {s['static_fallback_ops']} ops of static programs run on Paddle's CPU (chosen once per "
                     f"program, run at every step)")
        console.print(line, style="red" if s["fallback_kernels"] else "green", highlight=False)
    why: dict = defaultdict(list)
    for k in ordered:
        if k.fell_back:
            why[(k.type, k.reason)].append(k.kernel)
    if why:
        console.print("Why they fell back (the install's record, `hwadapter paddle status`):", highlight=False)
        for (type_, text), names in why.items():
            console.print(f"  {type_}: {', '.join(names)}: {text}", highlight=False)
    if static:
        console.print("Static graphs (to_static): Paddle picks each op's kernel once, when it lowers the program; "
                      "'static ops' counts those ops, 'device calls' every run of the device's kernels.",
                      highlight=False)
    if not ordered:
        console.print("No phi kernel ran on a bridged device and none fell back.", highlight=False)
    if len(report.processes) > 1:
        console.print(f"Counted over {len(report.processes)} Python processes (ranks, workers).", highlight=False)
    for note in report.notes:
        console.print(f"note: {note}", style="yellow", highlight=False)


def main(args) -> int:
    """The CLI's `hwadapter paddle trace` (args: .command, .json, .strict): the command's status, or 3 under
    --strict when it succeeded but something fell back."""
    command = [c for c in (args.command or [])]
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("hwadapter paddle trace: no command given. Usage: hwadapter paddle trace [--json] [--strict] -- python "
              "train.py ...", file=sys.stderr)
        return 2
    try:
        report = run(command)
    except OSError as err:
        print(f"hwadapter paddle trace: cannot run {command[0]!r}: {err.strerror or err}. Fix: give a command on "
              f"PATH or a path to one, e.g. hwadapter paddle trace -- python train.py", file=sys.stderr)
        return 127
    sys.stdout.flush()
    if args.json:
        print(json.dumps(report.as_dict()), flush=True)
    else:
        render(report)
    status = report.returncode if report.returncode >= 0 else 128 - report.returncode
    if status == 0 and args.strict and report.fell_back:
        return STRICT_STATUS
    return status
