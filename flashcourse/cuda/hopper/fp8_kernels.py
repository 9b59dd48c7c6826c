"""fp8_kernels: FlashAttention's forward with FP8 (e4m3) Q, K and V on Hopper's wgmma.

Version 1 of the FP8 forward ("serial", as `hopper_kernels`' version 1, whose header says
how a warpgroup owns 64 query rows and why the products are waited for at once):

    S = Q K_j^T    d / 32 instructions m64n{Bc}k32.f32.e4m3.e4m3, Q and K_j K-major in
                   shared memory (the same core matrices as the 16-bit kernel: 8 rows of
                   16 bytes, now 16 codes a row instead of 8 values)
    softmax        in fp32 on the accumulator: S times the softmax scale and the two
                   dequantisation scales (Q's for this warpgroup's rows, K's for this key
                   block), the running max m, P~ = 2^8 exp(S - m) (FlashAttention-3's
                   offset, `fp8.attention` says why), the row sums of the fp32 P~
    P -> FP8       each lane rounds its own 64 values of P~ to e4m3 (`cvt.rn.satfinite`)
                   and packs them, four to a register, by `fp8_layouts.P_SOURCES`
    O += P V_j     Bc / 32 instructions m64n{D}k32 with A = P from registers and B = V_j^T
                   K-major: V transposed once per call by `make_transpose`, its keys in
                   `fp8_layouts.KEY_ORDER` inside every 32 so that the lanes' own P values
                   line up (no bytes move between lanes)
    V's scale      one per key block (or per head): O is kept in units of the current
                   block's V scale, and the rescale that the running max needs anyway
                   also multiplies by sv_{j-1} / sv_j; the epilogue multiplies by the last
                   one and divides by l.

Scales: q_scale per block of `qblk` query rows, k_scale and v_scale per block of `kblk`
keys (`fp8.scaling`'s "block" scheme; a whole head is one block when the scheme is "head"
or "tensor"). qblk is a multiple of 64 (a warpgroup's rows share one scale) and kblk a
multiple of Bc (a key block shares one): the host checks both.

Bytes moved: half the 16-bit kernel's for Q, K, V (plus V's transpose: one read and one
write of V per call). FLOPs as the 16-bit kernel; FP8 wgmma's rate is twice fp16's
(H100 SXM datasheet: 1,979 against 989 dense TFLOP/s).
"""

from __future__ import annotations

import math

from numba import cuda, float32, uint32
from numba import uint64 as U

from ...constants import F0, FULL_MASK, LN2_F, NEG_INF
from ...gpu import using_simulator
from ..common._device import inlined, ir_inlined, shfl_xor, visible_key_blocks
from ..ptx import wgmma
from ..ptx.fp8 import encode_word_hw, encode_word_sw
from ..ptx.mma import device_ops
from ..ptx.smem_ops import intrinsics as smem_intrinsics
from ..ptx.smem_ops import ops as smem_ops
from .fp8_layouts import K_STEP, P_SOURCES
from .hopper_kernels import (block_rows, kmajor_copier, pipeline_steps, softmax_step,
                             state_arrays, wgmma_products)

#: 16-byte units in a descriptor's fields; FlashAttention-3's FP8 offset: P~ <= 2^8
DESC_UNIT, P_LIFT = 16, 8.0
#: the transposer's threads per block (one block: 32 keys x D of one head)
TRANSPOSE_THREADS = 256


#: True on Numba's CUDA simulator: the kernels are built from the twins of the intrinsics
SIM = using_simulator()
#: a device function inlined into the kernel on a GPU (a plain one on the simulator)
_inl = inlined


