"""hopper.host: the host side of the Hopper (wgmma) forward, `forward(..., kernel="hopper")`.

The kernel, its shared-memory layout and what limits it are in `hopper_kernels.py`; the
instructions in `wgmma.py`; a numpy model of the descriptors and swizzles in
`wgmma_layouts.py` (what notebook 12 draws and the CPU tests check).

    from flashcourse.cuda import forward
    o, lse = forward(q16, k16, v16, kernel="hopper", causal=True)     # float16 in/out
    o, lse = forward(qb, kb, vb, kernel="hopper")      # uint16 device arrays: bf16 bits
    o, lse = forward(q, k, v, kernel="hopper", precision="bf16")      # float32 in/out
    python benchmarks/gpu_hopper.py --check --bench                   # on an H100/H200

`wgmma` exists on compute capability 9.0 only (sm_90a: H100, H200, GH200): every other
GPU gets a clear refusal naming what it lacks; the portable tensor-core kernel
(`kernel="tensor_core"`, mma.sync) runs everywhere from 8.0. Numba's CUDA simulator runs
the kernel through the twins of the instructions (`ptx/wgmma.py`): tiny sizes, slowly,
the same arithmetic (the tests check it against float64 there).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...constants import LOG2E
from ...geometry import ceil_div
from ...gpu import using_simulator
from ...limits import check_launch
from ..common._launch import check_registers, flat, launch

PRECISIONS = ("fp16", "bf16")
#: head dims (d is padded with zeros up to a multiple of 16; the kernel's tiles are d wide)
MAX_HEAD_DIM = 128
#: the only compute capability with wgmma (PTX's sm_90a target)
CAPABILITY = (9, 0)


#: threads of the producer of the warp-specialised versions: one warp for version 3, a
#: warpgroup (which hands its registers to the consumers by setmaxnreg) for versions 4-5
PRODUCER_THREADS = {"specialised": 32, "producer": 128, "pingpong": 128}
#: the default of `lazy_rescale` (`constants.RESCALE_THRESHOLD`): a row's running max,
#: and O's rescale, change only when a score passes the max by 2^8 (FlashAttention-4)
LAZY_RESCALE = True


@dataclass(frozen=True)
class HopperConfig:
    """One variant: precision, warpgroups per block (Br = 64 x warpgroups), block_k (Bc,
    the N of S = Q K^T's wgmma), head_dim D (d rounded up to a multiple of 16),
    negative_scale (compiled for scale < 0: the scores are negated once, see
    `tensor_core_kernels`' SCALE note), v_swap (probe: the V descriptor's two strides
    exchanged), pipeline ("serial": version 1, "overlap": version 2, "specialised":
    version 3, "producer": version 4, "pingpong": version 5; `hopper_kernels`),
    skip_masked (version 2: a warpgroup skips the products of the key blocks masked for
    all its rows: past its rows' causal diagonal, or all of them when its rows are past
    Tq; False runs them, as versions 1 and 3-5 do)."""

    precision: str
    warpgroups: int
    block_k: int
    head_dim: int
    negative_scale: bool = False
    v_swap: bool = False
    pipeline: str = "overlap"
    skip_masked: bool = True
    lazy_rescale: bool = LAZY_RESCALE

    @property
    def block_q(self):
        return 64 * self.warpgroups

    @property
    def threads(self):
        """128 per warpgroup, + the producer: 32 threads for version 3 ("specialised"), a
        warpgroup of 128 for version 4 ("producer")."""
        return 128 * self.warpgroups + self.producer_threads

    @property
    def producer_threads(self):
        return PRODUCER_THREADS.get(self.pipeline, 0)

    def setmaxnreg(self):
        """Versions 4-5's registers per thread after `setmaxnreg` (producer, consumers): the
        producer warpgroup gives most of its registers to the consumers (multiples of 8).
        They move within the block's own pool, the threads x registers per thread it was
        launched with (PTX ISA, setmaxnreg: one pool per CTA; an increase waits until the pool
        has them), not the SM's 65,536: 128 x (wg x consumers + producer) must not exceed it
        (2 consumer warpgroups: 128 x 72 + 256 x 216 = 64,512 = 384 x 168 exactly)."""
        producer = 72 if self.warpgroups <= 2 else 40
        return producer, min(240, (512 - producer) // self.warpgroups // 8 * 8)

    @property
    def stages(self):
        """K/V buffers (each one K_j and one V_j): 2, or 3 for version 3."""
        return 3 if self.producer_threads else 2

    def offsets(self):
        """32-bit word offsets: Q, K and V of buffer 0, the buffer size, the end of the
        buffers (version 3 keeps 2 x stages mbarriers of 2 words there)."""
        q_words = self.block_q * self.head_dim // 2
        tile = self.block_k * self.head_dim // 2
        return 0, q_words, q_words + tile, 2 * tile, q_words + 2 * self.stages * tile

    def kmajor_lbo_sbo(self):
        """Q and K tiles (K-major, no swizzle): bytes between core matrices along K (LBO)
        and along M/N (SBO)."""
        return 128, 16 * self.head_dim

    def v_lbo_sbo(self):
        """V tile (MN-major, no swizzle): LBO, SBO in bytes."""
        k_step, n_step = 128, 16 * self.block_k
        return (n_step, k_step) if self.v_swap else (k_step, n_step)

    @property
    def shared_bytes(self):
        barriers = 4 * self.stages if self.producer_threads else 0
        return 4 * (self.offsets()[-1] + barriers)


def default_tiles(d: int) -> tuple[int, int, str]:
    """(warpgroups, block_k, pipeline) when the caller gives none: the fastest bare kernel
    at N = 4096, B x H = 32 on an H200 (benchmarks/NOTES_hopper.md)."""
    return (3, 80, "overlap") if d > 64 else (4, 64, "overlap")


def plan(precision: str, d: int, warpgroups: int, block_k: int, negative_scale: bool = False,
         v_swap: bool = False, pipeline: str = "overlap",
         skip_masked: bool = True, lazy_rescale: bool = LAZY_RESCALE) -> HopperConfig:
    """Check a configuration for head dim d (ValueError naming the argument)."""
    from ..._checks import check_block, check_bool
    from .hopper_kernels import PIPELINES
    negative_scale, v_swap, skip_masked, lazy_rescale = (
        check_bool(value, name) for value, name in (
            (negative_scale, "negative_scale"), (v_swap, "v_swap"),
            (skip_masked, "skip_masked"), (lazy_rescale, "lazy_rescale")))
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline must be one of {PIPELINES}, got {pipeline!r}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} for the hopper kernel, "
                         f"got {precision!r}")
    if warpgroups not in (1, 2, 3, 4) or (pipeline in PRODUCER_THREADS and warpgroups > 3) \
            or (pipeline == "pingpong" and warpgroups < 2):
        raise ValueError(f"warpgroups must be 1, 2, 3 or 4 (at most 3 with pipeline="
                         f"'specialised', 'producer' or 'pingpong'; at least 2 with "
                         f"'pingpong'), got {warpgroups!r}")
    block_k = check_block(block_k, "block_k")
    if block_k % 16 or block_k > 256:
        raise ValueError(f"block_k must be a multiple of 16 up to 256 for the hopper kernel, "
                         f"got {block_k}")
    check_head_dim(d)
    cfg = HopperConfig(precision, int(warpgroups), block_k, ceil_div(d, 16) * 16,
                       negative_scale, v_swap, pipeline, skip_masked, lazy_rescale)
    check_launch(cfg.threads, cfg.shared_bytes, what="hopper kernel")
    return cfg


def check_head_dim(d: int) -> None:
    """ValueError naming d above MAX_HEAD_DIM (the sizes checked on a GPU)."""
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the hopper kernel, "
                         f"got d={d}")


def check_capability(limits=None) -> None:
    """RuntimeError unless the GPU (or `limits`, a `flashcourse.limits.DeviceLimits`) has
    compute capability 9.0; Numba's CUDA simulator passes (it runs wgmma's twins)."""
    if limits is not None:
        cc, name = tuple(limits.compute_capability), limits.name
    elif using_simulator():
        return                         # the twins of ptx/wgmma.py run it (slowly)
    else:
        from numba import cuda
        dev = cuda.get_current_device()
        cc, name = tuple(dev.compute_capability), dev.name
    if cc != CAPABILITY:
        raise RuntimeError(
            f"the hopper kernel needs a GPU of compute capability 9.0 (wgmma, sm_90a: "
            f"H100/H200); this GPU ({name}) has compute capability {cc[0]}.{cc[1]}: use "
            f"kernel='tensor_core' (mma.sync, 8.0 and newer)")


@lru_cache(maxsize=None)
def make_hopper_kernel(cfg: HopperConfig):
    """The kernel of one (checked) configuration, compiled on first use and cached."""
    from .hopper_kernels import make_wgmma_kernel
    return make_wgmma_kernel(cfg)


_SIG: dict = {}


def signature(pipeline: str = "overlap"):
    """The kernel's argument types. Version 2 ("overlap") also takes its 1-D grid's and
    the tail split's (`tail_split`): query blocks per head, heads, whole units, pieces per
    split unit, and the float32 workspaces of the pieces' o and lse."""
    if not _SIG:
        from numba import float32, int32, types, uint32
        w1 = types.Array(uint32, 1, "C")
        f1 = types.Array(float32, 1, "C")
        base = (w1, w1, w1, types.Array(uint32, 3, "C"), types.Array(float32, 2, "C"),
                int32, int32, float32, int32, int32)
        _SIG["base"] = base
        _SIG["overlap"] = base + (int32, int32, int32, int32, int32, f1, f1)
    return _SIG["overlap" if pipeline == "overlap" else "base"]


