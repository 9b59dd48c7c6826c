"""Tuning the flash kernel: what fits on chip, how many blocks stay resident, how fast it runs.

A launch configuration of the flash kernel (`flashcourse.cuda.flash`) is

    block_q  Br   query rows per tile (positions)
    block_k  Bc   key rows per tile (positions)
    threads       threads per block
    tm            query rows per thread: each thread owns a TM x TN micro-tile of the
                  (Br, Bc) score tile and a TM x TD micro-tile of the output, in registers

and a GPU can run it only if it fits the device's own limits (all read from the
device when there is one, `DeviceLimits.from_device()`):

    shared memory per block   48 KiB by default; Hopper lets a kernel opt in to
                              227 KiB (`set_max_dynamic_shared_bytes`)
    registers per thread      <= 255, and threads x registers <= 65,536 per block
    threads per block         <= 1,024

`check_launch` raises `LaunchError` naming the limit, the amount asked and the amount
available. Occupancy = how many blocks of this kernel one streaming multiprocessor (SM)
keeps resident at once. Each SM has a register file (65,536 32-bit registers), a shared
memory pool (228 KiB on Hopper) and at most 64 warps (2,048 threads) and 32 blocks.
The smallest of the four quotients is the number of resident blocks, and the resource
that gives it is the *limiter* (`occupancy`). More resident blocks hide memory latency;
bigger tiles re-read K and V fewer times (`flashcourse.traffic`), but need more shared
memory and registers, so fewer of them fit: tile shape trades traffic against residency.

`enumerate_configs` lists the launchable configurations; `sweep` times them (warm-up,
CUDA events, median of repeats, progress bar) and `best_by_head_dim` picks the tuned
default per head dimension (never slower than the untuned one in the same run). The
H200 results are in `benchmarks/results/h200_tuning_sweep.json` (`load_sweep`,
`plot_sweep_heatmaps`), and `tuned_config(head_dim)` reads the pick back.
`tuning_widget()` lets a learner choose tile sizes and see all of this; without a GPU
it times `flashcourse.cpu.forward` for real and shows the recorded H200 sweep.
`parse_ncu_csv`, `split_by_marker` and `sum_metrics` read Nsight Compute's CSV for the
measured-traffic study (`benchmarks/ncu_traffic.py`); `load_traffic`,
`print_traffic_table`, `plot_traffic_bars` and `plot_dram_vs_kv` show its results.

Sweep JSON ("flashcourse.tuning.sweep/1"):

    schema, environment {gpu, driver, cuda, numba, numba_cuda, numpy, torch, python, date},
    limits {DeviceLimits fields}, problem {batch_heads, dtype, causal, warmup, repeats, ...},
    default {"64": {block_q, block_k, threads, tm}, ...}    the untuned default per d
    rows, rechecks [{head_dim, seq_len, block_q, block_k, threads, tm, micro_q, micro_k,
           micro_d, shared_bytes, regs_per_thread, local_bytes, blocks_per_sm, limiter,
           median_ms, spread_ms, tflops, rel_err, status ("ok"|"error"|"skipped"), error}]
    best {"64": {block_q, block_k, threads, tm, tflops {N: x}, default_tflops {N: x},
                 geomean_tflops, speedup}}
    rejected {"64": [{config, reason}]}

Traffic JSON ("flashcourse.tuning.ncu_traffic/1"):

    schema, environment (+ ncu version), limits, metrics, ncu_flags, dtype,
    runs [{name, impl, seq_len, head_dim, heads, block_q, block_k, threads, tm,
           cache_control ("all" = flushed | "none"), kernels, n_kernels, dram_read,
           dram_write, dram_bytes, l2_bytes, time_ms, model_bytes, kv_bytes,
           dram_ratio, l2_ratio, dram_reason, l2_reason,
           l2_aware_dram_bytes, l2_aware_ratio, resident_blocks, waves_per_head}]
"""

from __future__ import annotations

import html
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from ._checks import check_block

ROOT = Path(__file__).resolve().parents[1]
#: Where recorded results live; FLASHCOURSE_RESULTS overrides it (tests, other GPUs).
RESULTS_DIR = Path(os.environ.get("FLASHCOURSE_RESULTS", ROOT / "benchmarks" / "results"))
SWEEP_FILE = RESULTS_DIR / "h200_tuning_sweep.json"
TRAFFIC_FILE = RESULTS_DIR / "h200_ncu_traffic.json"
SWEEP_SCHEMA = "flashcourse.tuning.sweep/1"
TRAFFIC_SCHEMA = "flashcourse.tuning.ncu_traffic/1"

#: Bytes per fp32 element: the course's CUDA kernels compute and store fp32.
FP32 = 4


# ---------------------------------------------------------------------------
# Device limits
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class DeviceLimits:
    """The per-block and per-SM resources of a GPU that decide whether, and how
    many copies of, a kernel launch fit (units in each field name or comment)."""

    name: str
    compute_capability: tuple = (9, 0)
    sm_count: int = 132
    warp_size: int = 32                       # threads
    max_threads_per_block: int = 1024         # threads
    max_threads_per_sm: int = 2048            # threads (64 warps)
    max_blocks_per_sm: int = 32               # blocks
    regs_per_sm: int = 65536                  # 32-bit registers
    max_regs_per_block: int = 65536           # 32-bit registers
    max_regs_per_thread: int = 255            # 32-bit registers
    reg_alloc_unit: int = 256                 # registers, granularity per warp
    smem_per_sm: int = 233472                 # bytes (228 KiB)
    smem_per_block: int = 49152               # bytes without opt-in (48 KiB)
    smem_per_block_optin: int = 232448        # bytes with opt-in (227 KiB)
    smem_reserved_per_block: int = 1024       # bytes the system keeps per block
    smem_alloc_unit: int = 128                # bytes
    l2_bytes: int = 52428800                  # bytes

    @classmethod
    def from_device(cls, device=None) -> "DeviceLimits":
        """Read the limits of the current (or given) Numba CUDA device."""
        from numba import cuda
        dev = cuda.get_current_device() if device is None else device
        name = getattr(dev, "name", "simulated device (H100/H200 limits assumed)")
        name = name.decode() if isinstance(name, bytes) else str(name)

        def attr(key, default):
            try:
                return int(getattr(dev, key))
            except Exception:  # attribute missing in this driver/binding
                return default

        base = cls(name=name)
        return cls(
            name=name,
            compute_capability=tuple(getattr(dev, "compute_capability", (9, 0))),
            sm_count=attr("MULTIPROCESSOR_COUNT", base.sm_count),
            warp_size=attr("WARP_SIZE", base.warp_size),
            max_threads_per_block=attr("MAX_THREADS_PER_BLOCK", base.max_threads_per_block),
            max_threads_per_sm=attr("MAX_THREADS_PER_MULTIPROCESSOR", base.max_threads_per_sm),
            max_blocks_per_sm=attr("MAX_BLOCKS_PER_MULTIPROCESSOR", base.max_blocks_per_sm),
            regs_per_sm=attr("MAX_REGISTERS_PER_MULTIPROCESSOR", base.regs_per_sm),
            max_regs_per_block=attr("MAX_REGISTERS_PER_BLOCK", base.max_regs_per_block),
            smem_per_sm=attr("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", base.smem_per_sm),
            smem_per_block=attr("MAX_SHARED_MEMORY_PER_BLOCK", base.smem_per_block),
            smem_per_block_optin=attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
                                      base.smem_per_block_optin),
            smem_reserved_per_block=attr("RESERVED_SHARED_MEMORY_PER_BLOCK",
                                         base.smem_reserved_per_block),
            l2_bytes=attr("L2_CACHE_SIZE", base.l2_bytes),
        )

    @classmethod
    def from_dict(cls, d: dict) -> "DeviceLimits":
        known = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in known}
        if "compute_capability" in kw:
            kw["compute_capability"] = tuple(kw["compute_capability"])
        return cls(**kw)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["compute_capability"] = list(self.compute_capability)
        return d


#: Hopper H100 SXM (132 SMs, 50 MiB L2), the CUDA occupancy calculator's numbers for cc 9.0.
H100_LIMITS = DeviceLimits(name="NVIDIA H100 80GB HBM3 (preset)")
#: H200: the same SM as the H100 and 60 MiB of L2 (as an H200 reports it; flashcourse.gpus).
H200_LIMITS = replace(H100_LIMITS, name="NVIDIA H200 (preset)", l2_bytes=62914560)


