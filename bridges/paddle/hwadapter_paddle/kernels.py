"""Builds the kernels library of one device type: phi kernels that call its device library's C kernels.

It is placed beside the runtime shim as libhwadapter_paddle_<type>.kernels; the shim loads it at `import paddle`.

The library's kernel table is read (hwadapter's loader), planned against optable.TABLE, written out as
hwa_kernels.inc (one wrapper and one PD_REGISTER_PLUGIN_KERNEL per phi kernel) and compiled with
shim/paddle_kernels.cc against the installed Paddle, linked to its libpaddle.so. A plugin whose kernels are Python
and whose memory the host addresses also gets libhwadapter_paddle_<type>.pykernels, the same source built to call
them (pykernels.py).
"""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from . import optable, training

HERE = Path(__file__).resolve().parent
KERNELS_SOURCE = HERE / "shim" / "paddle_kernels.cc"
#: Beside the runtime shim libhwadapter_paddle_<type>.so, which loads it in InitPlugin after its own checks (Paddle
#: loads only the *.so files of its folder itself): a stale or broken one never stops `import paddle`.
KERNELS_SUFFIX = ".kernels"
#: The Python-kernel library beside it (loaded by the shim only in a process that runs Python).
PYKERNELS_SUFFIX = ".pykernels"
#: Paddle's kernel headers need these (its wheel is built with them; another C++ ABI breaks `import paddle`).
PADDLE_KERNEL_FLAGS = ("-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1", "-DPADDLE_WITH_CUSTOM_DEVICE",
                       "-DPADDLE_WITH_CUSTOM_KERNEL")
COMPILE_TIMEOUT = 600.0


def kernels_filename(device_type: str, python: bool = False) -> str:
    return f"libhwadapter_paddle_{device_type}{PYKERNELS_SUFFIX if python else KERNELS_SUFFIX}"


def library_kernels(library: str | os.PathLike) -> list[tuple[str, tuple[int, ...]]]:
    """The device library's kernel table: [(op, input dtype codes)], read through hwadapter's own loader."""
    from hwadapter import host  # lazy: `hwadapter paddle` imports this module; only building reads a library
    return [(op, tuple(codes)) for _, op, codes in host.load_library(library).kernels()]


