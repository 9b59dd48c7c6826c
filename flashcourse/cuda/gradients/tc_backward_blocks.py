"""Device blocks of the tensor-core backward kernels, written once for every version.

The key-major kernels (fp16/bf16 versions 1 and 2, 3xTF32) and the 3xTF32 dQ pass share
steps whose operands come from the same places: K_j, V_j's A fragments in registers, the
query block's cp.async copy, P^T and dS^T from S^T and dP^T, the row sums of P and dS,
the fp32 dK/dV epilogue and the 3xTF32 chain of S^T and dP^T (S and dP in the dQ pass).
Each factory builds them for one kernel's tile shape (loop counts as its constants, so
the loops unroll and the fragment arrays stay in registers); inlined on a GPU
(forceinline), plain device functions on the simulator. Fragment layout: `ptx.mma`.
"""

from __future__ import annotations

from numba import cuda
from numba import uint64 as U

from ...constants import F0
from ..common.tc_blocks import cp_async_rows
from ..ptx.mma import device_ops, tf32x3_ops
from ..tensor_core.tensor_core_kernels import Z32


def _jit(simulator: bool):
    return cuda.jit(device=True) if simulator else cuda.jit(device=True, forceinline=True)


def key_blocks(simulator: bool, exp2, col_sum, kt: int, ns: int, no: int) -> dict:
    """Steps of a key-major kernel (a warp owns 16 keys, kr0 and kr0 + 8 per lane; S^T and
    dP^T are ns n8 tiles of queries in `s`, `dp`; dK, dV no n8 tiles of D).

    load_a2(k, v, ka, va, h, kr0, kr1, tk, t): this lane's A fragments (rows kr0, kr1 =
    kr0 + 8; kt k16 steps, two 16-bit values a word; rows past tk zero) of two matrices
    into ka, va: K_j and V_j (or Q_i and dO_i in the dQ pass).
    p_ds(s, dp, smf, l_at, d_at, qscale, edge, kr0, tk, causal, q0, off, t): P^T =
    exp2(S^T qscale - L) in s (0 for keys past Tk or, causal, above the diagonal, checked
    in `edge` blocks), dS^T = P^T (dP^T - D) in dp; L and D of query q0 + col at words
    l_at + col, d_at + col of smf.
    sums(s, dp, psum, dsum, h, q0, tq, g, t): the query rows' sums of P and dS added to
    psum, dsum (the lse and o checks).
    store(dk, dv, dka, dva, h, kr0, tk, d, t, scale): dK = scale dka, dV = dva (fp32)."""
    jit = _jit(simulator)
    SIM = simulator

    @jit
    def load_a2(k, v, ka, va, h, kr0, kr1, tk, t):
        for kk in range(kt):
            w0 = kk * 8 + t
            ka[4 * kk] = k[U(h), U(kr0), U(w0)] if kr0 < tk else Z32
            ka[4 * kk + 1] = k[U(h), U(kr1), U(w0)] if kr1 < tk else Z32
            ka[4 * kk + 2] = k[U(h), U(kr0), U(w0 + 4)] if kr0 < tk else Z32
            ka[4 * kk + 3] = k[U(h), U(kr1), U(w0 + 4)] if kr1 < tk else Z32
            va[4 * kk] = v[U(h), U(kr0), U(w0)] if kr0 < tk else Z32
            va[4 * kk + 1] = v[U(h), U(kr1), U(w0)] if kr1 < tk else Z32
            va[4 * kk + 2] = v[U(h), U(kr0), U(w0 + 4)] if kr0 < tk else Z32
            va[4 * kk + 3] = v[U(h), U(kr1), U(w0 + 4)] if kr1 < tk else Z32

    @jit
    def p_ds(s, dp, smf, l_at, d_at, qscale, edge, kr0, tk, causal, q0, off, t):
        for n in range(ns):
            for e2 in range(2):
                col = n * 8 + 2 * t + e2
                lrow = smf[U(l_at + col)]
                drow = smf[U(d_at + col)]
                for hf in range(2):
                    j = 4 * n + 2 * hf + e2
                    p = exp2(s[j] * qscale - lrow)
                    if edge:
                        key = kr0 + 8 * hf
                        if key >= tk or (causal != 0 and key > q0 + col + off):
                            p = F0
                    s[j] = p
                    dp[j] = p * (dp[j] - drow)

    @jit
    def sums(s, dp, psum, dsum, h, q0, tq, g, t):
        for n in range(ns):
            for e2 in range(2):
                ps = col_sum(s[4 * n + e2] + s[4 * n + 2 + e2])
                ds = col_sum(dp[4 * n + e2] + dp[4 * n + 2 + e2])
                qrow = q0 + n * 8 + 2 * t + e2
                if (g == 0 or SIM) and qrow < tq:
                    cuda.atomic.add(psum, (h, qrow), ps)
                    cuda.atomic.add(dsum, (h, qrow), ds)

    @jit
    def store(dk, dv, dka, dva, h, kr0, tk, d, t, scale):
        for n in range(no):
            for i in range(4):
                key = kr0 + 8 * (i // 2)
                c = n * 8 + 2 * t + (i % 2)
                if key < tk and c < d:
                    dk[U(h), U(key), U(c)] = dka[4 * n + i] * scale
                    dv[U(h), U(key), U(c)] = dva[4 * n + i]

    return {"load_a2": load_a2, "p_ds": p_ds, "sums": sums, "store": store}


def query_tile_loader(simulator: bool, cp16, commit, rows: int, chunks: int, threads: int,
                      row_words: int, offsets) -> dict:
    """load(sm, at, rs, q, do, ldw, qbase, lbase, dbase, q0, tq, tid): query block q0's
    rows of Q and dO (rows past Tq zero) and its L and D (rows / 4 chunks each, from the
    flat ldw at lbase + q0, dbase + q0) -> the buffer at word `at` of sm by cp.async, one
    commit group; offsets = (Q, dO, L, D) words inside the buffer, rs the row stride."""
    jit = _jit(simulator)
    CP16, COMMIT = cp16, commit
    COPY = cp_async_rows(simulator, cp16, rows, chunks, threads, row_words, True)["copy"]
    QN, DON, LS, DS = offsets
    LCH = rows // 4

    @jit
    def load(sm, at, rs, q, do, ldw, qbase, lbase, dbase, q0, tq, tid):
        COPY(sm, at + QN, at + DON, rs, q, do, qbase, q0, tq, tid)
        if tid < LCH:
            CP16(sm, U(at + LS + 4 * tid), ldw, U(lbase + q0 + 4 * tid), 16)
        elif tid < 2 * LCH:
            CP16(sm, U(at + DS + 4 * (tid - LCH)), ldw, U(dbase + q0 + 4 * (tid - LCH)), 16)
        COMMIT()

    return {"load": load}


def tf32_s_dp(simulator: bool, ldb, rs: int, kt: int, ns: int, planes: bool):
    """s_dp(sm, a_at, a2_at, b_at, b2_at, sb_at, sb2_at, lane, scr, wbase, par, s, dp)
    -> par: S = A B^T into s and dP = A2 B2^T into dp (3xTF32, from zero; per k8 step
    small, small, big: `mma.tf32x3_ops`' mma3), a warp's 16 rows of A (rows of rs words
    from a_at) by ldmatrix.x4 split where read, ns n8 tiles of B the same way from b_at;
    planes: B's big parts at b_at and small parts at sb_at, split before."""
    jit = _jit(simulator)
    ops = device_ops(simulator)
    AS_F32 = ops["as_f32"]
    three = tf32x3_ops(simulator)
    SPLIT, MMA3 = three["split"], three["mma3"]
    LDB = ldb
    SREGS = 4 * ns

    @jit
    def s_dp(sm, a_at, a2_at, b_at, b2_at, sb_at, sb2_at, lane, scr, wbase, par, s, dp):
        for i in range(SREGS):
            s[i] = F0
            dp[i] = F0
        for kk in range(kt):
            for which in range(2):          # 0: A with B into s; 1: A2 with B2 into dp
                w0, w2, w1, w3 = LDB(sm, (a_at if which == 0 else a2_at) + U(kk * 8),
                                     rs, lane)
                a0, sa0 = SPLIT(AS_F32(w0))
                a1, sa1 = SPLIT(AS_F32(w1))
                a2, sa2 = SPLIT(AS_F32(w2))
                a3, sa3 = SPLIT(AS_F32(w3))
                bsrc = b_at if which == 0 else b2_at
                ssrc = sb_at if which == 0 else sb2_at
                for n2 in range(ns // 2):
                    y0w, y1w, y2w, y3w = LDB(sm, U(bsrc + (n2 * 16) * rs + kk * 8), rs,
                                             lane)
                    if planes:
                        z0w, z1w, z2w, z3w = LDB(sm, U(ssrc + (n2 * 16) * rs + kk * 8),
                                                 rs, lane)
                    for half in range(2):
                        n = 2 * n2 + half
                        if planes:
                            b0 = y0w if half == 0 else y2w
                            b1 = y1w if half == 0 else y3w
                            sb0 = z0w if half == 0 else z2w
                            sb1 = z1w if half == 0 else z3w
                        else:
                            y0 = AS_F32(y0w if half == 0 else y2w)
                            y1 = AS_F32(y1w if half == 0 else y3w)
                            b0, sb0 = SPLIT(y0)
                            b1, sb1 = SPLIT(y1)
                        if which == 0:
                            c0 = s[4 * n]
                            c1 = s[4 * n + 1]
                            c2 = s[4 * n + 2]
                            c3 = s[4 * n + 3]
                        else:
                            c0 = dp[4 * n]
                            c1 = dp[4 * n + 1]
                            c2 = dp[4 * n + 2]
                            c3 = dp[4 * n + 3]
                        c0, c1, c2, c3, par = MMA3(scr, wbase, lane, par,
                                                   a0, a1, a2, a3, sa0, sa1, sa2, sa3,
                                                   b0, b1, sb0, sb1, c0, c1, c2, c3)
                        if which == 0:
                            s[4 * n] = c0
                            s[4 * n + 1] = c1
                            s[4 * n + 2] = c2
                            s[4 * n + 3] = c3
                        else:
                            dp[4 * n] = c0
                            dp[4 * n + 1] = c1
                            dp[4 * n + 2] = c2
                            dp[4 * n + 3] = c3
        return par

    return s_dp
