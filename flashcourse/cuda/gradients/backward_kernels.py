"""The backward pass of attention on a CUDA GPU (Numba), fp32, with recomputation.

The forward kept O (Tq, d) and the per-row logsumexp L = lse (Tq,), not P. Every
kernel here recomputes P tile by tile as P_ij = exp(S_ij - L_i), exactly, and uses
D_i = rowsum(dO_i * O_i) in place of sum_j P_ij dP_ij (notebook 09 derives both).

Kernel versions, side by side (same contract, all validated against
`flashcourse.reference.attention_backward` in float64 before they are timed):

  0. delta            D = rowsum(dO * O): one thread per query row. Reads 2 Tq d 4 B,
                      writes Tq 4 B. Every version below runs it first, and adds up each
                      recomputed row of P and of dS (psum, dsum: the lse and o checks of
                      `flashcourse.cuda.backward`, `_guards.lse_rowsums` / `o_rowsums`).
  1. "simple"         the textbook version, two launches, no shared memory:
                      simple_dkdv: one thread per KEY row j loops over all visible
                        query rows i: s = scale q_i.k_j, p = exp(s - L_i),
                        dV_j += p dO_i, dS = p (dO_i.v_j - D_i), dK_j += scale dS q_i.
                      simple_dq: one thread per QUERY row i loops over the keys and
                        recomputes s, p, dP, dS to get dQ_i = scale sum_j dS_ij k_j.
                      Each thread re-reads whole rows of Q/dO (or K/V) from global
                      memory for every pair: ~ 4 Tq Tk d 4 B of loads, served by the
                      caches at best. Correct, slow, no atomics, d <= 256.
  2. "fast"           FlashAttention-2's backward. One thread block per (key block j
                      of Bc rows, head). K_j, V_j are loaded into shared memory once;
                      dK_j, dV_j accumulate in registers (each thread owns a micro-tile
                      of AR x AD elements) while the block loops over the visible query
                      blocks i (Br rows): load Q_i, dO_i, L_i, D_i; compute the (Br, Bc)
                      tiles S and dP in registers (MR x MC per thread), P = exp(S - L),
                      dS = P (dP - D); put P and dS in shared memory; then
                      dV_j += P^T dO_i, dK_j += dS^T Q_i (registers) and
                      dQ_i += scale dS K_j, added to global memory with fp32 atomic adds
                      (several key blocks add into the same dQ_i concurrently).
                      Bytes: K, V once (2 Tk d 4 B); Q_i, dO_i per visible pair
                      (2 Tq d 4 B x Tc, mostly from L2); dQ atomics Tq d 4 B x Tc.
  3. "fast_two_pass"  the same key-major kernel without the dQ atomics, then a second,
                      query-major kernel (one block per query block i) that keeps dQ_i in
                      registers while it loops over key blocks, recomputing S and dP:
                      no atomics (deterministic dQ) for 4 Tq Tk d more FLOPs (14 instead
                      of 10 Tq Tk d) and a second sweep over K and V.

What limits the fast kernels: five (Br x Bc x d) matrix products per tile pair from
shared memory. A thread does MR*MC FMAs per (MR + MC) shared loads in the S/dP loops
and AR*AD per (AR + AD) in the dV/dK loops: shared-memory bandwidth caps them near
half the fp32 FMA peak, before barriers, exp and atomics.

How to run
    from flashcourse.cuda import backward
    dq, dk, dv = backward(q, k, v, o, lse, do, kernel="fast", causal=True)   # numpy
    python benchmarks/gpu_backward.py --out DIR                              # on a GPU

Simulator-safe: no warp shuffles; float32 constants; every `cuda.local.array` is
indexed by compile-time constants (loops over range(CONSTANT)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from ..._checks import check_choice
from ...geometry import ceil_div
from ...gpu import using_simulator
from ...limits import check_launch
from ...constants import F0, NEG_INF
from ..common._device import inlined, visible_key_blocks, zero2
from ..common._launch import launch

#: Largest head dimension the simple kernels support (their local arrays are this long).
SIMPLE_MAX_D = 256
#: Below this head dimension the simple kernels are compiled with local arrays of this
#: length (what was measured on the H200); above it, with SIMPLE_MAX_D.
SIMPLE_SMALL_D = 128
#: The versions `run` launches (registered in flashcourse.cuda.registry).
VERSIONS = ("simple", "fast", "fast_two_pass")


# ---------------------------------------------------------------------------
# Signatures (fp32, C-contiguous (BH, T, d) arrays)
# ---------------------------------------------------------------------------

_SIGS: dict = {}


def _sig(name):
    if name not in _SIGS:
        from numba import float32, int32, types
        a3 = types.Array(float32, 3, "C")
        a2 = types.Array(float32, 2, "C")
        _SIGS.update({
            # o, do, delta, dq, zero_dq, tq, d, psum, dsum
            "delta": (a3, a3, a2, a3, int32, int32, int32, a2, a2),
            # q, k, v, do, lse, delta, out_a, out_b, tq, tk, d, scale, causal, off
            "simple_dkdv": (a3, a3, a3, a3, a2, a2, a3, a3, int32, int32, int32, float32,
                            int32, int32),
            "simple_dq": (a3, a3, a3, a3, a2, a2, a3, int32, int32, int32, float32, int32,
                          int32, a2, a2),
            # q, k, v, do, lse, delta, dq, dk, dv, tq, tk, d, scale, causal, off, psum, dsum
            "fast_kv": (a3, a3, a3, a3, a2, a2, a3, a3, a3, int32, int32, int32, float32,
                        int32, int32, a2, a2),
            # q, k, v, do, lse, delta, dq, tq, tk, d, scale, causal, off
            "fast_q": (a3, a3, a3, a3, a2, a2, a3, int32, int32, int32, float32, int32,
                       int32),
        })
    return _SIGS[name]


# ---------------------------------------------------------------------------
# 0. D = rowsum(dO * O) and 1. the simple kernels
# ---------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _simple_kernels(max_d: int = SIMPLE_SMALL_D):
    """(delta, simple_dkdv, simple_dq) with per-thread accumulators of max_d floats."""
    MAXD = max_d

    @cuda.jit
    def bwd_delta(o, do, delta, dq, zero_dq, tq, d, psum, dsum):
        """D[h, i] = sum_c dO[h, i, c] O[h, i, c]; one thread per query row i.

        With zero_dq != 0 it also sets dQ[h, i, :] = 0, ready for atomic adds. It sets
        psum[h, i] = 0 and dsum[h, i] = 0: the kernels below add each recomputed row of
        P and of dS into them (the lse check: a row of P sums to 1 only if lse belongs
        to q, k, causal, scale; the o check: a row of dS = P (dP - D) sums to
        dO_i . (P V - O)_i, 0 only if o is P V).
        """
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        h = cuda.blockIdx.y
        if i < tq:
            acc = F0
            for c in range(d):
                acc += do[h, i, c] * o[h, i, c]
                if zero_dq != 0:
                    dq[h, i, c] = F0
            delta[h, i] = acc
            psum[h, i] = F0
            dsum[h, i] = F0

    @cuda.jit
    def simple_dkdv(q, k, v, do, lse, delta, dk, dv, tq, tk, d, scale, causal, off):
        """One thread per key row j: dV_j = sum_i P_ij dO_i, dK_j = scale sum_i dS_ij q_i."""
        j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        h = cuda.blockIdx.y
        if j >= tk:
            return
        adk = cuda.local.array(MAXD, float32)      # dK_j accumulator (d,)
        adv = cuda.local.array(MAXD, float32)      # dV_j accumulator (d,)
        for c in range(d):
            adk[c] = F0
            adv[c] = F0
        i0 = 0
        if causal != 0:
            i0 = max(0, j - off)                           # first query row that sees key j
        for i in range(i0, tq):
            li = lse[h, i]
            if li == NEG_INF:                              # row with no visible key: P = 0
                continue
            s = F0
            dp = F0
            for c in range(d):
                s += q[h, i, c] * k[h, j, c]
                dp += do[h, i, c] * v[h, j, c]
            p = math.exp(s * scale - li)                   # recomputed P_ij, exact
            ds = p * (dp - delta[h, i])                    # dS_ij = P_ij (dP_ij - D_i)
            for c in range(d):
                adv[c] += p * do[h, i, c]
                adk[c] += ds * q[h, i, c]
        for c in range(d):
            dk[h, j, c] = adk[c] * scale
            dv[h, j, c] = adv[c]

    @cuda.jit
    def simple_dq(q, k, v, do, lse, delta, dq, tq, tk, d, scale, causal, off, psum, dsum):
        """One thread per query row i: dQ_i = scale sum_j dS_ij k_j (S, P, dP recomputed);
        psum[h, i] = sum_j P_ij, dsum[h, i] = sum_j dS_ij."""
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        h = cuda.blockIdx.y
        if i >= tq:
            return
        adq = cuda.local.array(MAXD, float32)
        for c in range(d):
            adq[c] = F0
        li = lse[h, i]
        j1 = tk
        if causal != 0:
            j1 = min(tk, max(0, i + off + 1))              # keys j <= i + off
        if li == NEG_INF:
            j1 = 0
        di = delta[h, i]
        ps = F0
        dss = F0
        for j in range(j1):
            s = F0
            dp = F0
            for c in range(d):
                s += q[h, i, c] * k[h, j, c]
                dp += do[h, i, c] * v[h, j, c]
            p = math.exp(s * scale - li)
            ps += p
            ds = p * (dp - di)
            dss += ds
            for c in range(d):
                adq[c] += ds * k[h, j, c]
        for c in range(d):
            dq[h, i, c] = adq[c] * scale
        psum[h, i] = ps
        dsum[h, i] = dss

    return bwd_delta, simple_dkdv, simple_dq


# ---------------------------------------------------------------------------
# 2./3. The fast kernels
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class BackwardConfig:
    """One fast-kernel variant: Br x Bc tiles, TY x TX threads, D = d padded to TX.

    Thread (ty, tx) owns S/dP/dQ rows ty + TY*a and key columns tx + TX*b, and dK/dV
    key rows ty + TY*a, head-dim columns tx + TX*b.
    """

    block_q: int
    block_k: int
    ty: int
    tx: int
    head_dim: int          # D, padded to a multiple of tx

    @property
    def threads(self):
        return self.ty * self.tx

    @property
    def d_stride(self):    # rows of Q, dO, K, V in shared memory: D + 1 floats (odd)
        return self.head_dim + 1

    @property
    def p_stride(self):    # rows of P, dS in shared memory: Bc + 1 floats
        return self.block_k + 1

    def offsets(self):
        br, bc, ds, ps = self.block_q, self.block_k, self.d_stride, self.p_stride
        q_off = 0
        do_off = q_off + br * ds
        k_off = do_off + br * ds
        v_off = k_off + bc * ds
        p_off = v_off + bc * ds
        s_off = p_off + br * ps
        l_off = s_off + br * ps
        dl_off = l_off + br
        end = dl_off + br
        return q_off, do_off, k_off, v_off, p_off, s_off, l_off, dl_off, end

    @property
    def shared_bytes(self):
        return 4 * self.offsets()[-1]


def layout(d: int, block_q: int, block_k: int, ty: int, tx: int) -> BackwardConfig:
    """Arrange TY x TX threads over Br x Bc tiles for head dim d; ValueError names the bad
    argument. Whether it fits a device is `plan`'s question (`check_launch`)."""
    for name, val in (("block_q", block_q), ("block_k", block_k), ("ty", ty), ("tx", tx)):
        if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
            raise ValueError(f"{name} must be a positive integer, got {val!r}")
    if block_q % ty:
        raise ValueError(f"block_q={block_q} must be a multiple of the {ty} thread rows")
    if block_k % ty or block_k % tx:
        raise ValueError(f"block_k={block_k} must be a multiple of the thread rows ({ty}) and "
                         f"columns ({tx})")
    return BackwardConfig(int(block_q), int(block_k), int(ty), int(tx), ceil_div(d, tx) * tx)


