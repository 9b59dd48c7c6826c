"""Launch configurations of the flash kernel: what a configuration is, which ones can launch.

A launch configuration of the flash kernel (`flashcourse.cuda.cuda_core.flash`) is

    block_q  Br   query rows per tile (positions)
    block_k  Bc   key rows per tile (positions)
    threads       threads per block
    tm            query rows per thread: each thread owns a TM x TN micro-tile of the
                  (Br, Bc) score tile and a TM x TD micro-tile of the output, in registers

`make_config` fills in the micro-tile and shared-memory footprint from the kernel's own
layout; `enumerate_configs` splits a grid of them into launchable and rejected (with the
limit that rejects each, `flashcourse.limits`); `describe_config` gathers what the tuning
widget shows without timing, and `launch_problem` says in a few words why one cannot
launch (the tuning menus mark such options with it). The untuned and tuned defaults
live beside the kernel (`flashcourse.cuda.cuda_core.flash.untuned_config`, `default_config`);
timing them is `flashcourse.sweep`.

Any GPU: each kernel family chooses its default configuration from a device's limits
with one pure function beside its kernel (`flash.choose_config`,
`backward_kernels.choose_tiles`, `textbook.choose_block`; dense and the simple backward
have fixed shapes that fit every preset), and says which launches that makes
(`registry` entries' `launches`). `default_launches` gathers them for one GPU;
`preset_table` is the table of the README's "Which GPUs".
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from ._checks import check_block, check_sizes
from .geometry import ceil_div
from .limits import DeviceLimits, LaunchError, check_launch, occupancy

#: Bytes per fp32 element: the course's CUDA kernels compute and store fp32.
FP32 = 4


@dataclass(frozen=True)
class LaunchConfig:
    """One launch configuration of `flashcourse.cuda.cuda_core.flash`'s kernel.

    block_q (Br) and block_k (Bc): tile rows (positions); threads: per block;
    tm: query rows per thread; head_dim: d. Derived from the kernel's own plan:
    micro_q x micro_k = TM x TN scores per thread, micro_d = TD output columns per
    thread, shared_bytes per block (bytes). regs_per_thread: from the compiled kernel,
    None until compiled on a GPU. unroll: inner-product steps the kernel writes per loop
    iteration (a code-generation choice of flash.make_flash_kernel; None = its default).

    (The kernel's own compile-time arrangement of one such configuration, with the
    padded head dimension, is `flashcourse.cuda.cuda_core.flash.FlashConfig`.)
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
    """(TM, TN, TD, shared_bytes) of flashcourse.cuda.cuda_core.flash for this shape on a GPU
    (warp-shuffle variant). Raises ValueError naming the argument when the kernel
    cannot be arranged this way (e.g. threads not a multiple of block_q / tm).

    Only the arrangement is checked (`flash.layout`); whether it fits a device is
    `check_launch`'s job, so that configurations can be judged against any DeviceLimits.
    """
    from .cuda.cuda_core import flash
    block_q, block_k, threads, tm, head_dim = check_sizes(
        block_q=block_q, block_k=block_k, threads=threads, tm=tm, head_dim=head_dim)
    cfg = flash.layout(head_dim, block_q, block_k, threads, tm, shuffle=True)
    return cfg.tm, cfg.tn, cfg.td, cfg.shared_bytes


def make_config(block_q: int, block_k: int, threads: int, tm: int, head_dim: int, *,
                regs_per_thread: int | None = None, unroll: int | None = None) -> LaunchConfig:
    """A LaunchConfig with its micro-tile and shared-memory footprint filled in."""
    br, bc = check_block(block_q, "block_q"), check_block(block_k, "block_k")
    t, tm = check_block(threads, "threads"), check_block(tm, "tm")
    d = check_block(head_dim, "head_dim")
    if unroll is not None:
        unroll = check_block(unroll, "unroll")
    mq, mk, md, smem = kernel_plan(br, bc, t, tm, d)
    return LaunchConfig(br, bc, t, tm, d, mq, mk, md, smem, regs_per_thread, unroll)


