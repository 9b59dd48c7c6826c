"""flashcourse.cuda: Numba CUDA forward kernels, from the textbook version to a fast one.

Kernels, side by side (each module's header says the idea, the bytes it moves,
the expected cost and what limits it):

    dense     the unfused baseline: S to global memory, softmax kernel, then P V
    textbook  one thread per query row, 32 x 32 tiles (flash-attention-minimal style)
    flash     the fast one: a block of many threads per query block, coalesced
              loads, register-tiled micro-tiles, exp2, online softmax, causal skipping

    from flashcourse.cuda import forward
    o, lse = forward(q, k, v, kernel="flash", causal=True)

Without a GPU every kernel runs on Numba's CUDA simulator (slow: tiny sizes only);
`import flashcourse` selects it before Numba loads, and `forward` says so once.
"""

from __future__ import annotations

import numpy as np

from . import dense, flash, textbook
from ._launch import SIMULATOR_MESSAGE, ceil_div, finish, prepare, simulator_note, using_simulator
from .flash import FlashConfig, make_flash_kernel
from .backward_kernels import backward  # noqa: F401  (gradients; kernels in backward_kernels.py)

KERNELS = ("textbook", "flash", "dense")


def forward(q, k, v, *, kernel: str = "flash", block_q: int | None = None,
            block_k: int | None = None, causal: bool = False, scale: float | None = None,
            allow_nonfinite: bool = False, threads: int | None = None, tm: int | None = None):
    """Exact attention forward on the GPU (or the simulator), fp32 compute.

    Args:
        q: (..., Tq, d); k, v: (..., Tk, d). numpy arrays (float16/32/64; converted
            to float32 for the kernels; o comes back in the input dtype) or float32
            C-contiguous Numba device arrays (results stay on the device).
        kernel: "flash" (default), "textbook" or "dense".
        block_q, block_k: Br, Bc for "flash" (defaults chosen per d); "textbook"
            uses block_q for its square tiles (block_k must equal it or be None);
            "dense" ignores them.
        causal: bottom-right aligned mask (query i sees key j iff j <= i + Tk - Tq).
        scale: score scale, default 1/sqrt(d).
        allow_nonfinite: accept NaN/inf in numpy inputs.
        threads, tm: "flash" only: threads per block and query rows per thread.

    Returns:
        o (..., Tq, d) and lse (..., Tq) natural-log logsumexp per row (float32;
        float64 for float64 numpy input); a row with no visible key gives o = 0,
        lse = -inf.

    Raises:
        ValueError/TypeError naming the argument for bad input, and ValueError
        naming the limit and the amounts for a configuration that cannot launch.
    """
    from numba import cuda
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    simulator_note()
    qf, kf, vf, lead, tq, tk, d, scale, causal, on_device, out_dtype, lse_dtype = prepare(
        q, k, v, causal, scale, allow_nonfinite)
    bh = qf.shape[0]
    o = cuda.device_array((bh, tq, d), np.float32)
    lse = cuda.device_array((bh, tq), np.float32)
    if kernel == "flash":
        flash.run(qf, kf, vf, o, lse, tq, tk, d, scale, causal, block_q=block_q,
                  block_k=block_k, threads=threads, tm=tm)
    elif kernel == "textbook":
        if block_k is not None and block_k != block_q:
            raise ValueError(f"block_k must equal block_q for the textbook kernel "
                             f"(square tiles), got block_q={block_q}, block_k={block_k}")
        textbook.run(qf, kf, vf, o, lse, tq, tk, d, scale, causal, block=block_q)
    else:
        dense.run(qf, kf, vf, o, lse, tq, tk, d, scale, causal)
    return finish(o, lse, lead, tq, d, on_device, out_dtype, lse_dtype)


def extra_device_bytes(kernel: str, bh: int, tq: int, tk: int) -> int:
    """Device memory a kernel allocates beyond q, k, v, o and lse (bytes)."""
    if kernel == "dense":
        return dense.extra_bytes(bh, tq, tk)
    return 0                             # textbook, flash: nothing beyond lse (Tq x 4 B per head)


__all__ = ["forward", "KERNELS", "make_flash_kernel", "FlashConfig", "extra_device_bytes",
           "using_simulator", "SIMULATOR_MESSAGE", "dense", "textbook", "flash", "ceil_div"]
