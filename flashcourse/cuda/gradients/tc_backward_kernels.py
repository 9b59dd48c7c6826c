"""tc_backward_kernels: FlashAttention-2's backward on tensor cores (mma.sync m16n8k16).

fp16 or bf16 q, k, v, dO (two 16-bit values per 32-bit word), fp32 accumulation, P and dS
rounded to the input type before the products that take them (as FlashAttention-2 does).
The host side, configurations and the registry entry are in `tc_backward.py`; the mma
building blocks and their numpy models in `mma.py`; the fp32 CUDA-core versions, with
the same contract, in `backward_kernels.py`.

The five products of one (query block i, key block j) pair (notebook 09 derives them):

    S   = Q_i K_j^T      (Br x Bc, sum over d)     P = exp(scale S - lse)
    dP  = dO_i V_j^T     (Br x Bc, sum over d)     dS = P o (dP - D),  D = rowsum(dO o O)
    dV_j += P^T dO_i     (Bc x d, sum over Br queries)
    dK_j += dS^T Q_i     (Bc x d, sum over Br queries)     (times scale at the end)
    dQ_i += dS K_j       (Br x d, sum over Bc keys)        (times scale)

Kernel 1, key-major (FlashAttention-2's Algorithm 2): one thread block per (key block j of
Bc = 16 x warps keys, head); warp w owns keys 16w..16w+15 of the block for the whole loop
over the visible query blocks, so dK_j and dV_j stay in its registers. The warp computes
the TRANSPOSED score tile S^T = K_j Q_i^T (16 keys x Br queries) rather than S:

  - the A operand (rows = keys, k = d) is K_j's own rows, loaded into registers once
    (like Q in the forward); V_j the same for dP^T = V_j dO_i^T;
  - the B operand Q_i^T (k = d, n = queries) is Q_i row-major in shared memory, two d
    values per word: the same reads as K in the forward's S = Q K^T;
  - P^T and dS^T come out in the m16n8 accumulator (C) layout, rows = keys, and two
    C tiles ARE one m16n8k16 A tile (`mma.p_as_a_operand`): P^T and dS^T feed
    dV += P^T dO and dK += dS^T Q straight from registers;
  - those products take B = dO_i and Q_i with k = queries: pairs of consecutive QUERY
    rows in one word. So Q_i and dO_i are stored twice in shared memory: row-major
    (word = two d values of one row) and transposed-packed (word = one d column of two
    consecutive rows, re-paired from two rows' words as the forward does for V).
  - dQ_i += dS K_j needs dS with rows = queries (the A operand) and K_j with k = keys
    (B: K transposed-packed, built once per block). Each warp writes its dS^T tile to
    shared memory in fp32, the block syncs, then warp w computes a 16-row, D/(warps/
    (Br/16))-column piece of dQ_i over all Bc keys and adds it to dQ in global memory
    with fp32 atomic adds (several key blocks add into the same dQ_i): FA2's design.

    with_dq=False drops the dQ step; kernel 2 then computes dQ with no atomics.

Kernel 2, query-major dQ (the Triton tutorial's design; deterministic): one thread block
per (query block of 16 x warps rows, head), warp w owns 16 query rows; Q_i and dO_i are
A fragments in registers, lse and D in registers; per visible key block: K_j row-major
(B of S = Q K^T), V_j row-major (B of dP = dO V^T) and K_j transposed-packed (B of
dQ += dS K) in shared memory; dS in the C layout is the A operand of dS K. It repeats
S and dP (4 Tq Tk d FLOPs more than the atomics, 14 instead of 10 Tq Tk d in all).

Masks: a score is dropped (P = 0, so dS = 0) when its key >= Tk, its query >= Tq, or, with
causal, key > query + Tk - Tq; query blocks entirely above the diagonal are skipped (kernel
1) like key blocks are (kernel 2). A row with lse = -inf (it sees no key) gets P = 0.

FLOPs: 2 Tq Tk d per product, five products: 10 Tq Tk d (14 with kernel 2), all on the
tensor cores; Tq Tk exponentials (twice with kernel 2). Bytes: K, V once, Q and dO once
per key block (mostly from L2), dQ atomics Tq d 4 B per key block.
"""

from __future__ import annotations

from numba import cuda, float32, uint32
from numba import uint64 as U