def plan(d: int, block_q: int, block_k: int, ty: int, tx: int) -> BackwardConfig:
    """`layout`, then check that one block fits this device's limits (LaunchError if not)."""
    cfg = layout(d, block_q, block_k, ty, tx)
    check_launch(cfg.threads, cfg.shared_bytes, what="backward kernel")
    return cfg


@lru_cache(maxsize=None)
def make_fast_kernels(block_q: int, block_k: int, ty: int, tx: int, head_dim: int):
    """(key-major kernel with atomic dQ, key-major kernel without dQ, query-major dQ kernel).

    Compile-time constants: Br, Bc, TY, TX, D (padded head dim). Grid of the key-major
    kernels: (ceil(Tk/Bc), B*H); of the dQ kernel: (ceil(Tq/Br), B*H); TY*TX threads and
    `plan(...).shared_bytes` of dynamic shared memory for all three.
    """

    cfg = plan(head_dim, block_q, block_k, ty, tx)
    BR, BC, TY, TX, D = cfg.block_q, cfg.block_k, cfg.ty, cfg.tx, cfg.head_dim
    NT = cfg.threads
    DS, PS = cfg.d_stride, cfg.p_stride
    Q_OFF, DO_OFF, K_OFF, V_OFF, P_OFF, S_OFF, L_OFF, DL_OFF, _ = cfg.offsets()
    MR = BR // TY          # query rows per thread   (S, dP, dQ micro-tiles)
    MC = BC // TX          # key columns per thread  (S, dP)
    AR = BC // TY          # key rows per thread     (dK, dV accumulators)
    AD = D // TX           # head-dim columns per thread (dK, dV, dQ)
    SQ = MR * MC
    SA = AR * AD
    SD = MR * AD
    QL = ceil_div(BR * D, NT)
    KL = ceil_div(BC * D, NT)
    RA = max(MR, AR)
    RB = max(MC, AD)

    def _rows_loader(LOADS, ROWS, AT_X, AT_Y):
        @inlined
        def load(sm, x, y, h, r0, tn, d, tid):
            """Rows r0 .. r0 + ROWS - 1 of x and y (zeros past tn rows and d columns) ->
            shared memory at AT_X, AT_Y (row stride DS)."""
            for s_ in range(LOADS):
                e = tid + NT * s_
                if e < ROWS * D:
                    r = e // D
                    c = e - r * D
                    xv = F0
                    yv = F0
                    if r0 + r < tn and c < d:
                        xv = x[h, r0 + r, c]
                        yv = y[h, r0 + r, c]
                    sm[AT_X + r * DS + c] = xv
                    sm[AT_Y + r * DS + c] = yv
        return load

    load_kv = _rows_loader(KL, BC, K_OFF, V_OFF)     # K_j, V_j: 2 Bc d 4 B
    load_qdo = _rows_loader(QL, BR, Q_OFF, DO_OFF)   # Q_i, dO_i: 2 Br d 4 B

    @inlined
    def load_ld(sm, lse, delta, h, q0, tq, tid):
        for r in range(tid, BR, NT):            # L_i, D_i for any Br and thread count
            lv = NEG_INF
            dv_ = F0
            if q0 + r < tq:
                lv = lse[h, q0 + r]
                dv_ = delta[h, q0 + r]
            sm[L_OFF + r] = lv
            sm[DL_OFF + r] = dv_

    @inlined
    def s_dp(sm, s, dp, ra, rb, rc, rd, tx, ty):
        """S = Q_i K_j^T and dP = dO_i V_j^T: (MR, MC) per thread, registers."""
        for x in range(SQ):
            s[x] = F0
            dp[x] = F0
        for c in range(D):
            for a in range(MR):
                ra[a] = sm[Q_OFF + (ty + TY * a) * DS + c]
                rc[a] = sm[DO_OFF + (ty + TY * a) * DS + c]
            for b in range(MC):
                rb[b] = sm[K_OFF + (tx + TX * b) * DS + c]
                rd[b] = sm[V_OFF + (tx + TX * b) * DS + c]
            for a in range(MR):
                for b in range(MC):
                    s[a * MC + b] += ra[a] * rb[b]
                    dp[a * MC + b] += rc[a] * rd[b]

    @inlined
    def p_ds(sm, s, dp, tx, ty, k0, q0, tk, causal, off, scale, with_p):
        """P = exp(scale S - L) (0 where masked or the row is empty); dS = P (dP - D);
        dS (and with_p P) -> shared memory."""
        for a in range(MR):
            row = ty + TY * a
            li = sm[L_OFF + row]
            di = sm[DL_OFF + row]
            for b in range(MC):
                col = tx + TX * b
                p = F0
                if li != NEG_INF and k0 + col < tk and \
                        (causal == 0 or k0 + col <= q0 + row + off):
                    p = math.exp(s[a * MC + b] * scale - li)
                if with_p:
                    sm[P_OFF + row * PS + col] = p
                sm[S_OFF + row * PS + col] = p * (dp[a * MC + b] - di)

    @inlined
    def thread_xy():
        """(tid, tx, ty): this thread, its column group tx and row group ty."""
        tid = cuda.threadIdx.x
        return tid, tid % TX, tid // TX

    def _tile_out(M, ATOMIC, TWO):
        @inlined
        def out(x, y, xa, ya, h, r0, tn, d, tx, ty, scale):
            """This thread's (M, AD) micro-tile out, rows r0 + ty + TY a below tn, columns
            tx + TX b below d: x = scale xa (ATOMIC: added atomically), y = ya (TWO)."""
            for a in range(M):
                row = r0 + ty + TY * a
                if row < tn:
                    for b in range(AD):
                        col = tx + TX * b
                        if col < d:
                            if ATOMIC:
                                cuda.atomic.add(x, (h, row, col), xa[a * AD + b] * scale)
                            else:
                                x[h, row, col] = xa[a * AD + b] * scale
                            if TWO:
                                y[h, row, col] = ya[a * AD + b]
        return out

    add_dq = _tile_out(MR, True, False)     # dQ_i += scale dS K_j (atomics)
    store_dq = _tile_out(MR, False, False)  # dQ_i = scale acc
    store_kv = _tile_out(AR, False, True)   # dK_j = scale acc, dV_j = acc

    @inlined
    def ds_k(sm, dqa, ra, rb, tx, ty):
        """dQ_i += dS K_j (unscaled): (MR, AD) per thread."""
        for cc in range(BC):
            for a in range(MR):
                ra[a] = sm[S_OFF + (ty + TY * a) * PS + cc]
            for b in range(AD):
                rb[b] = sm[K_OFF + cc * DS + tx + TX * b]
            for a in range(MR):
                for b in range(AD):
                    dqa[a * AD + b] += ra[a] * rb[b]

    def _key_major(WITH_DQ):
        """The key-major kernel; WITH_DQ (compile-time) adds dQ_i by atomic adds."""

        def kernel(q, k, v, do, lse, delta, dq, dk, dv, tq, tk, d, scale, causal, off, psum,
                   dsum):
            sm = cuda.shared.array(0, float32)
            tid, tx, ty = thread_xy()
            h = cuda.blockIdx.y
            k0 = cuda.blockIdx.x * BC

            load_kv(sm, k, v, h, k0, tk, d, tid)    # K_j, V_j -> shared, once
            adk = cuda.local.array(SA, float32)      # (AR, AD) dK_j micro-tile
            adv = cuda.local.array(SA, float32)      # (AR, AD) dV_j micro-tile
            s = cuda.local.array(SQ, float32)        # (MR, MC) S, then P
            dp = cuda.local.array(SQ, float32)       # (MR, MC) dP, then dS
            dqa = cuda.local.array(SD, float32)      # (MR, AD) this tile's dQ_i part
            ra = cuda.local.array(RA, float32)
            rb = cuda.local.array(RB, float32)
            rc = cuda.local.array(RA, float32)
            rd = cuda.local.array(RB, float32)
            zero2(adk, adv, SA)

            i_start = 0                              # first query block that sees key k0
            if causal != 0:
                i_start = max(0, k0 - off) // BR
            n_qb = (tq + BR - 1) // BR
            if causal != 0 and k0 - off > tq - 1:
                n_qb = 0                             # no query sees this key block
            for ib in range(i_start, n_qb):
                q0 = ib * BR
                cuda.syncthreads()                   # done with the previous Q_i, dO_i, P, dS
                # Q_i, dO_i, L_i, D_i -> shared. Reads 2 Br d 4 B + 2 Br 4 B.
                load_qdo(sm, q, do, h, q0, tq, d, tid)
                load_ld(sm, lse, delta, h, q0, tq, tid)
                cuda.syncthreads()

                s_dp(sm, s, dp, ra, rb, rc, rd, tx, ty)
                p_ds(sm, s, dp, tx, ty, k0, q0, tk, causal, off, scale, True)
                cuda.syncthreads()

                # psum_i += rowsum(P), dsum_i += rowsum(dS) (the lse and o checks): 2 Br
                # atomic adds per tile, against Br d for dQ. P and dS stay in shared memory
                # until the next barrier.
                for r in range(tid, BR, NT):
                    if q0 + r < tq:
                        ps = F0
                        dss = F0
                        for cc in range(BC):
                            ps += sm[P_OFF + r * PS + cc]
                            dss += sm[S_OFF + r * PS + cc]
                        cuda.atomic.add(psum, (h, q0 + r), ps)
                        cuda.atomic.add(dsum, (h, q0 + r), dss)

                # dV_j += P^T dO_i and dK_j += dS^T Q_i: (AR, AD) per thread.
                for r in range(BR):
                    for a in range(AR):
                        ra[a] = sm[P_OFF + r * PS + ty + TY * a]
                        rc[a] = sm[S_OFF + r * PS + ty + TY * a]
                    for b in range(AD):
                        rb[b] = sm[DO_OFF + r * DS + tx + TX * b]
                        rd[b] = sm[Q_OFF + r * DS + tx + TX * b]
                    for a in range(AR):
                        for b in range(AD):
                            adv[a * AD + b] += ra[a] * rb[b]
                            adk[a * AD + b] += rc[a] * rd[b]

                if WITH_DQ:
                    # dQ_i += scale dS K_j: (MR, AD) per thread, atomically added to global.
                    for x in range(SD):
                        dqa[x] = F0
                    ds_k(sm, dqa, ra, rb, tx, ty)
                    add_dq(dq, dq, dqa, dqa, h, q0, tq, d, tx, ty, scale)

            # write dK_j = scale * acc, dV_j once. Writes 2 Bc d 4 B.
            store_kv(dk, dv, adk, adv, h, k0, tk, d, tx, ty, scale)
        return kernel

    bwd_kv_atomic = _key_major(True)
    bwd_kv = _key_major(False)

    def bwd_q(q, k, v, do, lse, delta, dq, tq, tk, d, scale, causal, off):
        """Query-major dQ pass: dQ_i in registers, loop over key blocks, S and dP recomputed."""
        sm = cuda.shared.array(0, float32)
        tid, tx, ty = thread_xy()
        h = cuda.blockIdx.y
        q0 = cuda.blockIdx.x * BR
        load_qdo(sm, q, do, h, q0, tq, d, tid)
        load_ld(sm, lse, delta, h, q0, tq, tid)
        s = cuda.local.array(SQ, float32)        # (MR, MC) S, then P
        dp = cuda.local.array(SQ, float32)       # (MR, MC) dP, then dS
        dqa = cuda.local.array(SD, float32)      # (MR, AD) dQ_i, across the key blocks
        ra = cuda.local.array(RA, float32)       # operands of the micro-tile products
        rb = cuda.local.array(RB, float32)
        rc = cuda.local.array(RA, float32)
        rd = cuda.local.array(RB, float32)
        for x in range(SD):
            dqa[x] = F0
        n_kb = visible_key_blocks(tk, causal, q0 + BR + off, BC)
        for jb in range(n_kb):
            k0 = jb * BC
            cuda.syncthreads()
            load_kv(sm, k, v, h, k0, tk, d, tid)
            cuda.syncthreads()
            s_dp(sm, s, dp, ra, rb, rc, rd, tx, ty)
            p_ds(sm, s, dp, tx, ty, k0, q0, tk, causal, off, scale, False)
            cuda.syncthreads()
            ds_k(sm, dqa, ra, rb, tx, ty)
        store_dq(dq, dq, dqa, dqa, h, q0, tq, d, tx, ty, scale)

    tag = f"q{BR}_k{BC}_t{TY}x{TX}_d{D}"
    bwd_kv_atomic.__name__ = f"bwd_kv_atomic_{tag}"
    bwd_kv.__name__ = f"bwd_kv_{tag}"
    bwd_q.__name__ = f"bwd_q_{tag}"
    return cuda.jit(bwd_kv_atomic), cuda.jit(bwd_kv), cuda.jit(bwd_q), cfg