# form: (the phi kernel's parameters, the inputs, the output's shape, its C++ type, the attributes)
_FORMS = {
    "unary": ("const phi::DenseTensor &x", "{&x}", "shape_of(x)", "T", "nullptr, 0"),
    "binary": ("const phi::DenseTensor &x, const phi::DenseTensor &y", "{&x, &y}", "binary_shape({phi}, x, y)", "T",
               "nullptr, 0"),
    "compare": ("const phi::DenseTensor &x, const phi::DenseTensor &y", "{&x, &y}", "binary_shape({phi}, x, y)",
                "bool", "nullptr, 0"),
    "unary_bool": ("const phi::DenseTensor &x", "{&x}", "shape_of(x)", "bool", "nullptr, 0"),
    "matmul": ("const phi::DenseTensor &x, const phi::DenseTensor &y, bool transpose_x, bool transpose_y",
               "{&x, &y}", "matmul_shape({phi}, x, y, transpose_x, transpose_y)", "T", "attrs, n"),
}
# hwadapter passes matmul's transpose attributes only when one is set (docs/ops.md).
_MATMUL_ATTRS = """  HwaAttr attrs[2] = {{"transpose_x", HWA_ATTR_INT, transpose_x, 0, nullptr, 0, nullptr},
                      {"transpose_y", HWA_ATTR_INT, transpose_y, 0, nullptr, 0, nullptr}};
  size_t n = (transpose_x || transpose_y) ? 2 : 0;
"""
# Forms whose shapes and attributes a helper of paddle_kernels.cc works out: (the phi kernel's parameters, the
# helper's call after `fn`).
_HELPED = {
    "reduce": ("const phi::DenseTensor &x, const phi::IntArray &dims, bool keep_dim",
               "reduce<T>({phi}, {op}, fn, ctx, x, dims.GetData(), keep_dim, out, {calls})"),
    "sum": ("const phi::DenseTensor &x, const phi::IntArray &dims, phi::DataType out_dtype, bool keep_dim",
            "sum<T>({phi}, {op}, fn, ctx, x, dims.GetData(), out_dtype, keep_dim, out, {calls})"),
    "softmax": ("const phi::DenseTensor &x, int axis", "softmax<T>({phi}, {op}, fn, ctx, x, axis, out, {calls})"),
    "conv2d": ("const phi::DenseTensor &input, const phi::DenseTensor &filter, const std::vector<int> &strides, "
               "const std::vector<int> &paddings, const std::string &padding_algorithm, "
               "const std::vector<int> &dilations, int groups, const std::string &data_format",
               "conv2d<T>({phi}, {op}, fn, ctx, input, filter, strides, paddings, padding_algorithm, dilations, "
               "groups, data_format, out, {calls})"),
    "pool2d": ("const phi::DenseTensor &x, const phi::IntArray &kernel_size, const std::vector<int64_t> &strides, "
               "const std::vector<int64_t> &paddings, bool ceil_mode, bool exclusive, const std::string &data_format, "
               "const std::string &pooling_type, bool global_pooling, bool adaptive, "
               "const std::string &padding_algorithm",
               "pool2d<T>({phi}, fn, fn_avg_pool2d, fn_adaptive_avg_pool2d, ctx, x, kernel_size.GetData(), strides, "
               "paddings, ceil_mode, exclusive, data_format, pooling_type, global_pooling, adaptive, "
               "padding_algorithm, out, {calls})"),
    "shift": ("const phi::DenseTensor &x, const phi::DenseTensor &y, bool is_arithmetic",
              "shift<T>({phi}, {op}, fn, ctx, x, y, is_arithmetic, out, {calls})"),
    "clip": ("const phi::DenseTensor &x, const phi::Scalar &min, const phi::Scalar &max",
             "clip<T>({phi}, {op}, fn, ctx, x, min, max, out, {calls})"),
    "transpose": ("const phi::DenseTensor &x, const std::vector<int> &axis",
                  "transpose<T>({phi}, {op}, fn, ctx, x, axis, out, {calls})"),
    "cumsum": ("const phi::DenseTensor &x, const phi::Scalar &axis, bool flatten, bool exclusive, bool reverse",
               "cumsum<T>({phi}, {op}, fn, ctx, x, axis, flatten, exclusive, reverse, out, {calls})"),
    "arg": ("const phi::DenseTensor &x, const phi::Scalar &axis, bool keepdims, bool flatten, phi::DataType dtype",
            "arg<T>({phi}, {op}, fn, ctx, x, axis, keepdims, flatten, dtype, out, {calls})"),
    "where": ("const phi::DenseTensor &condition, const phi::DenseTensor &x, const phi::DenseTensor &y",
              "where<T>({phi}, {op}, fn, ctx, condition, x, y, out, {calls})"),
    "gather": ("const phi::DenseTensor &x, const phi::DenseTensor &index, const phi::Scalar &axis",
               "gather<T>({phi}, {op}, fn, ctx, x, index, axis, out, {calls})"),
    "prod": ("const phi::DenseTensor &x, const phi::IntArray &dims, bool keep_dim, bool reduce_all",
             "reduce<T>({phi}, {op}, fn, ctx, x, reduce_all ? std::vector<int64_t>{{}} : dims.GetData(), keep_dim, "
             "out, {calls})"),
    "split": ("const phi::DenseTensor &x, const phi::IntArray &sections, const phi::Scalar &axis",
              "split_parts<T>({phi}, {op}, fn, ctx, x, sections.GetData(), 0, axis, outs, {calls})"),
    "split_with_num": ("const phi::DenseTensor &x, int num, const phi::Scalar &axis",
                       "split_parts<T>({phi}, {op}, fn, ctx, x, {{}}, num, axis, outs, {calls})"),
    "concat": ("const std::vector<const phi::DenseTensor *> &x, const phi::Scalar &axis",
               "concat<T>({phi}, {op}, fn, ctx, x, axis, out, {calls})"),
    "expand": ("const phi::DenseTensor &x, const phi::IntArray &shape",
               "expand_to<T>({phi}, {op}, fn, ctx, x, shape.GetData(), out, {calls})"),
    "cumprod": ("const phi::DenseTensor &x, int dim, bool exclusive, bool reverse",
                "cumsum<T>({phi}, {op}, fn, ctx, x, phi::Scalar(dim), false, exclusive, reverse, out, {calls})"),
    "slice": ("const phi::DenseTensor &x, const std::vector<int64_t> &axes, const phi::IntArray &starts, "
              "const phi::IntArray &ends, const std::vector<int64_t> &infer_flags, "
              "const std::vector<int64_t> &decrease_axis",
              "slice_axes<T>({phi}, {op}, fn, ctx, x, axes, starts.GetData(), ends.GetData(), decrease_axis, out, "
              "{calls})"),
    "gather_nd": ("const phi::DenseTensor &x, const phi::DenseTensor &index",
                  "gather_nd<T>({phi}, {op}, fn, ctx, x, index, out, {calls})"),
    "take_along_axis": ("const phi::DenseTensor &x, const phi::DenseTensor &index, int axis",
                        "take_along_axis<T>({phi}, {op}, fn, ctx, x, index, axis, out, {calls})"),
    "put_along_axis": ("const phi::DenseTensor &x, const phi::DenseTensor &index, const phi::DenseTensor &value, "
                       "int axis, const std::string &reduce, bool include_self",
                       "put_along_axis<T>({phi}, {op}, fn, ctx, x, index, value, axis, reduce, include_self, out, "
                       "{calls})"),
    "scatter_nd_add": ("const phi::DenseTensor &x, const phi::DenseTensor &index, const phi::DenseTensor &updates",
                       "scatter_nd_add<T>({phi}, {op}, fn, ctx, x, index, updates, out, {calls})"),
    "pad": ("const phi::DenseTensor &x, const std::vector<int> &paddings, const phi::Scalar &pad_value",
            "pad<T>({phi}, {op}, fn, ctx, x, paddings, pad_value, out, {calls})"),
    "conv2d_transpose": ("const phi::DenseTensor &x, const phi::DenseTensor &filter, const std::vector<int> &strides, "
                         "const std::vector<int> &paddings, const std::vector<int> &output_padding, "
                         "const phi::IntArray &output_size, const std::string &padding_algorithm, int groups, "
                         "const std::vector<int> &dilations, const std::string &data_format",
                         "conv2d_transpose<T>({phi}, {op}, fn, ctx, x, filter, strides, paddings, output_padding, "
                         "output_size.GetData(), padding_algorithm, groups, dilations, data_format, out, {calls})"),
}
#: the output dtype a form's registration sets (Paddle's own registrations do the same): otherwise x's
_OUTPUT_DTYPE = {"compare": "BOOL", "unary_bool": "BOOL", "arg": "UNDEFINED"}
#: a form's output parameters, where it has not one output
_OUTPUTS = {"split": "std::vector<phi::DenseTensor *> outs", "split_with_num": "std::vector<phi::DenseTensor *> outs"}


