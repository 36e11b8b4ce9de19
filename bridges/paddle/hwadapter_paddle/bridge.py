"""Builds, places, checks and removes the Paddle custom-device shims (one per bridged hwadapter device type).

Nothing here imports paddle: the installed Paddle is found through importlib (its package folder, its headers,
its distribution's version), and the one check that needs Paddle itself (does the new shim register?) runs
`import paddle` in a child process with a time limit.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import kernels as _kernels
from . import xccl as _xccl

HERE = Path(__file__).resolve().parent
SHIM_SOURCE = HERE / "shim" / "paddle_shim.cc"
#: The copy of hwadapter's device_api.h shipped with this distribution (a checkout's own header is preferred).
#: Paddle's custom-runtime ABI (PADDLE_CUSTOM_RUNTIME_MAJOR/MINOR_VERSION in device_ext.h) the shim is written for.
SUPPORTED_RUNTIME_ABI = (0, 1)
MANIFEST = "hwadapter_paddle.json"
SHIM_PREFIX = "libhwadapter_paddle_"
#: Device types Paddle has built in, and names its set_device reads as them ("cuda:N" and "dcu:N" mean its GPU): a
#: custom device may not take these names (paddle_type renames them).
PADDLE_BUILTIN_TYPES = frozenset({"cpu", "gpu", "xpu", "ipu", "npu", "mlu", "cuda", "dcu"})
#: Prefixed to a hwadapter device type whose name Paddle reserves, to make Paddle's name for it (cpu -> hwa_cpu).
RESERVED_PREFIX = "hwa_"
#: What a shim gives Paddle today.
COVERS = "runtime only (memory, copies, streams, events); every op falls back to Paddle's CPU kernels"
VERIFY_TIMEOUT = 120.0


class BridgeError(Exception):
    """Why the bridge cannot do what was asked, in one sentence with the fix."""


@dataclass
class PaddleInstall:
    """The installed Paddle, found without importing it."""
    distribution: str
    version: str
    package_dir: Path
    include: Path
    runtime_abi: tuple[int, int, int] | None

    @property
    def label(self) -> str:
        return f"{self.distribution} {self.version}"

    @property
    def abi_text(self) -> str:
        return ".".join(map(str, self.runtime_abi)) if self.runtime_abi else "unknown"

    @property
    def default_dir(self) -> Path:
        """Where Paddle looks for custom-device libraries when CUSTOM_DEVICE_ROOT is unset."""
        return self.package_dir.parent / "paddle_custom_device"


def read_runtime_abi(header: Path) -> tuple[int, int, int] | None:
    """PADDLE_CUSTOM_RUNTIME_{MAJOR,MINOR,PATCH}_VERSION from device_ext.h; None when they are not there."""
    try:
        text = header.read_text(errors="replace")
    except OSError:
        return None
    found = dict(re.findall(r"#define\s+PADDLE_CUSTOM_RUNTIME_(MAJOR|MINOR|PATCH)_VERSION\s+(\d+)", text))
    if set(found) != {"MAJOR", "MINOR", "PATCH"}:
        return None
    return int(found["MAJOR"]), int(found["MINOR"]), int(found["PATCH"])


def find_paddle(include: str | os.PathLike | None = None) -> PaddleInstall:
    """The installed Paddle (package folder, headers, version); BridgeError when there is none usable.

    `include` overrides the header folder (the one holding paddle/phi/backends/device_ext.h)."""
    spec = importlib.util.find_spec("paddle")
    if spec is None or not spec.submodule_search_locations:
        raise BridgeError("PaddlePaddle is not installed in this environment (no `paddle` package); pip install "
                          "paddlepaddle (3.x, built with custom-device support, as PyPI's wheels are)")
    package_dir = Path(list(spec.submodule_search_locations)[0])
    dists = importlib.metadata.packages_distributions().get("paddle", [])
    dist = next((d for d in dists if d.lower().startswith("paddle")), dists[0] if dists else "paddle")
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    inc = Path(include) if include else package_dir / "include"
    header = inc / "paddle" / "phi" / "backends" / "device_ext.h"
    if not header.exists():
        raise BridgeError(f"{dist} {version} at {package_dir} ships no custom-device header ({header} is missing): "
                          f"install a paddlepaddle wheel built with custom-device support (PyPI's 3.x wheels are)")
    return PaddleInstall(dist, version, package_dir, inc, read_runtime_abi(header))


def check_abi(paddle: PaddleInstall) -> None:
    """Refuse a Paddle whose custom-runtime ABI is not the one the shim is written for."""
    want = ".".join(map(str, SUPPORTED_RUNTIME_ABI)) + ".x"
    if paddle.runtime_abi is None:
        raise BridgeError(f"{paddle.label}: device_ext.h declares no PADDLE_CUSTOM_RUNTIME_*_VERSION; hwadapter-paddle "
                          f"supports Paddle's custom-runtime ABI {want}")
    if paddle.runtime_abi[:2] != SUPPORTED_RUNTIME_ABI:
        raise BridgeError(f"{paddle.label} has custom-runtime ABI {paddle.abi_text}; this hwadapter-paddle supports "
                          f"{want} (paddlepaddle 3.x): install a matching paddlepaddle or a hwadapter-paddle that "
                          f"supports {paddle.abi_text}")


def hwadapter_include() -> Path:
    """The folder holding hwadapter/device_api.h: $HWADAPTER_INCLUDE, else the one installed with hwadapter."""
    from hwadapter.plugin import NATIVE_INCLUDE  # lazy: the bridge's module is imported by `hwadapter paddle` only
    candidates = [Path(os.environ["HWADAPTER_INCLUDE"])] if os.environ.get("HWADAPTER_INCLUDE") else []
    candidates.append(NATIVE_INCLUDE)
    for folder in candidates:
        if (folder / "hwadapter" / "device_api.h").exists():
            return folder
    raise BridgeError("hwadapter/device_api.h not found; set HWADAPTER_INCLUDE to the folder that holds it")


def compiler() -> str:
    """$CXX, else g++, else c++; BridgeError when there is none."""
    for name in filter(None, [os.environ.get("CXX"), "g++", "c++", "clang++"]):
        path = shutil.which(name)
        if path:
            return path
    raise BridgeError("no C++ compiler found ($CXX, g++, c++, clang++): the shim is compiled against the installed "
                      "Paddle's headers at install time; install one (e.g. apt-get install g++)")


def shim_filename(device_type: str) -> str:
    return f"{SHIM_PREFIX}{device_type}.so"


def paddle_type(device_type: str) -> str:
    """Paddle's name for a hwadapter device type: the same, or RESERVED_PREFIX + it when Paddle reserves the name;
    "rt" appended to a name ending in "cuda" (cuda -> hwa_cudart)."""
    name = RESERVED_PREFIX + device_type if device_type in PADDLE_BUILTIN_TYPES else device_type
    # paddle.set_device rewrites "cuda:" anywhere in a device string to "gpu:" (paddle 3.3.1,
    # device._device_to_paddle): "hwa_cuda:0" would become "hwa_gpu:0", a type that does not exist
    return name + "rt" if name.endswith("cuda") else name


def check_type_name(device_type: str) -> None:
    """Refuse a name Paddle cannot take for a custom device (pass it through paddle_type first)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,62}", device_type):
        raise BridgeError(f"{device_type!r} cannot be a Paddle device type (lower-case letters, digits, _)")
    if device_type in PADDLE_BUILTIN_TYPES:
        raise BridgeError(f"{device_type!r} is one of Paddle's built-in device types; a custom device cannot "
                          f"take its name (the bridge names it {paddle_type(device_type)!r})")


