"""backward_kernels: FlashAttention's backward on Hopper's warpgroup tensor cores (wgmma).

Version 1 ("wgmma"): the key-major backward of `gradients/tc_backward_kernels.py` (same
maths, same contract, same D pre-pass and dQ by atomics), its five products moved from
mma.sync to `wgmma.mma_async` (`ptx/wgmma.py`). A CUDA block owns Bc = 64 x W keys of
one head (warpgroup w: keys 64 w .. 64 w + 63) and walks the query blocks of Br = 64 rows
that see them; per query block:

    S^T  = K_w Q_i^T     (64 keys x Br)   SS: K_w and Q_i from shared memory, both K-major
    dP^T = V_w dO_i^T    (64 keys x Br)   SS: V_w and dO_i
    P^T  = exp2(S^T scale log2(e) - L)    L = lse log2(e) of each query (a column here):
                                          the pre-pass's, +inf past Tq (P = 0 there)
    dS^T = P^T o (dP^T - D) scale          D = rowsum(dO o O) of each query (the pre-pass)
    dV  += P^T dO_i      (64 keys x d)    RS: P^T from registers (the accumulator layout
                                          is the A fragment's, as P is in the forward),
                                          dO_i read MN-major (d contiguous)
    dK  += dS^T Q_i      (64 keys x d)    RS: dS^T from registers, Q_i read MN-major
    dQ_i += dS K         (Br x d / W)     SS: dS written to shared memory (queries x keys,
                                          K-major), K read MN-major; warpgroup w takes
                                          columns w d / W .. (w + 1) d / W of d over all
                                          Bc keys, then adds its tile to dQ in global
                                          memory (red.global.add.f32): several key blocks
                                          add to the same dQ rows

One stored copy serves both reads of Q_i, dO_i and K: every tile is kept in the forward's
no-swizzle K-major layout (core matrices of 8 rows x 16 bytes of d, `kmajor_copier`), and
a descriptor reads the same core matrices MN-major by exchanging what its two strides step
over (LBO = 16 D bytes: the next 8 rows, now the K direction; SBO = 128: the next 8 of
d, now N). No transposed copy, as on mma.sync with ldmatrix.trans.

Asynchrony: none yet (each group of products waited for at once; the warpgroups of a block
overlap one another). What FlashAttention-3's backward adds (TMA, a producer warpgroup,
dQ accumulated by TMA reduce-add, register budgets by setmaxnreg) is the next version's.
dK and dV leave in float32 (the host casts); the column sums of P and dS for the checked
call (`sums`) are added by atomics like dQ.
"""

from __future__ import annotations

from numba import cuda, float32, uint16, uint32
from numba import uint64 as U

from ...constants import F0, FULL_MASK
from ...gpu import using_simulator
from ..common._device import inlined
from ..common.tc_blocks import pack_a
from ..ptx import wgmma
from ..ptx.mma import device_ops
from ..ptx.smem_ops import intrinsics as smem_intrinsics
from ..ptx.smem_ops import ops as smem_ops
from .hopper_kernels import DESC_UNIT, kmajor_copier

#: query rows per block of the loop (the N of S^T's products; the M of dQ's)
BLOCK_Q = 64
#: keys per warpgroup (the M of S^T's, dP^T's, dV's and dK's products)
WG_KEYS = 64


