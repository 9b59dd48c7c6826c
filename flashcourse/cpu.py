"""FlashAttention's forward pass compiled for the CPU with Numba.

Numba translates the Python functions below into machine code (through LLVM) the
first time they are called with a given dtype; `prange` splits the outer loop over
(head, query block) work items across CPU threads. Like `flashcourse.tiled`, no
(Tq, Tk) score matrix ever exists: each thread holds one (Br, Bc) score tile, the
running statistics m, l (Br,) and the unnormalised output acc (Br, d) of its query
block, so the extra memory is O(threads x Br x (Bc + d)), fixed by the tile sizes;
the inputs and outputs themselves are O((Tq + Tk) d): linear in the sequence length.

Three versions, side by side (same arguments, same results, same contract as
`flashcourse.tiled.forward`). Speeds: one head, float32, d = 64, N = 4096, 2-core
AMD EPYC (Zen 4), against dense numpy attention (BLAS) in the same run; see
benchmarks/results/cpu_forward_2core.json for the recorded numbers.

    forward_loops  v1, the lesson: the tiled algorithm as plain scalar loops, one
                   query row and one score at a time, `math.exp`. Bytes moved:
                   Q read once, K and V read once per query row (from cache), O
                   and lse written once. What limits it: the dot product over d is
                   a reduction and `math.exp` a scalar library call (PyPI's
                   llvmlite has no vector exp), so LLVM vectorises little:
                   roughly 1.5-2x the time of dense numpy.
    forward_rows   v2, row tiles: every inner loop runs along a contiguous row,
                   so LLVM emits SIMD (AVX2/AVX-512) instructions:
                   - K is transposed once to K^T (d, Tk); S = Q_i K_j^T is built
                     as rank-1 updates along rows of K^T, four query rows and
                     four of the d components per step (each store of a score
                     carries 4 multiply-adds, 16 per column for the 4 rows);
                   - exp2 with log2(e) folded into the scale, as a vectorisable
                     polynomial plus exponent bits (`exp2_poly`: within one
                     float32 unit in the last place, 2^-23 = 1.2e-7 relative;
                     measured 8e-8);
                   - acc[r, :] += p * V[c, :] along rows of V, 4 x 4 per step.
                   What limits it: the P V_j loop runs along d = 64 only, a loop
                   so short that its set-up and overlap checks cost as much as its
                   work; the row max is a horizontal reduction. About 0.75x the
                   time of dense numpy.
    forward        v3, the fast one: the same tiles stored transposed, query rows
                   last (S^T (Bc, Br), Q_i^T and acc^T (d, Br)), so every inner
                   loop runs along the Br query rows and every per-row statistic
                   (max, sum, rescale) is a vertical vector operation; K and V are
                   used row-major as they are. Bytes moved: K_j and V_j
                   (Bc x d each) read once per query block, so K and V are read
                   Tq / Br times in all (N = 4096, Br = 256: 16 x 2 MiB = 32 MiB,
                   from L3 or DRAM; dense attention moves ~384 MiB of scores);
                   the (Bc, Br) score tile stays in L1/L2 and never reaches DRAM.
                   What limits it: L1 loads and stores of the S^T and acc^T rows
                   (each store of a score or output carries 4 multiply-adds, 16 per
                   step for 4 rows) and the exp2 polynomial;
                   about 0.5x the time of dense numpy (~140 GFLOP/s on 2 cores
                   when nothing else runs).

All three skip causal tiles that the mask hides entirely, and v2/v3 hand query
blocks to the threads in a balanced order (first, last, second, ...) so that both
threads get equal causal work.

Run: `o, lse = cpu.forward(q, k, v, causal=True)` (or `forward_rows`, `forward_loops`);
benchmark: `python benchmarks/cpu_forward.py`; tests: `pytest tests/test_cpu.py`.

Floating-point flags: `fastmath=True` would include `nnan` and `ninf`, which let
LLVM assume no value is ever NaN or +-inf. Our running max starts at -inf and a
fully masked row keeps m = -inf, so those flags make the result undefined. We pass
an explicit set without them (`FASTMATH`): `contract` (fused multiply-add),
`reassoc` (reorder sums so reductions vectorise), `nsz`, `arcp`, `afn`.

Accumulation: float32 for float16/float32 inputs, float64 for float64 inputs; the
output has the input dtype, lse is float32 (float64 for float64 input).

Compiled code is cached on disk (`cache=True`); `flashcourse.gpu.select_cache_dir`
points NUMBA_CACHE_DIR at a writable folder when the package is installed read-only.

Threads: the parallel kernels run one at a time per process (`_launch` holds a lock).
Numba's "workqueue" threading layer, the one used when neither TBB nor OpenMP is
available, is not thread-safe: two Python threads calling a parallel kernel at once
terminate the whole process ("Concurrent access has been detected"). Each call
already uses every CPU thread, so taking turns costs little.
"""

