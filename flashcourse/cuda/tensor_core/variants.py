"""Variants forward on tensor cores: FlashAttention-2 (mma.sync) driven by a block mask.

The idea: the tensor-core forward (`tensor_core_kernels_async`, version 2: cp.async into
two shared buffers, ldmatrix fragments, m16n8k16 mma with fp32 accumulation) with the
learner's mask_mod and score_mod compiled into it as device functions, as the CUDA-core
variants kernel does (`cuda_core.variants`: one kernel per function contents, cached by
`variants.mods.fingerprint`). What changes against the causal kernel:

  * which key blocks: thread block (query block i, head) walks the block mask's lists,
    full_kv_indices[b, h, i] then kv_indices[b, h, i]; empty key blocks are never loaded.
    The next block's index is read from the list while this one computes, so its
    cp.async copy is in flight as in version 2.
  * the mask: on a partial block every thread calls mask_mod once per accumulator
    element it holds. Each lane knows where its elements are: S tile n of m-tile mt,
    element c_i sits at row 16 mt + g (+ 8 for i >= 2) and column 8 n + 2 t + (i % 2)
    (groupID g = lane // 4, t = lane % 4; the m16n8 C layout, `ptx.mma.c_m16n8`). A full
    block calls no mask_mod: only the positions past Tq or Tk (a ragged edge) are hidden.
  * the score: with a score_mod, every visited score is scaled (natural-log units,
    scale q.k), passed through score_mod, then multiplied by log2(e) for the exp2 of the
    online softmax: a multiply more per score than the built-in kernel, and score_mod's
    own instructions (softcap: a tanh). Without one, the scale folds into the exponent as
    in the built-in kernel (the row max on raw scores, then one FMA per score, scale
    x log2(e) > 0: a negative scale flips Q's sign bits), and a full block away from the
    ragged key edge costs no per-score pass at all: the mask only where it is partial,
    as the built-in causal kernel masks only its diagonal blocks.
  * sinks join each row's sum at the end (one more logit, no value), as in
    `variants.tiled`: m' = max(m, sink), l' = l 2^(m - m') + 2^(sink - m') (log2 units).
  * GQA: query head h = blockIdx.y % Hq reads key/value head h // G (G = Hq / Hkv) of the
    same batch entry; K and V are never copied per query head.

Tiles: the block mask's Br is the kernel's: Br = 16 x warps x m_tiles (each warp owns 16
or 32 query rows for the whole key loop). Its Bc (a multiple of 16: two n8 tiles per
ldmatrix.x4) is the kernel's key step too, except above d = 64 where a Bc that is a
multiple of 64 is visited in steps of 64 keys (`step_k`): with Bc = 128 at d = 128 the
kernel would need more than the 255 registers a thread has (ptxas spilled 56 bytes a
thread to local memory), with steps of 64 it takes 230 and spills nothing. Rows with
nothing visible give o = 0 and lse = -inf (lse = sink with one).

The bytes it moves (one head): Q once (Tq d e, e = 2 bytes), K_j and V_j of each visited
key block once per query block (2 Bc d e per visit, mostly from L2), O (Tq d e) and lse
(4 Tq B), plus the block mask's index rows (4 (2 + number of visits) B per query block).
What limits it: as version 2 where blocks are full; partial blocks add one mask_mod call
per score (integer work and, for a mask that reads an array such as document ids, a load
per score).

Run: `o, lse = cuda.tensor_core.variants.forward(q, k, v, block_mask=bm, score_mod=...,
sinks=..., precision="fp16")` (same arguments and results as `variants.tiled.forward`;
or `flashcourse.cuda.variants_forward(..., kernel="tensor_core")`); tests:
`pytest tests/test_variants_tensor_core_sim.py`; on a GPU:
`python benchmarks/gpu_variants.py --check --bench`.
"""

from __future__ import annotations

import dataclasses
import weakref

import numpy as np
from numba import cuda, float32, uint32
from numba import uint64 as U

from ..._checks import check_scale
from ...constants import F0, F1, LN2_F, LOG2E_F, NEG_INF
from ...geometry import ceil_div
from ...gpu import using_simulator
from ...variants.inputs import check_layout, check_result, check_sinks
from ...variants.mods import always_visible, check_fits, check_mod, fingerprint, \
    unchanged_score
