"""Scales: how a tensor is fitted into FP8's range before it is rounded.

e4m3 holds magnitudes from 2^-9 to 448 (normal from 2^-6), with 3 mantissa bits: a
relative step of 2^-3 between neighbours. A tensor is stored as codes plus scales,

    x  ~=  decode(code) * s,        s = amax / 448   (amax: the largest |x| the scale covers)

so that the largest element lands on 448 and nothing saturates. Which elements share one
scale is the *scheme* (shapes (..., T, d): leading axes such as batch B and head H, then T
tokens of d values):

    "tensor"  one scale for the whole tensor                    scale shape (..., 1), all equal
    "head"    one per leading index (per batch entry and head)   (..., 1)
    "block"   one per block of `block` consecutive tokens of one head (all d values of
              those tokens; the last block may be shorter)       (..., ceil(T / block))

A scale stored per block of tokens is what serving engines keep beside FP8 KV caches and
what FlashAttention-3's paper calls block quantization; the released FlashAttention-3 kernel
takes one fp32 "descale" per (batch, KV head), the "head" scheme. An all-zero group gets
scale 1 (its codes are zeros either way). Scales are float32, as the kernels take them;
x / s is computed in float32 and rounded with `cvt.rn.satfinite` semantics
(`codes.round_to_fp8(saturate=True)`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import check_array, check_block, check_choice, check_not_subclass
from .codes import decode, encode, fp8_format

SCHEMES = ("tensor", "head", "block")


def amax_scale(amax, fmt="e4m3") -> np.ndarray:
    """float32 scales amax / max_finite(fmt) (448 for e4m3); 1 where amax is 0."""
    f = fp8_format(fmt)
    amax = np.asarray(amax, np.float64)
    if (amax < 0).any() or not np.isfinite(amax).all():
        raise ValueError("amax must be finite and >= 0 (the largest magnitude of a group)")
    return np.where(amax > 0, amax / f.max_finite, 1.0).astype(np.float32)


def block_amax(x, block: int) -> np.ndarray:
    """(..., ceil(T / block)): max |x| over each block of `block` tokens (all d values)."""
    x = check_array(x, "x")
    block = check_block(block, "block")
    t = x.shape[-2]
    nb = -(-t // block)
    pad = nb * block - t
    a = np.abs(x.astype(np.float64))
    if pad:
        a = np.concatenate([a, np.zeros(a.shape[:-2] + (pad, a.shape[-1]))], axis=-2)
    return a.reshape(a.shape[:-2] + (nb, block * a.shape[-1])).max(axis=-1)


def scales(x, scheme: str = "block", *, block: int = 64, fmt="e4m3") -> tuple:
    """(scale (..., n_groups) float32, tokens per scale) of x (..., T, d) under `scheme`."""
    x = check_array(x, "x")
    scheme = check_choice(scheme, "scheme", SCHEMES)
    t = x.shape[-2]
    if scheme == "block":
        block = check_block(block, "block")
        return amax_scale(block_amax(x, block), fmt), block
    a = np.abs(x.astype(np.float64)).max(axis=(-2, -1))[..., None]            # (..., 1)
    if scheme == "tensor":
        a = np.full_like(a, a.max())
    return amax_scale(a, fmt), t


def expand(scale, tokens: int, t: int) -> np.ndarray:
    """(..., T, 1) float32: each token's scale, from scale (..., ceil(T / tokens)), one per
    `tokens` tokens. scale: real, finite and > 0; tokens, t: whole numbers >= 1 with
    scale.shape[-1] * tokens >= t. Anything else is an error naming the argument."""
    tokens, t = check_block(tokens, "tokens"), check_block(t, "t")
    arr = np.asarray(check_not_subclass(scale, "scale"))
    if arr.dtype.kind not in "fiu" or arr.ndim < 1:
        raise TypeError(f"scale must be a real array (..., ceil(T / tokens)), got "
                        f"{type(scale).__name__} of dtype {arr.dtype}, shape {arr.shape}")
    if not (np.isfinite(arr).all() and (arr > 0).all()):
        raise ValueError("scale must hold finite numbers > 0")
    if arr.shape[-1] * tokens < t:
        raise ValueError(f"scale's last axis ({arr.shape[-1]} scales x tokens {tokens}) must "
                         f"cover t = {t} tokens")
    return np.repeat(arr.astype(np.float32), tokens, axis=-1)[..., :t, None]


@dataclass(frozen=True)
class Quantized:
    """A tensor in FP8: codes (..., T, d) uint8, scale (..., n_groups) float32, each
    scale covering `tokens` consecutive tokens, in format `fmt`."""

    codes: np.ndarray
    scale: np.ndarray
    tokens: int
    fmt: str

    def dequantize(self) -> np.ndarray:
        """float32 (..., T, d): decode(codes) * scale."""
        t = self.codes.shape[-2]
        return (decode(self.codes, self.fmt).astype(np.float32)
                * expand(self.scale, self.tokens, t))


def quantize(x, scheme: str = "block", *, block: int = 64, fmt="e4m3") -> Quantized:
    """x (..., T, d) as FP8 codes and scales (`scales`), rounded with saturation."""
    x = check_array(x, "x")
    f = fp8_format(fmt)
    scale, tokens = scales(x, scheme, block=block, fmt=f)
    t = x.shape[-2]
    scaled = x.astype(np.float32) / expand(scale, tokens, t)                 # float32
    return Quantized(encode(scaled, f, saturate=True), scale, tokens, f.name)


def fake_quantize(x, scheme: str = "block", *, block: int = 64, fmt="e4m3") -> np.ndarray:
    """float32 x after a round trip through FP8: quantize(...).dequantize()."""
    return quantize(x, scheme, block=block, fmt=fmt).dequantize()
