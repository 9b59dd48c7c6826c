"""tensor_core_kernels_tf32_planes: version 3 of the 3xTF32 (and TF32) tensor-core forward.

Same maths, work split, accuracy and contract as versions 1 and 2 (`tensor_core_kernels.
make_tf32_kernel`, `tensor_core_kernels_tf32_async`): the same products in the same order,
so the output is the same bit for bit. What changes is who splits K_j and V_j:

  v2 (pipeline="async")   every warp splits every K and V fragment it reads into tf32
                          big and small parts (4 ALU instructions per value): with W
                          warps the block splits each value of K_j, V_j W times, and ncu
                          found version 2 issue-bound (results/h200_tf32_ncu_d128_log.txt).
  v3 (pipeline="planes")  K_j, V_j go global -> shared by `cp.async` as raw fp32 into a
                          staging buffer; once they land, each thread splits the very
                          16-byte chunks it copied into a big plane and a small plane
                          (version 1's layout), issues the copy of block j + 1 into the
                          same chunks, and after a barrier the warps read both planes:
                          each value is split once per block instead of once per warp,
                          and a B fragment costs a second load instead of four ALU
                          instructions. Q stays raw in shared memory, split where it is
                          read (each warp reads only its own 16 rows).

Per key block a warp issues (d = 128, Bc = 32; counted from the loops below): S's K
fragments 2 ldmatrix per 6 mma instead of 1 ldmatrix and 16 ALU; P V's V fragments 4 loads
per 3 mma instead of 2 loads and 8 ALU; plus its share of the block's split (2 Bc D / (32 W)
values per lane, each 1 load, 4 ALU and 2 stores). The price: a second barrier per key block
(the planes are single-buffered: the split waits until every warp is done with block j - 1)
and shared memory for the planes (4 Bc (D + 4) words).

Shared memory (32-bit words, rows padded to D + 4 words, conflict-free fragment reads as in
version 2): Q (Br rows, raw), K_j and V_j raw (staging, Bc rows each), then the planes K big,
K small, V big, V small (Bc rows each). The thread that copies a chunk is the thread that
splits it, so the staging buffer needs no barrier of its own (a thread's cp.async writes
land, after its wait, in program order with its own reads).
"""

from __future__ import annotations

from numba import cuda, float32, uint32
from numba import uint64 as U

from ...constants import F0, NEG_INF
from ..common._device import lane_ids, visible_key_blocks
from ..ptx.mma import SIM_SCRATCH_PER_WARP
from .tensor_core_kernels import _jit
from .tensor_core_kernels_tf32_async import tf32_steps


def make_tf32_planes_kernel(cfg, passes: int):
    st = tf32_steps(cfg, passes, raw=False)    # K_j, V_j from their planes
    ops, so = st["ops"], st["so"]
    AS_F32 = ops["as_f32"]
    CP16, COMMIT, WAIT = so["cp16"], so["commit"], so["wait_all"]
    NW, BR, BC, D, NT = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim, cfg.threads
    NO = D // 8                    # n8 tiles of O
    RS = cfg.k_stride              # row stride of Q, K and V in shared memory (words)
    Q_OFF, K_OFF, V_OFF, KB_OFF, KS_OFF, VB_OFF, VS_OFF, _ = cfg.tf32_planes_offsets()
    CH = D // 4                    # 16-byte chunks per row
    KV_LOADS = -(-(BC * CH) // NT)
    THREE = passes == 3
    # the planes' split (`mma.split_tf32`): big rounded on the bits (2 instructions where
    # cvt.rna.tf32 takes 3), small truncated (1); one-pass TF32 keeps cvt.rna.tf32
    BIG = ops["tf32_round"] if THREE else ops["to_tf32"]
    SMALL = ops["tf32_trunc"]
    OREGS, SREGS = 4 * NO, 4 * (BC // 8)
    SIM = cfg.simulator
    SHARED, block_of, MASK, SOFTMAX, STORE = st["shared"], st["block_of"], st["mask"], \
        st["softmax"], st["store"]
    QK, SPLIT_P, PV, COPY_Q, COPY_KV = st["qk"], st["split_p"], st["pv"], st["copy_q"], \
        st["copy_kv"]

    def tc_tf32_forward_planes(q, k, v, o, lse, tq, tk, qscale, causal, off):
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
            WAIT()                     # this thread's chunks of block jb (and Q) landed
            cuda.syncthreads()         # every warp is done with block jb - 1's planes
            # split this thread's own chunks of the staging buffer into the planes, then
            # reuse those chunks for block jb + 1 (the same thread: no barrier needed)
            more = jb + 1 < n_kb
            k1 = k0 + BC
            for it in range(KV_LOADS):
                e = tid + NT * it
                if e < BC * CH:
                    r = e // CH
                    c = (e - r * CH) * 4
                    w = r * RS + c
                    for i in range(4):
                        x = AS_F32(sm[U(K_OFF + w + i)])
                        big = BIG(x)
                        sm[U(KB_OFF + w + i)] = big
                        if THREE:
                            sm[U(KS_OFF + w + i)] = SMALL(x - AS_F32(big))
                        x = AS_F32(sm[U(V_OFF + w + i)])
                        big = BIG(x)
                        sm[U(VB_OFF + w + i)] = big
                        if THREE:
                            sm[U(VS_OFF + w + i)] = SMALL(x - AS_F32(big))
                    if more:
                        key = k1 + r
                        ok = key < tk
                        gi = U(kbase + (key if ok else 0)) * U(D) + U(c)
                        CP16(sm, U(K_OFF + w), k, gi, 16 if ok else 0)
                        CP16(sm, U(V_OFF + w), v, gi, 16 if ok else 0)
            COMMIT()
            cuda.syncthreads()         # the planes of block jb are written

            # S = Q K^T. ldmatrix.x4 of Q at (rows 0-7 | 8-15) x (words 0-3 | 4-7) gives
            # A registers (a0, a2, a1, a3); of K (rows n..n+7 | n+8..n+15) the B
            # registers (b0, b1) of two n8 tiles.
            par = QK(sm, qrow, KB_OFF, KS_OFF, lane, scr, wbase, par, s, neg)

            sc = MASK(s, k0, tk, causal, q0, off, r0, t, qsc)   # scaled, then masked
            m0, m1, l0, l1 = SOFTMAX(s, acc, m0, m1, l0, l1, sc, red, tid)

            # O += P V, as version 1 (keys permuted inside each k8 step; this block's
            # P V from zero, big and small terms apart, added to O in fp32)
            SPLIT_P(s, pb, pl)
            par = PV(sm, VB_OFF, VS_OFF, RS, t, g, scr, wbase, lane, par, pb, pl, acc, acc, 0)

        STORE(o, lse, acc, m0, m1, l0, l1, h, r0, r1, tq, t, red, tid)

    tc_tf32_forward_planes.__name__ = (f"tc_{cfg.precision}_planes_w{NW}_k{BC}_d{D}"
                                      + ("_sim" if SIM else ""))
    return _jit(tc_tf32_forward_planes, cfg)
