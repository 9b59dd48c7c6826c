"""hopper_kernels: the FlashAttention forward on Hopper's warpgroup tensor cores (wgmma).

Version 1 ("wgmma"): the same maths and contract as the mma.sync forward's version 2
(`tensor_core_kernels_async.py`, whose header explains the online softmax on
accumulator fragments), with the two products moved from mma.sync to `wgmma.mma_async`
(`wgmma.py`):

    S = Q K_j^T    one warpgroup (4 warps, 128 threads) owns 64 query rows; per key block
                   it issues d / 16 instructions m64n{Bc}k16 with BOTH operands read from
                   shared memory through descriptors (SS). mma.sync needed 64 / 16 x Bc / 8
                   x d / 16 warp instructions and an ldmatrix per two for the same tile.
    O += P V_j     P stays in registers: the accumulator layout of S is, per warp, the
                   m16n8 C layout, so two n8 tiles of S are one k16 A fragment, exactly as
                   for mma.sync (`mma.p_as_a_operand`); Bc / 16 instructions m64n{d}k16
                   with A from registers (RS) and V read MN-major (d contiguous; the
                   instruction's imm-trans-b operand is 1, the descriptor has no such
                   field): no transposed copy of V.

Shared memory (no swizzle; `wgmma_layouts` models it): every tile is stored as 8 x 8
"core matrices" of 128 contiguous bytes (8 rows of 16 bytes). Q (Br x d) and K_j (Bc x d)
are K-major: core (row group rg, column chunk cc) at byte rg (d 16) + cc 128, so the
descriptor's leading byte offset (between core matrices along K) is 128 and its stride
byte offset (along M or N) is 16 d; V_j (Bc x d) is MN-major: core (key group, column
chunk cc) at cc (Bc 16) + key group 128. A 16-byte `cp.async` copies one row of one core
matrix (8 consecutive values of one row of q, k or v), and a warp's 32 copies fill four
whole core matrices: conflict-free writes, 64 contiguous bytes read per row. K_j, V_j are
double-buffered: block j + 1 is in flight while block j computes, as in version 2.

Asynchrony (version 1, "serial"): each product is one commit group, waited for at once
(`wait_group 0`) before its result is read, so within a warpgroup the softmax and the tensor
cores take turns.
Overlap comes from the other warpgroups of the block (Br = 64 x warpgroups), whose
products run while this one does its softmax: FlashAttention-3's "ping-pong" schedule
without the barriers that force the turns.

Version 2 ("overlap") issues S_j and P_{j-1} V_{j-1} together and waits for S_j only
(`wait_group 1`), as FlashAttention-3's intra-warpgroup overlap does. What it does not get
is the exponentials overlapping the product: ptxas moves the wait for P V
(WARPGROUP.DEPBAR) up to the top of its basic block, which is the join after the mask
test, before the softmax (its SASS; benchmarks/NOTES_hopper.md, "Where version 2's wait
really is"). Placing the softmax inside both arms of the mask test pins the wait after the
exponentials, and measured slower, so the version stays as it is.
The lazy rescale (cfg.lazy_rescale, every version; FlashAttention-4's `rescale_threshold`):
a row keeps its running max until a score passes it by RESCALE_THRESHOLD (log2 units), so
alpha = 1 for most key blocks and a warp skips O's rescale unless one of its rows moved
(`cuda.any_sync`); exact, since any reference max cancels in O = acc / l (`tiled.py`).
Version 3 ("specialised") adds warp specialisation: a producer warp copies K_j, V_j into 3
stages guarded by mbarriers, and the consumer warpgroups never meet at a block-wide barrier;
with `cp.async` from one warp (no TMA) it measured 2.5x slower than version 2. Version 4
("producer") makes the producer a warpgroup and moves its registers to the consumers with
`setmaxnreg`; version 5 ("pingpong") has the consumer warpgroups take turns to issue their
products. Both measured level with version 2, not faster: copies by `cp.async`, 16 bytes a
thread, keep the L2 busy (benchmarks/NOTES_hopper.md).

Bytes moved: as the mma.sync kernel (Q once, K and V once per query block of Br rows).
FLOPs: 4 Tq Tk d (half when causal). An H200's wgmma loop from Numba issued 907 TFLOP/s
(a probe of 2026-12-01, not kept in benchmarks/results/); the exponentials (Tq Tk of them,
on the 16-per-clock special function units of each SM) cost about half the tensor-core time
at d = 128 and as much at d = 64, which is why the softmax must overlap the products.
"""

from __future__ import annotations

import math

from numba import cuda, float32, uint32
from numba import uint64 as U

from ...constants import F0, F1, FULL_MASK, LN2_F, NEG_INF, RESCALE_THRESHOLD
from ...gpu import using_simulator
from ..ptx import wgmma
from ..common._device import inlined, ir_inlined, reset_state, visible_key_blocks
from ..ptx.mma import device_ops
from ..ptx.smem_ops import intrinsics as smem_intrinsics
from ..ptx.smem_ops import ops as smem_ops

#: 16-byte units in a descriptor's 14-bit fields
DESC_UNIT = 16
#: kernel versions, side by side: "serial" (version 1), "overlap" (version 2) and
#: "specialised" (version 3: a producer warp and mbarriers), "producer" (version 4: version 3
#: with a producer warpgroup that gives its registers to the consumers by setmaxnreg),
#: "pingpong" (version 5: version 4, the consumer warpgroups issuing their products in turn)
PIPELINES = ("serial", "overlap", "specialised", "producer", "pingpong")


