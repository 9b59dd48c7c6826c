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

from ...constants import F0, F1, FULL_MASK, RESCALE_THRESHOLD
from ..common._device import lane_ids, reset_state, shared_arrays, visible_key_blocks
from ..common.tc_blocks import cp_async_rows, epilogue_blocks, half_blocks, softmax_blocks
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
    QREGS, OREGS, SREGS = 4 * KT * MT, 4 * NO * MT, 4 * NS * MT
    ROWS = 2 * MT
    PAREGS = 4 * MT
    SIM = cfg.simulator
    LAZY = cfg.lazy_rescale
    TH = float32(RESCALE_THRESHOLD)
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    RED = NT if SIM else 1
    SHARED = shared_arrays(SIM, SCR, RED)
    smx = softmax_blocks(SIM, exp2, quad_max, MT, NS, NO, BC, LAZY, TH)
    MASK, ROW_MAX, ROW_EXP = smx["mask"], smx["row_max"], smx["row_exp"]
    STORE = epilogue_blocks(SIM, log2, quad_sum, MT, NO, PACK)["half"]
    hb = half_blocks(SIM, MMA, LDB, MT, KT, NS)
    LOAD_Q, QK = hb["load_q"], hb["qk"]
    COPY_KV = cp_async_rows(SIM, CP16, BC, CH, NT, DW, True)["copy"]

    def tc_half_forward_async(q, k, v, o, lse, tq, tk, qscale, causal, off):
        # k, v: (BH, Tk, D/2) words FLAT (1-D): one unsigned index per 16-byte copy
        sm, _, scr, red = SHARED()   # (scr, red: the simulator's scratch)
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
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
            COPY_KV(sm, K_OFF, V_OFF, KS, k, v, kbase, 0, tk, tid)
            COMMIT()

        qa = cuda.local.array(QREGS, uint32)     # Q's A fragments, loaded once
        LOAD_Q(q, qa, h, wrow, tq, t, qsign)

        acc = cuda.local.array(OREGS, float32)   # O, unnormalised: MT m16 tiles x D
        s = cuda.local.array(SREGS, float32)     # S, then P, of this key block
        m = cuda.local.array(ROWS, float32)      # the rows' running max (log2 units)
        lp = cuda.local.array(ROWS, float32)     # and this lane's part of their sums
        alpha = cuda.local.array(ROWS, float32)  # O's rescale (1 where a max is kept)
        mu = cuda.local.array(ROWS, float32)     # the max in use (0: nothing seen yet)
        pa = cuda.local.array(PAREGS, uint32)    # P rounded to 16 bits, one k16 step
        reset_state(acc, OREGS, m, lp, ROWS)

        for jb in range(n_kb):
            k0 = jb * BC
            bo = (jb % 2) * BUF
            WAIT()
            cuda.syncthreads()         # block jb landed; the other buffer is free
            if jb + 1 < n_kb:
                k1 = k0 + BC
                nb = BUF - bo
                COPY_KV(sm, nb + K_OFF, nb + V_OFF, KS, k, v, kbase, k1, tk, tid)
                COMMIT()

            # S = Q K^T: one ldmatrix.x4 gives the B fragments of two n8 tiles
            par = QK(sm, bo + K_OFF, KS, lane, scr, wbase, par, qa, s)

            # masks and the online softmax: as version 1
            sc = MASK(s, k0, tk, causal, q0, off, wrow, t, qsc)
            ROW_MAX(s, m, mu, alpha, sc, red, tid)
            # O *= alpha: lazily, only when some row of the warp moved its max (on the
            # simulator, which has no warp votes, always: alpha = 1 leaves acc exact)
            resc = True
            if LAZY and not SIM:
                ch = False
                for ri in range(ROWS):
                    ch = ch or alpha[ri] != F1
                resc = cuda.any_sync(FULL_MASK, ch)
            ROW_EXP(s, acc, mu, alpha, lp, sc, resc)

            # O += P V: ldmatrix.x4.trans of the row-major V tile gives two n8 B fragments
            par = PV(sm, bo + V_OFF, KS, lane, scr, wbase, par, s, pa, acc, KP, MT, NS, NO)

        STORE(o, lse, acc, m, lp, h, wrow, tq, t, red, tid)

    tc_half_forward_async.__name__ = (f"tc_{cfg.precision}_async_w{NW}_k{BC}_d{D}_m{MT}"
                                      + ("_lazy" if LAZY else "") + ("_sim" if SIM else ""))
    return _jit(tc_half_forward_async, cfg)
