"""decode: Flash-Decoding on the GPU, a split kernel and a combine kernel (fp32 arithmetic).

Kernels, side by side:

    decode_split     one thread block per (key split, row block, KV head): the online
                     softmax over the split's keys for all G x Tq query rows of the KV
                     head (every query head of a GQA group), written as a partial
                     state (o_s normalised, lse_s) per row
    decode_combine   one thread block per query row: merges the num_splits partial
                     states (lse = m + log sum e^(lse_s - m), o = sum w_s o_s / sum w_s)
    decode_split_tc  (decode_tc_kernels.py) the split kernel on the tensor cores: the
                     G x Tq rows of a KV head as the M rows of m16n8k16 products; the
                     fp16 default on a GPU from 2 rows per KV head (`choose_kernel`)

    from flashcourse.cuda import decode
    o, lse = decode(q, k, v)                    # q (B, Hq, Tq, d); k, v (B, Hkv, Tk, d)

The idea (flashcourse.decode has the numpy version and the maths)
    With Tq = 1 the FlashAttention-2 grid has B x H blocks: on a 132-SM GPU, B x H = 8
    blocks leave 124 SMs idle. Splitting the keys gives B x Hkv x num_splits blocks.
    Inside a block, every warp reads whole key rows with 16-byte loads: for d = 128,
    16 lanes hold one fp16 key row (8 values each) or 32 lanes one fp32 row (4 each),
    so one warp instruction reads 512 contiguous bytes. Each lane multiplies its 8 (4)
    values by the matching query values, the lanes of a key add their partial dot
    products with warp shuffles (xor butterfly), and every lane then updates its
    slice of the output with the online softmax. `unroll` keys per lane group are
    loaded before any is used, so each thread has 2 x unroll 16-byte loads in flight.
    At the end the (warp, key slot) states meet in shared memory and are merged.
    For GQA groups (more than 4 query rows) the warps are split into `row_groups`
    that each keep a few of the rows and read the same keys (the later groups mostly
    from L1): fewer registers per thread, more resident warps.

The bytes it moves (the decode IO model, flashcourse.decode_io)
    K and V once: 2 B Hkv Tk d e bytes (e = 2 for fp16, 4 for fp32), whatever the
    group size G (the G query heads of a KV head share its loads); q once; the
    partial states (S x B Hq Tq (d + 1) x 4 B) written and read once; o once.
    At Tk = 65536, d = 128, fp16, B x Hkv = 8: 268 MB of K/V, 0.56 MB of partials.

Expected cost and what limits it
    Memory-bound: the time floor is the K/V bytes over the memory bandwidth (about
    4.2 TB/s for a copy's read + write on an H200). Arithmetic per key: 2 d FLOP per
    query row for q.k and 2 d for p.v, so 4 G d FLOP per 2 d e bytes = G FLOP/B in
    fp16: far under the GPU's ~16 FLOP/B (fp32 FMA peak / bandwidth) for G = 1; the
    shuffles, exponentials and fp16 -> fp32 conversions count too, so at G = 8 the
    CUDA cores, not the memory, set the pace.
    Measured on an H200 (benchmarks/results/h200_decode.json, NOTES_cuda_decode.md):
    Tk = 65,536, B x Hkv = 8, fp16: 105.5 us = 2.55 TB/s (PyTorch flash 89 us; the
    course's FA2-order kernel, fp32, 174x slower than ours in fp32); B x Hkv = 32:
    91-98% of a device copy's rate; G = 8: 0.55-0.8 TB/s on the large problems, 4-5x
    under PyTorch, whose kernel puts the G query heads on tensor cores, as decode_split_tc
    does (NOTES_cuda_decode.md, run 3: 78-82 us for 1-16 rows, this kernel 79-540 us).
    Small problems: the host's launch costs (NOTES_host_path.md).

How to run it: decode(q, k, v) above; on a GPU, python benchmarks/gpu_decode.py --check --bench

Rules (as in flash.py): local arrays indexed only by compile-time constants in
unrolled loops (registers), float32 constants, unsigned indices. The 16-byte loads
are an LLVM intrinsic (`<4 x i32>` or `<4 x float>` load, aligned 16) that Numba
has no public API for; on the simulator, and on a GPU when d is not a multiple of
the vector or the arrays are not 16-byte aligned, plain masked element loads take
its place.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32
from numba import uint64 as U

from ...constants import F0, F1, FULL_MASK, LN2_F, LOG2E, NEG_INF
from ...geometry import ceil_div
from ...gpu import using_simulator
from ...limits import check_launch, current_limits
from ..._guards import forward_result
from ..common._device import exp2_log2, inlined, reset_state
from ..common._launch import WarpThreads, check_registers, flat, launch
from .vector_loads import row_loader
from .combine import combine_row, combine_threads, make_combine_kernel, slot_merge  # noqa: F401
from ..ptx.fp8 import resolve_hw_cvt
from .decode_tc_kernels import (SPLIT_KERNELS, TC_MIN_ROWS, DecodeTCConfig,  # noqa: F401
                                check_split_options, choose_kernel, contiguous_locate,
                                make_split_tc_kernel, tc_blocks_per_sm, tc_plan)
from .decode_tc_kernels import signature as tc_signature
from ..common.result_check import check_result

#: Most query rows (G x Tq) one block keeps in registers; more rows use more blocks.
MAX_ROWS = 8
#: Bytes per vector load.
VECTOR_BYTES = 16


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DecodeConfig(WarpThreads):
    """One compiled variant of the split kernel.

    vec: elements per vector load (16 B / element size); lpk: lanes per key row
    (a power of two <= 32); nv: vector loads per lane per key row; D = lpk*vec*nv the
    padded head dim; kpw = 32 // lpk keys per warp at once; unroll: keys per lane group
    loaded before use; warps per block; rows: query rows kept per block; row_groups: the
    warps are split into row_groups groups that each keep rows / row_groups of the rows
    (every group reads the same keys, the later ones mostly from the L1 cache: fewer
    registers per thread, more warps on an SM, for GQA groups).
    """

    itemsize: int        # 1 (FP8 e4m3 codes), 2 (fp16) or 4 (fp32) bytes per K/V element
    vec: int
    lpk: int
    nv: int
    unroll: int
    warps: int
    rows: int
    shuffle: bool        # warp shuffles (GPU) or shared-memory sums (simulator)
    vector: bool         # 16-byte intrinsic loads (GPU, d == D, aligned)
    row_groups: int = 1
    scale_block: int = 0  # FP8: 0 one scale per (B, Hkv), else per block of this many tokens
    hw_cvt: bool = False  # FP8: decode with cvt.rn.f16x2.e4m3x2 (sm_89+) instead of arithmetic

    @property
    def fp8(self):
        return self.itemsize == 1

    @property
    def rows_per_warp(self):
        return self.rows // self.row_groups

    @property
    def key_warps(self):                 # warps that share one row group's keys
        return self.warps // self.row_groups

    @property
    def head_dim(self):
        return self.lpk * self.vec * self.nv

    @property
    def epl(self):                       # elements per lane per key row
        return self.vec * self.nv

    @property
    def kpw(self):
        return 32 // self.lpk

    @property
    def slots(self):                     # (key warp, key slot) pairs: softmax states per row
        return self.key_warps * self.kpw

    @property
    def keys_per_step(self):
        return self.slots * self.unroll

    def offsets(self):
        a_off = 0                                        # acc (slots, rows, D)
        m_off = a_off + self.slots * self.rows * self.head_dim
        l_off = m_off + self.slots * self.rows
        r_off = l_off + self.slots * self.rows           # simulator: partial dots
        end = r_off + (0 if self.shuffle else self.threads * self.rows * self.unroll)
        return a_off, m_off, l_off, r_off, end

    @property
    def shared_bytes(self):
        return 4 * self.offsets()[-1]


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def plan(d: int, itemsize: int, rows: int, *, unroll: int = 4, warps: int = 4,
         row_groups: int = 1, shuffle: bool | None = None,
         vector: bool | None = None, scale_block: int = 0,
         hw_cvt: bool | None = None, fit: bool = False) -> DecodeConfig:
    """The split kernel's layout for head dim d, K/V element size (1: FP8 e4m3 codes) and
    query rows; scale_block, hw_cvt: FP8 only (`DecodeConfig`; hw_cvt None: the
    instruction where this GPU has it). fit: `warps` is a default, not the caller's
    choice: halve it (keeping whole row groups) while the merge of the warps' states
    would need more than 48 KiB of shared memory (slots x rows x D x 4 B, slots = key warps
    x keys per warp: FP8's 16-byte loads of 16 codes put 4 keys per warp at d = 128, so 8
    warps with 3 rows already need 49,920 B)."""
    from ..._checks import check_block
    d = check_block(d, "d")
    if itemsize not in (1, 2, 4):
        raise ValueError(f"K/V must be FP8 codes (uint8), float16 or float32 on the GPU, got "
                         f"{itemsize} B elements")
    if itemsize == 1:
        hw_cvt = resolve_hw_cvt(hw_cvt)
        scale_block = int(scale_block)
    else:
        hw_cvt, scale_block = False, 0
    rows = min(check_block(rows, "rows"), MAX_ROWS)
    unroll = check_block(unroll, "unroll")
    warps = check_block(warps, "warps")
    if shuffle is None:
        shuffle = not using_simulator()
    vec = VECTOR_BYTES // itemsize
    lpk = min(32, _pow2_at_least(ceil_div(d, vec)))
    nv = ceil_div(d, lpk * vec)
    if vector is None:
        vector = not using_simulator()
    vector = bool(vector) and lpk * vec * nv == d and not using_simulator()
    row_groups = min(check_block(row_groups, "row_groups"), rows)
    if warps % row_groups:
        raise ValueError(f"warps={warps} must be a multiple of row_groups={row_groups}")
    rows = ceil_div(rows, row_groups) * row_groups      # whole rows per group

    def layout(w):
        return DecodeConfig(itemsize, vec, lpk, nv, unroll, w, rows, bool(shuffle), vector,
                            row_groups, scale_block, hw_cvt)
    cfg = layout(warps)
    while fit and cfg.shared_bytes > 48 * 1024 and cfg.warps // 2 >= row_groups \
            and (cfg.warps // 2) % row_groups == 0:
        cfg = layout(cfg.warps // 2)
    check_launch(cfg.threads, cfg.shared_bytes, optin=False, what="decode split kernel")
    if cfg.shared_bytes > 48 * 1024:
        raise ValueError(f"decode split kernel: needs {cfg.shared_bytes:,} B of shared memory "
                         f"per block, more than 48 KiB; use fewer warps (warps={warps})")
    return cfg


# ---------------------------------------------------------------------------------------
# The split kernel
# ---------------------------------------------------------------------------------------

@inlined
def contiguous_key_row(kv, h, tk, key, valid, heads, page):
    """Where key `key` of KV head h lives in a contiguous cache (B*Hkv, Tk, d): row `key`
    of head h; a key past the split reads row Tk (zeros). kv, heads, page: unused (the
    paged twin, `paged_kernels.paged_key_row`, uses the page `paged_locate` read)."""
    return h, (key if valid else tk), tk


@lru_cache(maxsize=None)
def make_split_kernel(cfg: DecodeConfig):
    """Compile-time-specialised split kernel for one configuration (cached).

    Launch with grid (num_splits, ceil(R / rows), B*Hkv), cfg.threads threads and
    cfg.shared_bytes of dynamic shared memory. Arguments:
        q (B*Hq*Tq, d), k, v (B*Hkv, Tk, d), o_part (S, B*Hq*Tq, d) float32,
        lse_part (S, B*Hq*Tq) float32, R = G*Tq rows per KV head, Tq, Tk, d,
        keys_per_split, qscale = scale*log2(e) (float32), causal (0/1), Tk - Tq.
    Row r of KV head h is query row h*R + r of the flattened q (head h*G + r // Tq,
    query r % Tq), so the G query heads of a group are adjacent. The work itself is
    `split_body`, shared with the paged kernel. An FP8 cache (cfg.fp8) takes two more
    arguments after v: k_scale, v_scale (B*Hkv, groups) float32 (`split_body`).
    """
    body = split_body(cfg, contiguous_key_row, contiguous_locate)
    ROWS = cfg.rows

    def decode_split(q, k, v, o_part, lse_part, rows_kv, tq, tk, d, keys_per_split,
                     qscale, causal, off):
        split = cuda.blockIdx.x
        h = cuda.blockIdx.z                # KV head (flattened B*Hkv)
        k_begin = split * keys_per_split
        k_end = min(k_begin + keys_per_split, tk)
        body(q, k, v, lse_part, lse_part, 0, o_part, lse_part, split, lse_part, h, tk,
             h * rows_kv, h * rows_kv, cuda.blockIdx.y * ROWS, rows_kv, tq, d, k_begin, k_end,
             qscale, causal, off)

    def decode_split_fp8(q, k, v, k_scale, v_scale, o_part, lse_part, rows_kv, tq, tk, d,
                         keys_per_split, qscale, causal, off):
        split = cuda.blockIdx.x
        h = cuda.blockIdx.z
        k_begin = split * keys_per_split
        k_end = min(k_begin + keys_per_split, tk)
        body(q, k, v, k_scale, v_scale, h, o_part, lse_part, split, lse_part, h, tk,
             h * rows_kv, h * rows_kv, cuda.blockIdx.y * ROWS, rows_kv, tq, d, k_begin, k_end,
             qscale, causal, off)

    if cfg.fp8:
        decode_split = decode_split_fp8
    decode_split.__name__ = split_name(cfg)
    return cuda.jit(decode_split)


def split_name(cfg: DecodeConfig, prefix: str = "decode_split") -> str:
    return (f"{prefix}_e{cfg.itemsize}_v{cfg.vec}_l{cfg.lpk}_n{cfg.nv}_u{cfg.unroll}"
            f"_w{cfg.warps}_r{cfg.rows}_g{cfg.row_groups}" + ("" if cfg.shuffle else "_sim")
            + ("_vec" if cfg.vector else "")
            + (f"_fp8s{cfg.scale_block}" + ("_cvt" if cfg.hw_cvt else "") if cfg.fp8 else ""))


@lru_cache(maxsize=None)
def split_body(cfg: DecodeConfig, key_row, locate):
    """The split kernel's work as one device function, shared by the contiguous kernel
    (`make_split_kernel`) and the paged one (`paged_kernels`):

        body(q, k, v, k_scale, v_scale, srow, o_part, lse_part, split, kv, h, nkv, qrow0,
             orow0, r0, rows_kv, tq, d, k_begin, k_end, qscale, causal, off)

    runs the online softmax of the block's query rows r0 .. r0 + rows - 1 (of the R =
    rows_kv rows of KV head h; q row qrow0 + r) over keys [k_begin, k_end) and writes
    the partial state into o_part[split, orow0 + r], lse_part[split, orow0 + r].
    `key_row(kv, h, nkv, key, valid, heads, page)` -> (hh, kk, nn) says where a key's K
    and V rows are: row kk of head hh of k, v seen as (heads, nn, d) arrays (kk >= nn:
    zeros); `page = locate(kv, key, valid)` is what that needs from memory (a paged
    cache: the key's page, from the block table), read one step ahead, so that the K and
    V loads of a step never wait for it (the table read is in flight during the step
    before).

    FP8 caches (cfg.fp8: k, v hold e4m3 codes, decoded to float32 by `row_loader`) carry
    float32 scales k_scale, v_scale, read as 2-D arrays; the value of a code is
    decode(code) x scale. Where the scales are applied, at least cost:
        one scale per (B, Hkv) (cfg.scale_block 0): row srow of k_scale, v_scale, column 0,
            constant over the split: k_scale joins the softmax scale that q is multiplied
            by once (qscale x k_scale), v_scale multiplies the split's normalised output
            once per element at the end. No work per key.
        per block of scale_block tokens: key kk of head hh has the scales [hh, kk //
            scale_block] (the contiguous cache's (B*Hkv, ceil(Tk / scale_block)), or a pool's
            (num_pages*Hkv, page_size / scale_block)): the scales change inside a split, so
            per key: its score is multiplied by its k scale after the lanes' sum (one
            multiply per key and row), and its probability p by its v scale before
            acc += p v (one more), while the running sum l takes p unscaled.
    Other caches ignore k_scale, v_scale, srow (the callers pass placeholders).
    """
    VEC, LPK, NV, UN, ROWS = cfg.vec, cfg.lpk, cfg.nv, cfg.unroll, cfg.rows
    RG, RPW, KW = cfg.row_groups, cfg.rows_per_warp, cfg.key_warps
    D, EPL, KPW, NT, NSLOT = cfg.head_dim, cfg.epl, cfg.kpw, cfg.threads, cfg.slots
    STEP = cfg.keys_per_step
    A_OFF, M_OFF, L_OFF, R_OFF, _ = cfg.offsets()
    SHUFFLE = cfg.shuffle
    RU = RPW * UN                       # scores per lane per step
    QN = RPW * EPL                      # query / output registers per lane
    KN = UN * EPL                       # K (and V) registers per lane
    LOG_LPK = LPK.bit_length() - 1

    exp2, log2 = exp2_log2()
    MERGE = slot_merge(using_simulator(), exp2, NSLOT, ROWS, D, (M_OFF, L_OFF, A_OFF))
    HEAD_SC = cfg.fp8 and cfg.scale_block == 0        # one k, v scale per split
    BLOCK_SC = cfg.fp8 and cfg.scale_block > 0        # a scale per block of tokens
    SB = max(cfg.scale_block, 1)

    load_row = row_loader(cfg)

    @cuda.jit(device=True)
    def key_sums(dots, sm, tid):
        """Sum each dots[i] over the LPK lanes of a key (all threads must call it)."""
        if SHUFFLE:
            for i in range(RU):
                x = dots[i]
                for st in range(LOG_LPK):
                    x += cuda.shfl_xor_sync(FULL_MASK, x, LPK >> (st + 1))
                dots[i] = x
        else:
            for i in range(RU):
                sm[U(R_OFF + tid * RU + i)] = dots[i]
            cuda.syncthreads()
            g0 = tid - tid % LPK
            for i in range(RU):
                s = F0
                for t in range(LPK):
                    s += sm[U(R_OFF + (g0 + t) * RU + i)]
                dots[i] = s
            cuda.syncthreads()

    def body(q, k, v, k_scale, v_scale, srow, o_part, lse_part, split, kv, h, nkv, qrow0,
             orow0, r0, rows_kv, tq, d, k_begin, k_end, qscale, causal, off):
        sm = cuda.shared.array(0, float32)
        tid = cuda.threadIdx.x
        lane = tid % 32
        warp = tid // 32
        rg = warp % RG                     # row group: rows rg*RPW .. rg*RPW + RPW - 1
        kw = warp // RG                    # key warp within the row group
        kl = lane % LPK                    # lane within its key row
        kg = lane // LPK                   # key slot within the warp
        slot = kw * KPW + kg
        rw0 = r0 + rg * RPW                # first row of this warp
        heads = k.shape[0]
        qs = qscale
        vsc = F1
        if HEAD_SC:                        # the split's one k and v scale
            qs = qscale * k_scale[U(srow), U(0)]
            vsc = v_scale[U(srow), U(0)]

        # this lane's slice of the warp's query rows, pre-scaled by scale*log2(e)
        # (and, with one scale per head of an FP8 cache, by its k scale)
        qr = cuda.local.array(QN, float32)
        for rr in range(RPW):
            for vv in range(NV):
                for e in range(VEC):
                    c = (vv * LPK + kl) * VEC + e
                    x = F0
                    if rw0 + rr < rows_kv and c < d:
                        x = float32(q[U(qrow0 + rw0 + rr), U(c)]) * qs
                    qr[rr * EPL + vv * VEC + e] = x

        acc = cuda.local.array(QN, float32)   # unnormalised output slice
        m = cuda.local.array(RPW, float32)            # running max (log2 units)
        l = cuda.local.array(RPW, float32)            # running sum of exp2(s - m)
        kr = cuda.local.array(KN, float32)
        vr = cuda.local.array(KN, float32)
        sc = cuda.local.array(RU, float32)
        ksu = cuda.local.array(UN, float32)           # FP8 block scales of this step's keys
        vsu = cuda.local.array(UN, float32)
        pg = cuda.local.array(UN, int32)              # locate() of the step's keys
        reset_state(acc, QN, m, l, RPW)
        for u in range(UN):
            key = k_begin + (u * KW + kw) * KPW + kg
            pg[u] = locate(kv, key, key < k_end)

        for base in range(k_begin, k_end, STEP):
            # issue every load of this step before using any: 2 x UN x NV 16-byte loads
            for u in range(UN):
                key = base + (u * KW + kw) * KPW + kg
                hh, kk, nn = key_row(kv, h, nkv, key, key < k_end, heads,  # past k_end:
                                     pg[u])                                # zeros
                load_row(k, hh, kk, kl, nn, d, kr, u * EPL)
                load_row(v, hh, kk, kl, nn, d, vr, u * EPL)
                if BLOCK_SC:
                    ks = F0
                    vs = F0
                    if key < k_end:
                        ks = k_scale[U(hh), U(kk // SB)]
                        vs = v_scale[U(hh), U(kk // SB)]
                    ksu[u] = ks
                    vsu[u] = vs
            for u in range(UN):                           # the next step's, in flight
                key = base + STEP + (u * KW + kw) * KPW + kg   # during this step's work
                pg[u] = locate(kv, key, key < k_end)
            # partial dot products of this lane, then summed over the key's lanes
            for rr in range(RPW):
                for u in range(UN):
                    s = F0
                    for e in range(EPL):
                        s += qr[rr * EPL + e] * kr[u * EPL + e]
                    sc[rr * UN + u] = s
            key_sums(sc, sm, tid)
            # online softmax over this step's UN keys, one rescale per step
            for rr in range(RPW):
                qi = (rw0 + rr) % tq                      # query index of this row
                mx = NEG_INF
                for u in range(UN):
                    key = base + (u * KW + kw) * KPW + kg
                    if BLOCK_SC:                          # the key's k scale
                        sc[rr * UN + u] *= ksu[u]
                    if key >= k_end or (causal != 0 and key > qi + off):
                        sc[rr * UN + u] = NEG_INF
                    mx = max(mx, sc[rr * UN + u])
                m_new = max(m[rr], mx)
                m_use = m_new if m_new != NEG_INF else F0
                alpha = exp2(m[rr] - m_use)
                m[rr] = m_new
                lsum = l[rr] * alpha
                for e in range(EPL):
                    acc[rr * EPL + e] *= alpha
                for u in range(UN):
                    p = exp2(sc[rr * UN + u] - m_use)
                    lsum += p
                    if BLOCK_SC:                          # the key's v scale, on p
                        p *= vsu[u]
                    for e in range(EPL):
                        acc[rr * EPL + e] += p * vr[u * EPL + e]
                l[rr] = lsum

        # every (warp, key slot) state to shared memory, then merge them per (row, col)
        cuda.syncthreads()
        for rr in range(RPW):
            br = rg * RPW + rr                            # row within the block
            if kl == 0:
                sm[U(M_OFF + slot * ROWS + br)] = m[rr]
                sm[U(L_OFF + slot * ROWS + br)] = l[rr]
            for vv in range(NV):
                for e in range(VEC):
                    c = (vv * LPK + kl) * VEC + e
                    sm[U(A_OFF + (slot * ROWS + br) * D + c)] = acc[rr * EPL + vv * VEC + e]
        cuda.syncthreads()
        for idx in range(tid, ROWS * D, NT):
            rr = idx // D
            c = idx - rr * D
            if r0 + rr < rows_kv and c < d:
                mx, lt, at = MERGE(sm, rr, c)             # (combine.slot_merge)
                row = orow0 + r0 + rr
                if lt != F0:                              # (a NaN stays NaN)
                    if HEAD_SC:                           # the split's v scale
                        o_part[U(split), U(row), U(c)] = at / lt * vsc
                    else:
                        o_part[U(split), U(row), U(c)] = at / lt
                    if c == 0:
                        lse_part[U(split), U(row)] = (mx + log2(lt)) * LN2_F
                else:                                     # no visible key in this split
                    o_part[U(split), U(row), U(c)] = F0
                    if c == 0:
                        lse_part[U(split), U(row)] = NEG_INF

    return inlined(body)


# ---------------------------------------------------------------------------------------
# Host side
# ---------------------------------------------------------------------------------------

def default_launch(itemsize: int, rows: int = 1, simulator: bool | None = None) -> dict:
    """Split-kernel defaults (unroll, warps, row_groups).

    From the variant timings of the first H200 run (Tk = 65536, d = 128;
    benchmarks/NOTES_cuda_decode.md): fp16 unroll 2 with 8 warps, fp32 unroll 4 with 4
    warps. A block with more than 4 query rows (GQA groups) splits its 8 warps into row
    groups: with all 8 rows in every thread the first run measured only ~450 GB/s (154-214
    registers per thread, 8 warps per SM). Two row groups of 4 rows beat four of 2 by ~25%
    (G x Tq = 16, Tk = 16k-128k: 156-550 us against 197-710 us;
    benchmarks/results/h200_decode_row_variants_log.txt). Tiny ones on the simulator
    (`simulator`: None = whether it runs now; False = a GPU's defaults). FP8 caches (itemsize
    1) take fp16's defaults, not yet tuned (benchmarks/gpu_fp8.py times a few variants),
    with fewer warps where their merge would not fit 48 KiB (`split_config` plans with
    fit=True: 4 warps instead of 8 from 3 query rows per KV head, whatever d).
    """
    if using_simulator() if simulator is None else simulator:
        return {"unroll": 1, "warps": 1, "row_groups": 1}
    if rows > 4:
        return {"unroll": 2, "warps": 8, "row_groups": 2}
    if itemsize <= 2:
        return {"unroll": 2, "warps": 8, "row_groups": 1}
    return {"unroll": 4, "warps": 4, "row_groups": 1}


#: Resident blocks per SM assumed by the split heuristic on a GPU (FlashAttention-2
#: uses 2 for its 128-thread blocks; ours are smaller and lighter).
BLOCKS_PER_SM = 4
#: Keys per split are a multiple of this (the heuristic's key block, Bc).
DEFAULT_BLOCK_K = 64


def sm_count() -> int:
    """SMs of this GPU (the H200's 132 under the simulator)."""
    return current_limits().sm_count


def plan_splits(b_hkv: int, rows_kv: int, tk: int, cfg: DecodeConfig, *,
                num_splits=None, block_k=None, blocks_per_sm=None, sms=None):
    """(num_splits, keys_per_split): FlashAttention-2's heuristic over this GPU's SMs
    (or `sms` of them)."""
    from ... import decode as np_decode
    from ..._checks import check_block
    block_k = DEFAULT_BLOCK_K if block_k is None else check_block(block_k, "block_k")
    row_blocks = ceil_div(rows_kv, cfg.rows)
    if num_splits is None:
        num_splits = np_decode.choose_num_splits(
            b_hkv, tk, block_k, row_blocks=row_blocks,
            sms=sm_count() if sms is None else sms,
            blocks_per_sm=BLOCKS_PER_SM if blocks_per_sm is None else blocks_per_sm)
    num_splits = np_decode.check_num_splits(num_splits, tk, block_k)   # <= key blocks, 128
    k0, k1 = np_decode.split_bounds(tk, block_k, num_splits)[0]
    per = k1 - k0
    return num_splits, per


def split_config(kernel, d: int, itemsize: int, rows: int, aligned: bool, *, unroll=None,
                 warps=None, row_groups=None, tc_block_k=None, m_tiles=None, tc_warps=None,
                 scale_block: int = 0, hw_cvt=None):
    """(config, blocks per SM for the split heuristic, None = its default) of the split
    kernel `choose_kernel` picks for `rows` = G x Tq query rows per KV head (itemsize 1:
    an FP8 cache, CUDA cores only; scale_block, hw_cvt as `plan`)."""
    chosen = choose_kernel(kernel, d, itemsize, rows, aligned)
    check_split_options(chosen, kernel, unroll=unroll, warps=warps, row_groups=row_groups,
                        tc_block_k=tc_block_k, m_tiles=m_tiles, tc_warps=tc_warps)
    if chosen == "tensor_core":
        cfg = tc_plan(d, rows, block_k=tc_block_k, m_tiles=m_tiles, warps=tc_warps)
        return cfg, tc_blocks_per_sm(cfg)
    dflt = default_launch(itemsize, min(rows, MAX_ROWS))
    cfg = plan(d, itemsize, rows, unroll=dflt["unroll"] if unroll is None else unroll,
               warps=dflt["warps"] if warps is None else warps,
               row_groups=dflt["row_groups"] if row_groups is None else row_groups,
               vector=aligned, scale_block=scale_block, hw_cvt=hw_cvt, fit=warps is None)
    return cfg, None


def run(qf, kf, vf, o, lse, o_part, lse_part, *, tq, group, d, scale, causal, num_splits,
        keys_per_split, cfg: DecodeConfig, scales=None):
    """Launch split (+ combine when num_splits > 1) on flattened device arrays.

    qf (B*Hq*Tq, d); kf, vf (B*Hkv, Tk, d); o (B*Hq*Tq, d) float32; lse (B*Hq*Tq,);
    o_part (S, B*Hq*Tq, d), lse_part (S, B*Hq*Tq) float32 workspaces (S = num_splits;
    unused when num_splits == 1, the split kernel then writes o and lse directly).
    scales: an FP8 cache's (k_scale, v_scale), float32 (B*Hkv, groups) device arrays.
    """
    b_hkv, tk = kf.shape[0], kf.shape[1]
    rows_kv = group * tq
    grid = (num_splits, ceil_div(rows_kv, cfg.rows), b_hkv)
    if num_splits == 1:
        op, lp = o.reshape(1, *o.shape), lse.reshape(1, *lse.shape)
    else:
        op, lp = o_part, lse_part
    tail = (np.int32(keys_per_split), np.float32(scale * LOG2E),
            np.int32(1 if causal else 0), np.int32(tk - tq))
    sig = None
    if isinstance(cfg, DecodeTCConfig):          # fp16 words; K, V flat
        kern, sig = make_split_tc_kernel(cfg), tc_signature()
        args = (qf.view(np.uint32), flat(kf).view(np.uint32), flat(vf).view(np.uint32), op, lp,
                np.int32(rows_kv), np.int32(tq), np.int32(tk)) + tail
    else:
        kern = make_split_kernel(cfg)
        kv = (qf, kf, vf) + (tuple(scales) if cfg.fp8 else ())
        args = kv + (op, lp, np.int32(rows_kv), np.int32(tq), np.int32(tk), np.int32(d)) + tail
    if sig is not None and not using_simulator():     # registers x threads fit a block
        check_registers("decode tensor-core split", kern.compile(sig), cfg.threads)
    launch(kern, sig, grid, cfg.threads, cfg.shared_bytes, args)
    if num_splits > 1:
        nt = combine_threads(d)
        launch(make_combine_kernel(nt), None, int(o.shape[0]), nt, 0,
               (o_part, lse_part, o, lse, np.int32(num_splits), np.int32(d)))


def gqa_shapes(qs, ks, vs, nonempty: bool = True) -> tuple:
    """(b, hq, tq, d, hkv, tk) of the shapes of q (B, Hq, Tq, d) and k, v (B, Hkv, Tk, d);
    ValueError naming what does not fit (nonempty: a zero size too)."""
    if len(qs) != 4 or len(ks) != 4 or ks != vs or qs[0] != ks[0] or qs[3] != ks[3] \
            or (nonempty and (0 in qs or 0 in ks)):
        raise ValueError(f"expected q (B, Hq, Tq, d) and k, v (B, Hkv, Tk, d) with "
                         f"matching B and d, got q {qs}, k {ks}, v {vs}")
    if qs[1] % ks[1]:
        raise ValueError(f"the query heads Hq = q.shape[1] = {qs[1]} must be a multiple "
                         f"of the key/value heads Hkv = k.shape[1] = {ks[1]}")
    return (*qs, ks[1], ks[2])


def split_outputs(rows: int, d: int, ns: int) -> tuple:
    """(o, lse, o_part, lse_part): float32 device arrays (rows, d), (rows,) and, with ns > 1
    splits, the splits' partial states (ns, rows, d), (ns, rows) (else None)."""
    o = cuda.device_array((rows, d), np.float32)
    lse = cuda.device_array((rows,), np.float32)
    if ns > 1:
        return o, lse, cuda.device_array((ns, rows, d), np.float32), \
            cuda.device_array((ns, rows), np.float32)
    return o, lse, None, None


def _aligned(x) -> bool:
    iface = getattr(x, "__cuda_array_interface__", None)
    if iface is None:
        return True
    return iface["data"][0] % VECTOR_BYTES == 0


def decode(q, k, v, *, num_splits=None, block_k=None, causal=False, scale=None,
           allow_nonfinite=False, check=False, unroll=None, warps=None, row_groups=None,
           blocks_per_sm=None, kernel=None, tc_block_k=None, m_tiles=None, tc_warps=None):
    """Flash-Decoding on the GPU (or the simulator): exact attention, fp32 arithmetic.

    Args:
        q: (B, Hq, Tq, d); k, v: (B, Hkv, Tk, d) with Hq a multiple of Hkv (GQA; K and
            V are never copied per query head). numpy arrays (float16 K/V stay float16
            on the device; float32 and float64 run as float32; o comes back in q's
            dtype) or C-contiguous float16/float32 device arrays (anything with the
            CUDA array interface; results stay on the device, float32).
        num_splits: key splits, 1 .. min(ceil(Tk / block_k), 128) (else a ValueError
            naming num_splits, before any launch); None: FlashAttention-2's heuristic
            for this GPU.
        block_k: splits are cut in whole blocks of block_k keys (default 64).
        causal: bottom-right aligned mask; scale: default 1/sqrt(d).
        allow_nonfinite: accept NaN/inf in numpy inputs: the rows that see one get
            o = NaN, lse = NaN (never the empty row's o = 0, lse = -inf).
        check: device-array inputs only: check the results on the device as numpy
            results are checked (`result_check.check_result`: one pass over o and lse
            and one host sync; off by default, so a call never waits for the GPU).
        kernel: the split kernel, "cuda_cores" (`make_split_kernel`, any dtype and d)
            or "tensor_core" (`decode_tc_kernels`: float16 q, k, v, d a multiple of 16
            up to 256, 16-byte aligned arrays); None: the tensor-core one for float16
            with at least TC_MIN_ROWS query rows (G x Tq) per KV head where it can run.
        unroll, warps, row_groups: the CUDA-core split kernel's variant (keys per lane
            group loaded before use, warps per block, groups of warps that share the
            query rows); tc_block_k, m_tiles, tc_warps: the tensor-core one's (keys per
            warp step, 16-row tiles per warp, warps per block sharing a split's keys);
            blocks_per_sm: the heuristic's residency assumption.

    Returns:
        o (B, Hq, Tq, d), lse (B, Hq, Tq) natural-log logsumexp (float32; float64 for
        float64 numpy input). A row with no visible key gives o = 0, lse = -inf.

    Raises:
        ValueError/TypeError naming the argument for bad input. ValueError when a row
        that sees keys and has finite inputs gets a non-finite result (the scores
        overflow float32; `flashcourse._guards.forward_result`, as `cuda.forward`):
        always for numpy inputs, with check=True for device arrays.
    """
    from ... import decode as np_decode
    from ..._checks import check_bool, check_scale
    from ..common._launch import as_device_array, is_device_array, simulator_note
    simulator_note()
    causal, allow_nonfinite, check = (check_bool(x, name) for x, name in (
        (causal, "causal"), (allow_nonfinite, "allow_nonfinite"), (check, "check")))
    on_device = any(is_device_array(x) for x in (q, k, v))
    if on_device:
        q, k, v = (as_device_array(n, x, (np.float16, np.float32))
                   for n, x in (("q", q), ("k", k), ("v", v)))
        shapes = {n: tuple(int(s) for s in x.shape) for n, x in (("q", q), ("k", k), ("v", v))}
        if len({np.dtype(x.dtype) for x in (q, k, v)}) != 1:
            raise TypeError("q, k and v must share one dtype")
        b, hq, tq, d, hkv, tk = gqa_shapes(shapes["q"], shapes["k"], shapes["v"])
        qf = q.reshape(b * hq * tq, d)
        kf = k.reshape(b * hkv, tk, d)
        vf = v.reshape(b * hkv, tk, d)
        itemsize = np.dtype(q.dtype).itemsize
        aligned = all(_aligned(x) for x in (q, k, v))
        out_dtype = lse_dtype = np.dtype(np.float32)
    else:
        q, k, v, _ = np_decode.check_gqa(q, k, v, allow_nonfinite=allow_nonfinite)
        b, hq, tq, d = q.shape
        hkv, tk = k.shape[1], k.shape[2]
        work = np.float16 if q.dtype == np.float16 else np.float32
        qf = cuda.to_device(np.ascontiguousarray(q.reshape(b * hq * tq, d), work))
        kf = cuda.to_device(np.ascontiguousarray(k.reshape(b * hkv, tk, d), work))
        vf = cuda.to_device(np.ascontiguousarray(v.reshape(b * hkv, tk, d), work))
        itemsize = np.dtype(work).itemsize
        aligned = True
        out_dtype = q.dtype
        lse_dtype = np.dtype(np.float64) if q.dtype == np.float64 else np.dtype(np.float32)
    group = hq // hkv
    scale = check_scale(scale, d)
    cfg, bps = split_config(kernel, d, itemsize, group * tq, aligned, unroll=unroll,
                            warps=warps, row_groups=row_groups, tc_block_k=tc_block_k,
                            m_tiles=m_tiles, tc_warps=tc_warps)
    ns, per = plan_splits(b * hkv, group * tq, tk, cfg, num_splits=num_splits,
                          block_k=block_k,
                          blocks_per_sm=bps if blocks_per_sm is None else blocks_per_sm)
    o, lse, o_part, lse_part = split_outputs(b * hq * tq, d, ns)
    run(qf, kf, vf, o, lse, o_part, lse_part, tq=tq, group=group, d=d, scale=scale,
        causal=causal, num_splits=ns, keys_per_split=per, cfg=cfg)
    advice = ("use flashcourse.decode.split_kv_forward with float64 inputs (the CUDA "
              "kernels compute in float32)")
    if on_device:
        o, lse = o.reshape(b, hq, tq, d), lse.reshape(b, hq, tq)
        if check:
            check_result(q, k, v, o, lse, causal=causal, scale=scale,
                         allow_nonfinite=allow_nonfinite, kv_group=group, advice=advice)
        return o, lse
    o_h = o.copy_to_host().astype(out_dtype, copy=False).reshape(b, hq, tq, d)
    lse_h = lse.copy_to_host().astype(lse_dtype, copy=False).reshape(b, hq, tq)
    return forward_result(q, k, v, o_h, lse_h, causal, compute="float32",
                          allow_nonfinite=allow_nonfinite, scale=scale, advice=advice,
                          kv_group=group)


def workspace_bytes(num_splits: int, rows: int, d: int) -> int:
    """Device memory the partial states take (bytes): S x rows x (d + 1) x 4."""
    return 0 if num_splits == 1 else 4 * num_splits * rows * (d + 1)


# ---------------------------------------------------------------------------------------
# The kernel registry's interface (flashcourse/cuda/registry.py)
# ---------------------------------------------------------------------------------------

def run_registered(x, out=None, num_splits=None, block_k=None):
    """Run as a registered forward kernel: x.q (BH, Tq, d), x.k, x.v (BH, Tk, d) device
    arrays (float32 or float16), x.tq, x.tk, x.d, x.scale, x.causal; one KV head per query
    head (G = 1: grouped-query attention goes through `decode`). Returns (o (BH, Tq, d),
    lse (BH, Tq)) float32 device arrays, into `out` when given."""
    bh, tq, d = int(x.q.shape[0]), int(x.tq), int(x.d)
    itemsize = np.dtype(x.k.dtype).itemsize
    dflt = default_launch(itemsize, min(tq, MAX_ROWS))
    cfg = plan(d, itemsize, tq, unroll=dflt["unroll"], warps=dflt["warps"],
               row_groups=dflt["row_groups"], vector=all(_aligned(a) for a in (x.q, x.k, x.v)))
    ns, per = plan_splits(bh, tq, int(x.tk), cfg, num_splits=num_splits, block_k=block_k)
    if out is None:
        o = cuda.device_array((bh, tq, d), np.float32)
        lse = cuda.device_array((bh, tq), np.float32)
    else:
        o, lse = out
    rows = bh * tq
    o_part = cuda.device_array((ns, rows, d), np.float32) if ns > 1 else None
    lse_part = cuda.device_array((ns, rows), np.float32) if ns > 1 else None
    run(x.q.reshape(rows, d), x.k, x.v, o.reshape(rows, d), lse.reshape(rows), o_part,
        lse_part, tq=tq, group=1, d=d, scale=float(x.scale), causal=bool(x.causal),
        num_splits=ns, keys_per_split=per, cfg=cfg)
    return o, lse


def launches(d: int, tq: int, tk: int, bh: int, limits):
    """The launches `run_registered` makes for fp32 K/V on a GPU with `limits` (the split
    kernel with a GPU's default variant and the heuristic's splits over limits.sm_count
    SMs, then the combine kernel when there are several splits), as
    `flashcourse.limits.Launch`es. Static layout: at most 48 KiB, no opt-in."""
    from ...limits import Launch
    dflt = default_launch(4, min(tq, MAX_ROWS), simulator=False)
    cfg = plan(d, 4, tq, unroll=dflt["unroll"], warps=dflt["warps"],
               row_groups=dflt["row_groups"], shuffle=True, vector=False)
    ns, per = plan_splits(bh, tq, tk, cfg, sms=limits.sm_count)
    label = (f"warps={cfg.warps} unroll={cfg.unroll} row_groups={cfg.row_groups} "
             f"splits={ns}")
    out = [Launch(f"decode split d={d}", (ns, ceil_div(tq, cfg.rows), bh), cfg.threads,
                  cfg.shared_bytes, optin=False, config=label)]
    if ns > 1:
        out.append(Launch(f"decode combine d={d}", (bh * tq,), combine_threads(d), 0,
                          optin=False, config=label))
    return tuple(out)


def registered_extra_bytes(bh: int, tq: int, tk: int, d: int) -> int:
    """Workspace of the partial states (bytes), with the splits the heuristic picks."""
    cfg = plan(d, 4, tq, unroll=1, warps=1, shuffle=False, vector=False)
    ns, _ = plan_splits(bh, tq, tk, cfg)
    return workspace_bytes(ns, bh * tq, d)