def recorded_limits() -> DeviceLimits:
    """The H200 limits stored with the recorded sweep, else the H200 preset."""
    doc = load_sweep()
    if doc is not None and "limits" in doc:
        return DeviceLimits.from_dict(doc["limits"])
    return H200_LIMITS


# ---------------------------------------------------------------------------
# Launch errors and occupancy (pure functions: no GPU needed)
# ---------------------------------------------------------------------------

class LaunchError(ValueError):
    """A configuration that cannot launch; names the limit, the amount asked and available."""

    def __init__(self, limit: str, asked: int, available: int, unit: str, what: str = ""):
        self.limit, self.asked, self.available, self.unit = limit, int(asked), int(available), unit
        lead = f"{what}: " if what else ""
        super().__init__(
            f"{lead}cannot launch: {limit} exceeded, asked {self.asked:,} {unit}, "
            f"available {self.available:,} {unit}")


def _ceil_to(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def check_launch(threads: int, shared_bytes: int, limits: DeviceLimits, *,
                 regs_per_thread: int | None = None, optin: bool = True, what: str = "") -> None:
    """Raise LaunchError if one block of this shape cannot launch on `limits`.

    threads: threads per block; shared_bytes: shared memory per block (bytes, static
    plus dynamic); regs_per_thread: from the compiled kernel (None = unknown, skipped);
    optin: whether the kernel raises its dynamic shared-memory limit beyond 48 KiB.
    """
    threads = check_block(threads, "threads")
    if threads > limits.max_threads_per_block:
        raise LaunchError("threads per block", threads, limits.max_threads_per_block,
                          "threads", what)
    smem_cap = limits.smem_per_block_optin if optin else limits.smem_per_block
    name = ("shared memory per block (opt-in)" if optin
            else "shared memory per block (without opt-in)")
    if shared_bytes > smem_cap:
        raise LaunchError(name, shared_bytes, smem_cap, "bytes", what)
    if regs_per_thread is not None:
        if regs_per_thread > limits.max_regs_per_thread:
            raise LaunchError("registers per thread", regs_per_thread,
                              limits.max_regs_per_thread, "registers", what)
        regs_block = _ceil_to(regs_per_thread * limits.warp_size, limits.reg_alloc_unit) \
            * (-(-threads // limits.warp_size))
        if regs_block > limits.max_regs_per_block:
            raise LaunchError("registers per block", regs_block, limits.max_regs_per_block,
                              "registers", what)


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per SM and what limits them.

    by_resource: blocks per SM each resource alone would allow (None when unknown).
    limiter: the resource giving the smallest count. warps_per_sm, fraction: resident
    warps and their share of the SM's maximum.
    """

    blocks_per_sm: int
    limiter: str
    by_resource: dict
    warps_per_sm: int
    fraction: float

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in self.by_resource.items() if v is not None)
        return (f"{self.blocks_per_sm} block(s)/SM = {self.warps_per_sm} warps "
                f"({self.fraction:.0%} of the SM's warps); limited by {self.limiter} "
                f"[{parts}]")


def occupancy(threads: int, shared_bytes: int, limits: DeviceLimits, *,
              regs_per_thread: int | None = None, optin: bool = True) -> Occupancy:
    """Resident blocks per SM from threads, registers and shared memory (CUDA's calculator).

        warps/block   W = ceil(threads / 32)
        threads:      floor(max_warps_per_SM / W)
        registers:    floor(regs_per_SM / (ceil(regs * 32, 256) * W))
        shared mem:   floor(smem_per_SM / ceil(shared_bytes + reserved, 128))
        blocks:       max_blocks_per_SM

    Raises LaunchError when not even one block can launch.
    """
    check_launch(threads, shared_bytes, limits, regs_per_thread=regs_per_thread, optin=optin)
    warps = -(-threads // limits.warp_size)
    max_warps = limits.max_threads_per_sm // limits.warp_size
    by = {"threads (warps)": max_warps // warps, "blocks per SM": limits.max_blocks_per_sm}
    if regs_per_thread is None:
        by["registers"] = None
    else:
        per_warp = _ceil_to(max(regs_per_thread, 1) * limits.warp_size, limits.reg_alloc_unit)
        by["registers"] = limits.regs_per_sm // (per_warp * warps)
    # the system reserves smem_reserved_per_block (1 KiB on Hopper) even for 0 bytes
    per_block = _ceil_to(shared_bytes + limits.smem_reserved_per_block, limits.smem_alloc_unit)
    by["shared memory"] = limits.smem_per_sm // per_block
    known = {k: v for k, v in by.items() if v is not None}
    # ties: report the order a learner would act on (shared memory, registers, threads)
    order = ["shared memory", "registers", "threads (warps)", "blocks per SM"]
    blocks = min(known.values())
    limiter = next(k for k in order if known.get(k) == blocks)
    if blocks < 1:
        raise LaunchError(limiter + " per SM", 1, 0, "blocks")
    return Occupancy(blocks, limiter, by, blocks * warps, blocks * warps / max_warps)


# ---------------------------------------------------------------------------
# Flash-kernel configurations
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class FlashConfig:
    """One launch configuration of `flashcourse.cuda.flash`'s kernel.

    block_q (Br) and block_k (Bc): tile rows (positions); threads: per block;
    tm: query rows per thread; head_dim: d. Derived from the kernel's own plan:
    micro_q x micro_k = TM x TN scores per thread, micro_d = TD output columns per
    thread, shared_bytes per block (bytes). regs_per_thread: from the compiled kernel,
    None until compiled on a GPU. unroll: inner-product steps the kernel writes per loop
    iteration (a code-generation choice of flash.make_flash_kernel; None = its default).
    """

    block_q: int
    block_k: int
    threads: int
    tm: int
    head_dim: int
    micro_q: int = 0
    micro_k: int = 0
    micro_d: int = 0
    shared_bytes: int = 0
    regs_per_thread: int | None = None
    unroll: int | None = None

    @property
    def label(self) -> str:
        u = "" if self.unroll is None else f" unroll={self.unroll}"
        return f"Br={self.block_q} Bc={self.block_k} threads={self.threads} tm={self.tm}{u}"

    def key(self) -> tuple:
        """(block_q, block_k, threads, tm, unroll): what identifies a configuration for one d."""
        return (self.block_q, self.block_k, self.threads, self.tm, self.unroll)


def kernel_plan(block_q: int, block_k: int, threads: int, tm: int, head_dim: int):
    """(TM, TN, TD, shared_bytes) of flashcourse.cuda.flash for this shape on a GPU
    (warp-shuffle variant). Raises ValueError naming the argument when the kernel
    cannot be arranged this way (e.g. threads not a multiple of block_q / tm).

    The device-limit check of `flash.plan` is left to `check_launch` here, so that
    configurations can be judged against any DeviceLimits, not only this machine's.
    """
    from .cuda import flash
    try:
        cfg = flash.plan(head_dim, block_q, block_k, threads, tm, shuffle=True)
    except ValueError as exc:
        if "device limit" not in str(exc):
            raise
        # plan() checks the device limit last, so the shape itself is valid: size it here
        rt = block_q // tm
        ct = threads // rt
        cfg = flash.FlashConfig(block_q, block_k, threads, tm, -(-head_dim // ct) * ct, True)
    return cfg.tm, cfg.tn, cfg.td, cfg.shared_bytes


def make_config(block_q: int, block_k: int, threads: int, tm: int, head_dim: int, *,
                regs_per_thread: int | None = None, unroll: int | None = None) -> FlashConfig:
    """A FlashConfig with its micro-tile and shared-memory footprint filled in."""
    br, bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    t, tm = check_block(threads, "threads"), check_block(tm, "tm")
    d = check_block(head_dim, "head_dim")
    if unroll is not None:
        unroll = check_block(unroll, "unroll")
    mq, mk, md, smem = kernel_plan(br, bc, t, tm, d)
    return FlashConfig(br, bc, t, tm, d, mq, mk, md, smem, regs_per_thread, unroll)


def default_unroll() -> int:
    """The untuned inner-loop unroll of flashcourse.cuda.flash (what tuning starts from)."""
    from .cuda import flash

    return flash.UNTUNED_UNROLL


def _kernel_for(cfg: FlashConfig, shuffle: bool):
    """The compiled-variant dispatcher of flash for `cfg`, made with exactly the arguments
    `flash.run` uses (so its cache serves the timed launches too); and run's kwargs."""
    from .cuda import flash
    plan = flash.plan(cfg.head_dim, cfg.block_q, cfg.block_k, cfg.threads, cfg.tm,
                      shuffle=shuffle)
    base = (cfg.block_q, cfg.block_k, cfg.threads, cfg.tm, plan.head_dim, plan.shuffle)
    u = default_unroll() if cfg.unroll is None else cfg.unroll
    kern, _ = flash.make_flash_kernel(*base, u)
    return kern, {"unroll": u}


def valid_tms(block_q: int, block_k: int, threads: int, head_dim: int,
              candidates=(1, 2, 4, 8, 16)) -> list:
    """The rows-per-thread values for which the kernel can arrange this tile."""
    out = []
    for tm in candidates:
        try:
            kernel_plan(block_q, block_k, threads, tm, head_dim)
        except ValueError:
            continue
        out.append(tm)
    return out


def square_tm(block_q: int, block_k: int, threads: int, head_dim: int):
    """The valid tm whose score micro-tile TM x TN is closest to square (larger tm on
    ties): the most multiply-adds per shared-memory load for a given register count.
    None when no tm fits."""
    best = None
    for tm in valid_tms(block_q, block_k, threads, head_dim):
        mq, mk, _, _ = kernel_plan(block_q, block_k, threads, tm, head_dim)
        score = (abs(math.log(mq / mk)), -tm)
        if best is None or score < best[0]:
            best = (score, tm)
    return None if best is None else best[1]


def enumerate_configs(head_dim: int, limits: DeviceLimits, *,
                      block_qs=(32, 64, 128), block_ks=(32, 64, 128),
                      threads=(128, 256), tms=None, regs=None, optin=True, unroll=None):
    """Split the grid of (block_q, block_k, threads, tm) into launchable and rejected.

    tms: None picks one tm per (block_q, block_k, threads) (`square_tm`); a tuple tries
    each. regs: None, a callable FlashConfig -> registers per thread (e.g. from the
    compiled kernel), or a dict keyed by FlashConfig.key(). unroll: passed to every config.
    Returns (ok, rejected): ok is a list of FlashConfig; rejected a list of
    ((block_q, block_k, threads, tm), reason) with the reason naming the limit, the
    amount asked and the amount available (or the shape rule that failed).
    """
    ok, rejected = [], []
    for br in block_qs:
        for bc in block_ks:
            for t in threads:
                if tms is None:
                    tm = square_tm(br, bc, t, head_dim)
                    if tm is None:
                        rejected.append(((br, bc, t, None),
                                         f"threads={t} cannot be arranged over a {br} x {bc} "
                                         "tile for any tm"))
                        continue
                    cand = (tm,)
                else:
                    cand = tms
                for tm in cand:
                    try:
                        cfg = make_config(br, bc, t, tm, head_dim, unroll=unroll)
                        r = regs(cfg) if callable(regs) else (
                            regs.get(cfg.key()) if isinstance(regs, dict) else None)
                        cfg = replace(cfg, regs_per_thread=r)
                        what = cfg.label + f" d={head_dim}"
                        check_launch(t, cfg.shared_bytes, limits, regs_per_thread=r,
                                     optin=optin, what=what)
                        occupancy(t, cfg.shared_bytes, limits, regs_per_thread=r, optin=optin)
                    except ValueError as exc:
                        rejected.append(((br, bc, t, tm), str(exc)))
                        continue
                    ok.append(cfg)
    return ok, rejected


def default_config(head_dim: int) -> tuple:
    """The untuned GPU default (block_q, block_k, threads, tm) of flashcourse.cuda.flash."""
    from .cuda import flash

    return tuple(flash.untuned_config(head_dim))


# ---------------------------------------------------------------------------
# Opt-in to more than 48 KiB of dynamic shared memory (numba-cuda private API)
# ---------------------------------------------------------------------------

class SharedMemoryOptInError(RuntimeError):
    """Raised when the private numba-cuda route to the opt-in attribute has moved."""


def set_max_dynamic_shared_bytes(dispatcher, signature, nbytes: int) -> None:
    """Let `dispatcher`'s compiled overload for `signature` use `nbytes` of dynamic
    shared memory (Hopper allows up to 227 KiB per block, but only after this call).

    numba-cuda has no public call for it: this compiles the overload, takes its
    CUfunction and calls cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES). If that
    private route moves, it raises SharedMemoryOptInError saying so.
    """
    nbytes = int(nbytes)
    if nbytes <= 48 * 1024:
        return
    try:
        from numba.cuda.cudadrv.driver import binding, driver
        kern = dispatcher.compile(tuple(signature))
        func = kern._codelibrary.get_cufunc()
        attr = binding.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        driver.cuKernelSetAttribute(attr, nbytes, func.handle, func.device.id)
    except (AttributeError, ImportError, TypeError) as exc:
        raise SharedMemoryOptInError(
            f"could not raise the kernel's dynamic shared memory to {nbytes:,} bytes: "
            f"numba-cuda's private API (dispatcher.compile()._codelibrary.get_cufunc(), "
            f"driver.cuKernelSetAttribute) has changed ({type(exc).__name__}: {exc}). "
            "Use tiles that need at most 49,152 bytes, or update "
            "flashcourse.tuning.set_max_dynamic_shared_bytes.") from exc


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------

def time_cuda(fn, *, warmup: int = 2, repeats: int = 10) -> list:
    """Milliseconds per call of `fn` (which launches GPU work), one CUDA-event pair each.

    `warmup` untimed calls first (compilation, module load, caches); returns the list
    of `repeats` times (ms): take the median.
    """
    from numba import cuda
    for _ in range(warmup):
        fn()
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = cuda.event(), cuda.event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return times


def time_host(fn, *, warmup: int = 1, repeats: int = 5, budget_s: float | None = None) -> list:
    """Milliseconds per call of a CPU function (perf_counter), after `warmup` calls.
    Stops early once `budget_s` seconds of timed calls have passed (at least one)."""
    for _ in range(warmup):
        fn()
    times, spent = [], 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        times.append(dt * 1e3)
        spent += dt
        if budget_s is not None and spent > budget_s:
            break
    return times


def tflops(flops: float, ms: float) -> float:
    """TFLOP/s of `flops` floating-point operations done in `ms` milliseconds."""
    return flops / (ms * 1e-3) / 1e12


class Progress:
    """A progress bar: an ipywidgets bar in Jupyter, a text line elsewhere."""

    def __init__(self, total: int, label: str = "", show: bool = True):
        self.total, self.n, self.label, self.show = max(total, 1), 0, label, show
        self.bar = None
        if show and "ipykernel" in sys.modules:
            try:
                import ipywidgets as w
                from IPython.display import display
                self.bar = w.IntProgress(value=0, max=self.total, description=label)
                self.text = w.Label()
                display(w.HBox([self.bar, self.text]))
            except Exception:
                self.bar = None

    def update(self, message: str = "") -> None:
        self.n += 1
        if not self.show:
            return
        if self.bar is not None:
            self.bar.value = self.n
            self.text.value = message
        else:
            width = 30
            done = int(width * self.n / self.total)
            print(f"[{'#' * done}{'.' * (width - done)}] {self.n}/{self.total} {message}",
                  flush=True)


# ---------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------

def config_row(cfg: FlashConfig, seq_len: int) -> dict:
    """An empty result row for `cfg` at `seq_len` (the sweep schema's row keys)."""
    return {"head_dim": cfg.head_dim, "seq_len": int(seq_len), "block_q": cfg.block_q,
            "block_k": cfg.block_k, "threads": cfg.threads, "tm": cfg.tm, "unroll": cfg.unroll,
            "micro_q": cfg.micro_q, "micro_k": cfg.micro_k, "micro_d": cfg.micro_d,
            "shared_bytes": cfg.shared_bytes, "regs_per_thread": cfg.regs_per_thread,
            "local_bytes": None, "blocks_per_sm": None, "limiter": None, "median_ms": None,
            "spread_ms": None, "tflops": None, "rel_err": None, "status": "ok", "error": ""}


def time_config(cfg: FlashConfig, seq_len: int, *, runner, batch_heads: int = 32,
                warmup: int = 1, repeats: int = 5, timer=None, limits=None) -> dict:
    """Time one configuration at one sequence length; return its row (never raises).

    runner(cfg, seq_len, batch_heads) -> (fn, check): fn() launches one forward;
    check() returns the relative error against the float64 reference (or None);
    fn.config, if present, is the compiled FlashConfig (with registers), and
    fn.local_bytes the spilled bytes per thread. A configuration that fails (does not
    compile, cannot launch, wrong result) gets status "error" and the message.
    """
    from .traffic import attention_flops
    timer = time_cuda if timer is None else timer
    row = config_row(cfg, seq_len)
    try:
        fn, check = runner(cfg, int(seq_len), batch_heads)
        compiled = getattr(fn, "config", None)
        if compiled is not None:
            row["regs_per_thread"] = compiled.regs_per_thread
            row["unroll"] = compiled.unroll
        row["local_bytes"] = getattr(fn, "local_bytes", None)
        if limits is not None:
            occ = occupancy(cfg.threads, cfg.shared_bytes, limits,
                            regs_per_thread=row["regs_per_thread"])
            row.update(blocks_per_sm=occ.blocks_per_sm, limiter=occ.limiter)
        times = timer(fn, warmup=warmup, repeats=repeats)
        ms = statistics.median(times)
        flops = attention_flops(seq_len, seq_len, cfg.head_dim) * batch_heads
        row.update(median_ms=ms, tflops=tflops(flops, ms), spread_ms=[min(times), max(times)])
        row["rel_err"] = check() if check is not None else None
        if row["rel_err"] is not None and not row["rel_err"] < 1e-4:   # fp32: ~1e-6 expected
            row.update(status="error", error=f"wrong result: rel_err={row['rel_err']:.2e}")
    except Exception as exc:  # a config that fails is data, not a crash
        row.update(status="error", error=f"{type(exc).__name__}: {exc}"[:500])
    return row


def sweep(configs, seq_lens, *, runner=None, batch_heads: int = 32, warmup: int = 1,
          repeats: int = 5, progress: bool = True, timer=None, limits=None) -> list:
    """Time every configuration at every sequence length; return one row (dict) each.

    runner defaults to `make_gpu_runner` (the CUDA flash kernel), timer to `time_cuda`
    (CUDA events, median of `repeats` after `warmup` calls). See `time_config`.
    """
    runner = make_gpu_runner if runner is None else runner
    rows = []
    bar = Progress(len(configs) * len(seq_lens), "sweep", show=progress)
    for n in seq_lens:
        for cfg in configs:
            row = time_config(cfg, n, runner=runner, batch_heads=batch_heads, warmup=warmup,
                              repeats=repeats, timer=timer, limits=limits)
            bar.update(f"d={cfg.head_dim} N={n} {cfg.label}: "
                       + (f"{row['tflops']:.2f} TFLOP/s" if row["tflops"] else row["error"][:60]))
            rows.append(row)
    return rows


@lru_cache(maxsize=2)
def host_inputs(batch_heads: int, seq_len: int, head_dim: int, seed: int = 0):
    """q, k, v (B*H, N, d) float32 standard normal on the host (cached: the sweep reuses
    them for every configuration of one shape, and makes them before taking the GPU)."""
    rng = np.random.default_rng(seed)
    shape = (batch_heads, seq_len, head_dim)
    return tuple(rng.standard_normal(shape, dtype=np.float32) for _ in range(3))


def make_gpu_runner(cfg: FlashConfig, seq_len: int, batch_heads: int, *, seed: int = 0,
                    check_rows: int = 256):
    """(fn, check) for one flash configuration on the GPU (see `time_config`).

    Inputs q, k, v (B*H, N, d) float32 standard normal are placed on the GPU once;
    fn() launches one forward (flashcourse.cuda.flash.run); check() compares the
    first `check_rows` rows of head 0 with the float64 reference, and a small
    irregular causal problem (Tq = 333, Tk = 517, 2 heads) run with the same tiles,
    returning the larger relative error.
    """
    from numba import cuda

    from .cuda import flash
    from .reference import attention
    d = cfg.head_dim
    rng = np.random.default_rng(seed + 1)
    q, k, v = host_inputs(batch_heads, seq_len, d, seed)            # (BH, N, d) each
    dq, dk, dv = (cuda.to_device(x) for x in (q, k, v))
    o = cuda.device_array((batch_heads, seq_len, d), np.float32)   # (BH, N, d)
    lse = cuda.device_array((batch_heads, seq_len), np.float32)    # (BH, N)
    scale = 1.0 / math.sqrt(d)
    args = (cfg.block_q, cfg.block_k, cfg.threads, cfg.tm)
    sim = flash.using_simulator()          # tiny smoke tests only: no registers there
    kern, kw = _kernel_for(cfg, shuffle=not sim)
    ck = None if sim else kern.compile(flash.signature())

    def fn():
        flash.run(dq, dk, dv, o, lse, seq_len, seq_len, d, scale, False, *args, **kw)

    def check():
        o_h = o[0, :check_rows].copy_to_host()[None]                # (1, rows, d)
        ref, _ = attention(q[:1, :check_rows].astype(np.float64), k[:1].astype(np.float64),
                           v[:1].astype(np.float64), scale=scale)
        err = float(np.linalg.norm(o_h - ref) / np.linalg.norm(ref))
        sq, sk, sv = (rng.standard_normal((2, t, d)).astype(np.float32)
                      for t in (333, 517, 517))
        so = cuda.device_array((2, 333, d), np.float32)
        sl = cuda.device_array((2, 333), np.float32)
        flash.run(cuda.to_device(sq), cuda.to_device(sk), cuda.to_device(sv), so, sl,
                  333, 517, d, scale, True, *args, **kw)
        sref, _ = attention(sq.astype(np.float64), sk.astype(np.float64),
                            sv.astype(np.float64), causal=True, scale=scale)
        so_h = so.copy_to_host()
        err2 = float(np.linalg.norm(so_h - sref) / np.linalg.norm(sref))
        return max(err, err2)

    fn.config = replace(cfg, unroll=kw.get("unroll", cfg.unroll))
    if ck is not None:
        fn.config = replace(fn.config, regs_per_thread=int(ck.regs_per_thread))
        fn.local_bytes = int(ck.local_mem_per_thread)
    return fn, check


def _ok(rows):
    return [r for r in rows if r.get("status") == "ok" and (r.get("tflops") or 0) > 0]


def best_by_head_dim(rows, defaults: dict) -> dict:
    """Pick the tuned default per head dimension.

    Among the configurations timed at every sequence length of that head dimension
    and at least as fast as the untuned default (`defaults[str(d)]`) at each of them,
    take the one with the highest geometric-mean TFLOP/s. The untuned default itself
    qualifies, so the tuned default is never slower than it in the same run.
    Returns {"64": {block_q, block_k, threads, tm, unroll, tflops {N: x}, default_tflops {N: x},
    geomean_tflops, speedup}} (speedup = geomean over the default's geomean).
    """
    out = {}
    for d in sorted({r["head_dim"] for r in _ok(rows)}):
        table = {}
        for r in _ok(rows):
            if r["head_dim"] == d:
                table.setdefault((r["block_q"], r["block_k"], r["threads"], r["tm"],
                                  r.get("unroll")), {})[
                    r["seq_len"]] = r["tflops"]
        seqs = sorted({n for v in table.values() for n in v})
        dflt = defaults.get(str(d)) or defaults.get(d)
        dkey = ((dflt["block_q"], dflt["block_k"], dflt["threads"], dflt["tm"],
                 dflt.get("unroll")) if dflt else None)
        base = table.get(dkey, {})
        cands = []
        for key, by_n in table.items():
            if len(by_n) != len(seqs):
                continue
            if base and any(by_n[n] < base.get(n, 0.0) for n in seqs):
                continue
            g = math.exp(sum(math.log(by_n[n]) for n in seqs) / len(seqs))
            cands.append((g, key, by_n))
        if not cands:
            continue
        g, key, by_n = max(cands)
        gb = (math.exp(sum(math.log(base[n]) for n in seqs) / len(seqs))
              if base and len(base) == len(seqs) else None)
        out[str(d)] = {"block_q": key[0], "block_k": key[1], "threads": key[2], "tm": key[3],
                       "unroll": key[4],
                       "tflops": {str(n): by_n[n] for n in seqs},
                       "default_tflops": {str(n): base.get(n) for n in seqs} if base else {},
                       "geomean_tflops": g,
                       "speedup": (g / gb) if gb else None}
    return out


# ---------------------------------------------------------------------------
# Recorded results: loaders and schema checks
# ---------------------------------------------------------------------------

_SWEEP_KEYS = ("schema", "environment", "limits", "problem", "default", "rows", "best")
_ROW_KEYS = ("head_dim", "seq_len", "block_q", "block_k", "threads", "tm", "median_ms",
             "tflops", "status")
_TRAFFIC_KEYS = ("schema", "environment", "runs")
_RUN_KEYS = ("name", "impl", "seq_len", "head_dim", "heads", "cache_control", "dram_bytes",
             "l2_bytes", "time_ms", "model_bytes", "kernels")


def _validate(doc, kind: str, keys, schema: str, items: str, item: str, item_keys) -> dict:
    """Check a results document: an object with `keys`, the right `schema`, and every
    entry of doc[items] holding `item_keys`; raise ValueError naming what is missing."""
    if not isinstance(doc, dict):
        raise ValueError(f"{kind} document must be a JSON object, got {type(doc).__name__}")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise ValueError(f"{kind} document lacks keys {missing} (schema {schema})")
    if doc["schema"] != schema:
        raise ValueError(f"{kind} schema must be {schema!r}, got {doc['schema']!r}")
    for i, entry in enumerate(doc[items]):
        lack = [k for k in item_keys if k not in entry]
        if lack:
            raise ValueError(f"{kind} {item} {i} lacks keys {lack}")
    return doc


def validate_sweep(doc: dict) -> dict:
    """Check a sweep document against the schema; raise ValueError naming what is missing."""
    _validate(doc, "sweep", _SWEEP_KEYS, SWEEP_SCHEMA, "rows", "row", _ROW_KEYS)
    for k in ("gpu", "date"):
        if k not in doc["environment"]:
            raise ValueError(f"sweep environment lacks {k!r}")
    return doc


def validate_traffic(doc: dict) -> dict:
    """Check an ncu-traffic document against the schema; raise ValueError naming gaps."""
    return _validate(doc, "traffic", _TRAFFIC_KEYS, TRAFFIC_SCHEMA, "runs", "run", _RUN_KEYS)


def _load(path, validate):
    path = Path(path)
    if not path.exists():
        return None
    return validate(json.loads(path.read_text()))


def load_sweep(path=None) -> dict | None:
    """The recorded sweep (validated), or None when no recorded results exist yet."""
    return _load(SWEEP_FILE if path is None else path, validate_sweep)


def load_traffic(path=None) -> dict | None:
    """The recorded ncu traffic study (validated), or None when none exists yet."""
    return _load(TRAFFIC_FILE if path is None else path, validate_traffic)


def tuned_config(head_dim: int, path=None, gpu_name: str | None = None) -> dict | None:
    """The tuned default {block_q, block_k, threads, tm, unroll} for `head_dim` from the recorded
    sweep, or None (no record, another head dimension, or a different GPU when
    `gpu_name` is given). flashcourse.cuda can use it as its default tile shape."""
    d = check_block(head_dim, "head_dim")
    doc = load_sweep(path)
    if doc is None:
        return None
    if gpu_name is not None and gpu_name != doc["environment"].get("gpu"):
        return None
    best = doc["best"].get(str(d))
    if best is None:
        return None
    return {k: best.get(k) for k in ("block_q", "block_k", "threads", "tm", "unroll")}


def environment() -> dict:
    """GPU name, driver, CUDA and package versions and the date (UTC), for the records."""
    import datetime
    import platform
    from importlib import metadata

    def ver(name):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "python": platform.python_version(), "numpy": np.__version__,
           "numba": ver("numba"), "numba_cuda": ver("numba-cuda"), "torch": ver("torch"),
           "gpu": None, "driver": None, "cuda": None}
    try:
        import subprocess
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20).stdout.strip().splitlines()
        if out:
            env["gpu"], env["driver"] = [s.strip() for s in out[0].split(",")][:2]
    except Exception:
        pass
    try:
        from numba import cuda
        if cuda.is_available():
            env["cuda"] = ".".join(map(str, cuda.runtime.get_version()))
            if env["gpu"] is None:
                n = cuda.get_current_device().name
                env["gpu"] = n.decode() if isinstance(n, bytes) else str(n)
            try:
                env["cuda_driver_api"] = ".".join(map(str, cuda.cudadrv.driver.driver
                                                      .get_version()))
            except Exception:
                pass
    except Exception:
        pass
    return env


# ---------------------------------------------------------------------------
# Plots of the recorded results
# ---------------------------------------------------------------------------

def heatmap_grid(rows, head_dim: int, seq_len: int):
    """(block_qs, block_ks, grid, threads_grid): best TFLOP/s over threads per (Br, Bc);
    NaN where nothing launched."""
    sel = [r for r in _ok(rows) if r["head_dim"] == head_dim and r["seq_len"] == seq_len]
    allr = [r for r in rows if r["head_dim"] == head_dim]
    bqs = sorted({r["block_q"] for r in allr})
    bks = sorted({r["block_k"] for r in allr})
    grid = np.full((len(bqs), len(bks)), np.nan)                # (n_Br, n_Bc) TFLOP/s
    thr = np.zeros((len(bqs), len(bks)), dtype=int)
    for r in sel:
        i, j = bqs.index(r["block_q"]), bks.index(r["block_k"])
        if not (grid[i, j] >= r["tflops"]):
            grid[i, j], thr[i, j] = r["tflops"], r["threads"]
    return bqs, bks, grid, thr


def plot_heatmap(rows, head_dim: int, seq_len: int, ax=None, title: str | None = None):
    """Heatmap of TFLOP/s over (block_q, block_k), the best thread count per cell."""
    import matplotlib.pyplot as plt
    bqs, bks, grid, thr = heatmap_grid(rows, head_dim, seq_len)
    if ax is None:
        _, ax = plt.subplots(figsize=(4.2, 3.6))
    im = ax.imshow(grid, cmap="viridis", origin="lower")
    ax.set_xticks(range(len(bks)), [str(b) for b in bks])
    ax.set_yticks(range(len(bqs)), [str(b) for b in bqs])
    ax.set_xlabel("block_k = Bc (keys per tile)")
    ax.set_ylabel("block_q = Br (queries per tile)")
    for i in range(len(bqs)):
        for j in range(len(bks)):
            if np.isnan(grid[i, j]):
                ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="0.4")
                continue
            lo, hi = np.nanmin(grid), np.nanmax(grid)
            light = hi == lo or (grid[i, j] - lo) / (hi - lo) > 0.5   # bright cell: dark text
            ax.text(j, i, f"{grid[i, j]:.1f}\n{thr[i, j]}t", ha="center", va="center",
                    fontsize=7, color="k" if light else "w")
    ax.set_title(title or f"TFLOP/s, d={head_dim}, N={seq_len}")
    ax.figure.colorbar(im, ax=ax, label="TFLOP/s")
    return ax


def plot_sweep_heatmaps(doc: dict, path=None):
    """One heatmap per (head_dim, seq_len) in the sweep document; saves to `path`."""
    import matplotlib.pyplot as plt
    rows = doc["rows"]
    dims = sorted({r["head_dim"] for r in rows})
    seqs = sorted({r["seq_len"] for r in rows})
    fig, axes = plt.subplots(len(dims), len(seqs), figsize=(4.4 * len(seqs), 3.7 * len(dims)),
                             squeeze=False)
    for i, d in enumerate(dims):
        for j, n in enumerate(seqs):
            plot_heatmap(rows, d, n, ax=axes[i][j])
    fig.suptitle(f"{doc['environment'].get('gpu')}: flash forward, fp32, "
                 f"B x H = {doc['problem'].get('batch_heads')} (best thread count per cell)")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


# ---------------------------------------------------------------------------
# Measured traffic (Nsight Compute)
# ---------------------------------------------------------------------------

NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
               "gpu__time_duration.sum")