def valid_tms(block_q: int, block_k: int, threads: int, head_dim: int,
              candidates=(1, 2, 4, 8, 16)) -> list:
    """The rows-per-thread values for which the kernel can arrange this tile (the sizes:
    whole numbers >= 1, an error naming them otherwise)."""
    block_q, block_k, threads, head_dim = check_sizes(
        block_q=block_q, block_k=block_k, threads=threads, head_dim=head_dim)
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
    None when no tm fits. (The kernel's own rule, `flashcourse.cuda.cuda_core.flash.square_tm`.)"""
    from .cuda.cuda_core import flash
    block_q, block_k, threads, head_dim = check_sizes(
        block_q=block_q, block_k=block_k, threads=threads, head_dim=head_dim)
    return flash.square_tm(head_dim, block_q, block_k, threads)


def enumerate_configs(head_dim: int, limits: DeviceLimits, *,
                      block_qs=(32, 64, 128), block_ks=(32, 64, 128),
                      threads=(128, 256), tms=None, regs=None, optin=True, unroll=None):
    """Split the grid of (block_q, block_k, threads, tm) into launchable and rejected.

    tms: None picks one tm per (block_q, block_k, threads) (`square_tm`); a tuple tries
    each. regs: None, a callable LaunchConfig -> registers per thread (e.g. from the
    compiled kernel), or a dict keyed by LaunchConfig.key(). unroll: passed to every config.
    Returns (ok, rejected): ok is a list of LaunchConfig; rejected a list of
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


def launch_problem(block_q: int, block_k: int, threads: int, tm: int, head_dim: int,
                   limits: DeviceLimits, *, regs_per_thread: int | None = None) -> str | None:
    """None when this configuration can launch on `limits`, else why not, in a few words
    (a menu label: `widgets.tuning` marks each option that cannot launch with it).

    The same checks as `describe_config`, in the same order as the tuning report: threads
    against the per-block limit, the kernel's layout (`make_config`), then
    `check_launch` and `occupancy`. A limit reads 'threads per block: 2,048 > 1,024'; a
    layout rule is the kernel's own message without its parenthesised details.

    >>> from flashcourse.limits import H200_LIMITS
    >>> launch_problem(64, 64, 2048, 4, 64, H200_LIMITS)
    'threads per block: 2,048 > 1,024'
    >>> launch_problem(64, 64, 256, 4, 64, H200_LIMITS) is None
    True
    """
    try:
        check_launch(threads, 0, limits)
        cfg = make_config(block_q, block_k, threads, tm, head_dim,
                          regs_per_thread=regs_per_thread)
        check_launch(threads, cfg.shared_bytes, limits, regs_per_thread=regs_per_thread)
        occupancy(threads, cfg.shared_bytes, limits, regs_per_thread=regs_per_thread)
    except LaunchError as exc:
        unit = "" if exc.unit in exc.limit else f" {exc.unit}"
        return f"{exc.limit}: {exc.asked:,} > {exc.available:,}{unit}"
    except ValueError as exc:                  # the kernel's layout rules (flash.layout)
        return re.sub(r"\s*\(threads=.*\)$|\s*\(threads=\d+ / \(.*\)\)$", "",
                      str(exc)).strip()
    return None


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
            "kv_rereads": ceil_div(seq_len, block_q)}


def default_launches(limits: DeviceLimits, head_dim: int, tq: int = 4096, tk: int = 4096,
                     batch_heads: int = 32) -> dict:
    """{(direction, kernel name): its launches (tuple of `limits.Launch`) or the error
    that refuses it (LaunchError, or RuntimeError/ValueError naming the compute
    capability or head dim it needs)} with each registered kernel's default
    configuration on a GPU with `limits` (no GPU needed)."""
    from .cuda.registry import BACKWARD, FORWARD
    out = {}
    for spec in list(FORWARD.values()) + list(BACKWARD.values()):
        try:
            out[spec.direction, spec.name] = spec.launches(head_dim, tq, tk, batch_heads,
                                                           limits)
        except (ValueError, RuntimeError) as exc:
            out[spec.direction, spec.name] = exc
    return out


def preset_table(head_dims=(64, 128, 256)) -> str:
    """A markdown table: per GPU preset (`limits.PRESETS`), its compute capability and
    shared memory per block, and the default tiles of the flash forward (Br x Bc, threads)
    and of the fast backward (Br x Bc, TY x TX threads) at each head dim."""
    from .cuda.cuda_core import flash
    from .cuda.gradients import backward_kernels
    from .limits import PRESETS
    head = ["GPU", "CC", "shared/block"] + [f"flash d={d}" for d in head_dims] + \
        [f"backward d={d}" for d in head_dims]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, lim in PRESETS.items():
        cells = [name, "{}.{}".format(*lim.compute_capability),
                 f"{lim.smem_per_block_optin // 1024} KiB"]
        for d in head_dims:
            br, bc, t, tm = flash.default_config(d, lim)
            cells.append(f"{br}x{bc}, {t}")
        for d in head_dims:
            br, bc, ty, tx = backward_kernels.default_tiles(d, lim)
            cells.append(f"{br}x{bc}, {ty}x{tx}")
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
