"""tensor_core_kernels_tf32_async: version 2 of the 3xTF32 (and TF32) tensor-core forward.

Same maths, work split, accuracy and contract as `tensor_core_kernels.make_tf32_kernel`
(whose header explains the big/small split and why each key block's P V starts from zero
and is added to O in fp32): it computes the same products in the same order, so its
output is the same bit for bit. What changes is where the operands live:

  v1 (prefetch=True)    Q's fragments, split into big and small, stay in registers for
                        the whole key loop (2 x 4 x d/8 registers: 128 at d = 128), and
                        the next K/V block is staged in registers (another 2 x Bc d /
                        threads), then split into big/small planes in shared memory.
                        At d = 128 that is more than the 255 registers a thread has:
                        the compiler spills, and the kernel ran at 0.6x PyTorch's
                        3xTF32 (benchmarks/NOTES_tensor_core.md).
  v2 (pipeline="async") Q, K_j and V_j go global -> shared with `cp.async` as raw fp32
                        (no registers held, K/V double-buffered: block j + 1 copies
                        while block j computes). Each fragment is split into big and
                        small where it is read: Q's and K's fragments by `ldmatrix.x4`
                        (an 8 x 8 tile of 16-bit values is an 8 x 4 tile of 32-bit ones:
                        lane l receives row l // 4, word l % 4, which is the (g, t) of
                        a tf32 A or B fragment), V's by two 32-bit loads. The split
                        costs ALU instructions per value and warp: with cvt.rna.tf32
                        twice, seven in SASS, and ncu found the d = 128 kernel issue-
                        bound (11 instructions per mma, the integer ALU pipe the busiest
                        at 53%: results/h200_tf32_ncu_d128_log.txt); `mma.split_tf32`'s
                        bit rounding (four) ran it 1.2x faster, to 0.95-1.03x PyTorch's
                        efficient fp32 (results/h200_tf32_split_ab_log.txt).

Shared memory (32-bit words, every row padded to D + 4 words so that a warp's 8 x 4
fragment reads fall in 32 different banks): Q (Br rows), then 2 buffers of K_j and V_j
(Bc rows each).
"""

from __future__ import annotations

from numba import cuda, float32, uint32
from numba import uint64 as U

from ...constants import F0, NEG_INF
from ..common._device import lane_ids, query_block_order, shared_arrays, visible_key_blocks
from ..common.tc_blocks import cp_async_rows, epilogue_blocks, softmax_blocks, tf32_blocks
from ..ptx.mma import SIM_SCRATCH_PER_WARP, device_ops
from ..ptx.smem_ops import ops as smem_ops
from .tensor_core_kernels import _jit, _row_ops