_UNIT_SCALE = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "kibyte": 1024, "mibyte": 1024 ** 2, "gibyte": 1024 ** 3,
               "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
               "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_ncu_csv(text: str) -> list:
    """Parse `ncu --csv` output (one row per kernel and metric) into one dict per kernel:
    {id, block, kernel, metrics {name: value in bytes or seconds}}. Lines outside the
    CSV (the program's own output, ==PROF== lines) are skipped; several concatenated ncu
    outputs are read as consecutive blocks (block = 0, 1, ...)."""
    import csv
    import io
    lines = text.splitlines()
    # several ncu runs may be concatenated: each header starts a new block of IDs
    blocks, current = [], None
    for ln in lines:
        if ln.startswith('"ID"'):
            current = [ln]
            blocks.append(current)
        elif current is not None and ln.startswith('"'):
            current.append(ln)
    kernels = {}
    records = ((b, rec) for b, block in enumerate(blocks)
               for rec in csv.DictReader(io.StringIO("\n".join(block))))
    for b, rec in records:
        try:
            kid = (b, int(rec["ID"]))
        except (KeyError, ValueError):
            continue
        k = kernels.setdefault(kid, {"id": kid[1], "block": b,
                                     "kernel": rec.get("Kernel Name", ""), "metrics": {}})
        name, unit = rec.get("Metric Name", ""), (rec.get("Metric Unit") or "").strip().lower()
        raw = (rec.get("Metric Value") or "").replace(",", "")
        try:
            value = float(raw)
        except ValueError:
            continue
        k["metrics"][name] = value * _UNIT_SCALE.get(unit, 1.0)
    return [kernels[i] for i in sorted(kernels)]