def resolve(precision: str, d: int, scale: float, warpgroups=None, block_k=None,
            pipeline=None, v_swap=False, skip_masked=True,
            lazy_rescale=LAZY_RESCALE) -> HopperConfig:
    """The variant a call runs: the caller's choices, the rest from `default_tiles`."""
    dw, dk, dp = default_tiles(d)
    return plan(precision, d, dw if warpgroups is None else warpgroups,
                dk if block_k is None else block_k, scale < 0, v_swap,
                dp if pipeline is None else pipeline, skip_masked, lazy_rescale)


def resident_blocks(cfg: HopperConfig, regs_per_thread: int, limits=None) -> int:
    """Blocks of this configuration resident per SM (`limits.occupancy`): 1 for the
    default tiles, whose warpgroups fill the register file."""
    from ...limits import current_limits, occupancy
    lim = current_limits() if limits is None else limits
    return occupancy(cfg.threads, cfg.shared_bytes, lim,
                     regs_per_thread=regs_per_thread).blocks_per_sm


_EMPTY: list = []


def _workspace(floats: int):
    from numba import cuda
    if floats == 1:                      # no split: one shared placeholder per process
        if not _EMPTY:
            _EMPTY.append(cuda.device_array(1, np.float32))
        return _EMPTY[0]
    return cuda.device_array(floats, np.float32)


