"""FP8 KV caches in numpy: a cache stored as e4m3 codes plus fp32 scales, what it costs in
bytes, the checks the decode kernels' inputs pass, and the append of new tokens into an FP8
paged cache (the model the GPU's append kernel is checked against).

Layout (what `flashcourse.cuda.decode` and `flashcourse.cuda.paged_decode` read when k, v are
uint8 codes):

    k, v        (B, Hkv, Tk, d) uint8 e4m3 codes (numpy has no FP8 dtype; PyTorch's
                float8_e4m3fn tensors are passed as `.view(torch.uint8)`), or a pool
                (num_pages, Hkv, page_size, d) of them
    k_scale,    fp32, the value of a code being decode(code) x scale, either
    v_scale       scale_block None: one per (B, Hkv)                     shape (B, Hkv)
                  scale_block Bs:   one per block of Bs tokens of a head  (B, Hkv, ceil(Tk / Bs)),
                                    in a pool per block within a page     (num_pages, Hkv,
                                                                           page_size / Bs)

Which granularity and why. The released FlashAttention-3 kernel takes one descale per
(batch, KV head), and vLLM documents one fp32 scale beside each quantized tensor: few
scales, no bytes to speak of, but the largest value of a whole head's cache sets every
token's step. DeepSeek's FlashMLA stores 4 fp32 scales per token, one per 128 of its 512
values (its README): with d = 128, that is scale_block = 1 here. The course takes
per-(B, Hkv) and per block of tokens (the block scheme of `scaling`, notebook 15), since the
same kernel covers both ends: Bs = 1 is FlashMLA's granularity at d = 128, Bs = page_size one
scale per page. What a scale costs is 4 bytes per Bs x d values (`bytes_per_token`); what it
buys is measured by notebook 15 and tests/test_fp8_kv.py.

Scales of a growing cache (the append). A block's scale is set by the append that writes
its first token: amax / 448 over that append's tokens of the block (one head, all d values).
Tokens appended to the block later are divided by that scale and saturate at 448 if they are
larger; with Bs = 1 every token sets its own scale and nothing saturates. Per-(B, Hkv) scales
are not changed by an append: they are given (static, as a calibrated per-tensor scale).
"""

from __future__ import annotations

import numpy as np

from .._checks import check_array, check_block, check_not_subclass
from ..paged_cache import token_address
from .codes import E4M3, decode, encode
from .scaling import amax_scale, quantize

#: the two NaN codes of e4m3 (s.1111.111)
NAN_CODES = (0x7F, 0xFF)
#: bytes of one fp32 scale
SCALE_BYTES = 4
#: what a PyTorch float8 tensor needs before it is passed (named in errors)
TORCH_HINT = "a PyTorch float8_e4m3fn tensor is passed as x.view(torch.uint8)"


def check_scale_block(scale_block):
    """None (one scale per (B, Hkv)) or a whole number of tokens >= 1."""
    if scale_block is None:
        return None
    return check_block(scale_block, "scale_block")


