"""tail_split: split the last, mostly empty wave of a forward launch along the keys.

Waves. A GPU runs a grid of thread blocks in waves: with `slots` blocks resident at once
(SMs x blocks per SM; the hopper kernel's tiles fill an SM, so one per SM), U blocks of
equal work take ceil(U / slots) block-times. The hopper forward at d = 128 has Br = 192
rows per block: at N = 4096 and B x H = 32 that is 22 query blocks per head (the last one
64 rows: 4096 = 21 x 192 + 64), U = 704 blocks on an H200's 132 SMs: 5 full waves and a
sixth of 44 blocks, 6 block-times for 5.33 waves of blocks. The sixth wave leaves 88 SMs
idle: at most 5.33 / 6 = 89% of the GPU is used (`fa2_work.sm_fill`).

The fix (split-KV, as Flash-Decoding splits a decode step's keys): run the first
W x slots units whole and cut each of the R units of the last wave into s <= slots / R
key ranges. Every piece computes the online softmax over its own keys and writes o
normalised by its own l, in float32, with its lse; a combine kernel merges the s pieces of
a row (Flash-Decoding's combine, `decode`):

    lse = log sum_i exp(lse_i)        o = sum_i exp(lse_i - lse) o_i

The last wave then takes 1 / s of a block-time: 5 + 1/3 block-times instead of 6 at the
example's size (s = 3: 132 pieces), at the price of a second, small launch and of the
partial rows written and read once in float32 (R x s x Br x d x 4 bytes: 13 MB there).
FlashAttention-2's forward keeps one block per (query block, head) and splits the keys
only for decoding (`num_splits`); FlashAttention-3 schedules the work units itself in
a persistent kernel. Causal launches are not split by default: their units differ in
length, and starting the longest first (the kernel's order) already fills the last wave
with short ones.

`plan` is pure Python (the tests and notebook 12 run it without a GPU); `combine` runs on
a GPU and on Numba's CUDA simulator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numba import cuda
from numba import uint64 as U

from ...constants import F0, NEG_INF
from ...geometry import ceil_div

#: at most this many pieces per unit (the combine reads all of them per row)
MAX_SPLITS = 16
#: orders of the causal units (`unit`)
ORDERS = ("lpt", "head-major")
#: a piece has at least this many key blocks (its prologue and epilogue cost about one)
MIN_KEY_BLOCKS = 4


@dataclass(frozen=True)
class TailSplit:
    """The launch: `units` work units (query blocks x heads, head-major); the first
    `main` run whole, each of the other `units - main` in `splits` key ranges."""

    units: int
    main: int
    splits: int

    @property
    def tail(self) -> int:
        """Units cut into pieces."""
        return self.units - self.main if self.splits > 1 else 0

    @property
    def blocks(self) -> int:
        """Thread blocks of the launch: whole units, then the pieces."""
        return self.main + self.tail * self.splits

    def pieces(self) -> int:
        """Workspace rows per Br: one set per piece."""
        return self.tail * self.splits


def _count(x, name: str) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 1:
        raise ValueError(f"{name} must be a positive integer, got {x!r}")
    return int(x)


def plan(units: int, key_blocks: int, slots: int, causal: bool = False,
         splits: int | None = None) -> TailSplit:
    """How to launch `units` equal units of `key_blocks` key blocks on `slots` resident
    blocks. splits=None chooses (see the module docstring; never for causal); 1 never
    splits; s > 1 cuts the units of the last wave (all of them if they fit in one wave)
    into s pieces."""
    units = _count(units, "units")
    key_blocks = _count(key_blocks, "key_blocks")
    slots = _count(slots, "slots")
    last = units % slots or slots          # units in the last wave
    if splits is None:
        if causal or last == slots:
            return TailSplit(units, units, 1)
        splits = min(slots // last, key_blocks // MIN_KEY_BLOCKS, MAX_SPLITS)
        if splits < 2:
            return TailSplit(units, units, 1)
    else:
        splits = _count(splits, "splits")
        if splits > min(key_blocks, MAX_SPLITS):
            raise ValueError(f"splits must be at most min(key blocks, {MAX_SPLITS}) = "
                             f"{min(key_blocks, MAX_SPLITS)}, got {splits}")
        if splits == 1:
            return TailSplit(units, units, 1)
    return TailSplit(units, units - last, splits)


def unit(u: int, nqb: int, bh: int, causal: bool, order: str = "lpt") -> tuple[int, int]:
    """(head, query block) of work unit u, as the kernel orders them: head-major (a head's
    blocks run together and share its K, V in the L2); causal, each head's longest block
    first (order "head-major") or longest first over all heads (order "lpt", the default):
    query block nqb - 1 of every head, then nqb - 2, ... GPUs are observed to hand the
    blocks to the SMs in launch order as they free up (list scheduling; CUDA promises no
    order); longest first leaves the short units for the end, where they fill the last
    wave (`causal_block_times`)."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if causal and order == "lpt":
        return u % bh, nqb - 1 - u // bh
    h, qb = u // nqb, u % nqb
    return (h, nqb - 1 - qb) if causal else (h, qb)