def _c_string(value: str) -> str:
    if any(c in value for c in '"\\\n'):
        raise BridgeError(f"{value!r} cannot be compiled into the shim (quotes, backslashes or newlines)")
    return f'"{value}"'


def compile_shim(device_type: str, library: str | os.PathLike, out: str | os.PathLike, paddle: PaddleInstall,
                 defines: tuple[str, ...] = ()) -> list[str]:
    """Compile the shim for one device type into `out`; returns the command. BridgeError with the compiler's
    output when it fails. `defines` are extra -D flags (tests use them to simulate other headers)."""
    check_type_name(device_type)
    cmd = [compiler(), "-shared", "-fPIC", "-O2", "-std=c++17", "-fvisibility=hidden",
           f"-I{hwadapter_include()}", f"-I{paddle.include}",
           f"-DHWA_PD_DEVICE_TYPE={_c_string(device_type)}",
           f"-DHWA_PD_LIBRARY={_c_string(str(Path(library).resolve()))}",
           f"-DHWA_PD_BUILT_FOR={_c_string(paddle.label)}",
           *[f"-D{d}" for d in defines], str(SHIM_SOURCE), "-o", str(out), "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise BridgeError(f"compiling the shim for {device_type} failed ({' '.join(cmd[:1])}):\n{tail}")
    return cmd


# ---- which hwadapter plugins can be bridged ----

@dataclass
class Candidate:
    """One hwadapter device type and whether it can become a Paddle custom device."""
    device_type: str
    distribution: str
    library: str | None
    reason: str  # why not, when library is None
    short: str = ""  # the reason in a few words (a table cell)
    paddle_type: str = ""  # Paddle's name for it (paddle_type())

    @property
    def bridgeable(self) -> bool:
        return self.library is not None


def candidates(types: list[str] | None = None) -> list[Candidate]:
    """Every installed hwadapter plugin (or those named), classified: bridgeable when its native_library() gives a
    device_api.h library. Loads the plugins (and may build their libraries) in this process."""
    from hwadapter import host  # lazy: hwadapter-paddle's module imports stay light

    names = host.plugin_types()
    out = []
    for name in (types if types else sorted(names)):
        if name not in names:
            out.append(Candidate(name, "?", None, "no hwadapter plugin has this device type (`hwadapter devices` "
                                                  "lists them)", "no such plugin"))
            continue
        record = host.plugin_record(name)
        out.append(_classify(name, " ".join(record.distribution).strip(), record))
    return out


def _classify(name: str, dist: str, record) -> Candidate:
    """One installed plugin: its library, or why it has none."""
    plugin = record.plugin
    if plugin is None:
        return Candidate(name, dist, None, f"the plugin is not usable: {record.explain()}", "plugin unusable")
    try:
        check_type_name(paddle_type(name))
    except BridgeError as err:
        return Candidate(name, dist, None, str(err), "name not allowed")
    try:
        library = plugin.native_library()
    except Exception as err:  # DeviceUnavailableError, a CompileError building it: the plugin says why
        fix = getattr(err, "fix", "")
        return Candidate(name, dist, None, f"its native library is not available: {err}" + (f" Fix: {fix}" if fix
                                                                                           else ""), "no library")
    if library is None:
        cls = type(plugin)
        return Candidate(name, dist, None, f"it offers no native library ({cls.__module__}.{cls.__qualname__}."
                                           f"native_library() is None): Paddle needs device memory from a native "
                                           f"library as flat pointers, called without the GIL (device_api.h)",
                         "no native library")
    library = str(Path(library).resolve())
    if not Path(library).exists():
        return Candidate(name, dist, None, f"its native library {library} does not exist", "no library")
    return Candidate(name, dist, library, "", paddle_type=paddle_type(name))


# ---- where shims go ----

def target_dir(directory: str | os.PathLike | None, paddle: PaddleInstall | None) -> Path:
    """The folder for shims: the one named, else $CUSTOM_DEVICE_ROOT, else site-packages/paddle_custom_device."""
    if directory:
        return Path(directory).resolve()
    if os.environ.get("CUSTOM_DEVICE_ROOT"):
        return Path(os.environ["CUSTOM_DEVICE_ROOT"]).resolve()
    if paddle is None:
        raise BridgeError("PaddlePaddle is not installed and no --dir was given")
    return paddle.default_dir.resolve()


def paddle_reads(directory: Path, paddle: PaddleInstall | None) -> tuple[bool, str]:
    """Whether `import paddle` in this environment loads the shims in `directory`, and why."""
    root = os.environ.get("CUSTOM_DEVICE_ROOT")
    if root:
        same = Path(root).resolve() == directory
        return same, f"CUSTOM_DEVICE_ROOT={root}" + ("" if same else f", not {directory}: set it to this folder")
    if paddle is not None and paddle.default_dir.resolve() == directory:
        return True, "Paddle's default folder (CUSTOM_DEVICE_ROOT unset)"
    return False, f"CUSTOM_DEVICE_ROOT is unset: export CUSTOM_DEVICE_ROOT={directory}"


def read_manifest(directory: Path) -> dict:
    try:
        data = json.loads((directory / MANIFEST).read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_manifest(directory: Path, data: dict) -> None:
    tmp = directory / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, directory / MANIFEST)


def shim_info(path: Path) -> dict:
    """What a shim says it was built as (hwadapter_paddle_shim_info), read with ctypes: no Paddle involved."""
    import ctypes
    try:
        lib = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL)
        fn = lib.hwadapter_paddle_shim_info
    except (OSError, AttributeError) as err:
        return {"error": f"not a hwadapter-paddle shim ({err})"}
    fn.restype = ctypes.c_char_p
    return dict(part.split("=", 1) for part in fn().decode(errors="replace").split(";") if "=" in part)


