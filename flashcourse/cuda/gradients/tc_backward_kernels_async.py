"""tc_backward_kernels_async: version 2 of the key-major tensor-core backward kernel.

Same maths, same work split and same contract as version 1 (`tc_backward_kernels.py`,
whose header explains the transposed products S^T = K Q^T, dP^T = V dO^T, dV += P^T dO,
dK += dS^T Q, dQ += dS K); what changes is how Q_i, dO_i reach the tensor cores:

  v1 "plain"  each query block is loaded by plain 32-bit loads into registers and stored
              to shared memory twice (row-major, and transposed-packed for the products
              whose k runs over queries), after a barrier and with nothing to overlap
              the global-memory latency; every B fragment is two 32-bit shared loads.
  v2 "async"  Q_i, dO_i (and the scaled lse, D of their rows) go global -> shared with
              `cp.async` (16 bytes per instruction, no registers) into one of TWO
              buffers, while the block computes on the other: the copy of query block
              i + 1 is issued right after the barrier that opens block i. Only the
              row-major copy exists: `ldmatrix.x4` reads the B fragments of two n8 tiles
              per instruction for S^T and dP^T, and `ldmatrix.x4.trans` transposes on the
              way for dV += P^T dO, dK += dS^T Q, and dQ += dS K (K_j row-major, loaded
              once). Rows past Tq arrive as zeros (src_size 0), with L = +inf and D = 0
              in the padded rows of the pre-pass's arrays, so they add nothing.

Shared memory (32-bit words; rows padded by 4 words = 16 bytes, so the 8 row addresses
of one ldmatrix tile fall in different bank groups): 2 x (Q_i, dO_i: Br x (D/2 + 4)),
2 x (L, D: Br floats), K_j row-major (Bc x (D/2 + 4)), dS^T rounded to 16 bits (Bc x
(Br/2 + 4): [key][query pair], written from the A fragments of dK += dS^T Q, read for
dQ += dS K by ldmatrix.trans); and, without kv_regs, V_j row-major.

Instruction economy (benchmarks/NOTES_tc_backward.md, "tuned"): Q, dO, lse/D and dQ are
passed flat (1-D) so every cp.async and every dQ add takes one unsigned index
(`red.global.add.f32`, not Numba's atomic with its signed-index wraparound), dQ adds of a
query block inside Tq skip the bounds checks, and P = ex2.approx.ftz(...). On sm_90 those
adds go two neighbouring columns per `red.global.add.v2.f32` (DQ_RED; 15% off the d = 128
kernel's time on the H200, results/h200_bwd_ab7_log.txt), and with cfg.out16 dK, dV leave
the kernel as fp16/bf16 words instead of float32 arrays cast afterwards.
"""

from __future__ import annotations

from numba import cuda, float32, uint32
from numba import uint64 as U

from ..common._device import key_block_order, lane_ids, shared_arrays, zero2
from ..common.tc_blocks import half_ops
from ..ptx.mma import SIM_SCRATCH_PER_WARP
from ..ptx.smem_ops import ops as smem_ops
from .tc_backward_blocks import (dq_tile_store, half_key_steps, key_blocks, query_tile_loader,
                                 visible_query_blocks)
from .tc_backward_kernels import LD_ROWS, _col_sum
from ..tensor_core.tensor_core_kernels import _jit

#: how K_j, V_j's A fragments of S^T, dP^T are read from shared memory when they are not
#: kept in registers (kv_regs=False, d > 64): "ldmatrix" (one ldmatrix.x4 per 16 x 16
#: tile) or "scalar" (four 32-bit loads per tile, the first version). Read when a kernel
#: is built; the two give the same bits.
KV_FRAGMENTS = "ldmatrix"
#: shared addresses as one converted start + 32-bit offsets (`smem_ops.intrinsics`), so
#: the constant part of each ldmatrix address is folded into the instruction; read when a
#: kernel is built (False: the generic form the forward kernels use)
LINEAR_SHARED = True
#: how dQ += dS K reads its A fragments from dS^T in shared memory: "ld_bt" (ld_bt's tile
#: order, a0, a2, a1, a3: ptxas adds four register moves per mma, 80 in the d = 128 loop)
#: or "ld_at" (ldmatrix.trans addressed so the registers arrive in the mma's order: no
#: moves, yet 1.5-3% SLOWER at all four d = 128 points of the H200 A/B,
#: results/h200_bwd_ab4_log.txt); read when a kernel is built; the same bits
DS_FRAGMENTS = "ld_bt"
#: how a block's dQ tile is added to dQ in global memory: "v2" (red.global.add.v2.f32, two
#: neighbouring columns per 8-byte reduction; PTX has it from sm_90 on), "scalar" (one
#: red.global.add.f32 per value) or "auto" (v2 on a GPU of compute capability 9.0 or more,
#: scalar on older GPUs and the simulator); read when a kernel is built. The v2 form serves
#: the tiles inside Tq with d = D (d a multiple of 16, so the pair's index is even); the
#: edge tiles add one value at a time
DQ_RED = "auto"