#: The tiles under Numba's simulator: (block_q, block_k, ty, tx), 16 simulated threads.
SIMULATOR_TILES = (8, 8, 4, 4)
#: Most floats a thread may keep in its arrays (dK, dV, S, dP, dQ micro-tiles and the
#: staging rows; `micro_floats`) for the chosen configuration: the measured defaults keep
#: 184 at d = 64 and d = 128 and compiled to 253 and 219 registers with no local memory on
#: the H200 (benchmarks/results/h200_backward.json, "resources"); more would spill.
MAX_MICRO_FLOATS = 192
#: (block_q, block_k, ty, tx) tried after the measured default when it does not fit, best
#: first: larger tiles (fewer passes over Q, dO and over K, V), then wider key tiles (the
#: key-major kernel re-reads Q_i, dO_i once per key block), then more threads.
FALLBACK_TILES = tuple(sorted(
    ((br, bc, ty, tx) for br in (64, 32, 16, 8) for bc in (64, 32, 16)
     for ty, tx in ((16, 16), (8, 16), (8, 32))
     if br % ty == 0 and bc % ty == 0 and bc % tx == 0),
    key=lambda c: (-c[0] * c[1], -c[1], -c[2] * c[3])))


def measured_tiles(d: int):
    """(block_q, block_k, ty, tx) measured on the H200, before any fitting to a device.

    Chosen from the first H200 sweep (benchmarks/NOTES_cuda_backward.md): at d = 64 the
    8 x 16-thread layout (8 x 4 micro-tiles, 2 blocks per SM) beat 16 x 16 threads by 25 %.
    """
    if d <= 64:
        return 64, 64, 8, 16
    return 64, 64, 16, 16


