"""FP8 attention in numpy, step by step as a Hopper kernel runs it, and its error.

`fp8_attention` simulates the forward of one FP8 kernel on (..., T, d) arrays:

    1. optionally rotate Q and K along d by the Hadamard matrix (`hadamard.rotate`);
    2. quantize Q, K, V to e4m3 under a scheme (`scaling.quantize`: per tensor, per head or
       per block of tokens);
    3. per block of `key_block` keys, in float32: S = scale * Qdq Kdq^T from the
       dequantized values (the tensor cores multiply e4m3 codes and accumulate in fp32;
       multiplying by the scales after the product is the same up to fp32 rounding), the
       running max m and P~ = 2^p_log2_offset * exp(S - m);
    4. round P~ to e4m3 (saturating) for the second product, keep the row sum l of the
       unrounded P~ in fp32 (the kernel sums the fp32 values before converting them), and
       accumulate O += round(P~) Vdq in fp32, rescaled as the running max moves;
    5. O = O / l (the 2^offset cancels).

The offset is FlashAttention-3's: its softmax (hopper/softmax.h, `scale_apply_exp2` with
`Max_offset = 8` for FP8, set in hopper/flash_fwd_kernel_sm90.h) subtracts 8 from the row
max in the exp2 domain, so P~ = 256 exp(S - m) lies in [0, 256] instead of [0, 1]: "to use
more of the FP8 range ... to reduce underflow" (its comment), and divides the row sum by
2^8 again for the log-sum-exp. Without it, every probability at or below 2^-10 (half the
smallest e4m3 subnormal 2^-9) becomes 0 and those between 2^-10 and 2^-6 keep only 1 to 3
significant bits; with it, the same happens only below 2^-18 and 2^-14.

The test distribution is FlashAttention-3's (section 4.3, "Numerical error validation"):
every entry of Q, K and V is N(0, 1) + N(0, 100) * Bernoulli(0.001), a standard normal plus,
for 0.1% of entries, an independent normal term of standard deviation 10 (variance 100):
rare large entries, as the outlier features of trained transformers. The error measure is
the paper's: the root mean squared error of O against a float64 reference.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_block, check_bool, check_qkv, check_scale, check_whole
from ..formats import round_to
from ..reference import attention as reference_attention
from .codes import E4M3, round_to_fp8
from .hadamard import pad_to_power_of_two, rotate
from .scaling import SCHEMES, fake_quantize

#: FlashAttention-3's FP8 softmax offset: P~ = 2^8 exp(S - m), in [0, 256]
P_LOG2_OFFSET = 8
#: the probability of an outlier entry and its standard deviation (FA3 section 4.3)
OUTLIER_RATE, OUTLIER_STD = 0.001, 10.0


def outlier_qkv(rng, shape_q: tuple, shape_k: tuple) -> tuple:
    """float32 q (shape_q), k and v (shape_k) with FlashAttention-3's outlier entries:
    N(0, 1) + N(0, 100) Bernoulli(0.001), drawn from `rng` in the order q, k, v."""
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (np.random.default_rng(seed)), got "
                        f"{type(rng).__name__}")

    def draw(shape):
        base = rng.standard_normal(shape)
        spike = rng.standard_normal(shape) * OUTLIER_STD
        return (base + spike * (rng.random(shape) < OUTLIER_RATE)).astype(np.float32)
    return draw(shape_q), draw(shape_k), draw(shape_k)


def check_offset(p_log2_offset) -> int:
    """p_log2_offset as an int from 0 to P_LOG2_OFFSET = 8, else an error naming it."""
    p_log2_offset = check_whole(p_log2_offset, "p_log2_offset", least=0,
                                meaning="the power of two P~ is lifted by, FA3: 8")
    if p_log2_offset > P_LOG2_OFFSET:
        raise ValueError(f"p_log2_offset must be at most {P_LOG2_OFFSET} (2^8 = 256 <= 448, "
                         f"e4m3's largest value), got {p_log2_offset}")
    return p_log2_offset


def quantize_p(p_tilde, p_log2_offset: int = P_LOG2_OFFSET) -> np.ndarray:
    """P~ (already multiplied by 2^p_log2_offset) rounded to e4m3 with saturation, float32.
    p_tilde: real, finite and >= 0, at most e4m3's 448 (with p_log2_offset from 0 to 8,
    as `check_offset` takes it); an error naming the argument otherwise."""
    p_log2_offset = check_offset(p_log2_offset)
    p = np.asarray(p_tilde)
    if p.dtype.kind not in "fiu" or not (np.isfinite(p).all() and (p >= 0).all()):
        raise ValueError(f"p_tilde must hold finite real numbers >= 0 (2^p_log2_offset "
                         f"exp(S - m)), got dtype {p.dtype}")
    p = p.astype(np.float32)
    if (p > E4M3.max_finite).any():
        raise ValueError(f"P~ exceeds e4m3's 448: p_log2_offset = {p_log2_offset} is too "
                         f"large (at most 8: 2^8 = 256 <= 448 < 512)")
    return round_to_fp8(p, E4M3).astype(np.float32)


def _forward_head(q, k, v, scale, key_block, p_log2_offset, p_round, causal=False):
    """One head: q (Tq, d), k, v (Tk, d) float32 -> o (Tq, d) float32 (module steps 3-5).
    causal: key j visible to query i iff j <= i + Tk - Tq (bottom-right, as the kernels);
    a row with no visible key gets o = 0."""
    tq, tk = q.shape[0], k.shape[0]
    o = np.zeros((tq, v.shape[1]), np.float32)
    m = np.full((tq, 1), -np.inf, np.float32)
    l = np.zeros((tq, 1), np.float32)
    lift = np.float32(2.0 ** p_log2_offset)
    rows = np.arange(tq)[:, None] + (tk - tq)
    for j0 in range(0, tk, key_block):
        s = (q @ k[j0:j0 + key_block].T) * np.float32(scale)              # (Tq, Bc) fp32
        if causal:
            s = np.where(np.arange(j0, j0 + s.shape[1])[None, :] > rows, -np.inf, s)
        m_new = np.maximum(m, s.max(axis=1, keepdims=True))
        mu = np.where(m_new == -np.inf, np.float32(0), m_new)             # no key yet
        alpha = np.exp(m - mu)                                             # (Tq, 1)
        p = np.exp(s - mu) * lift                                          # (Tq, Bc) <= 2^off
        l = l * alpha + p.sum(axis=1, keepdims=True)
        o = o * alpha + p_round(p) @ v[j0:j0 + key_block]                  # (Tq, d) fp32
        m = m_new
    return o / np.where(l == 0, np.float32(1), l)


def forward_dequantized(q, k, v, *, scale: float | None = None, key_block: int = 128,
                        p_log2_offset: int = P_LOG2_OFFSET) -> np.ndarray:
    """Steps 3 to 5 on inputs already through FP8 (dequantized float values): S and the
    softmax in float32, P~ lifted by 2^p_log2_offset and rounded to e4m3, P V in float32.
    o (..., Tq, d) float32. Lab 15 feeds it the learner's quantized Q, K, V."""
    q, k, v = check_qkv(q, k, v)
    scale = check_scale(scale, q.shape[-1])
    key_block = check_block(key_block, "key_block")
    p_log2_offset = check_offset(p_log2_offset)
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    return _run(q, k, v, scale, key_block, p_log2_offset, quantize_p)