def prepared(qw, kw, vw, ow, lse, tq: int, tk: int, d: int, scale: float, causal: bool,
             precision: str, warpgroups=None, block_k=None, pipeline=None, v_swap=False,
             splits=None, skip_masked=True, order="lpt", lazy_rescale=LAZY_RESCALE):
    """(launches, cfg): the launches of one call, compiled and checked, each a tuple
    (kernel, signature, grid, threads, shared bytes, args) for `_launch.launch`, in
    order: the kernel, then (version 2 with a split tail, `tail_split`) the combine.
    splits: None chooses (`tail_split.plan`), 1 never splits, s > 1 splits the last
    wave's units into s key ranges (version 2 only). order: the causal units' order,
    "lpt" (longest first over all heads) or "head-major" (`tail_split.unit`)."""
    from . import tail_split
    check_capability()
    if order not in tail_split.ORDERS:
        raise ValueError(f"order must be one of {tail_split.ORDERS}, got {order!r}")
    cfg = resolve(precision, d, scale, warpgroups, block_k, pipeline, v_swap, skip_masked,
                  lazy_rescale)
    if splits not in (None, 1) and cfg.pipeline != "overlap":
        raise ValueError(f"splits applies to pipeline='overlap' only (version 2); got "
                         f"splits={splits!r} with pipeline={cfg.pipeline!r}")
    kern = make_hopper_kernel(cfg)
    sig = signature(cfg.pipeline)
    sim = using_simulator()
    if not sim:
        ck = kern.compile(sig)
        check_registers("hopper kernel", ck, cfg.threads)
    nqb, bh = ceil_div(tq, cfg.block_q), qw.shape[0]
    args = (flat(qw), flat(kw), flat(vw), ow, lse, np.int32(tq), np.int32(tk),
            np.float32(scale * LOG2E), np.int32(1 if causal else 0), np.int32(tk - tq))
    if cfg.pipeline != "overlap":
        return [(kern, sig, (nqb, bh), cfg.threads, cfg.shared_bytes, args)], cfg
    from ...limits import current_limits
    regs = launch_bound_registers(cfg.threads, current_limits()) if sim else \
        int(ck.regs_per_thread)
    slots = current_limits().sm_count * resident_blocks(cfg, regs)
    sp = tail_split.plan(nqb * bh, ceil_div(tk, cfg.block_k), slots, causal, splits)
    part_o, part_lse = (_workspace(n) for n in
                        tail_split.workspace_shape(sp, cfg.block_q, cfg.head_dim))
    lpt = np.int32(order == "lpt")
    args += (np.int32(nqb), np.int32(bh), lpt, np.int32(sp.main), np.int32(sp.splits), part_o,
             part_lse)
    steps = [(kern, sig, sp.blocks, cfg.threads, cfg.shared_bytes, args)]
    if sp.tail:
        comb = tail_split.make_combine_kernel(cfg.precision, cfg.head_dim, cfg.block_q)
        steps.append((comb, None, sp.tail * cfg.block_q,
                      tail_split.combine_threads(cfg.head_dim), 0,
                      (part_o, part_lse, ow, lse, np.int32(tq), np.int32(nqb), np.int32(bh),
                       lpt, np.int32(sp.main), np.int32(sp.splits),
                       np.int32(1 if causal else 0))))
    return steps, cfg