from ..common._device import lane_ids, mod_device, reset_state, shared_arrays
from ..common.tc_blocks import cp_async_rows, frag_coords, half_blocks, softmax_blocks
from ...variants.tiled import prepare, resolve_block_mask
from ..common._launch import as_device_array, check_registers, is_device_array, launch, \
    serialised, simulator_note
from ..common.host_plans import pooled_empty
from ..ptx.mma import SIM_SCRATCH_PER_WARP, device_ops
from ..ptx.smem_ops import ops as smem_ops
from .host import BF16_BITS, MAX_HEAD_DIM, _check_fp16_range, _from_words, _to_words, \
    check_capability, device_unwords, plan, words_for_kernel
from .tensor_core_kernels import SIGN2, Z32, _pv_ldmatrix, _row_ops

PRECISIONS = ("fp16", "bf16")
#: the most warps a block may have (Br = 16 x warps x m_tiles)
MAX_WARPS = 8

_KERNELS: dict = {}




@dataclasses.dataclass(frozen=True)
class VariantsConfig:
    """The kernel's `host.TCConfig` (its block_k is the kernel's key step) and the block
    mask's Bc = mask_block_k, a multiple of it: each listed key block is visited in
    mask_block_k / block_k steps. Other attributes are the TCConfig's."""
    tc: object
    mask_block_k: int

    def __getattr__(self, name):
        return getattr(self.tc, name)


#: the kernel's key step at head dims above 64 when the mask's Bc is a multiple of it: at
#: Bc = 128 and d = 128 the kernel needs more than 255 registers (ptxas spills 56 B a
#: thread; the built-in causal kernel, with less state, fits in 250), at 64 it takes 230
STEP_K_LARGE_D = 64
#: the head dims from which that step applies (above this)
LARGE_D = 64


def step_k(d: int, block_k: int) -> int:
    """The kernel's key step for head dim d and a block mask's Bc = block_k."""
    if d > LARGE_D and block_k > STEP_K_LARGE_D and block_k % STEP_K_LARGE_D == 0:
        return STEP_K_LARGE_D
    return block_k


def tiles_for(block_q: int, m_tiles: int | None = None) -> tuple[int, int]:
    """(warps, m_tiles) for a block mask's Br = block_q query rows: 16 rows per warp
    (m_tiles 1) up to 8 warps, 32 rows per warp above (m_tiles 2); m_tiles given: that.
    ValueError naming block_q when Br is not 16 x warps x m_tiles with warps <= 8."""
    if m_tiles is not None and m_tiles not in (1, 2):
        raise ValueError(f"m_tiles must be 1 or 2 (16-row tiles per warp), got {m_tiles!r}")
    mt = m_tiles if m_tiles is not None else (1 if block_q <= 16 * MAX_WARPS else 2)
    warps = block_q // (16 * mt)
    if block_q % (16 * mt) or not 1 <= warps <= MAX_WARPS:
        raise ValueError(f"block_q (the block mask's Br) must be 16 x warps x m_tiles with "
                         f"warps <= {MAX_WARPS} for the tensor-core variants kernel (16, 32, "
                         f"..., 256), got {block_q} with m_tiles = {mt}")
    return warps, mt


