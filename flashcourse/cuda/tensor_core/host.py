"""tensor_core.host: the host side of the tensor-core FlashAttention forward.

The kernels, with the idea, the bytes they move and what limits them, are in
`tensor_core_kernels.py`; the mma building blocks and their numpy models in `mma.py`.
This module holds one kernel variant's configuration (`TCConfig`, `plan`, the measured
`default_tiles`), `make_tensor_core_kernel` (compiled variants, cached), `run` (a launch
on prepared 32-bit word arrays), `run_heads` (the registry's entry: device arrays in,
device arrays out) and `forward` (`flashcourse.cuda.forward(..., kernel="tensor_core")`
plus bfloat16 arrays of the ml_dtypes package).

    from flashcourse.cuda import forward
    o, lse = forward(q16, k16, v16, kernel="tensor_core", causal=True)   # float16 in/out
    o, lse = forward(q, k, v, kernel="tensor_core", precision="bf16")    # float32 in/out
    o, lse = forward(q, k, v, kernel="tensor_core")                      # fp32: 3xTF32
    o, lse = forward(qb, kb, vb, kernel="tensor_core")   # uint16 device arrays: bf16 bits
    python benchmarks/gpu_tensor_core.py --check --variants --bench      # on a GPU
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from ...constants import LOG2E
from ...geometry import ceil_div
from ...gpu import using_simulator
from ...limits import check_launch, current_limits
from ..common._launch import (WarpThreads, check_registers, flat, is_device_array,  # noqa: F401
                             launch)  # (re-export)
from ..common._device import inlined
from ..ptx.mma import round_bf16

PRECISIONS = ("fp16", "bf16", "3xtf32", "tf32")
#: kernel versions: "plain" (version 1: register prefetch, transposed V), "async"
#: (version 2: cp.async + ldmatrix; fp16/bf16 `tensor_core_kernels_async`, 3xTF32/TF32
#: `tensor_core_kernels_tf32_async`) and, for 3xTF32/TF32, "planes" (version 3: K, V split
#: once per block into big/small planes; `tensor_core_kernels_tf32_planes`)
PIPELINES = ("plain", "async", "planes")
#: what `min_blocks` is, for its error message (the forward's and the backward's option)
MIN_BLOCKS_MEANING = "blocks per SM the compiler should fit, its launch bounds; 0 or None: none"
#: the largest head dimension d (checked on an H200: 5 to 128); d is padded with zeros up to
#: a multiple of 16 (q, k: no change to the scores; v: extra output columns, dropped)
MAX_HEAD_DIM = 128


@dataclass(frozen=True)
class TCConfig(WarpThreads):
    """One tensor-core kernel variant.

    precision; warps per block; block_k (Bc); head_dim D (d rounded up to a multiple of
    16); m_tiles: 16-row tiles each warp owns (Br = 16 x m_tiles x warps; 2 lets every
    K/V fragment read from shared memory feed two mma); prefetch: load the next K/V
    block into registers while computing on this one (hides global-memory latency);
    pipeline: "plain" (version 1, `tensor_core_kernels`) or "async" (version 2:
    cp.async double buffering and ldmatrix; `tensor_core_kernels_async` for fp16/bf16,
    `tensor_core_kernels_tf32_async` for 3xTF32/TF32); lazy_rescale (fp16/bf16 version 2
    only; off by default): a row keeps its running max until a score passes it by
    `constants.RESCALE_THRESHOLD` (log2 units), and O is rescaled only when some row of the
    warp moved its max (FlashAttention-4's trick, exact: any reference max cancels). It
    paid on Hopper's wgmma kernel; here it ran at 0.81-0.93x the speed of rescaling every block
    (the branch around O's rescale keeps the compiler from interleaving those multiplies
    with P V's mma: benchmarks/NOTES_tensor_core.md)."""

    precision: str
    warps: int
    block_k: int
    head_dim: int
    simulator: bool
    m_tiles: int = 1
    prefetch: bool = False
    min_blocks: int = 0     # > 0: ask the compiler to fit this many blocks per SM
    pipeline: str = "plain"
    lazy_rescale: bool = False

    @property
    def block_q(self):
        return 16 * self.m_tiles * self.warps

    @property
    def half(self):
        return self.precision in ("fp16", "bf16")

    # shared-memory layout in 32-bit words; strides padded so fragment reads are
    # conflict-free: a warp reads rows g = 0..7 at word offsets t = 0..3 -> banks 4g + t
    @property
    def k_stride(self):
        return (self.head_dim // 2 + 4) if self.half else (self.head_dim + 4)

    @property
    def v_stride(self):          # half: Vt[dim][key pair]; tf32: V[key][dim]
        return (self.block_k // 2 + 4) if self.half else (self.head_dim + 4)

    def offsets(self):
        if self.half:
            k_words = self.block_k * self.k_stride
            v_words = self.head_dim * self.v_stride
            return 0, k_words, k_words + v_words        # K, Vt, end
        k_words = self.block_k * self.k_stride          # one of big / small
        v_words = self.block_k * self.v_stride
        return 0, 2 * k_words, 2 * k_words + 2 * v_words   # K big|small, V big|small, end

    def tf32_async_offsets(self):
        """Version 2's layout for 3xTF32/TF32 (words): Q, then K, V row-major (raw fp32)
        in buffer 0, the buffer size, end."""
        rows = self.block_k * self.k_stride
        k_off = self.block_q * self.k_stride
        return 0, k_off, k_off + rows, 2 * rows, k_off + 4 * rows

    def tf32_planes_offsets(self):
        """Version 3's layout for 3xTF32/TF32 (words): Q, K and V raw (the cp.async staging
        buffer), the planes K big, K small, V big, V small, end."""
        rows = self.block_k * self.k_stride
        at = self.block_q * self.k_stride
        return (0,) + tuple(at + i * rows for i in range(7))

    def async_offsets(self):
        """Version 2's layout (words): K, V row-major in buffer 0, the buffer size, end."""
        rows = self.block_k * self.k_stride
        return 0, rows, 2 * rows, 4 * rows

    @property
    def shared_bytes(self):
        if self.pipeline == "planes":
            return 4 * self.tf32_planes_offsets()[-1]
        if self.pipeline == "async":
            return 4 * (self.async_offsets() if self.half else self.tf32_async_offsets())[-1]
        return 4 * self.offsets()[-1]


def default_tiles(precision: str, d: int,
                  simulator: bool) -> tuple[int, int, int, bool, int, str]:
    """(warps, block_k, m_tiles, prefetch, min_blocks, pipeline) used when the caller gives
    none, on an H200 (`choose_tiles` takes the first of `tile_candidates` that fits another
    GPU's limits).

    On a GPU: the fastest variant per precision and head dim in the H200 sweeps at
    N = 4096, B x H = 32 (benchmarks/NOTES_tensor_core.md): fp16/bf16 take version 2
    ("async": cp.async + ldmatrix), 8 warps of 32 rows (m_tiles = 2) and Bc = 64 up to
    d = 64, 8 warps of 16 rows and Bc = 128 above; the simulator runs version 2 too.
    3xTF32: version 3 ("planes": K, V split once per block), 8 warps, Bc = 64 up to d = 64
    and Bc = 32 above (1.43-1.66x and 1.04-1.08x PyTorch efficient fp32, against version
    2's 1.33-1.51x and 0.95-1.01x in the same run: results/h200_bars_tf32_planes.json).
    One-pass TF32 keeps version 1."""
    if precision in ("fp16", "bf16"):
        if simulator:
            return 1, 16, 1, False, 0, "async"
        return (8, 64, 2, False, 0, "async") if d <= 64 else (8, 128, 1, False, 0, "async")
    if simulator:
        return 1, 16, 1, True, 0, "plain"
    if precision == "3xtf32":
        return (8, 64, 1, False, 0, "planes") if d <= 64 else (8, 32, 1, False, 0, "planes")
    return (8, 32, 1, True, 0, "plain") if d <= 64 else (8, 16, 1, True, 0, "plain")


#: smaller variants, best first, for GPUs with less shared memory per block than an H200
#: (99 KB on an RTX 3090/4090, L4 or A10G; 163 KB on an A100 40GB)
_FALLBACKS = {
    "fp16": [(8, 64, 1, False, 0, "async"), (4, 64, 1, False, 0, "async"),
             (4, 32, 1, False, 0, "async")],
    "3xtf32": [(4, 64, 1, False, 0, "async"), (4, 32, 1, False, 0, "async"),
               (4, 16, 1, False, 0, "async"), (2, 16, 1, False, 0, "async")],
    "tf32": [(4, 16, 1, True, 0, "plain"), (2, 16, 1, True, 0, "plain")],
}
_FALLBACKS["bf16"] = _FALLBACKS["fp16"]


def tile_candidates(precision: str, d: int) -> list:
    """The variants a GPU may run when the caller names none, best first: the H200's
    `default_tiles`, then `_FALLBACKS`; each as default_tiles' tuple."""
    out = [default_tiles(precision, d, False)]
    out += [t for t in _FALLBACKS[precision] if t not in out]
    return out


def choose_tiles(precision: str, d: int, limits) -> tuple:
    """The first of `tile_candidates` whose launch fits `limits` (a `DeviceLimits`) with
    at least 8 warps resident per SM, else the first that fits (`limits.pick_config`);
    LaunchError naming shared memory when none does. Cached: asked on every call."""
    return _choose_tiles(precision, ceil_div(d, 16) * 16, limits)


@lru_cache(maxsize=None)
def _choose_tiles(precision: str, D: int, limits) -> tuple:
    from ...limits import pick_config
    cands = tile_candidates(precision, D)
    keyed = []
    for i, (w, bk, mt, pf, mb, pipe) in enumerate(cands):
        cfg = TCConfig(precision, w, bk, D, False, mt, pf, mb, pipe)
        keyed.append((i, cfg.threads, cfg.shared_bytes))
    return cands[pick_config(keyed, limits, f"tensor_core kernel {precision} d={D}")]


def plan(precision: str, d: int, warps: int, block_k: int,
         simulator: bool | None = None, m_tiles: int = 1,
         prefetch: bool = False, min_blocks: int = 0, pipeline: str = "plain",
         lazy_rescale: bool | None = None) -> TCConfig:
    """Check a configuration for head dim d; return it (ValueError naming the argument).
    lazy_rescale None means off (only fp16/bf16 version 2 has it: slower there, an A/B)."""
    from ..._checks import check_block, check_bool, check_choice, check_whole
    check_choice(precision, "precision", PRECISIONS)
    warps = check_block(warps, "warps")
    block_k = check_block(block_k, "block_k")
    if simulator is None:
        simulator = using_simulator()
    if block_k % 16:
        raise ValueError(f"block_k must be a multiple of 16 for the tensor-core kernel, "
                         f"got {block_k}")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the tensor-core "
                         f"kernel, got d={d}")
    if m_tiles not in (1, 2):
        raise ValueError(f"m_tiles must be 1 or 2, got {m_tiles!r}")
    if m_tiles == 2 and precision not in ("fp16", "bf16"):
        raise ValueError("m_tiles=2 is implemented for fp16/bf16 only")
    check_choice(pipeline, "pipeline", PIPELINES)
    # the recorded variant grids (benchmarks/gpu_tensor_core.py) write prefetch as 0/1;
    # callers' options are held to True/False in `run_heads`
    recorded = type(prefetch) is int and prefetch in (0, 1)
    prefetch = check_bool(bool(prefetch) if recorded else prefetch, "prefetch")
    min_blocks = check_whole(min_blocks, "min_blocks", meaning=MIN_BLOCKS_MEANING)
    if pipeline != "plain" and prefetch:
        raise ValueError(f"prefetch=True is version 1's register prefetch; pipeline="
                         f"{pipeline!r} copies with cp.async instead: give one of them")
    if pipeline == "planes" and precision not in ("3xtf32", "tf32"):
        raise ValueError(f"pipeline='planes' (version 3) is built for 3xtf32 and tf32 only, "
                         f"got precision={precision!r}")
    lazy_ok = precision in ("fp16", "bf16") and pipeline == "async"
    lazy_rescale = check_bool(lazy_rescale, "lazy_rescale", none_ok=True)
    if lazy_rescale and not lazy_ok:
        raise ValueError("lazy_rescale=True is implemented in the fp16/bf16 version 2 kernel "
                         f"(pipeline='async') only, got precision={precision!r}, "
                         f"pipeline={pipeline!r}")
    cfg = TCConfig(precision, warps, block_k, ceil_div(d, 16) * 16, bool(simulator),
                   int(m_tiles), prefetch, min_blocks, pipeline, bool(lazy_rescale))
    check_launch(cfg.threads, cfg.shared_bytes, what="tensor_core kernel")
    return cfg


@lru_cache(maxsize=None)
def make_tensor_core_kernel(precision: str, warps: int, block_k: int, head_dim: int,
                            simulator: bool | None = None, m_tiles: int = 1,
                            prefetch: bool = False, min_blocks: int = 0,
                            pipeline: str = "plain", lazy_rescale: bool | None = None):
    """Compile-time-specialised kernel for one configuration (cached); returns (kernel, cfg).

    Arguments of the kernel: q, k, v (BH, T, W) uint32 words (two fp16/bf16 per word,
    W = D/2) or float32 (W = D); o like q; lse (BH, Tq) float32; Tq, Tk;
    qscale = scale*log2(e) (float32); causal (0/1); off = Tk - Tq.
    Grid (ceil(Tq/Br), BH), 32*warps threads, cfg.shared_bytes of dynamic shared memory.
    """
    from .tensor_core_kernels import make_half_kernel, make_tf32_kernel
    cfg = plan(precision, head_dim, warps, block_k, simulator, m_tiles, prefetch, min_blocks,
               pipeline, lazy_rescale)
    if cfg.pipeline == "async" and cfg.half:
        from .tensor_core_kernels_async import make_half_async_kernel
        kern = make_half_async_kernel(cfg)
    elif cfg.pipeline == "async":
        from .tensor_core_kernels_tf32_async import make_tf32_async_kernel
        kern = make_tf32_async_kernel(cfg, passes=3 if precision == "3xtf32" else 1)
    elif cfg.pipeline == "planes":
        from .tensor_core_kernels_tf32_planes import make_tf32_planes_kernel
        kern = make_tf32_planes_kernel(cfg, passes=3 if precision == "3xtf32" else 1)
    elif cfg.half:
        kern = make_half_kernel(cfg)
    else:
        kern = make_tf32_kernel(cfg, passes=3 if precision == "3xtf32" else 1)
    return kern, cfg


# --------------------------------------------------------------------------------------
# host side
# --------------------------------------------------------------------------------------

_SIGS: dict = {}


def signature(half: bool, pipeline: str = "plain"):
    """The signature every variant of one kind is compiled for (version 2, "async", takes
    k and v flat: 1-D views of the same words)."""
    key = (half, pipeline)
    if key not in _SIGS:
        from numba import int32, types
        el = uint32 if half else float32
        a3 = types.Array(el, 3, "C")
        cp = pipeline in ("async", "planes")      # cp.async versions: flat words
        kv = types.Array(uint32, 1, "C") if cp else a3
        qa = kv if cp and not half else a3   # tf32 v2, v3: Q flat words too
        a2 = types.Array(float32, 2, "C")
        _SIGS[key] = (qa, kv, kv, a3, a2, int32, int32, float32, int32, int32)
    return _SIGS[key]


def check_capability(precision: str, limits=None) -> None:
    """bf16 and tf32 mma need compute capability 8.0+, fp16 m16n8k16 needs 8.0+ too
    (Volta/Turing have other shapes): refuse with the GPU's capability named. `limits`
    (a `flashcourse.limits.DeviceLimits`, e.g. a preset) instead of this GPU."""
    if limits is not None:
        cc, name = tuple(limits.compute_capability), limits.name
    elif using_simulator():
        return
    else:
        dev = cuda.get_current_device()
        cc, name = tuple(dev.compute_capability), dev.name
    if cc < (8, 0):
        raise RuntimeError(
            f"the tensor-core kernel ({precision}) needs a GPU of compute capability 8.0 "
            f"or newer (mma.sync m16n8k16/m16n8k8 with bf16/tf32); this GPU "
            f"({name}) has compute capability {cc[0]}.{cc[1]}")


def launches(d: int, tq: int, tk: int, bh: int, limits, precision: str = "3xtf32"):
    """The launch `run` makes with the default tiles (float32 input: "3xtf32") on a GPU with
    `limits`, as a `flashcourse.limits.Launch`. RuntimeError naming the compute capability
    below 8.0 (`check_capability`), ValueError for d > MAX_HEAD_DIM."""
    from ...limits import Launch
    check_capability(precision, limits)
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the tensor-core "
                         f"kernel, got d={d}")
    warps, block_k, m_tiles, prefetch, min_blocks, pipeline = choose_tiles(precision, d,
                                                                           limits)
    cfg = TCConfig(precision, warps, block_k, ceil_div(d, 16) * 16, False, m_tiles,
                   prefetch, min_blocks, pipeline)
    return (Launch(f"tensor_core kernel {precision} d={d}", (ceil_div(tq, cfg.block_q), bh),
                   cfg.threads, cfg.shared_bytes,
                   config=f"Br={cfg.block_q} Bc={block_k} warps={warps}"),)


def resolve_tiles(precision: str, d: int, simulator: bool, warps=None, block_k=None,
                  m_tiles=None, prefetch=None, min_blocks=None, pipeline=None,
                  lazy_rescale=None, limits=None) -> TCConfig:
    """The variant a call runs: the caller's tiles, the rest from `default_tiles` (given
    `limits`, a GPU's `DeviceLimits`, from `choose_tiles`). A register prefetch asked for
    without a pipeline means version 1 (it is version 1's knob); versions 2 and 3 never
    prefetch into registers."""
    if limits is not None and not simulator:
        dw, dk, dm, dp, db, dpipe = choose_tiles(precision, d, limits)
    else:
        dw, dk, dm, dp, db, dpipe = default_tiles(precision, d, simulator)
    if (warps, block_k, m_tiles, prefetch, min_blocks) != (None,) * 5:
        db = 0                         # a caller's own variant: no launch bound unless asked
    warps = dw if warps is None else warps
    block_k = dk if block_k is None else block_k
    m_tiles = dm if m_tiles is None else m_tiles
    if pipeline is None:
        pipeline = "plain" if prefetch else dpipe
    if prefetch is None:
        prefetch = dp if pipeline == dpipe else pipeline == "plain"
    min_blocks = db if min_blocks is None else min_blocks
    return plan(precision, d, warps, block_k, simulator, m_tiles, prefetch, min_blocks,
                pipeline, lazy_rescale)


def run(qw, kw, vw, ow, lse, tq: int, tk: int, d: int, scale: float, causal: bool,
        precision: str, warps: int | None = None, block_k: int | None = None,
        m_tiles: int | None = None, prefetch: bool | None = None,
        min_blocks: int | None = None, pipeline: str | None = None,
        lazy_rescale: bool | None = None) -> TCConfig:
    """Launch on prepared device arrays: (BH, T, W) uint32 words (fp16/bf16, W = D/2) or
    float32 (W = D) with D = d rounded up to a multiple of 16 (padding columns zero).
    Tiles left as None take `default_tiles`."""
    check_capability(precision)
    sim = using_simulator()             # (resolve_tiles ignores the limits there)
    cfg = resolve_tiles(precision, d, sim, warps, block_k, m_tiles, prefetch, min_blocks,
                        pipeline, lazy_rescale, current_limits())
    kern, cfg = make_tensor_core_kernel(precision, cfg.warps, cfg.block_k, cfg.head_dim, sim,
                                        cfg.m_tiles, cfg.prefetch, cfg.min_blocks,
                                        cfg.pipeline, cfg.lazy_rescale)
    bh = qw.shape[0]
    grid = (ceil_div(tq, cfg.block_q), bh)
    if cfg.pipeline == "async" and cfg.half:
        kw, vw = flat(kw), flat(vw)
    elif cfg.pipeline in ("async", "planes"):     # the fp32 bits as words, flat
        qw, kw, vw = (flat(a).view(np.uint32) for a in (qw, kw, vw))
    args = (qw, kw, vw, ow, lse, np.int32(tq), np.int32(tk), np.float32(scale * LOG2E),
            np.int32(1 if causal else 0), np.int32(tk - tq))
    sig = signature(cfg.half, cfg.pipeline)
    if not sim:
        check_registers("tensor_core kernel", kern.compile(sig), cfg.threads)
    launch(kern, sig, grid, cfg.threads, cfg.shared_bytes, args)
    return cfg


def resources(precision: str, d: int, warps: int, block_k: int, m_tiles: int = 1,
              prefetch: bool = False, min_blocks: int = 0, pipeline: str = "plain",
              lazy_rescale: bool | None = None) -> dict:
    """Compile one variant on the GPU; registers, local bytes, shared bytes per block."""
    cfg = plan(precision, d, warps, block_k, False, m_tiles, prefetch, min_blocks, pipeline,
               lazy_rescale)
    kern, cfg = make_tensor_core_kernel(precision, warps, block_k, cfg.head_dim, False,
                                        m_tiles, prefetch, min_blocks, pipeline,
                                        cfg.lazy_rescale)
    ck = kern.compile(signature(cfg.half, cfg.pipeline))
    return {"regs": int(ck.regs_per_thread), "local_bytes": int(ck.local_mem_per_thread),
            "shared_bytes": cfg.shared_bytes}


def _to_words(x: np.ndarray, precision: str, D: int) -> np.ndarray:
    """(BH, T, d) float array -> (BH, T, D/2) uint32 words of two fp16/bf16 values
    (zero-padded columns d..D-1) or (BH, T, D) float32 for the tf32 kernels."""
    bh, n, d = x.shape
    if precision in ("fp16", "bf16"):
        bits = np.zeros((bh, n, D), np.uint16)                       # (BH, T, D)
        if precision == "fp16":
            bits[..., :d] = x.astype(np.float16).view(np.uint16)
        else:
            bits[..., :d] = (round_bf16(x).view(np.uint32) >> 16).astype(np.uint16)
        return bits.view(np.uint32)                                  # (BH, T, D/2)
    out = np.zeros((bh, n, D), np.float32)
    out[..., :d] = x
    return out


def _from_words(w: np.ndarray, precision: str, d: int) -> np.ndarray:
    """Inverse of `_to_words` for the output: -> (BH, T, d) float32 values."""
    if precision in ("fp16", "bf16"):
        bits = np.ascontiguousarray(w).view(np.uint16)[..., :d]      # (BH, T, d)
        if precision == "fp16":
            return bits.view(np.float16).astype(np.float32)
        return (bits.astype(np.uint32) << 16).view(np.float32)
    return np.ascontiguousarray(w[..., :d])


def is_bfloat16(dtype) -> bool:
    """True for the ml_dtypes bfloat16 numpy dtype (if that package is installed)."""
    return getattr(np.dtype(dtype), "name", "") == "bfloat16"


#: Device arrays of this dtype hold bf16 bit patterns (what numpy, Numba and the CUDA array
#: interface have no bfloat16 type for: e.g. a torch bfloat16 tensor viewed as int16 -> a
#: uint16 Numba view); they run as "bf16" with no conversion, and o comes back as bf16 bits.
BF16_BITS = np.dtype(np.uint16)


def default_precision(dtype) -> str:
    """fp16 for float16 input, bf16 for bfloat16 (ml_dtypes) and for uint16 device arrays
    of bf16 bits (BF16_BITS), 3xtf32 for float32/64."""
    if is_bfloat16(dtype) or np.dtype(dtype) == BF16_BITS:
        return "bf16"
    return "fp16" if np.dtype(dtype) == np.float16 else "3xtf32"


def run_heads(x, out=None, precision: str | None = None, _run=None, **tiles):
    """The registry's entry (`flashcourse.cuda.forward(..., kernel="tensor_core")`).

    x: a `flashcourse._checks.Heads` with device arrays q (BH, Tq, d), k, v (BH, Tk, d)
    of dtype float16, float32, float64 or uint16 (bf16 bit patterns, precision "bf16"
    only). Native cases run without a copy: float16 with precision "fp16", uint16 bf16
    bits with "bf16", float32 with "3xtf32"/"tf32", d a multiple of 16 (the 16-bit
    arrays are viewed as 32-bit words, two values per word). Padding d and rounding
    float32 to bf16 happen on the device (`device_words`, `device_unwords`: small
    conversion kernels, no host round trip). float64, and float32 rounded to fp16 (whose
    range, 65,504, is checked first), convert through the host: fine for learning, not
    for timing. Returns (o (BH, Tq, d) float16 for fp16 from float16 input, uint16 bf16
    bits for bf16 bits, else float32; lse (BH, Tq) float32); `out` may hold those arrays
    already allocated. `_run`: the launch on the prepared words (default `run`; the
    Hopper kernel passes its own, `hopper.run`, and shares everything else).
    """
    from ..._checks import check_bool, check_choice
    for flag in ("prefetch", "lazy_rescale"):      # a caller's options: booleans only
        check_bool(tiles.get(flag), flag, none_ok=True)
    precision = default_precision(x.dtype) if precision is None else precision
    check_choice(precision, "precision", PRECISIONS, none_ok=True)
    if x.d > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the tensor-core "
                         f"kernel (the sizes checked on a GPU), got d={x.d}")
    half = precision in ("fp16", "bf16")
    D = ceil_div(x.d, 16) * 16
    dt = np.dtype(x.dtype)
    if dt == BF16_BITS and precision != "bf16":
        raise ValueError(f"uint16 arrays hold bf16 bit patterns: they run with "
                         f"precision='bf16' (or None), got precision={precision!r}")
    native = D == x.d and ((precision == "fp16" and dt == np.float16)
                           or (precision == "bf16" and dt == BF16_BITS)
                           or (not half and dt == np.float32))
    o_dtype = (np.float16 if (precision == "fp16" and dt == np.float16)
               else BF16_BITS if dt == BF16_BITS else np.float32)
    on_device = device_convertible(dt, precision)
    if native:
        qw, kw, vw = ((a.view(np.uint32) if half else a) for a in (x.q, x.k, x.v))
    elif on_device:                    # padding d, float32 -> bf16: on the device
        qw, kw, vw = (device_words(a, precision, D) for a in (x.q, x.k, x.v))
    else:                              # float64, or float32 -> fp16 (range check): host
        host = [a.copy_to_host().astype(np.float32) for a in (x.q, x.k, x.v)]
        if precision == "fp16":
            _check_fp16_range(host)
        qw, kw, vw = (cuda.to_device(_to_words(a, precision, D)) for a in host)
    if out is None:
        out = (cuda.device_array((x.bh, x.tq, x.d), o_dtype),         # o (BH, Tq, d)
               cuda.device_array((x.bh, x.tq), np.float32))            # lse (BH, Tq)
    o, lse = out
    direct = native and np.dtype(o.dtype) == np.dtype(o_dtype)
    ow = (o.view(np.uint32) if half else o) if direct else cuda.device_array_like(qw)
    (_run or run)(qw, kw, vw, ow, lse, x.tq, x.tk, x.d, x.scale, x.causal, precision,
                  **tiles)
    if not direct:
        if on_device and np.dtype(o.dtype) == np.dtype(o_dtype):
            device_unwords(ow, o, precision, x.d)
        else:
            o.copy_to_device(_from_words(ow.copy_to_host(), precision, x.d).astype(o.dtype))
    return o, lse


# ---------------------------------------------------------------------------------------
# On-device conversion to the kernels' word layout (no host round trip)
# ---------------------------------------------------------------------------------------

#: Threads per block of the conversion kernels.
CONVERT_THREADS = 256


def device_convertible(dtype, precision: str) -> bool:
    """True when `device_words` can prepare `dtype` input for `precision` on the device:
    float16 for fp16 (padding d), float32 for bf16, 3xtf32 and tf32 (rounding, padding).
    float32 -> fp16 goes through the host, which checks float16's range (65,504) first."""
    dt = np.dtype(dtype)
    return ((precision == "fp16" and dt == np.float16) or (precision == "bf16" and dt == BF16_BITS)
            or (precision != "fp16" and dt == np.float32))


@lru_cache(maxsize=None)
def bf16_bits_device():
    """A device function: float32 bits (uint32) -> the bf16 bits (in a uint32) of the value
    rounded half to even; NaN stays NaN (quietened)."""
    @cuda.jit(device=True)
    def bf16_bits(u):
        if (u & uint32(0x7FFFFFFF)) > uint32(0x7F800000):
            return (u >> uint32(16)) | uint32(0x40)
        return (u + uint32(0x7FFF) + ((u >> uint32(16)) & uint32(1))) >> uint32(16)
    return bf16_bits


@lru_cache(maxsize=None)
def _convert_kernels():
    """(bf16 rounding, bf16 unpacking, column copy): element-wise kernels over (rows, m)
    arrays, src (rows, n_src) -> dst (rows, n_dst); columns of dst past n_src are zero."""
    bf16_bits = bf16_bits_device()

    def elementwise(name, element):
        # a kernel (src, dst, rows, n_src, n_dst): one thread per element (r, c) of dst
        def kernel(src, dst, rows, n_src, n_dst):
            i = cuda.grid(1)
            if i < rows * n_dst:
                r = i // n_dst
                element(src, dst, r, i - r * n_dst, n_src)
        kernel.__name__ = name
        return cuda.jit(kernel)

    @inlined
    def to_bf16(src, dst, r, c, n_src):
        # src uint32 = float32 bits; dst uint16 bf16 bits, rounded half to even
        b = uint32(0)
        if c < n_src:
            b = bf16_bits(src[r, c])
        dst[r, c] = b

    @inlined
    def from_bf16(src, dst, r, c, n_src):
        # src uint16 bf16 bits; dst uint32 = float32 bits (n_dst <= n_src)
        dst[r, c] = uint32(src[r, c]) << uint32(16)

    @inlined
    def copy(src, dst, r, c, n_src):
        # the same element type: pads with zeros (n_dst > n_src) or drops columns
        if c < n_src:
            dst[r, c] = src[r, c]
        else:
            dst[r, c] = 0

    return (elementwise("words_bf16", to_bf16), elementwise("unwords_bf16", from_bf16),
            elementwise("copy_columns", copy))


def _convert(kernel, src, dst) -> None:
    """Launch one of `_convert_kernels` on 2-D src (rows, n_src) and dst (rows, n_dst)."""
    rows, n_src = (int(n) for n in src.shape)
    n_dst = int(dst.shape[1])
    grid = max(1, ceil_div(rows * n_dst, CONVERT_THREADS))
    launch(kernel, None, grid, CONVERT_THREADS, 0,
           (src, dst, np.int32(rows), np.int32(n_src), np.int32(n_dst)))


def _bits(a, precision: str, cols: int):
    """`a` as (rows, cols) elements of the words' type: 16-bit values for fp16/bf16,
    float32 for the tf32 kernels (a view, no copy)."""
    v = a.view(np.uint16) if precision in ("fp16", "bf16") else a
    return v.reshape(int(v.size) // cols, cols)


def device_words(a, precision: str, D: int, alloc=None):
    """(BH, T, d) device array -> the kernels' (BH, T, W) words on the device (fp16 or
    bf16: W = D/2 uint32 of two values; tf32: W = D float32), columns d..D-1 zero.
    alloc(shape, dtype) makes the output array (default `cuda.device_array`)."""
    words_bf16, _, copy_columns = _convert_kernels()
    bh, n, d = (int(s) for s in a.shape)
    half = precision in ("fp16", "bf16")
    out = (alloc or cuda.device_array)((bh, n, D // 2 if half else D),
                                      np.uint32 if half else np.float32)
    if precision == "bf16" and np.dtype(a.dtype) == np.float32:
        _convert(words_bf16, a.view(np.uint32).reshape(bh * n, d), _bits(out, precision, D))
    else:                              # the same 16-bit (or fp32) values, padded
        _convert(copy_columns, _bits(a, precision, d), _bits(out, precision, D))
    return out


def words_for_kernel(a, precision: str, D: int, alloc=None):
    """(BH, T, d) float16/float32 (or bf16 bits) device array -> (BH, T, D/2) uint32
    words (a view when no conversion or padding is needed, else `device_words`); for
    "3xtf32" (BH, T, D) uint32 views of the fp32 bits, columns d..D-1 zero."""
    native = ((precision == "fp16" and np.dtype(a.dtype) == np.float16)
              or (precision == "bf16" and np.dtype(a.dtype) == BF16_BITS)
              or (precision == "3xtf32" and np.dtype(a.dtype) == np.float32))
    if native and int(a.shape[2]) == D:
        return a.view(np.uint32)
    w = device_words(a, precision, D, alloc=alloc)
    return w.view(np.uint32) if precision == "3xtf32" else w


def device_unwords(w, o, precision: str, d: int) -> None:
    """Inverse of `device_words` for the output, into o (BH, Tq, d): float32 for bf16 and
    the tf32 kernels (or uint16 bf16 bits), float16 for fp16."""
    _, unwords_bf16, copy_columns = _convert_kernels()
    half = precision in ("fp16", "bf16")
    D = 2 * int(w.shape[2]) if half else int(w.shape[2])
    if precision == "bf16" and np.dtype(o.dtype) == np.float32:
        _convert(unwords_bf16, _bits(w, precision, D),
                 o.view(np.uint32).reshape(int(o.size) // d, d))
    else:
        _convert(copy_columns, _bits(w, precision, D), _bits(o, precision, d))


def _check_fp16_range(arrays) -> None:
    for name, a in zip("qkv", arrays):
        fin = np.abs(a[np.isfinite(a)])
        big = float(fin.max()) if fin.size else 0.0
        if big > 65504.0:
            raise ValueError(f"{name} has |values| up to {big:.3g}, beyond float16's "
                             f"largest 65504: use precision='bf16' or '3xtf32'")


def forward(q, k, v, *, causal: bool = False, scale: float | None = None,
            precision: str | None = None, allow_nonfinite: bool = False,
            check: bool = False, **tiles):
    """`flashcourse.cuda.forward(q, k, v, kernel="tensor_core", ...)`, which also takes
    bfloat16 arrays of the ml_dtypes package (run as "bf16", returned as bfloat16).

    q (..., Tq, d), k and v (..., Tk, d): float16 (-> fp16 mma), float32 or float64
    (-> 3xTF32), numpy or device arrays. `precision` overrides that choice: "fp16" or
    "bf16" round float32/64 inputs to 16 bits first (o comes back in the input dtype,
    holding 16-bit values), "3xtf32", or "tf32" (one pass, ~1e-3). Tiles (warps,
    block_k, m_tiles, prefetch, min_blocks) pick the variant (None: `default_tiles`);
    check: check device-array results on the device, as `flashcourse.cuda.forward` says.
    Returns o (..., Tq, d) in the input dtype and lse (..., Tq) (float32; float64 for
    float64 input); a row with no visible key gives o = 0, lse = -inf.
    """
    from .. import forward as cuda_forward
    bf16_in = isinstance(q, np.ndarray) and is_bfloat16(q.dtype)
    if bf16_in:
        if not all(isinstance(a, np.ndarray) and is_bfloat16(a.dtype) for a in (k, v)):
            raise TypeError("q, k and v must share one dtype (q is bfloat16)")
        q, k, v = (a.astype(np.float32) for a in (q, k, v))
        precision = "bf16" if precision is None else precision
    o, lse = cuda_forward(q, k, v, kernel="tensor_core", causal=causal, scale=scale,
                          allow_nonfinite=allow_nonfinite, check=check, precision=precision,
                          **tiles)
    return (o.astype(_bfloat16_dtype()) if bf16_in else o), lse


def _bfloat16_dtype():
    import ml_dtypes   # only reached with bfloat16 input, which needs ml_dtypes anyway
    return ml_dtypes.bfloat16