def make_transpose(D: int):
    """Kernel (v, vt, tk, kp): v (BH x Tk x D codes as flat uint32 words) -> vt (BH x D x
    kp codes, flat words) with vt[h, n, 32 c + k] = v[h, 32 c + KEY_ORDER[k], n] and zeros
    past Tk (`fp8_layouts.transpose_v` is its model). Grid (kp / 32, BH), 256 threads:
    each block stages 32 keys x D codes in shared memory (coalesced words in), then writes
    D rows of 8 words (coalesced words out). Runs on the simulator too."""
    if D % 4:
        raise ValueError(f"D must be a multiple of 4, got {D}")
    DW = D // 4                 # words per key row of v
    SW = DW + 1                 # shared words per key row: padded, so the 32 keys of one
    #                             column word fall in 32 different banks when read
    WORDS = K_STEP * DW         # words of one block (32 keys x D codes)
    SWORDS = K_STEP * SW        # its shared array (a constant: the GPU compiler needs one)
    NT = TRANSPOSE_THREADS

    @cuda.jit(device=True)              # (no forceinline: the simulator runs this kernel)
    def key_of(k):
        # KEY_ORDER[k] (k < 32) by arithmetic: 2t + (b % 2) + 8 (b // 2) + 16 (k // 16)
        # with t = (k % 16) // 4, b = k % 4 (tests check it against fp8_layouts)
        c = k % 16
        return 16 * (k // 16) + 2 * (c // 4) + (c % 4) % 2 + 8 * ((c % 4) // 2)

    def transpose_v(v, vt, tk, kp):
        sm = cuda.shared.array(SWORDS, uint32)
        tid = cuda.threadIdx.x
        c = cuda.blockIdx.x
        h = cuda.blockIdx.y
        for e in range(tid, WORDS, NT):
            key = c * K_STEP + e // DW
            sm[(e // DW) * SW + e % DW] = (v[(h * tk + key) * DW + e % DW] if key < tk
                                           else uint32(0))
        cuda.syncthreads()
        for e in range(tid, D * 8, NT):
            n = e // 8
            kw = e % 8
            word = uint32(0)
            for b in range(4):
                key = key_of(4 * kw + b)
                byte = (sm[key * SW + n // 4] >> uint32(8 * (n % 4))) & uint32(0xFF)
                word |= byte << uint32(8 * b)
            vt[(h * D + n) * (kp // 4) + c * 8 + kw] = word

    transpose_v.__name__ = transpose_v.__qualname__ = f"fp8_transpose_v_d{D}"
    return cuda.jit(transpose_v)


class _Parts:
    """Sizes, descriptors, intrinsics and device functions of one `fp8.Fp8Config`."""

    def __init__(self, cfg):
        self.cfg = cfg
        PACK16 = device_ops(SIM)["pack_fp16"]
        PACK8 = encode_word_sw if SIM else encode_word_hw()
        so = smem_ops(SIM)
        exp2 = so["ex2"]
        self.COMMIT, self.WAIT = so["commit"], so["wait_all"]
        self.NT, self.BR, self.BC, self.D = cfg.threads, cfg.block_q, cfg.block_k, cfg.head_dim
        BR, BC, D = self.BR, self.BC, self.D
        CH = D // 16                     # 16-byte chunks per row of Q and K (codes)
        CHV = BC // 16                   # chunks per row of V^T (keys)
        self.KT = D // K_STEP            # k32 steps of S = Q K^T
        self.KP = BC // K_STEP           # k32 steps of O += P V
        NS, NO = BC // 8, D // 8         # n8 tiles of S and of O per warp
        self.SREGS, self.OREGS = SREGS, OREGS = BC // 2, D // 2
        self.PREGS = PREGS = BC // 8     # P as FP8 A fragments: 4 words per k32 step
        self.Q_OFF, self.K_OFF, self.V_OFF, self.BUF, self.END = cfg.offsets()
        self.DESC_KM = U((128 // DESC_UNIT) << 16) | (U(8 * D // DESC_UNIT) << U(32))
        self.DESC_VT = U((128 // DESC_UNIT) << 16) | (U(8 * BC // DESC_UNIT) << U(32))
        self.KSTEP = U(256 // DESC_UNIT)  # 32 codes along K: two core matrices, 256 B
        self.WG_Q = U(64 * D)             # bytes of 64 rows of Q
        self.MMA_S = wgmma.mma_ss(BC, "e4m3")
        self.MMA_O = wgmma.mma_rs(D, "e4m3", 0)
        self.FENCE_O = wgmma.tie(OREGS, wgmma.FENCE)
        self.WAIT_S = wgmma.tie(SREGS, wgmma.WAIT0)
        self.WAIT_O = wgmma.tie(OREGS, wgmma.WAIT0)
        self.PIN_P = wgmma.tie(PREGS, "", True)
        self.FENCE = wgmma.bare(wgmma.FENCE)
        self.WCOMMIT = wgmma.bare(wgmma.COMMIT)
        self.PROXY = wgmma.bare(wgmma.PROXY_FENCE)
        LIFT = float32(P_LIFT)
        log2 = math.log2
        S0, S1, S2, S3 = P_SOURCES

        ins = smem_intrinsics()
        CPR = ins["cp_async16_raw"]
        self.GADDR = ins["global_address"]
        self.SADDR = ins["shared_address"]

        def kmajor_loader(ROWS, CHN, THREADS):
            copy = kmajor_copier(ROWS, CHN, THREADS, CPR)

            @_inl
            def load(saddr, gaddr, row_bytes, nvalid, tid):
                copy(saddr, gaddr, row_bytes, nvalid, tid, 0)
            return load

        # S (raw sums of code products) -> P~ = 2^8 exp2(S sc - m) in place
        scores_to_p = softmax_step(NS, BC, exp2, False, False, False, P_LIFT)

        @_inl
        def rescale_and_pack(acc, alpha, vratio, s, pa):
            # O *= alpha sv_{j-1} / sv_j per row; P~ -> e4m3 A fragments (P_SOURCES order)
            for hf in range(2):
                f = alpha[hf] * vratio
                for n in range(NO):
                    acc[4 * n + 2 * hf] *= f
                    acc[4 * n + 2 * hf + 1] *= f
            for kp in range(BC // K_STEP):
                b = 16 * kp
                pa[4 * kp] = PACK8(s[b + S0[0]], s[b + S0[1]], s[b + S0[2]], s[b + S0[3]])
                pa[4 * kp + 1] = PACK8(s[b + S1[0]], s[b + S1[1]], s[b + S1[2]],
                                       s[b + S1[3]])
                pa[4 * kp + 2] = PACK8(s[b + S2[0]], s[b + S2[1]], s[b + S2[2]],
                                       s[b + S2[3]])
                pa[4 * kp + 3] = PACK8(s[b + S3[0]], s[b + S3[1]], s[b + S3[2]],
                                       s[b + S3[3]])

        @_inl
        def epilogue(acc, m, lp, sv, o, lse, h, row0, t, tq):
            # O = acc sv / l (fp16), lse = ln(l 2^-8) + m ln 2
            for hf in range(2):
                lt = lp[hf]
                lt += cuda.shfl_xor_sync(FULL_MASK, lt, 1)
                lt += cuda.shfl_xor_sync(FULL_MASK, lt, 2)
                inv = sv / lt if lt != F0 else F0
                row = row0 + 8 * hf
                if row < tq:
                    for n in range(NO):
                        ob = 4 * n + 2 * hf
                        o[U(h), U(row), U(n * 4 + t)] = PACK16(acc[ob] * inv,
                                                               acc[ob + 1] * inv)
                    if t == 0:
                        lse[U(h), U(row)] = ((m[hf] + log2(lt) - LIFT) * LN2_F
                                             if lt != F0 else NEG_INF)

        NC = 128 * cfg.warpgroups
        self.load_q = kmajor_loader(BR, CH, NC)
        self.load_k = kmajor_loader(BC, CH, NC)
        self.load_vt = kmajor_loader(D, CHV, NC)
        self.scores_to_p, self.rescale_and_pack, self.epilogue = (scores_to_p,
                                                                  rescale_and_pack, epilogue)
        self.WAIT1_S = wgmma.tie(SREGS, wgmma.WAIT1)
        self.s_product, self.pv_product, self.pv_and_wait = wgmma_products(self)
        self.landed, self.s_and_wait, self.s_beside_pv, self.pv_from = pipeline_steps(
            self, self.DESC_VT)


def make_fp8_kernel(cfg):
    """The kernel of one `fp8.Fp8Config` (on the simulator: with the twins of `ptx/wgmma.py`)."""
    P = _Parts(cfg)
    kern = {"serial": _serial, "overlap": _overlap}[cfg.pipeline](P)
    kern.__name__ = kern.__qualname__ = (f"hopper_fp8_{cfg.pipeline}_wg{cfg.warpgroups}"
                                         f"_k{P.BC}_d{P.D}")
    return cuda.jit(kern) if SIM else cuda.jit(kern, launch_bounds=(P.NT, 1))


def block_start(P, uniform: bool):
    """start(q, k, vt, qs, tq, tk, kp, qscale, causal, qblk) -> (tid, wg, t, h, q0, wg_row0,
    row0, base, sq, desc_q, gk, gv) of both FP8 versions: the thread's place
    (`hopper_kernels.block_rows`; uniform: wg broadcast from lane 0), shared memory's byte
    address, the warpgroup's Q scale sq (its rows share one), Q's descriptor, the byte
    addresses of the head's K row 0 and V^T row 0; and the copy of Q issued."""
    Q_OFF, D, DESC_KM, WG_Q = P.Q_OFF, P.D, P.DESC_KM, P.WG_Q
    SADDR, GADDR, load_q = P.SADDR, P.GADDR, P.load_q
    ROWS = block_rows(P.BR, uniform)

    @ir_inlined
    def start(q, k, vt, qs, tq, tk, kp, qscale, causal, qblk):
        sm = cuda.shared.array(0, uint32, alignment=16)
        tid, wg, t, h, q0, wg_row0, row0 = ROWS(causal)     # rows row0, row0 + 8
        base = U(SADDR(sm, 0))
        sq = qs[h, min(wg_row0, tq - 1) // qblk] * qscale
        desc_q = ((base + U(4 * Q_OFF) + U(wg) * WG_Q) >> U(4)) | DESC_KM
        gk = GADDR(k, 0) + U(h * tk) * U(D)
        gv = GADDR(vt, 0) + U(h * D) * U(kp)
        load_q(base + U(4 * Q_OFF), GADDR(q, 0) + U(h * tq + q0) * U(D), D, tq - q0, tid)
        return tid, wg, t, h, q0, wg_row0, row0, base, sq, desc_q, gk, gv
    return start


def fp8_state(P, zero_p: bool):
    """state(vs, h) -> (acc, s, pa, m, lp, alpha, sv): `hopper_kernels.state_arrays`'s
    registers of a thread and sv, V's scale of key block 0 (O is kept in units of the
    current key block's V scale)."""
    ARRAYS = state_arrays(P, zero_p)

    @ir_inlined
    def state(vs, h):
        acc, s, pa, m, lp, alpha = ARRAYS()
        return acc, s, pa, m, lp, alpha, vs[h, 0]
    return state


def _serial(P):
    """Version 1: each product waited for at once; the warpgroups overlap one another."""
    BR, BC, D, K_OFF, V_OFF, BUF = P.BR, P.BC, P.D, P.K_OFF, P.V_OFF, P.BUF
    COMMIT, load_k, load_vt = P.COMMIT, P.load_k, P.load_vt
    scores_to_p, rescale_and_pack, epilogue = P.scores_to_p, P.rescale_and_pack, P.epilogue
    landed, s_and_wait, pv_from = P.landed, P.s_and_wait, P.pv_from
    STATE, START = fp8_state(P, False), block_start(P, False)

    def hopper_fp8_forward(q, k, vt, o, lse, qs, ks, vs, tq, tk, kp, qscale, causal, off,
                           qblk, kblk):
        # q (BH Tq D), k (BH Tk D), vt (BH D kp): e4m3 codes as flat uint32 words;
        # o (BH, Tq, D/2) fp16 words; lse (BH, Tq); qs (BH, nq), ks, vs (BH, nk) float32
        tid, wg, t, h, q0, wg_row0, row0, base, sq, desc_q, gk, gv = START(
            q, k, vt, qs, tq, tk, kp, qscale, causal, qblk)
        n_kb = visible_key_blocks(tk, causal, q0 + BR + off, BC)
        if n_kb > 0:
            load_k(base + U(4 * K_OFF), gk, D, tk, tid)
            load_vt(base + U(4 * V_OFF), gv, kp, D, tid)
        COMMIT()

        acc, s, pa, m, lp, alpha, sv = STATE(vs, h)

        for jb in range(n_kb):
            k0 = jb * BC
            bo = (jb % 2) * BUF
            nb = BUF - bo              # block j + 1's buffer
            landed()                   # ... and the other buffer is free
            if jb + 1 < n_kb:
                load_k(base + U(4 * (nb + K_OFF)), gk + U(k0 + BC) * U(D), D, tk - k0 - BC,
                       tid)
                load_vt(base + U(4 * (nb + V_OFF)), gv + U(k0 + BC), kp, D, tid)
                COMMIT()

            s_and_wait(s, desc_q, base, bo + K_OFF)
            kb = k0 // kblk
            svn = vs[h, kb]
            scores_to_p(s, m, lp, alpha, k0, tk, causal, row0, wg_row0, off,
                        sq * ks[h, kb], t)
            rescale_and_pack(acc, alpha, sv / svn, s, pa)
            sv = svn
            pv_from(acc, pa, base, bo + V_OFF)

        epilogue(acc, m, lp, sv, o, lse, h, row0, t, tq)

    return hopper_fp8_forward


def _overlap(P):
    """Version 2: S_j and P_{j-1} V_{j-1} issued together, the wait for S_j only
    (`wait_group 1`), the softmax of block j while the product runs, then the wait for it,
    O's rescale (alpha_j sv_{j-1} / sv_j) and P_j's packing: `hopper_kernels._overlap`'s
    schedule (K one block ahead of V; a warpgroup skips the blocks masked for all its rows),
    without its tail split."""
    BR, BC, D, K_OFF, V_OFF, BUF = P.BR, P.BC, P.D, P.K_OFF, P.V_OFF, P.BUF
    WAIT_O, PIN_P, COMMIT, load_k, load_vt = P.WAIT_O, P.PIN_P, P.COMMIT, P.load_k, P.load_vt
    scores_to_p, rescale_and_pack, epilogue = P.scores_to_p, P.rescale_and_pack, P.epilogue
    landed, s_beside_pv, pv_from = P.landed, P.s_beside_pv, P.pv_from
    STATE, START = fp8_state(P, True), block_start(P, True)   # wg uniform: no divergent wgmma

    def hopper_fp8_forward(q, k, vt, o, lse, qs, ks, vs, tq, tk, kp, qscale, causal, off,
                           qblk, kblk):
        tid, wg, t, h, q0, wg_row0, row0, base, sq, desc_q, gk, gv = START(
            q, k, vt, qs, tq, tk, kp, qscale, causal, qblk)
        n_kb = visible_key_blocks(tk, causal, min(q0 + BR, tq) + off, BC)
        kb_wg = min(n_kb, visible_key_blocks(tk, causal, min(wg_row0 + 64, tq) + off, BC))
        if wg_row0 >= tq:
            kb_wg = 0
        if n_kb > 0:
            load_k(base + U(4 * K_OFF), gk, D, tk, tid)
        COMMIT()

        acc, s, pa, m, lp, alpha, sv = STATE(vs, h)

        for jb in range(n_kb):
            k0 = jb * BC
            landed()                   # K_j, V_{j-1} landed; S_{j-1}, PV_{j-2} done
            kb = (jb % 2) * BUF        # K_j's buffer; V_j goes to the same buffer's V
            if jb + 1 < n_kb:
                load_k(base + U(4 * (BUF - kb + K_OFF)), gk + U(k0 + BC) * U(D), D,
                       tk - k0 - BC, tid)
            load_vt(base + U(4 * (kb + V_OFF)), gv + U(k0), kp, D, tid)
            COMMIT()

            if jb < kb_wg:             # S_j, and P_{j-1} V_{j-1} behind it
                s_beside_pv(s, acc, pa, desc_q, base, kb, jb, 0)
                kbk = k0 // kblk
                svn = vs[h, kbk]
                scores_to_p(s, m, lp, alpha, k0, tk, causal, row0, wg_row0, off,
                            sq * ks[h, kbk], t)
                WAIT_O(acc)
                PIN_P(pa)
                rescale_and_pack(acc, alpha, sv / svn, s, pa)
                sv = svn
            elif jb == kb_wg and jb > 0:       # this warpgroup's last P V
                pv_from(acc, pa, base, BUF - kb + V_OFF)

        if n_kb > 0:                   # the last P V
            landed()
            if kb_wg == n_kb:
                pv_from(acc, pa, base, ((n_kb - 1) % 2) * BUF + V_OFF)

        epilogue(acc, m, lp, sv, o, lse, h, row0, t, tq)

    return hopper_fp8_forward


# --------------------------------------------------------------------------------------
# Quantizing on the device: the optional Hadamard rotation, one scale per block, e4m3 codes
# --------------------------------------------------------------------------------------

#: the quantizer's threads per block (8 warps: each rotates and encodes whole rows)
QUANT_THREADS = 256


def make_quantize(D: int, hadamard: bool, amax_only: bool = False):
    """Kernel (x, signs, codes, scale, t, d, tokens, head_amax): x (BH, T, d) float16 or float32 ->
    codes (BH, T, D) uint8 e4m3 and scale (BH, ceil(T / tokens)) float32, one block of
    `tokens` rows per CUDA block (grid (n_blocks, BH)), `fp8.scaling.quantize`'s rule:
    scale = amax / 448 (1 for an all-zero block), code = round(x / scale) with saturation.
    With `hadamard`, each row is first multiplied by diag(signs) H_D / sqrt(D) (D a power of
    two from 32 to 128, d <= D padded with zeros: `fp8.hadamard.rotate` after
    `pad_to_power_of_two`), by a fast Walsh-Hadamard transform in registers: lane l holds
    columns V l .. V l + V - 1 (V = D / 32), the butterflies of the column bits inside a lane
    are register pairs and the other five are `shfl_xor` with lane l ^ 2^b. Rows are
    rotated twice (once for the block's amax, once to encode) instead of kept in shared
    memory. The simulator and GPUs before sm_89 run it too (the integer encoder there, the
    conversion instruction from sm_89: the same codes; `ptx.fp8` checks the two agree).
    head_amax: None, or (BH, 1) float32 amaxes of whole heads (the scale per head: each
    block then encodes its rows with its head's scale instead of its own block's).
    amax_only: the first pass for that, kernel (x, signs, head_amax, t, d, tokens): each
    block's amax into head_amax[h] by an atomic max (head_amax starts at zeros)."""
    from ...gpu import using_simulator
    from ..ptx.fp8 import encode_e4m3, hardware_decode
    if D % 32 or not 32 <= D <= 128 or (hadamard and D & (D - 1)):
        raise ValueError(f"D must be 32, 64, 96 or 128 (a power of two with hadamard), got {D}")
    V = D // 32
    NW = QUANT_THREADS // 32
    INV = float32(1.0 / math.sqrt(D))
    MAXF = float32(448.0)
    SIM = using_simulator()
    HW = not SIM and hardware_decode()       # the conversion instruction: sm_89 and newer
    PACK8 = encode_word_hw() if HW else None
    HAD = bool(hadamard)

    def _encode_hw(x):
        return PACK8(x, F0, F0, F0) & uint32(0xFF)

    encode = cuda.jit(device=True)(_encode_hw) if HW else encode_e4m3

    xor = shfl_xor                             # (shared memory on the simulator)

    @cuda.jit(device=True)
    def row_values(x, signs, h, r, ok, d, lane, v, scratch, tid):
        # v[0:V] = this lane's columns of row r (rotated when HAD; zeros when not ok)
        for j in range(V):
            c = V * lane + j
            v[j] = float32(x[h, r, c]) if ok and c < d else F0
            if HAD:
                v[j] *= signs[c]
        if HAD:
            b = 1
            while b < V:                       # column bits inside the lane
                for j in range(V):
                    if j & b == 0:
                        a0 = v[j]
                        a1 = v[j | b]
                        v[j] = a0 + a1
                        v[j | b] = a0 - a1
                b *= 2
            m = 1
            while m < 32:                      # the other five: across lanes
                for j in range(V):
                    o = xor(v[j], m, scratch, tid)
                    v[j] = v[j] + o if lane & m == 0 else o - v[j]
                m *= 2
            for j in range(V):
                v[j] *= INV

    @cuda.jit(device=True)
    def block_amax(x, signs, d, v, red, scratch, tid, lane, w, h, r0, r1):
        amax = F0
        for rb in range(r0, r1, NW):           # every warp the same count (the exchanges)
            r = rb + w
            row_values(x, signs, h, r, r < r1, d, lane, v, scratch, tid)
            for j in range(V):
                amax = max(amax, abs(v[j]))
        m = 16
        while m > 0:
            amax = max(amax, xor(amax, m, scratch, tid))
            m //= 2
        if lane == 0:
            red[w] = amax
        cuda.syncthreads()
        amax = red[0]
        for i in range(1, NW):
            amax = max(amax, red[i])
        return amax

    def head_amax_pass(x, signs, head_amax, t, d, tokens):
        red = cuda.shared.array(NW, float32)
        scratch = cuda.shared.array(QUANT_THREADS, float32)
        tid = cuda.threadIdx.x
        h = cuda.blockIdx.y
        r0 = cuda.blockIdx.x * tokens
        v = cuda.local.array(V, float32)
        amax = block_amax(x, signs, d, v, red, scratch, tid, tid % 32, tid // 32, h, r0,
                          min(r0 + tokens, t))
        if tid == 0:
            cuda.atomic.max(head_amax, (h, 0), amax)

    def quantize(x, signs, codes, scale, t, d, tokens, head_amax):
        red = cuda.shared.array(NW, float32)
        scratch = cuda.shared.array(QUANT_THREADS, float32)
        tid = cuda.threadIdx.x
        lane = tid % 32
        w = tid // 32
        h = cuda.blockIdx.y
        r0 = cuda.blockIdx.x * tokens
        r1 = min(r0 + tokens, t)
        v = cuda.local.array(V, float32)
        if head_amax is None:
            amax = block_amax(x, signs, d, v, red, scratch, tid, lane, w, h, r0, r1)
        else:
            amax = head_amax[h, 0]
        s = amax / MAXF if amax > F0 else float32(1.0)
        if tid == 0 and (head_amax is None or cuda.blockIdx.x == 0):
            scale[h, cuda.blockIdx.x] = s
        for rb in range(r0, r1, NW):
            r = rb + w
            row_values(x, signs, h, r, r < r1, d, lane, v, scratch, tid)
            if r < r1:
                for j in range(V):
                    codes[h, r, V * lane + j] = encode(v[j] / s)

    kern = head_amax_pass if amax_only else quantize
    kern.__name__ = kern.__qualname__ = (f"fp8_{'amax' if amax_only else 'quantize'}_d{D}"
                                         + ("_hadamard" if HAD else ""))
    return cuda.jit(kern)
