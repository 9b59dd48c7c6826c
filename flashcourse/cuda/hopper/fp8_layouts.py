"""fp8_layouts: where the FP8 Hopper forward keeps P and V, in numpy (no GPU needed).

FP8 `wgmma` (PTX ISA, "wgmma.mma_async", .atype .e4m3: shape m64nNk32) differs from the
16-bit one in two ways that shape the FP8 forward (`fp8_kernels.py`):

1. Both operands in shared memory must be **K-major**: the .e4m3 form has no imm-trans-b
   flag. For S = Q K^T that is what Q and K already are (d contiguous), but in O += P V
   the contracted index is the key, so V must be stored with its keys contiguous: V^T,
   D rows of keys. The course transposes V once per call (`fp8_kernels.make_transpose`)
   rather than in every query block's loop.

2. P comes from registers, and the FP8 A fragment is not the accumulator's layout. One
   warp's 16 x 32 A tile (PTX ISA, "Register fragment layout for matrix A" of m64nNk32,
   the layout of mma.m16n8k32 per warp), lane = 4 g + t:

        register r (0..3), byte b (0..3):  row = g + 8 (r % 2),  k = 4 t + b + 16 (r // 2)

   while S's accumulator (the m16n8 C layout per 8 columns) gives the same lane, for the
   32 keys of one k32 step, element i (0..15) of the step at

        row = g + 8 ((i % 4) // 2),  key = 8 (i // 4) + 2 t + i % 2

   Row for row they agree (lane g holds rows g and g + 8 in both), but a lane holds keys
   {2t, 2t+1, 2t+8, 2t+9, ...} where the instruction expects k = {4t, ..., 4t+3, ...}.
   Nothing needs to move between lanes: each lane packs its own values (`P_SOURCES`), and
   the instruction then believes logical k holds key `KEY_ORDER[k]`. A sum over k does not
   care about order as long as row k of the B operand (column k of V^T's block of 32 keys)
   is that same key, so the transpose writes V^T with its keys in that order. This is
   FlashAttention-3's own trick for row-major V: it swaps P's registers inside each thread
   (`permute_Cregs_fp8` in its hopper/utils.h, the same order as `P_SOURCES`) and writes
   its per-tile V^T in the matching key order; it shuffles P across lanes only when V
   arrives column-major (`permute_Aregs_fp8`). The course folds the whole permutation into
   its one transpose per call.
"""

from __future__ import annotations

import numpy as np

from ..ptx.wgmma import a_fragment_e4m3

#: keys per FP8 wgmma step (K of m64nNk32) and lanes per warp
K_STEP, LANES = 32, 32
#: P_SOURCES[r][b]: the element i (0..15) of this lane's accumulator values for one k32
#: step that goes into byte b of A-fragment register r (the kernel's pack order)
P_SOURCES = ((0, 1, 4, 5), (2, 3, 6, 7), (8, 9, 12, 13), (10, 11, 14, 15))


#: a_fragment(lane, r, b) -> (row, k) of byte b of register r of `lane` in one warp's
#: 16 x 32 FP8 A tile (the instruction's layout, at home beside it in ptx/wgmma.py)
a_fragment = a_fragment_e4m3


def accumulator(lane: int, i: int) -> tuple[int, int]:
    """(row, key) of element i (0..15) of `lane`'s accumulator values for one k32 step
    of S (16 rows x 32 keys of one warp)."""
    g, t = lane // 4, lane % 4
    return g + 8 * ((i % 4) // 2), 8 * (i // 4) + 2 * t + i % 2


def key_order() -> np.ndarray:
    """KEY_ORDER (32,): the key (within a block of 32) that the FP8 A fragment's logical k
    holds when every lane packs its own S values by `P_SOURCES`. Derived from the two
    layouts above, lane by lane; ValueError if they disagreed (a row mismatch, or two lanes
    implying different keys for the same k), which would make the trick wrong."""
    order = np.full(K_STEP, -1, np.int64)
    for lane in range(LANES):
        for r in range(4):
            for b in range(4):
                row_a, k = a_fragment(lane, r, b)
                row_s, key = accumulator(lane, P_SOURCES[r][b])
                if row_a != row_s:
                    raise ValueError(f"lane {lane} register {r} byte {b}: row {row_s} of S "
                                     f"would land in row {row_a} of A")
                if order[k] not in (-1, key):
                    raise ValueError(f"logical k {k} would hold keys {order[k]} and {key}")
                order[k] = key
    if sorted(order.tolist()) != list(range(K_STEP)):
        raise ValueError(f"not a permutation of the 32 keys: {order.tolist()}")
    return order


KEY_ORDER = key_order()


def transpose_v(v, keys: int | None = None) -> np.ndarray:
    """The numpy model of the device transpose: v (..., Tk, D) -> (..., D, keys) with
    vt[..., n, 32 c + k] = v[..., 32 c + KEY_ORDER[k], n] and zeros past Tk; keys (default
    Tk rounded up to 32) must be a multiple of 32 and at least Tk."""
    v = np.asarray(v)
    if v.ndim < 2:
        raise ValueError(f"v must have shape (..., Tk, D), got shape {v.shape}")
    tk = v.shape[-2]
    keys = -(-tk // K_STEP) * K_STEP if keys is None else int(keys)
    if keys % K_STEP or keys < tk:
        raise ValueError(f"keys must be a multiple of {K_STEP} and at least Tk = {tk}, "
                         f"got {keys}")
    padded = np.zeros(v.shape[:-2] + (keys, v.shape[-1]), v.dtype)
    padded[..., :tk, :] = v
    src = (np.arange(keys) // K_STEP) * K_STEP + KEY_ORDER[np.arange(keys) % K_STEP]
    return np.swapaxes(padded[..., src, :], -1, -2).copy()


def pv_through_fragments(p, vt) -> np.ndarray:
    """The product the instruction computes for one warp and one k32 step, modelled lane by
    lane: p (16, 32) the warp's S values (rows, keys in natural order), vt (N, 32) one
    step of the transposed V. Each lane packs its own p by `P_SOURCES`, the instruction
    reads them at the A fragment's (row, k) and multiplies by vt[:, k]. Equals p @ v when
    vt = transpose_v(v): the check of the whole trick (tests/test_fp8_forward.py)."""
    p, vt = np.asarray(p), np.asarray(vt)
    if p.shape != (16, K_STEP):
        raise ValueError(f"p must have shape (16, {K_STEP}) (one warp's rows x one step's keys), "
                         f"got {p.shape}")
    if vt.ndim != 2 or vt.shape[1] != K_STEP:
        raise ValueError(f"vt must have shape (N, {K_STEP}) (one step of V^T), got {vt.shape}")
    a = np.zeros((16, K_STEP), np.float64)
    for lane in range(LANES):
        for r in range(4):
            for b in range(4):
                row_s, key = accumulator(lane, P_SOURCES[r][b])
                row_a, k = a_fragment(lane, r, b)
                a[row_a, k] = p[row_s, key]
    return a @ np.asarray(vt, np.float64).T
