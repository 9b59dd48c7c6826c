"""tc_variants_backward_kernels: the tensor-core backward driven by a block mask.

The idea: the key-major backward of `tc_backward_kernels_async` (version 2: cp.async of
Q_i, dO_i into two shared buffers, ldmatrix fragments, m16n8k16 mma with fp32
accumulation, dK_j and dV_j in registers, dQ by fp32 reductions in global memory) with
the learner's mask_mod, score_mod and d score_mod / d score compiled into it as device
functions, as the variants forward does (`tensor_core.variants`). What changes against
the causal kernel:

  * which query blocks: thread block (key block j, key/value head) walks the block
    mask's TRANSPOSED lists for its key block (FlexAttention keeps them for this loop):
    full_q_indices[b, h, j] then q_indices[b, h, j]; empty query blocks are never
    loaded. The next visit's index is read while this one computes, so its cp.async
    copy is in flight as in version 2.
  * GQA without copies: the thread block of key/value head kvh walks the lists of every
    query head of its group (h = kvh G .. kvh G + G - 1) one after the other, so dK_j and
    dV_j, summed over the group, stay in its registers; K_j, V_j are read once.
  * the kernel's tiles may be smaller than the block mask's: Bc = 16 x warps keys divides
    the mask's key block, Br (query rows per step) divides its query block, and a listed
    query block is visited in Br-row steps. A step inherits its tile's state: no mask_mod
    call inside a full tile.
  * per score (S^T in the m16n8 C layout: key k0 + 16 warp + g (+ 8), query q0 + 8 n + 2 t
    (+ 1)), with x = scale q.k (natural-log units):
        hidden (partial tiles: mask_mod false; any tile: past Tq or Tk)   P = dS = 0
        else  P = exp2(score_mod(x) log2(e) - lse log2(e)),
              dS = P (dP - D) score_mod_grad(x)   (not called where P = 0)
    then dV += P^T dO, dK += dS^T Q, dQ += dS K as in version 2 (scale applied at the end).
    Rows with nothing visible (lse = -inf) have L = +inf from the pre-pass: P = 0.
  * sinks: nothing inside this kernel (a sink has no value and its logit is in lse); its
    gradient dsink_h = -sum_{b, i} exp(sink_h - lse_i) D_i is `make_sink_grad_kernel`'s.

Bytes per (key block, head) visit: Q_i, dO_i (2 Br d e, e = 2 bytes) and L, D (8 Br) in,
Br d 4 bytes of dQ reductions out; K_j, V_j once per thread block, dK_j, dV_j written once.
What limits it: as version 2 where tiles are full; on partial tiles one mask_mod call
per score, and score_mod and its derivative on every visible score (softcap: two tanh).

Run: through `tc_variants_backward.backward` (or `flashcourse.cuda.variants_backward`);
tests: `pytest tests/test_variants_tc_backward_sim.py`; on a GPU
`python benchmarks/gpu_variants.py --check --bench`.
"""

from __future__ import annotations

from numba import cuda, float32, uint32
from numba import uint64 as U

from ...constants import F0, LOG2E_F
from ...variants.mods import unchanged_score
from ..common._device import exp2_log2, inlined, lane_ids, mod_device
from ..ptx.mma import SIM_SCRATCH_PER_WARP
from ..ptx.smem_ops import ops as smem_ops
from ..tensor_core.tensor_core_kernels import _jit
from .tc_backward_kernels import LD_ROWS, _warp_sum
from .tc_backward_kernels_async import LINEAR_SHARED, v2_blocks