# ---- verification: does Paddle register the shim? ----

_VERIFY = r"""
import json, sys
import paddle
types = paddle.device.get_all_custom_device_type()
print("HWA_PADDLE_TYPES=" + json.dumps(types), flush=True)
# Which phi kernels each custom type has, e.g. "(cdemo, Undefined(AnyLayout), float32)" under "add".
kernels = {t: {} for t in types}
for name, keys in paddle.base.core._get_registered_phi_kernels("function").items():
    for key in keys:
        parts = [p.strip() for p in key.strip("()").split(",")]
        if parts[0] in kernels:
            kernels[parts[0]].setdefault(name, []).append(parts[-1])
print("HWA_PADDLE_KERNELS=" + json.dumps(kernels), flush=True)
"""


def registered_types(directory: Path, timeout: float = VERIFY_TIMEOUT) -> tuple[list[str] | None, list[str], str]:
    """`import paddle` in a child with CUSTOM_DEVICE_ROOT=directory: (types registered or None, the shims' stderr
    lines, what went wrong)."""
    types, _, lines, problem = _registered(directory, timeout)
    return types, lines, problem


def _registered(directory: Path, timeout: float = VERIFY_TIMEOUT):
    """As registered_types, with {type: {phi kernel: [dtypes]}} second."""
    env = {**os.environ, "CUSTOM_DEVICE_ROOT": str(directory), "GLOG_minloglevel": "2"}
    try:
        proc = subprocess.run([sys.executable, "-c", _VERIFY], capture_output=True, text=True, timeout=timeout,
                              env=env, cwd=str(directory))
    except subprocess.TimeoutExpired:
        return None, {}, [], f"`import paddle` did not finish within {timeout:.0f} s"
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hwadapter-paddle:")]
    found = {key: json.loads(value) for key, _, value in (line.partition("=") for line in proc.stdout.splitlines())
             if key in ("HWA_PADDLE_TYPES", "HWA_PADDLE_KERNELS")}
    if "HWA_PADDLE_TYPES" in found:
        return found["HWA_PADDLE_TYPES"], found.get("HWA_PADDLE_KERNELS", {}), lines, ""
    tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
    return None, {}, lines, f"`import paddle` failed (exit status {proc.returncode}):\n{tail}"