def scale_shape(lead: tuple, t: int, scale_block) -> tuple:
    """The scales' shape for a cache (*lead, T, d): lead, or (*lead, ceil(T / scale_block))."""
    if scale_block is None:
        return tuple(lead)
    return tuple(lead) + (-(-t // scale_block),)


def quantize_cache(x, scale_block=None):
    """(codes uint8 (..., T, d), scale float32) of a cache x (..., T, d): one scale per
    leading index (scale_block None: shape x.shape[:-2]) or per block of scale_block tokens
    (x.shape[:-2] + (ceil(T / scale_block),)); scale = amax / 448, codes rounded to nearest
    even with saturation (`scaling.quantize`). A pool (num_pages, Hkv, page_size, d) with
    scale_block dividing page_size gets one scale per block within each page."""
    x = check_array(x, "x")
    scale_block = check_scale_block(scale_block)
    if scale_block is None:
        qz = quantize(x, "head", fmt=E4M3)
        return qz.codes, qz.scale[..., 0]
    qz = quantize(x, "block", block=scale_block, fmt=E4M3)
    return qz.codes, qz.scale


def per_token(scale, t: int, scale_block) -> np.ndarray:
    """(..., T, 1) float64: each token's scale."""
    s = np.asarray(scale, np.float64)
    if scale_block is None:
        return np.broadcast_to(s[..., None, None], s.shape + (t, 1))
    return np.repeat(s, scale_block, axis=-1)[..., :t, None]


def dequantize_cache(codes, scale, scale_block=None, *,
                     allow_nonfinite: bool = False) -> np.ndarray:
    """float64 (..., T, d): decode(codes) x scale. Exact: a code has 4 significant bits and
    a float32 scale 24, so the product fits float64's 53. codes: a uint8 numpy array of
    e4m3 codes (..., T, d) without NaN codes; scale: finite and > 0, of `scale_shape`'s
    shape; an error naming the argument otherwise (allow_nonfinite: NaN codes and
    scales are decoded as they are)."""
    codes = check_codes(codes, "codes", allow_nonfinite=allow_nonfinite)
    if codes.ndim < 2 or 0 in codes.shape:
        raise ValueError(f"codes must have shape (..., T, d) with no empty axis, got "
                         f"{codes.shape}")
    arr = np.asarray(check_not_subclass(scale, "scale"))
    if arr.dtype.kind not in "fiu" or not allow_nonfinite and not (
            np.isfinite(arr).all() and (arr > 0).all()):
        raise ValueError(f"scale must hold finite real numbers > 0, got dtype {arr.dtype}")
    return decode(codes) * per_token(scale, codes.shape[-2], check_scale_block(scale_block))


# ---------------------------------------------------------------------------------------
# Bytes
# ---------------------------------------------------------------------------------------

def bytes_per_token(d: int, heads_kv: int, scale_block=None, *, itemsize: int = 1,
                    tokens: int | None = None) -> float:
    """Bytes of K and V per token of a cache: 2 Hkv d itemsize, plus the fp32 scales (2 Hkv
    per scale_block tokens; per (B, Hkv): 2 Hkv per `tokens`, the cache's length). itemsize
    2 is an fp16 cache (no scales). d, heads_kv, itemsize, tokens: whole numbers >= 1
    (tokens may be None), scale_block as `check_scale_block` takes it; an error naming
    the argument otherwise."""
    d, heads_kv, itemsize = check_block(d, "d"), check_block(heads_kv, "heads_kv"), \
        check_block(itemsize, "itemsize")
    scale_block = check_scale_block(scale_block)
    if tokens is not None:
        tokens = check_block(tokens, "tokens")
    values = 2 * heads_kv * d * itemsize
    if itemsize != 1:
        return float(values)
    per = tokens if scale_block is None else scale_block
    return values + (0.0 if per is None else 2 * heads_kv * SCALE_BYTES / per)


# ---------------------------------------------------------------------------------------
# Checks (numpy inputs; the device path checks shapes, and values with check=True)
# ---------------------------------------------------------------------------------------

def check_codes(x, name: str, *, allow_nonfinite: bool = False) -> np.ndarray:
    """x as a uint8 numpy array of e4m3 codes; TypeError for another dtype, ValueError for
    a NaN code (0x7F, 0xFF) unless allow_nonfinite."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy uint8 array of e4m3 codes, got "
                        f"{type(x).__name__}")
    check_not_subclass(x, name)
    check_code_dtype(x.dtype, name)
    if 0 in x.shape:
        raise ValueError(f"{name} must not have an empty axis, got shape {x.shape}")
    if not allow_nonfinite:
        check_no_nan_codes(x, name)
    return x


def check_code_dtype(dtype, name: str) -> None:
    if np.dtype(dtype) != np.uint8:
        raise TypeError(f"{name} must hold e4m3 codes as uint8 (one byte per value; "
                        f"{TORCH_HINT}), got dtype {dtype}")


def check_no_nan_codes(x, name: str) -> None:
    """ValueError naming the first NaN code (0x7F or 0xFF) of x, if any."""
    bad = np.flatnonzero((np.asarray(x) & 0x7F) == 0x7F)
    if bad.size:
        at = np.unravel_index(int(bad[0]), np.shape(x))
        raise ValueError(f"{name}{list(map(int, at))} = 0x{int(np.asarray(x)[at]):02X} is an "
                         f"e4m3 NaN code (0x7F, 0xFF; {bad.size} in all): a cache holds finite "
                         f"values (codes.encode saturates); pass allow_nonfinite=True if "
                         f"that is intended")


def check_scales(x, name: str, shape: tuple, what: str) -> np.ndarray:
    """x as float32 of `shape`, every entry finite and > 0; else TypeError/ValueError
    naming `name` and saying what the shape means (`what`)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array of fp32 scales {what}, got "
                        f"{type(x).__name__}")
    if x.dtype.kind != "f":
        raise TypeError(f"{name} must hold float scales (taken as float32), got dtype "
                        f"{x.dtype}")
    if x.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)} {what}, got {x.shape}")
    s = x.astype(np.float32)
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise ValueError(f"{name} must hold finite scales > 0 as float32 (amax / 448), got "
                         f"min {float(s.min()):g}, max {float(s.max()):g}")
    return s


def scale_what(scale_block, paged: bool) -> str:
    """What the scales' shape means, for messages."""
    if scale_block is None:
        return "(one scale per batch entry and KV head)"
    unit = "page_size / scale_block blocks per page" if paged else \
        "ceil(Tk / scale_block) blocks"
    return f"(one scale per block of {scale_block} tokens of a KV head: {unit})"


# ---------------------------------------------------------------------------------------
# A paged FP8 cache
# ---------------------------------------------------------------------------------------