def _wrapper(m: optable.Mapping) -> str:
    """One phi kernel's wrapper: find the library's kernel(s) once, then launch (or the form's helper). For a further
    phi kernel of the op (Mapping.also), m with that phi and form."""
    codes = ", ".join(f"HWA_{d.upper()}" if d else "Code<T>::value" for d in m.inputs or (None,) * optable.arity(m))
    head = (f"std::atomic<uint64_t> calls_{m.phi}{{0}};\n"
            f"template <typename T, typename Context>\n")
    finds = f"  static const HwaKernelFn fn = find_kernel(\"{m.op}\", {{{codes}}});\n"
    for other in m.requires:
        finds += f"  static const HwaKernelFn fn_{other} = find_kernel(\"{other}\", {{{codes}}});\n"
    if m.form in _HELPED:
        params, call = _HELPED[m.form]
        call = call.format(phi=f'"{m.phi}"', op=f'"{m.op}"', calls=f"calls_{m.phi}")
        outs = _OUTPUTS.get(m.form, "phi::DenseTensor *out")
        return head + f"void k_{m.phi}(const Context &ctx, {params}, {outs}) {{\n{finds}  {call};\n}}\n"
    params, ins, shape, out_type, attrs = _FORMS[m.form]
    shape = shape.replace("{phi}", f'"{m.phi}"')
    return (head + f"void k_{m.phi}(const Context &ctx, {params}, phi::DenseTensor *out) {{\n" + finds
            + (_MATMUL_ATTRS if m.form == "matmul" else "") +
            f"  launch<T, {out_type}>(\"{m.phi}\", \"{m.op}\", fn, ctx, {ins}, {shape}, out, {attrs}, calls_{m.phi});\n"
            f"}}\n")