def run(qw, kw, vw, ow, lse, tq: int, tk: int, d: int, scale: float, causal: bool,
        precision: str, warpgroups: int | None = None, block_k: int | None = None,
        pipeline: str | None = None, v_swap: bool = False, splits: int | None = None,
        skip_masked: bool = True, order: str = "lpt",
        lazy_rescale: bool = LAZY_RESCALE) -> HopperConfig:
    """Launch on prepared device arrays: (BH, T, D/2) uint32 words of two fp16/bf16 values,
    D = d rounded up to a multiple of 16 (padding columns zero); lse (BH, Tq) float32."""
    steps, cfg = prepared(qw, kw, vw, ow, lse, tq, tk, d, scale, causal, precision,
                          warpgroups, block_k, pipeline, v_swap, splits, skip_masked, order,
                          lazy_rescale)
    for step in steps:
        launch(*step)
    return cfg


def resources(precision: str, d: int, warpgroups: int, block_k: int,
              pipeline: str = "overlap") -> dict:
    """Compile one variant on the GPU: registers, local bytes, shared bytes per block."""
    cfg = plan(precision, d, warpgroups, block_k, pipeline=pipeline)
    ck = make_hopper_kernel(cfg).compile(signature(pipeline))
    return {"regs": int(ck.regs_per_thread), "local_bytes": int(ck.local_mem_per_thread),
            "shared_bytes": cfg.shared_bytes}


