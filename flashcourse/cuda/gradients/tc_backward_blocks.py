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
from ..common._device import zero2
from ..common.tc_blocks import cp_async_rows, pack_a, tile_copy
from ..ptx.mma import device_ops, tf32x3_ops
from ..tensor_core.tensor_core_kernels import Z32


def _jit(simulator: bool):
    return cuda.jit(device=True) if simulator else cuda.jit(device=True, forceinline=True)


def key_blocks(simulator: bool, exp2, col_sum, kt: int, ns: int, no: int, *,
               check_q: bool = False, store_dv: bool = True) -> dict:
    """Steps of a key-major kernel (a warp owns 16 keys, kr0 and kr0 + 8 per lane; S^T and
    dP^T are ns n8 tiles of queries in `s`, `dp`; dK, dV no n8 tiles of D).

    load_a2(k, v, ka, va, h, kr0, kr1, tk, t): this lane's A fragments (rows kr0, kr1 =
    kr0 + 8; kt k16 steps, two 16-bit values a word; rows past tk zero) of two matrices
    into ka, va: K_j and V_j (or Q_i and dO_i in the dQ pass).
    p_ds(s, dp, smf, l_at, d_at, qscale, edge, kr0, tk, tq, causal, q0, off, t): P^T =
    exp2(S^T qscale - L) in s (0 for keys past Tk, check_q: queries past Tq, or, causal,
    above the diagonal, checked in `edge` blocks), dS^T = P^T (dP^T - D) in dp; L and D of
    query q0 + col at words l_at + col, d_at + col of smf.
    sums(s, dp, psum, dsum, h, q0, tq, g, t): the query rows' sums of P and dS added to
    psum, dsum (the lse and o checks).
    store(dk, dv, dka, dva, h, kr0, tk, d, t, scale): dK = scale dka, dV = dva (fp32), rows
    kr0, kr0 + 8 of head h inside Tk and d; store_dv False: dK only (dv, dva unused: the
    dQ pass stores its dQ this way)."""
    jit = _jit(simulator)
    SIM, CHECK_Q, STORE_DV = simulator, check_q, store_dv

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
    def p_ds(s, dp, smf, l_at, d_at, qscale, edge, kr0, tk, tq, causal, q0, off, t):
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
                        qrow = q0 + col
                        if key >= tk or (CHECK_Q and qrow >= tq) or \
                                (causal != 0 and key > qrow + off):
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
                    if STORE_DV:
                        dv[U(h), U(key), U(c)] = dva[4 * n + i]

    return {"load_a2": load_a2, "p_ds": p_ds, "sums": sums, "store": store}


def query_blocks(simulator: bool, exp2, ns: int, *, check_q: bool = False,
                 split=None) -> dict:
    """Steps of a query-major dQ pass (a warp owns 16 query rows, r0 and r0 + 8 per lane;
    S and dP are ns n8 tiles of keys in `s`, `dp`).

    p_ds(s, dp, pb, pl, lrow, drow, qscale, edge, k0, r0, tk, tq, causal, off, t): P =
    exp2(S qscale - L) (0 for keys past Tk, check_q: rows past Tq, or, causal, above the
    diagonal, checked in `edge` blocks) and dS = P (dP - D), the rows' L and D in lrow,
    drow; dS into dp, or (split: `mma.tf32x3_ops`' split, for 3xTF32) its big and small
    parts into pb, pl."""
    jit = _jit(simulator)
    CHECK_Q, SPLIT_DS = check_q, split is not None
    SPLIT = tf32x3_ops(simulator)["split"] if split is None else split   # (typed, unused)

    @jit
    def p_ds(s, dp, pb, pl, lrow, drow, qscale, edge, k0, r0, tk, tq, causal, off, t):
        for n in range(ns):
            for i in range(4):
                hf = i // 2
                j = 4 * n + i
                p = exp2(s[j] * qscale - lrow[hf])
                if edge:
                    key = k0 + n * 8 + 2 * t + (i % 2)
                    qrow = r0 + 8 * hf
                    if key >= tk or (CHECK_Q and qrow >= tq) or \
                            (causal != 0 and key > qrow + off):
                        p = F0
                if SPLIT_DS:
                    big, small = SPLIT(p * (dp[j] - drow[hf]))
                    pb[j] = big
                    pl[j] = small
                else:
                    dp[j] = p * (dp[j] - drow[hf])

    return {"p_ds": p_ds}