def desc_fields(lbo: int, sbo: int):
    """A descriptor's stride fields (bytes), to OR with the start address >> 4."""
    return U((lbo // DESC_UNIT) << 16) | (U(sbo // DESC_UNIT) << U(32))


def layout(D: int, warpgroups: int) -> dict:
    """Byte offsets of the block's shared memory: K, V (Bc x D), Q, dO (Br x D), dS (Br x
    Bc, 16-bit), L and D (Br float32 each), and the total."""
    bc, br = WG_KEYS * warpgroups, BLOCK_Q
    off = {"K": 0, "V": 2 * bc * D, "Q": 4 * bc * D, "DO": 4 * bc * D + 2 * br * D}
    off["DS"] = off["DO"] + 2 * br * D
    off["L"] = off["DS"] + 2 * br * bc
    off["D"] = off["L"] + 4 * br
    off["END"] = off["D"] + 4 * br
    return off


def make_backward_kernel(precision: str, D: int, warpgroups: int, sums: bool):
    """The key-major kernel for fp16/bf16, head dim D (a multiple of 16, at most 128),
    `warpgroups` (1 or 2) warpgroups of 64 keys each; sums: also add the column sums of
    P and dS (the checked call)."""
    SIM = using_simulator()
    kind = "f16" if precision == "fp16" else "bf16"
    W, BR, BC = warpgroups, BLOCK_Q, WG_KEYS * warpgroups
    NT = 128 * W
    NQ = D // W                          # columns of dQ per warpgroup
    CH = D // 8                          # 16-byte chunks per row of a tile
    KT = D // 16                         # k16 steps over d (S^T, dP^T)
    KQ = BR // 16                        # k16 steps over queries (dV, dK)
    KK = BC // 16                        # k16 steps over keys (dQ)
    SREGS, OREGS, QREGS = BR // 2, D // 2, NQ // 2
    PREGS = BR // 4
    NS = BR // 8                         # n8 tiles of S^T per warp
    off = layout(D, W)
    K_OFF, V_OFF, Q_OFF, DO_OFF = off["K"], off["V"], off["Q"], off["DO"]
    DS_OFF, L_OFF, DD_OFF = off["DS"], off["L"], off["D"]
    ROW_BYTES = 2 * D
    DESC_KM = desc_fields(128, 16 * D)       # a row tile read K-major (K = d)
    DESC_MN = desc_fields(16 * D, 128)       # the same tile read MN-major (K = rows)
    DESC_DS = desc_fields(128, 16 * BC)      # dS: rows = queries, K = keys
    STEP_D = U(256 // DESC_UNIT)             # 16 of d along a K-major row: 2 core matrices
    STEP_ROWS = U(32 * D // DESC_UNIT)       # 16 rows of a tile read MN-major
    WG_ROWS = U(2 * WG_KEYS * D)             # bytes of one warpgroup's 64 rows of K or V

    MMA_S = wgmma.mma_ss(BR, kind)
    MMA_G = wgmma.mma_rs(D, kind, 1)         # dV, dK: B read MN-major
    MMA_Q = wgmma.mma_ss(NQ, kind, 1)        # dQ: A = dS (K-major), B = K read MN-major
    FENCE, WCOMMIT, PROXY = (wgmma.bare(x) for x in (wgmma.FENCE, wgmma.COMMIT,
                                                      wgmma.PROXY_FENCE))
    WAIT_S, WAIT_G, WAIT_Q = (wgmma.tie(n, wgmma.WAIT0) for n in (SREGS, OREGS, QREGS))
    FENCE_G = wgmma.tie(OREGS, wgmma.FENCE)
    PIN = wgmma.tie(PREGS, "", True)
    PACK = device_ops(SIM)["pack_fp16" if precision == "fp16" else "pack_bf16"]
    so = smem_ops(SIM)
    exp2, RED, COMMIT, WAIT = so["ex2"], so["red_add"], so["commit"], so["wait_all"]
    ins = smem_intrinsics()
    CPR, GADDR, SADDR = ins["cp_async16_raw"], ins["global_address"], ins["shared_address"]
    copy_kv = kmajor_copier(BC, CH, NT, CPR)
    copy_q = kmajor_copier(BR, CH, NT, CPR)
    SUMS = bool(sums)

    pack4 = pack_a(SIM, PACK)

    @inlined
    def pack(x, words):
        # the accumulator's values (rows: this warp's keys, columns: queries) as A
        # fragments of 16-bit pairs, one k16 step (16 queries) per 4 words
        for kp in range(KQ):
            pack4(words, 4 * kp, x, 8 * kp)

    @inlined
    def column_sums(x, out, h, q0, t, g, tq):
        # out[h, q] += sum over this block's keys of x (columns: queries)
        for n in range(NS):
            for c in range(2):
                v = x[4 * n + c] + x[4 * n + 2 + c]
                v += cuda.shfl_xor_sync(FULL_MASK, v, 4)
                v += cuda.shfl_xor_sync(FULL_MASK, v, 8)
                v += cuda.shfl_xor_sync(FULL_MASK, v, 16)
                q = q0 + 8 * n + 2 * t + c
                if g == 0 and q < tq:
                    RED(out, U(h * tq + q), v)

    def hopper_backward(q, k, v, do, ld, dq, dk, dv, tq, tk, d, scale_log2, scale,
                        causal, off_diag, psum, dsum):
        # q, do flat uint32 words (BH Tq D/2), k, v (BH Tk D/2); ld (2, BH, Tq padded):
        # lse log2(e) and D; dq flat float32 (BH Tq d), zeroed by the pre-pass; dk, dv
        # (BH, Tk, d) float32; psum, dsum flat float32 (BH Tq) when SUMS
        sm = cuda.shared.array(0, uint32, alignment=16)
        smf = cuda.shared.array(0, float32)
        sm16 = cuda.shared.array(0, uint16)
        tid = cuda.threadIdx.x
        wg = tid // 128
        warp = (tid // 32) % 4
        lane = tid % 32
        g, t = lane // 4, lane % 4
        h = cuda.blockIdx.y
        k0 = cuda.blockIdx.x * BC
        key0 = 64 * wg + 16 * warp + g             # this thread's keys: key0, key0 + 8
        base = U(SADDR(sm, 0))
        gk = GADDR(k, 0) + U(h * tk) * U(ROW_BYTES)
        gv = GADDR(v, 0) + U(h * tk) * U(ROW_BYTES)
        gq = GADDR(q, 0) + U(h * tq) * U(ROW_BYTES)
        gdo = GADDR(do, 0) + U(h * tq) * U(ROW_BYTES)
        copy_kv(base + U(K_OFF), gk + U(k0) * U(ROW_BYTES), ROW_BYTES, tk - k0, tid, 0)
        copy_kv(base + U(V_OFF), gv + U(k0) * U(ROW_BYTES), ROW_BYTES, tk - k0, tid, 0)
        COMMIT()
        desc_k = ((base + U(K_OFF) + U(wg) * WG_ROWS) >> U(4)) | DESC_KM
        desc_v = ((base + U(V_OFF) + U(wg) * WG_ROWS) >> U(4)) | DESC_KM
        desc_q = ((base + U(Q_OFF)) >> U(4)) | DESC_KM
        desc_do = ((base + U(DO_OFF)) >> U(4)) | DESC_KM
        desc_qt = ((base + U(Q_OFF)) >> U(4)) | DESC_MN
        desc_dot = ((base + U(DO_OFF)) >> U(4)) | DESC_MN
        desc_ds = ((base + U(DS_OFF)) >> U(4)) | DESC_DS
        desc_kt = ((base + U(K_OFF) + U(wg * NQ * 16)) >> U(4)) | DESC_MN

        s = cuda.local.array(SREGS, float32)
        dp = cuda.local.array(SREGS, float32)
        pa = cuda.local.array(PREGS, uint32)
        pds = cuda.local.array(PREGS, uint32)
        acc_k = cuda.local.array(OREGS, float32)
        acc_v = cuda.local.array(OREGS, float32)
        acc_q = cuda.local.array(QREGS, float32)
        for i in range(OREGS):
            acc_k[i] = F0
            acc_v[i] = F0

        first = 0
        if causal != 0 and k0 - off_diag > 0:
            first = (k0 - off_diag) // BR               # the first block that sees k0
        for qb in range(first, (tq + BR - 1) // BR):
            q0 = qb * BR
            cuda.syncthreads()                          # the previous block's reads done
            copy_q(base + U(Q_OFF), gq + U(q0) * U(ROW_BYTES), ROW_BYTES, tq - q0, tid, 0)
            copy_q(base + U(DO_OFF), gdo + U(q0) * U(ROW_BYTES), ROW_BYTES, tq - q0, tid, 0)
            COMMIT()
            if tid < BR:
                smf[L_OFF // 4 + tid] = ld[0, h, q0 + tid]
                smf[DD_OFF // 4 + tid] = ld[1, h, q0 + tid]
            WAIT()
            PROXY()
            cuda.syncthreads()

            # S^T = K_w Q_i^T and dP^T = V_w dO_i^T: KT wgmma each
            FENCE()
            for kk in range(KT):
                MMA_S(s, desc_k + U(kk) * STEP_D, desc_q + U(kk) * STEP_D, 1 if kk > 0 else 0)
            for kk in range(KT):
                MMA_S(dp, desc_v + U(kk) * STEP_D, desc_do + U(kk) * STEP_D,
                      1 if kk > 0 else 0)
            WCOMMIT()
            WAIT_S(s)
            WAIT_S(dp)

            # P^T and dS^T in place (columns: queries q0 + 8 n + 2 t + c)
            for n in range(NS):
                for i in range(4):
                    qc = 8 * n + 2 * t + (i % 2)
                    key = k0 + key0 + 8 * (i // 2)
                    j = 4 * n + i
                    p = exp2(s[j] * scale_log2 - smf[L_OFF // 4 + qc])
                    if key >= tk or (causal != 0 and key > q0 + qc + off_diag):
                        p = F0                  # (a key past Tk: its K row was zeros)
                    s[j] = p
                    dp[j] = p * (dp[j] - smf[DD_OFF // 4 + qc])
            if SUMS:
                column_sums(s, psum, h, q0, t, g, tq)
                column_sums(dp, dsum, h, q0, t, g, tq)
            for j in range(SREGS):
                dp[j] *= scale
            pack(s, pa)
            pack(dp, pds)

            # dV += P^T dO_i, dK += dS^T Q_i: A from registers, B read MN-major
            PIN(pa)
            PIN(pds)
            FENCE_G(acc_v)
            FENCE_G(acc_k)
            for kp in range(KQ):
                MMA_G(acc_v, pa[4 * kp], pa[4 * kp + 1], pa[4 * kp + 2], pa[4 * kp + 3],
                      desc_dot + U(kp) * STEP_ROWS, 1)
            for kp in range(KQ):
                MMA_G(acc_k, pds[4 * kp], pds[4 * kp + 1], pds[4 * kp + 2], pds[4 * kp + 3],
                      desc_qt + U(kp) * STEP_ROWS, 1)
            WCOMMIT()
            WAIT_G(acc_v)
            WAIT_G(acc_k)
            PIN(pa)
            PIN(pds)

            # dS to shared memory, queries x keys (K-major over keys), one 16-bit value
            # at a time: element (query qc, key kl) at core matrix (qc / 8, kl / 8)
            for kp in range(KQ):
                for m in range(4):
                    w = pds[4 * kp + m]
                    for hf in range(2):
                        qc = 16 * kp + 8 * (m // 2) + 2 * t + hf
                        kl = key0 + 8 * (m % 2)
                        byte = (DS_OFF + ((qc // 8) * (BC // 8) + kl // 8) * 128
                                + (qc % 8) * 16 + (kl % 8) * 2)
                        sm16[byte // 2] = uint16((w >> (16 * hf)) & 0xFFFF)
            PROXY()
            cuda.syncthreads()

            # dQ_i (columns of this warpgroup) = dS K over the block's Bc keys
            FENCE()
            for kk in range(KK):
                MMA_Q(acc_q, desc_ds + U(kk) * STEP_D, desc_kt + U(kk) * STEP_ROWS,
                      1 if kk > 0 else 0)
            WCOMMIT()
            WAIT_Q(acc_q)
            for n in range(NQ // 8):
                for i in range(4):
                    row = q0 + 16 * warp + g + 8 * (i // 2)
                    col = wg * NQ + 8 * n + 2 * t + (i % 2)
                    if row < tq and col < d:
                        RED(dq, U(h * tq + row) * U(d) + U(col), acc_q[4 * n + i])

        WAIT()                  # a block that saw no query block: K, V's copies still due
        for n in range(D // 8):
            for i in range(4):
                key = k0 + key0 + 8 * (i // 2)
                col = 8 * n + 2 * t + (i % 2)
                if key < tk and col < d:
                    dk[h, key, col] = acc_k[4 * n + i]
                    dv[h, key, col] = acc_v[4 * n + i]

    hopper_backward.__name__ = hopper_backward.__qualname__ = (
        f"hopper_backward_{precision}_wg{W}_d{D}" + ("_sums" if SUMS else ""))
    return cuda.jit(hopper_backward) if SIM else cuda.jit(hopper_backward,
                                                           launch_bounds=(NT, 1))