from __future__ import annotations

import math
import threading

import numba
import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from ._checks import check_block, check_bool, check_not_subclass, flatten_heads
from ._guards import forward_result
from .constants import LN2, LOG2E
from .geometry import ceil_div

#: LLVM fast-math flags: everything fastmath=True sets except nnan and ninf.
FASTMATH = {"contract", "reassoc", "nsz", "arcp", "afn"}

#: Default tile sizes (Br, Bc) of `forward`, measured on a 2-core AMD EPYC (Zen 4) at
#: N = 1024-16384, d = 64 (benchmarks/cpu_forward.py --sweep): Br = 64 left the inner
#: loops too short (0.9x dense at N = 4096), Br = 128 gave 0.65x, Br = 256 0.5-0.6x.
DEFAULT_BLOCK_Q = 256
DEFAULT_BLOCK_K = 128

# ---------------------------------------------------------------------------
# exp2 as a polynomial: 2^x = 2^n * 2^f, n = round(x), f = x - n in [-1/2, 1/2].
# 2^f comes from a polynomial fitted for relative error on [-1/2, 1/2] (float64
# weighted least squares on Chebyshev nodes): degree 6 is within 1.9e-9 in exact
# arithmetic (8e-8 after float32 rounding), degree 11 within 5e-16 for float64.
# 2^n is built by writing n + bias into the exponent bits of a float. Every step is
# plain arithmetic, so a loop of them vectorises (no call to libm's scalar exp).
# ---------------------------------------------------------------------------

_C32 = tuple(np.float32(c) for c in (
    1.000000000592314, 0.6931472056112518, 0.24022646607373427, 0.05550328974012742,
    0.009618519590889165, 0.001339986990767354, 0.0001533758510460299))


def _fit_exp2(degree):
    """Relative-error least-squares fit of 2^f on [-1/2, 1/2] (float64 coefficients)."""
    f = 0.5 * np.cos(np.linspace(0.0, np.pi, 4001))
    a = np.vander(f, degree + 1, increasing=True) / np.exp2(f)[:, None]
    return tuple(float(c) for c in np.linalg.lstsq(a, np.ones_like(f), rcond=None)[0])


_C64 = _fit_exp2(11)
_LO32 = np.float32(-126.0)      # below this 2^x is subnormal: clamp (adds < 1.2e-38)
_LO64 = -1022.0
_HALF32 = np.float32(0.5)


def exp2_row(x, out, bits):
    """out[c] = 2 ** x[c] for x[c] <= 0 (a vectorisable polynomial; see module)."""
    raise NotImplementedError  # only callable from compiled code (see the overload)


@overload(exp2_row, jit_options={"fastmath": FASTMATH})
def _exp2_row_impl(x, out, bits):
    if x.dtype == types.float32:
        c0, c1, c2, c3, c4, c5, c6 = _C32

        def impl(x, out, bits):        # bits: int32 scratch, viewed as float32
            scale = bits.view(np.float32)
            for c in range(x.shape[0]):
                t = max(x[c], _LO32)
                n = np.floor(t + _HALF32)
                f = t - n                                  # in [-1/2, 1/2]
                out[c] = c0 + f * (c1 + f * (c2 + f * (c3 + f * (c4 + f * (c5 + f * c6)))))
                bits[c] = (np.int32(n) + np.int32(127)) << np.int32(23)   # 2^n
            for c in range(x.shape[0]):
                out[c] *= scale[c]
        return impl
    c = _C64

    def impl64(x, out, bits):          # bits: int64 scratch, viewed as float64
        scale = bits.view(np.float64)
        for i in range(x.shape[0]):
            t = max(x[i], _LO64)
            n = np.floor(t + 0.5)
            f = t - n
            out[i] = (c[0] + f * (c[1] + f * (c[2] + f * (c[3] + f * (c[4] + f * (
                c[5] + f * (c[6] + f * (c[7] + f * (c[8] + f * (c[9] + f * (
                    c[10] + f * c[11])))))))))))
            bits[i] = (np.int64(n) + np.int64(1023)) << np.int64(52)
        for i in range(x.shape[0]):
            out[i] *= scale[i]
    return impl64