def make_variants_backward_kernel(cfg, mask_block, mask_mod, score_mod, score_grad):
    """The key-major kernel for one `tc_backward.TCBConfig` (pipeline "async", with_dq)
    and block-mask tiles mask_block = (Br', Bc') (cfg.block_q divides Br', 16 cfg.warps
    divides Bc'), with the three functions compiled in (score_mod None: no score change).

    Arguments: q, do flat uint32 words of (B Hq, Tq, D/2); k, v (B Hkv, Tk, D/2) words;
    ldw flat words of the pre-pass's (2, B Hq, Tq rounded up to LD_ROWS) float32 (lse
    log2(e), D); dq flat float32 (B Hq, Tq, d), zeroed; dk, dv (B Hkv, Tk, d) float32;
    Tq, Tk, d, Hq, G (query heads per K/V head) int32; scale float32; the block mask's
    q_num_blocks, q_indices, full_q_num_blocks, full_q_indices (int32). Grid
    (ceil(Tk / Bc), B Hkv), 32 warps threads."""
    so = smem_ops(cfg.simulator, LINEAR_SHARED)
    WAIT, exp2 = so["wait_all"], so["ex2"]
    MASK = mod_device(mask_mod)
    HAS_SCORE = score_mod is not None     # False: the calls below are skipped (and the
    SCORE = mod_device(score_mod if HAS_SCORE else unchanged_score)   # stand-ins still
    GRAD = mod_device(score_grad if HAS_SCORE else unchanged_score)   # type on a GPU)
    SIM = cfg.simulator
    NW, BR, BC, D, KV_REGS = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim, cfg.kv_regs
    _, _, NS, _, _, MQ, NQW = cfg.key_major_tiles()
    BRM, BCM = mask_block
    SUBQ = BRM // BR               # kernel steps per block-mask query block
    QS, LDR = cfg.row_stride, LD_ROWS
    _, _, LS, DS, _, _, _, BUF, _ = cfg.async_offsets()
    # the steps version 2 shares (`v2_blocks`); P^T and dS^T are this kernel's own
    # (mask_mod, score_mod and its derivative), and it takes no row sums
    blk = v2_blocks(cfg, so, exp2, None)
    KAREGS, OREGS, SREGS, QREGS = blk["regs"]
    SHARED, STORE, RED_V2, LOAD_Q = blk["shared"], blk["store"], blk["red_v2"], blk["load_q"]
    START_KV, ST_DPT, DV_DK = blk["start_kv"], blk["st_dpt"], blk["dv_dk"]
    DQ, DQ_STORE = blk["dq"], blk["dq_store"]

    @inlined
    def settle(q_num, full_num, bi, kvh, group, jm, gi, tv):
        # the first listed query block at or after (head gi of the group, entry tv)
        while gi < group:
            h = kvh * group + gi
            hi = h if q_num.shape[1] > 1 else 0
            if tv < full_num[bi, hi, jm] + q_num[bi, hi, jm]:
                return gi, tv
            gi += 1
            tv = 0
        return gi, 0

    @inlined
    def visit(q_idx, full_num, full_idx, bi, kvh, group, jm, gi, tv, sub):
        # (query head h, first query row q0, partial) of step sub of entry tv of head gi:
        # full query blocks first, then partial ones
        h = kvh * group + gi
        hi = h if full_num.shape[1] > 1 else 0
        n_full = full_num[bi, hi, jm]
        partial = tv >= n_full
        i = q_idx[bi, hi, jm, tv - n_full] if partial else full_idx[bi, hi, jm, tv]
        return h, i * BRM + sub * BR, partial

    @inlined
    def advance(q_num, full_num, bi, kvh, group, jm, tq, gi, tv, sub, q0):
        # the step after (gi, tv, sub) whose first row is q0: the next Br rows of the
        # same listed block if it has them, else the next listed block
        if sub + 1 < SUBQ and q0 + BR < tq:
            return gi, tv, sub + 1
        gi, tv = settle(q_num, full_num, bi, kvh, group, jm, gi, tv + 1)
        return gi, tv, 0

    @inlined
    def load_step(sm, q, do, ldw, nb_, hq, q0, tq, tqp, bhq, tid):
        # Q, dO rows q0 .. q0 + Br - 1 of query head hq (zeros past Tq) and their L, D
        # into the buffer at word nb_, as one cp.async group
        LOAD_Q(sm, nb_, QS, q, do, ldw, hq * tq, hq * tqp, (bhq + hq) * tqp, q0, tq, tid)

    def tc_variants_bwd(q, k, v, do, ldw, dq, dk, dv, tq, tk, d, n_heads, group, scale,
                        q_num, q_idx, full_num, full_idx):
        sm, smf, scr, _ = SHARED()   # smf: sm as float32; scr: the simulator's scratch
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        par = 0
        k0 = cuda.blockIdx.x * BC
        kvhead = cuda.blockIdx.y                 # b Hkv + kvh
        hkv = n_heads // group
        b = kvhead // hkv
        kvh = kvhead - b * hkv
        jm = k0 // BCM                           # the block mask's key block
        bi = b if q_num.shape[0] > 1 else 0      # the mask's B', H' may be 1
        bhq = cuda.gridDim.y * group             # B Hq: the D half of ldw starts there
        tqp = (tq + LDR - 1) // LDR * LDR
        kr0 = k0 + warp * 16 + g
        kr1 = kr0 + 8
        sl2 = scale * LOG2E_F                    # log2 units of a score without score_mod

        gi, tv = settle(q_num, full_num, bi, kvh, group, jm, 0, 0)
        sub = 0
        if gi < group:                           # the first step -> buffer 0
            h, q0, _ = visit(q_idx, full_num, full_idx, bi, kvh, group, jm, gi, tv, 0)
            load_step(sm, q, do, ldw, 0, b * n_heads + h, q0, tq, tqp, bhq, tid)

        # K_j, V_j (version 2's fragments and row-major tiles, once) and dK_j, dV_j, summed
        # in registers over every query head of the group
        ka = cuda.local.array(KAREGS, uint32)
        va = cuda.local.array(KAREGS, uint32)
        dka = cuda.local.array(OREGS, float32)
        dva = cuda.local.array(OREGS, float32)
        START_KV(sm, k, v, ka, va, dka, dva, kvhead, k0, kr0, kr1, tk, t, tid)
        s = cuda.local.array(SREGS, float32)     # S^T, dP^T; then P^T, dS^T with the variant
        dp = cuda.local.array(SREGS, float32)
        pa = cuda.local.array(4, uint32)
        dqa = cuda.local.array(QREGS, float32)

        nv = 0
        while gi < group:
            h, q0, partial = visit(q_idx, full_num, full_idx, bi, kvh, group, jm, gi, tv,
                                   sub)
            hq = b * n_heads + h
            qbase = hq * tq
            bo = (nv % 2) * BUF                  # this step's buffer
            WAIT()
            cuda.syncthreads()                   # step nv landed; the other buffer is free
            gn, tn, sn = advance(q_num, full_num, bi, kvh, group, jm, tq, gi, tv, sub, q0)
            if gn < group:                       # the next step -> the other buffer
                h1, q1, _ = visit(q_idx, full_num, full_idx, bi, kvh, group, jm, gn, tn,
                                  sn)
                load_step(sm, q, do, ldw, BUF - bo, b * n_heads + h1, q1, tq, tqp, bhq,
                          tid)

            # S^T = K_j Q_i^T, dP^T = V_j dO_i^T (version 2): two n8 tiles per ldmatrix.x4
            par = ST_DPT(sm, bo, ka, va, s, dp, scr, wbase, lane, par, warp, g, t)

            # P^T and dS^T with the variant: mask_mod on partial tiles only, the ragged
            # edges on any tile, score_mod and its derivative on every visible score
            edge = partial or k0 + BC > tk or q0 + BR > tq
            for n in range(NS):
                for e2 in range(2):
                    col = n * 8 + 2 * t + e2
                    qrow = q0 + col
                    lrow = smf[U(bo + LS + col)]
                    drow = smf[U(bo + DS + col)]
                    for hf in range(2):
                        j = 4 * n + 2 * hf + e2
                        key = kr0 + 8 * hf
                        x = s[j] * scale
                        seen = True
                        if edge:
                            seen = key < tk and qrow < tq
                            if seen and partial:
                                seen = MASK(b, h, qrow, key)
                        p = F0
                        ds = F0
                        if seen:
                            if HAS_SCORE:
                                y = float32(SCORE(x, b, h, qrow, key))
                                p = exp2(y * LOG2E_F - lrow)
                                if p != F0:
                                    ds = p * (dp[j] - drow) * \
                                        float32(GRAD(x, b, h, qrow, key))
                            else:      # as the built-in kernel: one FMA in the exponent
                                p = exp2(s[j] * sl2 - lrow)
                                ds = p * (dp[j] - drow)
                        s[j] = p
                        dp[j] = ds

            # dV_j += P^T dO_i, dK_j += dS^T Q_i (version 2), dS^T kept for dQ
            par = DV_DK(sm, bo, s, dp, pa, dva, dka, scr, wbase, lane, par, warp, g, t)

            # dQ_i += dS K_j (version 2), added to dQ of query head hq in global memory
            cuda.syncthreads()
            mq = warp % MQ
            nb = (warp // MQ) * NQW
            par = DQ(sm, dqa, scr, wbase, lane, par, mq, nb)
            DQ_STORE(dq, dqa, dqa, qbase, q0, tq, d, mq, nb, g, t, scale)
            gi, tv, sub = gn, tn, sn
            nv += 1

        STORE(dk, dv, dka, dva, kvhead, kr0, tk, d, t, scale)   # summed over the group

    tc_variants_bwd.__name__ = (f"tc_variants_bwd_{cfg.precision}_w{NW}_q{BR}_d{D}"
                                f"_m{BRM}x{BCM}" + ("" if KV_REGS else "_kvsh")
                                + ("" if RED_V2 else "_red1") + ("_sim" if SIM else ""))
    return _jit(tc_variants_bwd, cfg)


#: threads per block of the sink-gradient kernel
SINK_THREADS = 128


def make_sink_grad_kernel(simulator: bool):
    """dsink_h = -sum over b, i of exp(sink_h - lse_i) D_i (the sink's probability times
    its dP = 0, minus D): one block per query head h, its threads striding over the rows
    of every batch entry, the sums added by warps, then by thread 0 (deterministic; no
    atomics, no zeroing). Arguments: ldw (2, B Hq, Tq padded) float32 from the pre-pass
    (lse log2(e), +inf for a row with nothing visible, and D), sinks and dsinks (Hq,)
    float32, B, Hq, Tq int32. Grid Hq, SINK_THREADS threads."""
    exp2, _ = exp2_log2(simulator)
    warp_sum = _warp_sum(simulator)
    WARPS = SINK_THREADS // 32

    @cuda.jit
    def tc_sink_grad(ldw, sinks, dsinks, batch, n_heads, tq):
        part = cuda.shared.array(SINK_THREADS, float32)   # the simulator's warp sums
        tot = cuda.shared.array(WARPS, float32)
        h = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        sk = sinks[h] * LOG2E_F
        acc = F0
        for b in range(batch):
            hq = b * n_heads + h
            for i in range(tid, tq, SINK_THREADS):
                acc += exp2(sk - ldw[0, hq, i]) * ldw[1, hq, i]
        acc = warp_sum(acc, part, tid)
        if tid % 32 == 0:
            tot[tid // 32] = acc
        cuda.syncthreads()
        if tid == 0:
            total = F0
            for w in range(WARPS):
                total += tot[w]
            dsinks[h] = -total
    return tc_sink_grad
