"""tensor_core_kernels_async: version 2 of the fp16/bf16 tensor-core forward.

Same maths, work split and contract as `tensor_core_kernels.make_half_kernel` (whose
header explains split-Q, the online softmax on accumulator fragments and P reused as the
A operand of P V). What changes is how K_j and V_j reach the tensor cores:

  v1 (prefetch=True)   the next key block is loaded into registers (32-bit loads) while
                       this one computes, then stored to shared memory after a barrier:
                       K row-major, V transposed-packed (two keys per word, re-paired
                       from two rows' words), every B fragment two 32-bit shared loads.
  v2 (pipeline="async") K_j, V_j go global -> shared with `cp.async` (16 bytes per
                       instruction, no registers held) into one of two buffers while the
                       warps compute on the other; both stay row-major: `ldmatrix.x4`
                       reads the B fragments of two n8 tiles of S = Q K^T per instruction,
                       `ldmatrix.x4.trans` those of O += P V (V's k runs along its rows:
                       the load transposes). Keys past Tk arrive as zeros (src_size 0).

The same building blocks run the tensor-core backward's version 2
(`tc_backward_kernels_async.py`), measured there at 1.4-1.6x its version 1 on an H200.
It is the default for fp16/bf16 (`tensor_core.default_tiles`): on an H200 it measured
1.3-4.8x version 1 at the same tiles (benchmarks/NOTES_tensor_core.md). The exponentials
are `ex2.approx.ftz` (one instruction; `math.exp2` adds a rescale for results below 2^-126)
and K, V arrive flat (1-D), one unsigned index per copy.

lazy_rescale (an option, off by default): FlashAttention-4's lazy rescale as in the Hopper
kernel (a row keeps its max until a score passes it by `constants.RESCALE_THRESHOLD`; O is
rescaled only when `cuda.any_sync` says some row of the warp moved; the simulator, which has
no warp votes, always rescales, exact since alpha = 1 for a kept max). It paid on Hopper,
where O's rescale waits on the asynchronous wgmma; here O's multiplies interleave with P V's
mma and cost little, while the branch around them stops that: the same run measured it at
0.81-0.93x the speed of rescaling every block (results/h200_bars_lazy_ab_log.txt).

Shared memory: 2 buffers x (K_j, V_j: Bc x (D/2 + 4) words); the 4-word pad puts the 8
row addresses of one ldmatrix tile in different bank groups.
"""

from __future__ import annotations

from numba import cuda, float32, uint32
from numba import uint64 as U

from ...constants import F0, F1, FULL_MASK, LN2_F, NEG_INF, RESCALE_THRESHOLD
from ..common._device import reset_state, visible_key_blocks
from ..ptx.mma import SIM_SCRATCH_PER_WARP, device_ops
from ..ptx.smem_ops import ops as smem_ops
from .tensor_core_kernels import SIGN2, Z32, _jit, _pv_ldmatrix, _row_ops