def exp2_poly(x):
    """2 ** x elementwise for a float32/float64 array of any shape with x <= 0.

    Inputs below -126 (float32) / -1022 (float64) are clamped there, so the
    result is never 0 but at most 2^-126 (resp. 2^-1022) where 2^x would be smaller.
    """
    if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64):
        raise TypeError(f"x must be a float32 or float64 numpy array, got "
                        f"{getattr(x, 'dtype', type(x).__name__)}")
    check_not_subclass(x, "x")
    flat = np.ascontiguousarray(x).reshape(-1)               # the kernel works on 1-D rows
    return _exp2_poly(flat, _int_like(x.dtype)).reshape(x.shape)


def _int_like(dtype):
    """An empty int32 (float32) / int64 (float64) array: the exponent-bits type."""
    return np.empty(0, np.int32 if np.dtype(dtype) == np.float32 else np.int64)


@njit(fastmath=FASTMATH, cache=True)
def _exp2_poly(x, int_t):
    out = np.empty_like(x)
    exp2_row(x, out, np.empty(x.shape[0], int_t.dtype))
    return out


# ---------------------------------------------------------------------------
# v1: scalar loops (the lesson)
# ---------------------------------------------------------------------------

@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _kernel_loops(q, k, v, o, lse, br, bc, causal, scale, zero, ninf):
    """q (BH, Tq, d), k, v (BH, Tk, d) in the accumulator dtype; writes o (BH, Tq, d)
    and lse (BH, Tq). One prange work item = one query block of one head.
    zero and ninf are 0 and -inf in the accumulator dtype (a Python literal such as
    0.0 would be float64 and silently promote float32 arithmetic to float64)."""
    bh, tq, d = q.shape
    tk = k.shape[1]
    off = tk - tq                                   # causal: j <= i + off
    nqb = (tq + br - 1) // br
    for item in prange(bh * nqb):
        h = item // nqb
        q0 = (item % nqb) * br
        q1 = min(q0 + br, tq)
        for i in range(q0, q1):                     # one query row at a time
            m = ninf                                # running max
            l = zero                                # running sum of exp(s - m)
            acc = np.zeros(d, q.dtype)              # unnormalised output row
            s = np.empty(bc, q.dtype)               # this row's slice of the score tile
            last = min(tk, i + off + 1) if causal else tk   # keys [0, last) visible
            for k0 in range(0, last, bc):
                k1 = min(k0 + bc, last)
                m_tile = ninf
                for j in range(k0, k1):
                    dot = zero
                    for x in range(d):
                        dot += q[h, i, x] * k[h, j, x]
                    s[j - k0] = dot * scale
                    m_tile = max(m_tile, s[j - k0])
                m_new = max(m, m_tile)
                alpha = math.exp(m - m_new) if m > ninf else zero
                l *= alpha
                for x in range(d):
                    acc[x] *= alpha
                for j in range(k0, k1):
                    p = math.exp(s[j - k0] - m_new)
                    l += p
                    for x in range(d):
                        acc[x] += p * v[h, j, x]
                m = m_new
            if l > 0.0:
                for x in range(d):
                    o[h, i, x] = acc[x] / l
                lse[h, i] = m + math.log(l)
            else:                                   # no visible key
                for x in range(d):
                    o[h, i, x] = zero
                lse[h, i] = ninf


# ---------------------------------------------------------------------------
# v2: vectorised row tiles
# ---------------------------------------------------------------------------

# The micro-kernel of v2 and v3, one for all four of their products (S = Q K_j^T and
# acc += P V_j, in v2's row-major tiles and in v3's transposed ones). Its inner loop
# runs along a contiguous row (of K^T or V in v2, of Q^T or P^T in v3), so LLVM
# vectorises it. Four rows of the output share every load of that row, and the loop
# over the reduction axis is unrolled by four, so each store to the output carries four
# multiply-adds instead of one: L1 stores, not arithmetic, were the limit.