def micro_floats(cfg: BackwardConfig) -> int:
    """Floats one thread keeps in arrays: dK, dV (AR x AD each), S, dP (MR x MC each),
    dQ (MR x AD) and four staging rows (2 max(MR, AR) + 2 max(MC, AD))."""
    mr, mc = cfg.block_q // cfg.ty, cfg.block_k // cfg.tx
    ar, ad = cfg.block_k // cfg.ty, cfg.head_dim // cfg.tx
    return 2 * ar * ad + 2 * mr * mc + mr * ad + 2 * max(mr, ar) + 2 * max(mc, ad)


@lru_cache(maxsize=None)
def choose_tiles(d: int, limits):
    """(block_q, block_k, ty, tx) of the fast kernels for head dim d on `limits` (pure).

    Candidates, best first: `measured_tiles(d)`, then FALLBACK_TILES, each kept only if
    it holds at most MAX_MICRO_FLOATS floats per thread. The first that fits one block
    within `limits` (threads, shared memory with the opt-in) and keeps
    `limits.MIN_RESIDENT_WARPS` warps resident per SM wins (`limits.pick_config`);
    LaunchError naming shared memory per block when none fits.
    """
    from ...limits import pick_config
    cands = []
    for tiles in (measured_tiles(d),) + FALLBACK_TILES:
        cfg = layout(d, *tiles)
        if micro_floats(cfg) <= MAX_MICRO_FLOATS:
            cands.append((tiles, cfg.threads, cfg.shared_bytes))
    return pick_config(cands, limits, f"backward kernel d={d}")