def _run(q, k, v, scale, key_block, p_log2_offset, p_round, causal=False):
    lead = q.shape[:-2]
    qf = q.reshape((-1,) + q.shape[-2:])
    kf = k.reshape((-1,) + k.shape[-2:])
    vf = v.reshape((-1,) + v.shape[-2:])
    out = [_forward_head(a, b, c, scale, key_block, p_log2_offset, p_round, causal)
           for a, b, c in zip(qf, kf, vf)]
    return np.stack(out).reshape(lead + (q.shape[-2], v.shape[-1]))


def fp8_attention(q, k, v, *, scheme: str = "block", block: int = 64, hadamard: bool = False,
                  signs=None, scale: float | None = None, key_block: int = 128,
                  p_log2_offset: int = P_LOG2_OFFSET, quantize_p_to_fp8: bool = True,
                  causal: bool = False):
    """The FP8 forward simulated in numpy: o (..., Tq, d) float32 (module docstring).

    q (..., Tq, d), k, v (..., Tk, d): float arrays; scheme, block: the scales of Q, K and
    V (`scaling.SCHEMES`, tokens per scale for "block"); hadamard: rotate Q and K first
    (d padded with zeros to a power of two), with optional +-1 `signs`; scale: softmax
    scale (default 1/sqrt(d) of the unpadded d); key_block: keys per step of the online
    softmax; p_log2_offset: P~ = 2^offset exp(S - m) (0 to 8); quantize_p_to_fp8: round P~
    to e4m3 (False keeps it in fp32, to isolate the inputs' error); causal: the course's
    bottom-right mask (what the GPU kernel `cuda.hopper.fp8` is checked against)."""
    q, k, v = check_qkv(q, k, v)
    scheme = _check_scheme(scheme)
    key_block = check_block(key_block, "key_block")
    p_log2_offset = check_offset(p_log2_offset)
    scale = check_scale(scale, q.shape[-1])
    if hadamard:
        q, k = (rotate(pad_to_power_of_two(x), signs) for x in (q, k))
    qd, kd, vd = (fake_quantize(x, scheme, block=block) for x in (q, k, v))
    p_round = quantize_p if quantize_p_to_fp8 else (lambda p: p)
    return _run(qd, kd, vd, scale, key_block, p_log2_offset, p_round,
                check_bool(causal, "causal"))