def query_tile_loader(simulator: bool, cp16, commit, rows: int, chunks: int, threads: int,
                      row_words: int, offsets, *, wait=None, buf: int = 0,
                      ldr: int = 128) -> dict:
    """load(sm, at, rs, q, do, ldw, qbase, lbase, dbase, q0, tq, tid): query block q0's
    rows of Q and dO (rows past Tq zero) and its L and D (rows / 4 chunks each, from the
    flat ldw at lbase + q0, dbase + q0) -> the buffer at word `at` of sm by cp.async, one
    commit group; offsets = (Q, dO, L, D) words inside the buffer, rs the row stride.
    step(sm, qb, qb0, n_qb, rs, q, do, ldw, qbase, lbase, dbase, tq, tid) -> (q0, bo): the
    top of the loop over query blocks qb0 .. n_qb - 1 in two buffers `buf` words apart:
    wait (`wait`, cp.async.wait_all) for block qb, a barrier (every warp is done with the
    other buffer), then block qb + 1's load into the other buffer; q0 = qb rows, bo =
    this block's buffer.
    bases(h, nh, tq) -> (qbase, lbase, dbase): row 0 of head h (of nh) in the flat Q, dO
    (and dQ), and of its L and D in ldw, the pre-pass's (2, nh, Tq rounded up to ldr)."""
    jit = _jit(simulator)
    CP16, COMMIT, WAIT = cp16, commit, wait
    COPY = cp_async_rows(simulator, cp16, rows, chunks, threads, row_words, True)["copy"]
    QN, DON, LS, DS = offsets
    LCH = rows // 4
    BR, BUF, LDR = rows, buf, ldr

    @jit
    def load(sm, at, rs, q, do, ldw, qbase, lbase, dbase, q0, tq, tid):
        COPY(sm, at + QN, at + DON, rs, q, do, qbase, q0, tq, tid)
        if tid < LCH:
            CP16(sm, U(at + LS + 4 * tid), ldw, U(lbase + q0 + 4 * tid), 16)
        elif tid < 2 * LCH:
            CP16(sm, U(at + DS + 4 * (tid - LCH)), ldw, U(dbase + q0 + 4 * (tid - LCH)), 16)
        COMMIT()

    @jit
    def step(sm, qb, qb0, n_qb, rs, q, do, ldw, qbase, lbase, dbase, tq, tid):
        q0 = qb * BR
        bo = ((qb - qb0) % 2) * BUF             # this block's buffer
        WAIT()
        cuda.syncthreads()                      # block qb landed; the other buffer is free
        if qb + 1 < n_qb:                       # block qb + 1 -> the other buffer
            load(sm, BUF - bo, rs, q, do, ldw, qbase, lbase, dbase, q0 + BR, tq, tid)
        return q0, bo

    @jit
    def bases(h, nh, tq):
        tqp = (tq + LDR - 1) // LDR * LDR
        return h * tq, h * tqp, (nh + h) * tqp

    return {"load": load, "step": step, "bases": bases}


def visible_query_blocks(simulator: bool, br: int):
    """span(k0, tq, causal, off) -> (qb0, n_qb): the query blocks of Br rows that the key
    block from key k0 sees, qb0 .. n_qb - 1: all ceil(Tq / Br), or with a causal mask (key
    > query + off hidden) those from the block of row k0 - off on. The backward's twin of
    `_device.visible_key_blocks`."""
    jit = _jit(simulator)
    BR = br

    @jit
    def span(k0, tq, causal, off):
        first = k0 - off if causal != 0 else 0
        first = max(first, 0)
        return first // BR, (tq + BR - 1) // BR

    return span


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
        zero2(s, dp, SREGS)
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