@njit(fastmath=FASTMATH, cache=True)
def _matmul(out, a, b, n_out, n_sum, b0, c0, n):
    """out[:n_out, :n] += a[:n_out, :n_sum] @ b[b0:b0+n_sum, c0:c0+n].

    v2: S = Qs K_j^T (out = S (Br, Bc), a = Qs (Br, d), b = K^T (d, Tk), c0 = k0) and
    acc += P V_j (out = acc (Br, d), a = P (Br, Bc), b = V (Tk, d), b0 = k0): the inner
    loop runs along the keys, then along d. v3 (`_scores_cols`, `_pv_cols`): along the
    Br query rows. Four rows of out and four steps of the sum at a time.
    """
    for i in range(0, n_out - 3, 4):
        o0, o1, o2, o3 = out[i], out[i + 1], out[i + 2], out[i + 3]   # (n,) used of each
        for j in range(0, n_sum - 3, 4):                    # 4 x 4 multiply-adds per column
            b_0, b_1 = b[b0 + j, c0:c0 + n], b[b0 + j + 1, c0:c0 + n]
            b_2, b_3 = b[b0 + j + 2, c0:c0 + n], b[b0 + j + 3, c0:c0 + n]
            a00, a01, a02, a03 = a[i, j], a[i, j + 1], a[i, j + 2], a[i, j + 3]
            a10, a11, a12, a13 = a[i + 1, j], a[i + 1, j + 1], a[i + 1, j + 2], a[i + 1, j + 3]
            a20, a21, a22, a23 = a[i + 2, j], a[i + 2, j + 1], a[i + 2, j + 2], a[i + 2, j + 3]
            a30, a31, a32, a33 = a[i + 3, j], a[i + 3, j + 1], a[i + 3, j + 2], a[i + 3, j + 3]
            for c in range(n):
                u0, u1, u2, u3 = b_0[c], b_1[c], b_2[c], b_3[c]
                o0[c] += a00 * u0 + a01 * u1 + a02 * u2 + a03 * u3
                o1[c] += a10 * u0 + a11 * u1 + a12 * u2 + a13 * u3
                o2[c] += a20 * u0 + a21 * u1 + a22 * u2 + a23 * u3
                o3[c] += a30 * u0 + a31 * u1 + a32 * u2 + a33 * u3
        for j in range(n_sum - n_sum % 4, n_sum):           # n_sum not a multiple of 4
            bj = b[b0 + j, c0:c0 + n]
            a0, a1, a2, a3 = a[i, j], a[i + 1, j], a[i + 2, j], a[i + 3, j]
            for c in range(n):
                o0[c] += a0 * bj[c]
                o1[c] += a1 * bj[c]
                o2[c] += a2 * bj[c]
                o3[c] += a3 * bj[c]
    for i in range(n_out - n_out % 4, n_out):               # n_out not a multiple of 4
        oi = out[i]
        for j in range(n_sum):
            bj = b[b0 + j, c0:c0 + n]
            aij = a[i, j]
            for c in range(n):
                oi[c] += aij * bj[c]


