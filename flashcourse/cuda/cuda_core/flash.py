"""flash: the fast fused forward kernel (FlashAttention-2 order, register-tiled, fp32).

The idea
    One thread block per (query block of Br rows, head). Its `threads` threads
    cooperate: they load Q_i once into shared memory (scaled by scale*log2(e)),
    then for each key block K_j, V_j (Bc rows) they
      1. load K_j, V_j into shared memory with coalesced reads (consecutive
         threads read consecutive addresses),
      2. compute the (Br, Bc) score tile S = Q_i K_j^T: each thread owns a
         TM x TN micro-tile of S in registers (rows ty + RT*i, columns tx + CT*j),
      3. update the online softmax: row max across the CT threads of a row by warp
         shuffles (shared memory under the simulator), P = exp2(S - m), rescale,
      4. write P to shared memory, and accumulate O_i += P V_j: each thread owns a
         TM x TD micro-tile of O_i in registers (same rows, columns tx + CT*j).
    At the end O_i = acc / l and lse = ln(2) * (m + log2(l)) are written once.
    Causal tiles that the mask hides are never visited; partial tiles and the
    ragged last tiles (Tq, Tk not multiples of Br, Bc; d not a multiple of CT)
    are masked element by element.

The bytes it moves (fp32, one head, no causal skipping)
    reads Q once (Tq d 4 B), K and V once per query block (2 Tk d 4 B x Tq/Br),
    writes O (Tq d 4 B) and lse (Tq 4 B). At Tq = Tk = 4096, d = 64, Br = 128:
    1 MiB + 64 MiB (mostly served by L2) + 1 MiB + 16 KiB per head. Extra device
    memory beyond q, k, v, o: only lse, Tq x 4 B per head.

Expected cost and what limits it
    4 Tq Tk d FLOPs (2 matrix products) plus Tq Tk exponentials. The H200's fp32
    FFMA rate (~67 TFLOP/s datasheet) is the ceiling. An SM does 128 FMAs but
    serves 32 shared-memory words per clock; with the default 8 x 4 micro-tile a
    thread does 32 FMAs per 12 shared loads, so shared memory caps the inner loops
    near 2/3 of peak; index/loop instructions, the softmax, the P round trip
    through shared memory and three barriers per key tile take more. Larger
    micro-tiles raise the FMA-to-load ratio but cost registers (fewer resident
    blocks). Measured on an H200 (d = 64, N = 4096, B*H = 32): 19-22 TFLOP/s,
    about 30% of peak (benchmarks/NOTES_cuda_forward.md).

How to run it
    from flashcourse.cuda import forward
    o, lse = forward(q, k, v, kernel="flash", causal=True)            # numpy in/out
    kern = make_flash_kernel(64, 64, 256, 4, head_dim=64)              # one variant
    python benchmarks/gpu_forward.py --check --bench                   # on a GPU

Rules that keep it fast in Numba:
    - every `cuda.local.array` is indexed only by compile-time constants inside
      loops over `range(CONSTANT)` that the compiler unrolls, so they live in
      registers (check with `get_local_mem_per_thread() == 0`);
    - every float constant is float32 (`F0`, `NEG_INF`, ...): a Python float
      literal would promote the arithmetic to float64;
    - every array index is cast to unsigned (`U(...)`): with signed indices Numba
      emits negative-index wrap-around code (~5 integer instructions) per load;
    - exp2 with log2(e) folded into the scale of Q saves one multiply per score.
"""

from __future__ import annotations


import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import cuda, float32
from numba import uint64 as U   # unsigned indices: no negative-index wraparound code

from ..._checks import check_block, check_bool
from ...geometry import ceil_div
from ...gpu import using_simulator
from ...limits import check_launch
from ..common._device import exp2_log2, reset_state, row_col, visible_key_blocks
from ..common._launch import check_registers, launch
from ...constants import F0, F1, FULL_MASK, LN2_F, LOG2E, NEG_INF