def copy_plan(cfg: HopperConfig, tile: str) -> np.ndarray:
    """A numpy model of the kernel's loaders (`hopper_kernels._Parts`): (copies, 4) int64
    rows [thread, row, 16-byte chunk, shared byte offset inside the tile] of the `cp.async`
    copies one block makes for tile "q" (Br rows), "k" or "v" (Bc rows). Copy e goes to
    thread e mod threads (versions 3 and 4: K, V to the producer, Q to each row's own
    warpgroup); e's low 3 bits pick the row inside a core matrix, so 8 threads in a row
    fill one core matrix's 128 contiguous bytes."""
    if tile not in ("q", "k", "v"):
        raise ValueError(f"tile must be 'q', 'k' or 'v', got {tile!r}")
    rows = cfg.block_q if tile == "q" else cfg.block_k
    ch = cfg.head_dim // 8
    e = np.arange(rows * ch, dtype=np.int64)
    ri, cc, rg = e % 8, (e // 8) % ch, e // (8 * ch)
    r = rg * 8 + ri
    off = (cc * cfg.block_k + r) * 16 if tile == "v" else ((rg * ch + cc) * 8 + ri) * 16
    consumers = 128 * cfg.warpgroups
    if not cfg.producer_threads:
        thread = e % consumers
    elif tile == "q":                  # each warpgroup copies its own 64 rows
        per_wg = 64 * ch
        thread = 128 * (e // per_wg) + (e % per_wg) % 128
    else:                              # the producer, after the consumers
        thread = consumers + e % cfg.producer_threads
    return np.stack([thread, r, cc, off], axis=1)


def default_precision(dtype) -> str:
    """fp16 for float16 input; bf16 for uint16 bf16 bit arrays and for float32 (bf16 keeps
    float32's range; fp16 overflows above 65,504)."""
    return "fp16" if np.dtype(dtype) == np.float16 else "bf16"


def run_heads(x, out=None, precision: str | None = None, **tiles):
    """The registry's entry: as `tensor_core.run_heads` (device arrays in and out, the
    same conversions), on the wgmma kernel. float32 input defaults to bf16."""
    from ..tensor_core import host as tensor_core
    precision = default_precision(x.dtype) if precision is None else precision
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} or None for the hopper "
                         f"kernel, got {precision!r}")
    check_head_dim(x.d)
    check_capability()
    return tensor_core.run_heads(x, out, precision, _run=run, **tiles)


def launches(d: int, tq: int, tk: int, bh: int, limits):
    """The launch `run` makes with the default tiles on a GPU with `limits`."""
    from ...limits import Launch
    check_capability(limits)
    check_head_dim(d)
    wg, bk, pipe = default_tiles(d)
    cfg = HopperConfig("fp16", wg, bk, ceil_div(d, 16) * 16, pipeline=pipe)
    return (Launch(f"hopper kernel d={d}", (ceil_div(tq, cfg.block_q), bh), cfg.threads,
                   cfg.shared_bytes, regs_per_thread=launch_bound_registers(cfg.threads, limits),
                   config=f"Br={cfg.block_q} Bc={bk} warpgroups={wg} {pipe}"),)


def launch_bound_registers(threads: int, limits) -> int:
    """Registers per thread the compiler may use under the kernel's launch bound (threads,
    1 block): the register file split over the block's warps, in 256-register units per warp
    (384 threads: 168; 512: 128), at most 255."""
    warps = ceil_div(threads, 32)
    return min(255, limits.max_regs_per_block // warps // 256 * 256 // 32)
