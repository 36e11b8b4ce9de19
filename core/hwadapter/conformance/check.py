"""Running one kernel case on a device and judging it against the numpy oracle: array type, shape, dtype, values."""
from __future__ import annotations

import warnings

import numpy as np

from hwadapter.plugin import DeviceArray, KernelNotFoundError, UnsupportedDTypeError, meta, reference

#: (rtol, atol) per float dtype: kernels may sum in another order or use the device's libm.
TOLERANCE = {"float16": (1e-2, 1e-2), "float32": (1e-4, 1e-5), "float64": (1e-9, 1e-12)}
#: Raised by a kernel that declines a case it does not support: counted, not a failure.
DECLINED = (UnsupportedDTypeError, KernelNotFoundError)


def reproduce(op: str, device, program: bool = False) -> str:
    """Python that judges every kit case of op on device again and prints the wrong ones: the device's kernel for op,
    or with program=True its kernel-primitive program (codegen backend)."""
    kernel = f"dev.primitive({op!r})" if program else f"dev.kernels.find({op!r}, dtypes)"
    return (f"from hwadapter import host; from hwadapter.conformance import cases, check; "
            f"dev = host.device({str(device)!r}); "
            f"print(*check.run_cases({op!r}, dev, lambda dtypes: {kernel}, cases.cases_of({op!r}))[2], sep='\\n')")


def upload(dev, a: np.ndarray):
    """A host array as dev's array type (numpy itself on a host-memory device)."""
    a = a if a.flags.c_contiguous else a.copy()  # not ascontiguousarray: it makes a 0-d array 1-d
    return a if dev.host_memory else DeviceArray.from_numpy(dev, a)


def describe(arrays, attrs) -> str:
    inputs = ", ".join(f"{a.dtype.name}{list(a.shape)}" for a in arrays)
    return f"({inputs}{', ' if attrs else ''}{', '.join(f'{k}={v!r}' for k, v in attrs.items())})"


def oracle(op: str, arrays, attrs) -> tuple[list, bool]:
    """The reference kernel's outputs as a list of numpy arrays, and whether it returns a list (multi-output op)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out = reference.KERNELS[op](*arrays, **attrs)
    multi = isinstance(out, (list, tuple))
    return ([np.asarray(o) for o in out] if multi else [np.asarray(out)]), multi


def _kind(value, dev) -> str | None:
    """Why `value` is not dev's array type, or None when it is."""
    if dev.host_memory:
        if isinstance(value, np.generic):  # numpy ufuncs return scalars for 0-d inputs: the dispatcher takes them
            return None
        if type(value) is not np.ndarray:
            return (f"a {type(value).__name__} where a numpy.ndarray is expected ({dev} keeps tensors in host "
                    f"memory)")
        return None if value.flags.c_contiguous else "a non-contiguous numpy.ndarray"
    if not isinstance(value, DeviceArray):
        return f"a {type(value).__module__}.{type(value).__name__} where a DeviceArray on {dev} is expected"
    if value.device is not dev:
        return f"a DeviceArray on {value.device} where one on {dev} is expected"
    return None


def _values(got: np.ndarray, want: np.ndarray) -> str | None:
    if want.dtype.kind == "f":
        rtol, atol = TOLERANCE.get(want.dtype.name, (1e-4, 1e-5))
        try:
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                       equal_nan=True)
        except AssertionError as err:
            return " ".join(str(err).split())[:600]
        return None
    if not np.array_equal(got, want):
        bad = np.argwhere(got != want)
        where = tuple(int(i) for i in bad[0]) if bad.size else ()
        return f"{len(bad)} of {want.size} elements differ, first at {where}: got {got[where]!r}, want {want[where]!r}"
    return None


def judge(op: str, dev, kernel, arrays, attrs) -> str | None:
    """Run `kernel` on `arrays` (host) uploaded to dev; None when the result is right, else what is wrong."""
    want, want_multi = oracle(op, arrays, attrs)
    expected = meta.result_meta(op, tuple(a.shape for a in arrays), tuple(a.dtype for a in arrays), attrs)
    inputs = [upload(dev, a) for a in arrays]
    before = [a.tobytes() for a in arrays]  # uploading may share a host array: the bytes as they were
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out = kernel(*inputs, **attrs)
    changed = [i for i, (x, b) in enumerate(zip(inputs, before))
               if (x.numpy() if isinstance(x, DeviceArray) else np.asarray(x)).tobytes() != b]
    del inputs
    if changed:
        return (f"wrote into its input {changed[0]}: tensors are immutable, so the caller's tensor changed; a kernel "
                f"must leave its inputs as they are and write its result into new memory (only a kernel that says it "
                f"takes out= is ever given memory to write)")
    multi = isinstance(out, (list, tuple))
    outs = list(out) if multi else [out]
    if len(outs) != len(want) or want_multi != multi:
        wanted = f"a list of {len(want)}" if want_multi else "one array"
        return f"returned {len(outs) if multi else 'one'} output(s) ({type(out).__name__}) where {wanted} is expected"
    for i, (o, w) in enumerate(zip(outs, want)):
        kind = _kind(o, dev)
        if kind is not None:
            return f"output {i}: {kind}"
        shape, dtype = (tuple(expected[i][0]), np.dtype(expected[i][1])) if expected else (w.shape, w.dtype)
        if tuple(o.shape) != shape or np.dtype(o.dtype) != dtype:
            return (f"output {i}: shape {tuple(o.shape)} dtype {np.dtype(o.dtype).name}; expected shape {shape} dtype "
                    f"{dtype.name} (the op's rule: hwadapter.plugin.meta)")
        got = o.numpy() if isinstance(o, DeviceArray) else np.asarray(o)
        wrong = _values(got, w)
        if wrong:
            return f"output {i}: values differ from numpy's: {wrong}"
    return None


def run_cases(op: str, dev, kernel_for, cases) -> tuple[int, int, list[str]]:
    """Judge every case; kernel_for(dtypes) gives the kernel (None: not registered for them). Returns (cases run,
    cases declined by the kernel, the problems)."""
    ran = declined = 0
    problems = []
    for arrays, attrs in cases:
        kernel = kernel_for(tuple(a.dtype for a in arrays))
        if kernel is None:
            continue
        try:
            problem = judge(op, dev, kernel, arrays, attrs)
        except DECLINED:
            declined += 1
            continue
        except Exception as err:  # noqa: BLE001: whatever the kernel raised is the finding
            problem = f"raised {type(err).__name__}: {' '.join(str(err).split())[:400]}"
        ran += 1
        if problem:
            problems.append(f"{op}{describe(arrays, attrs)}: {problem}")
    return ran, declined, problems