_PADDLE_TYPES = re.compile(r"(?<![\w:])(DenseTensor|TensorBase|IntArray|Scalar|DataType)\b")


def parameters(params: str) -> list[tuple[str, str, str]]:
    """Paddle's C++ parameter list as [(kind, C++ type, name)]: kind "in", "in_list", "optional", "out", "out_list" or
    "attr"."""
    out = []
    for part in filter(None, (p.strip() for p in params.split(","))):
        ctype, name = part.rsplit(None, 1)
        compact = ctype.replace(" ", "")
        kind = {"constDenseTensor&": "in", "constpaddle::optional<DenseTensor>&": "optional",
                "conststd::vector<constDenseTensor*>&": "in_list", "conststd::vector<constTensorBase*>&": "in_list",
                "DenseTensor*": "out",
                "std::vector<DenseTensor*>": "out_list"}.get(compact, "attr")
        out.append((kind, ctype, name))
    return out


def composite_wrapper(c) -> str:
    """One composite's phi kernel: its inputs, attributes and outputs handed by name to pykernels.run_composite."""
    params = parameters(c.params)
    decl = ", ".join(_PADDLE_TYPES.sub(r"phi::\1", ctype) + " " + name for _, ctype, name in params)
    body = []
    for kind, _, name in params:
        if kind in ("in", "in_list"):
            body.append(f'  c.in("{name}", {"&" if kind == "in" else ""}{name});')
        elif kind == "optional":
            body.append(f'  c.in("{name}", {name}.get_ptr());')
        elif kind == "out":
            like = c.host_outputs.get(name)
            body.append(f'  c.out<T>("{name}", {name}{", &" + like if like else ""});')
        elif kind == "out_list":
            body.append(f'  c.out("{name}", {name});')
        else:
            body.append(f'  c.attr("{name}", {name});')
    return (f"std::atomic<uint64_t> calls_{c.phi}{{0}};\n"
            f"template <typename T, typename Context>\n"
            f"void c_{c.phi}(const Context &ctx, {decl}) {{\n"
            f'  Composite c("{c.phi}", ctx, calls_{c.phi});\n' + "\n".join(body) + "\n  c.run();\n}\n")


def composite_registration(c, dtypes: list[str]) -> str:
    """PD_REGISTER_PLUGIN_KERNEL for a composite: inputs Paddle may keep on the CPU read from any backend, outputs
    that follow them left to the kernel (as Paddle's own GPU kernels register Adam's beta powers)."""
    params = parameters(c.params)
    ins = [name for kind, _, name in params if kind in ("in", "optional", "in_list")]
    outs = [name for kind, _, name in params if kind in ("out", "out_list")]
    body = [f"kernel->InputAt({ins.index(n)}).SetBackend(phi::Backend::ALL_BACKEND);" for n in c.host_inputs]
    body += [f"kernel->OutputAt({outs.index(n)}).SetBackend(phi::Backend::UNDEFINED);" for n in c.host_outputs]
    if c.dtype_attribute:  # as Paddle's own registrations of such kernels
        body.append("kernel->OutputAt(0).SetDataType(phi::DataType::UNDEFINED);")
    types = ", ".join(optable.CPP_TYPES[d] for d in dtypes)
    return (f"PD_REGISTER_PLUGIN_KERNEL({c.phi}, HWA_PD_TYPE_TOKEN, ALL_LAYOUT, hwa_pd::c_{c.phi}, {types}) "
            f"{{{' '.join(body)}}}\n")


