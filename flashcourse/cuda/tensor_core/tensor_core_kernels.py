"""tensor_core_kernels: FlashAttention-2 forward on tensor cores (mma.sync), from Numba.

Two kernels side by side, one per input precision (building blocks in `mma.py`; the
host side, configurations and the registry entry in `host.py`):

    half   fp16 or bf16 q, k, v. S = Q K^T and O += P V on m16n8k16 tensor-core tiles
           with fp32 accumulation; the online softmax in fp32 registers; P rounded to
           the input type before the P V product; o in the input type, lse in fp32.
    tf32x3 fp32 q, k, v at fp32-level accuracy: each operand x is split into a tf32
           "big" part and a tf32 "small" remainder (x ~= big + small to ~2^-21 |x|,
           `mma.split_tf32`) and each product takes three m16n8k8 tf32 mma: small*big +
           big*small + big*big (the small*small term, ~2^-22, is dropped). `passes=1` keeps only
           big*big: plain TF32 (~1e-3 relative error), for the notebook's comparison.

The idea (FlashAttention-2 "split-Q")
    One thread block per (query block of Br = 16 x m_tiles x warps rows, head); each
    warp owns 16 (m_tiles = 2: 32) query rows for the whole key loop, so no two warps
    ever need each other's softmax statistics. Per key block (Bc rows of K and V):
      1. the block loads K_j and V_j cooperatively into shared memory (rows padded so
         that the fragment reads hit 32 different banks); V is stored transposed
         (fp16/bf16, two keys per 32-bit word) or pre-split into big/small (fp32);
      2. each warp computes its 16 x Bc tile of S with Q's fragments kept in registers
         for the whole loop (for fp32 split into big/small once, at the start);
      3. online softmax on the accumulator fragments: each row lives in the 4 lanes
         of a quad, so the row max and sum take two warp shuffles;
      4. P = exp2(S scale log2(e) - m) stays in registers: the C layout of two m16n8
         accumulator tiles IS the A layout of one m16n8k16 tile (see
         `mma.p_as_a_operand`), so P feeds O += P V without touching shared memory.
    Causal key blocks entirely above the diagonal are never visited; the diagonal
    and ragged blocks are masked element by element.

Any finite scale (SCALE: 0, negative, tiny)
    The scale multiplies S inside the exponent, exp2(S qscale - m): one FMA, so an
    unmasked tile pays nothing for it. Two cases need care. A negative scale would
    turn the row max of S into the min of the scaled scores: the kernel negates q once,
    as it loads Q's fragments (exact: only the sign bits change), and uses |scale|. A
    masked score must be -inf after scaling, and -inf x 0 is NaN, -inf x (-1) is +inf:
    a tile that needs a mask (the ragged last one, those on the causal diagonal) scales
    its scores first, then writes -inf where masked, and uses a scale of 1 for the rest
    of the tile. Unmasked tiles run the same instructions as with a positive scale.

The bytes it moves (one head, no causal skipping; e bytes per element: 2 or 4)
    reads Q once (Tq d e), K and V once per query block (2 Tk d e Tq/Br, mostly from
    L2), writes O (Tq d e) and lse (Tq 4 B).

Variants (compile-time knobs of `tensor_core.TCConfig`)
    warps, block_k (Bc); m_tiles (16-row tiles per warp, 1 or 2: with 2 each K/V
    fragment read from shared memory feeds two mma); prefetch (load the next K/V block
    into registers right after the barrier, so its global-memory latency hides behind
    this block's mma work, instead of loading after the barrier with nothing to overlap);
    min_blocks (launch bounds: ask the compiler to fit that many blocks per SM).

Expected cost and what limits it
    4 Tq Tk d FLOPs on tensor cores (x3 for 3xTF32) plus Tq Tk exponentials on the
    special-function units (16 per m16n8k16 mma pair at d = 64). An H200's mma.sync
    reached ~369 TFLOP/s (fp16, a loop of independent mma). Measured on an H200 (N = 4096,
    d = 64, B x H = 32, benchmarks/results/h200_tensor_core.json): without prefetch the
    warps of a block stall together on each K/V load (35-45 TFLOP/s fp16); with it,
    127 TFLOP/s (8 warps, Bc = 32, 2 blocks per SM); 3xTF32 22 -> 44. PyTorch's flash
    kernel (fp16) ran at 274 and cuDNN at 413 in the same run: they also use ldmatrix,
    multi-stage cp.async pipelines and, on Hopper, wgmma and TMA, which this Numba code
    does not emit.

How to run it
    from flashcourse.cuda import forward
    o, lse = forward(q16, k16, v16, kernel="tensor_core", causal=True)   # float16 in/out
    o, lse = forward(q, k, v, kernel="tensor_core", precision="bf16")    # float32 in/out
    o, lse = forward(q, k, v, kernel="tensor_core")                      # fp32: 3xTF32
    python benchmarks/gpu_tensor_core.py --check --bench                 # on a GPU
Without a GPU the same kernels run on Numba's CUDA simulator (tiny sizes only): each
mma becomes a fragment exchange through shared memory (`mma.device_ops`).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, uint32
from numba import uint64 as U

from ...constants import F0, FULL_MASK, NEG_INF
from ...geometry import ceil_div
from ..common._device import exp2_log2, ir_inlined, lane_ids, reset_state, visible_key_blocks
from ..common.tc_blocks import (epilogue_blocks, half_blocks, half_ops, mma_into, pack_a,
                                pair_copy, pair_store, softmax_blocks, tf32_blocks)
from ..ptx.mma import SIM_SCRATCH_PER_WARP, device_ops

Z32 = np.uint32(0)
SIGN2 = np.uint32(0x80008000)      # the sign bits of both 16-bit halves of a word


@ir_inlined
def b_words(sm, w):
    """(sm[w], sm[w + 4]): a thread's two 32-bit words b0, b1 of an mma B fragment whose
    row lies along shared memory from word w (the column of b1 is b0's + 4 words)."""
    return sm[U(w)], sm[U(w + 4)]


def _jit(fn, cfg):
    """cuda.jit, with launch bounds (threads, min_blocks) when min_blocks is set (GPU)."""
    if cfg.min_blocks and not cfg.simulator:
        return cuda.jit(fn, launch_bounds=(cfg.threads, cfg.min_blocks))
    return cuda.jit(fn)


def _row_ops(cfg):
    """exp2/log2 and the quad reductions (warp shuffles on a GPU, shared scratch in the
    simulator, which has no shuffles)."""
    SIM = cfg.simulator
    exp2, log2 = exp2_log2(SIM)
    if SIM:
        @cuda.jit(device=True)
        def quad_max(x, red, tid):
            red[tid] = x
            cuda.syncthreads()
            b = tid - tid % 4
            r = max(max(red[b], red[b + 1]), max(red[b + 2], red[b + 3]))
            cuda.syncthreads()
            return r

        @cuda.jit(device=True)
        def quad_sum(x, red, tid):
            red[tid] = x
            cuda.syncthreads()
            b = tid - tid % 4
            r = (red[b] + red[b + 1]) + (red[b + 2] + red[b + 3])
            cuda.syncthreads()
            return r
    else:
        @cuda.jit(device=True, forceinline=True)
        def quad_max(x, red, tid):
            x = max(x, cuda.shfl_xor_sync(FULL_MASK, x, 1))
            return max(x, cuda.shfl_xor_sync(FULL_MASK, x, 2))

        @cuda.jit(device=True, forceinline=True)
        def quad_sum(x, red, tid):
            x += cuda.shfl_xor_sync(FULL_MASK, x, 1)
            return x + cuda.shfl_xor_sync(FULL_MASK, x, 2)
    return exp2, log2, quad_max, quad_sum


# --------------------------------------------------------------------------------------
# kernel 1: fp16 / bf16 (m16n8k16)
# --------------------------------------------------------------------------------------

def _pv_ldmatrix(MMA, PACK, LDBT, simulator: bool):
    """O += P V for one key block, with V's B fragments by ldmatrix.x4.trans of the
    row-major V tile in shared memory: the step of every fp16/bf16 kernel that keeps V as
    it arrives (version 2 of the forward, the decode split kernel on tensor cores).

    pv(sm, v_at, ks, lane, scr, wbase, par, s, pa, acc, kp_n, mt_n, ns, no) -> par: P from
    the fp32 S fragments `s` (mt_n m16 tiles of ns n8 tiles) packed into `pa` (A
    fragments), V's rows of ks words from word v_at, kp_n k16 steps, no n8 tiles of O in
    `acc`. Inlined on a GPU (forceinline), a plain device function on the simulator."""
    jit = cuda.jit(device=True) if simulator else cuda.jit(device=True, forceinline=True)
    MMA_INTO = mma_into(simulator, MMA)
    PACK4 = pack_a(simulator, PACK)

    @jit
    def pv(sm, v_at, ks, lane, scr, wbase, par, s, pa, acc, kp_n, mt_n, ns, no):
        for kp in range(kp_n):
            for mt in range(mt_n):
                PACK4(pa, 4 * mt, s, 4 * (mt * ns + 2 * kp))
            for n2 in range(no // 2):
                n = 2 * n2
                b0, b1, b2, b3 = LDBT(sm, U(v_at + (kp * 16) * ks + n * 4), ks, lane)
                for mt in range(mt_n):
                    ob = 4 * (mt * no + n)
                    par = MMA_INTO(scr, wbase, lane, par, pa[4 * mt], pa[4 * mt + 1],
                                   pa[4 * mt + 2], pa[4 * mt + 3], b0, b1, acc, ob)
                    par = MMA_INTO(scr, wbase, lane, par, pa[4 * mt], pa[4 * mt + 1],
                                   pa[4 * mt + 2], pa[4 * mt + 3], b2, b3, acc, ob + 4)
        return par

    return pv


def make_half_kernel(cfg):
    MMA, MMA_INTO, PACK = half_ops(cfg.simulator, cfg.precision)
    exp2, log2, quad_max, quad_sum = _row_ops(cfg)
    NW, BR, BC, D, NT = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim, cfg.threads
    MT = cfg.m_tiles               # 16-row tiles per warp
    PREFETCH = cfg.prefetch
    DW = D // 2                    # 32-bit words per row of q, k, v, o
    KT = D // 16                   # k16 steps of S = Q K^T
    NS = BC // 8                   # n8 tiles of S (per m-tile: 16 x Bc)
    NO = D // 8                    # n8 tiles of O (per m-tile: 16 x D)
    KP = BC // 16                  # k16 steps of O += P V
    KS, VS = cfg.k_stride, cfg.v_stride
    K_OFF, V_OFF, _ = cfg.offsets()
    K_LOADS = ceil_div(BC * DW, NT)          # K words per thread per key block
    V_LOADS = ceil_div((BC // 2) * DW, NT)   # V word pairs per thread per key block
    QREGS, OREGS, SREGS = 4 * KT * MT, 4 * NO * MT, 4 * NS * MT   # register array lengths
    ROWS = 2 * MT                  # query rows per lane
    PK = K_LOADS if PREFETCH else 1
    PV = V_LOADS if PREFETCH else 1
    PAREGS = 4 * MT
    SIM = cfg.simulator
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    RED = NT if SIM else 1
    smx = softmax_blocks(SIM, exp2, quad_max, MT, NS, NO, BC)
    MASK, ROW_MAX, ROW_EXP = smx["mask"], smx["row_max"], smx["row_exp"]
    STORE = epilogue_blocks(SIM, log2, quad_sum, MT, NO, PACK)["half"]
    LOAD_Q = half_blocks(SIM, MMA, None, MT, KT, NS)["load_q"]
    PUT_V = pair_store(SIM, -1, 0, V_OFF, VS)     # V_j -> Vt[dim][key pair]
    COPY_V = pair_copy(SIM, V_LOADS, BC // 2, DW, NT, PUT_V)
    PACK4 = pack_a(SIM, PACK)

    def tc_half_forward(q, k, v, o, lse, tq, tk, qscale, causal, off):
        sm = cuda.shared.array(0, uint32)
        scr = cuda.shared.array(SCR, float32)     # simulator only: fragment exchange
        red = cuda.shared.array(RED, float32)     # simulator only: quad reductions
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        h = cuda.blockIdx.y
        q0 = cuda.blockIdx.x * BR
        wrow = q0 + warp * 16 * MT + g   # row of (m-tile mt, half hf): wrow + 16 mt + 8 hf
        par = 0                        # simulator scratch buffer parity
        # a negative scale: negate q (exact, the sign bits) and use |scale| (see SCALE)
        qsign = SIGN2 if qscale < F0 else Z32
        qsc = -qscale if qscale < F0 else qscale

        # Q fragments (A operand of S), kept in registers: reads Br*d*e bytes once
        qa = cuda.local.array(QREGS, uint32)
        LOAD_Q(q, qa, h, wrow, tq, t, qsign)

        acc = cuda.local.array(OREGS, float32)   # O accumulator fragments, 16 MT x D
        s = cuda.local.array(SREGS, float32)     # S / P fragments, 16 MT x Bc
        m = cuda.local.array(ROWS, float32)      # running max per row (log2 units)
        lp = cuda.local.array(ROWS, float32)     # this lane's part of the running row sums
        alpha = cuda.local.array(ROWS, float32)
        mu = cuda.local.array(ROWS, float32)
        pa = cuda.local.array(PAREGS, uint32)    # P as A fragments of one k16 step
        pk = cuda.local.array(PK, uint32)        # prefetched K words (next key block)
        pv0 = cuda.local.array(PV, uint32)       # prefetched V words, even and odd keys
        pv1 = cuda.local.array(PV, uint32)
        reset_state(acc, OREGS, m, lp, ROWS)

        n_kb = visible_key_blocks(tk, causal, q0 + BR + off, BC)

        # global -> registers for key block `jb` (K rows k0.., V key pairs)
        for it in range(K_LOADS if PREFETCH else 0):
            e = tid + NT * it
            r = e // DW
            c = e - r * DW
            pk[it] = k[U(h), U(r), U(c)] if (e < BC * DW and r < tk and n_kb > 0) else Z32
        for it in range(V_LOADS if PREFETCH else 0):
            e = tid + NT * it
            rp = e // DW
            c = e - rp * DW
            ok = e < (BC // 2) * DW and n_kb > 0
            pv0[it] = v[U(h), U(2 * rp), U(c)] if (ok and 2 * rp < tk) else Z32
            pv1[it] = v[U(h), U(2 * rp + 1), U(c)] if (ok and 2 * rp + 1 < tk) else Z32

        for jb in range(n_kb):
            k0 = jb * BC
            cuda.syncthreads()         # every warp is done with the previous K, V
            if not PREFETCH:           # global -> shared directly (latency exposed)
                for it in range(K_LOADS):
                    e = tid + NT * it
                    if e < BC * DW:
                        r = e // DW
                        c = e - r * DW
                        w = k[U(h), U(k0 + r), U(c)] if k0 + r < tk else Z32
                        sm[U(K_OFF + r * KS + c)] = w
                COPY_V(sm, v, v, h, k0, tk, tid)    # V_j -> Vt[dim][key pair]
            else:
                # registers -> shared: K_j -> Ks[key][word]; V_j -> Vt[dim][key pair], two
                # keys' words re-paired into two dims' words (so P V's B reads are 32-bit)
                for it in range(K_LOADS):
                    e = tid + NT * it
                    if e < BC * DW:
                        r = e // DW
                        sm[U(K_OFF + r * KS + e - r * DW)] = pk[it]
                for it in range(V_LOADS):
                    e = tid + NT * it
                    if e < (BC // 2) * DW:
                        rp = e // DW
                        c = e - rp * DW
                        PUT_V(sm, rp, c, pv0[it], pv1[it])
            cuda.syncthreads()
            if PREFETCH:               # next key block: global -> registers, in flight
                k1 = k0 + BC           # while the tensor cores work on this one
                more = jb + 1 < n_kb
                for it in range(K_LOADS):
                    e = tid + NT * it
                    r = e // DW
                    c = e - r * DW
                    if more and e < BC * DW and k1 + r < tk:
                        pk[it] = k[U(h), U(k1 + r), U(c)]
                    else:
                        pk[it] = Z32
                for it in range(V_LOADS):
                    e = tid + NT * it
                    rp = e // DW
                    c = e - rp * DW
                    key = k1 + 2 * rp
                    ok = more and e < (BC // 2) * DW
                    pv0[it] = v[U(h), U(key), U(c)] if (ok and key < tk) else Z32
                    pv1[it] = v[U(h), U(key + 1), U(c)] if (ok and key + 1 < tk) else Z32

            # S = Q K^T: each K fragment read once from shared memory feeds MT mma
            for i in range(SREGS):
                s[i] = F0
            for kk in range(KT):
                for n in range(NS):
                    b0, b1 = b_words(sm, K_OFF + (n * 8 + g) * KS + kk * 8 + t)
                    for mt in range(MT):
                        qb = 4 * (mt * KT + kk)
                        sb = 4 * (mt * NS + n)
                        par = MMA_INTO(scr, wbase, lane, par, qa[qb], qa[qb + 1], qa[qb + 2],
                                       qa[qb + 3], b0, b1, s, sb)

            # mask the ragged last key block and the blocks on the causal diagonal: there
            # the scores are scaled first, so a masked -inf never meets the scale (SCALE)
            sc = MASK(s, k0, tk, causal, q0, off, wrow, t, qsc)
            # online softmax; row (mt, hf) holds s[4 (mt NS + n) + 2 hf + {0, 1}]
            ROW_MAX(s, m, mu, alpha, sc, red, tid)
            ROW_EXP(s, acc, mu, alpha, lp, sc, True)

            # O += P V: P's accumulator fragments are the A fragments (rounded to 16 bit)
            for kp in range(KP):
                for mt in range(MT):       # S tiles 2kp, 2kp + 1 -> the A fragment of step kp
                    PACK4(pa, 4 * mt, s, 4 * (mt * NS + 2 * kp))
                for n in range(NO):
                    b0, b1 = b_words(sm, V_OFF + (n * 8 + g) * VS + kp * 8 + t)
                    for mt in range(MT):
                        ob = 4 * (mt * NO + n)
                        par = MMA_INTO(scr, wbase, lane, par, pa[4 * mt], pa[4 * mt + 1],
                                       pa[4 * mt + 2], pa[4 * mt + 3], b0, b1, acc, ob)

        # epilogue: l = sum over the quad; O = acc / l packed to 16 bit; lse
        STORE(o, lse, acc, m, lp, h, wrow, tq, t, red, tid)

    tc_half_forward.__name__ = (f"tc_{cfg.precision}_w{NW}_k{BC}_d{D}_m{MT}"
                                + ("_pf" if PREFETCH else "") + ("_sim" if SIM else ""))
    return _jit(tc_half_forward, cfg)


# --------------------------------------------------------------------------------------
# kernel 2: fp32 through 3xTF32 (or 1xTF32), m16n8k8
# --------------------------------------------------------------------------------------

def make_tf32_kernel(cfg, passes: int):
    ops = device_ops(cfg.simulator)
    AS_F32 = ops["as_f32"]
    exp2, log2, quad_max, quad_sum = _row_ops(cfg)
    NW, BR, BC, D, NT = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim, cfg.threads
    KT = D // 8                    # k8 steps of S
    NS = BC // 8                   # n8 tiles of S
    NO = D // 8                    # n8 tiles of O; k8 steps of P V = NS
    KS, VS = cfg.k_stride, cfg.v_stride
    K_OFF, V_OFF, _ = cfg.offsets()
    KW = BC * KS                   # words of one K plane (big or small)
    VW = BC * VS
    KV_LOADS = ceil_div(BC * D, NT)
    THREE = passes == 3
    # the 3xTF32 split (`mma.split_tf32`): big rounded on the bits (2 instructions where
    # cvt.rna.tf32 takes 3), small truncated (1); one-pass TF32 keeps cvt.rna.tf32
    BIG = ops["tf32_round"] if THREE else ops["to_tf32"]
    SMALL = ops["tf32_trunc"]
    PREFETCH = cfg.prefetch
    PKV = KV_LOADS if PREFETCH else 1
    QREGS, OREGS, SREGS = 4 * KT, 4 * NO, 4 * NS     # register array lengths
    SIM = cfg.simulator
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    RED = NT if SIM else 1
    smx = softmax_blocks(SIM, exp2, quad_max, 1, NS, NO, BC)
    MASK, SOFTMAX = smx["mask"], smx["pair"]
    STORE = epilogue_blocks(SIM, log2, quad_sum, 1, NO)["pair"]
    tb = tf32_blocks(SIM, passes, NS, NO)
    CHAIN_INTO, SPLIT_P, PV = tb["chain_into"], tb["split_p"], tb["pv"]

    def tc_tf32_forward(q, k, v, o, lse, tq, tk, qscale, causal, off):
        sm = cuda.shared.array(0, uint32)
        scr = cuda.shared.array(SCR, float32)
        red = cuda.shared.array(RED, float32)
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        h = cuda.blockIdx.y
        q0 = cuda.blockIdx.x * BR
        r0 = q0 + warp * 16 + g
        r1 = r0 + 8
        par = 0
        neg = qscale < F0              # a negative scale: negate q (exact), use |scale|
        qsc = -qscale if neg else qscale

        # Q fragments (tf32 A layout: cols t and t + 4 of each k8 step), split once
        qb = cuda.local.array(QREGS, uint32)
        qs = cuda.local.array(QREGS, uint32)
        for kk in range(KT):
            for i in range(4):
                row = r0 if i % 2 == 0 else r1
                col = kk * 8 + t + 4 * (i // 2)
                x = q[U(h), U(row), U(col)] if row < tq else F0
                x = -x if neg else x
                big = BIG(x)
                qb[4 * kk + i] = big
                qs[4 * kk + i] = SMALL(x - AS_F32(big))

        acc = cuda.local.array(OREGS, float32)
        s = cuda.local.array(SREGS, float32)
        pb = cuda.local.array(SREGS, uint32)   # P split into tf32 big and small parts
        pl = cuda.local.array(SREGS, uint32)
        pkx = cuda.local.array(PKV, float32)   # K_j, V_j elements staged in registers
        pvx = cuda.local.array(PKV, float32)
        for i in range(4 * NO):
            acc[i] = F0
        m0 = NEG_INF
        m1 = NEG_INF
        l0 = F0
        l1 = F0

        n_kb = visible_key_blocks(tk, causal, q0 + BR + off, BC)

        # global -> registers for the first key block
        for it in range(KV_LOADS if PREFETCH else 0):
            e = tid + NT * it
            r = e // D
            c = e - r * D
            ok = e < BC * D and r < tk and n_kb > 0
            pkx[it] = k[U(h), U(r), U(c)] if ok else F0
            pvx[it] = v[U(h), U(r), U(c)] if ok else F0

        for jb in range(n_kb):
            k0 = jb * BC
            cuda.syncthreads()
            # K_j, V_j -> shared (from registers when prefetched), split into tf32
            # big / small planes
            for it in range(KV_LOADS):
                e = tid + NT * it
                if e < BC * D:
                    r = e // D
                    c = e - r * D
                    if PREFETCH:
                        kx = pkx[it]
                        vx = pvx[it]
                    else:
                        ok = k0 + r < tk
                        kx = k[U(h), U(k0 + r), U(c)] if ok else F0
                        vx = v[U(h), U(k0 + r), U(c)] if ok else F0
                    kbig = BIG(kx)
                    vbig = BIG(vx)
                    sm[U(K_OFF + r * KS + c)] = kbig
                    sm[U(V_OFF + r * VS + c)] = vbig
                    if THREE:
                        sm[U(K_OFF + KW + r * KS + c)] = SMALL(kx - AS_F32(kbig))
                        sm[U(V_OFF + VW + r * VS + c)] = SMALL(vx - AS_F32(vbig))
            cuda.syncthreads()
            if PREFETCH:               # next key block in flight during the mma work
                k1 = k0 + BC
                more = jb + 1 < n_kb
                for it in range(KV_LOADS):
                    e = tid + NT * it
                    r = e // D
                    c = e - r * D
                    ok = more and e < BC * D and k1 + r < tk
                    pkx[it] = k[U(h), U(k1 + r), U(c)] if ok else F0
                    pvx[it] = v[U(h), U(k1 + r), U(c)] if ok else F0

            # S = Q K^T
            for i in range(4 * NS):
                s[i] = F0
            for kk in range(KT):
                for n in range(NS):
                    kb = K_OFF + (n * 8 + g) * KS + kk * 8 + t
                    b0, b1 = b_words(sm, kb)
                    f0 = b0                    # (one pass: no small terms)
                    f1 = b1
                    if THREE:
                        f0 = sm[U(kb + KW)]
                        f1 = sm[U(kb + KW + 4)]
                    par = CHAIN_INTO(
                        scr, wbase, lane, par, qb[4 * kk], qb[4 * kk + 1], qb[4 * kk + 2],
                        qb[4 * kk + 3], qs[4 * kk], qs[4 * kk + 1], qs[4 * kk + 2],
                        qs[4 * kk + 3], b0, b1, f0, f1,
                        s, 4 * n)

            sc = MASK(s, k0, tk, causal, q0, off, r0, t, qsc)   # scaled, then masked
            m0, m1, l0, l1 = SOFTMAX(s, acc, m0, m1, l0, l1, sc, red, tid)

            # O += P V. The k index is permuted inside each k8 step (A col t <-> key 2t,
            # col t + 4 <-> key 2t + 1, the same for V's rows) so that P's accumulator
            # fragment of S tile j is the A fragment of k8 step j without moving data.
            # Accuracy: a tensor core adds into its accumulator at about fp32 precision but
            # not as IEEE round-to-nearest (it truncates; Fasi et al. 2021), so a running O
            # kept in the accumulator across all Tk / Bc key blocks gathered an error that
            # grew with Tk (1.2e-4 at Tk = 16,384). This key block's P V therefore starts
            # from zero, its small terms (x 2^-11) in accumulators of their own, and is added
            # to O with ordinary fp32 adds (round to nearest), as CUTLASS's 3xTF32 does.
            SPLIT_P(s, pb, pl)
            par = PV(sm, V_OFF, V_OFF + VW, VS, t, g, scr, wbase, lane, par, pb, pl, acc, acc,
                     0)

        STORE(o, lse, acc, m0, m1, l0, l1, h, r0, r1, tq, t, red, tid)

    tc_tf32_forward.__name__ = (f"tc_{cfg.precision}_w{NW}_k{BC}_d{D}"
                                + ("_pf" if PREFETCH else "") + ("_sim" if SIM else ""))
    return _jit(tc_tf32_forward, cfg)