def pool_values(codes, scale, block_table, seq_lens, scale_block=None, *,
                allow_nonfinite: bool = False) -> np.ndarray:
    """float64 values of an FP8 pool (num_pages, Hkv, page_size, d): per block within a
    page (scale (num_pages, Hkv, page_size / scale_block)), or per (B, Hkv) (scale (B, Hkv):
    each sequence's pages with its scales; a page two sequences share with different scales
    is refused). Pages no sequence uses are 0 in the per-(B, Hkv) case."""
    codes = np.asarray(codes)
    if scale_block is not None:
        return dequantize_cache(codes, scale, scale_block, allow_nonfinite=allow_nonfinite)
    ps = codes.shape[2]
    out = np.zeros(codes.shape)
    owner = {}
    for b, n in enumerate(np.asarray(seq_lens).tolist()):
        for page in np.asarray(block_table)[b, :-(-n // ps)].tolist():
            if page in owner and not np.array_equal(scale[owner[page]], scale[b]):
                raise ValueError(f"page {page} is shared by sequences {owner[page]} and {b} "
                                 f"with different per-(B, Hkv) scales")
            owner[page] = b
            out[page] = decode(codes[page]) * np.asarray(scale[b], np.float64)[:, None, None]
    return out


def append_tokens(k_pages, v_pages, k_scale, v_scale, block_table, seq_lens, k_new, v_new,
                  scale_block=None):
    """The append into an FP8 pool, in place (what the GPU's append kernel does): new token
    i of sequence b (k_new, v_new (B, Hkv, n, d), real numbers) goes to position seq_lens[b]
    + i through the block table (`paged_cache.token_address`). Per block within a page
    (scale_block): a block whose first token is new gets scale amax / 448 of this append's
    tokens in it (one head, all d values; 1 if they are all zero), written into k_scale,
    v_scale (num_pages, Hkv, page_size / scale_block); a block begun earlier keeps its scale.
    Per (B, Hkv) (scale_block None): the given scales (B, Hkv). Codes: x / scale in float32,
    rounded with saturation. Returns the new lengths."""
    scale_block = check_scale_block(scale_block)
    b_n, hkv, n, _ = np.shape(k_new)
    ps = k_pages.shape[2]
    for x_new, pages, scale in ((k_new, k_pages, k_scale), (v_new, v_pages, v_scale)):
        x_new = np.asarray(x_new).astype(np.float32)
        for b in range(b_n):
            start = int(seq_lens[b])
            t = start + np.arange(n)
            page, slot = token_address(block_table, b, t, ps)
            if scale_block is None:
                s = np.broadcast_to(np.asarray(scale[b], np.float32)[:, None], (hkv, n))
            else:
                g = slot // scale_block
                first = t - slot % scale_block                  # first token of the block
                s = np.empty((hkv, n), np.float32)
                for i in range(n):
                    if first[i] >= start:                       # opened by this append
                        same = (page == page[i]) & (g == g[i])
                        amax = np.abs(x_new[b][:, same]).max(axis=(1, 2))      # (Hkv,)
                        scale[page[i], :, g[i]] = amax_scale(amax)
                    s[:, i] = scale[page[i], :, g[i]]
            y = x_new[b] / s[:, :, None]                                    # float32
            pages[page, :, slot] = encode(y, E4M3, saturate=True).transpose(1, 0, 2)
    return (np.asarray(seq_lens) + n).astype(np.int32)


# ---------------------------------------------------------------------------------------
# What the storage format costs in accuracy
# ---------------------------------------------------------------------------------------

def storage_errors(q, k, v, scale_blocks=(None,), *, causal=False) -> dict:
    """The error each way of storing the cache adds to a decode's output, with no arithmetic
    error mixed in: o computed in float64 from the exact cache k, v (B, Hkv, Tk, d) against o
    computed in float64 from the cache as stored (rounded to fp16; or as FP8 codes with
    scales per (B, Hkv) (None) or per block of Bs tokens, dequantised exactly). q (B, Hq, Tq,
    d). Returns {"fp16": (max abs, RMS), "fp8 per (B, Hkv)": ..., "fp8 per Bs tokens": ...}."""
    from ..decode import split_kv_forward
    q, k, v = (check_array(x, n).astype(np.float64) for n, x in (("q", q), ("k", k),
                                                                  ("v", v)))
    exact, _ = split_kv_forward(q, k, v, causal=causal)

    def err(kk, vv):
        o, _ = split_kv_forward(q, kk, vv, causal=causal)
        e = o - exact
        return float(np.abs(e).max()), float(np.sqrt(np.mean(e ** 2)))

    out = {"fp16": err(k.astype(np.float16).astype(np.float64),
                       v.astype(np.float16).astype(np.float64))}
    for sb in scale_blocks:
        kc, ks = quantize_cache(k, sb)
        vc, vs = quantize_cache(v, sb)
        label = "fp8 per (B, Hkv)" if sb is None else f"fp8 per {sb} tokens"
        out[label] = err(dequantize_cache(kc, ks, sb), dequantize_cache(vc, vs, sb))
    return out