def fp16_attention(q, k, v, *, scale: float | None = None, key_block: int = 128):
    """The fp16 baseline: Q, K, V rounded to fp16, S and the softmax in fp32, P rounded to
    fp16 for P V, fp32 accumulation (what FlashAttention's fp16 kernels do)."""
    q, k, v = check_qkv(q, k, v)
    scale = check_scale(scale, q.shape[-1])
    key_block = check_block(key_block, "key_block")
    qd, kd, vd = (round_to(x, "fp16") for x in (q, k, v))
    return _run(qd, kd, vd, scale, key_block, 0, lambda p: round_to(p, "fp16"))


def _check_scheme(scheme):
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    return scheme


def reference(q, k, v, *, scale: float | None = None, rows: int = 512) -> np.ndarray:
    """float64 o of the same inputs (`flashcourse.reference.attention`), `rows` queries at
    a time (each row of non-causal attention is independent)."""
    q, k, v = check_qkv(q, k, v)
    rows = check_block(rows, "rows")
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    parts = [reference_attention(q64[..., i:i + rows, :], k64, v64, scale=scale)[0]
             for i in range(0, q.shape[-2], rows)]
    return np.concatenate(parts, axis=-2)


def rmse(o, o_ref) -> float:
    """Root mean squared error sqrt(mean((o - o_ref)^2)) over every element. o and o_ref:
    real, finite arrays of one shape (an error naming them otherwise)."""
    for name, x in (("o", o), ("o_ref", o_ref)):
        a = np.asarray(x)
        if a.dtype.kind not in "fiu" or a.size == 0 or not np.isfinite(a).all():
            raise ValueError(f"{name} must be a non-empty array of finite real numbers, got "
                             f"dtype {a.dtype}, shape {a.shape}")
    o, o_ref = np.asarray(o, np.float64), np.asarray(o_ref, np.float64)
    if o.shape != o_ref.shape:
        raise ValueError(f"o and o_ref must have the same shape, got {o.shape} and "
                         f"{o_ref.shape}")
    return float(np.sqrt(np.mean((o - o_ref) ** 2)))


#: The rows of the error table: (label, keyword arguments of fp8_attention, or None for the
#: fp16 baseline). "+ Hadamard" rows rotate Q and K.
ERROR_ROWS = (
    ("fp16 baseline", None),
    ("FP8 per tensor", {"scheme": "tensor"}),
    ("FP8 per head", {"scheme": "head"}),
    ("FP8 per block", {"scheme": "block"}),
    ("FP8 per tensor + Hadamard", {"scheme": "tensor", "hadamard": True}),
    ("FP8 per block + Hadamard", {"scheme": "block", "hadamard": True}),
)


def error_table(q, k, v, *, block: int = 64, key_block: int = 128, rows=ERROR_ROWS,
                o_ref=None) -> dict:
    """{label: RMSE of o against the float64 reference} for each row of `rows`."""
    o_ref = reference(q, k, v) if o_ref is None else o_ref
    table = {}
    for label, kwargs in rows:
        if kwargs is None:
            o = fp16_attention(q, k, v, key_block=key_block)
        else:
            o = fp8_attention(q, k, v, block=block, key_block=key_block, **kwargs)
        table[label] = rmse(o, o_ref)
    return table