#: True on Numba's CUDA simulator: the kernels are built from the twins of the intrinsics
SIM = using_simulator()
#: a device function inlined into the kernel on a GPU (a plain one on the simulator)
_inl = inlined


class _Parts:
    """What both versions share for one configuration: sizes, descriptors, the wgmma
    intrinsics and the device functions (inlined into the kernel)."""

    def __init__(self, cfg):
        self.cfg = cfg
        kind = "f16" if cfg.precision == "fp16" else "bf16"
        PACK = device_ops(SIM)["pack_fp16" if cfg.precision == "fp16" else "pack_bf16"]
        so = smem_ops(SIM)
        exp2 = so["ex2"]
        self.COMMIT, self.WAIT = so["commit"], so["wait_all"]
        self.NT, self.BR, self.BC, self.D = cfg.threads, cfg.block_q, cfg.block_k, cfg.head_dim
        BR, BC, D = self.BR, self.BC, self.D
        NEG = cfg.negative_scale
        LAZY = cfg.lazy_rescale
        DW = D // 2                     # 32-bit words per row of q, k, v, o
        CH = D // 8                     # 16-byte chunks per row (core-matrix columns)
        self.KT = D // 16               # k16 steps of S = Q K^T
        self.KP = BC // 16              # k16 steps of O += P V
        NS = BC // 8                    # n8 tiles of S per warp
        NO = D // 8                     # n8 tiles of O per warp
        self.SREGS, self.OREGS = SREGS, OREGS = BC // 2, D // 2   # fp32 accumulators
        self.PREGS = BC // 4            # P as A fragments: 4 words per k16 step
        self.Q_OFF, self.K_OFF, self.V_OFF, self.BUF, self.END = cfg.offsets()
        self.STAGES = cfg.stages
        lbo, sbo = cfg.kmajor_lbo_sbo()
        self.DESC_KM = U((lbo // DESC_UNIT) << 16) | (U(sbo // DESC_UNIT) << U(32))
        lbo, sbo = cfg.v_lbo_sbo()
        self.DESC_V = U((lbo // DESC_UNIT) << 16) | (U(sbo // DESC_UNIT) << U(32))
        self.KSTEP = U(256 // DESC_UNIT)  # 16 elements along K: two core matrices, 256 B
        self.WG_Q = U(64 * D * 2)       # bytes of 64 rows of Q
        self.MMA_S = wgmma.mma_ss(BC, kind)
        self.MMA_O = wgmma.mma_rs(D, kind, 1)
        self.FENCE_O = wgmma.tie(OREGS, wgmma.FENCE)
        self.WAIT_S = wgmma.tie(SREGS, wgmma.WAIT0)
        self.WAIT1_S = wgmma.tie(SREGS, wgmma.WAIT1)
        self.WAIT_O = wgmma.tie(OREGS, wgmma.WAIT0)
        self.PIN_P = wgmma.tie(self.PREGS, "", True)
        self.FENCE = wgmma.bare(wgmma.FENCE)
        self.WCOMMIT = wgmma.bare(wgmma.COMMIT)
        self.PROXY = wgmma.bare(wgmma.PROXY_FENCE)
        log2 = math.log2

        ins = smem_intrinsics()
        CPR = ins["cp_async16_raw"]
        self.GADDR = ins["global_address"]
        self.SADDR = ins["shared_address"]
        ROW_BYTES = 4 * DW

        def kmajor_loader(ROWS, THREADS):
            copy = kmajor_copier(ROWS, CH, THREADS, CPR)

            @_inl
            def load(saddr, gaddr, nvalid, tid, rbase):
                copy(saddr, gaddr, ROW_BYTES, nvalid, tid, rbase)
            return load

        def v_loader(THREADS):
            LOADS = -(-(BC * CH) // THREADS)

            @_inl
            def load_v(saddr, gaddr, nvalid, tid):
                # V_j MN-major: chunk cc of key r at byte cc (Bc 16) + r 16
                for it in range(LOADS):
                    e = tid + THREADS * it
                    if THREADS * (it + 1) <= BC * CH or e < BC * CH:
                        ri = e % 8
                        cc = (e // 8) % CH
                        r = (e // (8 * CH)) * 8 + ri
                        ok = r < nvalid
                        CPR(saddr + U((cc * BC + r) * 16),
                            gaddr + U((r if ok else 0) * ROW_BYTES + cc * 16), 16 if ok else 0)
            return load_v

        scores_to_p = softmax_step(NS, BC, exp2, NEG, LAZY, True, 0.0)

        @_inl
        def rescale_and_pack(acc, alpha, s, pa):
            # O *= alpha per row (lazy: only when some row of the warp changed its max);
            # P -> 16-bit A fragments (two n8 tiles = one k16 step)
            if not LAZY or cuda.any_sync(FULL_MASK, alpha[0] != F1 or alpha[1] != F1):
                for hf in range(2):
                    for n in range(NO):
                        acc[4 * n + 2 * hf] *= alpha[hf]
                        acc[4 * n + 2 * hf + 1] *= alpha[hf]
            for kp in range(BC // 16):
                j0 = 8 * kp
                pa[4 * kp] = PACK(s[j0], s[j0 + 1])
                pa[4 * kp + 1] = PACK(s[j0 + 2], s[j0 + 3])
                pa[4 * kp + 2] = PACK(s[j0 + 4], s[j0 + 5])
                pa[4 * kp + 3] = PACK(s[j0 + 6], s[j0 + 7])

        @_inl
        def row_total(lp, hf):
            # the row sum l of rows row0 + 8 hf: the quad's four partial sums added
            lt = lp[hf]
            lt += cuda.shfl_xor_sync(FULL_MASK, lt, 1)
            return lt + cuda.shfl_xor_sync(FULL_MASK, lt, 2)

        @_inl
        def row_lse(m, hf, lt):
            return (m[hf] + log2(lt)) * LN2_F if lt != F0 else NEG_INF

        @_inl
        def epilogue(acc, m, lp, o, lse, h, row0, t, tq):
            for hf in range(2):
                lt = row_total(lp, hf)
                inv = F1 / lt if lt != F0 else F0
                row = row0 + 8 * hf
                if row < tq:
                    for n in range(NO):
                        ob = 4 * n + 2 * hf
                        o[U(h), U(row), U(n * 4 + t)] = PACK(acc[ob] * inv, acc[ob + 1] * inv)
                    if t == 0:
                        lse[U(h), U(row)] = row_lse(m, hf, lt)

        @_inl
        def epilogue_part(acc, m, lp, part_o, part_lse, prow0, row0, t, tq):
            # one piece of a split unit: o normalised by this piece's own l, in float32,
            # and its lse, at workspace rows prow0, prow0 + 8 (`tail_split` combines them)
            for hf in range(2):
                lt = row_total(lp, hf)
                inv = F1 / lt if lt != F0 else F0
                if row0 + 8 * hf < tq:
                    pr = prow0 + 8 * hf
                    for n in range(NO):
                        ob = 4 * n + 2 * hf
                        c = pr * D + n * 8 + 2 * t
                        part_o[U(c)] = acc[ob] * inv
                        part_o[U(c + 1)] = acc[ob + 1] * inv
                    if t == 0:
                        part_lse[U(pr)] = row_lse(m, hf, lt)

        self.s_product, self.pv_product, self.pv_and_wait = wgmma_products(self)
        self.landed, self.s_and_wait, self.s_beside_pv, self.pv_from = pipeline_steps(
            self, self.DESC_V)

        NC = 128 * cfg.warpgroups      # consumer threads (all threads but a producer warp)
        self.load_q, self.load_k, self.load_v = (kmajor_loader(BR, NC), kmajor_loader(BC, NC),
                                                 v_loader(NC))
        self.load_q_wg = kmajor_loader(64, 128)      # one warpgroup's 64 rows of Q
        PT = max(cfg.producer_threads, 32)
        self.load_k_prod, self.load_v_prod = kmajor_loader(BC, PT), v_loader(PT)
        self.scores_to_p, self.rescale_and_pack, self.epilogue = (scores_to_p,
                                                                  rescale_and_pack, epilogue)
        self.epilogue_part = epilogue_part


def softmax_step(NS, BC, exp2, neg: bool, lazy: bool, prescale: bool, lift: float):
    """scores_to_p(s, m, lp, alpha, k0, tk, causal, row0, wg_row0, off, sc, t) of both Hopper
    forwards: a thread's NS n8 tiles of S (raw products, C layout: rows row0 and row0 + 8,
    columns k0 + 8 n + 2 t and the next) -> P = 2^lift exp2(S sc - m) in place, with the
    running max m (log2 units), the rescale alpha and the row sums lp; keys past tk and,
    when causal, past a row's diagonal (+ off) masked. neg: S negated first (a negative
    softmax scale); lazy: a row keeps its max until a score passes it by RESCALE_THRESHOLD;
    prescale: a masked tile is multiplied by sc as it is masked (the 16-bit kernel);
    lift: FlashAttention-3's FP8 offset (8: P~ <= 2^8), 0 for the 16-bit kernel."""
    NEG, LAZY, PRESCALE = neg, lazy, prescale
    TH = float32(RESCALE_THRESHOLD)
    LIFT, LIFTED = float32(lift), lift != 0
    SREGS = 4 * NS

    @_inl
    def scores_to_p(s, m, lp, alpha, k0, tk, causal, row0, wg_row0, off, qsc, t):
        if NEG:
            for i in range(SREGS):
                s[i] = -s[i]
        sc = qsc
        if k0 + BC > tk or (causal != 0 and k0 + BC - 1 > wg_row0 + off):
            for n in range(NS):
                for i in range(4):
                    col = k0 + n * 8 + 2 * t + (i % 2)
                    row = row0 + 8 * (i // 2)
                    j = 4 * n + i
                    if col >= tk or (causal != 0 and col > row + off):
                        s[j] = NEG_INF
                    elif PRESCALE:
                        s[j] = s[j] * qsc
            if PRESCALE:
                sc = F1
        for hf in range(2):
            x = NEG_INF
            for n in range(NS):
                x = max(x, max(s[4 * n + 2 * hf], s[4 * n + 2 * hf + 1]))
            x = max(x, cuda.shfl_xor_sync(FULL_MASK, x, 1))
            x = max(x, cuda.shfl_xor_sync(FULL_MASK, x, 2)) * sc
            mo = m[hf]
            mn = max(mo, x)
            if LAZY and mn <= mo + TH:
                mn = mo                # keep the old max: P <= 2^threshold, alpha = 1
            mu = mn if mn != NEG_INF else F0    # a row with no visible key so far
            if LAZY:
                alpha[hf] = F1 if mn == mo else exp2(mo - mu)
            else:
                alpha[hf] = exp2(mo - mu)
            m[hf] = mn
            mb = mu - LIFT if LIFTED else mu
            ps = F0
            for n in range(NS):
                j = 4 * n + 2 * hf
                p = exp2(s[j] * sc - mb)
                s[j] = p
                ps += p
                p = exp2(s[j + 1] * sc - mb)
                s[j + 1] = p
                ps += p
            lp[hf] = lp[hf] * alpha[hf] + ps
    return scores_to_p


def kmajor_copier(ROWS, CHN, THREADS, CPR):
    """copy(saddr, gaddr, row_bytes, nvalid, tid, rbase): rows rbase .. rbase + ROWS - 1 of
    CHN 16-byte chunks from global byte address gaddr (row r at gaddr + r row_bytes; rows
    past nvalid as zeros, read from row 0) into K-major core matrices at shared byte address
    saddr, by 16-byte `cp.async` (CPR): 8 threads fill one core matrix; THREADS threads take
    part. The loader of Q and K in both Hopper kernels, and of V^T in the FP8 one."""
    LOADS = -(-(ROWS * CHN) // THREADS)

    @_inl
    def copy(saddr, gaddr, row_bytes, nvalid, tid, rbase):
        for it in range(LOADS):
            e = tid + THREADS * it
            if THREADS * (it + 1) <= ROWS * CHN or e < ROWS * CHN:
                ri = e % 8
                cc = (e // 8) % CHN
                rg = e // (8 * CHN)
                r = rbase + rg * 8 + ri
                ok = r < nvalid
                CPR(saddr + U(((rg * CHN + cc) * 8 + ri) * 16),
                    gaddr + U((r if ok else 0) * row_bytes + cc * 16), 16 if ok else 0)
    return copy


def wgmma_products(P):
    """(s_product, pv_product, pv_and_wait) of one kernel's parts P (its MMA_S, MMA_O, KSTEP,
    KT, KP, FENCE_O, WCOMMIT, WAIT_O, PIN_P): the same three steps for every input type,
    16-bit here and FP8 in `fp8_kernels` (k16 or k32 per instruction, the same 32 bytes)."""
    MMA_S, MMA_O, KSTEP, KT, KP = P.MMA_S, P.MMA_O, P.KSTEP, P.KT, P.KP
    FENCE_O, WCOMMIT, WAIT_O, PIN_P = P.FENCE_O, P.WCOMMIT, P.WAIT_O, P.PIN_P

    @_inl
    def s_product(s, desc_q, desc_k):
        # S = Q K_j^T: KT wgmma, A and B from shared memory (issued, not waited for)
        for kk in range(KT):
            MMA_S(s, desc_q + U(kk) * KSTEP, desc_k + U(kk) * KSTEP, 1 if kk > 0 else 0)

    @_inl
    def pv_product(acc, pa, desc_v):
        # O += P V_j: KP wgmma, P from registers, V from shared memory (issued only)
        for kp in range(KP):
            MMA_O(acc, pa[4 * kp], pa[4 * kp + 1], pa[4 * kp + 2], pa[4 * kp + 3],
                  desc_v + U(kp) * KSTEP, 1)

    @_inl
    def pv_and_wait(acc, pa, desc_v):
        # the fence, P V, its wait; P pinned on both sides (the product reads it)
        PIN_P(pa)
        FENCE_O(acc)
        pv_product(acc, pa, desc_v)
        WCOMMIT()
        WAIT_O(acc)
        PIN_P(pa)

    return s_product, pv_product, pv_and_wait


def pipeline_steps(P, desc_v_bits):
    """(landed, s_and_wait, s_beside_pv, pv_from) of one kernel's parts P (after
    `wgmma_products`): the steps that the serial and overlap schedules of both Hopper
    forwards (16-bit and FP8) are written in. Shared memory by 32-bit word offsets from
    base (its byte address); desc_v_bits: the V tile's descriptor fields (V MN-major in
    the 16-bit kernel, V^T K-major in the FP8 one).
      landed()       this thread's copies done and made visible to wgmma, then the block's
                     barrier: everyone's copies landed
      s_and_wait(s, desc_q, base, kw)   S = Q K_j^T (K_j at word kw), waited for at once
      s_beside_pv(s, acc, pa, desc_q, base, kb, with_pv)   S_j issued (K_j in buffer kb,
                     a word offset), then (with_pv) P_{j-1} V_{j-1} (V_{j-1} in the other
                     buffer) issued behind it, and the wait for S_j only (wait_group 1):
                     the product runs during the softmax
      pv_from(acc, pa, base, vw)        O += P V_j (V at word vw), waited for"""
    DESC_KM, DV, K_OFF, V_OFF, BUF = P.DESC_KM, desc_v_bits, P.K_OFF, P.V_OFF, P.BUF
    WAIT, PROXY, FENCE, WCOMMIT = P.WAIT, P.PROXY, P.FENCE, P.WCOMMIT
    WAIT_S, WAIT1_S, FENCE_O, PIN_P = P.WAIT_S, P.WAIT1_S, P.FENCE_O, P.PIN_P
    s_product, pv_product, pv_and_wait = P.s_product, P.pv_product, P.pv_and_wait

    @ir_inlined
    def landed():
        WAIT()
        PROXY()                    # this thread's copies -> visible to wgmma
        cuda.syncthreads()         # everyone's copies landed

    @ir_inlined
    def s_and_wait(s, desc_q, base, kw):
        desc_k = ((base + U(4 * kw)) >> U(4)) | DESC_KM
        FENCE()
        s_product(s, desc_q, desc_k)
        WCOMMIT()
        WAIT_S(s)

    @ir_inlined
    def s_beside_pv(s, acc, pa, desc_q, base, kb, jb, kb0):
        desc_k = ((base + U(4 * (kb + K_OFF))) >> U(4)) | DESC_KM
        PIN_P(pa)
        FENCE_O(acc)
        s_product(s, desc_q, desc_k)
        WCOMMIT()
        if jb > kb0:               # P_{j-1} V_{j-1}, in flight during the softmax
            desc_v = ((base + U(4 * (BUF - kb + V_OFF))) >> U(4)) | DV
            pv_product(acc, pa, desc_v)
            WCOMMIT()
            WAIT1_S(s)
        else:
            WAIT_S(s)

    @ir_inlined
    def pv_from(acc, pa, base, vw):
        desc_v = ((base + U(4 * vw)) >> U(4)) | DV
        pv_and_wait(acc, pa, desc_v)

    return landed, s_and_wait, s_beside_pv, pv_from


def block_rows(BR, uniform: bool):
    """rows(causal) -> (tid, wg, t, h, q0, wg_row0, row0): a thread's place in a Hopper
    forward on a (query blocks, heads) grid: its warpgroup wg (uniform: broadcast from lane
    0, as CUTLASS's canonical_warp_group_idx, so that ptxas knows a branch on it is not
    divergent, which would serialize every wgmma: C7519), its place t in a quad, the head,
    the block's first query row q0 (causal: longest rows first, the short blocks fill the
    tail), its warpgroup's first row and its own rows row0, row0 + 8."""
    UNIFORM = uniform

    @ir_inlined
    def rows(causal):
        tid = cuda.threadIdx.x
        if UNIFORM:
            wg = cuda.shfl_sync(FULL_MASK, tid // 128, 0)
        else:
            wg = tid // 128
        t = tid % 4
        h = cuda.blockIdx.y
        qb = cuda.blockIdx.x
        if causal != 0:
            qb = cuda.gridDim.x - 1 - qb
        q0 = qb * BR
        wg_row0 = q0 + 64 * wg
        return tid, wg, t, h, q0, wg_row0, wg_row0 + 16 * ((tid // 32) % 4) + (tid % 32) // 4
    return rows


def state_arrays(P, zero_p: bool):
    """A device function () -> (acc, s, pa, m, lp, alpha): one thread's registers in a
    Hopper forward of parts P (the FP8 one's too): P.OREGS fp32 accumulators of O, P.SREGS
    of S, P.PREGS words of P as A fragments, and per row (two a thread) the running max,
    the row sum and the rescale alpha; O's state reset (`reset_state`), and with zero_p
    P's words zeroed (the overlap kernels pin P before its first product). Inlined at
    Numba's IR level (inline="always"), so the local arrays are the kernel's own."""
    OREGS, SREGS, PREGS, ZERO_P = P.OREGS, P.SREGS, P.PREGS, zero_p

    @ir_inlined
    def arrays():
        acc = cuda.local.array(OREGS, float32)
        s = cuda.local.array(SREGS, float32)
        pa = cuda.local.array(PREGS, uint32)
        m = cuda.local.array(2, float32)
        lp = cuda.local.array(2, float32)
        alpha = cuda.local.array(2, float32)
        reset_state(acc, OREGS, m, lp, 2)
        if ZERO_P:
            for i in range(PREGS):
                pa[i] = 0
        return acc, s, pa, m, lp, alpha
    return arrays


def make_wgmma_kernel(cfg):
    """The kernel of one `hopper.HopperConfig` (on the simulator: built from the twins
    of `ptx/wgmma.py`)."""
    P = _Parts(cfg)
    build = {"serial": _serial, "overlap": _overlap, "specialised": _specialised,
             "producer": _specialised, "pingpong": _specialised}[cfg.pipeline]
    kern = build(P)
    kern.__name__ = kern.__qualname__ = (
        f"hopper_{cfg.pipeline}_{cfg.precision}_wg{cfg.warpgroups}_k{P.BC}_d{P.D}"
        + ("_neg" if cfg.negative_scale else "")
        + ("" if cfg.skip_masked or cfg.pipeline != "overlap" else "_noskip")
        + ("_lazy" if cfg.lazy_rescale else ""))   # names for profilers
    return cuda.jit(kern) if SIM else cuda.jit(kern, launch_bounds=(P.NT, 1))


def _serial(P):
    """Version 1: each product waited for at once; the warpgroups overlap one another."""
    BR, BC = P.BR, P.BC
    Q_OFF, K_OFF, V_OFF, BUF = P.Q_OFF, P.K_OFF, P.V_OFF, P.BUF
    DESC_KM, WG_Q, SADDR, COMMIT = P.DESC_KM, P.WG_Q, P.SADDR, P.COMMIT
    load_q, load_k, load_v, GADDR = P.load_q, P.load_k, P.load_v, P.GADDR
    ROW_BYTES = 2 * P.D
    scores_to_p, rescale_and_pack, epilogue = P.scores_to_p, P.rescale_and_pack, P.epilogue
    landed, s_and_wait, pv_from = P.landed, P.s_and_wait, P.pv_from
    STATE, ROWS = state_arrays(P, False), block_rows(BR, False)

    def hopper_forward(q, k, v, o, lse, tq, tk, qscale, causal, off):
        # q, k, v flat uint32 words (BH T D/2); o (BH, Tq, D/2) words; lse (BH, Tq)
        sm = cuda.shared.array(0, uint32, alignment=16)
        tid, wg, t, h, q0, wg_row0, row0 = ROWS(causal)     # rows row0, row0 + 8
        kbase = h * tk
        base = U(SADDR(sm, 0))
        qsc = -qscale if qscale < F0 else qscale
        desc_q = ((base + U(4 * Q_OFF) + U(wg) * WG_Q) >> U(4)) | DESC_KM

        gk = GADDR(k, 0) + U(kbase) * U(ROW_BYTES)   # byte address of this head's K row 0
        gv = GADDR(v, 0) + U(kbase) * U(ROW_BYTES)
        load_q(base + U(4 * Q_OFF), GADDR(q, 0) + U(h * tq + q0) * U(ROW_BYTES), tq - q0, tid,
               0)
        n_kb = visible_key_blocks(tk, causal, q0 + BR + off, BC)
        if n_kb > 0:
            load_k(base + U(4 * K_OFF), gk, tk, tid, 0)
            load_v(base + U(4 * V_OFF), gv, tk, tid)
        COMMIT()

        acc, s, pa, m, lp, alpha = STATE()

        for jb in range(n_kb):
            k0 = jb * BC
            bo = (jb % 2) * BUF
            landed()                   # ... and the other buffer is free
            if jb + 1 < n_kb:
                nb = BUF - bo
                g1 = U(k0 + BC) * U(ROW_BYTES)
                load_k(base + U(4 * (nb + K_OFF)), gk + g1, tk - k0 - BC, tid, 0)
                load_v(base + U(4 * (nb + V_OFF)), gv + g1, tk - k0 - BC, tid)
                COMMIT()

            # S = Q K_j^T: d / 16 wgmma, A and B from shared memory
            s_and_wait(s, desc_q, base, bo + K_OFF)
            scores_to_p(s, m, lp, alpha, k0, tk, causal, row0, wg_row0, off, qsc, t)
            rescale_and_pack(acc, alpha, s, pa)

            # O += P V_j: Bc / 16 wgmma, P from registers, V MN-major from shared memory
            pv_from(acc, pa, base, bo + V_OFF)

        epilogue(acc, m, lp, o, lse, h, row0, t, tq)

    return hopper_forward


def _overlap(P):
    """Version 2: the softmax of key block j runs while the tensor cores compute
    O += P_{j-1} V_{j-1} (FlashAttention-3's intra-warpgroup overlap): per iteration,
    issue S_j = Q K_j^T, issue P_{j-1} V_{j-1}, wait for S_j only (wait_group 1), softmax,
    then wait for the product and rescale O. K runs one block ahead of V: at the top of
    iteration j, K_j and V_{j-1} are in shared memory and K_{j+1}, V_j are fetched."""
    BR, BC = P.BR, P.BC
    Q_OFF, K_OFF, V_OFF, BUF = P.Q_OFF, P.K_OFF, P.V_OFF, P.BUF
    DESC_KM, WG_Q, WAIT_O, PIN_P, SADDR, COMMIT = (P.DESC_KM, P.WG_Q, P.WAIT_O, P.PIN_P,
                                                   P.SADDR, P.COMMIT)
    load_q, load_k, load_v, GADDR = P.load_q, P.load_k, P.load_v, P.GADDR
    ROW_BYTES = 2 * P.D
    scores_to_p, rescale_and_pack, epilogue = P.scores_to_p, P.rescale_and_pack, P.epilogue
    landed, s_beside_pv, pv_from = P.landed, P.s_beside_pv, P.pv_from
    epilogue_part = P.epilogue_part
    SKIP = P.cfg.skip_masked
    STATE = state_arrays(P, True)

    def hopper_forward(q, k, v, o, lse, tq, tk, qscale, causal, off, nqb, bh, lpt, n_main,
                       splits, part_o, part_lse):
        # one block per work unit (query block, head) in a 1-D grid (`tail_split.unit`:
        # head-major, or causal longest first over all heads); blocks n_main.. are the
        # tail's pieces: unit n_main + p // splits, key range p % splits of `splits`,
        # written to part_o, part_lse for the combine kernel
        sm = cuda.shared.array(0, uint32, alignment=16)
        tid = cuda.threadIdx.x
        # the warpgroup, broadcast from lane 0 (as CUTLASS's canonical_warp_group_idx):
        # ptxas then knows it is the same in the whole warp, and a branch on it (the
        # skip below) is not "divergent", which would serialize every wgmma (C7519)
        wg = cuda.shfl_sync(FULL_MASK, tid // 128, 0)
        t = tid % 4
        x = cuda.blockIdx.x
        piece = x - n_main             # >= 0: a piece of a split unit
        u = x if piece < 0 else n_main + piece // splits
        h = u // nqb
        qb = u % nqb
        if causal != 0 and lpt != 0:   # longest first over all heads: the short ones
            h = u % bh                 # fill the last waves (list scheduling, LPT)
            qb = nqb - 1 - u // bh
        elif causal != 0:              # each head's longest first, head after head
            qb = nqb - 1 - qb
        q0 = qb * BR
        wg_row0 = q0 + 64 * wg
        row0 = wg_row0 + 16 * ((tid // 32) % 4) + (tid % 32) // 4
        kbase = h * tk
        base = U(SADDR(sm, 0))
        qsc = -qscale if qscale < F0 else qscale
        desc_q = ((base + U(4 * Q_OFF) + U(wg) * WG_Q) >> U(4)) | DESC_KM

        gk = GADDR(k, 0) + U(kbase) * U(ROW_BYTES)
        gv = GADDR(v, 0) + U(kbase) * U(ROW_BYTES)
        load_q(base + U(4 * Q_OFF), GADDR(q, 0) + U(h * tq + q0) * U(ROW_BYTES), tq - q0, tid,
               0)
        # the block's key blocks [kb0, kb1): those its last real row sees, or one piece
        n_kb = visible_key_blocks(tk, causal, min(q0 + BR, tq) + off, BC)
        kb0 = 0
        kb1 = n_kb
        if piece >= 0:
            kb0 = (piece % splits) * n_kb // splits
            kb1 = (piece % splits + 1) * n_kb // splits
        # this warpgroup's end: the tiles past its own rows' diagonal, or all of them when
        # its rows are past Tq, are masked for every row it owns: it skips their products
        # (it still copies and meets the barriers)
        kb_wg = kb1
        if SKIP:
            kb_wg = min(kb1, visible_key_blocks(tk, causal, min(wg_row0 + 64, tq) + off, BC))
            if wg_row0 >= tq:
                kb_wg = kb0
        if kb1 > kb0:
            load_k(base + U(4 * ((kb0 % 2) * BUF + K_OFF)), gk + U(kb0 * BC) * U(ROW_BYTES),
                   tk - kb0 * BC, tid, 0)
        COMMIT()

        acc, s, pa, m, lp, alpha = STATE()

        for jb in range(kb0, kb1):
            k0 = jb * BC
            landed()                   # K_j, V_{j-1} landed; S_{j-1}, PV_{j-2} done
            kb = (jb % 2) * BUF        # K_j's buffer; V_j goes to the same buffer's V
            if jb + 1 < kb1:
                load_k(base + U(4 * (BUF - kb + K_OFF)), gk + U(k0 + BC) * U(ROW_BYTES),
                       tk - k0 - BC, tid, 0)
            load_v(base + U(4 * (kb + V_OFF)), gv + U(k0) * U(ROW_BYTES), tk - k0, tid)
            COMMIT()

            if jb < kb_wg:             # S_j, and P_{j-1} V_{j-1} behind it
                s_beside_pv(s, acc, pa, desc_q, base, kb, jb, kb0)
                scores_to_p(s, m, lp, alpha, k0, tk, causal, row0, wg_row0, off, qsc, t)
                WAIT_O(acc)
                PIN_P(pa)
                rescale_and_pack(acc, alpha, s, pa)
            elif jb == kb_wg and jb > kb0:     # this warpgroup's last P V (V_{j-1} landed)
                pv_from(acc, pa, base, BUF - kb + V_OFF)

        if kb1 > kb0:                  # the last P V
            landed()
            if kb_wg == kb1:
                pv_from(acc, pa, base, ((kb1 - 1) % 2) * BUF + V_OFF)

        if piece < 0:
            epilogue(acc, m, lp, o, lse, h, row0, t, tq)
        else:
            epilogue_part(acc, m, lp, part_o, part_lse, piece * BR + row0 - q0, row0, t, tq)

    return hopper_forward


def _specialised(P):
    """Version 3: warp specialisation (FlashAttention-3). One producer warp, the block's last,
    copies K_j, V_j into a ring of 3 stages and, for each, makes the stage's "full" mbarrier
    complete once its copies have landed (cp.async.mbarrier.arrive.noinc); each consumer
    warpgroup loads its own 64 rows of Q, then waits only on "full" barriers and, once its
    P V product from a stage is finished, arrives on that stage's "empty" barrier, which
    the producer waits on before refilling it. No block-wide barrier after the start, so
    the warpgroups drift apart and one's softmax can fall into another's products. The
    consumers' loop is version 2's (S_j and P_{j-1} V_{j-1} in flight together).

    Version 4 (cfg.pipeline "producer", FlashAttention-3's producer warpgroup): the producer
    is a whole warpgroup of 128 threads (4x the copy issue of one warp), and `setmaxnreg`
    moves registers from it to the consumers (`HopperConfig.setmaxnreg`): the producer
    drops to 40-72 registers a thread and each consumer rises to 152-216, above the launch
    bound's share of the register file.

    Version 5 (cfg.pipeline "pingpong", FlashAttention-3's inter-warpgroup schedule): the
    consumer warpgroups take turns to issue their products, through a ring of named
    barriers (warpgroup w waits on barrier 4 + w, issues S_j and P_{j-1} V_{j-1}, then lets
    warpgroup w + 1 go), so one warpgroup's softmax runs while the next one's products
    occupy the tensor cores."""
    BR, BC = P.BR, P.BC
    Q_OFF, K_OFF, V_OFF, BUF, END, S = P.Q_OFF, P.K_OFF, P.V_OFF, P.BUF, P.END, P.STAGES
    DESC_KM, DESC_V, WG_Q = P.DESC_KM, P.DESC_V, P.WG_Q
    FENCE_O, WCOMMIT = P.FENCE_O, P.WCOMMIT
    WAIT_S, WAIT1_S, WAIT_O, PIN_P, PROXY, SADDR = (P.WAIT_S, P.WAIT1_S, P.WAIT_O, P.PIN_P,
                                                    P.PROXY, P.SADDR)
    COMMIT, WAIT = P.COMMIT, P.WAIT
    load_q_wg, load_k_prod, load_v_prod, GADDR = (P.load_q_wg, P.load_k_prod, P.load_v_prod,
                                                  P.GADDR)
    cfg = P.cfg
    PT = cfg.producer_threads
    PING = cfg.pipeline == "pingpong"
    NWG = cfg.warpgroups
    if PT == 128:                      # a producer warpgroup: it can hand registers over
        reg_p, reg_c = cfg.setmaxnreg()
        REG_DEC = wgmma.bare(f"setmaxnreg.dec.sync.aligned.u32 {reg_p};")
        REG_INC = wgmma.bare(f"setmaxnreg.inc.sync.aligned.u32 {reg_c};")
        SETREG = True
    else:
        REG_DEC = REG_INC = wgmma.bare("")
        SETREG = False
    scores_to_p, rescale_and_pack, epilogue = P.scores_to_p, P.rescale_and_pack, P.epilogue
    s_product, pv_product, pv_and_wait = P.s_product, P.pv_product, P.pv_and_wait
    mb = wgmma.mbarrier_ops()
    MB_INIT, MB_ARRIVE, MB_COPIES, MB_TRY, NAMED = (mb["init"], mb["arrive"],
                                                    mb["arrive_copies"], mb["try_wait"],
                                                    mb["named_barrier"])
    NAMED_ARRIVE = mb["named_arrive"]
    ROW_BYTES = 2 * P.D
    NC = BR * 2                        # consumer threads: 128 per warpgroup (Br = 64 each)
    MBAR = 4 * END                     # byte offset of the mbarriers: full[0..S), empty[0..S)
    STATE = state_arrays(P, True)

    def hopper_forward(q, k, v, o, lse, tq, tk, qscale, causal, off):
        sm = cuda.shared.array(0, uint32, alignment=16)
        tid = cuda.threadIdx.x
        h = cuda.blockIdx.y
        qb = cuda.blockIdx.x
        if causal != 0:
            qb = cuda.gridDim.x - 1 - qb
        q0 = qb * BR
        kbase = h * tk
        base = U(SADDR(sm, 0))
        n_kb = visible_key_blocks(tk, causal, q0 + BR + off, BC)
        if tid == 0:
            for i in range(S):
                MB_INIT(base + U(MBAR + 8 * i), PT)          # full: each producer thread
                MB_INIT(base + U(MBAR + 8 * (S + i)), NC)    # empty: every consumer thread
        cuda.syncthreads()             # the barriers exist; from here on, no block barrier

        if tid >= NC:                  # ---- the producer (a warp, or a warpgroup) ----
            if SETREG:
                REG_DEC()              # give registers back: the consumers take them
            lane = tid - NC
            gk = GADDR(k, 0) + U(kbase) * U(ROW_BYTES)
            gv = GADDR(v, 0) + U(kbase) * U(ROW_BYTES)
            for jb in range(n_kb):
                st = jb % S
                if jb >= S:            # wait until every consumer is done with the stage
                    par = ((jb // S) - 1) % 2
                    while MB_TRY(base + U(MBAR + 8 * (S + st)), par) == 0:
                        pass
                g1 = U(jb * BC) * U(ROW_BYTES)
                load_k_prod(base + U(4 * (st * BUF + K_OFF)), gk + g1, tk - jb * BC, lane, 0)
                load_v_prod(base + U(4 * (st * BUF + V_OFF)), gv + g1, tk - jb * BC, lane)
                MB_COPIES(base + U(MBAR + 8 * st))
            COMMIT()                   # then wait for the copies before the warp exits
            WAIT()
            return

        # ---- the consumer warpgroups ----
        if SETREG:
            REG_INC()
        wg = tid // 128
        t = tid % 4
        wg_row0 = q0 + 64 * wg
        row0 = wg_row0 + 16 * ((tid // 32) % 4) + (tid % 32) // 4
        qsc = -qscale if qscale < F0 else qscale
        desc_q = ((base + U(4 * Q_OFF) + U(wg) * WG_Q) >> U(4)) | DESC_KM
        load_q_wg(base + U(4 * Q_OFF) + U(wg) * WG_Q,
                  GADDR(q, 0) + U(h * tq + q0) * U(ROW_BYTES), tq - q0, tid % 128, 64 * wg)
        COMMIT()
        WAIT()
        PROXY()
        NAMED(1 + wg, 128)             # this warpgroup's Q is in shared memory

        acc, s, pa, m, lp, alpha = STATE()

        if PING and wg == NWG - 1:     # the last warpgroup lets the first one go first
            NAMED_ARRIVE(4, 256)
        for jb in range(n_kb):
            k0 = jb * BC
            st = jb % S
            while MB_TRY(base + U(MBAR + 8 * st), (jb // S) % 2) == 0:
                pass
            PROXY()
            desc_k = ((base + U(4 * (st * BUF + K_OFF))) >> U(4)) | DESC_KM
            if PING:                   # my turn to issue
                NAMED(4 + wg, 256)
            PIN_P(pa)
            FENCE_O(acc)
            s_product(s, desc_q, desc_k)
            WCOMMIT()
            if jb > 0:
                sp = (jb - 1) % S
                desc_v = ((base + U(4 * (sp * BUF + V_OFF))) >> U(4)) | DESC_V
                pv_product(acc, pa, desc_v)
                WCOMMIT()
                if PING:               # the next warpgroup's turn
                    NAMED_ARRIVE(4 + (wg + 1) % NWG, 256)
                WAIT1_S(s)
            else:
                if PING:
                    NAMED_ARRIVE(4 + (wg + 1) % NWG, 256)
                WAIT_S(s)
            scores_to_p(s, m, lp, alpha, k0, tk, causal, row0, wg_row0, off, qsc, t)
            WAIT_O(acc)
            PIN_P(pa)
            if jb > 0:                 # stage jb - 1: K and V both read
                MB_ARRIVE(base + U(MBAR + 8 * (S + (jb - 1) % S)))
            rescale_and_pack(acc, alpha, s, pa)

        if n_kb > 0:
            sp = (n_kb - 1) % S
            desc_v = ((base + U(4 * (sp * BUF + V_OFF))) >> U(4)) | DESC_V
            pv_and_wait(acc, pa, desc_v)

        epilogue(acc, m, lp, o, lse, h, row0, t, tq)

    return hopper_forward
