"""decode_tc_kernels: the Flash-Decoding split kernel on the tensor cores (fp16 K/V).

Side by side with `decode_kernels.make_split_kernel` (CUDA cores), same contract: one
thread block per (key split, row block, KV head) writes the split's partial state (o_s
normalised, lse_s) of every query row of the KV head; `decode_kernels.make_combine_kernel`
merges the splits.

Why a second split kernel (measured on an H200, benchmarks/results/h200_host_path.json):
the CUDA-core kernel reaches 3.3-4.3 TB/s with one query row per KV head (from 256 MiB of
K/V up), but with the G x Tq = 4 rows of a GQA group of 4 (or Tq = 4 speculative rows) it
falls to 1.6-2.1 TB/s and with 16 rows to 0.5 TB/s: per key and row it pays a shuffle
reduction of the dot product, an exponential and 2 d FMAs on the CUDA cores, and becomes
instruction-bound.
PyTorch's kernel puts the rows of a KV head into tensor-core tiles ("pack GQA"). This
kernel does the same: the R = G x Tq rows of one KV head are the M rows of m16n8k16
products (padded to 16: with R = 4, 12 rows of every product are zeros, which costs
nothing while the kernel waits on memory anyway).

`warps` warps per block (by default 8 on a GPU, halved until their buffers fit its shared
memory: 4 at d = 256 on an H100/H200; 1 on the simulator: `tc_plan`), `m_tiles` 16-row tiles
per warp (R <= 16 x m_tiles; more rows use more row blocks). The warps take the split's key
blocks round-robin (warp w takes blocks w, w + warps, ...), each with shared-memory buffers
of its own, and merge their (m, l, o) in shared memory at the end (`combine.slot_merge`).
Per key block of Bc keys, as the tensor-core forward's version 2
(`tensor_core_kernels_async.py`):
    cp.async      K_j, V_j (Bc x d fp16) global -> shared, into one of the warp's two
                  buffers while it computes on the other (keys past the split arrive as
                  zeros)
    S = Q K^T     Q's A fragments in registers (loaded once); K's B fragments by
                  ldmatrix.x4 (two n8 tiles per instruction)
    softmax       the online softmax on the accumulator fragments (a quad of 4 lanes
                  holds a row); the causal limit is per row: row r is query r mod Tq
    O += P V      P packed to fp16 as the A operand; V's B fragments by ldmatrix.x4.trans
At the end every row is normalised and written with its lse, as the CUDA-core kernel.

Bytes: K and V once (2 Tk d x 2 B per KV head), as the CUDA-core kernel: the decode IO
model (flashcourse.decode_io) is unchanged. FLOPs: 4 x 16 x m_tiles x d per key,
whatever R is.

Requires fp16 q, k, v, d a multiple of 16 (at most 256) and 16-byte aligned rows
(`supports`); `decode_kernels.decode` falls back to the CUDA-core kernel otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from numba import cuda, float32, int32, uint32
from numba import uint64 as U

from ..._checks import check_choice
from ...constants import F0, F1, LN2_F, NEG_INF
from ...gpu import using_simulator
from ...limits import check_launch, current_limits
from ..common._device import inlined, lane_ids, reset_state, shared_arrays
from ..common._launch import WarpThreads
from ..ptx.mma import SIM_SCRATCH_PER_WARP, device_ops
from ..ptx.smem_ops import ops as smem_ops
from ..common.tc_blocks import cp_async_rows, half_blocks, softmax_blocks
from ..tensor_core.tensor_core_kernels import SIGN2, Z32, _pv_ldmatrix, _row_ops
from .combine import slot_merge

#: The largest head dim the kernel is built for (the accumulators of 16 x 256 fit).
MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class DecodeTCConfig(WarpThreads):
    """One compiled variant: head dim D (a multiple of 16), Bc keys per block, m_tiles
    16-row tiles (rows per block = 16 x m_tiles), simulator or GPU."""

    head_dim: int
    block_k: int
    m_tiles: int
    simulator: bool
    warps: int = 1

    @property
    def rows(self):
        return 16 * self.m_tiles

    @property
    def k_stride(self):          # words per K/V row in shared memory (4-word pad)
        return self.head_dim // 2 + 4

    def offsets(self):
        """(K, V of warp 0's buffer 0, buffer size, end) in 32-bit words: every warp has
        two buffers (K_j and V_j each) of its own."""
        rows = self.block_k * self.k_stride
        return 0, rows, 2 * rows, 4 * rows * self.warps

    def merge_offsets(self):
        """(m, l, o) of the warps' states when they are merged at the end (float32 words,
        in the same shared memory), and the end."""
        rb = self.rows * self.warps
        return 0, rb, 2 * rb, 2 * rb + rb * self.head_dim

    @property
    def shared_bytes(self):
        end = self.offsets()[-1]
        if self.warps > 1:
            end = max(end, self.merge_offsets()[-1])
        return 4 * end


def supports(d: int, itemsize: int, aligned: bool) -> bool:
    """True when the tensor-core split kernel can run: fp16, d a multiple of 16 up to
    MAX_HEAD_DIM, 16-byte aligned arrays."""
    return itemsize == 2 and d % 16 == 0 and 16 <= d <= MAX_HEAD_DIM and bool(aligned)


#: The split kernels `decode` can use (`kernel=`): None picks one (`choose_kernel`).
SPLIT_KERNELS = ("cuda_cores", "tensor_core")
#: Query rows per KV head (G x Tq) from which the default is the tensor-core split kernel.
TC_MIN_ROWS = 2
#: Keys per warp step and warps per block (GPU) of the tensor-core split kernel.
DEFAULT_TC_BLOCK_K = 16
DEFAULT_TC_WARPS = 8


def choose_kernel(kernel, d: int, itemsize: int, rows: int, aligned: bool) -> str:
    """The split kernel for a call: `kernel` checked, or (None) on a GPU the tensor-core
    one for fp16 with at least TC_MIN_ROWS rows per KV head where it can run, else CUDA
    cores. On the simulator None means CUDA cores (emulating every mma makes the
    tensor-core kernel ~2.4x slower there); kernel="tensor_core" runs it."""
    ok = supports(d, itemsize, aligned)
    if check_choice(kernel, "kernel", SPLIT_KERNELS, none_ok=True) is None:
        gpu = not using_simulator()
        return "tensor_core" if gpu and ok and rows >= TC_MIN_ROWS else "cuda_cores"
    if kernel == "tensor_core" and not ok:
        raise ValueError(f"kernel='tensor_core' needs float16 q, k, v, a head dim d that is "
                         f"a multiple of 16 up to {MAX_HEAD_DIM} and "
                         f"16-byte aligned device arrays; got d={d}, "
                         f"{itemsize}-byte elements" + ("" if aligned else ", unaligned"))
    return kernel


#: Each split kernel's own options (`decode`'s keyword arguments).
SPLIT_OPTIONS = {"cuda_cores": ("unroll", "warps", "row_groups"),
                 "tensor_core": ("tc_block_k", "m_tiles", "tc_warps")}


def check_split_options(chosen: str, kernel, **options) -> None:
    """ValueError naming the options given (not None) that belong to the split kernel
    this call does not run (`chosen`, from `choose_kernel(kernel, ...)`)."""
    other = "cuda_cores" if chosen == "tensor_core" else "tensor_core"
    unused = [n for n in SPLIT_OPTIONS[other] if options.get(n) is not None]
    if unused:
        raise ValueError(f"{', '.join(unused)}: not an option of the {chosen} split kernel, "
                         f"which this call runs (kernel={kernel!r}); pass kernel={other!r} "
                         f"to run the other one")


def tc_plan(d: int, rows: int, *, block_k=None, m_tiles=None, warps=None,
            simulator: bool | None = None) -> DecodeTCConfig:
    """The tensor-core split kernel's variant: Bc keys per warp step (default 16), 16-row
    tiles per warp (1 up to 16 rows per KV head, else 2), warps per block sharing the
    split's keys (default 8 on a GPU, fewer when their buffers would not fit: 4 at d = 256;
    1 on the simulator)."""
    from ..._checks import check_block
    sim = using_simulator() if simulator is None else simulator
    bk = DEFAULT_TC_BLOCK_K if block_k is None else check_block(block_k, "tc_block_k")
    if bk % 16:
        raise ValueError(f"tc_block_k must be a multiple of 16, got {bk}")
    mt = (1 if rows <= 16 else 2) if m_tiles is None else check_block(m_tiles, "m_tiles")
    if mt not in (1, 2):
        raise ValueError(f"m_tiles must be 1 or 2, got {mt}")
    if warps is None:              # the default, halved until the buffers fit (d = 256)
        nw = 1 if sim else DEFAULT_TC_WARPS
        cap = current_limits().smem_per_block_optin
        while nw > 1 and DecodeTCConfig(d, bk, mt, sim, nw).shared_bytes > cap:
            nw //= 2
    else:
        nw = check_block(warps, "tc_warps")
    cfg = DecodeTCConfig(d, bk, mt, sim, nw)
    check_launch(cfg.threads, cfg.shared_bytes, optin=True, what="decode tensor-core split")
    return cfg


def tc_blocks_per_sm(cfg: DecodeTCConfig) -> int:
    """Blocks of the tensor-core split kernel one SM holds, by shared memory (the split
    heuristic's residency): each block takes its buffers plus 1 KiB the hardware reserves."""
    lim = current_limits()
    fit = lim.smem_per_sm // (cfg.shared_bytes + lim.smem_reserved_per_block)
    return max(1, min(16, fit))


@lru_cache(maxsize=None)
def signature():
    """The one signature the kernel is compiled for (the shared-memory opt-in above 48 KiB,
    d = 256, compiles it ahead of the launch)."""
    from numba import types
    w2, w1 = types.Array(uint32, 2, "C"), types.Array(uint32, 1, "C")
    return (w2, w1, w1, types.Array(float32, 3, "C"), types.Array(float32, 2, "C"),
            int32, int32, int32, int32, float32, int32, int32)


@inlined
def contiguous_locate(kv, key, valid):
    """What a key's (or a tile's) address needs from memory, read a step ahead of its
    loads (`split_body`, `split_tc_body`): in a contiguous cache nothing (0; the compiler
    drops it). The paged twin, `paged_kernels.paged_locate`, reads the key's page from
    the block table kv."""
    return 0


@inlined
def contiguous_tile_base(kv, h, tk, k0, k_end, krows, page):
    """(kbase, kz) of a tile of Bc keys from k0 in a contiguous cache: key j's row is
    kbase + j of the flat (B*Hkv*Tk) rows (kbase = h*Tk), and a key past k_end is
    fetched (zero bytes) from row kbase + kz = kbase. kv, krows, page: unused (the paged
    twin, `paged_kernels.paged_tile_base`, uses the page its locate read from the block
    table kv; `contiguous_locate` reads nothing)."""
    return h * tk, 0


@lru_cache(maxsize=None)
def make_split_tc_kernel(cfg: DecodeTCConfig):
    """Launch with grid (num_splits, ceil(R / cfg.rows), B*Hkv), 32 threads and
    cfg.shared_bytes of dynamic shared memory. Arguments:
        q (B*Hq*Tq, d/2) words (fp16 pairs), k, v FLAT words of (B*Hkv, Tk, d/2),
        o_part (S, B*Hq*Tq, d) float32, lse_part (S, B*Hq*Tq) float32, R = G*Tq rows
        per KV head, Tq, Tk, keys_per_split, qscale = scale*log2(e) (float32),
        causal (0/1), Tk - Tq.
    Row r of KV head h is query row h*R + r of the flattened q, as in the CUDA-core
    kernel. The work itself is `split_tc_body`, shared with the paged kernel."""
    body = split_tc_body(cfg, contiguous_tile_base, contiguous_locate)
    RB = 16 * cfg.m_tiles

    def decode_split_tc(q, k, v, o_part, lse_part, rows_kv, tq, tk, keys_per_split,
                        qscale, causal, off):
        split = cuda.blockIdx.x
        h = cuda.blockIdx.z            # KV head (flattened B*Hkv)
        k_begin = split * keys_per_split
        k_end = min(k_begin + keys_per_split, tk)
        body(q, k, v, o_part, lse_part, split, lse_part, h, tk, h * rows_kv, h * rows_kv,
             cuda.blockIdx.y * RB, rows_kv, tq, k_begin, k_end, qscale, causal, off)

    decode_split_tc.__name__ = split_tc_name(cfg)
    return cuda.jit(decode_split_tc)


def split_tc_name(cfg: DecodeTCConfig, prefix: str = "decode_split_tc") -> str:
    return (f"{prefix}_w{cfg.warps}_k{cfg.block_k}_d{cfg.head_dim}_m{cfg.m_tiles}"
            + ("_sim" if cfg.simulator else ""))


@lru_cache(maxsize=None)
def split_tc_body(cfg: DecodeTCConfig, tile_base, locate):
    """The tensor-core split kernel's work as one device function, shared by the
    contiguous kernel (`make_split_tc_kernel`) and the paged one (`paged_kernels`):

        body(q, k, v, o_part, lse_part, split, kv, h, nkv, qrow0, orow0, r0, rows_kv, tq,
             k_begin, k_end, qscale, causal, off)

    the block's rows r0 .. r0 + 16 m_tiles - 1 of KV head h (q rows qrow0 + r) over keys
    [k_begin, k_end) (k_begin a multiple of Bc), partial state into o_part[split,
    orow0 + r]. `tile_base(kv, h, nkv, k0, k_end, krows, page)` -> (kbase, kz): key j of
    the tile from k0 (Bc keys, never across a page) is flat row kbase + j of k and v
    (krows rows of d/2 words), a key past k_end is fetched (zero bytes) from row kbase +
    kz; `page = locate(kv, k0, k0 < k_end)` is what that needs from memory (a paged
    cache: the tile's page), read two tiles ahead, while the tile before is in flight.
    """
    ops = device_ops(cfg.simulator)
    MMA = ops["mma_fp16"]
    PACK = ops["pack_fp16"]
    so = smem_ops(cfg.simulator)
    LDB, LDBT, CP16, COMMIT, WAIT = so["ld_b"], so["ld_bt"], so["cp16"], so["commit"], \
        so["wait_all"]
    PV = _pv_ldmatrix(MMA, PACK, LDBT, cfg.simulator)
    _, log2, quad_max, quad_sum = _row_ops(cfg)
    exp2 = so["ex2"]
    BC, D, MT, NW = cfg.block_k, cfg.head_dim, cfg.m_tiles, cfg.warps
    NT = 32 * NW
    DW = D // 2
    KT = D // 16
    NS = BC // 8
    NO = D // 8
    KP = BC // 16
    KS = cfg.k_stride
    K_OFF, V_OFF, BUF, _ = cfg.offsets()
    WBUF = 2 * BUF                 # one warp's two buffers
    M_OFF, L_OFF, A_OFF, _ = cfg.merge_offsets()
    CH = DW // 4                   # 16-byte chunks per row
    QREGS, OREGS, SREGS = 4 * KT * MT, 4 * NO * MT, 4 * NS * MT
    ROWS = 2 * MT
    PAREGS = 4 * MT
    RB = 16 * MT                   # rows per block
    SIM = cfg.simulator
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    RED = NT if SIM else 1
    SHARED = shared_arrays(SIM, SCR, RED)
    smx = softmax_blocks(SIM, exp2, quad_max, MT, NS, NO, BC)
    ROW_MAX, ROW_EXP = smx["row_max"], smx["row_exp"]
    QK = half_blocks(SIM, MMA, LDB, MT, KT, NS)["qk"]
    COPY_KV = cp_async_rows(SIM, CP16, BC, CH, 32, DW, True)["copy_z"]
    MERGE = slot_merge(SIM, exp2, NW, RB, D, (M_OFF, L_OFF, A_OFF))

    def load_tile(sm, k, v, base, lane, k0, k_end, kbase, kz):
        """This lane's share of K_j, V_j (keys k0 .. k0 + Bc - 1, rows kbase + key; zeros
        from k_end on, fetched from row kbase + kz) into the buffer at word `base`, by
        cp.async."""
        COPY_KV(sm, base + K_OFF, base + V_OFF, KS, k, v, kbase, k0, k_end, kz, lane)
        COMMIT()

    load_tile = (cuda.jit(device=True) if SIM else
                 cuda.jit(device=True, forceinline=True))(load_tile)

    def body(q, k, v, o_part, lse_part, split, kv, h, nkv, qrow0, orow0, r0, rows_kv, tq,
             k_begin, k_end, qscale, causal, off):
        sm, smf, scr, red = SHARED()   # smf: sm as float32, for the merge
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        wb = warp * WBUF               # this warp's buffers
        krows = k.shape[0] // DW       # rows of d/2 words in k (and v)
        par = 0
        qsign = SIGN2 if qscale < F0 else Z32
        qsc = -qscale if qscale < F0 else qscale

        # the split's key blocks go round-robin to the warps: warp w takes w, w + NW, ...
        # (every warp runs n_it steps, so the barriers match; a step past the split's
        # last block computes on zeros with every key masked: it changes nothing)
        n_kb = (k_end - k_begin + BC - 1) // BC if k_end > k_begin else 0
        n_it = (n_kb + NW - 1) // NW
        pg = 0                         # locate() of this warp's next tile to load
        if n_it > 0:                   # first block -> buffer 0, in flight during Q's loads
            k0 = k_begin + warp * BC
            kb, kz = tile_base(kv, h, nkv, k0, k_end, krows, locate(kv, k0, k0 < k_end))
            load_tile(sm, k, v, wb, lane, k0, k_end, kb, kz)
            pg = locate(kv, k0 + NW * BC, k0 + NW * BC < k_end)

        qa = cuda.local.array(QREGS, uint32)
        lim = cuda.local.array(ROWS, int32)     # last visible key of each row (causal)
        for mt in range(MT):
            ra = r0 + 16 * mt + g
            rb = ra + 8
            lim[2 * mt] = ra % tq + off
            lim[2 * mt + 1] = rb % tq + off
            for kk in range(KT):
                w0 = kk * 8 + t
                base = 4 * (mt * KT + kk)
                qa[base + 0] = (q[U(qrow0 + ra), U(w0)] if ra < rows_kv else Z32) ^ qsign
                qa[base + 1] = (q[U(qrow0 + rb), U(w0)] if rb < rows_kv else Z32) ^ qsign
                qa[base + 2] = (q[U(qrow0 + ra), U(w0 + 4)] if ra < rows_kv
                                else Z32) ^ qsign
                qa[base + 3] = (q[U(qrow0 + rb), U(w0 + 4)] if rb < rows_kv
                                else Z32) ^ qsign

        # this warp's state over its key blocks of the split: o (unnormalised), the rows'
        # running max and sum; the scores of one block; the softmax step's scratch
        acc = cuda.local.array(OREGS, float32)
        m = cuda.local.array(ROWS, float32)
        lp = cuda.local.array(ROWS, float32)
        s = cuda.local.array(SREGS, float32)
        alpha = cuda.local.array(ROWS, float32)
        mu = cuda.local.array(ROWS, float32)
        pa = cuda.local.array(PAREGS, uint32)
        reset_state(acc, OREGS, m, lp, ROWS)

        for it in range(n_it):
            k0 = k_begin + (it * NW + warp) * BC
            bo = wb + (it % 2) * BUF
            WAIT()
            if SIM:                    # (the simulated mma needs block-wide barriers)
                cuda.syncthreads()
            else:                      # this warp's block landed; its other buffer is free
                cuda.syncwarp()        # (buffers are per warp: the warps run decoupled)
            if it + 1 < n_it:
                kb, kz = tile_base(kv, h, nkv, k0 + NW * BC, k_end, krows, pg)
                load_tile(sm, k, v, wb + BUF - (bo - wb), lane, k0 + NW * BC, k_end, kb, kz)
                pg = locate(kv, k0 + 2 * NW * BC, k0 + 2 * NW * BC < k_end)  # the one after

            # S = Q K^T: one ldmatrix.x4 gives the B fragments of two n8 tiles
            par = QK(sm, bo + K_OFF, KS, lane, scr, wbase, par, qa, s)

            # masks (keys past the split; causal: key > row's limit) and the online softmax
            sc = qsc
            if k0 + BC > k_end or (causal != 0 and k0 + BC - 1 > off):
                for mt in range(MT):
                    for n in range(NS):
                        for i in range(4):
                            col = k0 + n * 8 + 2 * t + (i % 2)
                            j = 4 * (mt * NS + n) + i
                            if col >= k_end or (causal != 0 and col > lim[2 * mt + i // 2]):
                                s[j] = NEG_INF
                            else:
                                s[j] = s[j] * qsc
                sc = F1
            ROW_MAX(s, m, mu, alpha, sc, red, tid)
            ROW_EXP(s, acc, mu, alpha, lp, sc, True)

            # O += P V: ldmatrix.x4.trans of the row-major V tile gives two n8 B fragments
            par = PV(sm, bo + V_OFF, KS, lane, scr, wbase, par, s, pa, acc, KP, MT, NS, NO)

        # the split's partial state: o_s normalised, lse_s (o = 0, lse = -inf when the
        # row sees no key of this split; a NaN stays NaN)
        if NW == 1:                    # one warp: straight from the fragments
            for mt in range(MT):
                for hf in range(2):
                    ri = 2 * mt + hf
                    lt = quad_sum(lp[ri], red, tid)
                    row = r0 + 16 * mt + 8 * hf + g
                    if row < rows_kv:
                        qrow = U(orow0 + row)
                        inv = F1 / lt if lt != F0 else F0
                        for n in range(NO):
                            ob = 4 * (mt * NO + n) + 2 * hf
                            col = n * 8 + 2 * t
                            o_part[U(split), qrow, U(col)] = acc[ob] * inv
                            o_part[U(split), qrow, U(col + 1)] = acc[ob + 1] * inv
                        if t == 0:
                            lse_part[U(split), qrow] = ((m[ri] + log2(lt)) * LN2_F
                                                        if lt != F0 else NEG_INF)
        else:                          # the warps' states meet in shared memory
            cuda.syncthreads()         # every warp is done with its K/V buffers
            for mt in range(MT):
                for hf in range(2):
                    ri = 2 * mt + hf
                    lt = quad_sum(lp[ri], red, tid)
                    wr = warp * RB + 16 * mt + 8 * hf + g
                    if t == 0:
                        smf[U(M_OFF + wr)] = m[ri]
                        smf[U(L_OFF + wr)] = lt
                    for n in range(NO):
                        ob = 4 * (mt * NO + n) + 2 * hf
                        smf[U(A_OFF + wr * D + n * 8 + 2 * t)] = acc[ob]
                        smf[U(A_OFF + wr * D + n * 8 + 2 * t + 1)] = acc[ob + 1]
            cuda.syncthreads()
            for idx in range(tid, RB * D, NT):
                rr = idx // D
                c = idx - rr * D
                if r0 + rr < rows_kv:
                    mx, lt, at = MERGE(smf, rr, c)       # (combine.slot_merge)
                    qrow = U(orow0 + r0 + rr)
                    if lt != F0:
                        o_part[U(split), qrow, U(c)] = at / lt
                        if c == 0:
                            lse_part[U(split), qrow] = (mx + log2(lt)) * LN2_F
                    else:
                        o_part[U(split), qrow, U(c)] = F0
                        if c == 0:
                            lse_part[U(split), qrow] = NEG_INF

    return inlined(body)