def make_half_async_kernel(cfg):
    ops = device_ops(cfg.simulator)
    MMA = ops["mma_fp16"] if cfg.precision == "fp16" else ops["mma_bf16"]
    PACK = ops["pack_fp16"] if cfg.precision == "fp16" else ops["pack_bf16"]
    so = smem_ops(cfg.simulator)
    LDB, LDBT, CP16, COMMIT, WAIT = so["ld_b"], so["ld_bt"], so["cp16"], so["commit"], \
        so["wait_all"]
    PV = _pv_ldmatrix(MMA, PACK, LDBT, cfg.simulator)
    _, log2, quad_max, quad_sum = _row_ops(cfg)
    exp2 = so["ex2"]               # ex2.approx.ftz: one instruction (math.exp2: three more)
    NW, BR, BC, D, NT = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim, cfg.threads
    MT = cfg.m_tiles
    DW = D // 2
    KT = D // 16
    NS = BC // 8
    NO = D // 8
    KP = BC // 16
    KS = cfg.k_stride              # row stride of K and V (words)
    K_OFF, V_OFF, BUF, _ = cfg.async_offsets()
    CH = DW // 4                   # 16-byte chunks per row
    LOADS = -(-(BC * CH) // NT)    # chunks of K (and of V) per thread per key block
    QREGS, OREGS, SREGS = 4 * KT * MT, 4 * NO * MT, 4 * NS * MT
    ROWS = 2 * MT
    PAREGS = 4 * MT
    SIM = cfg.simulator
    LAZY = cfg.lazy_rescale
    TH = float32(RESCALE_THRESHOLD)
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    RED = NT if SIM else 1

    def tc_half_forward_async(q, k, v, o, lse, tq, tk, qscale, causal, off):
        # k, v: (BH, Tk, D/2) words FLAT (1-D): one unsigned index per 16-byte copy
        if SIM:
            sm = cuda.shared.array(0, uint32)
            scr = cuda.shared.array(SCR, float32)
            red = cuda.shared.array(RED, float32)
        else:
            sm = cuda.shared.array(0, uint32, alignment=16)
            scr = cuda.shared.array(0, float32, alignment=16)   # unused on a GPU
            red = scr
        tid = cuda.threadIdx.x
        warp = tid // 32
        lane = tid % 32
        g = lane // 4
        t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        h = cuda.blockIdx.y
        kbase = h * tk                 # row 0 of this head's K and V
        q0 = cuda.blockIdx.x * BR
        wrow = q0 + warp * 16 * MT + g
        par = 0
        qsign = SIGN2 if qscale < F0 else Z32
        qsc = -qscale if qscale < F0 else qscale

        n_kb = visible_key_blocks(tk, causal, q0 + BR + off, BC)
        if n_kb > 0:                   # key block 0 -> buffer 0, in flight during Q's loads
            for it in range(LOADS):
                e = tid + NT * it
                if e < BC * CH:
                    r = e // CH
                    c = (e - r * CH) * 4
                    ok = r < tk
                    src = r if ok else 0
                    gi = U(kbase + src) * U(DW) + U(c)
                    CP16(sm, U(K_OFF + r * KS + c), k, gi, 16 if ok else 0)
                    CP16(sm, U(V_OFF + r * KS + c), v, gi, 16 if ok else 0)
            COMMIT()

        qa = cuda.local.array(QREGS, uint32)
        for mt in range(MT):
            r0 = wrow + 16 * mt
            r1 = r0 + 8
            for kk in range(KT):
                w0 = kk * 8 + t
                base = 4 * (mt * KT + kk)
                qa[base + 0] = (q[U(h), U(r0), U(w0)] if r0 < tq else Z32) ^ qsign
                qa[base + 1] = (q[U(h), U(r1), U(w0)] if r1 < tq else Z32) ^ qsign
                qa[base + 2] = (q[U(h), U(r0), U(w0 + 4)] if r0 < tq else Z32) ^ qsign
                qa[base + 3] = (q[U(h), U(r1), U(w0 + 4)] if r1 < tq else Z32) ^ qsign

        acc = cuda.local.array(OREGS, float32)
        s = cuda.local.array(SREGS, float32)
        m = cuda.local.array(ROWS, float32)
        lp = cuda.local.array(ROWS, float32)
        alpha = cuda.local.array(ROWS, float32)
        mu = cuda.local.array(ROWS, float32)
        pa = cuda.local.array(PAREGS, uint32)
        reset_state(acc, OREGS, m, lp, ROWS)

        for jb in range(n_kb):
            k0 = jb * BC
            bo = (jb % 2) * BUF
            WAIT()
            cuda.syncthreads()         # block jb landed; the other buffer is free
            if jb + 1 < n_kb:
                k1 = k0 + BC
                nb = BUF - bo
                for it in range(LOADS):
                    e = tid + NT * it
                    if e < BC * CH:
                        r = e // CH
                        c = (e - r * CH) * 4
                        key = k1 + r
                        ok = key < tk
                        src = key if ok else 0
                        gi = U(kbase + src) * U(DW) + U(c)
                        CP16(sm, U(nb + K_OFF + r * KS + c), k, gi, 16 if ok else 0)
                        CP16(sm, U(nb + V_OFF + r * KS + c), v, gi, 16 if ok else 0)
                COMMIT()

            # S = Q K^T: one ldmatrix.x4 gives the B fragments of two n8 tiles
            for i in range(SREGS):
                s[i] = F0
            for kk in range(KT):
                for n2 in range(NS // 2):
                    n = 2 * n2
                    b0, b1, b2, b3 = LDB(sm, U(bo + K_OFF + (n * 8) * KS + kk * 8), KS, lane)
                    for mt in range(MT):
                        qb = 4 * (mt * KT + kk)
                        sb = 4 * (mt * NS + n)
                        x0, x1, x2, x3 = MMA(scr, wbase, lane, par, qa[qb], qa[qb + 1],
                                             qa[qb + 2], qa[qb + 3], b0, b1,
                                             s[sb], s[sb + 1], s[sb + 2], s[sb + 3])
                        par = 1 - par
                        s[sb] = x0
                        s[sb + 1] = x1
                        s[sb + 2] = x2
                        s[sb + 3] = x3
                        x0, x1, x2, x3 = MMA(scr, wbase, lane, par, qa[qb], qa[qb + 1],
                                             qa[qb + 2], qa[qb + 3], b2, b3,
                                             s[sb + 4], s[sb + 5], s[sb + 6], s[sb + 7])
                        par = 1 - par
                        s[sb + 4] = x0
                        s[sb + 5] = x1
                        s[sb + 6] = x2
                        s[sb + 7] = x3

            # masks and the online softmax: as version 1
            sc = qsc
            if k0 + BC > tk or (causal != 0 and k0 + BC - 1 > q0 + off):
                for mt in range(MT):
                    for n in range(NS):
                        for i in range(4):
                            col = k0 + n * 8 + 2 * t + (i % 2)
                            row = wrow + 16 * mt + 8 * (i // 2)
                            j = 4 * (mt * NS + n) + i
                            if col >= tk or (causal != 0 and col > row + off):
                                s[j] = NEG_INF
                            else:
                                s[j] = s[j] * qsc
                sc = F1
            for mt in range(MT):
                for hf in range(2):
                    x = NEG_INF
                    for n in range(NS):
                        sb = 4 * (mt * NS + n) + 2 * hf
                        x = max(x, max(s[sb], s[sb + 1]))
                    x = quad_max(x, red, tid) * sc
                    ri = 2 * mt + hf
                    mo = m[ri]
                    mn = max(mo, x)
                    if LAZY and mn <= mo + TH:
                        mn = mo            # keep the old max: P <= 2^TH, alpha = 1
                    mu[ri] = mn if mn != NEG_INF else F0
                    alpha[ri] = F1 if LAZY and mn == mo else exp2(mo - mu[ri])
                    m[ri] = mn
            # O *= alpha: lazily, only when some row of the warp moved its max (on the
            # simulator, which has no warp votes, always: alpha = 1 leaves acc exact)
            resc = True
            if LAZY and not SIM:
                ch = False
                for ri in range(ROWS):
                    ch = ch or alpha[ri] != F1
                resc = cuda.any_sync(FULL_MASK, ch)
            for mt in range(MT):
                for hf in range(2):
                    ri = 2 * mt + hf
                    ps = F0
                    for n in range(NS):
                        sb = 4 * (mt * NS + n) + 2 * hf
                        p = exp2(s[sb] * sc - mu[ri])
                        s[sb] = p
                        ps += p
                        p = exp2(s[sb + 1] * sc - mu[ri])
                        s[sb + 1] = p
                        ps += p
                    lp[ri] = lp[ri] * alpha[ri] + ps
                    if resc:
                        for n in range(NO):
                            ob = 4 * (mt * NO + n) + 2 * hf
                            acc[ob] *= alpha[ri]
                            acc[ob + 1] *= alpha[ri]

            # O += P V: ldmatrix.x4.trans of the row-major V tile gives two n8 B fragments
            par = PV(sm, bo + V_OFF, KS, lane, scr, wbase, par, s, pa, acc, KP, MT, NS, NO)

        for mt in range(MT):
            for hf in range(2):
                ri = 2 * mt + hf
                lt = quad_sum(lp[ri], red, tid)
                inv = F1 / lt if lt != F0 else F0
                row = wrow + 16 * mt + 8 * hf
                if row < tq:
                    for n in range(NO):
                        ob = 4 * (mt * NO + n) + 2 * hf
                        o[U(h), U(row), U(n * 4 + t)] = PACK(acc[ob] * inv, acc[ob + 1] * inv)
                    if t == 0:
                        lse[U(h), U(row)] = (m[ri] + log2(lt)) * LN2_F if lt != F0 else NEG_INF

    tc_half_forward_async.__name__ = (f"tc_{cfg.precision}_async_w{NW}_k{BC}_d{D}_m{MT}"
                                      + ("_lazy" if LAZY else "") + ("_sim" if SIM else ""))
    return _jit(tc_half_forward_async, cfg)
