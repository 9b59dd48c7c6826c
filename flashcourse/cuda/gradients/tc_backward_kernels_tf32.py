"""tc_backward_kernels_tf32: the key-major tensor-core backward at fp32 accuracy (3xTF32).

Same maths, same work split and same contract as the fp16/bf16 kernels
(`tc_backward_kernels.py`, whose header explains the transposed products; version 2 in
`tc_backward_kernels_async.py` the cp.async pipeline), for float32 q, k, v, dO: every
product runs on mma.sync m16n8k8 TF32 in 3xTF32, the forward's scheme
(`tensor_core_kernels.make_tf32_kernel`): each operand x = big + small, big =
tf32_round(x), small = tf32_trunc(x - big) (`mma.split_tf32`: x - big - small < 2^-21 |x|),
and each product takes three mma: small_a big_b + big_a small_b + big_a big_b.

The idea: FlashAttention-2's key-major backward. One thread block per (key block j of
Bc = 16 x warps keys, head); warp w owns keys 16w..16w+15 for the whole loop over the
query blocks i that see them (causal: those not entirely above the diagonal):

    S^T  = K_j Q_i^T     (16 keys x Br queries per warp, k = d)
    dP^T = V_j dO_i^T
    P^T  = exp2(S^T qscale - L),  dS^T = P^T o (dP^T - D)     (L = lse log2 e, D = rowsum(dO o O))
    dV_j += P^T dO_i     (16 keys x d, k = the Br queries)    in registers, across i
    dK_j += dS^T Q_i                                         in registers (x scale at the end)
    dQ_i += dS K_j       (Br x d, k = the Bc keys)            fp32 atomic adds (red.global.add)

Layouts. fp32 is one value per 32-bit word: no packing, and no transposed copies.
  - A of S^T, dP^T (rows = keys, k = d): K_j, V_j row-major in shared memory, read by
    ldmatrix.x4 (an 8 x 8 tile of 16-bit values is an 8 x 4 tile of words: lane l gets
    row l // 4, word l % 4, the (g, t) of a tf32 fragment; the four tiles come as
    (a0, a2, a1, a3)) and split into big/small where read (a fragment of 16 keys x 8 d
    serves Br / 8 mma).
  - B of S^T (k = d, n = queries): Q_i row-major, ldmatrix.x4 = the (b0, b1) of two n8
    tiles, as the forward reads K; dO_i the same for dP^T.
  - dV += P^T dO and dK += dS^T Q take A = P^T, dS^T with k = queries straight from the
    accumulator registers: an m16n8 C tile (c0 = (g, 2t), c1 = (g, 2t+1), c2 = (g+8, 2t),
    c3 = (g+8, 2t+1)) passed as (c0, c2, c1, c3) is a tf32 A tile (a0 = (g, t), a1 =
    (g+8, t), a2 = (g, t+4), a3 = (g+8, t+4)) whose k index is permuted: A column t is
    query 2t, column t + 4 query 2t + 1. B reads its rows in the same order: b0 =
    X[query 2t][dim g], b1 = X[query 2t + 1][dim g], two 32-bit shared loads (X = dO_i,
    Q_i row-major), as the forward's P V reads V.
  - dQ_i += dS K_j: each warp writes its dS^T, already split (big and small planes, as
    the bits the mma reads), to shared memory as dS[query][key]; after a barrier warp w
    computes a 16-row x (D / (warps / (Br/16)))-column piece of dQ_i over all Bc keys,
    with A = dS read from the planes and B = K_j with k = keys, the keys permuted inside
    each k8 step as above (b0 = K[key 2t][dim g], b1 = K[key 2t + 1][dim g]), and adds it
    to dQ with red.global.add.f32.

Accuracy: S^T and dP^T start from zero per query block and sum over d in one accumulator
per tile (the forward's S). dV, dK and dQ are sums over many blocks: each block's product
starts from zero, its small terms (x 2^-11) first in the same accumulator (SMALL_TERMS =
"one_chain"; "apart" keeps them in accumulators of their own, 4 FADD more per n8 tile),
and is added to the running dK_j, dV_j (registers) or to dQ (atomics) with ordinary fp32
adds (round to nearest): a tensor core's accumulator truncates, and a running sum kept in
it drifts with the number of blocks (the forward's P V, `make_tf32_kernel`'s header);
within one block's few mma the truncation is that of any fp32 sum.

pipeline="planes" (bit-equal to "async" on the simulator; on the H200 at 8 warps x Br 16,
d = 128, 2-3% faster than "async" with the small terms apart, 2.6-3.5% slower with them in
one chain: not the default, `tc_backward._tf32_tiles`): after the
barrier that opens query block i, the block splits Q_i and dO_i once, big in place of the
raw values and small into planes of their own (Br x (D + 4) words each, 2 Br (D + 4) x 4 B
more shared memory), and every warp reads both instead of splitting each B fragment it
loads (the forward's version 3 idea, for the operands all warps share). K_j, V_j are still
split where read.

Masks exactly as the fp16 kernels: P = 0 where key >= Tk, query >= Tq (rows past Tq come
as zeros with L = +inf from the pre-pass's padding), or, with causal, key > query + Tk -
Tq; a row with lse = -inf (it sees no key) has L = +inf: P = 0.

Shared memory (32-bit words; rows of Q, dO, K, V padded to D + 4 words so that the 8 row
addresses of an ldmatrix tile fall in 8 different bank groups and the B reads of rows
2t, 2t + 1 at column g in 32 different banks): 2 buffers x (Q_i, dO_i: Br x (D + 4); L,
D: Br floats), K_j, V_j: Bc x (D + 4) each (cp.async, once per block), dS big and small:
Br x (Bc + 4) each (with dQ by atomics). Q_i, dO_i, L, D go global -> shared by cp.async
into one buffer while the block computes on the other (as version 2).

FLOPs: 5 products x 2 Tq Tk d x 3 mma = 30 Tq Tk d on the tensor cores (half with causal),
Tq Tk exponentials. Bytes: K, V once (Tk d 4 B each), Q, dO once per key block (mostly
from L2), dQ atomics Tq d 4 B per key block, dK, dV written once.

Registers (ptxas -arch=sm_90 of the PTX numba-cuda writes, no GPU needed): the 16 x D
dK_j, dV_j accumulators take D registers per thread, so Br shrinks as D grows. 4 warps,
Br = 32 at d = 64: 235 registers, no spills, 87,552 B of shared memory; 4 warps, Br = 16
at d = 128: 232 registers, no spills, 110,336 B (both: 2 blocks per H200 SM). Br = 32 at
d = 128 spills (255 registers + 120 B). `tc_backward._tf32_tiles` has the choice per d.
"""