def dq_pairs(simulator: bool) -> bool:
    """DQ_RED's choice for a kernel built now: True for 8-byte pair reductions."""
    if DQ_RED == "auto":
        return not simulator and cuda.get_current_device().compute_capability >= (9, 0)
    return DQ_RED == "v2"


def dq_tile_adder(so, pairs: bool, simulator: bool):
    """add_dq(dq, i0, i1, x0, x1, x2, x3): the four values an mma C fragment holds of one
    n8 tile of dQ added to flat dq: x0, x1 at i0, i0 + 1 (row g), x2, x3 at i1, i1 + 1
    (row g + 8); two red.global.add.v2.f32 (pairs, i0 and i1 even) or four
    red.global.add.f32. Shared by the fp16/bf16 and the 3xTF32 kernels."""
    RED, RED2 = so["red_add"], so["red_add2"]

    def add_dq(dq, i0, i1, x0, x1, x2, x3):
        if pairs:
            RED2(dq, i0, x0, x1)
            RED2(dq, i1, x2, x3)
        else:
            RED(dq, i0, x0)
            RED(dq, i0 + U(1), x1)
            RED(dq, i1, x2)
            RED(dq, i1 + U(1), x3)
    return cuda.jit(device=True)(add_dq) if simulator else \
        cuda.jit(device=True, forceinline=True)(add_dq)


def v2_blocks(cfg, so, exp2, col_sum, kv_ldsm: bool = True, ds_at: bool = False) -> dict:
    """The device steps of a version-2 key-major kernel for cfg (fp16/bf16, pipeline
    "async"), shared by `make_key_major_async_kernel` and the variants backward
    (`tc_variants_backward_kernels`), with the sizes their bodies declare: "shared"
    (`_device.shared_arrays`), "load_a2", "p_ds", "sums", "store" (`key_blocks`; "sums"
    only with col_sum), "load_q", "next_q", "bases" (`query_tile_loader`'s load, step and
    bases), "load_kv", "st_dpt", "dv_dk", "dq" (`half_key_steps`), "dq_store"
    (`dq_tile_store`), "pack", "red_v2" (dQ adds in pairs: `dq_pairs`) and "regs": the
    register arrays' lengths (KAREGS, OREGS, SREGS, QREGS). so: `smem_ops.ops(simulator,
    LINEAR_SHARED)`.
    start_kv(sm, k, v, ka, va, dka, dva, h, k0, kr0, kr1, tk, t, tid): what a thread block
    does once for its key block k0 of head h: K_j, V_j's A fragments into ka, va (kv_regs;
    this lane's keys kr0, kr1 = kr0 + 8), K_j (and V_j) row-major into shared memory, and
    its dK_j, dV_j accumulators dka, dva zeroed."""
    SIM = cfg.simulator
    _, MMA_INTO, PACK = half_ops(SIM, cfg.precision)
    NW, BR, BC, D, NT = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim, cfg.threads
    DW, KT, NS, NO, KQ, MQ, NQW = cfg.key_major_tiles()
    QN, DON, LS, DS, KNO, VNO, DSO, BUF, _ = cfg.async_offsets()
    red_v2 = dq_pairs(SIM)
    loader = query_tile_loader(SIM, so["cp16"], so["commit"], BR, DW // 4, NT, DW,
                               (QN, DON, LS, DS), wait=so["wait_all"], buf=BUF, ldr=LD_ROWS)
    kbl = key_blocks(SIM, exp2, col_sum, KT, NS, NO)
    steps = half_key_steps(SIM, MMA_INTO, PACK, so["ld_a"], so["ld_b"], so["ld_bt"], kt=KT,
                           ns=NS, no=NO, kq=KQ, bc=BC, dw=DW, threads=NT, qs=cfg.row_stride,
                           dsh=cfg.dsh_stride, offsets=(QN, DON, KNO, VNO, DSO),
                           kv_regs=cfg.kv_regs, kv_ldsm=kv_ldsm, with_dq=cfg.with_dq, nqw=NQW,
                           ldat=so["ld_at"], ds_at=ds_at)
    LOAD_A2, LOAD_KV, KV_REGS, OREGS = kbl["load_a2"], steps["load_kv"], cfg.kv_regs, 4 * NO

    @(cuda.jit(device=True) if SIM else cuda.jit(device=True, forceinline=True))
    def start_kv(sm, k, v, ka, va, dka, dva, h, k0, kr0, kr1, tk, t, tid):
        if KV_REGS:                      # K_j, V_j's A fragments (registers)
            LOAD_A2(k, v, ka, va, h, kr0, kr1, tk, t)
        LOAD_KV(sm, k, v, h, k0, tk, tid)   # K_j (and V_j) row-major, once
        zero2(dka, dva, OREGS)

    return {**kbl, **steps, "pack": PACK, "red_v2": red_v2, "start_kv": start_kv,
            "shared": shared_arrays(SIM, SIM_SCRATCH_PER_WARP * NW),
            "load_q": loader["load"], "next_q": loader["step"], "bases": loader["bases"],
            "dq_store": dq_tile_store(SIM, so["red_add"], dq_tile_adder(so, red_v2, SIM),
                                      nqw=NQW, br=BR, d_pad=D),
            "regs": (4 * KT if cfg.kv_regs else 1, 4 * NO, 4 * NS, 4 * NQW)}