# ---- install / remove / status ----

@dataclass
class Outcome:
    device_type: str
    ok: bool
    message: str
    path: Path | None = None


@dataclass
class InstallReport:
    paddle: PaddleInstall
    directory: Path
    outcomes: list[Outcome] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the user should know about the folder as installed


def install(types: list[str] | None = None, directory: str | os.PathLike | None = None, verify: bool = True,
            include: str | os.PathLike | None = None, kernels: bool = True) -> InstallReport:
    """Build and place a shim for each bridgeable device type (all of them, or those named), and beside it the
    type's kernels library (phi kernels calling the library's C kernels) unless `kernels` is False.

    A kernels library that does not compile, or with which `import paddle` fails, is left out: the runtime shim is
    placed alone, and the outcome says why. Raises BridgeError when Paddle is missing, its ABI is not supported or no compiler exists; each device type's
    own failure is an Outcome with ok=False."""
    paddle = find_paddle(include)
    check_abi(paddle)
    compiler()
    folder = target_dir(directory, paddle)
    report = InstallReport(paddle, folder)
    chosen = candidates(types)
    todo = [c for c in chosen if c.bridgeable]
    for c in chosen:
        if not c.bridgeable:
            report.outcomes.append(Outcome(c.device_type, False, c.reason))
    if not todo:
        return report
    folder.mkdir(parents=True, exist_ok=True)
    manifest = read_manifest(folder)
    with tempfile.TemporaryDirectory(prefix="hwadapter-paddle-") as tmp:
        stage = Path(tmp)
        built = []
        for c in todo:
            try:
                compile_shim(c.paddle_type, c.library, stage / shim_filename(c.device_type), paddle)
                built.append(c)
            except BridgeError as err:
                report.outcomes.append(Outcome(c.device_type, False, str(err)))
        kernel_entries = {c.device_type: (_kernels.build(c.device_type, c.paddle_type, c.library, stage, paddle,
                                                         compiler(), [hwadapter_include()]) if kernels else
                                          {"file": None, "registered": [], "left": [], "error": "--runtime-only"})
                          for c in built}
        # Paddle's collectives on hwadapter's communicators (used when the device library has none of its own)
        xccl_errors = {c.device_type: _xccl.build(c.device_type, stage / _xccl.filename(c.device_type), compiler(),
                                                  [hwadapter_include()]) for c in built}
        failed_verify = {}
        if verify and built:
            types_seen, lines, problem = _verify_kernels(stage, built, kernel_entries)
            for c in built:
                said = [line for line in lines if line.startswith(f"hwadapter-paddle: {c.paddle_type}:")]
                if types_seen is None:
                    failed_verify[c.device_type] = problem
                elif c.paddle_type not in types_seen:
                    failed_verify[c.device_type] = (said[0] if said else
                                                    f"Paddle did not register {c.device_type} (another custom "
                                                    f"device of that name?)")
        for c in built:
            if c.device_type in failed_verify:
                report.outcomes.append(Outcome(c.device_type, False, f"built, but not placed: "
                                                                      f"{failed_verify[c.device_type]}"))
                continue
            dest = folder / shim_filename(c.device_type)
            tmp_dest = folder / (shim_filename(c.device_type) + ".tmp")
            shutil.copyfile(stage / shim_filename(c.device_type), tmp_dest)
            os.replace(tmp_dest, dest)  # atomic: a running process keeps its mapping of the old file
            entry = kernel_entries[c.device_type]
            _place_kernels(stage, folder, c.device_type, entry)
            _place_xccl(stage, folder, c.device_type, xccl_errors[c.device_type])
            manifest.setdefault("shims", {})[c.device_type] = {
                "file": dest.name, "library": c.library, "distribution": c.distribution, "paddle_type": c.paddle_type,
                "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "verified": verify, "kernels": entry,
                "collectives": {"file": None if xccl_errors[c.device_type] else _xccl.filename(c.device_type),
                                "error": xccl_errors[c.device_type]}}
            report.outcomes.append(Outcome(c.device_type, True, f"{dest} (library {c.library}; in Paddle: "
                                                                 f"{c.paddle_type}); {_kernels.summary(entry)}", dest))
    report.outcomes.sort(key=lambda o: o.device_type)
    if any(o.ok for o in report.outcomes):
        manifest.update({"paddle": paddle.label, "paddle_dir": str(paddle.package_dir),
                         "custom_runtime_abi": paddle.abi_text, "covers": COVERS})
        _write_manifest(folder, manifest)
        with_kernels = sorted(t for t, e in manifest.get("shims", {}).items() if (e.get("kernels") or {}).get("file"))
        if len(with_kernels) > 1:
            report.notes.append(STATIC_FIRST_TYPE.format(types=", ".join(with_kernels)))
    return report