from __future__ import annotations

from numba import cuda, float32, uint32
from numba import uint64 as U

from ...constants import F0, POS_INF
from ..common._device import key_block_order, lane_ids, shared_arrays, zero2
from ..common.tc_blocks import cp_async_rows, tf32_blocks
from ..ptx.mma import SIM_SCRATCH_PER_WARP, device_ops, tf32x3_ops
from . import tc_backward_kernels_async as v2
from .tc_backward_blocks import (dq_tile_store, key_blocks, query_blocks, query_tile_loader,
                                 tf32_s_dp, visible_query_blocks)
from ..ptx.smem_ops import ops as smem_ops
from .tc_backward_kernels import LD_ROWS, _col_sum
from ..tensor_core.tensor_core_kernels import _jit

#: where a block's small terms of dV, dK and dQ go: "one_chain" (the same accumulator as
#: the big terms, small first, as S^T's chain; the block's product still starts from zero
#: and is added to the running sum in fp32) or "apart" (accumulators of their own, added
#: after the block: 4 more FADD and 4 registers per n8 tile). Read when a kernel is built.
SMALL_TERMS = "one_chain"


def make_key_major_tf32_kernel(cfg):
    ops = device_ops(cfg.simulator)
    MMA, AS_F32 = ops["mma_tf32"], ops["as_f32"]
    three = tf32x3_ops(cfg.simulator)
    SPLIT = three["split"]
    so = smem_ops(cfg.simulator, v2.LINEAR_SHARED)
    LDB, CP16, COMMIT, WAIT = so["ld_b"], so["cp16"], so["commit"], so["wait_all"]
    RED, exp2 = so["red_add"], so["ex2"]
    RED_V2 = v2.dq_pairs(cfg.simulator)
    add_dq = v2.dq_tile_adder(so, RED_V2, cfg.simulator)
    col_sum = _col_sum(cfg.simulator)
    SIM = cfg.simulator
    NW, BR, BC, D, NT = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim, cfg.threads
    WITH_DQ, SUMS = cfg.with_dq, cfg.sums
    KT = D // 8                    # k8 steps of S^T, dP^T (over d)
    NS = BR // 8                   # n8 tiles of S^T (16 keys x Br); k8 steps of dV, dK
    NO = D // 8                    # n8 tiles of dK, dV (16 keys x D)
    KK = BC // 8                   # k8 steps of dQ (over keys)
    MQ = BR // 16                  # 16-row tiles of dQ_i
    NQW = NO // (NW // MQ)         # n8 tiles of dQ per warp
    RS, DSS = cfg.tf32_row_stride, cfg.tf32_ds_stride
    QN, DON, LS, DS, KNO, VNO, DSB, DSL, BUF, _ = cfg.tf32_offsets()
    PLANES = cfg.pipeline == "planes"
    ONE_CHAIN = SMALL_TERMS == "one_chain"
    QSN, DOSN = cfg.tf32_small_offsets() if PLANES else (0, 0)
    SPL = -(-(BR * D) // NT)      # planes: Q_i (and dO_i) values split per thread
    CH = D // 4                    # 16-byte chunks per row
    OREGS, SREGS, QREGS = 4 * NO, 4 * NS, 4 * NQW
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    SHARED = shared_arrays(SIM, SCR)
    kbl = key_blocks(SIM, exp2, col_sum, 0, NS, NO)
    P_DS, ROW_SUMS, STORE = kbl["p_ds"], kbl["sums"], kbl["store"]
    loader = query_tile_loader(SIM, CP16, COMMIT, BR, CH, NT, D, (QN, DON, LS, DS), wait=WAIT,
                               buf=BUF, ldr=LD_ROWS)
    LOAD_Q, NEXT_Q, BASES = loader["load"], loader["step"], loader["bases"]
    block_of = key_block_order()       # _device.CAUSAL_KEY_ORDER
    SPAN = visible_query_blocks(SIM, BR)
    COPY_KV = cp_async_rows(SIM, CP16, BC, CH, NT, D, True)["copy"]
    S_DP = tf32_s_dp(SIM, LDB, RS, KT, NS, PLANES)
    PV_T = tf32_blocks(SIM, 3, NS, NO, raw=not PLANES, one_chain=ONE_CHAIN, backward=True)["pv"]
    DQ_STORE = dq_tile_store(SIM, RED, add_dq, nqw=NQW, br=BR, d_pad=D, apart=not ONE_CHAIN)

    def tc_bwd_key_major_tf32(q, k, v, do, ldw, dq, dk, dv, tq, tk, d, qscale, scale,
                              causal, off, psum, dsum):
        # q, do (BH, Tq, D), k, v (BH, Tk, D): the fp32 bits as uint32 words, FLAT (1-D),
        # columns d..D-1 zero; ldw: (2, BH, Tq padded to LD_ROWS) words, flat: [0] = lse
        # log2(e) (+inf: no key, padding), [1] = D; dq (BH, Tq, d) float32, flat.
        sm, smf, scr, _ = SHARED()   # smf: sm as float32; scr: the simulator's scratch
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        kb, h = block_of(causal)
        k0 = kb * BC
        # row 0 of this head's Q, dO, dQ; of its lse log2(e) and D in ldw; of its K, V
        qbase, lbase, dbase = BASES(h, cuda.gridDim.y, tq)
        kbase = h * tk
        kr0 = k0 + warp * 16 + g                 # this lane's keys: kr0 and kr0 + 8
        qb0, n_qb = SPAN(k0, tq, causal, off)    # the query blocks that see key block k0

        if qb0 < n_qb:
            # K_j, V_j (rows past Tk: zeros) and query block qb0 -> shared, one group
            COPY_KV(sm, KNO, VNO, RS, k, v, kbase, k0, tk, tid)
            LOAD_Q(sm, 0, RS, q, do, ldw, qbase, lbase, dbase, qb0 * BR, tq, tid)

        dka = cuda.local.array(OREGS, float32)   # dK_j accumulator, 16 keys x D
        dva = cuda.local.array(OREGS, float32)   # dV_j accumulator
        zero2(dka, dva, OREGS)
        s = cuda.local.array(SREGS, float32)     # S^T -> P^T (16 keys x Br)
        dp = cuda.local.array(SREGS, float32)    # dP^T -> dS^T
        pb = cuda.local.array(SREGS, uint32)     # P^T, then dS^T, split: big
        pl = cuda.local.array(SREGS, uint32)     # and small
        dqc = cuda.local.array(QREGS, float32)   # this warp's piece of dQ_i: big terms
        dqe = cuda.local.array(QREGS, float32)   # and small terms
        krow = U(KNO + warp * 16 * RS)           # this warp's 16 rows of K_j, V_j
        vrow = U(VNO + warp * 16 * RS)
        par = 0                                  # the simulated mma's scratch parity

        for qb in range(qb0, n_qb):
            # block qb landed (in buffer bo); block qb + 1 -> the other buffer
            q0, bo = NEXT_Q(sm, qb, qb0, n_qb, RS, q, do, ldw, qbase, lbase, dbase, tq, tid)
            if PLANES:                          # Q_i, dO_i -> big (in place) + small
                for it in range(SPL):
                    e = tid + NT * it
                    if e < BR * D:
                        r = e // D
                        w = r * RS + (e - r * D)
                        for which in range(2):
                            at = U(bo + (QN if which == 0 else DON) + w)
                            big, small = SPLIT(AS_F32(sm[at]))
                            sm[at] = big
                            sm[U((QSN if which == 0 else DOSN) + w)] = small
                cuda.syncthreads()              # the planes are complete

            # S^T = K_j Q_i^T, dP^T = V_j dO_i^T (from zero; small, small, big per k8 step)
            par = S_DP(sm, krow, vrow, bo + QN, bo + DON, QSN, DOSN, lane, scr, wbase, par,
                       s, dp)

            # P^T = exp2(S^T qscale - L) (L = +inf in padded rows), dS^T = P^T (dP^T - D);
            # element i of n-tile n is key kr0 + 8 (i // 2), query q0 + 8 n + 2 t + (i % 2)
            edge = k0 + BC > tk or (causal != 0 and k0 + BC - 1 > q0 + off)
            P_DS(s, dp, smf, bo + LS, bo + DS, qscale, edge, kr0, tk, tq, causal, q0, off, t)
            if SUMS:                   # row sums of P and dS (the lse and o checks)
                ROW_SUMS(s, dp, psum, dsum, h, q0, tq, g, t)

            # dV_j += P^T dO_i, then dK_j += dS^T Q_i: A = the C tiles of P^T / dS^T split
            # (tile j as (c0, c2, c1, c3): A column t = query 2t, t + 4 = query 2t + 1),
            # B rows read in that order; this block's product from zero, small terms apart
            for which in range(2):             # 0: P^T with dO_i; 1: dS^T with Q_i
                for i in range(SREGS):
                    big, small = SPLIT(s[i] if which == 0 else dp[i])
                    pb[i] = big
                    pl[i] = small
                if which == 1 and WITH_DQ:     # dS (split) -> shared as dS[query][key]
                    for n in range(NS):
                        for i in range(4):
                            sb = ((n * 8 + 2 * t + (i % 2)) * DSS + warp * 16 + g
                                  + 8 * (i // 2))
                            sm[U(DSB + sb)] = pb[4 * n + i]
                            sm[U(DSL + sb)] = pl[4 * n + i]
                bsrc = bo + (DON if which == 0 else QN)
                ssrc = DOSN if which == 0 else QSN
                # (planes: B's big and small planes; else split where read; the small
                # terms in the chain (ONE_CHAIN) or apart): tf32_blocks' P V step
                par = PV_T(sm, bsrc, ssrc, RS, t, g, scr, wbase, lane, par, pb, pl, dva, dka,
                           which)

            if WITH_DQ:
                cuda.syncthreads()             # every warp's dS is in shared memory
                mq = warp % MQ
                nb = (warp // MQ) * NQW
                zero2(dqc, dqe, QREGS)
                for kp in range(KK):
                    # A = dS rows mq*16 + g (+8), keys permuted: column t = key 8kp + 2t,
                    # t + 4 = key 8kp + 2t + 1; B = K_j rows in the same order
                    ab = (mq * 16 + g) * DSS + kp * 8 + 2 * t
                    h0 = sm[U(DSB + ab)]
                    h2 = sm[U(DSB + ab + 1)]
                    h1 = sm[U(DSB + ab + 8 * DSS)]
                    h3 = sm[U(DSB + ab + 8 * DSS + 1)]
                    l0 = sm[U(DSL + ab)]
                    l2 = sm[U(DSL + ab + 1)]
                    l1 = sm[U(DSL + ab + 8 * DSS)]
                    l3 = sm[U(DSL + ab + 8 * DSS + 1)]
                    for n in range(NQW):
                        kb = KNO + (kp * 8 + 2 * t) * RS + (nb + n) * 8 + g
                        b0, sb0 = SPLIT(AS_F32(sm[U(kb)]))
                        b1, sb1 = SPLIT(AS_F32(sm[U(kb + RS)]))
                        if ONE_CHAIN:
                            x0, x1, x2, x3 = dqc[4 * n], dqc[4 * n + 1], dqc[4 * n + 2], \
                                dqc[4 * n + 3]
                        else:
                            x0, x1, x2, x3 = dqe[4 * n], dqe[4 * n + 1], dqe[4 * n + 2], \
                                dqe[4 * n + 3]
                        x0, x1, x2, x3 = MMA(scr, wbase, lane, par, l0, l1, l2, l3, b0, b1,
                                             x0, x1, x2, x3)
                        par = 1 - par
                        x0, x1, x2, x3 = MMA(scr, wbase, lane, par, h0, h1, h2, h3,
                                             sb0, sb1, x0, x1, x2, x3)
                        par = 1 - par
                        if not ONE_CHAIN:
                            dqe[4 * n] = x0
                            dqe[4 * n + 1] = x1
                            dqe[4 * n + 2] = x2
                            dqe[4 * n + 3] = x3
                            x0, x1, x2, x3 = dqc[4 * n], dqc[4 * n + 1], dqc[4 * n + 2], \
                                dqc[4 * n + 3]
                        x0, x1, x2, x3 = MMA(scr, wbase, lane, par, h0, h1, h2, h3, b0, b1,
                                             x0, x1, x2, x3)
                        par = 1 - par
                        dqc[4 * n] = x0
                        dqc[4 * n + 1] = x1
                        dqc[4 * n + 2] = x2
                        dqc[4 * n + 3] = x3
                # (apart: dqc += dqe first; pairs: v2.DQ_RED)
                DQ_STORE(dq, dqc, dqe, qbase, q0, tq, d, mq, nb, g, t, scale)

        # epilogue: dK = scale dS^T Q, dV = P^T dO (fp32)
        STORE(dk, dv, dka, dva, h, kr0, tk, d, t, scale)

    tc_bwd_key_major_tf32.__name__ = (f"tc_bwd_kv_3xtf32_w{NW}_q{BR}_d{D}"
                                      + ("_dq" if WITH_DQ else "")
                                      + ("_sums" if SUMS else "")
                                      + ("_planes" if PLANES else "")
                                      + ("" if ONE_CHAIN else "_apart")
                                      + ("" if RED_V2 or not WITH_DQ else "_red1")
                                      + ("_sim" if SIM else ""))
    return _jit(tc_bwd_key_major_tf32, cfg)


# --------------------------------------------------------------------------------------
# kernel 2: query-major dQ in 3xTF32 (no atomics: deterministic)
# --------------------------------------------------------------------------------------

def make_query_major_tf32_kernel(cfg):
    """The deterministic dQ pass at fp32 accuracy (`tc_backward_kernels`' kernel 2, the
    Triton tutorial's separate dQ loop, on mma.sync m16n8k8 TF32 in 3xTF32).

    One thread block per (query block of 16 x warps rows, head); warp w owns 16 query rows
    and keeps their 16 x D piece of dQ_i in registers across the key blocks j that the rows
    see (causal: up to the diagonal). Q_i, dO_i are copied to shared memory once; K_j, V_j
    (Bc = q_block_k rows) by cp.async into one of two buffers while the block computes on
    the other. Per key block, from zero:

        S  = Q_i K_j^T   (A: Q rows by ldmatrix, split where read; B: K_j rows, k = d)
        dP = dO_i V_j^T
        P  = exp2(S qscale - L),  dS = P o (dP - D)
        dQ_i += dS K_j   (A: the C tiles of dS as (c0, c2, c1, c3), k = the keys permuted
                          as in kernel 1's dV step; B: b0 = K[key 2t][dim g], b1 = key 2t + 1)

    the block's dS K_j starts from zero (three mma per k8 step in one chain) and is added
    to the running dQ_i in fp32, as kernel 1 adds its blocks. S and dP are computed a
    second time (kernel 1 has them too): 3 products x 2 Tq Tk d x 3 mma = 18 Tq Tk d more
    FLOPs on the tensor cores. Shared memory (words, rows padded to D + 4): Q_i, dO_i:
    16 warps x (D + 4) each; two buffers of K_j, V_j: Bc x (D + 4) each
    (`TCBConfig.tf32_q_offsets`)."""
    ops = device_ops(cfg.simulator)
    AS_F32 = ops["as_f32"]
    three = tf32x3_ops(cfg.simulator)
    SPLIT, MMA3 = three["split"], three["mma3"]
    so = smem_ops(cfg.simulator, v2.LINEAR_SHARED)
    LDB, CP16, COMMIT, WAIT = so["ld_b"], so["cp16"], so["commit"], so["wait_all"]
    exp2 = so["ex2"]
    SIM = cfg.simulator
    NW, BC, D, NT = cfg.warps, cfg.q_block_k, cfg.head_dim, cfg.threads
    BRQ = 16 * NW                  # query rows per block
    KT = D // 8                    # k8 steps of S, dP (over d)
    NS = BC // 8                   # n8 tiles of S (16 queries x Bc); k8 steps of dS K_j
    NO = D // 8                    # n8 tiles of dQ (16 queries x D)
    RS = cfg.tf32_row_stride
    QN, DON, KNO, VNO, KVB, _ = cfg.tf32_q_offsets()
    LDR = LD_ROWS
    CH = D // 4                    # 16-byte chunks per row
    OREGS, SREGS = 4 * NO, 4 * NS
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    SHARED = shared_arrays(SIM, SCR)
    COPY_QDO = cp_async_rows(SIM, CP16, BRQ, CH, NT, D, True)["copy"]
    COPY_KV = cp_async_rows(SIM, CP16, BC, CH, NT, D, True)["copy"]
    S_DP = tf32_s_dp(SIM, LDB, RS, KT, NS, False)
    P_DS = query_blocks(SIM, exp2, NS, split=SPLIT)["p_ds"]
    STORE_DQ = key_blocks(SIM, None, None, 0, 0, NO, store_dv=False)["store"]

    def tc_bwd_query_major_tf32(q, k, v, do, ldw, dq, tq, tk, d, qscale, scale, causal,
                                off):
        # q, do (BH, Tq, D), k, v (BH, Tk, D): fp32 bits as uint32 words, flat; ldw: the
        # pre-pass's (2, BH, Tq padded) lse log2(e) / D words, flat; dq (BH, Tq, d) float32
        sm, _, scr, _ = SHARED()     # scr: the simulated mma's scratch
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        par = 0
        h = cuda.blockIdx.y
        q0 = cuda.blockIdx.x * BRQ
        r0 = q0 + warp * 16 + g                  # this lane's rows: r0 and r0 + 8
        tqp = (tq + LDR - 1) // LDR * LDR
        qbase = h * tq
        kbase = h * tk
        lrow = cuda.local.array(2, float32)      # L = lse log2(e) (+inf: P = 0) and D
        drow = cuda.local.array(2, float32)
        for hf in range(2):
            r = r0 + 8 * hf
            lrow[hf] = AS_F32(ldw[U(h * tqp + r)]) if r < tqp else POS_INF
            drow[hf] = AS_F32(ldw[U((cuda.gridDim.y + h) * tqp + r)]) if r < tqp else F0

        kend = tk
        if causal != 0:
            kend = min(tk, q0 + BRQ + off)
        n_kb = (kend + BC - 1) // BC if kend > 0 else 0
        if n_kb > 0:                             # Q_i, dO_i and key block 0, one group
            COPY_QDO(sm, QN, DON, RS, q, do, qbase, q0, tq, tid)
            COPY_KV(sm, KNO, VNO, RS, k, v, kbase, 0, tk, tid)
            COMMIT()

        acc = cuda.local.array(OREGS, float32)   # dQ_i, 16 queries x D: the running sum
        for i in range(OREGS):
            acc[i] = F0
        s = cuda.local.array(SREGS, float32)     # S -> P (16 queries x Bc)
        dp = cuda.local.array(SREGS, float32)    # dP -> dS
        pb = cuda.local.array(SREGS, uint32)     # dS split: big
        pl = cuda.local.array(SREGS, uint32)     # and small
        qrow = U(QN + warp * 16 * RS)            # this warp's 16 rows of Q_i, dO_i
        orow = U(DON + warp * 16 * RS)

        for jb in range(n_kb):
            k0 = jb * BC
            bo = (jb % 2) * KVB                  # this key block's buffer
            WAIT()
            cuda.syncthreads()                  # block jb landed; the other buffer is free
            if jb + 1 < n_kb:                   # key block jb + 1 -> the other buffer
                nb_ = KVB - bo
                COPY_KV(sm, nb_ + KNO, nb_ + VNO, RS, k, v, kbase, k0 + BC, tk, tid)
                COMMIT()

            # S = Q_i K_j^T, dP = dO_i V_j^T (from zero; small, small, big per k8 step)
            par = S_DP(sm, qrow, orow, bo + KNO, bo + VNO, 0, 0, lane, scr, wbase, par, s, dp)

            # P = exp2(S qscale - L), dS = P (dP - D), split; element i of n-tile n is
            # query r0 + 8 (i // 2), key k0 + 8 n + 2 t + (i % 2)
            edge = k0 + BC > tk or (causal != 0 and k0 + BC - 1 > q0 + off)
            P_DS(s, dp, pb, pl, lrow, drow, qscale, edge, k0, r0, tk, tq, causal, off, t)

            # dQ_i += dS K_j: this block's product from zero, then added in fp32
            for n in range(NO):
                c0 = F0
                c1 = F0
                c2 = F0
                c3 = F0
                for j in range(NS):
                    kb = bo + KNO + (j * 8 + 2 * t) * RS + n * 8 + g
                    b0, sb0 = SPLIT(AS_F32(sm[U(kb)]))
                    b1, sb1 = SPLIT(AS_F32(sm[U(kb + RS)]))
                    c0, c1, c2, c3, par = MMA3(
                        scr, wbase, lane, par,
                        pb[4 * j], pb[4 * j + 2], pb[4 * j + 1], pb[4 * j + 3],
                        pl[4 * j], pl[4 * j + 2], pl[4 * j + 1], pl[4 * j + 3],
                        b0, b1, sb0, sb1, c0, c1, c2, c3)
                acc[4 * n] += c0
                acc[4 * n + 1] += c1
                acc[4 * n + 2] += c2
                acc[4 * n + 3] += c3

        STORE_DQ(dq, dq, acc, acc, h, r0, tq, d, t, scale)    # every row inside Tq and d

    tc_bwd_query_major_tf32.__name__ = (f"tc_bwd_q_3xtf32_w{NW}_k{BC}_d{D}"
                                        + ("_sim" if SIM else ""))
    return _jit(tc_bwd_query_major_tf32, cfg)
