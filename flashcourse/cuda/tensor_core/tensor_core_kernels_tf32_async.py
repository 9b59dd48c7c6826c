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
from ..common._device import (inlined, lane_ids, query_block_order, shared_arrays,
                              visible_key_blocks)
from ..common.tc_blocks import cp_async_rows, epilogue_blocks, softmax_blocks, tf32_blocks
from ..ptx.mma import SIM_SCRATCH_PER_WARP, device_ops
from ..ptx.smem_ops import ops as smem_ops
from .tensor_core_kernels import _jit, _row_ops


def tf32_steps(cfg, passes: int, raw: bool) -> dict:
    """The device steps that versions 2 and 3 of the 3xTF32 (passes 3) or TF32 (passes 1)
    forward are built from, for cfg's tiles (`tc_blocks`): "shared", "block_of" (the
    causal order), "mask", "softmax" (one 16-row tile, its two rows' state in scalars),
    "store" (the epilogue), "qk", "split_p", "pv" (`tf32_blocks`; raw: K_j, V_j split
    where read, version 2; else read from their big and small planes, version 3),
    "copy_q", "copy_kv" (cp.async rows); and the ops "so" (`smem_ops`), "ops"
    (`mma.device_ops`)."""
    ops = device_ops(cfg.simulator)
    so = smem_ops(cfg.simulator)
    exp2, log2, quad_max, quad_sum = _row_ops(cfg)
    SIM, NW, BR, BC, D, NT = cfg.simulator, cfg.warps, cfg.block_q, cfg.block_k, \
        cfg.head_dim, cfg.threads
    NS, NO, CH = BC // 8, D // 8, D // 4
    smx = softmax_blocks(SIM, exp2, quad_max, 1, NS, NO, BC)
    tb = tf32_blocks(SIM, passes, NS, NO, raw=raw, ldb=so["ld_b"], kt=D // 8, rs=cfg.k_stride)
    return {"shared": shared_arrays(SIM, SIM_SCRATCH_PER_WARP * NW, NT),
            "block_of": query_block_order(),              # _device.CAUSAL_ORDER
            "mask": smx["mask"], "softmax": smx["pair"],
            "store": epilogue_blocks(SIM, log2, quad_sum, 1, NO)["pair"],
            "qk": tb["qk"], "split_p": tb["split_p"], "pv": tb["pv"],
            "copy_q": cp_async_rows(SIM, so["cp16"], BR, CH, NT, D, False)["copy"],
            "copy_kv": cp_async_rows(SIM, so["cp16"], BC, CH, NT, D, True)["copy"],
            "so": so, "ops": ops}


def make_tf32_async_kernel(cfg, passes: int):
    st = tf32_steps(cfg, passes, raw=True)     # K_j, V_j split where read
    COMMIT, WAIT = st["so"]["commit"], st["so"]["wait_all"]
    BC = cfg.block_k
    RS = cfg.k_stride              # row stride of Q, K and V in shared memory (words)
    Q_OFF, K_OFF, V_OFF, BUF, _ = cfg.tf32_async_offsets()
    COPY_KV = st["copy_kv"]

    @inlined
    def stage(sm, k, v, jb, n_kb, k0, kbase, tk, tid):
        # K_j, V_j raw in buffer jb % 2 (their small parts: split where read); block
        # jb + 1 copies into the other buffer while this one computes
        bo = (jb % 2) * BUF
        WAIT()
        cuda.syncthreads()         # block jb (and Q) landed; the other buffer is free
        if jb + 1 < n_kb:
            k1 = k0 + BC
            nb = BUF - bo
            COPY_KV(sm, nb + K_OFF, nb + V_OFF, RS, k, v, kbase, k1, tk, tid)
            COMMIT()
        return bo + K_OFF, 0, bo + V_OFF, 0

    return tf32_forward_kernel(cfg, st, (Q_OFF, K_OFF, V_OFF), stage, "async")


def tf32_forward_kernel(cfg, st, offsets, stage, version: str):
    """The kernel of versions 2 and 3 (`tf32_steps` st): all but what the versions differ
    in, `stage` (sm, k, v, jb, n_kb, k0, kbase, tk, tid) -> (K_j's word offset, its small
    plane's, V_j's, its small plane's): the device step that waits for key block jb, starts
    block jb + 1's copy and says where K_j and V_j are read from. offsets: (Q_OFF, K_OFF,
    V_OFF), where Q and key block 0 are copied; version: "async" or "planes" (its name)."""
    COMMIT = st["so"]["commit"]
    NW, BR, BC, D = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim
    NO = D // 8                    # n8 tiles of O
    RS = cfg.k_stride              # row stride of Q, K and V in shared memory (words)
    Q_OFF, K_OFF, V_OFF = offsets
    OREGS, SREGS = 4 * NO, 4 * (BC // 8)
    SIM = cfg.simulator
    SHARED, block_of, MASK, SOFTMAX, STORE = st["shared"], st["block_of"], st["mask"], \
        st["softmax"], st["store"]
    QK, SPLIT_P, PV, COPY_Q, COPY_KV = st["qk"], st["split_p"], st["pv"], st["copy_q"], \
        st["copy_kv"]
    STAGE = stage

    def tc_tf32_forward(q, k, v, o, lse, tq, tk, qscale, causal, off):
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
            kb, ks, vb, vs = STAGE(sm, k, v, jb, n_kb, k0, kbase, tk, tid)

            # S = Q K^T. ldmatrix.x4 of Q at (rows 0-7 | 8-15) x (words 0-3 | 4-7) gives
            # A registers (a0, a2, a1, a3); of K (rows n..n+7 | n+8..n+15) the B
            # registers (b0, b1) of two n8 tiles.
            par = QK(sm, qrow, kb, ks, lane, scr, wbase, par, s, neg)

            sc = MASK(s, k0, tk, causal, q0, off, r0, t, qsc)   # scaled, then masked
            m0, m1, l0, l1 = SOFTMAX(s, acc, m0, m1, l0, l1, sc, red, tid)

            # O += P V, as version 1 (keys permuted inside each k8 step; this block's
            # P V from zero, big and small terms apart, added to O in fp32)
            SPLIT_P(s, pb, pl)
            par = PV(sm, vb, vs, RS, t, g, scr, wbase, lane, par, pb, pl, acc, acc, 0)

        STORE(o, lse, acc, m0, m1, l0, l1, h, r0, r1, tq, t, red, tid)

    tc_tf32_forward.__name__ = (f"tc_{cfg.precision}_{version}_w{NW}_k{BC}_d{D}"
                                + ("_sim" if SIM else ""))
    return _jit(tc_tf32_forward, cfg)