#: Paddle 3.3's static graphs (to_static, paddle.inference) feed their inputs to one custom device type, whichever
#: its generic custom backend names (pd_op_to_kernel_pass: a shadow_feed to Backend::CUSTOM, phi/common/backend.h):
#: with hwa_cpu and opencl loaded it was hwa_cpu, though get_all_custom_device_type() listed opencl first. A second
#: type running its own kernels then fails: "Only support cpu to gpu and gpu to cpu, src=Place(hwa_cpu:0),
#: dst=Place(opencl:0)". Eager mode is not affected.
STATIC_FIRST_TYPE = ("{types} all register kernels in this folder: in one process Paddle runs static graphs "
                     "(to_static, paddle.inference) on one custom device type only (the others fail with 'Only "
                     "support cpu to gpu and gpu to cpu'); give each type "
                     "its own CUSTOM_DEVICE_ROOT (install with --dir) for static graphs on the others")


def _verify_kernels(stage: Path, built: list[Candidate], entries: dict[str, dict]):
    """registered_types(stage), first with the kernels libraries; when `import paddle` fails with them, again without
    (the shim loads them after its checks, so this is for a library that crashes as it loads). A kernels library
    whose phi kernels Paddle does not list (the shim says why on stderr) is dropped too. Updates `entries` (file
    None, error why)."""
    with_kernels = [c for c in built if entries[c.device_type]["file"]]
    types_seen, kernels_seen, lines, problem = _registered(stage)
    if with_kernels and (types_seen is None or any(c.paddle_type not in types_seen for c in built)):
        for c in with_kernels:
            said = [line.strip() for line in problem.splitlines() if line.strip()]
            last = next((line for line in reversed(said) if "Error" in line), said[-1] if said else
                        "the device type was not registered")  # Python's exception line, not Paddle's hint after it
            _drop_kernels(stage, entries[c.device_type], f"`import paddle` failed with the kernels library: {last}")
        types_seen, kernels_seen, lines, problem = _registered(stage)
    for c in with_kernels:
        entry = entries[c.device_type]
        have = kernels_seen.get(c.paddle_type, {})
        missing = [f"{phi} ({', '.join(sorted(want - set(have.get(phi, []))))})"
                   for phi, want in _kernels.expected(entry).items() if want - set(have.get(phi, []))]
        if entry["file"] and types_seen is not None and missing:
            said = [line.split(": ", 2)[-1] for line in lines if line.startswith(f"hwadapter-paddle: {c.paddle_type}: "
                                                                                f"kernels")]
            _drop_kernels(stage, entry, said[0] if said else f"Paddle did not register {', '.join(missing)} for "
                                                             f"{c.paddle_type}")
    return types_seen, lines, problem