from ...constants import F0, FULL_MASK, LOG2E_F, POS_INF
from ..common._device import exp2_log2, key_block_order, lane_ids, zero2
from ..common.tc_blocks import half_ops
from ..ptx.mma import SIM_SCRATCH_PER_WARP
from ..common.tc_blocks import pack_a, pair_copy, pair_store
from .tc_backward_blocks import (b_word_products, key_blocks, kv_fragments, query_blocks,
                                 visible_query_blocks)
from ..tensor_core.tensor_core_kernels import _jit


#: the pre-pass pads its (2, BH, Tq) lse/D workspace to a multiple of this many rows
#: (every block_q divides it, so version 2 copies whole 16-byte chunks)
LD_ROWS = 128


def _col_sum(simulator: bool):
    """Sum of x over the 8 quads of a warp (the 8 lanes with the same threadID_in_group):
    shuffles on a GPU; in the simulator (no shuffles) every lane keeps its own x and the
    caller adds them all (with atomics)."""
    if simulator:
        @cuda.jit(device=True)
        def col_sum(x):
            return x
        return col_sum

    @cuda.jit(device=True, forceinline=True)
    def col_sum(x):
        x += cuda.shfl_xor_sync(FULL_MASK, x, 4)
        x += cuda.shfl_xor_sync(FULL_MASK, x, 8)
        return x + cuda.shfl_xor_sync(FULL_MASK, x, 16)
    return col_sum


def _warp_sum(simulator: bool):
    """warp_sum(x, part, tid): the sum of x over the 32 lanes of tid's warp, in every lane,
    by the butterfly x += shfl_xor(x, 16, 8, 4, 2, 1). The simulator has no shuffles: the
    same butterfly through part (a shared float32 array, one slot per thread of the block),
    two barriers a step, so every thread of the block must call it (on a GPU part is
    unused, and no barrier is taken)."""
    if simulator:
        @cuda.jit(device=True)
        def warp_sum(x, part, tid):
            for sh in (16, 8, 4, 2, 1):
                part[tid] = x
                cuda.syncthreads()
                x += part[tid ^ sh]
                cuda.syncthreads()
            return x
        return warp_sum

    @cuda.jit(device=True, forceinline=True)
    def warp_sum(x, part, tid):
        for sh in (16, 8, 4, 2, 1):
            x += cuda.shfl_xor_sync(FULL_MASK, x, sh)
        return x
    return warp_sum


# --------------------------------------------------------------------------------------
# kernel 1: key-major dK, dV (and dQ by atomics)
# --------------------------------------------------------------------------------------