def make_key_major_async_kernel(cfg):
    so = smem_ops(cfg.simulator, LINEAR_SHARED)
    exp2 = so["ex2"]
    DS_AT = DS_FRAGMENTS == "ld_at"
    KV_LDSM = KV_FRAGMENTS == "ldmatrix"
    SIM = cfg.simulator
    NW, BR, BC, D = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim
    WITH_DQ, SUMS, KV_REGS, OUT16 = cfg.with_dq, cfg.sums, cfg.kv_regs, cfg.out16
    _, _, _, NO, _, MQ, NQW = cfg.key_major_tiles()
    QS = cfg.row_stride
    _, _, LS, DS, _, _, _, _, _ = cfg.async_offsets()
    block_of = key_block_order()       # _device.CAUSAL_KEY_ORDER
    SPAN = visible_query_blocks(SIM, BR)
    blk = v2_blocks(cfg, so, exp2, _col_sum(SIM), KV_LDSM, DS_AT)
    KAREGS, OREGS, SREGS, QREGS = blk["regs"]
    SHARED, PACK, RED_V2 = blk["shared"], blk["pack"], blk["red_v2"]
    P_DS, ROW_SUMS, STORE = blk["p_ds"], blk["sums"], blk["store"]
    LOAD_Q, NEXT_Q, BASES = blk["load_q"], blk["next_q"], blk["bases"]
    START_KV, ST_DPT, DV_DK = blk["start_kv"], blk["st_dpt"], blk["dv_dk"]
    DQ, DQ_STORE = blk["dq"], blk["dq_store"]

    def tc_bwd_key_major_async(q, k, v, do, ldw, dq, dk, dv, tq, tk, d, qscale, scale,
                               causal, off, psum, dsum):
        # q, do: (BH, Tq, D/2) words and dq (BH, Tq, d) float32, FLAT (1-D): one unsigned
        # index per access, no stride products. ldw: (2, BH, Tq padded to LD_ROWS) words,
        # flat: [0] = lse log2(e) (+inf: no key, padding), [1] = D. cp.async and ldmatrix
        # need 16-byte aligned shared addresses. dk, dv (BH, Tk, d) float32, or with
        # cfg.out16 (BH, Tk, d/2) uint32 words of two fp16/bf16 values (the output dtype,
        # rounded as cvt.rn does, so no cast pass follows).
        sm, smf, scr, _ = SHARED()   # smf: sm as float32; scr: the simulator's scratch
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        par = 0
        kb, h = block_of(causal)
        k0 = kb * BC
        # row 0 of this head's Q, dO, dQ; of its lse log2(e) and D in ldw
        qbase, lbase, dbase = BASES(h, cuda.gridDim.y, tq)
        kr0 = k0 + warp * 16 + g                 # this lane's keys: kr0 and kr1
        kr1 = kr0 + 8
        qb0, n_qb = SPAN(k0, tq, causal, off)    # the query blocks that see key block k0

        # query block qb0 -> buffer 0, in flight while K_j, V_j are loaded
        if qb0 < n_qb:
            LOAD_Q(sm, 0, QS, q, do, ldw, qbase, lbase, dbase, qb0 * BR, tq, tid)

        ka = cuda.local.array(KAREGS, uint32)    # K_j, V_j's A fragments (kv_regs)
        va = cuda.local.array(KAREGS, uint32)
        dka = cuda.local.array(OREGS, float32)   # dK_j, dV_j: 16 keys x D per warp
        dva = cuda.local.array(OREGS, float32)
        START_KV(sm, k, v, ka, va, dka, dva, h, k0, kr0, kr1, tk, t, tid)
        s = cuda.local.array(SREGS, float32)     # S^T -> P^T, dP^T -> dS^T (16 keys x Br)
        dp = cuda.local.array(SREGS, float32)
        pa = cuda.local.array(4, uint32)          # one k16 step of P^T / dS^T as A
        dqa = cuda.local.array(QREGS, float32)   # this warp's piece of dQ_i (WITH_DQ)

        for qb in range(qb0, n_qb):
            # block qb landed (in buffer bo); block qb + 1 -> the other buffer
            q0, bo = NEXT_Q(sm, qb, qb0, n_qb, QS, q, do, ldw, qbase, lbase, dbase, tq, tid)

            # S^T = K_j Q_i^T, dP^T = V_j dO_i^T: two n8 tiles per ldmatrix.x4
            par = ST_DPT(sm, bo, ka, va, s, dp, scr, wbase, lane, par, warp, g, t)

            # P^T = exp2(S^T qscale - L) (L = +inf in padded rows), dS^T = P^T (dP^T - D)
            edge = k0 + BC > tk or (causal != 0 and k0 + BC - 1 > q0 + off)
            P_DS(s, dp, smf, bo + LS, bo + DS, qscale, edge, kr0, tk, tq, causal, q0, off, t)
            if SUMS:
                ROW_SUMS(s, dp, psum, dsum, h, q0, tq, g, t)

            # dV_j += P^T dO_i, dK_j += dS^T Q_i: B by ldmatrix.trans of the row-major tiles
            par = DV_DK(sm, bo, s, dp, pa, dva, dka, scr, wbase, lane, par, warp, g, t)

            if WITH_DQ:
                # dQ_i += dS K_j: A from dS^T in shared memory, B = K_j by ldmatrix.trans;
                # this warp's piece added to dQ in global memory (red.global.add)
                cuda.syncthreads()
                mq = warp % MQ                  # this warp's 16 rows of the query block
                nb = (warp // MQ) * NQW         # and its first n8 tile of dQ's columns
                par = DQ(sm, dqa, scr, wbase, lane, par, mq, nb)
                DQ_STORE(dq, dqa, dqa, qbase, q0, tq, d, mq, nb, g, t, scale)

        if OUT16:                               # two 16-bit values per word (d even)
            for n in range(NO):
                for hf in range(2):
                    key = kr0 + 8 * hf
                    c = n * 8 + 2 * t
                    if key < tk and c < d:
                        j = 4 * n + 2 * hf
                        dk[U(h), U(key), U(c // 2)] = PACK(dka[j] * scale,
                                                           dka[j + 1] * scale)
                        dv[U(h), U(key), U(c // 2)] = PACK(dva[j], dva[j + 1])
        else:
            STORE(dk, dv, dka, dva, h, kr0, tk, d, t, scale)

    tc_bwd_key_major_async.__name__ = (f"tc_bwd_kv_async_{cfg.precision}_w{NW}_q{BR}_d{D}"
                                       + ("_dq" if WITH_DQ else "")
                                       + ("_sums" if SUMS else "")
                                       + ("" if KV_REGS else "_kvsh")
                                       + ("" if KV_REGS or KV_LDSM else "_scalar")
                                       + ("_dsat" if DS_AT and WITH_DQ else "")
                                       + ("_o16" if OUT16 else "")
                                       + ("" if RED_V2 or not WITH_DQ else "_red1")
                                       + ("_sim" if SIM else ""))
    return _jit(tc_bwd_key_major_async, cfg)