def split_by_marker(kernels: list, begin: str = "ncu_begin", end: str = "ncu_end") -> list:
    """Group the kernels of one ncu run by configuration: the kernels launched between
    a `begin` marker kernel and the next `end` marker (names containing those words)
    form one group; kernels outside any bracket (warm-ups, set-up) are dropped.
    Returns a list of lists of kernels, in launch order."""
    groups, current = [], None
    for k in kernels:
        name = k["kernel"]
        if begin in name:
            current = []
        elif end in name:
            if current is not None:
                groups.append(current)
            current = None
        elif current is not None:
            current.append(k)
    return groups


def sum_metrics(kernels: list) -> dict:
    """Totals over kernels: dram_bytes (read + write), dram_read, dram_write, l2_bytes,
    time_ms."""
    tot = {m: sum(k["metrics"].get(m, 0.0) for k in kernels) for m in NCU_METRICS}
    return {"dram_read": tot["dram__bytes_read.sum"],
            "dram_write": tot["dram__bytes_write.sum"],
            "dram_bytes": tot["dram__bytes_read.sum"] + tot["dram__bytes_write.sum"],
            "l2_bytes": tot["lts__t_bytes.sum"],
            "time_ms": tot["gpu__time_duration.sum"] * 1e3}


def model_bytes(impl: str, seq_len: int, head_dim: int, heads: int, *, block_q=None,
                block_k=None, bytes_per_element: int = FP32) -> int:
    """The two-level IO model's outer-memory bytes for one run of `impl` over `heads`
    heads (flashcourse.traffic): dense paths (Algorithm 0, S and P stored in fp32),
    tiled paths (fa2 order with the given tiles; PyTorch's efficient kernel is
    modelled with Br = Bc = 64)."""
    from .traffic import dense_traffic, tiled_traffic
    e = bytes_per_element
    if impl in ("dense", "torch-math"):
        t = dense_traffic(seq_len, seq_len, head_dim, bytes_per_element=e, bytes_per_score=e)
    else:
        br = block_q or 64
        bc = block_k or 64
        t = tiled_traffic(seq_len, seq_len, head_dim, br, bc, bytes_per_element=e)
    return t.total_bytes * heads


