"""Device blocks of the tensor-core kernels, written once for every kernel that runs them.

The tensor-core forward kernels (fp16/bf16 and 3xTF32, each in several versions) and the
decode split kernel differ in where their operands live (registers, shared planes,
cp.async buffers) but share the steps in between: the mask of a key block, the online-
softmax update on the accumulator fragments, the epilogue that writes O and the
log-sum-exp, the 3xTF32 product chains and P V (the backward's dV and dK too), and the
version-1 kernels' copies of 16-bit row pairs (row-major and transposed-packed) and the
packing of P into A fragments. Each factory below builds those steps for one kernel's
tile shape; its loop counts are the factory's constants, so the loops unroll
and the fragment arrays stay in registers. On a GPU every function is inlined
(forceinline: compiled as if written in the kernel); on the simulator they are plain
device functions. Fragment layout: `ptx.mma` (row g, g + 8 of each 16-row tile; columns
2t, 2t + 1 of each n8 tile).
"""

from __future__ import annotations

import numpy as np
from numba import cuda
from numba import uint64 as U

from ...constants import F0, F1, LN2_F, NEG_INF
from ..ptx.mma import device_ops, tf32x3_ops
from ._device import inlined

_Z32 = np.uint32(0)
LO16 = np.uint32(0xFFFF)           # the low 16-bit half of a word
HI16 = np.uint32(0xFFFF0000)       # the high half
SH16 = np.uint32(16)


def _jit(simulator: bool):
    return cuda.jit(device=True) if simulator else cuda.jit(device=True, forceinline=True)