def list_schedule(costs, slots: int) -> np.ndarray:
    """Finish time of each of `slots` slots when blocks of these costs, in this order, each
    go to the first slot that is free (what a GPU's block scheduler is observed to do)."""
    import heapq
    free = [(0.0, i) for i in range(slots)]
    for c in costs:
        t, i = heapq.heappop(free)
        heapq.heappush(free, (t + c, i))
    out = np.zeros(slots)
    for t, i in free:
        out[i] = t
    return out


def causal_block_times(nqb: int, bh: int, key_blocks_of, slots: int, order: str) -> float:
    """Length of a causal launch in key-block times: units of cost key_blocks_of(qb) taken
    in `unit`'s `order` by the first free of `slots` slots."""
    costs = [key_blocks_of(unit(u, nqb, bh, True, order)[1]) for u in range(nqb * bh)]
    return float(list_schedule(costs, slots).max())


def key_range(piece: int, splits: int, key_blocks: int) -> tuple[int, int]:
    """Key blocks [kb0, kb1) of piece `piece % splits`: the kernel's own formula."""
    i = piece % splits
    return i * key_blocks // splits, (i + 1) * key_blocks // splits


def block_work(sp: TailSplit, key_blocks: int):
    """(unit, kb0, kb1) of each block of the launch, in launch order: what the kernel
    computes from blockIdx.x (a numpy-free mirror of it, checked in the tests)."""
    for x in range(sp.blocks):
        piece = x - sp.main
        if piece < 0:
            yield x, 0, key_blocks
        else:
            yield (sp.main + piece // sp.splits, *key_range(piece, sp.splits, key_blocks))


def block_times(sp: TailSplit, slots: int, key_blocks: int) -> float:
    """The launch's length in block-times of a whole unit, blocks taking the slots in
    launch order: the whole units' waves (`main` is a multiple of `slots`), then the
    pieces' waves, each as long as the longest piece's share of the keys."""
    if sp.splits == 1:
        return float(math.ceil(sp.units / slots))
    longest = max(b - a for a, b in (key_range(i, sp.splits, key_blocks)
                                     for i in range(sp.splits)))
    return sp.main / slots + math.ceil(sp.pieces() / slots) * longest / key_blocks


def grid_use(sp: TailSplit, slots: int, key_blocks: int) -> float:
    """Share of the slots' time doing useful work: units / (block-times x slots)."""
    return sp.units / (block_times(sp, slots, key_blocks) * slots)


# ---------------------------------------------------------------------------------------
# The combine kernel (GPU and simulator)
# ---------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def make_combine_kernel(precision: str, head_dim: int, block_q: int):
    """One block of 32 x ceil(d / 64) threads per row of a split unit: merges its `splits`
    pieces and writes o as 16-bit words (fp16 or bf16, round to nearest even) and lse.
    Arguments: part_o (pieces x Br x D float32, flat), part_lse (pieces x Br), o (BH, Tq,
    D/2 words), lse (BH, Tq), tq, nqb, bh, lpt, n_main, splits, causal."""
    from ...gpu import using_simulator
    from ..ptx.mma import device_ops
    PACK = device_ops(using_simulator())["pack_fp16" if precision == "fp16" else "pack_bf16"]
    D, BR = head_dim, block_q
    DW = D // 2
    NT = combine_threads(head_dim)

    def hopper_tail_combine(part_o, part_lse, o, lse, tq, nqb, bh, lpt, n_main, splits,
                            causal):
        r = cuda.blockIdx.x % BR               # row inside the unit
        t = cuda.blockIdx.x // BR              # tail unit
        u = n_main + t
        h = u // nqb                           # `unit`, as the forward kernel
        qb = u % nqb
        if causal != 0 and lpt != 0:
            h = u % bh
            qb = nqb - 1 - u // bh
        elif causal != 0:
            qb = nqb - 1 - qb
        row = qb * BR + r
        if row >= tq:
            return
        p0 = t * splits                        # its first piece
        mx = NEG_INF
        for i in range(splits):
            mx = max(mx, part_lse[U((p0 + i) * BR + r)])
        m_use = mx if mx != NEG_INF else F0
        total = F0
        for i in range(splits):
            total += math.exp(part_lse[U((p0 + i) * BR + r)] - m_use)
        inv = 1.0 / total if total != F0 else F0
        for w in range(cuda.threadIdx.x, DW, NT):
            a = F0
            b = F0
            for i in range(splits):
                p = (p0 + i) * BR + r
                wt = math.exp(part_lse[U(p)] - m_use) * inv
                a += wt * part_o[U(p * D + 2 * w)]
                b += wt * part_o[U(p * D + 2 * w + 1)]
            o[U(h), U(row), U(w)] = PACK(a, b)
        if cuda.threadIdx.x == 0:
            lse[U(h), U(row)] = m_use + math.log(total) if total != F0 else NEG_INF

    hopper_tail_combine.__name__ = f"hopper_tail_combine_{precision}_d{D}_br{BR}"
    return cuda.jit(hopper_tail_combine)


def combine_threads(head_dim: int) -> int:
    """Threads of a combine block: one per 32-bit word of a row, rounded up to a warp."""
    return 32 * ceil_div(head_dim // 2, 32)


def workspace_shape(sp: TailSplit, block_q: int, head_dim: int) -> tuple[int, int]:
    """(floats of part_o, floats of part_lse): at least one of each (unused when no split)."""
    rows = max(1, sp.pieces() * block_q)
    return rows * head_dim, rows