def default_tiles(d: int, limits=None):
    """(block_q, block_k, ty, tx) used when the caller gives none: SIMULATOR_TILES on the
    simulator (when no `limits` are given), else `choose_tiles` for this device's limits
    (or the given ones)."""
    from ...limits import current_limits
    if limits is None:
        if using_simulator():
            return SIMULATOR_TILES
        limits = current_limits()
    return choose_tiles(d, limits)


@lru_cache(maxsize=None)
def _recorded_regs(d: int, tiles: tuple, kernel: str):
    """Registers per thread the H200 recorded for this kernel and tiles, or None."""
    from ...results import recorded_backward_regs
    return recorded_backward_regs(d, tiles, kernel, doc=_backward_doc())


@lru_cache(maxsize=None)
def _backward_doc():
    """The recorded H200 backward benchmark, read once per process ({} without one)."""
    from ...results import load_backward
    return load_backward() or {}


def launches(d: int, tq: int, tk: int, bh: int, limits, kernel: str = "fast"):
    """The launches `run(kernel=...)` makes with the default tiles for `limits` (a GPU's),
    as `flashcourse.limits.Launch`es; LaunchError when no configuration fits, ValueError
    for the simple kernel beyond SIMPLE_MAX_D."""
    from ...limits import Launch
    check_choice(kernel, "kernel", VERSIONS)
    rows = 128
    out = [Launch("backward delta", (ceil_div(tq, rows), bh), rows, 0, optin=False,
                  config=f"threads={rows}")]
    if kernel == "simple":
        check_simple_d(d)
        return tuple(out + [
            Launch(f"simple_dkdv d={d}", (ceil_div(tk, rows), bh), rows, 0, optin=False,
                   config=f"threads={rows}"),
            Launch(f"simple_dq d={d}", (ceil_div(tq, rows), bh), rows, 0, optin=False,
                   config=f"threads={rows}")])
    br, bc, ty, tx = tiles = default_tiles(d, limits)
    cfg = layout(d, *tiles)
    label = f"Br={br} Bc={bc} threads={ty}x{tx}"
    first = "kv_atomic" if kernel == "fast" else "kv"
    # the key-major kernel without dQ is the atomic one minus its dQ part: its recorded
    # registers (kv_atomic) bound it
    out.append(Launch(f"backward {first} d={d}", (ceil_div(tk, bc), bh), cfg.threads,
                      cfg.shared_bytes, regs_per_thread=_recorded_regs(d, tiles, "kv_atomic"),
                      config=label))
    if kernel == "fast_two_pass":
        out.append(Launch(f"backward q_pass d={d}", (ceil_div(tq, br), bh), cfg.threads,
                          cfg.shared_bytes, regs_per_thread=_recorded_regs(d, tiles, "q_pass"),
                          config=label))
    return tuple(out)


