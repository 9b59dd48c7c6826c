"""tc_backward: the host side of the tensor-core backward (FlashAttention-2's, on mma.sync).

The kernels, with the idea and the fragment layouts of the transposed products, are in
`tc_backward_kernels.py`. This module holds one variant's configuration (`TCBConfig`,
`plan`, `default_tiles`), the compiled variants (cached), `run` (the launches on prepared
32-bit word arrays) and `run_heads`, the registry's entry; the D pre-pass and the gradient
casts around the key-major kernel are in `tc_backward_passes.py`:

    from flashcourse.cuda import backward
    dq, dk, dv = backward(q16, k16, v16, o16, lse, do16, kernel="tensor_core")   # fp16
    dq, dk, dv = backward(q, k, v, o, lse, do, kernel="tensor_core")             # 3xTF32
    dq, dk, dv = backward(q, k, v, o, lse, do, kernel="tensor_core", precision="bf16")
    dq, dk, dv = backward(..., kernel="tensor_core", deterministic=True)  # dQ without atomics
    dq, dk, dv = backward(q16, k16, v16, o16, lse, do16, kernel="tensor_core",
                          pipeline="wgmma")         # Hopper's wgmma (hopper/backward.py)
    python benchmarks/gpu_tc_backward.py --check --bench                  # on a GPU

Precisions: "fp16" for float16 arrays; "3xtf32" (the default for float32 arrays: fp32
accuracy on the tensor cores, mma.sync m16n8k8 TF32 with each operand split into big and
small, `tc_backward_kernels_tf32.py`, whose kernel 2 is the deterministic dQ pass);
"bf16" for float32 arrays (rounded to bf16 on the device; the gradients come back in
float32) or for uint16 arrays of bf16 bit patterns (no conversion; the gradients come back
as bf16 bits).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import cuda

from ...constants import LOG2E
from ...geometry import ceil_div
from ...gpu import using_simulator
from ...limits import check_launch
from ..common._launch import WarpThreads, check_registers, flat, launch
from ..common.host_plans import pooled_empty
from .tc_backward_kernels import LD_ROWS
from . import tc_backward_passes as passes
from ..tensor_core.host import BF16_BITS, MIN_BLOCKS_MEANING, words_for_kernel

PRECISIONS = ("fp16", "bf16", "3xtf32")
#: key-major kernel versions: "plain" (v1, tc_backward_kernels), "async" (v2, cp.async +
#: ldmatrix, tc_backward_kernels_async)
PIPELINES = ("async", "plain")
#: the 3xtf32 kernel's: "async" (Q_i, dO_i split where each warp reads them) or "planes"
#: (split once per query block into big/small planes in shared memory)
TF32_PIPELINES = ("async", "planes")
#: the largest head dimension (d is padded with zeros up to a multiple of 16)
MAX_HEAD_DIM = 128
#: fp16/bf16 (version 2, d even, unchecked calls): the kernel stores dK, dV in the output
#: dtype (TCBConfig.out16; False: float32 arrays and two casts, for the A/B), the same bits
OUT16 = True


@dataclass(frozen=True)
class TCBConfig(WarpThreads):
    """One variant of the two kernels.

    precision; warps per block (kernel 1: Bc = 16 x warps keys, one 16-key tile per warp;
    kernel 2: 16 x warps query rows); block_q (Br of kernel 1, a multiple of 16 with
    warps a multiple of Br/16); head_dim D (d rounded up to 16); with_dq (kernel 1 adds
    dQ by atomics; False: kernel 2 computes it); sums (add the row sums of P and dS for
    the checks); kv_regs (K_j, V_j A fragments in registers; False: read from shared
    memory, for d = 128 where registers run out); q_block_k (Bc of kernel 2); out16
    (version 2, fp16/bf16, d even: kernel 1 writes dK, dV in the 16-bit output type
    itself, two values per 32-bit store, instead of float32 arrays cast afterwards)."""

    precision: str
    warps: int
    block_q: int
    head_dim: int
    simulator: bool
    with_dq: bool = True
    sums: bool = False
    kv_regs: bool = True
    q_block_k: int = 64
    min_blocks: int = 0
    pipeline: str = "async"    # "async": version 2 (cp.async + ldmatrix); "plain": version 1
    out16: bool = False        # version 2: dK, dV stored as fp16/bf16 words (d even)

    @property
    def block_k(self):
        return 16 * self.warps

    # shared-memory strides in 32-bit words, padded so that the fragment reads of a warp
    # (rows g = 0..7, words t = 0..3) fall in 32 different banks: 4 g + t
    @property
    def row_stride(self):          # row-major rows of Q, dO (kernel 1), K, V (kernel 2)
        return self.head_dim // 2 + 4

    @property
    def t_stride(self):            # transposed-packed Q, dO: [dim][query pair]
        return self.block_q // 2 + 4

    @property
    def kt_stride(self):           # transposed-packed K (kernel 1): [dim][key pair]
        return self.block_k // 2 + 4

    @property
    def ds_stride(self):           # dS[query][key] in fp32
        return self.block_k + 4

    @property
    def dsh_stride(self):          # version 2: dS^T[key][query pair], rounded to 16 bits
        return self.block_q // 2 + 4

    @property
    def qkt_stride(self):          # transposed-packed K (kernel 2)
        return self.q_block_k // 2 + 4

    @property
    def tf32(self):
        return self.precision == "3xtf32"

    @property
    def tf32_row_stride(self):     # 3xtf32: rows of Q, dO, K, V, one fp32 per word
        return self.head_dim + 4

    @property
    def tf32_ds_stride(self):      # 3xtf32: dS[query][key] big / small planes
        return self.block_k + 4

    def key_major_tiles(self):
        """Tile counts of the fp16/bf16 key-major kernels (versions 2 and the variants'):
        words per row of q, k, v, dO (DW = D/2); k16 steps of S^T, dP^T over d (KT); n8
        tiles of S^T, 16 keys x Br queries (NS); n8 tiles of dK, dV (NO); k16 steps of
        dV, dK over the queries (KQ); 16-row tiles of dQ_i (MQ); n8 tiles of dQ per warp
        (NQW). As (DW, KT, NS, NO, KQ, MQ, NQW)."""
        d, br = self.head_dim, self.block_q
        mq = br // 16
        return d // 2, d // 16, br // 8, d // 8, br // 16, mq, d // 8 // (self.warps // mq)

    def tf32_offsets(self):
        """Word offsets of the 3xtf32 kernel's shared arrays: QN, DON, L, D (inside
        buffer 0; buffer 1 is BUF words further), K, V row-major, dS big, dS small, BUF,
        end (the dS planes only with with_dq)."""
        rs = self.tf32_row_stride
        qn = self.block_q * rs
        buf = 2 * qn + 2 * self.block_q
        kn = 2 * buf
        vn = kn + self.block_k * rs
        dsb = vn + self.block_k * rs
        plane = self.block_q * self.tf32_ds_stride if self.with_dq else 0
        small = 2 * qn if self.pipeline == "planes" else 0
        return 0, qn, 2 * qn, 2 * qn + self.block_q, kn, vn, dsb, dsb + plane, buf, \
            dsb + 2 * plane + small

    def tf32_small_offsets(self):
        """pipeline "planes": word offsets of the small planes of Q_i and dO_i (their big
        planes replace the raw values in the buffer), after the dS planes."""
        end = self.tf32_offsets()[-1] - 2 * self.block_q * self.tf32_row_stride
        return end, end + self.block_q * self.tf32_row_stride

    def offsets(self):
        """Word offsets of kernel 1's shared arrays: QN, DON, QT, DOT, L, D, KT, dS, KN,
        VN, end (KT and dS only with with_dq; KN, VN only without kv_regs)."""
        sizes = [self.block_q * self.row_stride] * 2 + [self.head_dim * self.t_stride] * 2
        sizes += [self.block_q, self.block_q]
        sizes += [self.head_dim * self.kt_stride if self.with_dq else 0,
                  self.block_q * self.ds_stride if self.with_dq else 0]
        sizes += [0 if self.kv_regs else self.block_k * self.row_stride] * 2
        out, at = [], 0
        for n in sizes:
            out.append(at)
            at += n
        return tuple(out) + (at,)

    def async_offsets(self):
        """Word offsets of version 2's shared arrays: QN, DON, L, D (inside buffer 0;
        buffer 1 is BUF words further), K row-major, V row-major, dS, BUF, end."""
        buf = 2 * self.block_q * self.row_stride + 2 * self.block_q
        kn = 2 * buf
        vn = kn + self.block_k * self.row_stride
        ds = vn + (0 if self.kv_regs else self.block_k * self.row_stride)
        end = ds + (self.block_k * self.dsh_stride if self.with_dq else 0)
        qn = self.block_q * self.row_stride
        return 0, qn, 2 * qn, 2 * qn + self.block_q, kn, vn, ds, buf, end

    def tf32_q_offsets(self):
        """Word offsets of the 3xtf32 kernel 2's shared arrays: QN, DON (16 x warps rows
        each), K, V (q_block_k rows each, in buffer 0; buffer 1 is KVB words further),
        KVB, end."""
        rs = self.tf32_row_stride
        qn = 16 * self.warps * rs
        kv = self.q_block_k * rs
        return 0, qn, 2 * qn, 2 * qn + kv, 2 * kv, 2 * qn + 4 * kv

    def q_offsets(self):
        """Word offsets of kernel 2's shared arrays: KN, VN, KT, end."""
        kn = self.q_block_k * self.row_stride
        kt = self.head_dim * self.qkt_stride
        return 0, kn, 2 * kn, 2 * kn + kt

    @property
    def shared_bytes(self):
        if self.tf32:
            return 4 * self.tf32_offsets()[-1]
        if self.pipeline == "async":
            return 4 * self.async_offsets()[-1]
        return 4 * self.offsets()[-1]

    @property
    def q_shared_bytes(self):
        return 4 * (self.tf32_q_offsets() if self.tf32 else self.q_offsets())[-1]