def make_tf32_async_kernel(cfg, passes: int):
    ops = device_ops(cfg.simulator)
    AS_F32 = ops["as_f32"]
    so = smem_ops(cfg.simulator)
    LDB, CP16, COMMIT, WAIT = so["ld_b"], so["cp16"], so["commit"], so["wait_all"]
    exp2, log2, quad_max, quad_sum = _row_ops(cfg)
    NW, BR, BC, D, NT = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim, cfg.threads
    KT = D // 8                    # k8 steps of S
    NS = BC // 8                   # n8 tiles of S (BC is a multiple of 16: pairs)
    NO = D // 8                    # n8 tiles of O; k8 steps of P V = NS
    RS = cfg.k_stride              # row stride of Q, K and V in shared memory (words)
    Q_OFF, K_OFF, V_OFF, BUF, _ = cfg.tf32_async_offsets()
    CH = D // 4                    # 16-byte chunks per row
    THREE = passes == 3
    # the 3xTF32 split (`mma.split_tf32`): big rounded on the bits (2 instructions where
    # cvt.rna.tf32 takes 3), small truncated (1); one-pass TF32 keeps cvt.rna.tf32
    BIG = ops["tf32_round"] if THREE else ops["to_tf32"]
    SMALL = ops["tf32_trunc"]
    OREGS, SREGS = 4 * NO, 4 * NS
    SIM = cfg.simulator
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    RED = NT if SIM else 1
    SHARED = shared_arrays(SIM, SCR, RED)
    block_of = query_block_order()   # _device.CAUSAL_ORDER
    smx = softmax_blocks(SIM, exp2, quad_max, 1, NS, NO, BC)
    MASK, SOFTMAX = smx["mask"], smx["pair"]
    STORE = epilogue_blocks(SIM, log2, quad_sum, 1, NO)["pair"]
    tb = tf32_blocks(SIM, passes, NS, NO)
    COPY_Q = cp_async_rows(SIM, CP16, BR, CH, NT, D, False)["copy"]
    COPY_KV = cp_async_rows(SIM, CP16, BC, CH, NT, D, True)["copy"]
    SPLIT4, CHAIN_INTO, SPLIT_P = tb["split4"], tb["chain_into"], tb["split_p"]
    CHAIN_APART = tb["chain_apart"]

    def tc_tf32_forward_async(q, k, v, o, lse, tq, tk, qscale, causal, off):
        # q, k, v: the fp32 bits as uint32 words, FLAT (1-D): one unsigned index per copy
        sm, _, scr, red = SHARED()   # (scr, red: the simulator's scratch)
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        bx, h = block_of(causal)       # causal: heaviest query blocks first
        q0 = bx * BR
        r0 = q0 + warp * 16 + g
        r1 = r0 + 8
        par = 0
        neg = qscale < F0              # a negative scale: negate q (exact), use |scale|
        qsc = -qscale if neg else qscale
        kbase = h * tk

        # Q (rows past Tq: zeros) and key block 0 -> shared, one group in flight
        COPY_Q(sm, Q_OFF, Q_OFF, RS, q, q, h * tq, q0, tq, tid)
        n_kb = visible_key_blocks(tk, causal, q0 + BR + off, BC)
        if n_kb > 0:
            COPY_KV(sm, K_OFF, V_OFF, RS, k, v, kbase, 0, tk, tid)
        COMMIT()

        acc = cuda.local.array(OREGS, float32)
        s = cuda.local.array(SREGS, float32)
        pb = cuda.local.array(SREGS, uint32)   # P split into tf32 big and small parts
        pl = cuda.local.array(SREGS, uint32)
        for i in range(OREGS):
            acc[i] = F0
        m0 = NEG_INF
        m1 = NEG_INF
        l0 = F0
        l1 = F0
        qrow = U(Q_OFF + warp * 16 * RS)

        for jb in range(n_kb):
            k0 = jb * BC
            bo = (jb % 2) * BUF
            WAIT()
            cuda.syncthreads()         # block jb (and Q) landed; the other buffer is free
            if jb + 1 < n_kb:
                k1 = k0 + BC
                nb = BUF - bo
                COPY_KV(sm, nb + K_OFF, nb + V_OFF, RS, k, v, kbase, k1, tk, tid)
                COMMIT()

            # S = Q K^T. ldmatrix.x4 of Q at (rows 0-7 | 8-15) x (words 0-3 | 4-7) gives
            # A registers (a0, a2, a1, a3); of K (rows n..n+7 | n+8..n+15) the B
            # registers (b0, b1) of two n8 tiles.
            for i in range(SREGS):
                s[i] = F0
            for kk in range(KT):
                w0, w2, w1, w3 = LDB(sm, qrow + U(kk * 8), RS, lane)
                a0, a1, a2, a3, e0, e1, e2, e3 = SPLIT4(w0, w1, w2, w3, neg)
                for n2 in range(NS // 2):
                    k0w, k1w, k2w, k3w = LDB(sm, U(bo + K_OFF + (n2 * 16) * RS + kk * 8),
                                             RS, lane)
                    for half in range(2):
                        n = 2 * n2 + half
                        y0 = AS_F32(k0w if half == 0 else k2w)
                        y1 = AS_F32(k1w if half == 0 else k3w)
                        b0 = BIG(y0)
                        b1 = BIG(y1)
                        par = CHAIN_INTO(
                            scr, wbase, lane, par, a0, a1, a2, a3, e0, e1, e2, e3, b0, b1,
                            SMALL(y0 - AS_F32(b0)), SMALL(y1 - AS_F32(b1)),
                            s, 4 * n)

            sc = MASK(s, k0, tk, causal, q0, off, r0, t, qsc)   # scaled, then masked
            m0, m1, l0, l1 = SOFTMAX(s, acc, m0, m1, l0, l1, sc, red, tid)

            # O += P V, as version 1 (keys permuted inside each k8 step; this block's
            # P V from zero, big and small terms apart, added to O in fp32)
            SPLIT_P(s, pb, pl)
            for n in range(NO):
                c0 = F0
                c1 = F0
                c2 = F0
                c3 = F0
                f0 = F0
                f1 = F0
                f2 = F0
                f3 = F0
                for j in range(NS):
                    vb = bo + V_OFF + (j * 8 + 2 * t) * RS + n * 8 + g
                    y0 = AS_F32(sm[U(vb)])
                    y1 = AS_F32(sm[U(vb + RS)])
                    b0 = BIG(y0)
                    b1 = BIG(y1)
                    c0, c1, c2, c3, f0, f1, f2, f3, par = CHAIN_APART(
                        scr, wbase, lane, par, pb[4 * j], pb[4 * j + 2], pb[4 * j + 1],
                        pb[4 * j + 3], pl[4 * j], pl[4 * j + 2], pl[4 * j + 1], pl[4 * j + 3],
                        b0, b1, SMALL(y0 - AS_F32(b0)), SMALL(y1 - AS_F32(b1)),
                        c0, c1, c2, c3, f0, f1, f2, f3)
                acc[4 * n] += c0 + f0
                acc[4 * n + 1] += c1 + f1
                acc[4 * n + 2] += c2 + f2
                acc[4 * n + 3] += c3 + f3

        STORE(o, lse, acc, m0, m1, l0, l1, h, r0, r1, tq, t, red, tid)

    tc_tf32_forward_async.__name__ = (f"tc_{cfg.precision}_async_w{NW}_k{BC}_d{D}"
                                      + ("_sim" if SIM else ""))
    return _jit(tc_tf32_forward_async, cfg)
