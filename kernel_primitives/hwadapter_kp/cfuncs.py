"""Helper functions the generated code may need, written once for every C-family dialect.

Each helper is wrapped in an include guard so that several generated sources
can be concatenated into one translation unit (batch compilation).
"""

FLOORDIV_INT = """{q}{T} kp_floordiv_{d}({T} a, {T} b)
{{
    if (b == 0) return 0;  /* numpy: x // 0 == 0 */{minus_one}
    {T} q = a / b;{floor_fix}
    return q;
}}"""

FLOORMOD_INT = """{q}{T} kp_floormod_{d}({T} a, {T} b)
{{
    if (b == 0) return 0;  /* numpy: x % 0 == 0 */{minus_one_mod}
    {T} r = a % b;{mod_fix}
    return r;
}}"""

FLOORMOD_FLOAT = """{q}{T} kp_floormod_{d}({T} a, {T} b)
{{
    {T} r = {fmod};  /* exact, takes the sign of a */
    if (b == 0) return r;  /* NaN, as numpy */
    if (r != 0) {{
        if ((b < 0) != (r < 0)) r += b;
    }} else {{
        r = {copysign};
    }}
    return r;
}}"""

IPOW = """{q}{T} kp_ipow_{d}({T} base, {T} exponent)
{{{negative}
    {W} result = 1;
    {W} factor = ({W})base;  /* unsigned: overflow wraps like numpy */
    while (exponent > 0) {{
        if (exponent & 1) result *= factor;
        factor *= factor;
        exponent >>= 1;
    }}
    return ({T})result;
}}"""

# IEEE binary16 <-> binary32 with round-to-nearest-even, for C where no half type is assumed.
HALF_TO_FLOAT = """{q}float kp_half_to_float(uint16_t h)
{{
    const uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    const uint32_t exponent = ((uint32_t)h >> 10) & 0x1fu;
    uint32_t mantissa = (uint32_t)h & 0x3ffu;
    uint32_t bits;
    if (exponent == 0x1fu) {{
        bits = sign | 0x7f800000u | (mantissa << 13);  /* inf / nan */
    }} else if (exponent != 0) {{
        bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    }} else if (mantissa == 0) {{
        bits = sign;
    }} else {{
        uint32_t e = 113u;  /* subnormal half: normalise the mantissa */
        while ((mantissa & 0x400u) == 0) {{
            mantissa <<= 1;
            e -= 1;
        }}
        bits = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
    }}
    union {{ uint32_t u; float f; }} pun;
    pun.u = bits;
    return pun.f;
}}"""

FLOAT_TO_HALF = """{q}uint16_t kp_float_to_half(float value)
{{
    union {{ float f; uint32_t u; }} pun;
    pun.f = value;
    const uint32_t sign = (pun.u >> 16) & 0x8000u;
    const uint32_t magnitude = pun.u & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) {{
        if (magnitude == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));  /* quiet nan, its sign kept */
    }}
    if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  /* >= 65520 rounds to inf */
    if (magnitude < 0x38800000u) {{
        if (magnitude <= 0x33000000u) return (uint16_t)sign;  /* <= 2^-25 rounds to zero */
        const uint32_t shift = 126u - (magnitude >> 23);
        const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
        uint32_t h = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1u);
        const uint32_t halfway = 1u << (shift - 1u);
        if (rest > halfway || (rest == halfway && (h & 1u))) h += 1;
        return (uint16_t)(sign | h);
    }}
    uint32_t h = (magnitude - 0x38000000u) >> 13;
    const uint32_t rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h += 1;
    return (uint16_t)(sign | h);
}}"""