def default_tiles(d: int, simulator: bool, precision: str = "fp16") -> dict:
    """The variant used when the caller names none (warps, block_q, kv_regs, q_block_k,
    pipeline). 3xtf32: `_tf32_tiles`. fp16/bf16 on a GPU: the fastest of the H200 sweep
    at N = 4096 (benchmarks/results/h200_tc_backward.json, "variants"): 8 warps (Bc = 128
    keys), Br = 32, version 2; K_j and V_j fragments in registers up to d = 64, read from
    shared memory above. At d = 64,
    Br = 64: 3-7% faster than 32 at all four points of the Br sweep
    (results/h200_tc_backward_br_variants_log.txt). A head
    dim whose dQ tiles do not split in even pairs over 8 warps (D/8 = 6, 10, 14: d = 33..48,
    65..80, 97..112) takes 4 warps."""
    if precision == "3xtf32":
        return _tf32_tiles(d, simulator)
    if simulator:
        return {"warps": 1, "block_q": 16, "kv_regs": True, "q_block_k": 16,
                "pipeline": "async"}
    D = ceil_div(d, 16) * 16
    warps = 8 if (D // 8 // 2) % 2 == 0 else 4
    return {"warps": warps, "block_q": 64 if D == 64 else 32, "kv_regs": D <= 64,
            "q_block_k": 64 if D <= 64 else 32, "pipeline": "async"}


def _tf32_tiles(d: int, simulator: bool) -> dict:
    """3xtf32's variant: K_j, V_j always in shared memory (kv_regs False: split into
    big/small fragments where read), version 2's "async" pipeline. Under the simulator
    1 warp, Br = 16. On a GPU: 4 warps (Bc = 64 keys) with Br = 32 up to d = 64 and at
    d = 65..80 (H200, 2026-12-03, results/h200_bars_bwd_planes.json: 1.10-1.27x PyTorch's
    efficient fp32 at d = 64); 8 warps x Br 16 at d = 113..128 (one block of Bc = 128 keys
    per SM). "planes" (Q_i, dO_i split once per query block) was 2-3% faster than "async"
    there with the small terms apart (the same run), 2.6-3.5% slower with them in one
    chain, the kernel's default since (results/h200_bwd_ab4_log.txt). Br = 16 at
    d = 81..96 (4 warps) and 2 warps at d = 97..112 (dQ's d/8 = 14 column tiles do not
    split over 4 warps): from ptxas's register counts (sm_90, no spills), not timed."""
    t = {"warps": 1, "block_q": 16, "kv_regs": False, "q_block_k": 16, "pipeline": "async"}
    if simulator:
        return t
    D = ceil_div(d, 16) * 16
    t["q_block_k"] = 64 if D <= 64 else 32     # kernel 2 (deterministic=True)
    if D <= 64 or D == 80:
        return dict(t, warps=4, block_q=32)
    if D == 128:
        return dict(t, warps=8, block_q=16)
    if (D // 8) % 4 == 0:
        return dict(t, warps=4, block_q=16)
    return dict(t, warps=2, block_q=16)


def _candidates(d: int, precision: str = "fp16") -> list:
    """Tile choices best first (the H200's default, then smaller blocks for GPUs with less
    shared memory per block), those valid for d."""
    first = default_tiles(d, False, precision)
    if precision == "3xtf32":
        out = [first]
        for warps, block_q in ((4, 16), (2, 16), (2, 32), (1, 16)):
            t = dict(first, warps=warps, block_q=block_q)
            if t not in out:
                out.append(t)
        D = ceil_div(d, 16) * 16
        return [t for t in out if t["warps"] % (t["block_q"] // 16) == 0
                and (D // 8) % (t["warps"] // (t["block_q"] // 16)) == 0]
    out = [first]
    for warps, block_q in ((4, 64), (4, 32), (2, 32)):
        t = dict(first, warps=warps, block_q=block_q)
        if t not in out:
            out.append(t)
    D = ceil_div(d, 16) * 16
    return [t for t in out if t["warps"] % (t["block_q"] // 16) == 0
            and (D // 8 // (t["warps"] // (t["block_q"] // 16))) % 2 == 0]


def choose_tiles(d: int, limits, deterministic: bool = False,
                 precision: str = "fp16") -> dict:
    """The first of `_candidates(d, precision)` whose kernels fit `limits` (a
    `DeviceLimits`); LaunchError naming shared memory when none does. (Cached: a pure
    function of its arguments, ~0.1 ms to evaluate, asked on every call.) fp16 and bf16
    share one layout; 3xtf32 has its own."""
    tf32 = precision == "3xtf32"
    return dict(_choose_tiles(d, limits, bool(deterministic), tf32))


@lru_cache(maxsize=None)
def _choose_tiles(d: int, limits, deterministic: bool, tf32: bool = False) -> tuple:
    from ...limits import pick_config
    D = ceil_div(d, 16) * 16
    precision = "3xtf32" if tf32 else "fp16"
    cands = []
    for i, t in enumerate(_candidates(d, precision)):
        cfg = TCBConfig(precision, t["warps"], t["block_q"], D, False, not deterministic,
                        False, t["kv_regs"], t["q_block_k"], 0, t["pipeline"])
        q_bytes = cfg.q_shared_bytes if deterministic or not tf32 else 0
        cands.append((i, cfg.threads, max(cfg.shared_bytes, q_bytes)))
    best = _candidates(d, precision)[pick_config(cands, limits,
                                                 f"tensor-core backward d={d}")]
    return tuple(best.items())


def plan(precision: str, d: int, warps: int, block_q: int, simulator: bool | None = None,
         with_dq: bool = True, sums: bool = False, kv_regs: bool = True,
         q_block_k: int = 64, min_blocks: int = 0, pipeline: str = "async",
         out16: bool = False) -> TCBConfig:
    """Check one configuration for head dim d (ValueError naming the argument)."""
    from ..._checks import check_block, check_bool, check_whole
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} for the tensor-core "
                         f"backward, got {precision!r}")
    warps = check_block(warps, "warps")
    block_q = check_block(block_q, "block_q")
    q_block_k = check_block(q_block_k, "q_block_k")
    kv_regs = check_bool(kv_regs, "kv_regs")
    min_blocks = check_whole(min_blocks, "min_blocks", meaning=MIN_BLOCKS_MEANING)
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the tensor-core "
                         f"backward, got d={d}")
    if block_q % 16 or q_block_k % 16 or LD_ROWS % block_q:
        raise ValueError(f"block_q must be 16, 32, 64 or 128 and q_block_k a multiple of 16, "
                         f"got {block_q} and {q_block_k}")
    D = ceil_div(d, 16) * 16
    mq = block_q // 16
    if warps % mq or (D // 8) % (warps // mq):
        raise ValueError(f"block_q={block_q} does not fit warps={warps} at d={d}: dQ's "
                         f"{mq} 16-row tiles are shared out among the warps, so warps must "
                         f"be a multiple of block_q/16 and d/8 of warps/(block_q/16)")
    tf32 = precision == "3xtf32"
    if tf32:                           # its pipelines, with its own message
        _check_tf32_options(pipeline, kv_regs)
    elif pipeline not in PIPELINES:
        raise ValueError(f"pipeline must be one of {PIPELINES}, got {pipeline!r}")
    elif pipeline == "async" and (D // 8 // (warps // mq)) % 2:
        raise ValueError(f"block_q={block_q}, warps={warps} at d={d}: version 2 reads dQ's "
                         f"B fragments two n8 tiles at a time; use more query rows per warp")
    if out16 and (tf32 or pipeline != "async" or d % 2):
        raise ValueError(f"out16 (dK, dV written as 16-bit words) needs precision fp16 or "
                         f"bf16, pipeline 'async' and an even d; got {precision!r}, "
                         f"{pipeline!r}, d={d}")
    if simulator is None:
        simulator = using_simulator()
    cfg = TCBConfig(precision, warps, block_q, D, bool(simulator), bool(with_dq),
                    bool(sums), kv_regs, q_block_k, min_blocks, pipeline, bool(out16))
    check_launch(cfg.threads, cfg.shared_bytes, what="tensor-core backward kernel")
    check_launch(cfg.threads, cfg.q_shared_bytes, what="tensor-core backward dQ kernel")
    return cfg


def _check_tf32_options(pipeline, kv_regs) -> None:
    """What precision='3xtf32' does not build: ValueError naming the option."""
    if pipeline not in (None,) + TF32_PIPELINES:
        raise ValueError(f"precision='3xtf32' is built with pipeline='async' or 'planes', "
                         f"got pipeline={pipeline!r}")
    if kv_regs:
        raise ValueError("precision='3xtf32' keeps K_j, V_j in shared memory: kv_regs "
                         "must be False (or not given)")


def _plan(*args) -> TCBConfig:
    """`plan`, cached (its checks take ~0.1 ms, on every call; the launch limits are
    those of the one GPU a process uses, as in `host_plans`). An unhashable option (a
    caller's warps=[8]) goes to `plan` uncached, whose check names it."""
    try:
        hash(args)
    except TypeError:                  # a list or array given as an option: plan refuses it
        return plan(*args)
    return _plan_cached(*args)


@lru_cache(maxsize=256)
def _plan_cached(*args) -> TCBConfig:
    return plan(*args)


@lru_cache(maxsize=None)
def kernels(cfg: TCBConfig):
    """(key-major kernel, query-major dQ kernel or None) for one configuration (cached)."""
    from .tc_backward_kernels import make_key_major_kernel, make_query_major_kernel
    from .tc_backward_kernels_async import make_key_major_async_kernel
    if cfg.tf32:
        from . import tc_backward_kernels_tf32 as tf32
        return (tf32.make_key_major_tf32_kernel(cfg),
                None if cfg.with_dq else tf32.make_query_major_tf32_kernel(cfg))
    key_major = (make_key_major_async_kernel if cfg.pipeline == "async"
                 else make_key_major_kernel)(cfg)
    return key_major, None if cfg.with_dq else make_query_major_kernel(cfg)


_SIGS: dict = {}


def signatures(pipeline: str = "plain", precision: str = "fp16", out16: bool = False):
    """(key-major, query-major) kernel signatures for one key-major version (3xtf32: q, k,
    v, dO and lse/D flat, and dQ in the key-major one; out16: dK, dV as (BH, Tk, d/2)
    uint32 words)."""
    if not _SIGS:
        from numba import float32, int32, types, uint32
        w3 = types.Array(uint32, 3, "C")
        f3 = types.Array(float32, 3, "C")
        f2 = types.Array(float32, 2, "C")
        tail = (int32, int32, int32, float32, float32, int32, int32)
        _SIGS["kv"] = (w3, w3, w3, w3, f2, f2, f3, f3, f3) + tail + (f2, f2)
        _SIGS["q"] = (w3, w3, w3, w3, f2, f2, f3) + tail
        w1 = types.Array(uint32, 1, "C")
        f1 = types.Array(float32, 1, "C")
        _SIGS["kv_async"] = (w1, w3, w3, w1, w1, f1, f3, f3) + tail + (f2, f2)
        _SIGS["kv_tf32"] = (w1, w1, w1, w1, w1, f1, f3, f3) + tail + (f2, f2)
        _SIGS["q_tf32"] = (w1, w1, w1, w1, w1, f3) + tail
        _SIGS["kv_async16"] = (w1, w3, w3, w1, w1, f1, w3, w3) + tail + (f2, f2)
    if precision == "3xtf32":
        return _SIGS["kv_tf32"], _SIGS["q_tf32"]
    if out16:
        return _SIGS["kv_async16"], _SIGS["q"]
    return _SIGS["kv_async" if pipeline == "async" else "kv"], _SIGS["q"]



def check_capability(limits=None) -> None:
    """mma.sync m16n8k16 with fp16/bf16 (and m16n8k8 with tf32) needs compute capability
    8.0 or newer."""
    from ..tensor_core.host import check_capability as forward_check
    forward_check("tensor-core backward", limits)


def launches(d: int, tq: int, tk: int, bh: int, limits, deterministic: bool = False,
             precision: str = "fp16"):
    """The launches `run` makes with the default tiles on a GPU with `limits` (fp16 and
    bf16 share them; precision="3xtf32": its kernel's)."""
    from ...limits import Launch
    check_capability(limits)
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the tensor-core "
                         f"backward, got d={d}")
    if precision != "3xtf32":
        precision = "fp16"
    t = choose_tiles(d, limits, deterministic, precision)
    cfg = TCBConfig(precision, t["warps"], t["block_q"], ceil_div(d, 16) * 16, False,
                    not deterministic, False, t["kv_regs"], t["q_block_k"], 0, t["pipeline"])
    out = [Launch("tensor-core backward D pass", passes.delta_grid(tq, bh),
                  passes.PASS_THREADS, 0, config=""),
           Launch(f"tensor-core backward key-major d={d}", (ceil_div(tk, cfg.block_k), bh),
                  cfg.threads, cfg.shared_bytes,
                  config=f"Br={cfg.block_q} Bc={cfg.block_k} warps={cfg.warps}")]
    if deterministic:
        out.append(Launch(f"tensor-core backward dQ pass d={d}",
                          (ceil_div(tq, 16 * cfg.warps), bh), cfg.threads,
                          cfg.q_shared_bytes, config=f"Bc={cfg.q_block_k}"))
    return tuple(out)


def run(qw, kw, vw, dow, o, do, lse, dq, dk, dv, tq: int, tk: int, d: int, scale: float,
        causal: bool, precision: str, *, deterministic: bool = False, psum=None, dsum=None,
        warps=None, block_q=None, kv_regs=None, q_block_k=None, min_blocks=None,
        pipeline=None, ld=None, warpgroups=None) -> TCBConfig:
    """Launch the backward on prepared device arrays.

    qw, dow (BH, Tq, D/2), kw, vw (BH, Tk, D/2): uint32 words of two fp16/bf16 values,
    D = d rounded up to 16 (padding columns zero); for "3xtf32" (BH, T, D) uint32 words
    of the fp32 bits (`_words`); o, do (BH, Tq, d) float16/float32
    (for D = rowsum(dO o O)); lse (BH, Tq) float32; dq (BH, Tq, d), dk, dv (BH, Tk, d)
    float32, overwritten (dk, dv may instead be of the 16-bit output dtype, float16 or bf16
    bits, for fp16/bf16 with d even: the kernel then writes them rounded, `TCBConfig.out16`).
    psum, dsum (BH, Tq) float32: when given, they receive the row
    sums of P and dS (the checks of `flashcourse.cuda.backward`). ld: the pre-pass's
    (2, BH, Tq rounded up to 128) float32 workspace (allocated when None)."""
    check_capability()
    sim = using_simulator()
    if pipeline == "wgmma":            # Hopper's warpgroup instructions (hopper/backward.py)
        return _run_wgmma(qw, kw, vw, dow, o, do, lse, dq, dk, dv, tq, tk, d, scale,
                          causal, precision, deterministic, psum, dsum, ld, warpgroups,
                          dict(warps=warps, block_q=block_q, kv_regs=kv_regs,
                               q_block_k=q_block_k, min_blocks=min_blocks))
    if warpgroups is not None:
        raise ValueError(f"warpgroups applies to pipeline='wgmma' only, got pipeline="
                         f"{pipeline!r}")
    if sim:
        tiles = default_tiles(d, True, precision)
    else:
        from ...limits import current_limits
        tiles = choose_tiles(d, current_limits(), deterministic, precision)
    given = {"warps": warps, "block_q": block_q, "kv_regs": kv_regs, "q_block_k": q_block_k,
             "pipeline": pipeline}
    tiles.update({n: v for n, v in given.items() if v is not None})
    sums = psum is not None
    out16 = np.dtype(dk.dtype) != np.float32
    cfg = _plan(precision, d, tiles["warps"], tiles["block_q"], sim, not deterministic, sums,
                tiles["kv_regs"], tiles["q_block_k"], min_blocks or 0, tiles["pipeline"],
                out16)
    if out16:                          # (BH, Tk, d/2) words of two 16-bit values
        dk, dv = dk.view(np.uint32), dv.view(np.uint32)
    key_major, query_major = kernels(cfg)
    bh = qw.shape[0]
    ld = _ld_workspace(ld, bh, tq)
    delta = ld[1]
    if not sums:
        psum = dsum = delta            # never written (sums=False), any (BH, Tq) array
    prepass(precision, o, do, lse, ld, dq, deterministic, tq, d, psum, dsum, sums)
    tail = _tail(tq, tk, d, scale, causal)
    sig_kv, sig_q = signatures(cfg.pipeline, precision, out16)
    if not sim:
        check_registers("tensor-core backward kernel", key_major.compile(sig_kv),
                        cfg.threads)
    if cfg.tf32:                       # 3xtf32 takes q, k, v, dO, lse/D and dQ flat
        head = (flat(qw), flat(kw), flat(vw), flat(dow), flat(ld.view(np.uint32)), flat(dq))
    elif cfg.pipeline == "async":      # version 2 takes q, dO, lse/D and dQ flat (1-D)
        head = (flat(qw), kw, vw, flat(dow), flat(ld.view(np.uint32)), flat(dq))
    else:
        head = (qw, kw, vw, dow, lse, delta, dq)
    launch(key_major, sig_kv, (ceil_div(tk, cfg.block_k), bh), cfg.threads, cfg.shared_bytes,
           head + (dk, dv) + tail + (psum, dsum))
    if deterministic:
        if not sim:
            check_registers("tensor-core backward dQ kernel", query_major.compile(sig_q),
                            cfg.threads)
        head = ((flat(qw), flat(kw), flat(vw), flat(dow), flat(ld.view(np.uint32)), dq)
                if cfg.tf32 else (qw, kw, vw, dow, lse, delta, dq))
        launch(query_major, sig_q, (ceil_div(tq, 16 * cfg.warps), bh), cfg.threads,
               cfg.q_shared_bytes, head + tail)
    return cfg


def prepass(precision, o, do, lse, ld, dq, deterministic, tq, d, psum, dsum, sums) -> None:
    """The D pre-pass before either key-major kernel: ld[0] = lse log2(e), ld[1] = D =
    rowsum(dO o O) (+inf and 0 past Tq), dQ zeroed unless deterministic, the sums zeroed."""
    tc_delta, tc_delta_bf16, _, tc_delta_bits, _ = passes.pass_kernels()
    if precision == "bf16" and np.dtype(o.dtype) == BF16_BITS:     # bf16 bit arrays
        tc_delta = tc_delta_bits
    elif precision == "bf16":          # D from the bf16-rounded o, dO (float32 arrays)
        tc_delta, o, do = tc_delta_bf16, o.view(np.uint32), do.view(np.uint32)
    i32 = np.int32
    launch(tc_delta, None, passes.delta_grid(tq, ld.shape[1]), passes.PASS_THREADS, 0,
           (o, do, lse, ld, dq, i32(0 if deterministic else 1), i32(tq), i32(d), psum, dsum,
            i32(1 if sums else 0)))


def _ld_workspace(ld, bh: int, tq: int):
    """The pre-pass's (2, BH, Tq rounded up to LD_ROWS) float32 workspace: `ld` when it has
    that shape, else a new one."""
    tqp = ceil_div(tq, LD_ROWS) * LD_ROWS
    if ld is None or tuple(ld.shape) != (2, bh, tqp):
        ld = cuda.device_array((2, bh, tqp), np.float32)
    return ld


def _tail(tq, tk, d, scale, causal) -> tuple:
    """The key-major kernels' last scalar arguments."""
    i32, f32 = np.int32, np.float32
    return (i32(tq), i32(tk), i32(d), f32(scale * LOG2E), f32(scale), i32(1 if causal else 0),
            i32(tk - tq))


def _run_wgmma(qw, kw, vw, dow, o, do, lse, dq, dk, dv, tq, tk, d, scale, causal, precision,
               deterministic, psum, dsum, ld, warpgroups, mma_sync_tiles):
    """pipeline="wgmma": the pre-pass, then `hopper.backward.run`."""
    from ..hopper import backward as hopper_backward
    if deterministic:
        raise ValueError("pipeline='wgmma' adds dQ by atomics: deterministic=True runs on "
                         "mma.sync (pipeline 'async')")
    extra = [n for n, v in mma_sync_tiles.items() if v is not None]
    if extra:
        raise ValueError(f"pipeline='wgmma' takes warpgroups (1 or 2), not the mma.sync "
                         f"kernels' {', '.join(extra)}")
    if np.dtype(dk.dtype) != np.float32:
        raise ValueError("pipeline='wgmma' writes dK, dV in float32 (cast after)")
    ld = _ld_workspace(ld, qw.shape[0], tq)
    sums = psum is not None
    prepass(precision, o, do, lse, ld, dq, False, tq, d, psum if sums else ld[1],
            dsum if sums else ld[1], sums)
    return hopper_backward.run(qw, kw, vw, dow, ld, dq, dk, dv, _tail(tq, tk, d, scale, causal),
                               precision, psum, dsum, warpgroups)


def default_precision(dtype) -> str:
    """fp16 for float16 arrays, 3xtf32 for float32 arrays (fp32 accuracy; precision="bf16"
    rounds them to bfloat16 instead), bf16 for uint16 arrays of bf16 bit patterns
    (`tensor_core.BF16_BITS`)."""
    if np.dtype(dtype) == np.float16:
        return "fp16"
    if np.dtype(dtype) == BF16_BITS:
        return "bf16"
    if np.dtype(dtype) == np.float32:
        return "3xtf32"
    raise ValueError(f"the tensor-core backward takes float16, float32 or uint16 (bf16 "
                     f"bits) arrays, got {np.dtype(dtype)}")


def compute_type(options: dict, dtype) -> str:
    """The type the checks of `flashcourse.cuda.backward` allow rounding errors of.

    fp16 takes float16 arrays, which the tensor cores multiply exactly (sums in fp32):
    the recomputed P and dS row sums are float32-accurate ("float32"; P is rounded to
    16 bits only after they are summed). 3xtf32 computes every product to ~2^-21 of
    |a||b|, as fp32 does ("float32"). bf16 rounds float32 inputs first, so S moves by
    ~2^-8 of |q||k| from the scores the caller's lse came from ("bfloat16")."""
    precision = options.get("precision") or default_precision(dtype)
    return "float32" if precision in ("fp16", "3xtf32") else "bfloat16"


def _words(a, precision: str, D: int):
    """`host.words_for_kernel` with pooled outputs."""
    return words_for_kernel(a, precision, D, alloc=_array)


_array = pooled_empty        # device arrays from the output pool (plain under the simulator)


def run_heads(x, out=None, psum=None, dsum=None, precision=None, deterministic=False,
              **tiles):
    """The registry's entry (`flashcourse.cuda.backward(..., kernel="tensor_core")`).

    x: a `Heads` of C-contiguous device arrays q, o, do (BH, Tq, d), k, v (BH, Tk, d) of
    one dtype, float16 (precision "fp16"), float32 ("3xtf32" by default, or "bf16") or
    uint16 bf16 bit patterns ("bf16": no conversion in, gradients rounded to bf16 bits
    out), lse (BH, Tq) float32. Returns (dq, dk, dv) in x's dtype (BH, T, d); `out` may
    hold them already allocated.
    """
    from ..._checks import check_bool, check_choice
    deterministic = check_bool(deterministic, "deterministic")
    check_bool(tiles.get("kv_regs"), "kv_regs", none_ok=True)
    dt = np.dtype(x.dtype)
    precision = default_precision(dt) if precision is None else precision
    check_choice(precision, "precision", PRECISIONS)
    takes = {"fp16": "float16", "bf16": "float32 or uint16", "3xtf32": "float32"}[precision]
    if ((precision == "fp16") != (dt == np.float16)
            or (precision == "3xtf32" and dt != np.float32)):
        raise ValueError(f"precision={precision!r} takes {takes} arrays, got {dt}: use "
                         f"precision='fp16' for float16, '3xtf32' (the default) or 'bf16' "
                         f"for float32, 'bf16' for uint16 bf16 bit patterns")
    if precision == "3xtf32":
        _check_tf32_options(tiles.get("pipeline"), tiles.get("kv_regs"))
    if x.d > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the tensor-core "
                         f"backward, got d={x.d}")
    D = ceil_div(x.d, 16) * 16
    qw, kw, vw, dow = (_words(a, precision, D) for a in (x.q, x.k, x.v, x.do))
    if out is None:
        out = (_array((x.bh, x.tq, x.d), dt), _array((x.bh, x.tk, x.d), dt),
               _array((x.bh, x.tk, x.d), dt))
    f32 = dt == np.float32
    # fp16/bf16: dQ is added up in float32 (atomics) and cast after; dK, dV are written in
    # the output dtype by the kernel (OUT16), except for a checked call, which compares the
    # float32 gradients with their 16-bit copies, an odd d or the "plain" pipeline
    direct = (not f32 and OUT16 and x.d % 2 == 0 and psum is None
              and tiles.get("pipeline") in (None, "async"))
    work = out if f32 else tuple(g if direct and i else _array(g.shape, np.float32)
                                 for i, g in enumerate(out))
    ld = _array((2, x.bh, ceil_div(x.tq, LD_ROWS) * LD_ROWS), np.float32)
    run(qw, kw, vw, dow, x.o, x.do, x.lse, *work, x.tq, x.tk, x.d, x.scale, x.causal,
        precision, deterministic=deterministic, psum=psum, dsum=dsum, ld=ld, **tiles)
    if not f32:
        for src, dst in zip(work[:1] if direct else work, out):
            passes.cast(src, dst, bits=dt == BF16_BITS)
        if psum is not None:           # a checked call: fp32 gradients that float16 lacks
            from ..._guards import gradients_finite  # (dS is rounded to float16 inside:
            gradients_finite(                     # its overflow is a float16 one)
                [(w.copy_to_host(), g.copy_to_host()) for w, g in zip(work, out)], "float16")
    return tuple(out)