def make_variants_kernel(cfg, mask_mod, score_mod):
    """The kernel for one configuration (`VariantsConfig`, pipeline "async") with mask_mod
    and score_mod compiled in. Arguments: q (BHq, Tq, D/2) uint32 words; k, v flat words of
    (BHkv, Tk, D/2); o like q; lse (BHq, Tq) float32; Tq, Tk, Hq, G (query heads per K/V
    head); scale (float32, natural-log units); the block mask's kv_num_blocks,
    kv_indices, full_kv_num_blocks, full_kv_indices (int32); sinks (Hq,) float32 and
    has_sinks (0/1). Grid (ceil(Tq / Br), B Hq), 32 warps threads."""
    SIM = cfg.simulator
    ops = device_ops(SIM)
    MMA = ops["mma_fp16"] if cfg.precision == "fp16" else ops["mma_bf16"]
    PACK = ops["pack_fp16"] if cfg.precision == "fp16" else ops["pack_bf16"]
    so = smem_ops(SIM)
    LDB, LDBT, CP16, COMMIT, WAIT = so["ld_b"], so["ld_bt"], so["cp16"], so["commit"], \
        so["wait_all"]
    PV = _pv_ldmatrix(MMA, PACK, LDBT, SIM)
    _, log2, quad_max, quad_sum = _row_ops(cfg)
    exp2 = so["ex2"]
    MASK, SCORE = mod_device(mask_mod), mod_device(score_mod)
    # no score_mod: the scale folds into the exponent as in the built-in kernel (the row
    # max taken on raw scores, then one FMA per score in exp2), and a full block that is
    # not at the ragged key edge skips the per-score pass altogether
    PLAIN = score_mod is unchanged_score
    NW, BR, BC, D, NT = cfg.warps, cfg.block_q, cfg.block_k, cfg.head_dim, cfg.threads
    BCM = cfg.mask_block_k         # the block mask's Bc: SUBK kernel steps of BC keys each
    SUBK = BCM // BC
    MT = cfg.m_tiles
    DW = D // 2                    # 32-bit words per row
    KT = D // 16                   # k16 steps of S = Q K^T
    NS = BC // 8                   # n8 tiles of S per m-tile
    NO = D // 8                    # n8 tiles of O per m-tile
    KP = BC // 16                  # k16 steps of O += P V
    KS = cfg.k_stride
    K_OFF, V_OFF, BUF, _ = cfg.async_offsets()
    CH = DW // 4                   # 16-byte chunks per row
    QREGS, OREGS, SREGS = 4 * KT * MT, 4 * NO * MT, 4 * NS * MT
    ROWS = 2 * MT
    PAREGS = 4 * MT
    SCR = SIM_SCRATCH_PER_WARP * NW if SIM else 1
    RED = NT if SIM else 1
    SHARED = shared_arrays(SIM, SCR, RED)
    # the steps version 2 shares (`common.tc_blocks`); the mask and the epilogue are this
    # kernel's own (mask_mod and score_mod; the sinks)
    smx = softmax_blocks(SIM, exp2, quad_max, MT, NS, NO, BC)
    COORDS = frag_coords(SIM, NS)   # (key, query row, index) of a fragment entry
    ROW_MAX, ROW_EXP = smx["row_max"], smx["row_exp"]
    hb = half_blocks(SIM, MMA, LDB, MT, KT, NS)
    LOAD_Q, QK = hb["load_q"], hb["qk"]
    COPY_KV = cp_async_rows(SIM, CP16, BC, CH, NT, DW, True)["copy"]

    def tc_variants_forward(q, k, v, o, lse, tq, tk, n_heads, group, scale, kv_num,
                            kv_idx, full_num, full_idx, sinks, has_sinks):
        sm, _, scr, red = SHARED()   # (scr, red: the simulator's scratch)
        tid, warp, lane, g, t = lane_ids()   # g = lane // 4, t = lane % 4
        wbase = warp * SIM_SCRATCH_PER_WARP
        i_blk = cuda.blockIdx.x
        head = cuda.blockIdx.y         # b Hq + h
        b = head // n_heads
        h = head - b * n_heads
        kbase = (b * (n_heads // group) + h // group) * tk   # row 0 of K/V head h // G
        bi = b if kv_num.shape[0] > 1 else 0                  # the mask's B', H' may be 1
        hi = h if kv_num.shape[1] > 1 else 0
        q0 = i_blk * BR
        wrow = q0 + warp * 16 * MT + g
        par = 0
        # scores in log2 units: s x qsc. A negative scale flips Q's sign bits instead, so
        # that qsc > 0 and the max of the raw scores is the max of the scaled ones
        qsign = SIGN2 if PLAIN and scale < F0 else Z32
        qsc = (-scale if scale < F0 else scale) * LOG2E_F
        n_full = full_num[bi, hi, i_blk]
        n_vis = n_full + kv_num[bi, hi, i_blk]
        n_steps = n_vis * SUBK         # each listed key block in SUBK steps of BC keys

        if n_vis > 0:                  # the first visited key block -> buffer 0
            j = full_idx[bi, hi, i_blk, 0] if n_full > 0 else kv_idx[bi, hi, i_blk, 0]
            COPY_KV(sm, K_OFF, V_OFF, KS, k, v, kbase, j * BCM, tk, tid)
            COMMIT()

        qa = cuda.local.array(QREGS, uint32)   # Q's A fragments, kept for the whole loop
        LOAD_Q(q, qa, head, wrow, tq, t, qsign)

        acc = cuda.local.array(OREGS, float32)
        s = cuda.local.array(SREGS, float32)
        m = cuda.local.array(ROWS, float32)     # running max per row (log2 units)
        lp = cuda.local.array(ROWS, float32)    # this lane's part of the row sums
        alpha = cuda.local.array(ROWS, float32)
        mu = cuda.local.array(ROWS, float32)
        pa = cuda.local.array(PAREGS, uint32)
        reset_state(acc, OREGS, m, lp, ROWS)

        for st in range(n_steps):
            tv = st // SUBK            # the listed block, and this step's part of it
            partial = tv >= n_full
            j = kv_idx[bi, hi, i_blk, tv - n_full] if partial else full_idx[bi, hi, i_blk, tv]
            k0 = j * BCM + (st - tv * SUBK) * BC
            bo = (st % 2) * BUF
            WAIT()
            cuda.syncthreads()         # step st landed; the other buffer is free
            if st + 1 < n_steps:       # the next step's keys, in flight meanwhile
                tn = (st + 1) // SUBK
                j1 = kv_idx[bi, hi, i_blk, tn - n_full] if tn >= n_full else \
                    full_idx[bi, hi, i_blk, tn]
                nb = BUF - bo
                COPY_KV(sm, nb + K_OFF, nb + V_OFF, KS, k, v, kbase,
                        j1 * BCM + (st + 1 - tn * SUBK) * BC, tk, tid)
                COMMIT()

            # S = Q K^T (as version 2): one ldmatrix.x4 gives two n8 tiles' B fragments
            par = QK(sm, bo + K_OFF, KS, lane, scr, wbase, par, qa, s)

            # score_mod on every visited score, mask_mod on partial blocks only; each
            # element's (row, col) from the m16n8 C layout; log2 units for exp2. Without
            # a score_mod only partial blocks and the ragged key edge come here (as the
            # built-in kernel's causal diagonal), and full blocks keep raw scores: sc = qsc
            sc = qsc
            if not PLAIN or partial or k0 + BC > tk:
                for mt in range(MT):
                    for n in range(NS):
                        for i in range(4):
                            col, row, jj = COORDS(k0, wrow, t, mt, n, i)
                            x = NEG_INF
                            if col < tk and row < tq:
                                if not partial or MASK(b, h, row, col):
                                    if PLAIN:
                                        x = s[jj] * qsc
                                    else:
                                        x = SCORE(s[jj] * scale, b, h, row, col) * LOG2E_F
                            s[jj] = x
                sc = F1

            # online softmax (as version 2; log2 units are s x sc)
            ROW_MAX(s, m, mu, alpha, sc, red, tid)
            ROW_EXP(s, acc, mu, alpha, lp, sc, True)

            # O += P V: P's accumulator fragments are its A fragments (rounded to 16 bit)
            par = PV(sm, bo + V_OFF, KS, lane, scr, wbase, par, s, pa, acc, KP, MT, NS, NO)

        # epilogue: the sink joins the row sum (no value), then O = acc / l and lse
        for mt in range(MT):
            for hf in range(2):
                ri = 2 * mt + hf
                lt = quad_sum(lp[ri], red, tid)
                mm = m[ri]
                a = F1
                if has_sinks != 0:
                    sk = sinks[h] * LOG2E_F
                    mn = max(mm, sk)
                    a = exp2(mm - mn) if mm != NEG_INF else F0
                    lt = lt * a + exp2(sk - mn)
                    mm = mn
                inv = a / lt if lt != F0 else F0              # nothing visible: o = 0
                row = wrow + 16 * mt + 8 * hf
                if row < tq:
                    for n in range(NO):
                        ob = 4 * (mt * NO + n) + 2 * hf
                        o[U(head), U(row), U(n * 4 + t)] = PACK(acc[ob] * inv,
                                                                acc[ob + 1] * inv)
                    if t == 0:
                        lse[U(head), U(row)] = (mm + log2(lt)) * LN2_F if lt != F0 \
                            else NEG_INF

    tc_variants_forward.__name__ = (f"tc_variants_{cfg.precision}_w{NW}_k{BC}_d{D}_m{MT}"
                                    + (f"_of{BCM}" if SUBK > 1 else "")
                                    + ("_sim" if SIM else ""))
    return cuda.jit(tc_variants_forward)


_SIG = None


def signature():
    """The one signature every variants kernel is compiled for (the launch's types)."""
    global _SIG
    if _SIG is None:
        from numba import int32, types
        w3, w1 = types.Array(uint32, 3, "C"), types.Array(uint32, 1, "C")
        i3, i4 = types.Array(int32, 3, "C"), types.Array(int32, 4, "C")
        _SIG = (w3, w1, w1, w3, types.Array(float32, 2, "C"), int32, int32, int32, int32,
                float32, i3, i4, i3, i4, types.Array(float32, 1, "C"), int32)
    return _SIG


def kernel_for(cfg, mask_mod, score_mod):
    """The compiled kernel for `cfg` and the two functions, built once per contents
    (`variants.mods.fingerprint`), at most 32 kept."""
    key = (cfg, fingerprint(mask_mod), fingerprint(score_mod))
    if key in _KERNELS:
        return _KERNELS[key][1]
    kern = make_variants_kernel(cfg, mask_mod, score_mod)
    if len(_KERNELS) >= 32:
        _KERNELS.pop(next(iter(_KERNELS)))
    _KERNELS[key] = ((mask_mod, score_mod), kern)      # the functions kept alive
    return kern


def config(precision: str, d: int, block_q: int, block_k: int, m_tiles: int | None = None,
           simulator: bool | None = None):
    """The `VariantsConfig` (a `host.TCConfig`, version 2 "async", with the kernel's key
    step `step_k`) for a block mask of (block_q, block_k) tiles and head dim d (ValueError
    naming the argument that does not fit)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} for the tensor-core variants "
                         f"kernel, got {precision!r}")
    warps, mt = tiles_for(block_q, m_tiles)
    if block_k % 16:
        raise ValueError(f"block_k (the block mask's Bc) must be a multiple of 16 for the "
                         f"tensor-core variants kernel, got {block_k}")
    return VariantsConfig(plan(precision, d, warps, step_k(d, block_k), simulator, mt, False,
                               0, "async"), block_k)


def launcher(qw, kw, vw, ow, lse, bm_arrays, *, tq: int, tk: int, heads: int, group: int,
             scale: float, cfg, mask_mod, score_mod, sinks=None):
    """A call with no arguments that launches the kernel once, everything prepared
    before (the kernel built, its arguments typed): what a benchmark times. Arrays as
    `run` takes them."""
    check_capability(cfg.precision)
    kern = kernel_for(cfg, mask_mod if mask_mod is not None else always_visible,
                      score_mod if score_mod is not None else unchanged_score)
    sk = sinks if sinks is not None else cuda.to_device(np.zeros(heads, np.float32))
    args = (qw, kw.reshape(kw.size), vw.reshape(vw.size), ow, lse, np.int32(tq),
            np.int32(tk), np.int32(heads), np.int32(group), np.float32(scale), *bm_arrays,
            sk, np.int32(sinks is not None))
    if not cfg.simulator:
        check_registers("tensor_core variants kernel", kern.compile(signature()),
                        cfg.threads)
    grid = (ceil_div(tq, cfg.block_q), int(qw.shape[0]))

    def go():
        launch(kern, signature(), grid, cfg.threads, cfg.shared_bytes, args)
    return go


def run(qw, kw, vw, ow, lse, bm_arrays, **kw_args) -> None:
    """Launch on prepared device arrays: qw, ow (B Hq, Tq, D/2) uint32 words; kw, vw
    (B Hkv, Tk, D/2) words (C-contiguous); lse (B Hq, Tq) float32; bm_arrays the block
    mask's (kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices) as int32
    device arrays; keywords tq, tk, heads (Hq), group (Hq / Hkv), scale, cfg (from
    `config`), mask_mod, score_mod and sinks ((Hq,) float32 device array or None)."""
    launcher(qw, kw, vw, ow, lse, bm_arrays, **kw_args)()


#: BlockMask -> its device lists, per order ("kv", "q"); dropped with the BlockMask
_DEVICE_LISTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def device_block_mask(bm, lists: str = "kv") -> tuple:
    """The block mask's lists as int32 device arrays, copied once per BlockMask (cached
    while it lives): lists "kv", what the forward reads (kv_num_blocks, kv_indices,
    full_kv_num_blocks, full_kv_indices); "q", the transposed lists the backward reads
    (q_num_blocks, q_indices, full_q_num_blocks, full_q_indices)."""
    if lists not in ("kv", "q"):
        raise ValueError(f"lists must be 'kv' or 'q', got {lists!r}")
    cached = _DEVICE_LISTS.setdefault(bm, {})
    if lists not in cached:
        arrays = ((bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks,
                   bm.full_kv_indices) if lists == "kv" else
                  (bm.q_num_blocks, bm.q_indices, bm.full_q_num_blocks, bm.full_q_indices))
        cached[lists] = tuple(cuda.to_device(np.ascontiguousarray(a, np.int32))
                              for a in arrays)
    return cached[lists]


def default_precision(dtype) -> str:
    """bf16 for bfloat16 (ml_dtypes) input, fp16 for everything else."""
    return "bf16" if getattr(np.dtype(dtype), "name", "") == "bfloat16" else "fp16"


@serialised
def forward(q, k, v, *, block_mask=None, score_mod=None, sinks=None, scale=None,
            block_q: int | None = None, block_k: int | None = None,
            precision: str | None = None, m_tiles: int | None = None):
    """(o, lse) as `flashcourse.variants.tiled.forward`, on tensor cores: q, k, v rounded
    to fp16 (default; float16's range 65,504 is checked) or bf16 (precision="bf16", the
    default for ml_dtypes bfloat16 input), products accumulated in fp32. o (B, Hq, Tq, d)
    in q's dtype holding 16-bit values, lse (B, Hq, Tq) float32. numpy inputs; d <= 128;
    the block mask's tiles (block_q, block_k without one) must be 16 x warps x m_tiles
    query rows (warps <= 8) by a multiple of 16 keys.

    Device arrays (float16, or uint16 bf16 bit patterns, all three alike): o and lse stay
    on the device, o in q's dtype; no copy when d is a multiple of 16, nothing read back
    and no result check (see `flashcourse.cuda`), as the backward does."""
    simulator_note()
    if any(is_device_array(a) for a in (q, k, v)):
        return _forward_device(q, k, v, block_mask, score_mod, sinks, scale, block_q,
                               block_k, precision, m_tiles)
    if precision is None:
        precision = default_precision(np.asarray(q).dtype)
    out_dtype = np.asarray(q).dtype
    if out_dtype.name == "bfloat16":              # ml_dtypes: checked and run as float32
        q, k, v = (np.asarray(a, np.float32) for a in (q, k, v))
    p, bm = prepare(q, k, v, block_mask, score_mod, sinks, scale, block_q, block_k)
    if p.d > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the tensor-core "
                         f"variants forward, got {p.d}")
    br, bc = bm.block_size
    cfg = config(precision, p.d, br, bc, m_tiles, using_simulator())
    f32 = np.float32
    host = [np.asarray(a, f32).reshape(-1, a.shape[2], p.d) for a in (p.q, p.k, p.v)]
    if precision == "fp16":
        _check_fp16_range(host)
    qw, kw, vw = (cuda.to_device(_to_words(a, precision, cfg.head_dim)) for a in host)
    ow = cuda.device_array(qw.shape, np.uint32)
    lse = cuda.device_array(qw.shape[:2], f32)
    bm_arrays = device_block_mask(bm)
    sk = None if p.sinks is None else cuda.to_device(p.sinks.astype(f32))
    run(qw, kw, vw, ow, lse, bm_arrays, tq=p.tq, tk=p.tk, heads=p.heads, group=p.group,
        scale=p.scale, cfg=cfg, mask_mod=bm.mask_mod, score_mod=score_mod, sinks=sk)
    o_h = _from_words(ow.copy_to_host(), precision, p.d).reshape(p.q.shape)
    o_h = o_h.astype(out_dtype, copy=False)
    lse_h = lse.copy_to_host().reshape(p.q.shape[:3])
    check_result(o_h.astype(np.float32, copy=False), lse_h)
    return o_h, lse_h


def checked_device_arrays(arrays: dict, precision):
    """The 16-bit device inputs of a variants call, q first: each a device array of q's
    dtype (float16, or uint16 bf16 bit patterns; any CUDA-array object is viewed as one),
    C-contiguous. Returns (the arrays as Numba device arrays, the precision they run
    with); TypeError or ValueError naming the argument."""
    for name, a in arrays.items():
        if not is_device_array(a):
            raise TypeError(f"{name} must be a device array like the others, got "
                            f"{type(a).__name__}")
    arrays = {n: as_device_array(n, a, (np.float16, BF16_BITS)) for n, a in arrays.items()}
    dt = np.dtype(next(iter(arrays.values())).dtype)
    for name, a in arrays.items():
        if np.dtype(a.dtype) != dt:
            raise TypeError(f"{name} must have q's dtype {dt} on the device, got {a.dtype}")
    own = "fp16" if dt == np.float16 else "bf16"
    if precision not in (None, own):
        raise ValueError(f"{dt} device arrays run with precision={own!r} (uint16 holds bf16 "
                         f"bit patterns), got precision={precision!r}")
    return arrays, own


def checked_mods(block_mask, score_mod, batch: int, hq: int, tq: int, tk: int, block_q,
                 block_k):
    """The BlockMask a device call runs with (`resolve_block_mask`), its mask_mod and the
    score_mod checked against the inputs' sizes (`mods.check_fits`)."""
    bm = resolve_block_mask(block_mask, batch, hq, tq, tk, block_q, block_k)
    check_mod(score_mod, "score_mod", 5)
    check_fits(bm.mask_mod, "mask_mod", tq, tk, hq, batch)
    check_fits(score_mod, "score_mod", tq, tk, hq, batch)
    return bm


def _forward_device(q, k, v, block_mask, score_mod, sinks, scale, block_q, block_k,
                    precision, m_tiles):
    """`forward` on device arrays: shapes and dtypes checked, nothing read back."""
    arrays, own = checked_device_arrays({"q": q, "k": k, "v": v}, precision)
    q, k, v = arrays.values()
    qs, ks = tuple(int(n) for n in q.shape), tuple(int(n) for n in k.shape)
    check_layout(qs, ks, tuple(int(n) for n in v.shape))
    batch, hq, tq, d = qs
    hkv, tk = ks[1], ks[2]
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the tensor-core "
                         f"variants forward, got {d}")
    bm = checked_mods(block_mask, score_mod, batch, hq, tq, tk, block_q, block_k)
    sinks = check_sinks(sinks, hq)
    scale = check_scale(scale, d)
    cfg = config(own, d, *bm.block_size, m_tiles, using_simulator())
    D = cfg.head_dim
    dt = np.dtype(q.dtype)

    def words(a, t):                       # (B H, T, D/2) uint32: a view when D == d
        return words_for_kernel(a.reshape(int(a.size) // (t * d), t, d), own, D, pooled_empty)
    qw, kw, vw = words(q, tq), words(k, tk), words(v, tk)
    o, lse = pooled_empty(qs, dt), pooled_empty((batch, hq, tq), np.float32)
    o_rows = o.reshape(batch * hq, tq, d)
    ow = o_rows.view(np.uint32) if D == d else pooled_empty(qw.shape, np.uint32)
    sk = None if sinks is None else cuda.to_device(sinks.astype(np.float32))
    run(qw, kw, vw, ow, lse.reshape(batch * hq, tq), device_block_mask(bm), tq=tq, tk=tk,
        heads=hq, group=hq // hkv, scale=scale, cfg=cfg, mask_mod=bm.mask_mod,
        score_mod=score_mod, sinks=sk)
    if D != d:
        device_unwords(ow, o_rows, own, d)
    return o, lse
