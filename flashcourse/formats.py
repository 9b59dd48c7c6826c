"""Number formats: rounding to fp16 and bf16 (which numpy lacks), and unit roundoffs.

Real FlashAttention kernels keep S, m, l and the accumulator in fp32 but round the
probabilities P to the input format (fp16 or bf16) before the P V matrix product, so
that it runs on the tensor cores. `round_to` lets the numpy code do the same:

    fp16  numpy's float16 (10 fraction bits): unit roundoff u = 2^-11 ~ 4.9e-4
    bf16  bfloat16 (7 fraction bits, float32's exponent range): u = 2^-8 ~ 3.9e-3;
          emulated here by rounding float32 to its top 16 bits, to nearest, ties to even
    fp32  u = 2^-24 ~ 6.0e-8;  fp64  u = 2^-53 ~ 1.1e-16
"""

from __future__ import annotations

import numpy as np

#: Unit roundoff u = 2^-(fraction bits + 1) of each format: the largest relative
#: error of rounding one real number to it (round to nearest).
UNIT_ROUNDOFF = {"fp64": 2.0 ** -53, "fp32": 2.0 ** -24, "fp16": 2.0 ** -11,
                 "bf16": 2.0 ** -8}
FORMATS = tuple(UNIT_ROUNDOFF)


def check_format(fmt, name: str = "fmt") -> str:
    """Return fmt if it is one of FORMATS, else raise naming the argument."""
    if fmt not in UNIT_ROUNDOFF:
        raise ValueError(f"{name} must be one of {list(FORMATS)}, got {fmt!r}")
    return fmt


def round_to(x, fmt: str) -> np.ndarray:
    """x rounded to the format `fmt`, returned in float32 (float64 for "fp64").

    >>> float(round_to(np.float32(1 + 2 ** -9), "bf16"))     # 7 fraction bits: ties to 1
    1.0
    >>> float(round_to(1 + 2 ** -7, "bf16"))
    1.0078125
    """
    check_format(fmt)
    x = np.asarray(x)
    if fmt == "fp64":
        return x.astype(np.float64)
    if fmt == "fp16":
        return x.astype(np.float16).astype(np.float32)
    x32 = np.array(x, dtype=np.float32)                             # a copy, any shape
    if fmt == "fp32":
        return x32
    bits = x32.view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000     # nearest, ties to even
    out = rounded.astype(np.uint32).view(np.float32)
    return np.where(np.isfinite(x32), out, x32)                     # keep inf / nan as they are
