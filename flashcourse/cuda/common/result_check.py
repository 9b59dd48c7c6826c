"""result_check: the forward's result rule for results that stay on the device.

numpy inputs get their results checked on the host by `flashcourse._guards.forward_result`
(a row that sees a key and has finite inputs must get a finite o and lse; a NaN/inf input
gives NaN rows, never the empty row's o = 0, lse = -inf). Results of device-array inputs
stay on the device, and reading them back would cost a copy and a host sync on every
call, so by default they are not checked. `forward(..., check=True)` and
`decode(..., check=True)` call `check_result`, which applies the same rule:

1. one small kernel, `scan_rows`, reads o and lse once on the device (R (d e + 4) bytes
   for R = B H Tq rows, e bytes per element of o) and raises a flag if a row that sees a
   key has a non-finite lse or o element; the flag (4 bytes) is the only copy back, and
   that copy is the one host sync;
2. only when the flag is up: q, k, v, o and lse are copied to the host and
   `forward_result` runs there: it raises the overflow error (scores beyond float32), or
   with allow_nonfinite=True marks the rows that see a NaN/inf as NaN (written back to
   the device arrays); without allow_nonfinite a NaN/inf input is named, as for numpy.

A row that sees no key (causal, Tq > Tk) is not scanned: its o = 0, lse = -inf is right.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from ..._checks import check_array
from ..._guards import forward_result

#: Threads per block of `scan_rows`, and the most blocks it launches (a grid-stride loop
#: covers the rest).
SCAN_THREADS = 256
SCAN_MAX_BLOCKS = 1024


def scan_rows(o, lse, tq, first, flag):
    """flag[0] = 1 if a row r of o (R, d) / lse (R,) with r % Tq >= first (the rows that
    see a key: first = max(0, Tq - Tk) when causal, else 0) has a non-finite value.
    One thread per element of o, in a grid-stride loop; compiled by `scan_kernel`."""
    n_rows, d = o.shape[0], o.shape[1]
    start = cuda.grid(1)
    step = cuda.gridsize(1)
    for e in range(start, n_rows * d, step):
        r = e // d
        c = e - r * d
        if r % tq >= first:
            if not math.isfinite(float32(o[r, c])):
                flag[0] = 1
            if c == 0 and not math.isfinite(float32(lse[r])):
                flag[0] = 1


@lru_cache(maxsize=None)
def scan_kernel():
    """`scan_rows` as a kernel (built on first use; compiled per dtype of o)."""
    return cuda.jit(scan_rows)


def _shape(x) -> tuple:
    """x.shape as a tuple of ints (the simulator's shape objects take no negative index)."""
    return tuple(int(n) for n in x.shape)


def rows_finite(o, lse, tq: int, tk: int, causal: bool) -> bool:
    """True when every row of the device results o (..., Tq, d), lse (..., Tq) that sees a
    key has a finite lse and a finite o row: one launch of `scan_rows`, one 4-byte copy
    back (a host sync)."""
    shape = _shape(o)
    d, n_rows = shape[-1], int(np.prod(shape[:-1]))
    first = max(0, tq - tk) if causal else 0
    flag = cuda.to_device(np.zeros(1, np.int32))
    blocks = max(1, min(SCAN_MAX_BLOCKS, -(-n_rows * d // SCAN_THREADS)))
    scan_kernel()[blocks, SCAN_THREADS](o.reshape(n_rows, d), lse.reshape(n_rows),
                                        np.int32(tq), np.int32(first), flag)
    return int(flag.copy_to_host()[0]) == 0


def check_result(q, k, v, o, lse, *, causal: bool, scale: float,
                 allow_nonfinite: bool = False, kv_group: int = 1, advice: str = "") -> None:
    """Apply `forward_result` to device results (the module docstring says how).

    q (..., Tq, d), k, v (..., Tk, d) and o (..., Tq, d), lse (..., Tq) are device
    arrays (k, v with one head per kv_group query heads for grouped-query attention).
    Raises ValueError as `forward_result` does; with allow_nonfinite=True it writes NaN
    into the rows of o and lse that see a NaN/inf input. Cheap when the results are
    finite (one pass over o and lse, one host sync); a full copy to the host otherwise.
    """
    tq, tk = _shape(q)[-2], _shape(k)[-2]
    if rows_finite(o, lse, tq, tk, causal):
        return
    qh, kh, vh = (x.copy_to_host() for x in (q, k, v))
    if not allow_nonfinite:
        for name, x in (("q", qh), ("k", kh), ("v", vh)):
            check_array(x, f"{name} (a device array)")
    oh, lh = o.copy_to_host(), lse.copy_to_host()
    o2, l2 = forward_result(qh, kh, vh, oh, lh, causal, compute="float32",
                            allow_nonfinite=allow_nonfinite, scale=scale, advice=advice,
                            kv_group=kv_group)
    if o2 is not oh:
        o.copy_to_device(np.ascontiguousarray(o2, dtype=o.dtype))
        lse.copy_to_device(np.ascontiguousarray(l2, dtype=lse.dtype))