@dataclass(frozen=True)
class FlashConfig:
    """Shape of one flash-kernel variant.

    block_q (Br) query rows and block_k (Bc) key columns per tile; `threads` per
    block arranged as RT row groups x CT column groups; each thread owns a
    TM x TN micro-tile of S and a TM x TD micro-tile of O; D is d rounded up to a
    multiple of CT (the padded head dimension compiled into the kernel).
    """

    block_q: int
    block_k: int
    threads: int
    tm: int
    head_dim: int            # D, padded
    shuffle: bool            # warp shuffles (GPU) or shared-memory reductions (simulator)

    # the thread grid: RT row groups x CT column groups; a thread's S tile TM x TN, O's TM x TD
    rt = property(lambda self: self.block_q // self.tm)
    ct = property(lambda self: self.threads // self.rt)
    tn = property(lambda self: self.block_k // self.ct)
    td = property(lambda self: self.head_dim // self.ct)

    # shared-memory layout, in float32 elements (strides chosen to avoid bank conflicts)
    @property
    def q_stride(self):       # Qt[kk][row]: transposed Q, odd stride
        return self.block_q + 1 - (self.block_q % 2)

    @property
    def k_stride(self):       # Ks[col][kk]: odd stride -> columns tx + CT*j hit distinct banks
        return self.head_dim + 1 - (self.head_dim % 2)

    @property
    def v_stride(self):       # Vs[col][dd]
        return self.head_dim

    @property
    def p_stride(self):       # Ps[row][col]: rows of one warp land in disjoint bank ranges
        ct = self.ct
        if ct >= 32:
            return self.block_k
        return self.block_k + ((ct - self.block_k) % 32)

    def offsets(self):
        q_off = 0
        k_off = q_off + self.head_dim * self.q_stride
        v_off = k_off + self.block_k * self.k_stride
        p_off = v_off + self.block_k * self.v_stride
        r_off = p_off + self.block_q * self.p_stride
        end = r_off + (0 if self.shuffle else self.block_q * self.ct)
        return q_off, k_off, v_off, p_off, r_off, end

    @property
    def shared_bytes(self):
        return 4 * self.offsets()[-1]


def layout(d: int, block_q: int, block_k: int, threads: int, tm: int,
           shuffle: bool | None = None) -> FlashConfig:
    """Arrange `threads` over a (block_q, block_k) tile for head dim d; return the config.

    Raises ValueError naming the argument when the pieces do not fit together. Whether
    the result fits a device is `plan`'s question (`flashcourse.limits.check_launch`).
    """
    block_q = check_block(block_q, "block_q")
    block_k = check_block(block_k, "block_k")
    threads = check_block(threads, "threads")
    tm = check_block(tm, "tm")
    if check_bool(shuffle, "shuffle", none_ok=True) is None:
        shuffle = not using_simulator()
    if block_q % tm:
        raise ValueError(f"tm={tm} (rows per thread) must divide block_q={block_q}")
    rt = block_q // tm
    if threads % rt:
        raise ValueError(f"threads={threads} must be a multiple of block_q/tm={rt} row groups")
    ct = threads // rt
    if ct & (ct - 1) or ct > 32:
        raise ValueError(f"threads/(block_q/tm) = {ct} column groups must be a power of two "
                         f"<= 32 (threads={threads}, block_q={block_q}, tm={tm})")
    if block_k % ct:
        raise ValueError(f"block_k={block_k} must be a multiple of the {ct} column groups "
                         f"(threads={threads} / (block_q/tm={rt}))")
    if shuffle and threads % 32:
        raise ValueError(f"threads={threads} must be a multiple of 32 (a warp) on a GPU")
    head_dim = ceil_div(d, ct) * ct
    return FlashConfig(block_q, block_k, threads, tm, head_dim, bool(shuffle))


def plan(d: int, block_q: int, block_k: int, threads: int, tm: int,
         shuffle: bool | None = None) -> FlashConfig:
    """`layout`, then check that one block fits this device's limits (LaunchError if not)."""
    cfg = layout(d, block_q, block_k, threads, tm, shuffle)
    check_launch(cfg.threads, cfg.shared_bytes, what="flash kernel")
    return cfg


def _unroll(n: int, most: int) -> int:
    """Largest power of two <= most that divides n."""
    u = 1
    while u * 2 <= most and n % (u * 2) == 0:
        u *= 2
    return u


@lru_cache(maxsize=None)
def make_flash_kernel(block_q: int = 64, block_k: int = 64, threads: int = 256, tm: int = 4,
                      head_dim: int = 64, shuffle: bool | None = None, unroll: int = 8):
    """Compile-time-specialised flash kernel for one configuration (cached).

    Returns (kernel, config). Launch with grid (ceil(Tq/Br), B*H), `threads`
    threads and `config.shared_bytes` of dynamic shared memory; arguments
    (q (BH,Tq,d), k (BH,Tk,d), v (BH,Tk,d), o (BH,Tq,d), lse (BH,Tq), Tq, Tk, d,
    qscale = scale*log2(e) (float32), causal (0/1), Tk - Tq).

    block_q (Br), block_k (Bc), threads and tm (query rows per thread) set the
    micro-tiles (see FlashConfig); head_dim is the padded D; shuffle selects warp
    shuffles (GPU) or shared-memory row reductions (simulator; None: automatic);
    unroll is the number of inner-product steps written per loop iteration
    (measured on an H200: 2 is ~13% faster than 8 at d = 64, see
    benchmarks/NOTES_cuda_forward.md).
    """

    cfg = plan(head_dim, block_q, block_k, threads, tm, shuffle)
    BR, BC, NT, TM = cfg.block_q, cfg.block_k, cfg.threads, cfg.tm
    RT, CT, TN, TD, D = cfg.rt, cfg.ct, cfg.tn, cfg.td, cfg.head_dim
    QS, KS, VS, PS = cfg.q_stride, cfg.k_stride, cfg.v_stride, cfg.p_stride
    Q_OFF, K_OFF, V_OFF, P_OFF, R_OFF, _ = cfg.offsets()
    SHUFFLE = cfg.shuffle
    Q_LOADS = ceil_div(BR * D, NT)      # elements of Q_i each thread loads
    KV_LOADS = ceil_div(BC * D, NT)     # elements of K_j (and of V_j) each thread loads
    ST = TM * TN                        # score registers per thread
    OT = TM * TD                        # output registers per thread
    KB = max(TD, TN)                    # staging registers for K (TN) / V (TD) values
    KU = _unroll(D, unroll)             # inner-product steps unrolled per loop iteration
    CU = _unroll(BC, unroll)

    exp2, log2 = exp2_log2()

    @cuda.jit(device=True)
    def row_max(x, sm, row, tx):
        """Max of x over the CT threads that share `row` (all threads must call it)."""
        if SHUFFLE:
            off = CT // 2
            while off > 0:
                x = max(x, cuda.shfl_xor_sync(FULL_MASK, x, off))
                off //= 2
            return x
        sm[U(R_OFF + row * CT + tx)] = x
        cuda.syncthreads()
        r = sm[U(R_OFF + row * CT)]
        for t in range(1, CT):
            r = max(r, sm[U(R_OFF + row * CT + t)])
        return r

    @cuda.jit(device=True)
    def row_sum(x, sm, row, tx):
        """Sum of x over the CT threads that share `row` (all threads must call it)."""
        if SHUFFLE:
            off = CT // 2
            while off > 0:
                x += cuda.shfl_xor_sync(FULL_MASK, x, off)
                off //= 2
            return x
        sm[U(R_OFF + row * CT + tx)] = x
        cuda.syncthreads()
        r = F0
        for t in range(CT):
            r += sm[U(R_OFF + row * CT + t)]
        return r

    RC = row_col(D)

    def flash_forward(q, k, v, o, lse, tq, tk, d, qscale, causal, off):
        sm = cuda.shared.array(0, float32)
        tid = cuda.threadIdx.x
        tx = tid % CT                      # column group
        ty = tid // CT                     # row group: rows ty + RT*i
        h = cuda.blockIdx.y
        q0 = cuda.blockIdx.x * BR

        # Q_i -> Qt[kk][row] (transposed), pre-scaled by scale*log2(e). Reads: Br*d*4 B.
        for s_ in range(Q_LOADS):
            e = tid + NT * s_
            if e < BR * D:
                r, c = RC(e)
                val = F0
                if q0 + r < tq and c < d:
                    val = q[U(h), U(q0 + r), U(c)] * qscale
                sm[U(Q_OFF + c * QS + r)] = val

        acc = cuda.local.array(OT, float32)   # (TM, TD) unnormalised O micro-tile
        m = cuda.local.array(TM, float32)     # running row max (log2 units)
        lp = cuda.local.array(TM, float32)    # this thread's part of the running row sum
        s = cuda.local.array(ST, float32)     # (TM, TN) score / probability micro-tile
        qa = cuda.local.array(TM, float32)
        kb = cuda.local.array(KB, float32)
        reset_state(acc, OT, m, lp, TM)

        # key blocks this query block can see: all, or up to the last row's diagonal
        n_kb = visible_key_blocks(tk, causal, q0 + BR + off, BC)

        for jb in range(n_kb):
            k0 = jb * BC
            cuda.syncthreads()             # everyone is done with the previous K, V, P
            # K_j -> Ks[col][kk], V_j -> Vs[col][dd]; coalesced. Reads: 2*Bc*d*4 B.
            for s_ in range(KV_LOADS):
                e = tid + NT * s_
                if e < BC * D:
                    r, c = RC(e)
                    kv = F0
                    vv = F0
                    if k0 + r < tk and c < d:
                        kv = k[U(h), U(k0 + r), U(c)]
                        vv = v[U(h), U(k0 + r), U(c)]
                    sm[U(K_OFF + r * KS + c)] = kv
                    sm[U(V_OFF + r * VS + c)] = vv
            cuda.syncthreads()

            # S = Q_i K_j^T (already scaled): TM x TN per thread, in registers
            for i in range(ST):
                s[i] = F0
            for k8 in range(0, D, KU):     # KU steps unrolled per iteration
                for u in range(KU):
                    kk = k8 + u
                    for i in range(TM):
                        qa[i] = sm[U(Q_OFF + kk * QS + ty + RT * i)]
                    for j in range(TN):
                        kb[j] = sm[U(K_OFF + (tx + CT * j) * KS + kk)]
                    for i in range(TM):
                        for j in range(TN):
                            s[i * TN + j] += qa[i] * kb[j]

            # mask the ragged last key block and the diagonal causal blocks
            if k0 + BC > tk or (causal != 0 and k0 + BC - 1 > q0 + off):
                for i in range(TM):
                    row = q0 + ty + RT * i
                    for j in range(TN):
                        col = k0 + tx + CT * j
                        if col >= tk or (causal != 0 and col > row + off):
                            s[i * TN + j] = NEG_INF

            # online softmax: new max, rescale, P = exp2(S - m)
            for i in range(TM):
                mx = s[i * TN]
                for j in range(1, TN):
                    mx = max(mx, s[i * TN + j])
                mx = row_max(mx, sm, ty + RT * i, tx)
                m_new = max(m[i], mx)
                m_use = m_new if m_new != NEG_INF else F0   # row fully masked so far
                alpha = exp2(m[i] - m_use)
                m[i] = m_new
                psum = F0
                for j in range(TN):
                    p = exp2(s[i * TN + j] - m_use)
                    s[i * TN + j] = p
                    psum += p
                lp[i] = lp[i] * alpha + psum
                for j in range(TD):
                    acc[i * TD + j] *= alpha
            # P -> Ps[row][col]
            for i in range(TM):
                for j in range(TN):
                    sm[U(P_OFF + (ty + RT * i) * PS + tx + CT * j)] = s[i * TN + j]
            cuda.syncthreads()

            # O_i += P V_j: TM x TD per thread
            for c8 in range(0, BC, CU):
                for u in range(CU):
                    c = c8 + u
                    for i in range(TM):
                        qa[i] = sm[U(P_OFF + (ty + RT * i) * PS + c)]
                    for j in range(TD):
                        kb[j] = sm[U(V_OFF + c * VS + tx + CT * j)]
                    for i in range(TM):
                        for j in range(TD):
                            acc[i * TD + j] += qa[i] * kb[j]

        # epilogue: l = sum of the CT partial sums; O = acc / l; lse = ln2 (m + log2 l)
        if not SHUFFLE:
            cuda.syncthreads()             # the last reads of the reduction scratch are done
        for i in range(TM):
            row = q0 + ty + RT * i
            lt = row_sum(lp[i], sm, ty + RT * i, tx)
            if not SHUFFLE:
                cuda.syncthreads()
            if row < tq:
                if lt != F0:               # (a NaN sum stays NaN: never looks masked)
                    inv = F1 / lt
                    for j in range(TD):
                        col = tx + CT * j
                        if col < d:
                            o[U(h), U(row), U(col)] = acc[i * TD + j] * inv
                    if tx == 0:
                        lse[U(h), U(row)] = (m[i] + log2(lt)) * LN2_F
                else:                      # no visible key: o = 0, lse = -inf
                    for j in range(TD):
                        col = tx + CT * j
                        if col < d:
                            o[U(h), U(row), U(col)] = F0
                    if tx == 0:
                        lse[U(h), U(row)] = NEG_INF

    flash_forward.__name__ = (f"flash_q{BR}_k{BC}_t{NT}_m{TM}_d{D}"
                              + ("" if SHUFFLE else "_sim"))
    kernel = cuda.jit(flash_forward)
    return kernel, cfg


SIGNATURE = None


def signature():
    """The one signature every flash variant is compiled for (fp32, 3-d C arrays)."""
    global SIGNATURE
    if SIGNATURE is None:
        from numba import float32, int32
        from numba import types
        a3 = types.Array(float32, 3, "C")
        a2 = types.Array(float32, 2, "C")
        SIGNATURE = (a3, a3, a3, a3, a2, int32, int32, int32, float32, int32, int32)
    return SIGNATURE


#: Inner-product steps written per loop iteration before tuning (see make_flash_kernel).
UNTUNED_UNROLL = 8
#: The configuration under Numba's simulator: tiny tiles, a few simulated threads.
SIMULATOR_CONFIG = (8, 8, 16, 2)
#: Most floats a thread may keep in its micro-tile arrays (O, S, m, l, staging) for the
#: chosen configuration: (128, 128, 32, 128, tm=8) keeps 200 and compiled to 233
#: registers with no local memory on the H200 (benchmarks/results/h200_tuning_sweep.json);
#: more would spill to local memory.
MAX_MICRO_FLOATS = 200
#: Tiles tried after the untuned default when it does not fit, best first: larger tiles
#: re-read K and V fewer times (flashcourse.traffic), then more threads per block.
FALLBACK_TILES = tuple(sorted(((br, bc, t) for br in (128, 64, 32, 16)
                               for bc in (64, 32, 16) for t in (256, 128)),
                              key=lambda c: (-c[0] * c[1], -c[2], -c[0])))


def untuned_config(d: int):
    """The hand-picked GPU default (block_q, block_k, threads, tm), before any sweep.

    Measured best among a few variants on an H200 (benchmarks/NOTES_cuda_forward.md).
    """
    if d <= 64:
        return 128, 64, 256, 8
    return 64, 32, 256, 4


def micro_floats(cfg: FlashConfig) -> int:
    """Floats one thread keeps in registers: O (TM x TD), S (TM x TN), m, l, q (TM each)
    and the K/V staging row (max(TD, TN))."""
    return cfg.tm * cfg.td + cfg.tm * cfg.tn + 3 * cfg.tm + max(cfg.td, cfg.tn)


def square_tm(d: int, block_q: int, block_k: int, threads: int, candidates=(1, 2, 4, 8, 16)):
    """The rows per thread whose score micro-tile TM x TN is closest to square (larger tm
    on ties), among those the GPU layout can arrange: the most multiply-adds per
    shared-memory load for a given register count. None when no tm fits."""
    best = None
    for tm in candidates:
        try:
            cfg = layout(d, block_q, block_k, threads, tm, shuffle=True)
        except ValueError:
            continue
        score = (abs(math.log(cfg.tm / cfg.tn)), -tm)
        if best is None or score < best[0]:
            best = (score, tm)
    return None if best is None else best[1]


def _candidates(d: int, tuned):
    """(block_q, block_k, threads, tm), best first: the tuned, the untuned, the fallbacks."""
    if tuned is not None:
        yield tuple(tuned)
    yield untuned_config(d)
    for br, bc, t in FALLBACK_TILES:
        tm = square_tm(d, br, bc, t)
        if tm is not None:
            yield br, bc, t, tm


@lru_cache(maxsize=None)
def choose_config(d: int, limits, tuned=None):
    """(block_q, block_k, threads, tm) for head dim d on a GPU with these limits (pure).

    Candidates, best first: `tuned` (the recorded choice for this GPU model, when there
    is one), `untuned_config(d)`, then FALLBACK_TILES (each with the squarest micro-tile),
    each kept only if it holds at most MAX_MICRO_FLOATS floats per thread (no register
    spills). The first that fits one block within `limits` (threads, shared memory with
    the opt-in) and keeps `limits.MIN_RESIDENT_WARPS` warps resident per SM wins
    (`limits.pick_config`); LaunchError naming shared memory per block when none fits.
    """
    from ...limits import pick_config
    cands = []
    for key in _candidates(d, tuned):
        cfg = layout(d, *key, shuffle=True)
        if micro_floats(cfg) <= MAX_MICRO_FLOATS:
            cands.append((key, cfg.threads, cfg.shared_bytes))
    return pick_config(cands, limits, f"flash kernel d={d}")


@lru_cache(maxsize=None)
def _recorded_config(d: int, gpu_name: str):
    """The recorded tuned configuration for (d, this GPU model), read once per process."""
    from ...results import tuned_config
    return tuned_config(d, gpu_name=gpu_name, doc=_sweep())


@lru_cache(maxsize=None)
def _recorded_regs(d: int, block_q: int, block_k: int, threads: int, tm: int):
    """Registers per thread the H200 sweep recorded for this configuration, or None."""
    from ...results import recorded_regs
    return recorded_regs(d, block_q, block_k, threads, tm, doc=_sweep())


@lru_cache(maxsize=None)
def _sweep():
    """The recorded H200 sweep (validated), read once per process; None without one."""
    from ...results import load_sweep
    return load_sweep()


def default_config(d: int, limits=None):
    """(block_q, block_k, threads, tm) used when the caller gives none.

    Tiny tiles on the simulator (when no `limits` are given); on a GPU (or for the given
    `limits`), `choose_config` from this device's limits, trying first the tuned
    configuration recorded for this GPU model and head dimension
    (`flashcourse.results.tuned_config`, which raises ResultsError on a broken results
    file): only an H200 has one.
    """
    from ...limits import current_limits
    if limits is None:
        if using_simulator():
            return SIMULATOR_CONFIG
        limits = current_limits()
    return choose_config(d, limits, _tuned_key(d, limits.model))


def _tuned_key(d: int, model: str):
    tuned = _recorded_config(d, model)
    if tuned is None:
        return None
    return tuned["block_q"], tuned["block_k"], tuned["threads"], tuned["tm"]


def default_unroll(d: int, limits=None) -> int:
    """The inner-loop unroll used when the caller gives none (tuned when recorded)."""
    from ...limits import current_limits
    if limits is None:
        if using_simulator():
            return UNTUNED_UNROLL
        limits = current_limits()
    key = _tuned_key(d, limits.model)
    if key is None or key != default_config(d, limits):     # the tuned one did not fit
        return UNTUNED_UNROLL
    return _recorded_config(d, limits.model).get("unroll") or UNTUNED_UNROLL


def launches(d: int, tq: int, tk: int, bh: int, limits):
    """The launch `run` makes with the default configuration for `limits` (a GPU's layout),
    as a `flashcourse.limits.Launch`; LaunchError when no configuration fits."""
    from ...limits import Launch
    br, bc, t, tm = default_config(d, limits)
    cfg = layout(d, br, bc, t, tm, shuffle=True)
    return (Launch(f"flash kernel d={d}", (ceil_div(tq, br), bh), t, cfg.shared_bytes,
                   regs_per_thread=_recorded_regs(d, br, bc, t, tm),
                   config=f"Br={br} Bc={bc} threads={t} tm={tm}"),)


def run(qf, kf, vf, o, lse, tq, tk, d, scale, causal, block_q=None, block_k=None,
        threads=None, tm=None, unroll=None):
    """Launch the flash kernel on flattened float32 device arrays (BH, T, d)."""
    dq, dk, dt, dm = default_config(d)
    unroll = default_unroll(d) if unroll is None else check_block(unroll, "unroll")
    block_q = dq if block_q is None else block_q
    block_k = dk if block_k is None else block_k
    threads = dt if threads is None else threads
    tm = dm if tm is None else tm
    cfg = plan(d, block_q, block_k, threads, tm)
    kern, cfg = make_flash_kernel(block_q, block_k, threads, tm, cfg.head_dim, cfg.shuffle,
                                  unroll)
    bh = qf.shape[0]
    grid = (ceil_div(tq, cfg.block_q), bh)
    args = (qf, kf, vf, o, lse, np.int32(tq), np.int32(tk), np.int32(d),
            np.float32(scale * LOG2E), np.int32(1 if causal else 0), np.int32(tk - tq))
    if not using_simulator():
        check_registers("flash kernel", kern.compile(signature()), cfg.threads)
    launch(kern, signature(), grid, cfg.threads, cfg.shared_bytes, args)
    return cfg


def resources(block_q, block_k, threads, tm, d, unroll=UNTUNED_UNROLL):
    """Compile one variant on the GPU; return registers, local bytes, shared bytes per block."""
    cfg = plan(d, block_q, block_k, threads, tm)
    kern, cfg = make_flash_kernel(block_q, block_k, threads, tm, cfg.head_dim, cfg.shuffle,
                                  unroll)
    ck = kern.compile(signature())
    return {"regs": int(ck.regs_per_thread),
            "local_bytes": int(ck.local_mem_per_thread),
            "shared_bytes": cfg.shared_bytes}