def kv_fragments(simulator: bool, lda, kv_regs: bool, kv_ldsm: bool, qs: int, kno: int,
                 vno: int):
    """frags(sm, ka, va, kk, warp, g, t, lane) -> (a0, a1, a2, a3, c0, c1, c2, c3): the A
    fragments of k16 step kk of K_j and V_j (a warp's 16 keys, rows warp 16 + g and + 8)
    for S^T = K_j Q_i^T and dP^T = V_j dO_i^T: from registers (kv_regs: ka, va, as
    `key_blocks`' load_a2 leaves them), by one ldmatrix.x4 (`lda`) each (kv_ldsm), or by
    four 32-bit loads each from the row-major tiles at words kno, vno (row stride qs)."""
    jit = _jit(simulator)
    LDA, KNO, VNO = lda, kno, vno

    @jit
    def frags(sm, ka, va, kk, warp, g, t, lane):
        if kv_regs:
            a0, a1, a2, a3 = ka[4 * kk], ka[4 * kk + 1], ka[4 * kk + 2], ka[4 * kk + 3]
            c0, c1, c2, c3 = va[4 * kk], va[4 * kk + 1], va[4 * kk + 2], va[4 * kk + 3]
        elif kv_ldsm:                       # one ldmatrix.x4 per A tile
            ab = (warp * 16) * qs + kk * 8
            a0, a1, a2, a3 = LDA(sm, U(KNO + ab), qs, lane)
            c0, c1, c2, c3 = LDA(sm, U(VNO + ab), qs, lane)
        else:
            ab = (warp * 16 + g) * qs + kk * 8 + t
            a0, a1 = sm[U(KNO + ab)], sm[U(KNO + ab + 8 * qs)]
            a2, a3 = sm[U(KNO + ab + 4)], sm[U(KNO + ab + 8 * qs + 4)]
            c0, c1 = sm[U(VNO + ab)], sm[U(VNO + ab + 8 * qs)]
            c2, c3 = sm[U(VNO + ab + 4)], sm[U(VNO + ab + 8 * qs + 4)]
        return a0, a1, a2, a3, c0, c1, c2, c3

    return frags


def b_word_products(simulator: bool, mma_into, at: int, ts: int, n_tiles: int):
    """prod(sm, kp, g, t, pa, acc, scr, wbase, lane, par) -> par: acc += A B over n_tiles
    n8 tiles (acc[4 n .. 4 n + 3]) for k16 step kp, A in pa[0 .. 3], B by two 32-bit
    shared loads per tile from a transposed-packed tile at word `at` ([column][row pair],
    row stride ts): version 1's products whose k runs over rows (dV += P^T dO, dK +=
    dS^T Q, and dQ += dS K in the dQ pass)."""
    jit = _jit(simulator)
    MMA_INTO, AT, TS, N = mma_into, at, ts, n_tiles

    @jit
    def prod(sm, kp, g, t, pa, acc, scr, wbase, lane, par):
        for n in range(N):
            tb = (n * 8 + g) * TS + kp * 8 + t
            b0 = sm[U(AT + tb)]
            b1 = sm[U(AT + tb + 4)]
            par = MMA_INTO(scr, wbase, lane, par, pa[0], pa[1], pa[2], pa[3], b0, b1, acc,
                           4 * n)
        return par

    return prod