def frag_coords(simulator: bool, ns: int):
    """coords(k0, wrow, t, mt, n, i) -> (col, row, j): entry i of n8 tile n of 16-row
    tile mt of a lane's S fragments (ns n8 tiles a row tile, `s[j]`): key col = k0 + 8 n
    + 2 t + i % 2 and query row wrow + 16 mt + 8 (i // 2) (wrow: the lane's first row,
    the m16n8 C layout of `ptx.mma`)."""
    jit = _jit(simulator)
    NS = ns

    @jit
    def coords(k0, wrow, t, mt, n, i):
        return (k0 + n * 8 + 2 * t + (i % 2), wrow + 16 * mt + 8 * (i // 2),
                4 * (mt * NS + n) + i)

    return coords


def softmax_blocks(simulator: bool, exp2, quad_max, mt_n: int, ns: int, no: int, bc: int,
                   lazy: bool = False, threshold=F0) -> dict:
    """The mask and the online softmax of one key block, for a warp holding mt_n 16-row
    tiles of S (ns n8 tiles each, in `s`) and of O (no n8 tiles each, in `acc`).

    mask(s, k0, tk, causal, q0, off, wrow, t, qsc) -> sc: keys past Tk and (causal) past
    the row's diagonal set to -inf in a block that has any, the others scaled first
    (then sc = 1); elsewhere sc = qsc, the scale the softmax applies. wrow: the lane's
    first row (row of tile mt, half hf: wrow + 16 mt + 8 hf).
    row_max(s, m, mu, alpha, sc, red, tid): per row the new running max m, the max in use
    mu (0 for a row masked so far) and alpha = exp2(m_old - mu); lazy: a max that moved
    by at most `threshold` is kept (alpha = 1).
    row_exp(s, acc, mu, alpha, lp, sc, rescale): P = exp2(S sc - mu) in place, lp = lp
    alpha + row sum of P, and (rescale) acc *= alpha.
    pair(s, acc, m0, m1, l0, l1, sc, red, tid) -> (m0, m1, l0, l1): row_max and row_exp
    of one 16-row tile (mt_n = 1) with its two rows' state in scalars."""
    jit = _jit(simulator)
    LAZY = lazy
    TH = threshold
    COORDS = frag_coords(simulator, ns)

    @jit
    def mask(s, k0, tk, causal, q0, off, wrow, t, qsc):
        sc = qsc
        if k0 + bc > tk or (causal != 0 and k0 + bc - 1 > q0 + off):
            for mt in range(mt_n):
                for n in range(ns):
                    for i in range(4):
                        col, row, j = COORDS(k0, wrow, t, mt, n, i)
                        if col >= tk or (causal != 0 and col > row + off):
                            s[j] = NEG_INF
                        else:
                            s[j] = s[j] * qsc
            sc = F1
        return sc

    @jit
    def row_max(s, m, mu, alpha, sc, red, tid):
        for mt in range(mt_n):
            for hf in range(2):
                x = NEG_INF
                for n in range(ns):
                    sb = 4 * (mt * ns + n) + 2 * hf
                    x = max(x, max(s[sb], s[sb + 1]))
                x = quad_max(x, red, tid) * sc          # sc >= 0: max(s) sc = max(s sc)
                ri = 2 * mt + hf
                mo = m[ri]
                mn = max(mo, x)
                if LAZY and mn <= mo + TH:
                    mn = mo            # keep the old max: P <= 2^TH, alpha = 1
                mu[ri] = mn if mn != NEG_INF else F0      # a row fully masked so far
                alpha[ri] = F1 if LAZY and mn == mo else exp2(mo - mu[ri])
                m[ri] = mn

    @jit
    def row_exp(s, acc, mu, alpha, lp, sc, rescale):
        for mt in range(mt_n):
            for hf in range(2):
                ri = 2 * mt + hf
                ps = F0
                for n in range(ns):
                    sb = 4 * (mt * ns + n) + 2 * hf
                    p = exp2(s[sb] * sc - mu[ri])
                    s[sb] = p
                    ps += p
                    p = exp2(s[sb + 1] * sc - mu[ri])
                    s[sb + 1] = p
                    ps += p
                lp[ri] = lp[ri] * alpha[ri] + ps
                if rescale:
                    for n in range(no):
                        ob = 4 * (mt * no + n) + 2 * hf
                        acc[ob] *= alpha[ri]
                        acc[ob + 1] *= alpha[ri]

    @jit
    def pair(s, acc, m0, m1, l0, l1, sc, red, tid):
        x0 = NEG_INF
        x1 = NEG_INF
        for n in range(ns):
            x0 = max(x0, max(s[4 * n], s[4 * n + 1]))
            x1 = max(x1, max(s[4 * n + 2], s[4 * n + 3]))
        x0 = quad_max(x0, red, tid) * sc
        x1 = quad_max(x1, red, tid) * sc
        mn0 = max(m0, x0)
        mn1 = max(m1, x1)
        mu0 = mn0 if mn0 != NEG_INF else F0
        mu1 = mn1 if mn1 != NEG_INF else F0
        alpha0 = exp2(m0 - mu0)
        alpha1 = exp2(m1 - mu1)
        ps0 = F0
        ps1 = F0
        for n in range(ns):
            p = exp2(s[4 * n] * sc - mu0)
            s[4 * n] = p
            ps0 += p
            p = exp2(s[4 * n + 1] * sc - mu0)
            s[4 * n + 1] = p
            ps0 += p
            p = exp2(s[4 * n + 2] * sc - mu1)
            s[4 * n + 2] = p
            ps1 += p
            p = exp2(s[4 * n + 3] * sc - mu1)
            s[4 * n + 3] = p
            ps1 += p
        for n in range(no):
            acc[4 * n] *= alpha0
            acc[4 * n + 1] *= alpha0
            acc[4 * n + 2] *= alpha1
            acc[4 * n + 3] *= alpha1
        return mn0, mn1, l0 * alpha0 + ps0, l1 * alpha1 + ps1

    return {"mask": mask, "row_max": row_max, "row_exp": row_exp, "pair": pair}


def epilogue_blocks(simulator: bool, log2, quad_sum, mt_n: int, no: int, pack=None) -> dict:
    """The end of a forward: each row's sum l over its quad, O = acc / l (0 where no key
    was visible; a NaN stays NaN) and lse = (m + log2 l) ln 2 (-inf where l = 0), for
    rows below Tq, into o[h, row, :] and lse[h, row].

    pair(o, lse, acc, m0, m1, l0, l1, h, r0, r1, tq, t, red, tid): fp32 O, one 16-row
    tile with rows r0, r1 = r0 + 8 (mt_n = 1).
    half(o, lse, acc, m, lp, h, wrow, tq, t, red, tid): O packed to two 16-bit values a
    word by `pack`, mt_n tiles from row wrow."""
    jit = _jit(simulator)
    PACK = pack

    @jit
    def pair(o, lse, acc, m0, m1, l0, l1, h, r0, r1, tq, t, red, tid):
        l0 = quad_sum(l0, red, tid)
        l1 = quad_sum(l1, red, tid)
        inv0 = F1 / l0 if l0 != F0 else F0      # l = 0: no visible key; NaN stays NaN
        inv1 = F1 / l1 if l1 != F0 else F0
        if r0 < tq:
            for n in range(no):
                o[U(h), U(r0), U(n * 8 + 2 * t)] = acc[4 * n] * inv0
                o[U(h), U(r0), U(n * 8 + 2 * t + 1)] = acc[4 * n + 1] * inv0
            if t == 0:
                lse[U(h), U(r0)] = (m0 + log2(l0)) * LN2_F if l0 != F0 else NEG_INF
        if r1 < tq:
            for n in range(no):
                o[U(h), U(r1), U(n * 8 + 2 * t)] = acc[4 * n + 2] * inv1
                o[U(h), U(r1), U(n * 8 + 2 * t + 1)] = acc[4 * n + 3] * inv1
            if t == 0:
                lse[U(h), U(r1)] = (m1 + log2(l1)) * LN2_F if l1 != F0 else NEG_INF

    out = {"pair": pair}
    if PACK is None:
        return out

    @jit
    def half(o, lse, acc, m, lp, h, wrow, tq, t, red, tid):
        for mt in range(mt_n):
            for hf in range(2):
                ri = 2 * mt + hf
                lt = quad_sum(lp[ri], red, tid)
                inv = F1 / lt if lt != F0 else F0         # no visible key: o = 0 (NaN: NaN)
                row = wrow + 16 * mt + 8 * hf
                if row < tq:
                    for n in range(no):
                        ob = 4 * (mt * no + n) + 2 * hf
                        o[U(h), U(row), U(n * 4 + t)] = PACK(acc[ob] * inv, acc[ob + 1] * inv)
                    if t == 0:
                        lse[U(h), U(row)] = (m[ri] + log2(lt)) * LN2_F if lt != F0 else NEG_INF

    out["half"] = half
    return out


def half_blocks(simulator: bool, mma, ldb, mt_n: int, kt: int, ns: int) -> dict:
    """Steps of the fp16/bf16 kernels (m16n8k16) that read Q from global memory into
    registers and K from a row-major shared tile.

    load_q(q, qa, h, wrow, tq, t, qsign): the A fragments of Q (rows wrow + 16 mt and + 8,
    words kk 8 + t and + 4; rows past Tq zero), sign bits xor qsign, into qa.
    qk(sm, k_at, ks, lane, scr, wbase, par, qa, s) -> par: S = Q K^T from zero, K's rows
    of ks words from word k_at, one ldmatrix.x4 giving the B fragments of two n8 tiles."""
    jit = _jit(simulator)
    LDB = ldb
    MMA_INTO = mma_into(simulator, mma)
    SREGS = 4 * ns * mt_n

    @jit
    def load_q(q, qa, h, wrow, tq, t, qsign):
        for mt in range(mt_n):
            r0 = wrow + 16 * mt
            r1 = r0 + 8
            for kk in range(kt):
                w0 = kk * 8 + t
                base = 4 * (mt * kt + kk)
                qa[base + 0] = (q[U(h), U(r0), U(w0)] if r0 < tq else _Z32) ^ qsign
                qa[base + 1] = (q[U(h), U(r1), U(w0)] if r1 < tq else _Z32) ^ qsign
                qa[base + 2] = (q[U(h), U(r0), U(w0 + 4)] if r0 < tq else _Z32) ^ qsign
                qa[base + 3] = (q[U(h), U(r1), U(w0 + 4)] if r1 < tq else _Z32) ^ qsign

    @jit
    def qk(sm, k_at, ks, lane, scr, wbase, par, qa, s):
        for i in range(SREGS):
            s[i] = F0
        for kk in range(kt):
            for n2 in range(ns // 2):
                n = 2 * n2
                b0, b1, b2, b3 = LDB(sm, U(k_at + (n * 8) * ks + kk * 8), ks, lane)
                for mt in range(mt_n):
                    qb = 4 * (mt * kt + kk)
                    sb = 4 * (mt * ns + n)
                    par = MMA_INTO(scr, wbase, lane, par, qa[qb], qa[qb + 1], qa[qb + 2],
                                   qa[qb + 3], b0, b1, s, sb)
                    par = MMA_INTO(scr, wbase, lane, par, qa[qb], qa[qb + 1], qa[qb + 2],
                                   qa[qb + 3], b2, b3, s, sb + 4)
        return par

    return {"load_q": load_q, "qk": qk}


def tf32_blocks(simulator: bool, passes: int, ns: int, no: int, *, raw: bool = False,
                one_chain: bool = False, backward: bool = False, ldb=None, kt: int = 0,
                rs: int = 0) -> dict:
    """The 3xTF32 (passes = 3) or 1xTF32 (passes = 1) steps of the fp32 tensor-core
    kernels (m16n8k8): the big/small split (`mma.split_tf32`: big rounded on the bits,
    small truncated; one pass keeps cvt.rna.tf32) and the product chains.

    split(x) -> (big, small) bits of a float32 x.
    split4(w0, w1, w2, w3, neg) -> (a0..a3, e0..e3): four fp32 words (negated when neg)
    split into big and small parts.
    chain(scr, wbase, lane, par, a0..a3, e0..e3, b0, b1, f0, f1, c0..c3) -> (c0..c3, par):
    c += A_small B_big, A_big B_small, A_big B_big (3 passes; 1 pass: only the last),
    one m16n8k8 product each, small terms first (3 passes: `mma.tf32x3_ops`'s mma3).
    chain_into(..., b0, b1, f0, f1, s, j) -> par: chain with c = s[j:j + 4], in place.
    chain_apart(scr, wbase, lane, par, a0..a3, e0..e3, b0, b1, f0, f1, c0..c3, d0..d3)
    -> (c0..c3, d0..d3, par): the same products with the small terms in accumulators of
    their own: d += A_small B_big, A_big B_small (3 passes); c += A_big B_big.
    split_p(s, pb, pl): P's fragments (ns n8 tiles in s) split into pb (big), pl (small).
    pv(sm, big_at, small_at, vs, t, g, scr, wbase, lane, par, pb, pl, acc, acc2, second)
    -> par: O += P V for one key block (A = P split in pb, pl; ns k8 steps, no n8 tiles)
    from V's big and small planes in shared memory (rows of vs words from words big_at,
    small_at; raw: V's raw fp32 at big_at, split where read), keys permuted inside each
    k8 step (A col t <-> key 2t, col t + 4 <-> key 2t + 1): this block's P V starts from
    zero, its small terms in accumulators of their own (one_chain: in the same chain,
    small terms first) and is added to acc in fp32. The backward's dV += P^T dO and dK +=
    dS^T Q are the same step (backward: into acc, or with second != 0 into acc2), in the
    order of independent instructions its kernel was measured with: each value split as
    it is read, and the small terms added to the big ones before the tile goes into the
    accumulator (the forward: both big parts, then both small ones; each value added with
    its small term).
    qk(sm, q_at, k_at, ks_at, lane, scr, wbase, par, s, neg) -> par (with ldb, kt, rs):
    S = Q K^T from zero into s, kt k8 steps: a warp's 16 rows of Q from word q_at (rows of
    rs words) by ldmatrix.x4 (`ldb`: registers a0, a2, a1, a3) split (negated when neg)
    where read; K's B fragments of two n8 tiles per ldmatrix.x4, split where read from
    K's raw fp32 at word k_at (raw) or read from its big and small planes at k_at,
    ks_at."""
    jit = _jit(simulator)
    ops = device_ops(simulator)
    MMA, AS_F32 = ops["mma_tf32"], ops["as_f32"]
    THREE = passes == 3
    BIG = ops["tf32_round"] if THREE else ops["to_tf32"]
    SMALL = ops["tf32_trunc"]

    @jit
    def split(x):
        big = BIG(x)
        return big, SMALL(x - AS_F32(big))

    @jit
    def split4(w0, w1, w2, w3, neg):
        x0 = AS_F32(w0)
        x1 = AS_F32(w1)
        x2 = AS_F32(w2)
        x3 = AS_F32(w3)
        if neg:
            x0 = -x0
            x1 = -x1
            x2 = -x2
            x3 = -x3
        a0 = BIG(x0)
        a1 = BIG(x1)
        a2 = BIG(x2)
        a3 = BIG(x3)
        return (a0, a1, a2, a3, SMALL(x0 - AS_F32(a0)), SMALL(x1 - AS_F32(a1)),
                SMALL(x2 - AS_F32(a2)), SMALL(x3 - AS_F32(a3)))

    three = tf32x3_ops(simulator)
    MMA3, SMALL2 = three["mma3"], three["small2"]

    @jit
    def chain(scr, wbase, lane, par, a0, a1, a2, a3, e0, e1, e2, e3, b0, b1, f0, f1,
              c0, c1, c2, c3):
        if THREE:
            return MMA3(scr, wbase, lane, par, a0, a1, a2, a3, e0, e1, e2, e3, b0, b1,
                        f0, f1, c0, c1, c2, c3)
        c0, c1, c2, c3 = MMA(scr, wbase, lane, par, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
        return c0, c1, c2, c3, 1 - par

    @jit
    def chain_into(scr, wbase, lane, par, a0, a1, a2, a3, e0, e1, e2, e3, b0, b1, f0, f1,
                   s, j):
        c0, c1, c2, c3, par = chain(scr, wbase, lane, par, a0, a1, a2, a3, e0, e1, e2, e3,
                                    b0, b1, f0, f1, s[j], s[j + 1], s[j + 2], s[j + 3])
        s[j] = c0
        s[j + 1] = c1
        s[j + 2] = c2
        s[j + 3] = c3
        return par

    @jit
    def chain_apart(scr, wbase, lane, par, a0, a1, a2, a3, e0, e1, e2, e3, b0, b1, f0, f1,
                    c0, c1, c2, c3, d0, d1, d2, d3):
        if THREE:                          # d += A_small B_big, A_big B_small
            d0, d1, d2, d3, par = SMALL2(scr, wbase, lane, par, a0, a1, a2, a3, e0, e1, e2,
                                         e3, b0, b1, f0, f1, d0, d1, d2, d3)
        c0, c1, c2, c3 = MMA(scr, wbase, lane, par, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
        return c0, c1, c2, c3, d0, d1, d2, d3, 1 - par

    @jit
    def split_p(s, pb, pl):
        for j in range(ns):
            for i in range(4):
                x = s[4 * j + i]
                big = BIG(x)
                pb[4 * j + i] = big
                pl[4 * j + i] = SMALL(x - AS_F32(big))

    RAW, ONE_CHAIN, BWD = raw, one_chain, backward

    @jit
    def pv(sm, big_at, small_at, vs, t, g, scr, wbase, lane, par, pb, pl, acc, acc2, second):
        for n in range(no):
            c0 = F0                        # this key block's P V, tile n (big terms)
            c1 = F0
            c2 = F0
            c3 = F0
            e0 = F0                        # its small terms (apart)
            e1 = F0
            e2 = F0
            e3 = F0
            for j in range(ns):
                vb = (j * 8 + 2 * t) * vs + n * 8 + g
                # A fragment: (row g, key 2t), (row g + 8, key 2t), (row g, key 2t + 1),
                # (row g + 8, key 2t + 1) = accumulator entries 0, 2, 1, 3 of tile j
                if RAW:                        # split where read
                    y0 = AS_F32(sm[U(big_at + vb)])
                    y1 = AS_F32(sm[U(big_at + vb + vs)])
                    if BWD:
                        b0, f0 = split(y0)
                        b1, f1 = split(y1)
                    else:
                        b0 = BIG(y0)
                        b1 = BIG(y1)
                        f0 = SMALL(y0 - AS_F32(b0))
                        f1 = SMALL(y1 - AS_F32(b1))
                else:
                    b0 = sm[U(big_at + vb)]
                    b1 = sm[U(big_at + vb + vs)]
                    f0 = b0                    # (one pass: no small terms)
                    f1 = b1
                    if THREE:
                        f0 = sm[U(small_at + vb)]
                        f1 = sm[U(small_at + vb + vs)]
                if ONE_CHAIN:
                    c0, c1, c2, c3, par = chain(
                        scr, wbase, lane, par, pb[4 * j], pb[4 * j + 2], pb[4 * j + 1],
                        pb[4 * j + 3], pl[4 * j], pl[4 * j + 2], pl[4 * j + 1],
                        pl[4 * j + 3], b0, b1, f0, f1, c0, c1, c2, c3)
                else:
                    c0, c1, c2, c3, e0, e1, e2, e3, par = chain_apart(
                        scr, wbase, lane, par, pb[4 * j], pb[4 * j + 2], pb[4 * j + 1],
                        pb[4 * j + 3], pl[4 * j], pl[4 * j + 2], pl[4 * j + 1],
                        pl[4 * j + 3], b0, b1, f0, f1, c0, c1, c2, c3, e0, e1, e2, e3)
            if not (BWD or ONE_CHAIN):     # the forward: each value with its small term
                acc[4 * n] += c0 + e0
                acc[4 * n + 1] += c1 + e1
                acc[4 * n + 2] += c2 + e2
                acc[4 * n + 3] += c3 + e3
                continue
            if not ONE_CHAIN:
                c0 += e0
                c1 += e1
                c2 += e2
                c3 += e3
            if second == 0:
                acc[4 * n] += c0
                acc[4 * n + 1] += c1
                acc[4 * n + 2] += c2
                acc[4 * n + 3] += c3
            else:
                acc2[4 * n] += c0
                acc2[4 * n + 1] += c1
                acc2[4 * n + 2] += c2
                acc2[4 * n + 3] += c3
        return par

    LDB = ldb

    @jit
    def qk(sm, q_at, k_at, ks_at, lane, scr, wbase, par, s, neg):
        for i in range(4 * ns):
            s[i] = F0
        for kk in range(kt):
            w0, w2, w1, w3 = LDB(sm, q_at + U(kk * 8), rs, lane)
            a0, a1, a2, a3, e0, e1, e2, e3 = split4(w0, w1, w2, w3, neg)
            for n2 in range(ns // 2):
                if RAW:
                    k0w, k1w, k2w, k3w = LDB(sm, U(k_at + (n2 * 16) * rs + kk * 8), rs, lane)
                    l0w, l1w, l2w, l3w = k0w, k1w, k2w, k3w     # (unused)
                else:
                    kw = U((n2 * 16) * rs + kk * 8)
                    k0w, k1w, k2w, k3w = LDB(sm, U(k_at) + kw, rs, lane)
                    l0w, l1w, l2w, l3w = k0w, k1w, k2w, k3w     # (one pass: no small terms)
                    if THREE:
                        l0w, l1w, l2w, l3w = LDB(sm, U(ks_at) + kw, rs, lane)
                for half in range(2):
                    n = 2 * n2 + half
                    if RAW:
                        y0 = AS_F32(k0w if half == 0 else k2w)
                        y1 = AS_F32(k1w if half == 0 else k3w)
                        b0 = BIG(y0)
                        b1 = BIG(y1)
                        f0 = SMALL(y0 - AS_F32(b0))
                        f1 = SMALL(y1 - AS_F32(b1))
                    else:
                        b0 = k0w if half == 0 else k2w
                        b1 = k1w if half == 0 else k3w
                        f0 = l0w if half == 0 else l2w
                        f1 = l1w if half == 0 else l3w
                    par = chain_into(scr, wbase, lane, par, a0, a1, a2, a3, e0, e1, e2, e3,
                                     b0, b1, f0, f1, s, 4 * n)
        return par

    return {"split": split, "split4": split4, "chain": chain, "chain_into": chain_into, "qk": qk,
            "chain_apart": chain_apart,
            "split_p": split_p, "pv": pv}


def cp_async_rows(simulator: bool, cp16, rows: int, chunks: int, threads: int,
                  row_words: int, two: bool) -> dict:
    """copy(sm, at, at2, rs, x, x2, base, row0, limit, tid): `rows` rows of `chunks`
    16-byte chunks each, global -> shared by cp.async (no commit), the threads' chunks
    round-robin from thread `tid` of `threads`: row r of the tile is row base + row0 + r
    of the flat array x (row_words 32-bit words a row), written at word at + r rs of sm;
    rows from `limit` on are zero-filled (and read from row base). two: the same rows of
    x2 to word at2 as well (K and V of one key block).
    copy_z(sm, at, at2, rs, x, x2, base, row0, limit, zrow, tid): the same, the rows
    past `limit` read from row base + zrow (a paged cache's page, where row base may
    not exist)."""
    jit = _jit(simulator)
    CP16 = cp16
    LOADS = -(-(rows * chunks) // threads)

    @jit
    def copy_z(sm, at, at2, rs, x, x2, base, row0, limit, zrow, tid):
        for it in range(LOADS):
            e = tid + threads * it
            if e < rows * chunks:
                r = e // chunks
                c = (e - r * chunks) * 4
                key = row0 + r
                ok = key < limit
                gi = U(base + (key if ok else zrow)) * U(row_words) + U(c)
                CP16(sm, U(at + r * rs + c), x, gi, 16 if ok else 0)
                if two:
                    CP16(sm, U(at2 + r * rs + c), x2, gi, 16 if ok else 0)

    @jit
    def copy(sm, at, at2, rs, x, x2, base, row0, limit, tid):
        copy_z(sm, at, at2, rs, x, x2, base, row0, limit, 0, tid)

    return {"copy": copy, "copy_z": copy_z}


def half_ops(simulator: bool, precision: str):
    """(mma, mma_into, pack) of an fp16/bf16 kernel (precision "fp16" or "bf16"): the
    m16n8k16 mma of `ptx.mma.device_ops`, `mma_into` of it, and the pack of two floats
    into one word of two 16-bit values (cvt.rn)."""
    ops = device_ops(simulator)
    mma = ops["mma_fp16"] if precision == "fp16" else ops["mma_bf16"]
    pack = ops["pack_fp16"] if precision == "fp16" else ops["pack_bf16"]
    return mma, mma_into(simulator, mma), pack


def mma_into(simulator: bool, mma):
    """mma_into(scr, wbase, lane, par, a0..a3, b0, b1, c, j) -> par: c[j:j + 4] = A B +
    c[j:j + 4] by `mma` (one n8 tile's accumulator fragment, in place); par flipped."""
    jit = _jit(simulator)
    MMA = mma

    @jit
    def into(scr, wbase, lane, par, a0, a1, a2, a3, b0, b1, c, j):
        x0, x1, x2, x3 = MMA(scr, wbase, lane, par, a0, a1, a2, a3, b0, b1,
                             c[j], c[j + 1], c[j + 2], c[j + 3])
        c[j] = x0
        c[j + 1] = x1
        c[j + 2] = x2
        c[j + 3] = x3
        return 1 - par

    return into


@inlined
def word_pair(x, h, r, c, tn):
    """(w0, w1): word c of rows r and r + 1 of x[h] (two 16-bit values a word; a row at or
    past tn reads as 0)."""
    w0 = x[U(h), U(r), U(c)] if r < tn else _Z32
    w1 = x[U(h), U(r + 1), U(c)] if r + 1 < tn else _Z32
    return w0, w1


def pair_store(simulator: bool, rows_at: int, rs: int, t_at: int = -1, ts: int = 0,
               t_first: bool = False):
    """put(sm, rp, c, w0, w1): word c of the rows 2 rp, 2 rp + 1 of a tile (w0, w1: two
    16-bit values each) into shared memory, row-major at word rows_at (row stride rs words;
    rows_at < 0: not stored) and transposed-packed at word t_at ([column][row pair], row
    stride ts; t_at < 0: not stored): the low halves of w0, w1 make word rp of column 2c,
    the high halves word rp of column 2c + 1 (the layout whose 32-bit words are B
    fragments with k along the rows: `mma.p_as_a_operand`); t_first: the transposed copy
    first."""
    jit = _jit(simulator)
    ROWS, RS, T, TS, T_FIRST = rows_at, rs, t_at, ts, t_first

    @jit
    def put(sm, rp, c, w0, w1):
        if T_FIRST and T >= 0:
            sm[U(T + (2 * c) * TS + rp)] = (w0 & LO16) | (w1 << SH16)
            sm[U(T + (2 * c + 1) * TS + rp)] = (w0 >> SH16) | (w1 & HI16)
        if ROWS >= 0:
            sm[U(ROWS + (2 * rp) * RS + c)] = w0
            sm[U(ROWS + (2 * rp + 1) * RS + c)] = w1
        if not T_FIRST and T >= 0:
            sm[U(T + (2 * c) * TS + rp)] = (w0 & LO16) | (w1 << SH16)
            sm[U(T + (2 * c + 1) * TS + rp)] = (w0 >> SH16) | (w1 & HI16)

    return put


def tile_copy(simulator: bool, loads: int, rows: int, dw: int, threads: int, put):
    """copy(sm, x, y, h, r0, tn, tid): a tile of `rows` rows (or row pairs) by dw words,
    the block's threads taking element e = tid, tid + threads, ... (`loads` steps) of it,
    row r = e // dw, word c: put(sm, x, y, h, r0, tn, r, c) does the element's copy (from
    row r0 + ... of x[h], and of y[h]; rows at or past tn: zeros)."""
    jit = _jit(simulator)
    PUT = put

    @jit
    def copy(sm, x, y, h, r0, tn, tid):
        for it in range(loads):
            e = tid + threads * it
            if e < rows * dw:
                r = e // dw
                PUT(sm, x, y, h, r0, tn, r, e - r * dw)

    return copy


def pair_copy(simulator: bool, loads: int, pairs: int, dw: int, threads: int, put_x,
              put_y=None):
    """copy(sm, x, y, h, r0, tn, tid): `pairs` row pairs of dw words of x[h] from row r0
    (rows at or past tn: 0) into shared memory by `put_x` (a `pair_store`), the block's
    threads taking (row pair, word) e = tid, tid + threads, ... (`loads` steps,
    `tile_copy`); with put_y the same rows of y by put_y in the same steps (Q_i and dO_i,
    K_j and V_j)."""
    jit = _jit(simulator)
    PUT_X, PUT_Y, TWO = put_x, put_x if put_y is None else put_y, put_y is not None

    @jit
    def put(sm, x, y, h, r0, tn, rp, c):
        w0, w1 = word_pair(x, h, r0 + 2 * rp, c, tn)
        PUT_X(sm, rp, c, w0, w1)
        if TWO:
            w0, w1 = word_pair(y, h, r0 + 2 * rp, c, tn)
            PUT_Y(sm, rp, c, w0, w1)

    return tile_copy(simulator, loads, pairs, dw, threads, put)


def pack_a(simulator: bool, pack):
    """pack4(pa, at, x, j0): the A fragment of one m16n8k16 step from two m16n8 C tiles of
    fp32 x (entries j0 .. j0 + 7: `mma.p_as_a_operand`), rounded to two 16-bit values a
    word by `pack`, into pa[at .. at + 3]."""
    jit = _jit(simulator)
    PACK = pack

    @jit
    def pack4(pa, at, x, j0):
        pa[at] = PACK(x[j0], x[j0 + 1])
        pa[at + 1] = PACK(x[j0 + 2], x[j0 + 3])
        pa[at + 2] = PACK(x[j0 + 4], x[j0 + 5])
        pa[at + 3] = PACK(x[j0 + 6], x[j0 + 7])

    return pack4
