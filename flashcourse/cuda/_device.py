"""Device functions shared by several kernels (imported, never copied).

Each kernel builder calls these while it builds its kernel, so the functions compile into
that kernel exactly as if they were written inside it. Kernel versions themselves stay in
their own modules, side by side.
"""

from __future__ import annotations

import math

from numba import cuda

from ..constants import F0, LN2_F, NEG_INF
from ..gpu import using_simulator


def _inlined(fn):
    """`fn` as a device function that a GPU build always inlines into the kernel calling it
    (as if written there); the simulator's jit has no `forceinline` and needs none."""
    if using_simulator():
        return cuda.jit(device=True)(fn)
    return cuda.jit(device=True, forceinline=True)(fn)


def exp2_log2(simulator: bool | None = None):
    """(exp2, log2) on float32: the hardware's math.exp2 / math.log2 where Numba has them
    on a GPU; on the simulator (or a Python without math.exp2, 3.10) exp(x ln 2) and
    log(x) / ln 2. simulator: build for the simulator; None = `using_simulator()`."""
    if simulator is None:
        simulator = using_simulator()
    if simulator or not hasattr(math, "exp2"):
        @cuda.jit(device=True)
        def exp2(x):
            return math.exp(x * LN2_F)

        @cuda.jit(device=True)
        def log2(x):
            return math.log(x) / LN2_F
        return exp2, log2
    return math.exp2, math.log2


@_inlined
def reset_state(acc, n_acc, m, l, n_rows):
    """The empty online-softmax state of a thread: acc[:n_acc] = 0 (unnormalised O),
    m[:n_rows] = -inf (running max), l[:n_rows] = 0 (running sum). Inlined into the
    kernel, with its loop counts as the kernel's constants."""
    for i in range(n_acc):
        acc[i] = F0
    for i in range(n_rows):
        m[i] = NEG_INF
        l[i] = F0


@_inlined
def visible_key_blocks(tk, causal, q_end, BC):
    """Key blocks of Bc keys that a query block sees: all ceil(Tk / Bc), or with a causal
    mask those up to its last row's diagonal (q_end = q0 + Br + Tk - Tq keys); 0 if none."""
    kend = tk
    if causal != 0:
        kend = min(tk, q_end)
    return (kend + BC - 1) // BC if kend > 0 else 0