def _drop_kernels(stage: Path, entry: dict, why: str) -> None:
    for name in (entry["file"], (entry.get("python") or {}).get("file")):
        if name:
            (stage / name).unlink(missing_ok=True)
    entry.update({"file": None, "registered": [], "error": why, "python": None})


def _place_kernels(stage: Path, folder: Path, device_type: str, entry: dict) -> None:
    """Put the kernels libraries beside the shim (atomically), or remove older ones when there are none now."""
    for python, built in ((False, entry["file"]), (True, (entry.get("python") or {}).get("file"))):
        dest = folder / _kernels.kernels_filename(device_type, python)
        if not built:
            dest.unlink(missing_ok=True)
            continue
        tmp_dest = folder / (dest.name + ".tmp")
        shutil.copyfile(stage / built, tmp_dest)
        os.replace(tmp_dest, dest)


def _place_xccl(stage: Path, folder: Path, device_type: str, error: str | None) -> None:
    """Put the collectives library beside the shim (atomically), or remove an older one when it was not built."""
    dest = folder / _xccl.filename(device_type)
    if error:
        dest.unlink(missing_ok=True)
        return
    tmp_dest = folder / (dest.name + ".tmp")
    shutil.copyfile(stage / dest.name, tmp_dest)
    os.replace(tmp_dest, dest)


def installed_shims(folder: Path) -> dict[str, Path]:
    return {p.name[len(SHIM_PREFIX):-3]: p for p in sorted(folder.glob(f"{SHIM_PREFIX}*.so"))} if folder.is_dir() \
        else {}