def half_key_steps(simulator: bool, mma_into, pack, lda, ldb, ldbt, *, kt: int, ns: int,
                   no: int, kq: int, bc: int, dw: int, threads: int, qs: int, dsh: int,
                   offsets, kv_regs: bool, kv_ldsm: bool, with_dq: bool, nqw: int,
                   ldat=None, ds_at: bool = False) -> dict:
    """The fp16/bf16 key-major steps of version 2 (and the variants backward, which runs
    them unchanged): a warp owns 16 keys of the block; S^T, dP^T are ns n8 tiles of
    queries in `s`, `dp`; dK, dV no n8 tiles of D in `dka`, `dva` (fp32).

    load_kv(sm, k, v, h, k0, tk, tid): K_j (and V_j unless kv_regs) row-major into shared
    memory at the offsets' KN, VN (rows past Tk zero), row stride qs words.
    st_dpt(sm, bo, ka, va, s, dp, scr, wbase, lane, par, warp, g, t) -> par: S^T = K_j
    Q_i^T, dP^T = V_j dO_i^T from zero; A from registers (kv_regs: ka, va), by ldmatrix
    (kv_ldsm) or by word from the shared tiles; B from the query buffer at word bo.
    dv_dk(sm, bo, s, dp, pa, dva, dka, scr, wbase, lane, par, warp, g, t) -> par:
    dV_j += P^T dO_i, dK_j += dS^T Q_i (P^T in s, dS^T in dp, rounded to 16 bits into pa;
    B by ldmatrix.trans of the row-major tiles); with_dq: dS^T also into shared memory at
    DSO ([key][query pair], row stride dsh), for the dQ step.
    dq(sm, dqa, scr, wbase, lane, par, mq, nb) -> par: dQ_i = dS K_j from zero into dqa,
    16-row tile mq of the query block (mq = warp % (Br/16)) by nqw n8 tiles from tile nb
    (nb = (warp // (Br/16)) nqw), over the block's keys; A = dS, dS^T's tiles transposed
    by ldmatrix.trans (ld_bt gives them as a0, a2, a1, a3; ds_at: `ldat`, addressed so
    that they come in the mma's order), B = K_j row-major by ldmatrix.trans."""
    jit = _jit(simulator)
    MMA_INTO, LDB, LDBT = mma_into, ldb, ldbt
    QN, DON, KNO, VNO, DSO = offsets
    KLOADS = -(-(bc * dw) // threads)
    SREGS = 4 * ns
    KK, NQW, QREGS = bc // 16, nqw, 4 * nqw
    LDAT = ldbt if ldat is None else ldat
    FRAGS = kv_fragments(simulator, lda, kv_regs, kv_ldsm, qs, KNO, VNO)
    PACK4 = pack_a(simulator, pack)

    @jit
    def kv_rows(sm, k, v, h, k0, tk, r, c):
        key = k0 + r
        sm[U(KNO + r * qs + c)] = k[U(h), U(key), U(c)] if key < tk else Z32
        if not kv_regs:
            sm[U(VNO + r * qs + c)] = v[U(h), U(key), U(c)] if key < tk else Z32

    load_kv = tile_copy(simulator, KLOADS, bc, dw, threads, kv_rows)

    @jit
    def st_dpt(sm, bo, ka, va, s, dp, scr, wbase, lane, par, warp, g, t):
        zero2(s, dp, SREGS)
        for kk in range(kt):
            a0, a1, a2, a3, c0, c1, c2, c3 = FRAGS(sm, ka, va, kk, warp, g, t, lane)
            for n2 in range(ns // 2):
                n = 2 * n2
                b0, b1, b2, b3 = LDB(sm, U(bo + QN + (n * 8) * qs + kk * 8), qs, lane)
                par = MMA_INTO(scr, wbase, lane, par, a0, a1, a2, a3, b0, b1, s, 4 * n)
                par = MMA_INTO(scr, wbase, lane, par, a0, a1, a2, a3, b2, b3, s, 4 * n + 4)
                b0, b1, b2, b3 = LDB(sm, U(bo + DON + (n * 8) * qs + kk * 8), qs, lane)
                par = MMA_INTO(scr, wbase, lane, par, c0, c1, c2, c3, b0, b1, dp, 4 * n)
                par = MMA_INTO(scr, wbase, lane, par, c0, c1, c2, c3, b2, b3, dp, 4 * n + 4)
        return par

    @jit
    def pa_bt(sm, at, kp, pa, acc, scr, wbase, lane, par):
        """acc += A B for k16 step kp: A in pa[0 .. 3], B the no n8 tiles of the row-major
        tile at word `at` by ldmatrix.trans (dV += P^T dO_i from DON, dK += dS^T Q_i from QN)."""
        for n2 in range(no // 2):
            n = 2 * n2
            b0, b1, b2, b3 = LDBT(sm, U(at + (kp * 16) * qs + n * 4), qs, lane)
            par = MMA_INTO(scr, wbase, lane, par, pa[0], pa[1], pa[2], pa[3], b0, b1, acc, 4 * n)
            par = MMA_INTO(scr, wbase, lane, par, pa[0], pa[1], pa[2], pa[3], b2, b3, acc,
                           4 * n + 4)
        return par

    @jit
    def dv_dk(sm, bo, s, dp, pa, dva, dka, scr, wbase, lane, par, warp, g, t):
        for kp in range(kq):
            PACK4(pa, 0, s, 8 * kp)
            par = pa_bt(sm, bo + DON, kp, pa, dva, scr, wbase, lane, par)
            PACK4(pa, 0, dp, 8 * kp)
            if with_dq:                     # dS^T rounded, [key][query pair], for dQ
                sb = DSO + (warp * 16 + g) * dsh + 8 * kp + t
                sm[U(sb)] = pa[0]
                sm[U(sb + 8 * dsh)] = pa[1]
                sm[U(sb + 4)] = pa[2]
                sm[U(sb + 8 * dsh + 4)] = pa[3]
            par = pa_bt(sm, bo + QN, kp, pa, dka, scr, wbase, lane, par)
        return par

    @jit
    def dq(sm, dqa, scr, wbase, lane, par, mq, nb):
        for i in range(QREGS):
            dqa[i] = F0
        for kp in range(KK):
            # A = dS (rows = queries, k = keys) is dS^T's tiles transposed
            if ds_at:
                a0, a1, a2, a3 = LDAT(sm, U(DSO + (kp * 16) * dsh + mq * 8), dsh, lane)
            else:
                a0, a2, a1, a3 = LDBT(sm, U(DSO + (kp * 16) * dsh + mq * 8), dsh, lane)
            for n2 in range(NQW // 2):
                n = 2 * n2
                b0, b1, b2, b3 = LDBT(sm, U(KNO + (kp * 16) * qs + (nb + n) * 4), qs, lane)
                par = MMA_INTO(scr, wbase, lane, par, a0, a1, a2, a3, b0, b1, dqa, 4 * n)
                par = MMA_INTO(scr, wbase, lane, par, a0, a1, a2, a3, b2, b3, dqa, 4 * n + 4)
        return par

    return {"load_kv": load_kv, "st_dpt": st_dpt, "dv_dk": dv_dk, "dq": dq}


def dq_tile_store(simulator: bool, red, add_dq, *, nqw: int, br: int, d_pad: int,
                  apart: bool = False):
    """store(dq, dqa, dqe, qbase, q0, tq, d, mq, nb, g, t, scale): a warp's piece of dQ_i
    (16-row tile mq of the query block, nqw n8 tiles from tile nb; the mma C layout, fp32;
    apart: the small terms in dqe, added to dqa first) times scale added to flat dq (rows
    qbase + q0 + ..., d columns): a block inside Tq with d = d_pad by `add_dq` (no checks;
    pairs of columns per reduction where it takes them), else one `red`
    (red.global.add.f32) per value inside Tq and d."""
    jit = _jit(simulator)
    RED, ADD, NQW, BR, D, APART = red, add_dq, nqw, br, d_pad, apart

    @jit
    def store(dq, dqa, dqe, qbase, q0, tq, d, mq, nb, g, t, scale):
        r0 = q0 + mq * 16 + g
        g0 = U(qbase + r0) * U(d) + U(nb * 8 + 2 * t)
        g1 = g0 + U(8 * d)
        if APART:
            for i in range(4 * NQW):
                dqa[i] += dqe[i]
        if q0 + BR <= tq and d == D:        # the whole tile is inside: no checks
            for n in range(NQW):
                ADD(dq, g0 + U(8 * n), g1 + U(8 * n), dqa[4 * n] * scale,
                    dqa[4 * n + 1] * scale, dqa[4 * n + 2] * scale, dqa[4 * n + 3] * scale)
        else:
            for n in range(NQW):
                for i in range(4):
                    c = (nb + n) * 8 + 2 * t + (i % 2)
                    if r0 + 8 * (i // 2) < tq and c < d:
                        RED(dq, (g1 if i >= 2 else g0) + U(8 * n + (i % 2)),
                            dqa[4 * n + i] * scale)

    return store