def make_key_major_kernel(cfg):
    MMA, MMA_INTO, PACK = half_ops(cfg.simulator, cfg.precision)
    exp2, _ = exp2_log2(cfg.simulator)
    col_sum = _col_sum(cfg.simulator)
    SIM = cfg.simulator
    NW, BR, BC, D, NT = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim, cfg.threads
    WITH_DQ, SUMS, KV_REGS = cfg.with_dq, cfg.sums, cfg.kv_regs
    DW = D // 2                    # words per row of q, k, v, do
    KT = D // 16                   # k16 steps of S^T, dP^T
    NS = BR // 8                   # n8 tiles of S^T (16 keys x Br queries)
    NO = D // 8                    # n8 tiles of dK, dV (16 keys x D)
    KQ = BR // 16                  # k16 steps of dV, dK (over queries)
    KK = BC // 16                  # k16 steps of dQ (over keys)
    MQ = BR // 16                  # 16-row tiles of dQ_i
    NQW = NO // (NW // MQ)         # n8 tiles of dQ per warp
    QS, TS, KTS, DSS = cfg.row_stride, cfg.t_stride, cfg.kt_stride, cfg.ds_stride
    QN, DON, QT, DOT, LS, DS, KTO, DSO, KNO, VNO, _ = cfg.offsets()
    QLOADS = -(-((BR // 2) * DW) // NT)      # row pairs x words per thread
    KLOADS = -(-(BC * DW) // NT)
    KAREGS = 4 * KT if KV_REGS else 1
    OREGS, SREGS, QREGS = 4 * NO, 4 * NS, 4 * NQW    # register array lengths
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    kbl = key_blocks(SIM, exp2, col_sum, KT, NS, NO, check_q=True)
    LOAD_A2, P_DS, ROW_SUMS, STORE = kbl["load_a2"], kbl["p_ds"], kbl["sums"], kbl["store"]
    FRAGS = kv_fragments(SIM, None, KV_REGS, False, QS, KNO, VNO)
    PACK4 = pack_a(SIM, PACK)
    DV_T = b_word_products(SIM, MMA_INTO, DOT, TS, NO)     # dV += P^T dO (dO transposed)
    DK_T = b_word_products(SIM, MMA_INTO, QT, TS, NO)      # dK += dS^T Q
    # K_j transposed-packed (WITH_DQ) and, without KV_REGS, K_j and V_j row-major; Q_i and
    # dO_i row-major and transposed-packed (`tc_blocks.pair_store`)
    COPY_KV = pair_copy(SIM, KLOADS, BC // 2, DW, NT,
                        pair_store(SIM, -1 if KV_REGS else KNO, QS, KTO if WITH_DQ else -1, KTS,
                                   t_first=True), None if KV_REGS else pair_store(SIM, VNO, QS))
    COPY_QDO = pair_copy(SIM, QLOADS, BR // 2, DW, NT, pair_store(SIM, QN, QS, QT, TS),
                         pair_store(SIM, DON, QS, DOT, TS))
    SPAN = visible_query_blocks(SIM, BR)
    block_of = key_block_order("launch")

    def tc_bwd_key_major(q, k, v, do, lse, delta, dq, dk, dv, tq, tk, d, qscale, scale,
                         causal, off, psum, dsum):
        sm = cuda.shared.array(0, uint32)
        smf = cuda.shared.array(0, float32)       # the same memory, as floats
        scr = cuda.shared.array(SCR, float32)     # simulator only: fragment exchange
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        par = 0
        kb, h = block_of(causal)       # key block kb of head h, in launch order
        k0 = kb * BC
        kr0 = k0 + warp * 16 + g          # this lane's keys: kr0 and kr0 + 8
        kr1 = kr0 + 8

        # K_j, V_j rows of this warp as A fragments (registers), or row-major in shared
        ka = cuda.local.array(KAREGS, uint32)
        va = cuda.local.array(KAREGS, uint32)
        if KV_REGS:
            LOAD_A2(k, v, ka, va, h, kr0, kr1, tk, t)
        if WITH_DQ or not KV_REGS:
            # K_j transposed-packed (B of dQ += dS K): KT[dim][key pair]; and, without
            # KV_REGS, K_j and V_j row-major (the A fragments are read from there)
            COPY_KV(sm, k, v, h, k0, tk, tid)

        dka = cuda.local.array(OREGS, float32)   # dK_j accumulator, 16 keys x D
        dva = cuda.local.array(OREGS, float32)   # dV_j accumulator
        zero2(dka, dva, OREGS)
        s = cuda.local.array(SREGS, float32)     # S^T -> P^T (16 keys x Br)
        dp = cuda.local.array(SREGS, float32)    # dP^T -> dS^T
        pa = cuda.local.array(4, uint32)          # one k16 step of P^T / dS^T as A
        dqa = cuda.local.array(QREGS, float32)  # this warp's piece of dQ_i

        # query blocks that see a key of this block: rows >= k0 - off (causal)
        qb0, n_qb = SPAN(k0, tq, causal, off)
        if k0 >= tk:
            qb0 = n_qb
        for qb in range(qb0, n_qb):
            q0 = qb * BR
            cuda.syncthreads()         # everyone is done with the previous Q_i, dO_i, dS
            # Q_i, dO_i -> shared, row-major and transposed-packed; lse, D of its rows
            COPY_QDO(sm, q, do, h, q0, tq, tid)
            if tid < BR:
                r = q0 + tid
                lv = lse[U(h), U(r)] if r < tq else -POS_INF
                # P = exp2(S qscale - L): L = +inf gives P = 0 (a row that sees no key)
                smf[U(LS + tid)] = lv * LOG2E_F if lv > -POS_INF \
                    else POS_INF
                smf[U(DS + tid)] = delta[U(h), U(r)] if r < tq else F0
            cuda.syncthreads()

            # S^T = K_j Q_i^T and dP^T = V_j dO_i^T (16 keys x Br per warp)
            zero2(s, dp, SREGS)
            for kk in range(KT):
                a0, a1, a2, a3, c0, c1, c2, c3 = FRAGS(sm, ka, va, kk, warp, g, t, lane)
                for n in range(NS):
                    qb_ = (n * 8 + g) * QS + kk * 8 + t
                    b0 = sm[U(QN + qb_)]
                    b1 = sm[U(QN + qb_ + 4)]
                    par = MMA_INTO(scr, wbase, lane, par, a0, a1, a2, a3, b0, b1, s, 4 * n)
                    b0 = sm[U(DON + qb_)]
                    b1 = sm[U(DON + qb_ + 4)]
                    par = MMA_INTO(scr, wbase, lane, par, c0, c1, c2, c3, b0, b1, dp, 4 * n)

            # P^T = exp2(S^T qscale - L), dS^T = P^T (dP^T - D); element i of n-tile n is
            # key kr0 + 8 (i // 2), query q0 + 8 n + 2 t + (i % 2)
            edge = (k0 + BC > tk or q0 + BR > tq
                    or (causal != 0 and k0 + BC - 1 > q0 + off))
            P_DS(s, dp, smf, LS, DS, qscale, edge, kr0, tk, tq, causal, q0, off, t)
            if SUMS:                   # row sums of P and dS (the lse and o checks)
                ROW_SUMS(s, dp, psum, dsum, h, q0, tq, g, t)

            # dV_j += P^T dO_i, dK_j += dS^T Q_i: A from registers, B transposed-packed
            for kp in range(KQ):            # C tiles 2kp, 2kp+1 -> a0..a3 (mma.p_as_a_operand)
                PACK4(pa, 0, s, 8 * kp)
                par = DV_T(sm, kp, g, t, pa, dva, scr, wbase, lane, par)
                PACK4(pa, 0, dp, 8 * kp)
                par = DK_T(sm, kp, g, t, pa, dka, scr, wbase, lane, par)

            if WITH_DQ:
                # dS^T (fp32) -> shared as dS[query][key]; then dQ_i += dS K_j by atomics
                for n in range(NS):
                    for i in range(4):
                        col = n * 8 + 2 * t + (i % 2)
                        key = warp * 16 + g + 8 * (i // 2)
                        smf[U(DSO + col * DSS + key)] = dp[4 * n + i]
                cuda.syncthreads()
                mq = warp % MQ
                nb = (warp // MQ) * NQW
                for i in range(QREGS):
                    dqa[i] = F0
                for kp in range(KK):
                    rb = DSO + (mq * 16 + g) * DSS + kp * 16 + 2 * t
                    a0 = PACK(smf[U(rb)], smf[U(rb + 1)])
                    a1 = PACK(smf[U(rb + 8 * DSS)], smf[U(rb + 8 * DSS + 1)])
                    a2 = PACK(smf[U(rb + 8)], smf[U(rb + 9)])
                    a3 = PACK(smf[U(rb + 8 * DSS + 8)], smf[U(rb + 8 * DSS + 9)])
                    for n in range(NQW):
                        tb = KTO + ((nb + n) * 8 + g) * KTS + kp * 8 + t
                        b0 = sm[U(tb)]
                        b1 = sm[U(tb + 4)]
                        par = MMA_INTO(scr, wbase, lane, par, a0, a1, a2, a3, b0, b1, dqa, 4 * n)
                for n in range(NQW):
                    for i in range(4):
                        r = q0 + mq * 16 + g + 8 * (i // 2)
                        c = (nb + n) * 8 + 2 * t + (i % 2)
                        if r < tq and c < d:
                            cuda.atomic.add(dq, (h, r, c), dqa[4 * n + i] * scale)

        # epilogue: dK = scale dS^T Q, dV = P^T dO (fp32)
        STORE(dk, dv, dka, dva, h, kr0, tk, d, t, scale)

    tc_bwd_key_major.__name__ = (f"tc_bwd_kv_{cfg.precision}_w{NW}_q{BR}_d{D}"
                                 + ("_dq" if WITH_DQ else "") + ("_sums" if SUMS else "")
                                 + ("" if KV_REGS else "_kvsh") + ("_sim" if SIM else ""))
    return _jit(tc_bwd_key_major, cfg)


# --------------------------------------------------------------------------------------
# kernel 2: query-major dQ (no atomics: deterministic)
# --------------------------------------------------------------------------------------

def make_query_major_kernel(cfg):
    MMA, MMA_INTO, PACK = half_ops(cfg.simulator, cfg.precision)
    exp2, _ = exp2_log2(cfg.simulator)
    SIM = cfg.simulator
    NW, BC, D, NT = cfg.warps, cfg.q_block_k, cfg.head_dim, cfg.threads
    BRQ = 16 * NW                  # query rows per block (16 per warp)
    DW = D // 2
    KT = D // 16                   # k16 steps of S, dP
    NS = BC // 8                   # n8 tiles of S (16 queries x Bc)
    NO = D // 8                    # n8 tiles of dQ
    KP = BC // 16                  # k16 steps of dQ += dS K
    KS, VTS = cfg.row_stride, cfg.qkt_stride
    KN, VN, KTO, _ = cfg.q_offsets()
    LOADS = -(-((BC // 2) * DW) // NT)
    AREGS, OREGS, SREGS = 4 * KT, 4 * NO, 4 * NS     # register array lengths
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    kbl = key_blocks(SIM, None, None, KT, 0, NO, store_dv=False)
    LOAD_A2, STORE_DQ = kbl["load_a2"], kbl["store"]
    P_DS = query_blocks(SIM, exp2, NS, check_q=True)["p_ds"]
    PACK4 = pack_a(SIM, PACK)
    DQ_T = b_word_products(SIM, MMA_INTO, KTO, VTS, NO)     # dQ += dS K (K transposed)
    COPY_KV = pair_copy(SIM, LOADS, BC // 2, DW, NT, pair_store(SIM, KN, KS, KTO, VTS),
                        pair_store(SIM, VN, KS))           # K (and transposed), V row-major

    def tc_bwd_query_major(q, k, v, do, lse, delta, dq, tq, tk, d, qscale, scale, causal,
                           off):
        sm = cuda.shared.array(0, uint32)
        scr = cuda.shared.array(SCR, float32)
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        par = 0
        h = cuda.blockIdx.y
        q0 = cuda.blockIdx.x * BRQ
        r0 = q0 + warp * 16 + g
        r1 = r0 + 8

        qa = cuda.local.array(AREGS, uint32)     # Q rows of this warp as A fragments
        oa = cuda.local.array(AREGS, uint32)     # dO rows
        LOAD_A2(q, do, qa, oa, h, r0, r1, tq, t)
        lrow = cuda.local.array(2, float32)
        drow = cuda.local.array(2, float32)
        for hf in range(2):
            r = r0 + 8 * hf
            lv = lse[U(h), U(r)] if r < tq else -POS_INF
            lrow[hf] = lv * LOG2E_F if lv > -POS_INF else POS_INF
            drow[hf] = delta[U(h), U(r)] if r < tq else F0

        acc = cuda.local.array(OREGS, float32)   # dQ accumulator, 16 queries x D
        for i in range(OREGS):
            acc[i] = F0
        s = cuda.local.array(SREGS, float32)
        dp = cuda.local.array(SREGS, float32)
        pa = cuda.local.array(4, uint32)

        kend = tk
        if causal != 0:
            kend = min(tk, q0 + BRQ + off)
        n_kb = (kend + BC - 1) // BC if kend > 0 else 0
        for jb in range(n_kb):
            k0 = jb * BC
            cuda.syncthreads()
            COPY_KV(sm, k, v, h, k0, tk, tid)
            cuda.syncthreads()
            zero2(s, dp, SREGS)
            for kk in range(KT):
                for n in range(NS):
                    kb = (n * 8 + g) * KS + kk * 8 + t
                    b0 = sm[U(KN + kb)]
                    b1 = sm[U(KN + kb + 4)]
                    par = MMA_INTO(scr, wbase, lane, par, qa[4 * kk], qa[4 * kk + 1],
                                   qa[4 * kk + 2], qa[4 * kk + 3], b0, b1, s, 4 * n)
                    b0 = sm[U(VN + kb)]
                    b1 = sm[U(VN + kb + 4)]
                    par = MMA_INTO(scr, wbase, lane, par, oa[4 * kk], oa[4 * kk + 1],
                                   oa[4 * kk + 2], oa[4 * kk + 3], b0, b1, dp, 4 * n)
            edge = k0 + BC > tk or q0 + BRQ > tq or (causal != 0 and k0 + BC - 1 > q0 + off)
            P_DS(s, dp, dp, dp, lrow, drow, qscale, edge, k0, r0, tk, tq, causal, off, t)
            for kp in range(KP):
                PACK4(pa, 0, dp, 8 * kp)
                par = DQ_T(sm, kp, g, t, pa, acc, scr, wbase, lane, par)

        STORE_DQ(dq, dq, acc, acc, h, r0, tq, d, t, scale)     # dQ = scale acc (fp32)

    tc_bwd_query_major.__name__ = (f"tc_bwd_q_{cfg.precision}_w{NW}_k{BC}_d{D}"
                                   + ("_sim" if SIM else ""))
    return _jit(tc_bwd_query_major, cfg)