def remove(types: list[str] | None = None, directory: str | os.PathLike | None = None) -> tuple[Path, list[Outcome]]:
    """Delete the shims (and their kernels libraries) of the types named (all of ours when none): the other files in
    the folder stay."""
    try:
        paddle = find_paddle()
    except BridgeError:
        paddle = None
    folder = target_dir(directory, paddle)
    shims = installed_shims(folder)
    manifest = read_manifest(folder)
    outcomes = []
    for name in (types if types else list(shims)):
        path = shims.get(name)
        if path is None:
            outcomes.append(Outcome(name, False, f"no shim for {name} in {folder}"))
            continue
        path.unlink()
        gone = []
        for kernels_lib in (folder / _kernels.kernels_filename(name, False), folder / _kernels.kernels_filename(name, True),
                            folder / _xccl.filename(name)):
            if kernels_lib.exists():
                kernels_lib.unlink()
                gone.append(kernels_lib.name)
        manifest.get("shims", {}).pop(name, None)
        outcomes.append(Outcome(name, True, f"removed {path}" + "".join(f" and {g}" for g in gone), path))
    if manifest:
        if manifest.get("shims"):
            _write_manifest(folder, manifest)
        else:
            (folder / MANIFEST).unlink(missing_ok=True)
    return folder, outcomes


def status(directory: str | os.PathLike | None = None, load_plugins: bool = True) -> dict:
    """A JSON-ready account: the Paddle found, the shim folder (and whether Paddle reads it), each shim (built for
    which Paddle, which library, current or stale and why), and every hwadapter plugin's bridgeability."""
    try:
        paddle, paddle_error = find_paddle(), ""
    except BridgeError as err:
        paddle, paddle_error = None, str(err)
    abi_error = ""
    if paddle is not None:
        try:
            check_abi(paddle)
        except BridgeError as err:
            abi_error = str(err)
    try:
        folder = target_dir(directory, paddle)
    except BridgeError as err:
        folder = None
        paddle_error = paddle_error or str(err)
    reads, reads_why = paddle_reads(folder, paddle) if folder else (False, "")
    manifest = read_manifest(folder) if folder else {}
    shims = []
    for name, path in (installed_shims(folder) if folder else {}).items():
        info = shim_info(path)
        entry = manifest.get("shims", {}).get(name, {})
        built_for = info.get("built_for", "?")
        library = info.get("library", entry.get("library", "?"))
        problems = []
        if "error" in info:
            problems.append(info["error"])
        if paddle is not None and built_for != paddle.label:
            problems.append(f"built for {built_for}, installed is {paddle.label}: run `hwadapter paddle install "
                            f"{name}` again")
        if library != "?" and not Path(library).exists():
            problems.append(f"its library {library} is gone: reinstall the plugin, then `hwadapter paddle install "
                            f"{name}`")
        kernels = entry.get("kernels")
        if kernels and kernels.get("file") and not (folder / kernels["file"]).exists():
            problems.append(f"its kernels library {kernels['file']} is missing: run `hwadapter paddle install {name}` "
                            f"again")
        shims.append({"type": name, "paddle_type": info.get("device_type", name), "path": str(path),
                      "library": library, "built_for": built_for,
                      "custom_runtime_abi": info.get("custom_runtime_abi", "?"),
                      "device_api": info.get("device_api", "?"), "distribution": entry.get("distribution", "?"),
                      "built": entry.get("built", "?"), "state": "stale" if problems else "ok",
                      "problems": problems, "kernels": kernels,
                      "covers": _kernels.summary(kernels) if kernels and kernels.get("file") else COVERS})
    plugins = []
    if load_plugins:
        installed = {s["type"] for s in shims}
        for c in candidates():
            plugins.append({"type": c.device_type, "paddle_type": c.paddle_type or paddle_type(c.device_type),
                            "distribution": c.distribution, "bridgeable": c.bridgeable, "library": c.library,
                            "reason": c.reason, "short": c.short, "installed": c.device_type in installed})
    return {"paddle": paddle.label if paddle else None, "paddle_dir": str(paddle.package_dir) if paddle else None,
            "custom_runtime_abi": paddle.abi_text if paddle else None, "paddle_error": paddle_error,
            "abi_error": abi_error, "directory": str(folder) if folder else None, "paddle_reads_directory": reads,
            "paddle_reads_why": reads_why, "shims": shims, "plugins": plugins, "covers": COVERS}