# IEEE binary64 -> binary16 with one round-to-nearest-even (through float it would round twice: 65519.99 -> inf).
DOUBLE_TO_HALF = """{q}uint16_t kp_double_to_half(double value)
{{
    union {{ double f; uint64_t u; }} pun;
    pun.f = value;
    const uint16_t sign = (uint16_t)((pun.u >> 48) & 0x8000u);
    const uint64_t magnitude = pun.u & 0x7fffffffffffffffULL;
    if (magnitude >= 0x7ff0000000000000ULL) {{
        if (magnitude == 0x7ff0000000000000ULL) return (uint16_t)(sign | 0x7c00u);
        return (uint16_t)(sign | 0x7e00u | (uint16_t)((magnitude >> 42) & 0x3ffu));  /* quiet nan */
    }}
    if (magnitude >= 0x40effe0000000000ULL) return (uint16_t)(sign | 0x7c00u);  /* >= 65520 rounds to inf */
    if (magnitude < 0x3f10000000000000ULL) {{  /* below 2^-14: a subnormal half or zero */
        if (magnitude <= 0x3e60000000000000ULL) return sign;  /* <= 2^-25 rounds to zero */
        const uint64_t shift = 1051u - (magnitude >> 52);
        const uint64_t mantissa = (magnitude & 0xfffffffffffffULL) | 0x10000000000000ULL;
        uint64_t h = mantissa >> shift;
        const uint64_t rest = mantissa & ((1ULL << shift) - 1u);
        const uint64_t halfway = 1ULL << (shift - 1u);
        if (rest > halfway || (rest == halfway && (h & 1u))) h += 1;
        return (uint16_t)(sign | h);
    }}
    uint64_t h = (magnitude - 0x3f00000000000000ULL) >> 42;
    const uint64_t rest = magnitude & 0x3ffffffffffULL;
    if (rest > 0x20000000000ULL || (rest == 0x20000000000ULL && (h & 1u))) h += 1;
    return (uint16_t)(sign | h);
}}"""


def guarded(name: str, code: str) -> str:
    """Wrap a helper definition in an include guard named after it."""
    macro = "KP_HAVE_" + name.upper().removeprefix("KP_")
    return f"#ifndef {macro}\n#define {macro}\n{code}\n#endif"


def int_helper(kind: str, d: str, dialect) -> str:
    """Source of an integer floordiv/floormod/ipow helper for dtype ``d``."""
    T, signed = dialect.ctype(d), not d.startswith("uint")
    fields = dict(q=dialect.func_qualifier, T=T, d=d,
                  minus_one=(f"\n    if (b == -1) return ({T})(({dialect.utype(d)})0 - ({dialect.utype(d)})a);"
                             f"  /* no trap on MIN / -1 */" if signed else ""),
                  minus_one_mod="\n    if (b == -1) return 0;" if signed else "",
                  # C truncates toward zero; numpy floors (unsigned values need no fix)
                  floor_fix="\n    if (a % b != 0 && ((a < 0) != (b < 0))) q -= 1;" if signed else "",
                  mod_fix="\n    if (r != 0 && ((r < 0) != (b < 0))) r += b;" if signed else "",
                  W=dialect.utype(d),
                  negative=("\n    if (exponent < 0) return base == 1 ? 1 : (base == -1 ? ((exponent & 1) ? -1 : 1) : 0);"
                            if signed else ""))
    template = {"floordiv": FLOORDIV_INT, "floormod": FLOORMOD_INT, "ipow": IPOW}[kind]
    return template.format(**fields)


def float_floormod(d: str, dialect) -> str:
    """Source of numpy's float remainder (fmod, then shift into the divisor's sign)."""
    return FLOORMOD_FLOAT.format(q=dialect.func_qualifier, T=dialect.ctype(d), d=d,
                                 fmod=dialect.call("fmod", d, "a", "b"),
                                 copysign=dialect.call("copysign", d, dialect.lit(0, d), "b"))


def helper_name(kind: str, d: str) -> str:
    """C name of a helper."""
    if kind == "round_half" and d == "float64":
        return "kp_round_half_f64"
    if kind in ("half_to_float", "float_to_half", "double_to_half", "round_half"):
        return f"kp_{kind}"
    return f"kp_{kind}_{d}"