def check_simple_d(d: int) -> None:
    """ValueError unless the simple kernels support head dim d."""
    if d > SIMPLE_MAX_D:
        raise ValueError(f"the simple kernel supports head dim d <= {SIMPLE_MAX_D}, "
                         f"got d={d}; use kernel='fast'")


# ---------------------------------------------------------------------------
# Launching
# ---------------------------------------------------------------------------

def run(qf, kf, vf, of, lse, dof, dq, dk, dv, tq, tk, d, scale, causal, *, kernel="fast",
        block_q=None, block_k=None, ty=None, tx=None, delta=None, psum=None, dsum=None):
    """Launch one backward version on flattened float32 device arrays.

    qf, of, dof, dq (BH, Tq, d); kf, vf, dk, dv (BH, Tk, d); lse (BH, Tq). dq, dk, dv
    are overwritten. `delta` (BH, Tq) scratch may be passed to avoid an allocation;
    so may `psum` and `dsum` (BH, Tq), which receive sum_j P_ij and sum_j dS_ij of every
    recomputed row (the lse and o checks of `backward`; not checked here).
    Returns the BackwardConfig used (None for "simple").
    """
    check_choice(kernel, "kernel", VERSIONS)
    bh = qf.shape[0]
    if delta is None:
        delta = cuda.device_array((bh, tq), dtype=np.float32)
    if psum is None:
        psum = cuda.device_array((bh, tq), dtype=np.float32)
    if dsum is None:
        dsum = cuda.device_array((bh, tq), dtype=np.float32)
    if kernel == "simple":
        check_simple_d(d)
    bwd_delta, simple_dkdv, simple_dq = _simple_kernels(
        SIMPLE_SMALL_D if d <= SIMPLE_SMALL_D else SIMPLE_MAX_D)
    off = np.int32(tk - tq)
    i32 = np.int32
    rows = 128
    zero_dq = i32(1 if kernel == "fast" else 0)         # atomics need dQ = 0 first
    bwd_delta[(ceil_div(tq, rows), bh), rows](of, dof, delta, dq, zero_dq, i32(tq), i32(d),
                                              psum, dsum)
    if kernel == "simple":
        common = (i32(tq), i32(tk), i32(d), np.float32(scale), i32(1 if causal else 0), off)
        simple_dkdv[(ceil_div(tk, rows), bh), rows](qf, kf, vf, dof, lse, delta, dk, dv,
                                                    *common)
        simple_dq[(ceil_div(tq, rows), bh), rows](qf, kf, vf, dof, lse, delta, dq, *common,
                                                  psum, dsum)
        return None
    dbq, dbk, dty, dtx = default_tiles(d)
    block_q = dbq if block_q is None else block_q
    block_k = dbk if block_k is None else block_k
    ty = dty if ty is None else ty
    tx = dtx if tx is None else tx
    cfg = plan(d, block_q, block_k, ty, tx)
    kv_atomic, kv_plain, q_pass, cfg = make_fast_kernels(cfg.block_q, cfg.block_k, cfg.ty,
                                                         cfg.tx, cfg.head_dim)
    args = (qf, kf, vf, dof, lse, delta)
    tail = (i32(tq), i32(tk), i32(d), np.float32(scale), i32(1 if causal else 0), off)
    grid_k = (ceil_div(tk, cfg.block_k), bh)
    if kernel == "fast":
        launch(kv_atomic, _sig("fast_kv"), grid_k, cfg.threads, cfg.shared_bytes,
               args + (dq, dk, dv) + tail + (psum, dsum))
    else:
        launch(kv_plain, _sig("fast_kv"), grid_k, cfg.threads, cfg.shared_bytes,
               args + (dq, dk, dv) + tail + (psum, dsum))
        launch(q_pass, _sig("fast_q"), (ceil_div(tq, cfg.block_q), bh), cfg.threads,
               cfg.shared_bytes, args + (dq,) + tail)
    return cfg