@njit(fastmath=FASTMATH, cache=True)
def _store_rows(o_h, lse_h, q0, rows, acc, l, m):
    """The end of a query block in base 2 (v2 and v3): o_h[q0 + r] = acc[r] / l[r] and
    lse_h[q0 + r] = m[r] ln 2 + ln l[r] for its `rows` rows; a row that saw no key gets
    o = 0, lse = -inf. acc (Br, d) is unnormalised O_i (v3 passes its acc^T transposed)."""
    d = o_h.shape[1]
    for r in range(rows):
        if l[r] > 0:
            for x in range(d):
                o_h[q0 + r, x] = acc[r, x] / l[r]
            lse_h[q0 + r] = m[r] * LN2 + np.log(l[r])
        else:                                       # no visible key: o = 0, lse = -inf
            for x in range(d):
                o_h[q0 + r, x] = 0
            lse_h[q0 + r] = -np.inf


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _kernel_rows(q, kt, v, o, lse, br, bc, causal, scale2, int_t):
    """q (BH, Tq, d), kt (BH, d, Tk) = K^T, v (BH, Tk, d), accumulator dtype;
    scale2 = scale * log2(e), so scores are in base-2 units: exp2(s2) = exp(s).
    Writes o (BH, Tq, d) and lse (BH, Tq) (natural log). int_t: an empty integer
    array of the float's width (int32 / int64), for exp2's exponent bits."""
    bh, tq, d = q.shape
    tk = kt.shape[2]
    off = tk - tq                                   # causal: j <= i + off
    nqb = (tq + br - 1) // br
    dt = q.dtype
    zero = np.zeros(1, dt)[0]                       # 0 in the accumulator dtype (not
                                                    # q[0, 0, 0] * 0: NaN if q[0, 0, 0] is)
    for item in prange(bh * nqb):
        h = item // nqb
        t = item % nqb
        i_blk = t // 2 if t % 2 == 0 else nqb - 1 - t // 2   # 0, n-1, 1, n-2, ...
        q0 = i_blk * br
        q1 = min(q0 + br, tq)
        rows = q1 - q0
        # per work item scratch (allocated once, reused for every key block)
        qs = np.empty((br, d), dt)                  # (Br, d) Q_i * scale * log2(e)
        s = np.empty((br, bc), dt)                  # (Br, Bc) score tile, then P tile
        p = np.empty(bc, dt)                        # (Bc,) one row of P
        bits = np.empty(bc, int_t.dtype)           # (Bc,) exponent bits of 2^n
        acc = np.zeros((br, d), dt)                 # (Br, d) unnormalised O_i
        m = np.full(br, -np.inf, dt)                # (Br,) running max (base 2)
        l = np.zeros(br, dt)                        # (Br,) running sum
        for r in range(rows):
            for x in range(d):
                qs[r, x] = q[h, q0 + r, x] * scale2
        last = min(tk, q1 - 1 + off + 1) if causal else tk   # keys any row sees
        for k0 in range(0, max(last, 0), bc):  # causal: hidden tiles never visited
            k1 = min(k0 + bc, last)
            cols = k1 - k0
            # S = Qs K_j^T, four query rows at a time (ragged rows one at a time)
            kt_h = kt[h]
            s[:rows, :cols] = zero
            _matmul(s, qs, kt_h, rows, d, 0, k0, cols)
            # online softmax, one row at a time; P overwrites S
            for r in range(rows):
                vis = min(cols, q0 + r + off + 1 - k0) if causal else cols
                sr = s[r]
                if vis <= 0:                        # row sees nothing in this tile
                    for c in range(cols):
                        sr[c] = zero
                    continue
                m_tile = sr[0]
                for c in range(1, vis):
                    m_tile = max(m_tile, sr[c])
                m_new = max(m[r], m_tile)
                alpha = np.exp2(m[r] - m_new) if m[r] > -np.inf else zero
                for c in range(vis):
                    p[c] = sr[c] - m_new            # <= 0
                exp2_row(p[:vis], sr[:vis], bits[:vis])
                total = zero
                for c in range(vis):
                    total += sr[c]
                for c in range(vis, cols):
                    sr[c] = zero                    # masked: contributes nothing
                l[r] = l[r] * alpha + total
                m[r] = m_new
                ar = acc[r]
                for x in range(d):
                    ar[x] *= alpha
            # acc += P V_j, four query rows at a time (ragged rows one at a time)
            v_h = v[h]
            _matmul(acc, s, v_h, rows, cols, k0, 0, d)
        _store_rows(o[h], lse[h], q0, rows, acc, l, m)


# ---------------------------------------------------------------------------
# v3: transposed tiles, query rows along the vector lanes (the fast one)
# ---------------------------------------------------------------------------
# v2's P V_j loop runs along d (64 elements: a short loop, whose set-up and overlap
# checks cost as much as its work), and its row max is a horizontal reduction. v3
# stores every tile transposed, query rows last: S^T (Bc, Br), Q_i^T (d, Br),
# acc^T (d, Br). Then every inner loop runs along the Br query rows of a block, and
# every per-row statistic becomes a vertical operation on a vector of Br rows:
#     S^T[c, :] += K[c, x] * Q^T[x, :]        (scores)
#     m[:] = max(m[:], S^T[c, :])              (row max: elementwise, no reduction)
#     l[:] += P^T[c, :]                        (row sum: elementwise)
#     acc^T[x, :] += V[c, x] * P^T[c, :]       (output)
# K and V are used as they are, row-major (no K^T copy). Micro-benchmarked on one
# Zen 4 core, the P V_j loop went from ~50 to ~100 GFLOP/s.