def generate(register: dict[str, list[str]], composites: dict[str, list[str]] | None = None) -> str:
    """hwa_kernels.inc for {op: dtypes} (and {composite phi kernel: dtypes}, the Python-kernel library's): wrappers,
    registrations, the counters and the HWA_PD_REGISTERED string."""
    wrappers, registrations, counters, said = [], [], [], []
    for phi, dtypes in (composites or {}).items():
        c = training.BY_PHI[phi]
        wrappers.append(composite_wrapper(c))
        registrations.append(composite_registration(c, dtypes))
        counters.append(f"{{\"{phi}\", &calls_{phi}}}, ")
        said.append(f"{phi}:composite:{'|'.join(dtypes)}")
    for op, dtypes in register.items():
        for m in optable.phi_kernels(optable.BY_OP[op]):  # the op's phi kernel, and any further one (also)
            wrappers.append(_wrapper(m))
            out_dtype = _OUTPUT_DTYPE.get(m.form)
            body = f"kernel->OutputAt(0).SetDataType(phi::DataType::{out_dtype});" if out_dtype else ""
            types = ", ".join(optable.CPP_TYPES[d] for d in dtypes)
            registrations.append(f"PD_REGISTER_PLUGIN_KERNEL({m.phi}, HWA_PD_TYPE_TOKEN, ALL_LAYOUT, "
                                 f"hwa_pd::k_{m.phi}, {types}) {{{body}}}\n")
            counters.append(f"{{\"{m.phi}\", &calls_{m.phi}}}, ")
            said.append(f"{m.phi}:{op}:{'|'.join(dtypes)}")
    return ("// Generated by hwadapter_paddle.kernels from optable.TABLE and the library's kernel table.\n"
            "namespace hwa_pd {\n" + "\n".join(wrappers) +
            "const Counter counters[] = {" + "".join(counters) + "{nullptr, nullptr}};\n}  // namespace hwa_pd\n\n"
            f"#define HWA_PD_REGISTERED \"{','.join(said)}\"\n\n" + "".join(registrations))


def python_kernels(device_type: str, c_kernels: dict[str, list[str]]) -> list[tuple[str, tuple[int, ...]]]:
    """The plugin's Python kernels the Python-kernel path can serve: [(op, input dtype codes)] for each optable
    entry and dtype the plugin runs itself (hwadapter.host.own_kernel) and its C library does not, when its runtime
    can reach the library's memory (hwadapter.host.accepts_native_memory); [] otherwise."""
    from hwadapter import host  # lazy: `hwadapter paddle` imports this module; only building loads the plugin
    dev = host.device(f"{device_type}:0")
    if not host.accepts_native_memory(dev):
        return []
    out = []
    for m in optable.TABLE:
        for dtype in m.dtypes:
            names = optable.input_dtypes(m, dtype)
            for op in (m.op,) + m.requires:
                if dtype not in c_kernels.get(m.op, []) and host.own_kernel(op, dev, names):
                    out.append((op, tuple(optable.DTYPE_CODES[d] for d in names)))
    return out


