"""hopper.backward: the host side of the wgmma backward (`backward_kernels.py`).

It runs inside the tensor-core backward's host path (`gradients/tc_backward.py`) as its
pipeline "wgmma": the same word arrays in, the same D pre-pass before it (L = lse log2(e),
D = rowsum(dO o O), dQ zeroed), the same casts of the float32 gradients after it, the
same checks of a checked call:

    from flashcourse.cuda import backward
    dq, dk, dv = backward(q16, k16, v16, o16, lse, do16, kernel="tensor_core",
                          pipeline="wgmma")               # compute capability 9.0
    dq, dk, dv = backward(..., kernel="tensor_core", pipeline="wgmma", warpgroups=2)
    dq, dk, dv = backward(q16, k16, v16, o16, lse, do16, kernel="hopper")   # the same

fp16 and bf16 only (3xTF32 stays on mma.sync), dQ by atomics only (deterministic=True is
refused by name), head dim up to 128. On Numba's CUDA simulator it runs through wgmma's
twins (`ptx/wgmma.py`), which is how `make test` checks it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...geometry import ceil_div
from ...gpu import using_simulator
from ...limits import check_launch
from ..common._launch import check_registers, flat, launch
from .backward_kernels import BLOCK_Q, WG_KEYS, layout
from .host import check_capability

#: warpgroups per block by default (64 keys each)
DEFAULT_WARPGROUPS = 2
PRECISIONS = ("fp16", "bf16")


@dataclass(frozen=True)
class HopperBackwardConfig:
    """One variant: precision, warpgroups (64 keys each), head_dim D (d rounded up to 16),
    sums (the column sums of P and dS of a checked call)."""

    precision: str
    warpgroups: int
    head_dim: int
    sums: bool = False
    pipeline: str = "wgmma"

    @property
    def threads(self):
        return 128 * self.warpgroups

    @property
    def block_k(self):
        return WG_KEYS * self.warpgroups

    @property
    def block_q(self):
        return BLOCK_Q

    @property
    def shared_bytes(self):
        return layout(self.head_dim, self.warpgroups)["END"]


def plan(precision: str, d: int, warpgroups=None, sums: bool = False) -> HopperBackwardConfig:
    """Check one configuration (ValueError naming the argument)."""
    if precision not in PRECISIONS:
        raise ValueError(f"pipeline='wgmma' computes in fp16 or bf16, got precision="
                         f"{precision!r} (3xtf32 runs on mma.sync: pipeline 'async')")
    warpgroups = DEFAULT_WARPGROUPS if warpgroups is None else warpgroups
    if warpgroups not in (1, 2):
        raise ValueError(f"warpgroups must be 1 or 2 for pipeline='wgmma', got "
                         f"{warpgroups!r}")
    if d > 128:
        raise ValueError(f"head dim d must be at most 128 for pipeline='wgmma', got d={d}")
    D = ceil_div(d, 16) * 16           # so each warpgroup's D / 2 or D columns of dQ are
    cfg = HopperBackwardConfig(precision, int(warpgroups), D, bool(sums))   # whole n8 tiles
    check_launch(cfg.threads, cfg.shared_bytes, what="hopper backward kernel")
    return cfg


@lru_cache(maxsize=None)
def kernel(cfg: HopperBackwardConfig):
    from .backward_kernels import make_backward_kernel
    return make_backward_kernel(cfg.precision, cfg.head_dim, cfg.warpgroups, cfg.sums)


_SIG: list = []


def signature():
    if not _SIG:
        from numba import float32, int32, types, uint32
        w1 = types.Array(uint32, 1, "C")
        f1 = types.Array(float32, 1, "C")
        f3 = types.Array(float32, 3, "C")
        _SIG.append((w1, w1, w1, w1, f3, f1, f3, f3, int32, int32, int32, float32, float32,
                     int32, int32, f1, f1))
    return _SIG[0]


def run(qw, kw, vw, dow, ld, dq, dk, dv, tail, precision: str, psum=None, dsum=None,
        warpgroups=None) -> HopperBackwardConfig:
    """Launch after the pre-pass: qw, dow (BH, Tq, D/2), kw, vw (BH, Tk, D/2) words of two
    16-bit values; ld (2, BH, Tq padded) float32 from the pre-pass; dq (BH, Tq, d) float32
    (zeroed), dk, dv (BH, Tk, d) float32; tail = (tq, tk, d, scale log2(e), scale, causal,
    tk - tq) as int32/float32; psum, dsum (BH, Tq) float32 or None."""
    check_capability()
    tk, d = int(tail[1]), int(tail[2])
    cfg = plan(precision, d, warpgroups, psum is not None)
    kern = kernel(cfg)
    sig = signature()
    if not using_simulator():
        check_registers("hopper backward kernel", kern.compile(sig), cfg.threads)
    if psum is None:
        psum = dsum = dq                # never written (sums=False): any float32 array
    bh = qw.shape[0]
    launch(kern, sig, (ceil_div(tk, cfg.block_k), bh), cfg.threads, cfg.shared_bytes,
           (flat(qw), flat(kw), flat(vw), flat(dow), ld, flat(dq), dk, dv) + tuple(tail)
           + (flat(psum), flat(dsum)))
    return cfg


def default_precision(dtype) -> str:
    """fp16 for float16 arrays; bf16 for uint16 arrays of bf16 bits and for float32 (bf16
    keeps float32's range), as the Hopper forward."""
    return "fp16" if np.dtype(dtype) == np.float16 else "bf16"


def compute_type(options: dict, dtype) -> str:
    """What the checks of `flashcourse.cuda.backward` allow rounding errors of: float16
    inputs are multiplied exactly ("float32"); bf16 rounds float32 inputs ("bfloat16")."""
    precision = options.get("precision") or default_precision(dtype)
    return "float32" if precision == "fp16" else "bfloat16"


def resolve_precision(dtype, precision=None) -> str:
    """The precision of a `backward(..., kernel="hopper")` call (ValueError naming it)."""
    precision = default_precision(dtype) if precision is None else precision
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} for the hopper backward, "
                         f"got {precision!r} (3xtf32 runs on kernel='tensor_core')")
    return precision


def launches(d: int, tq: int, tk: int, bh: int, limits):
    """The launches `backward(..., kernel="hopper")` makes with the default tiles on a GPU
    with `limits`: the D pre-pass and the kernel."""
    from ...limits import Launch
    from ..gradients import tc_backward_passes as passes
    check_capability(limits)
    cfg = plan("fp16", d)
    return (Launch("hopper backward D pass", passes.delta_grid(tq, bh), passes.PASS_THREADS,
                   0, config=""),
            Launch(f"hopper backward d={d}", (ceil_div(tk, cfg.block_k), bh), cfg.threads,
                   cfg.shared_bytes, config=f"Br={cfg.block_q} Bc={cfg.block_k} "
                                            f"warpgroups={cfg.warpgroups}"))