@njit(fastmath=FASTMATH, cache=True)
def _scores_cols(st, k_h, qt, k0, cols, rows):
    """st[:cols, :rows] = k_h[k0:k0+cols] @ qt[:, :rows]: S^T = K_j Q_i^T.

    st (Bc, Br), k_h (Tk, d), qt (d, Br) = scaled Q_i^T; `_matmul` with four keys and
    four of the d components per step: each store of a score carries 4 multiply-adds
    (16 per step for the four score rows).
    """
    for c in range(cols):
        for r in range(rows):
            st[c, r] = 0
    _matmul(st, k_h[k0:k0 + cols], qt, cols, qt.shape[0], 0, 0, rows)


@njit(fastmath=FASTMATH, cache=True)
def _pv_cols(acct, pt, v_h, k0, cols, rows):
    """acct[:, :rows] += v_h[k0:k0+cols].T @ pt[:cols, :rows]: acc^T += V_j^T P^T.

    acct (d, Br), pt (Bc, Br) = P^T, v_h (Tk, d); `_matmul` with four of the d outputs
    and four keys per step: each store of an output carries 4 multiply-adds (16 per step
    for the four acc^T rows).
    """
    _matmul(acct, v_h[k0:k0 + cols].T, pt, acct.shape[0], cols, 0, 0, rows)


@njit(fastmath=FASTMATH, cache=True)
def _row_max_cols(m_use, m, st, cols, rows):
    """m_use[:rows] = the running max m of each query row and the max of its scores in
    st[:cols, :rows] = S^T: vertically over the key rows, no horizontal reduction."""
    for r in range(rows):
        m_use[r] = m[r]
    for c in range(cols):
        sc = st[c]
        for r in range(rows):
            m_use[r] = max(m_use[r], sc[r])


@njit(fastmath=FASTMATH, cache=True)
def _scale_cols(acct, alpha, rows):
    """acct[:, :rows] *= alpha[:rows]: each query row's acc^T entries times its rescale
    factor, along the rows."""
    for x in range(acct.shape[0]):
        ax = acct[x]
        for r in range(rows):
            ax[r] *= alpha[r]


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _kernel_cols(q, k, v, o, lse, br, bc, causal, scale2, int_t):
    """q (BH, Tq, d), k, v (BH, Tk, d) in the accumulator dtype; scale2 = scale *
    log2(e), so scores are in base-2 units. Writes o (BH, Tq, d), lse (BH, Tq)."""
    bh, tq, d = q.shape
    tk = k.shape[1]
    off = tk - tq                                   # causal: j <= i + off
    nqb = (tq + br - 1) // br
    dt = q.dtype
    for item in prange(bh * nqb):
        h = item // nqb
        t = item % nqb
        i_blk = t // 2 if t % 2 == 0 else nqb - 1 - t // 2   # 0, n-1, 1, n-2, ...
        q0 = i_blk * br
        rows = min(q0 + br, tq) - q0
        # per work item scratch, reused for every key block
        qt = np.empty((d, br), dt)                  # (d, Br)  Q_i^T * scale * log2(e)
        st = np.empty((bc, br), dt)                 # (Bc, Br) S^T, then P^T
        acct = np.zeros((d, br), dt)                # (d, Br)  acc^T, unnormalised O_i^T
        m = np.full(br, -np.inf, dt)                # (Br,) running max (base 2)
        l = np.zeros(br, dt)                        # (Br,) running sum
        m_use = np.empty(br, dt)                    # (Br,) new max, 0 where still -inf
        alpha = np.empty(br, dt)                    # (Br,) rescale factors
        tmp = np.empty(br, dt)                      # (Br,) exp2 argument
        bits = np.empty(br, int_t.dtype)            # (Br,) exponent bits of 2^n
        for r in range(rows):
            for x in range(d):
                qt[x, r] = q[h, q0 + r, x] * scale2
        last = min(tk, q0 + rows - 1 + off + 1) if causal else tk  # keys any row sees
        for k0 in range(0, max(last, 0), bc):       # causal: hidden tiles never visited
            k1 = min(k0 + bc, last)
            cols = k1 - k0
            _scores_cols(st, k[h], qt, k0, cols, rows)
            # causal and partial: key k0+c is hidden from rows r < k0 + c - off - q0
            partial = causal and k1 - 1 > q0 + off
            if partial:
                for c in range(cols):
                    for r in range(min(max(k0 + c - off - q0, 0), rows)):
                        st[c, r] = -np.inf
            # row max, vertically over the key rows of S^T
            _row_max_cols(m_use, m, st, cols, rows)
            for r in range(rows):
                if m[r] > -np.inf:                  # rescale what we had
                    alpha[r] = np.exp2(m[r] - m_use[r])
                else:                               # nothing seen yet: l = acc = 0
                    alpha[r] = 0
                m[r] = m_use[r]
                if m_use[r] == -np.inf:             # still nothing visible: keep 0s
                    m_use[r] = 0
                l[r] *= alpha[r]
            # P^T = exp2(S^T - m), its row sums, masked entries exactly 0
            for c in range(cols):
                sc = st[c]
                for r in range(rows):
                    tmp[r] = sc[r] - m_use[r]       # <= 0 (or -inf where hidden)
                exp2_row(tmp[:rows], sc[:rows], bits[:rows])
            if partial:
                for c in range(cols):
                    for r in range(min(max(k0 + c - off - q0, 0), rows)):
                        st[c, r] = 0
            for c in range(cols):
                sc = st[c]
                for r in range(rows):
                    l[r] += sc[r]
            # acc^T = acc^T * alpha + V_j^T P^T
            _scale_cols(acct, alpha, rows)
            _pv_cols(acct, st, v[h], k0, cols, rows)
        _store_rows(o[h], lse[h], q0, rows, acct.T, l, m)