def compile_kernels(device_type: str, library: str | os.PathLike, out: str | os.PathLike, paddle,
                    register: dict[str, list[str]], compiler: str, include_dirs: list[Path],
                    python_type: str | None = None, composites: dict[str, list[str]] | None = None) -> list[str]:
    """Compile the kernels library for one device type into `out` (the Python-kernel one, calling the plugin of
    hwadapter device type `python_type`, when given); returns the command. RuntimeError with the compiler's last
    lines when it fails (the caller installs the runtime shim alone then)."""
    import sysconfig
    lib_dir = paddle.package_dir / "base"
    python = ([f"-I{sysconfig.get_paths()['include']}", "-DHWA_PD_PYTHON", f"-DHWA_PD_HWA_TYPE=\"{python_type}\""]
              if python_type else [])
    with tempfile.TemporaryDirectory(prefix="hwadapter-paddle-kernels-") as tmp:
        (Path(tmp) / "hwa_kernels.inc").write_text(generate(register, composites))
        # The Python-kernel library's wrappers hand each call to Python, whose cost is theirs: -O1 compiles it a
        # fifth faster (11.7 s, not 15.0, for the cpu plugin's 59 entries on the loaded 2-core machine).
        cmd = [compiler, "-shared", "-fPIC", "-O1" if python_type else "-O2", *PADDLE_KERNEL_FLAGS,
               "-fvisibility=hidden", f"-I{tmp}", *[f"-I{d}" for d in include_dirs], f"-I{paddle.include}",
               f"-I{paddle.include / 'third_party'}",
               f"-DHWA_PD_DEVICE_TYPE=\"{device_type}\"", f"-DHWA_PD_TYPE_TOKEN={device_type}",
               f"-DHWA_PD_LIBRARY=\"{Path(library).resolve()}\"", f"-DHWA_PD_BUILT_FOR=\"{paddle.label}\"",
               *python, str(KERNELS_SOURCE), "-o", str(out), f"-L{lib_dir}", "-l:libpaddle.so", f"-Wl,-rpath,{lib_dir}",
               "-ldl"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"the compiler did not finish within {COMPILE_TIMEOUT:.0f} s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-12:])
        raise RuntimeError(f"compiling the kernels library failed:\n{tail}")
    return cmd


def build(device_type: str, paddle_type: str, library: str, stage: Path, paddle, compiler: str,
          include_dirs: list[Path]) -> dict:
    """Plan and compile the kernels library of one device type into `stage`; the manifest's "kernels" entry:
    {"file" (None when not built), "registered": [{"phi", "op", "ops" (op and the ops its phi kernel also needs),
    "dtypes", "exact"}], "left": [{"op", "dtypes", "why"}], "error"}. Never raises: a failure is the entry's error, and the runtime shim is installed alone."""
    entry = {"file": None, "registered": [], "left": [], "error": None}
    try:
        register, entry["left"] = optable.plan(library_kernels(library))
    except Exception as err:  # the library's table cannot be read: the runtime shim still works
        entry["error"] = f"cannot read the library's kernel table: {err}"
        return entry
    try:
        compile_kernels(paddle_type, library, stage / kernels_filename(device_type), paddle, register, compiler,
                        include_dirs)
    except (RuntimeError, OSError) as err:
        entry["error"] = str(err)
        return entry
    entry["file"] = kernels_filename(device_type)
    entry["registered"] = [{"phi": m.phi, "op": op, "ops": [op, *m.requires], "dtypes": dtypes, "exact": m.exact}
                           for op, dtypes in register.items() for m in optable.phi_kernels(optable.BY_OP[op])]
    entry["registered"].append({"phi": "contiguous", "op": None, "dtypes": ["all"], "exact": True})
    # Paddle's own draws from the device's generator, copied in (paddle_kernels.cc): equal to a CPU initialisation
    entry["registered"] += [{"phi": phi, "op": "random", "ops": [], "dtypes": ["float32", "float64"], "exact": True}
                            for phi in ("uniform", "gaussian")]
    _build_python(device_type, paddle_type, library, stage, paddle, compiler, include_dirs, register, entry)
    return entry


def _build_python(device_type, paddle_type, library, stage, paddle, compiler, include_dirs, c_register,
                  entry) -> None:
    """The Python-kernel library, when the plugin has Python kernels the C library lacks: entry["python"] says
    {"file", "registered", "error"}."""
    try:
        wanted = python_kernels(device_type, c_register)
    except Exception as err:  # the plugin cannot be loaded here: its C kernels still serve
        entry["python"] = {"file": None, "registered": [], "error": f"cannot read the plugin's kernels: {err}"}
        return
    composites, left = plan_composites(device_type)
    if not wanted and not composites:
        return
    register, _ = optable.plan(wanted, python=True) if wanted else ({}, [])
    py = {"file": None, "registered": [], "error": None, "left": left}
    entry["python"] = py
    try:
        compile_kernels(paddle_type, library, stage / kernels_filename(device_type, python=True), paddle, register,
                        compiler, include_dirs, python_type=device_type, composites=composites)
    except (RuntimeError, OSError) as err:
        py["error"] = str(err)
        return
    py["file"] = kernels_filename(device_type, python=True)
    py["registered"] = [{"phi": m.phi, "op": op, "ops": [op, *m.requires], "dtypes": dtypes, "exact": m.exact,
                         "python": True}
                        for op, dtypes in register.items() for m in optable.phi_kernels(optable.BY_OP[op])]
    py["registered"] += [{"phi": phi, "op": "composite", "ops": [], "dtypes": dtypes,
                          "exact": training.BY_PHI[phi].exact, "python": True, "composite": True}
                         for phi, dtypes in composites.items()]


def plan_composites(device_type: str) -> tuple[dict[str, list[str]], list[dict]]:
    """({composite phi kernel: dtypes} whose sample runs on the device's own kernels, [{"phi", "dtypes", "why"}] left
    to Paddle's CPU): each composite is run once per dtype on a small sample with hwadapter's fallback off, so one
    that needs an op the plugin lacks is never registered half-done. ({}, []) when the plugin's runtime cannot reach
    a native host's memory."""
    import hwadapter as hw  # lazy: `hwadapter paddle` imports this module; only building loads the plugin
    from hwadapter import host
    dev = host.device(f"{device_type}:0")
    if not host.accepts_native_memory(dev):
        return {}, []
    found, left = {}, []
    for c in training.COMPOSITES:
        outs = [name for kind, _, name in parameters(c.params) if kind == "out"]
        for dtype in c.dtypes:
            try:
                ins, attrs = c.sample(dtype)
                def put(v):  # the composite's input: a Tensor of dev, or (arrays) the device's array
                    t = hw.to_tensor(v, device=dev)
                    return host.data(t) if c.arrays else t
                ins = {k: v if v is None or k in c.host_inputs else [put(a) for a in v] if isinstance(v, list)
                       else put(v) for k, v in ins.items()}
                with host.strict():
                    got = c.fn(training.ops(dev) if c.arrays else dev, ins, dict(attrs),
                               {n: (None, np.dtype(dtype)) for n in outs})
                missing = [n for n in outs if n not in got and n not in _OPTIONAL_OUTPUTS]
                if missing:
                    raise RuntimeError(f"gave no {', '.join(missing)}")
            except Exception as err:  # the reason is recorded: the kernel falls back to Paddle's CPU
                left.append({"phi": c.phi, "dtypes": [dtype], "why": f"{type(err).__name__}: {err}".splitlines()[0]})
                continue
            found.setdefault(c.phi, []).append(dtype)
    return found, left


#: outputs a composite may leave unwritten (Paddle allocates them only in modes the composite refuses)
_OPTIONAL_OUTPUTS = ("master_param_out", "master_param_outs", "moment2_max_out", "reserve_space")


def expected(entry: dict) -> dict[str, set[str]]:
    """{phi kernel: dtypes} that Paddle must list for the device type once the library is loaded."""
    out: dict[str, set[str]] = {}
    for r in entry["registered"] + ((entry.get("python") or {}).get("registered") or []):
        if r["op"] is not None:
            out.setdefault(r["phi"], set()).update(r["dtypes"])
    return out


def summary(entry: dict | None) -> str:
    """One line: what the kernels library registers, or why there is none."""
    if not entry or not entry.get("file"):
        why = (entry or {}).get("error") or "not built"
        return f"no kernels library (runtime only: every op falls back to Paddle's CPU kernels): {why.splitlines()[0]}"
    parts = [f"{r['phi']} ({', '.join(r['dtypes'])})" for r in entry["registered"] if r["op"] is not None]
    python = [r["phi"] for r in (entry.get("python") or {}).get("registered") or []]
    said = "phi kernels " + ", ".join(parts + ["contiguous (every dtype)"])
    if python:
        said += f"; the plugin's Python kernels as {', '.join(python)}"
    return said + "; other ops fall back to Paddle's CPU"