def kv_bytes(seq_len: int, head_dim: int, heads: int, bytes_per_element: int = FP32) -> int:
    """Bytes of K and V together over all heads: 2 x N x d x e x heads."""
    return 2 * seq_len * head_dim * bytes_per_element * heads


def kv_reads_from_dram(run: dict, bytes_per_element: int = FP32) -> float:
    """How many times K and V came from DRAM in a measured tiled run: (DRAM bytes minus
    one read of Q and one write of O and lse) / (K + V bytes). The two-level model says
    Tr = ceil(N / Br) times; 1 means L2 served every re-read."""
    n, d, h = run["seq_len"], run["head_dim"], run["heads"]
    once = h * (2 * n * d * bytes_per_element + 4 * n)
    return (run["dram_bytes"] - once) / kv_bytes(n, d, h, bytes_per_element)


def l2_aware_dram_bytes(seq_len: int, head_dim: int, heads: int, block_q: int, block_k: int,
                        threads: int, tm: int, limits: DeviceLimits, *,
                        regs_per_thread: int | None = None,
                        bytes_per_element: int = FP32) -> dict:
    """A three-level estimate (DRAM -> L2 -> SM) of the flash kernel's DRAM bytes.

    The two-level model charges K and V once per query block: Tr = ceil(N / Br) reads
    of 2 N d e bytes per head. On a GPU the blocks resident at the same time,
    R = blocks_per_SM x SMs of them, start together and walk through K and V in step,
    so one DRAM read of a K/V tile feeds all of them through L2. Blocks run in waves
    of R; a head's Tr blocks need W = ceil(Tr / R) waves. If one head's K and V
    (2 N d e bytes) fit in L2, later waves find them there too, so K and V come from
    DRAM once per head; if not, once per wave. Q is read and O, lse written once:

        DRAM ~ heads x [N d e (Q) + N d e + 4 N (O, lse) + 2 N d e x (1 if fits else W)]

    An estimate, not a law: blocks drift out of step, and L2 is shared with the
    other heads running at the same time. Returns {bytes, resident_blocks,
    waves_per_head, kv_per_head_bytes, kv_fits}.
    """
    n, d, h = (check_block(seq_len, "seq_len"), check_block(head_dim, "head_dim"),
               check_block(heads, "heads"))
    e = bytes_per_element
    cfg = make_config(block_q, block_k, threads, tm, d)
    occ = occupancy(threads, cfg.shared_bytes, limits, regs_per_thread=regs_per_thread)
    resident = occ.blocks_per_sm * limits.sm_count
    tr = -(-n // block_q)
    waves = -(-tr // resident)
    kv = 2 * n * d * e
    fits = kv <= limits.l2_bytes
    per_head = n * d * e + n * d * e + 4 * n + kv * (1 if fits else waves)
    return {"bytes": per_head * h, "resident_blocks": resident, "waves_per_head": waves,
            "kv_per_head_bytes": kv, "kv_fits": fits}


RATIO_BAND = (0.8, 1.25)


def explain_ratio(run: dict, l2_bytes: int, level: str = "dram") -> str:
    """A plain-words reason for a measured/model ratio (run["dram_ratio"] or
    run["l2_ratio"]) outside RATIO_BAND; says so when it is inside."""
    r = run.get(f"{level}_ratio")
    if r is None:
        return "no measurement"
    if RATIO_BAND[0] <= r <= RATIO_BAND[1]:
        return (f"within [{RATIO_BAND[0]}, {RATIO_BAND[1]}]: the two-level model predicts "
                f"the {'DRAM' if level == 'dram' else 'L2'} traffic")
    impl = run["impl"]
    kv = kv_bytes(run["seq_len"], run["head_dim"], run["heads"])
    kv_txt = (f"K+V of all heads = {kv / 2**20:.0f} MiB "
              f"{'fits in' if kv <= l2_bytes else 'exceeds'} the {l2_bytes / 2**20:.0f} MiB L2")
    tiled = impl in ("flash", "torch-efficient", "textbook")
    if level == "dram":
        if r < RATIO_BAND[0] and tiled:
            return ("below: the model counts K and V once per query block from outer memory, "
                    "but blocks resident at the same time read the same K/V tiles and L2 "
                    f"serves the repeats ({kv_txt}); DRAM sees K and V about once per head "
                    "(or once per wave of resident blocks when a head's K/V outgrow L2)")
        if r < RATIO_BAND[0]:
            return ("below: part of S/P written by one pass is still in L2 when the next "
                    "pass reads it (more so with --cache-control none), or the library "
                    "fuses passes that the model keeps separate")
        return ("above: more passes over the Tq x Tk matrix than Algorithm 0's (extra "
                "kernels such as scaling, copies or a second softmax pass), each moving "
                "Tq Tk 4 B per head, or evictions that make re-reads miss")
    # level == "l2"
    if r > RATIO_BAND[1]:
        if impl == "dense":
            return ("above: the tiled matrix products re-read Q and K (then P and V) from L2 "
                    "once per tile row or column of the output; the model counts each read "
                    "once. The SMs' small L1 caches cannot hold them")
        if impl == "textbook":
            return ("above: one thread per query row and narrow tiles re-read K and V from L2 "
                    "more often than once per Br = block_q rows")
        if impl == "torch-efficient":
            return ("above: the library kernel fetches K/V (and Q) fragments from L2 more "
                    "often than once per query block (which of its loads repeat was not "
                    "measured here); its DRAM traffic stays small")
        return ("above: L2 also carries traffic the model does not count (the DRAM fills "
                "themselves, partial-sector writes, extra kernels such as copies)")
    if tiled:
        return ("below: part of the K/V loads never reach L2; likely they hit in an SM's L1 "
                "cache, shared by the blocks of one head that run on that SM at the same time "
                "(the L1 hit rate was not measured here)")
    return ("below: the library's kernels fuse passes or keep tiles in L1/shared memory, "
            "so fewer bytes reach L2 than Algorithm 0 moves through outer memory")


def traffic_table(doc: dict, cache_control: str | None = None) -> list:
    """Rows of the recorded ncu study for printing: name, cache mode, MiB at DRAM and L2,
    model MiB, the two ratios, and whether each lies outside RATIO_BAND."""
    out = []
    for r in doc["runs"]:
        if cache_control is not None and r["cache_control"] != cache_control:
            continue
        out.append({"name": r["name"], "cache": r["cache_control"],
                    "dram_MiB": r["dram_bytes"] / 2**20, "l2_MiB": r["l2_bytes"] / 2**20,
                    "model_MiB": r["model_bytes"] / 2**20,
                    "dram_ratio": r.get("dram_ratio"), "l2_ratio": r.get("l2_ratio"),
                    "dram_reason": r.get("dram_reason", ""), "l2_reason": r.get("l2_reason", ""),
                    "time_ms": r.get("time_ms")})
    return out


def print_traffic_table(doc: dict, cache_control: str | None = None) -> None:
    """Print measured/model for every configuration (both levels)."""
    print(f"{'configuration':26s} {'cache':7s} {'DRAM MiB':>10s} {'L2 MiB':>10s} "
          f"{'model MiB':>10s} {'DRAM/model':>10s} {'L2/model':>9s}")
    for r in traffic_table(doc, cache_control):
        dr = "-" if r["dram_ratio"] is None else f"{r['dram_ratio']:.3f}"
        lr = "-" if r["l2_ratio"] is None else f"{r['l2_ratio']:.3f}"
        print(f"{r['name']:26s} {r['cache']:7s} {r['dram_MiB']:10.1f} {r['l2_MiB']:10.1f} "
              f"{r['model_MiB']:10.1f} {dr:>10s} {lr:>9s}")


def plot_traffic_bars(doc: dict, cache_control: str = "all", ax=None):
    """Measured DRAM and L2 bytes beside the model, one group of bars per configuration
    (log scale: the values span several orders of magnitude)."""
    import matplotlib.pyplot as plt
    rows = [r for r in doc["runs"] if r["cache_control"] == cache_control]
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 0.55 * len(rows) + 2), 4))
    x = np.arange(len(rows))
    w = 0.27
    ax.bar(x - w, [r["model_bytes"] / 2**20 for r in rows], w, label="two-level model",
           color="#999999")
    ax.bar(x, [max(r["dram_bytes"], 1) / 2**20 for r in rows], w, label="measured DRAM",
           color="#1f77b4")
    ax.bar(x + w, [max(r["l2_bytes"], 1) / 2**20 for r in rows], w, label="measured L2",
           color="#ff7f0e")
    ax.set_yscale("log")
    ax.set_xticks(x, [r["name"] for r in rows], rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("MiB moved (all heads)")
    ax.set_title(f"Measured vs model, ncu --cache-control {cache_control}")
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax


def plot_dram_vs_kv(doc: dict, cache_control: str = "all", ax=None):
    """Flash kernel (default tile): DRAM bytes / model and / L2-aware estimate against
    the size of K + V, with the L2 capacity marked: where K and V stop fitting, DRAM
    traffic rises toward the model."""
    import matplotlib.pyplot as plt
    rows = [r for r in doc["runs"] if r["cache_control"] == cache_control
            and r["impl"] == "flash" and (r.get("block_q"), r.get("block_k")) == (64, 64)
            and r.get("dram_ratio") is not None]
    rows.sort(key=lambda r: r["kv_bytes"])
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    kv = [r["kv_bytes"] / 2**20 for r in rows]
    for heads, marker in ((16, "o"), (1, "s")):
        sel = [r for r in rows if r["heads"] == heads]
        ax.plot([r["kv_bytes"] / 2**20 for r in sel], [r["dram_bytes"] / 2**20 for r in sel],
                marker=marker, label=f"measured DRAM, {heads} head(s)")
        ax.plot([r["kv_bytes"] / 2**20 for r in sel], [r["model_bytes"] / 2**20 for r in sel],
                marker=marker, ls=":", color="#999999",
                label=f"two-level model, {heads} head(s)")
        est = [r for r in sel if r.get("l2_aware_dram_bytes")]
        if est:
            ax.plot([r["kv_bytes"] / 2**20 for r in est],
                    [r["l2_aware_dram_bytes"] / 2**20 for r in est], marker=marker, ls="--",
                    label=f"L2-aware estimate, {heads} head(s)")
    l2 = doc["limits"]["l2_bytes"] / 2**20
    ax.axvline(l2, color="k", lw=0.8)
    ax.text(l2, ax.get_ylim()[1] if kv else 1, f" L2 = {l2:.0f} MiB", va="top", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("K + V of all heads (MiB)")
    ax.set_ylabel("MiB through DRAM")
    ax.set_title("Flash kernel (Br = Bc = 64): DRAM traffic vs K/V size")
    ax.legend(fontsize=7)
    ax.figure.tight_layout()
    return ax


# ---------------------------------------------------------------------------
# Evaluating one configuration (used by the widget; pure where it can be)
# ---------------------------------------------------------------------------

def describe_config(block_q: int, block_k: int, threads: int, tm: int, head_dim: int,
                    seq_len: int, limits: DeviceLimits, *, batch_heads: int = 1,
                    regs_per_thread=None) -> dict:
    """Everything the widget shows that needs no timing: the kernel's shared memory,
    the model's on-chip footprint, occupancy and its limiter, predicted traffic (over
    `batch_heads` heads, fp32). Raises ValueError (LaunchError) for invalid settings."""
    from .traffic import attention_flops, tile_footprint_bytes, tiled_traffic
    cfg = make_config(block_q, block_k, threads, tm, head_dim, regs_per_thread=regs_per_thread)
    check_launch(threads, cfg.shared_bytes, limits, regs_per_thread=regs_per_thread,
                 what=cfg.label + f" d={head_dim}")
    occ = occupancy(threads, cfg.shared_bytes, limits, regs_per_thread=regs_per_thread)
    traffic = tiled_traffic(seq_len, seq_len, head_dim, block_q, block_k,
                            bytes_per_element=FP32) * batch_heads
    return {"config": cfg, "occupancy": occ,
            "model_footprint_bytes": tile_footprint_bytes(block_q, block_k, head_dim,
                                                          bytes_per_element=FP32),
            "traffic": traffic,
            "flops": attention_flops(seq_len, seq_len, head_dim) * batch_heads,
            "kv_rereads": -(-seq_len // block_q)}


def _match(r, head_dim, block_q, block_k, threads, tm):
    return (r["head_dim"], r["block_q"], r["block_k"], r["threads"], r.get("tm")) == \
        (head_dim, block_q, block_k, threads, tm)


def recorded_row(head_dim, seq_len, block_q, block_k, threads, tm, doc=None):
    """The recorded sweep row for this configuration at `seq_len` (the fastest `unroll`
    when several were timed), or None."""
    doc = load_sweep() if doc is None else doc
    if doc is None:
        return None
    hits = [r for r in doc["rows"] if r["seq_len"] == seq_len
            and _match(r, head_dim, block_q, block_k, threads, tm)]
    return max(hits, key=lambda r: r.get("tflops") or 0.0) if hits else None


def recorded_regs(head_dim, block_q, block_k, threads, tm, doc=None):
    """Registers per thread recorded by the sweep for this configuration, or None."""
    doc = load_sweep() if doc is None else doc
    if doc is None:
        return None
    for r in doc["rows"]:
        if _match(r, head_dim, block_q, block_k, threads, tm) and r.get("regs_per_thread"):
            return r["regs_per_thread"]
    return None


def cpu_time(block_q: int, block_k: int, seq_len: int, head_dim: int, *, batch_heads: int = 2,
             repeats: int = 3, seed: int = 0) -> dict:
    """Time flashcourse.cpu.forward (Numba, CPU) for real at one tile shape.

    Returns {median_ms, gflops, rel_err}; rel_err of the output against
    flashcourse.reference (float64). Keep seq_len small (<= 512): a call then takes
    well under a second (the first call also compiles, ~1 s, and is not timed).
    """
    from . import cpu
    from .reference import attention
    from .traffic import attention_flops
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((batch_heads, seq_len, head_dim)).astype(np.float32)
               for _ in range(3))                                   # (BH, N, d)
    fn = lambda: cpu.forward(q, k, v, block_q=block_q, block_k=block_k)
    times = time_host(fn, warmup=1, repeats=repeats, budget_s=1.0)
    ms = statistics.median(times)
    o, _ = fn()
    ref, _ = attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    err = float(np.linalg.norm(o - ref) / np.linalg.norm(ref))
    flops = attention_flops(seq_len, seq_len, head_dim) * batch_heads
    return {"median_ms": ms, "gflops": flops / (ms * 1e-3) / 1e9, "rel_err": err}


def cpu_sweep(block_sizes=(16, 32, 64, 128), *, seq_len: int = 256, head_dim: int = 64,
              progress: bool = True) -> list:
    """Tune flashcourse.cpu.forward for real: one row per (block_q, block_k) with its
    median time (ms), GFLOP/s and relative error. Small seq_len keeps each timing < 1 s."""
    rows = []
    bar = Progress(len(block_sizes) ** 2, "CPU sweep", show=progress)
    for bq in block_sizes:
        for bk in block_sizes:
            t = cpu_time(bq, bk, seq_len, head_dim)
            rows.append({"block_q": bq, "block_k": bk, "seq_len": seq_len,
                         "head_dim": head_dim, **t})
            bar.update(f"Br={bq} Bc={bk}: {t['gflops']:.1f} GFLOP/s")
    return rows


def gpu_available() -> bool:
    """True when Numba's CUDA target is a real GPU (not the simulator)."""
    from .gpu import using_simulator
    if using_simulator():
        return False
    try:
        from numba import cuda
        return bool(cuda.is_available())
    except Exception:
        return False


def gpu_time(block_q: int, block_k: int, threads: int, tm: int, seq_len: int, head_dim: int,
             *, batch_heads: int = 32, repeats: int = 10) -> dict:
    """Time one launch configuration of the CUDA flash kernel on this GPU (a row dict)."""
    cfg = make_config(block_q, block_k, threads, tm, head_dim)
    limits = DeviceLimits.from_device()
    return time_config(cfg, seq_len, runner=make_gpu_runner, batch_heads=batch_heads,
                       warmup=2, repeats=repeats, limits=limits)


def _fmt_bytes(n) -> str:
    from .memory import format_bytes
    return format_bytes(int(n))


def widget_report(block_q, block_k, threads, tm, head_dim, seq_len, *, limits=None,
                  measure: bool = True, cpu_seq_len: int = 256, doc=None) -> str:
    """The widget's HTML for one setting. Never raises: invalid settings give a message."""
    esc = html.escape
    try:
        if doc is None:
            doc = load_sweep()
        if limits is None:
            limits = (DeviceLimits.from_device() if measure and gpu_available()
                      else recorded_limits())
        regs = recorded_regs(head_dim, block_q, block_k, threads, tm, doc) if doc else None
        info = describe_config(block_q, block_k, threads, tm, head_dim, seq_len, limits,
                               regs_per_thread=regs)
    except (ValueError, TypeError) as exc:          # LaunchError is a ValueError
        return f'<p style="color:#b35900"><b>Cannot launch.</b> {esc(str(exc))}</p>'
    except Exception as exc:
        return f'<p style="color:#b35900"><b>Error.</b> {esc(type(exc).__name__)}: ' \
               f'{esc(str(exc))}</p>'
    cfg, occ = info["config"], info["occupancy"]
    regs_txt = (f"{regs} (recorded on the H200)" if regs else
                "unknown until compiled on a GPU: register limit not applied")
    optin = "needs the opt-in beyond 48 KiB" if cfg.shared_bytes > 49152 else "fits in 48 KiB"
    lines = [
        f"<b>{esc(cfg.label)}, d={head_dim}, N={seq_len}</b> (limits: {esc(limits.name)})",
        f"per thread: a {cfg.micro_q} x {cfg.micro_k} score micro-tile and a "
        f"{cfg.micro_q} x {cfg.micro_d} output micro-tile in registers",
        f"shared memory per block (Q, K, V, P tiles, fp32): {esc(_fmt_bytes(cfg.shared_bytes))}"
        f" of {limits.smem_per_block_optin:,} B allowed ({optin})",
        f"model's on-chip footprint (Q, K, V, S tiles, accumulator, m, l): "
        f"{esc(_fmt_bytes(info['model_footprint_bytes']))}",
        f"registers per thread: {esc(str(regs_txt))}",
        f"occupancy: {esc(occ.describe())}",
        f"model traffic per head: {esc(_fmt_bytes(info['traffic'].total_bytes))} "
        f"(K and V read {info['kv_rereads']} times, once per query block)",
    ]
    if measure:
        try:
            if gpu_available():
                t = gpu_time(block_q, block_k, threads, tm, seq_len, head_dim)
                if t["status"] == "ok":
                    lines.append(f"measured on this GPU (B x H = 32): {t['median_ms']:.3f} ms, "
                                 f"{t['tflops']:.2f} TFLOP/s, rel. error {t['rel_err']:.1e}")
                else:
                    lines.append(f"measurement failed: {esc(t['error'])}")
            else:
                t = cpu_time(block_q, block_k, cpu_seq_len, head_dim)
                lines.append(f"no GPU: flashcourse.cpu.forward at N={cpu_seq_len} with Br, Bc "
                             f"as chosen: {t['median_ms']:.2f} ms, {t['gflops']:.2f} GFLOP/s, "
                             f"rel. error {t['rel_err']:.1e}")
        except Exception as exc:
            lines.append(f"timing failed: {esc(type(exc).__name__)}: {esc(str(exc))[:300]}")
    rec = recorded_row(head_dim, seq_len, block_q, block_k, threads, tm, doc) if doc else None
    if rec is not None and rec.get("tflops"):
        lines.append(f"recorded on {esc(str(doc['environment'].get('gpu')))} (B x H = "
                     f"{doc['problem'].get('batch_heads')}): {rec['median_ms']:.3f} ms, "
                     f"{rec['tflops']:.2f} TFLOP/s")
    elif rec is not None:
        lines.append(f"recorded on the H200: failed ({esc(rec.get('error', ''))})")
    elif doc is None:
        lines.append("no recorded H200 sweep exists yet (benchmarks/results/"
                     "h200_tuning_sweep.json)")
    else:
        lines.append(f"this configuration was not timed at N={seq_len} in the recorded sweep")
    return "<br>".join(lines)


def tuning_widget(head_dim: int = 64, seq_len: int = 4096, *, measure: bool = True,
                  cpu_seq_len: int = 256):
    """Dropdowns for block_q, block_k, threads, tm (rows per thread), d and N, and a
    report that updates on every change (see `widget_report`). Returns the widget box;
    `box.controls` holds the dropdowns and `box.report` the HTML output."""
    import ipywidgets as w
    opts = [8, 16, 32, 64, 128, 256]
    bq = w.Dropdown(options=opts, value=64, description="block_q Br")
    bk = w.Dropdown(options=opts, value=64, description="block_k Bc")
    th = w.Dropdown(options=[32, 64, 128, 256, 512, 1024, 2048], value=256,
                    description="threads")
    tmw = w.Dropdown(options=[1, 2, 4, 8, 16], value=4, description="tm (rows/thread)")
    hd = w.Dropdown(options=[32, 64, 96, 128, 256], value=head_dim, description="d")
    sl = w.Dropdown(options=[1024, 4096, 16384], value=seq_len, description="N")
    out = w.HTML()

    def refresh(_=None):
        out.value = widget_report(bq.value, bk.value, th.value, tmw.value, hd.value, sl.value,
                                  measure=measure, cpu_seq_len=cpu_seq_len)

    for c in (bq, bk, th, tmw, hd, sl):
        c.observe(refresh, names="value")
    refresh()
    box = w.VBox([w.HBox([bq, bk, th]), w.HBox([tmw, hd, sl]), out])
    box.refresh = refresh
    box.controls = {"block_q": bq, "block_k": bk, "threads": th, "tm": tmw, "head_dim": hd,
                    "seq_len": sl}
    box.report = out
    return box


__all__ = [n for n in dir() if not n.startswith("_") and n not in (
    "annotations", "asdict", "dataclass", "replace", "lru_cache", "html", "json", "math", "os",
    "statistics", "sys", "time", "np", "Path")]
