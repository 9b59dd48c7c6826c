"""The two FP8 formats of Hopper's tensor cores, bit for bit: rounding, 8-bit codes, values.

Both are OCP 8-bit floating point (the "OFP8" formats; NVIDIA's `__nv_fp8_e4m3` and
`__nv_fp8_e5m2`, ml_dtypes' `float8_e4m3fn` and `float8_e5m2`). A code is one byte,
sign | exponent field | mantissa, read as

    exponent field E > 0   (-1)^s * (1 + M / 2^m) * 2^(E - bias)      normal
    exponent field E = 0   (-1)^s * (M / 2^m) * 2^(1 - bias)          subnormal (and +-0)

            bits   bias  largest finite      smallest normal  smallest subnormal
    e4m3   1.4.3     7   0.1111.110 = 448    2^-6             2^-9
    e5m2   1.5.2    15   0.11110.11 = 57344  2^-14            2^-16

    specials: e4m3 has no infinity and one NaN, s.1111.111; e5m2 has inf = s.11111.00 and
    NaN = s.11111.01, .10, .11 (IEEE-style).

e4m3 gives its top exponent to numbers (only the all-ones mantissa there is NaN): hence
448 = 1.75 x 2^8 instead of 240. `round_to_fp8` rounds to the nearest representable
value, ties to the even mantissa (round-to-nearest-even, as PTX's `cvt.rn`), then, past
the largest finite value:

    saturate=True   +-max finite (448 or 57344), infinities too: what `cvt.rn.satfinite.
                    e4m3x2.f32` does, the only float-to-FP8 conversion PTX has (its
                    `.satfinite` is not optional there) and the default of NVIDIA's
                    `__nv_fp8_e4m3(float)` (`__NV_SATFINITE`);
    saturate=False  NaN for e4m3 (it has no infinity), +-inf for e5m2: NVIDIA's
                    `__NV_NOSAT` and a plain ml_dtypes `astype`.

"Past" means the rounded magnitude exceeds the largest finite value: for e4m3 every x with
|x| > 464 (464 itself is the tie between 448 and the missing 480, and rounds to 448, the
even one), for e5m2 every |x| >= 61440. Magnitudes at or below half the smallest
subnormal (2^-10 for e4m3, 2^-17 for e5m2) round to a zero of x's sign. NaN stays NaN;
its code is 0x7F in both formats (NVIDIA's host conversion turns a float NaN into its
canonical positive NaN first). The rule is NVIDIA's reference, `__nv_cvt_double_to_fp8` in
`cuda_fp8.hpp`, which on sm_90 is that `cvt` instruction.

The arithmetic is exact: x (float32 or float64) is taken as float64, divided by the power
of two that is its quantum (the gap between representable values at its exponent), rounded
to an integer by `np.rint` (ties to even), multiplied back: each step is exact in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_bool


@dataclass(frozen=True)
class Fp8Format:
    """One 8-bit float format: `exp_bits` exponent bits, `man_bits` mantissa bits."""

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    max_finite: float
    has_inf: bool

    @property
    def min_normal(self) -> float:
        return 2.0 ** (1 - self.bias)

    @property
    def min_subnormal(self) -> float:
        return 2.0 ** (1 - self.bias - self.man_bits)

    @property
    def unit_roundoff(self) -> float:
        """The largest relative error of rounding a normal number: 2^-(m + 1)."""
        return 2.0 ** -(self.man_bits + 1)


E4M3 = Fp8Format("e4m3", 4, 3, 7, 448.0, has_inf=False)
E5M2 = Fp8Format("e5m2", 5, 2, 15, 57344.0, has_inf=True)
FORMATS = {"e4m3": E4M3, "e5m2": E5M2}
NAN_CODE = 0x7F          # the NaN this module writes, in both formats


def fp8_format(fmt) -> Fp8Format:
    """`fmt` as an Fp8Format: "e4m3", "e5m2" or one of the two objects."""
    if isinstance(fmt, Fp8Format) and fmt in FORMATS.values():
        return fmt
    if isinstance(fmt, str) and fmt in FORMATS:
        return FORMATS[fmt]
    raise ValueError(f"fmt must be one of {list(FORMATS)}, got {fmt!r}")


def _as_float64(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu" or arr.dtype == np.bool_:
        raise TypeError(f"{name} must hold real numbers (float or integer), got dtype "
                        f"{arr.dtype}")
    return arr.astype(np.float64)


def round_to_fp8(x, fmt="e4m3", *, saturate: bool = True) -> np.ndarray:
    """x rounded to the nearest value of `fmt` (ties to even), as float64 (same shape).

    saturate: past the largest finite value, clamp to it (True, the GPU's conversion) or
    give NaN (e4m3) / inf (e5m2) (False). See the module docstring.

    >>> round_to_fp8([1.0625, 1.1875, 300.0, 500.0], "e4m3").tolist()
    [1.0, 1.25, 288.0, 448.0]
    """
    f = fp8_format(fmt)
    saturate = check_bool(saturate, "saturate")
    x = _as_float64(x, "x")
    a = np.abs(x)
    with np.errstate(invalid="ignore", over="ignore"):
        _, e = np.frexp(a)                                  # a = m 2^e, m in [0.5, 1)
        exp = np.maximum(e - 1, 1 - f.bias)                 # subnormals share 2^(1 - bias)
        quantum = np.ldexp(1.0, exp - f.man_bits)           # gap between neighbours at a
        r = np.rint(a / quantum) * quantum                  # nearest, ties to even: exact
        over = r > f.max_finite                             # inf included (inf / q = inf)
        if saturate:
            r = np.where(over, f.max_finite, r)
        else:
            r = np.where(over, np.inf if f.has_inf else np.nan, r)
    r = np.where(np.isnan(x), np.nan, r)
    return np.copysign(r, x) if r.ndim else np.float64(np.copysign(r, x))


def encode(x, fmt="e4m3", *, saturate: bool = True) -> np.ndarray:
    """The uint8 codes of x rounded to `fmt` (`round_to_fp8`), same shape.

    >>> [hex(c) for c in encode([448.0, -2.0 ** -9, 1.0], "e4m3")]
    ['0x7e', '0x81', '0x38']
    """
    f = fp8_format(fmt)
    r = np.atleast_1d(round_to_fp8(x, f, saturate=saturate))
    sign = np.signbit(r).astype(np.uint8) << 7
    a = np.abs(r)
    codes = np.zeros(r.shape, np.uint8)
    finite = np.isfinite(a) & (a > 0)
    _, e = np.frexp(np.where(finite, a, 1.0))
    exp = e - 1
    normal = finite & (exp >= 1 - f.bias)
    sub = finite & ~normal
    field = np.where(normal, exp + f.bias, 0)
    mant_normal = np.ldexp(a, f.man_bits - exp) - 2 ** f.man_bits          # integers
    mant_sub = np.ldexp(a, f.man_bits + f.bias - 1)
    mant = np.where(normal, mant_normal, np.where(sub, mant_sub, 0.0))
    with np.errstate(invalid="ignore"):
        codes = (field.astype(np.int64) << f.man_bits) + mant.astype(np.int64)
    codes = np.where(finite, codes, 0)
    codes = np.where(np.isinf(a), (2 ** f.exp_bits - 1) << f.man_bits, codes)
    codes = codes.astype(np.uint8) | sign
    codes = np.where(np.isnan(r), NAN_CODE, codes).astype(np.uint8)
    return codes.reshape(np.shape(x)) if np.ndim(x) else codes.reshape(())


def _value_table(f: Fp8Format) -> np.ndarray:
    c = np.arange(256)
    sign = np.where(c & 0x80, -1.0, 1.0)
    field = (c >> f.man_bits) & (2 ** f.exp_bits - 1)
    mant = c & (2 ** f.man_bits - 1)
    top = field == 2 ** f.exp_bits - 1
    v = np.where(field == 0, np.ldexp(mant.astype(float), 1 - f.bias - f.man_bits),
                 np.ldexp(1.0 + mant / 2 ** f.man_bits, field - f.bias))
    if f.has_inf:
        v = np.where(top & (mant == 0), np.inf, np.where(top, np.nan, v))
    else:
        v = np.where(top & (mant == 2 ** f.man_bits - 1), np.nan, v)
    return sign * v


_TABLES = {name: _value_table(f) for name, f in FORMATS.items()}


def value_table(fmt="e4m3") -> np.ndarray:
    """(256,) float64: the value of every code 0x00 ... 0xFF of `fmt` (a copy). The codes
    that are not numbers hold NaN (e4m3: 0x7F and 0xFF; e5m2: 0x7D-0x7F and 0xFD-0xFF),
    e5m2's infinities +-inf (0x7C, 0xFC)."""
    return _TABLES[fp8_format(fmt).name].copy()


def decode(codes, fmt="e4m3") -> np.ndarray:
    """The float64 values of uint8 codes (any shape)."""
    f = fp8_format(fmt)
    codes = np.asarray(codes)
    if codes.dtype != np.uint8:
        raise TypeError(f"codes must be a uint8 array (one byte per value), got dtype "
                        f"{codes.dtype}")
    return _TABLES[f.name][codes]


def bit_fields(code: int, fmt="e4m3") -> tuple:
    """(sign, exponent field, mantissa) bit strings of one code, e.g. ('0', '1111', '110')."""
    f = fp8_format(fmt)
    if isinstance(code, bool) or not isinstance(code, (int, np.integer)) or not 0 <= code < 256:
        raise ValueError(f"code must be an integer in 0 ... 255, got {code!r}")
    bits = f"{int(code):08b}"
    return bits[0], bits[1:1 + f.exp_bits], bits[1 + f.exp_bits:]