# ---------------------------------------------------------------------------
# The baseline every CPU timing is compared with
# ---------------------------------------------------------------------------

def dense_numpy(q, k, v, *, scale: float | None = None):
    """Dense attention for one head in the input dtype, numpy + BLAS (the baseline).

    q (Tq, d), k, v (Tk, d). Materialises the whole (Tq, Tk) score matrix: two BLAS
    matrix products, numpy's vectorised exp, one max and one sum per row. No
    masking and no validation: it exists to be timed against, not to be used.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.T                                      # (Tq, Tk) scores, BLAS
    s *= s.dtype.type(scale)
    s -= s.max(axis=1, keepdims=True)
    np.exp(s, out=s)                                 # (Tq, Tk) P, unnormalised
    o = s @ v                                        # (Tq, d), BLAS
    o /= s.sum(axis=1, keepdims=True)
    return o


# ---------------------------------------------------------------------------
# Python wrappers: validation, layout, dtype
# ---------------------------------------------------------------------------

def _prepare(q, k, v, block_q, block_k, causal, scale, allow_nonfinite):
    x = flatten_heads(q, k, v, causal=causal, scale=scale, allow_nonfinite=allow_nonfinite)
    br = check_block(block_q, "block_q")
    bc = check_block(block_k, "block_k")
    acc_t = x.acc_dtype
    qf = np.ascontiguousarray(x.q, dtype=acc_t)                # (BH, Tq, d)
    kf = np.ascontiguousarray(x.k, dtype=acc_t)                # (BH, Tk, d)
    vf = np.ascontiguousarray(x.v, dtype=acc_t)                # (BH, Tk, d)
    br = min(br, x.tq)      # a tile taller than the sequence only wastes scratch
    bc = min(bc, x.tk)
    return x, qf, kf, vf, br, bc, x.causal, x.scale, acc_t


#: One parallel kernel at a time per process (the module docstring's "Threads").
_PARALLEL_LOCK = threading.Lock()


def _launch(kernel, n_items, *args):
    """Run a prange kernel on at most n_items threads (a team larger than the work
    only adds wake-up and barrier costs, which on a busy machine reach milliseconds),
    holding `_PARALLEL_LOCK`: the workqueue threading layer aborts the process when
    two Python threads run parallel kernels at once."""
    threads = numba.get_num_threads()
    with _PARALLEL_LOCK:
        if n_items >= threads:
            return kernel(*args)
        numba.set_num_threads(max(1, n_items))
        try:
            return kernel(*args)
        finally:
            numba.set_num_threads(threads)


def _work_items(qf, br):
    """(head, query block) pairs: the prange iterations of every kernel."""
    return qf.shape[0] * ceil_div(qf.shape[1], br)


def _finish(x, o, lse):
    return x.unflatten(o.astype(x.dtype, copy=False)), x.unflatten(lse)


def _checked(x, q, k, v, o, lse, allow_nonfinite):
    """_finish, then the overflow / non-finite rule of `flashcourse._guards`."""
    return forward_result(q, k, v, *_finish(x, o, lse), x.causal, scale=x.scale,
                          compute=lse.dtype.name, allow_nonfinite=allow_nonfinite)


def forward_loops(q, k, v, *, block_q: int = 64, block_k: int = 64,
                  causal: bool = False, scale: float | None = None,
                  allow_nonfinite: bool = False, compiled: bool = True):
    """Tiled exact attention as plain compiled scalar loops (v1, the lesson).

    Same arguments and results as `forward`, and slower. `compiled=False` runs the
    very same source in the Python interpreter instead of Numba's machine code
    (`prange` is then a plain `range`): use it at tiny sizes only, to see what the
    compiler buys.
    """
    x, qf, kf, vf, br, bc, causal, scale, acc_t = _prepare(
        q, k, v, block_q, block_k, causal, scale, allow_nonfinite)
    o = np.empty(qf.shape, acc_t)                          # (BH, Tq, d)
    lse = np.empty(qf.shape[:2], acc_t)                    # (BH, Tq)
    compiled = check_bool(compiled, "compiled")
    args = (qf, kf, vf, o, lse, br, bc, causal, acc_t.type(scale),
            acc_t.type(0), acc_t.type(-np.inf))
    if compiled:
        _launch(_kernel_loops, _work_items(qf, br), *args)
    else:
        _kernel_loops.py_func(*args)
    return _checked(x, q, k, v, o, lse, allow_nonfinite)


def forward_rows(q, k, v, *, block_q: int = 64, block_k: int = 256,
                 causal: bool = False, scale: float | None = None,
                 allow_nonfinite: bool = False):
    """Tiled exact attention, vectorised along rows of K^T and V (v2).

    Same arguments and results as `forward`; slower (see the module docstring).
    """
    x, qf, kf, vf, br, bc, causal, scale, acc_t = _prepare(
        q, k, v, block_q, block_k, causal, scale, allow_nonfinite)
    kt = np.ascontiguousarray(np.swapaxes(kf, 1, 2))       # (BH, d, Tk) K^T
    o = np.empty(qf.shape, acc_t)                          # (BH, Tq, d)
    lse = np.empty(qf.shape[:2], acc_t)                    # (BH, Tq)
    _launch(_kernel_rows, _work_items(qf, br), qf, kt, vf, o, lse, br, bc, causal,
            acc_t.type(scale * LOG2E), _int_like(acc_t))
    return _checked(x, q, k, v, o, lse, allow_nonfinite)


def forward(q, k, v, *, block_q: int = DEFAULT_BLOCK_Q, block_k: int = DEFAULT_BLOCK_K,
            causal: bool = False, scale: float | None = None,
            allow_nonfinite: bool = False):
    """Tiled exact attention compiled with Numba: the fast version (v3).

    Arguments and results as `flashcourse.tiled.forward` (q (..., Tq, d); k, v
    (..., Tk, d); block_q = Br, block_k = Bc, need not divide Tq, Tk; causal bottom-right
    aligned, hidden tiles skipped; scale default 1/sqrt(d)), without its loop_order and
    counter: o (..., Tq, d) in the input dtype, lse (..., Tq) float32 (float64 for
    float64 input), -inf (and o = 0) for a row with no visible key, and only then.
    allow_nonfinite=True accepts NaN/inf inputs: a row that sees one (in its q row or
    in a k, v row it sees) gets o = NaN and lse = NaN, other rows are computed as usual
    (true of all three versions). Raises ValueError when a row with finite inputs that
    sees keys gets a non-finite result: the scores overflow the compute type
    (`flashcourse._guards`).

    Memory: besides the inputs and outputs, float32/float64 copies of q, k, v when
    they are not already contiguous in that dtype, and per-thread tiles of
    (Bc + 2 d + 5) Br elements; never anything of size (Tq, Tk).
    """
    x, qf, kf, vf, br, bc, causal, scale, acc_t = _prepare(
        q, k, v, block_q, block_k, causal, scale, allow_nonfinite)
    o = np.empty(qf.shape, acc_t)                          # (BH, Tq, d)
    lse = np.empty(qf.shape[:2], acc_t)                    # (BH, Tq)
    _launch(_kernel_cols, _work_items(qf, br), qf, kf, vf, o, lse, br, bc, causal,
            acc_t.type(scale * LOG2E), _int_like(acc_t))
    return _checked(x, q, k, v, o, lse, allow_nonfinite)
