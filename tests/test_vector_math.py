"""The compiled CPU path's transcendental functions (glibc's libmvec, vectorised): their error in float32 ulps against
float64 over the whole float32 range, as a table, each within its stated bound, with IEEE nan, infinity and signed-zero
results exactly as float64's rounded to float32; where float64's result is subnormal in float32, within float32's
smallest normal of it (no ulp is defined there that a float32 formula can keep)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import special

from hwadapter.runtime.device import get

def _gelu(x):
    """gelu as the generated C computes it, 0.5 x erfc(-x / sqrt 2), in float64 after erfc's argument is rounded to
    float32 as the C rounds it: erfc's condition number (about 2 z^2) turns that one rounding into ~170 ulps for x
    near -12 in any float32 formula, which is not the vector function's error, what this table measures."""
    z = (-x.astype(np.float32) * np.float32(0.7071067811865476)).astype(np.float64)
    return np.where(x < -40, -0.0, 0.5 * x * special.erfc(z))


#: op -> (float64 oracle, bound in float32 ulps): the largest error measured over the float32 range, rounded up. Each
#: op's generated C calls one vector math function (sigmoid: expf; gelu: erfcf).
BOUNDS = {
    "exp": (np.exp, 3.0), "log": (np.log, 4.0), "tanh": (np.tanh, 2.0), "erf": (special.erf, 4.5),
    "sin": (np.sin, 2.0), "cos": (np.cos, 2.5), "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), 4.0),
    "gelu": (_gelu, 5.0),
}
POW_BOUND = 1.0
#: every STEP-th float32 bit pattern (all signs, exponents, subnormals) plus the special values
STEP = 4099
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1.1754944e-38, 88.72284, -87.33655,
                    89.0, -104.0, 1.0, -1.0, 3.4028235e38, -3.4028235e38], np.float32)


def _compiled():
    device = get("cpu")
    if device.codegen is None:
        pytest.skip(f"no CPU codegen: {device.codegen_unavailable}")
    if not device.codegen.dialect.vector_math:
        pytest.skip("this C library has no vector math functions (glibc's libmvec) the compiler calls: the generated "
                    "loops call the scalar ones, whose accuracy is the C library's")
    return device


def ulps(got: np.ndarray, want: np.ndarray) -> tuple[float, int]:
    """(largest error in float32 ulps where float64's result `want` is a normal float32, count of results that differ
    from float64's where it is nan, infinite or zero (sign included), or subnormal by more than float32's smallest
    normal)."""
    tiny = np.float64(np.finfo(np.float32).tiny)
    rounded = want.astype(np.float32)
    same = (got == rounded) & (np.signbit(got) == np.signbit(rounded)) | (np.isnan(got) & np.isnan(rounded))
    special = np.isnan(want) | np.isinf(rounded) | (want == 0) | ~np.isfinite(got)
    subnormal = ~special & (np.abs(want) < tiny)
    wrong = special & ~same | subnormal & (np.abs(got - want) > tiny)
    normal = ~special & ~subnormal
    ulp = np.exp2(np.floor(np.log2(np.abs(want[normal]))) - 23)
    err = np.abs(got[normal].astype(np.float64) - want[normal]) / ulp
    return (float(err.max()) if err.size else 0.0), int(np.count_nonzero(wrong))


def sweep(step: int) -> np.ndarray:
    """Every `step`-th float32 bit pattern, then the special values."""
    bits = np.arange(0, 1 << 32, step, dtype=np.uint64).astype(np.uint32)
    return np.concatenate([bits.view(np.float32), SPECIAL])


#: pow's exponents (float32), each a row "pow^e": the generated C calls powf(x, e)
EXPONENTS = (0.5, 2.0, 3.0, -1.0, 2.5, -0.5, float(np.float32(1 / 3)), 7.0)


def _pow_oracle(e):
    from hwadapter_kp.functors import _fpow  # C's pow: numpy's power with IEEE's results at 0.5 (its documentation)
    return lambda x: _fpow(x, np.float64(e))


def table(step: int) -> list:
    """[(op, largest error in ulps, wrong special results, bound)] of the compiled ops over sweep(step)."""
    device = _compiled()
    x = sweep(step)
    rows = []
    with np.errstate(all="ignore"):
        for op, (oracle, bound) in BOUNDS.items():
            got = np.asarray(device.primitive(op)(x))
            rows.append((op, *ulps(got, oracle(x.astype(np.float64))), bound))
        for e in EXPONENTS:
            got = np.asarray(device.primitive("pow")(x, np.full_like(x, e)))
            rows.append((f"pow^{e:.4g}", *ulps(got, _pow_oracle(e)(x.astype(np.float64))), POW_BOUND))
    print(f"\ncompiled float32 ops, {x.size} values (every {step}th float32 bit pattern, then specials); "
          f"vector math: {', '.join(device.codegen.dialect.vector_math)}")
    print(f"{'op':8s} {'max ulp':>8s} {'bound':>6s} {'special wrong':>14s}")
    for op, err, wrong, bound in rows:
        print(f"{op:8s} {err:8.2f} {bound:6.1f} {wrong:14d}")
    return rows


def _check(rows):
    for op, err, wrong, bound in rows:
        assert wrong == 0, f"{op}: {wrong} nan/inf/zero/subnormal results differ from float64's"
        assert err <= bound, f"{op}: {err:.2f} ulp over the float32 range, above its bound {bound}"


def test_vector_math_error_table_over_the_float32_range():
    _check(table(STEP))


@pytest.mark.slow
def test_vector_math_error_table_over_the_float32_range_finely():
    _check(table(257))


def test_the_loops_calling_them_are_vectorised():
    """gcc vectorises each op's loop, calling the vector forms (_ZGV...), rather than leaving it scalar."""
    device = _compiled()
    import hwadapter_kp as kp
    backend = device.codegen
    for op in (*BOUNDS, "pow"):
        inputs = {"x": np.zeros(100, np.float32)} if op != "pow" else {"x": np.zeros(100, np.float32),
                                                                         "y": np.zeros(100, np.float32)}
        program = kp.library.get(op).specialize_for(inputs)
        report = backend.vectorizer_report(program.source(backend.dialect), program.name)
        if report is None:
            pytest.skip(f"{backend.version}: not gcc, no -fopt-info-vec report")
        assert "optimized: loop vectorized" in report, f"{op}: loop left scalar:\n{report}"
