"""textbook: the usual teaching kernel (flash-attention-minimal style), kept as the start.

The idea
    One thread per query row: a block of `block` threads (32) handles a query
    block of Br = 32 rows, and walks the key blocks of Bc = 32 keys. For each key
    block the threads load K_j and V_j into shared memory (thread tx loads key row
    tx, as flash-attention-minimal does), then each thread alone computes its row
    of the (Br, Bc) score tile into shared memory, updates its running max m and
    sum l (online softmax, in registers), and updates its output row, which lives
    in global memory (O is read, rescaled and written back for every key block).
    Grid: (ceil(Tq/32), B*H) blocks of one warp each.

The bytes it moves (fp32, one head, no causal skipping)
    K, V once per query block (2 Tk d 4 B x Tq/32); Q read from global memory for
    every score (each thread re-reads its q row Bc times per key block, from L1);
    O read and written once per key block (2 Tq d 4 B x Tk/32). At Tq = Tk = 4096,
    d = 64: 256 MiB of K/V loads and 256 MiB of O traffic per head. Extra device
    memory: none beyond lse (Tq x 4 B per head).

Expected cost and what limits it
    Same 4 Tq Tk d FLOPs as every kernel, but each FMA of Q K^T needs a global (L1)
    load of q and a shared load of K, and each FMA of P V two shared loads: there is
    no register reuse, so the loads, not the FMA units, set the pace; blocks of one
    warp keep few warps per multiprocessor (low occupancy: little latency hiding);
    key rows loaded one per thread are strided by d (uncoalesced); and the O
    round trip through global memory adds Tq d 8 B per key block. Expect ~1 TFLOP/s,
    tens of times under the FMA peak.

    (A first version followed flash-attention-minimal exactly: one block per head,
    FlashAttention-1 loop order with m, l and O in global memory. With B*H = 32 it
    launched 32 warps on a 132-multiprocessor GPU and measured 0.04 TFLOP/s; see
    benchmarks/NOTES_cuda_forward.md.)

How to run it
    from flashcourse.cuda import forward
    o, lse = forward(q, k, v, kernel="textbook")
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from ...geometry import ceil_div
from ...gpu import using_simulator
from ...limits import check_launch
from ..common._launch import launch
from ...constants import F0, F1, NEG_INF


def shared_bytes(block: int, d: int) -> int:
    """K, V tiles (block x d each) and the score tile (block x block), float32."""
    return 4 * (2 * block * d + block * block)


@lru_cache(maxsize=None)
def make_textbook_kernel(block: int = 32):
    """The textbook kernel for tiles of `block` rows (= threads per block)."""
    B = block

    def textbook_forward(q, k, v, o, lse, tq, tk, d, scale, causal, off):
        sm = cuda.shared.array(0, float32)
        ks = 0                      # K_j tile (B, d)
        vs = B * d                  # V_j tile (B, d)
        ss = 2 * B * d              # S tile (B, B): row tx belongs to thread tx
        h = cuda.blockIdx.y
        tx = cuda.threadIdx.x
        q0 = cuda.blockIdx.x * B
        row = q0 + tx
        n_k = (tk + B - 1) // B
        if causal != 0:             # key blocks up to the last row's diagonal
            n_k = min(n_k, max(0, (q0 + B + off + B - 1) // B))

        m = NEG_INF                 # running max of this thread's row
        l = F0                      # running sum of exp(s - m)
        if row < tq:                # O row, accumulated unnormalised in global memory
            for x in range(d):
                o[h, row, x] = F0

        for j in range(n_k):
            k0 = j * B
            cuda.syncthreads()
            # thread tx loads row tx of K_j and V_j (addresses strided by d: uncoalesced)
            for x in range(d):
                kv = F0
                vv = F0
                if k0 + tx < tk:
                    kv = k[h, k0 + tx, x]
                    vv = v[h, k0 + tx, x]
                sm[ks + tx * d + x] = kv
                sm[vs + tx * d + x] = vv
            cuda.syncthreads()
            if row < tq:
                # S row = scale * q_row . K_j^T, masked; its max
                row_m = NEG_INF
                for y in range(B):
                    col = k0 + y
                    s = NEG_INF
                    if col < tk and not (causal != 0 and col > row + off):
                        s = F0
                        for x in range(d):
                            s += q[h, row, x] * sm[ks + y * d + x]
                        s *= scale
                    sm[ss + tx * B + y] = s
                    row_m = max(row_m, s)
                m_new = max(m, row_m)
                # the block holds a key this row sees (so a NaN score is never skipped:
                # max() drops NaN, and a NaN row would look masked)
                if k0 < tk and (causal == 0 or k0 <= row + off):
                    alpha = math.exp(m - m_new)   # 0 when m = -inf
                    row_l = F0
                    for y in range(B):
                        p = math.exp(sm[ss + tx * B + y] - m_new)
                        sm[ss + tx * B + y] = p
                        row_l += p
                    l = alpha * l + row_l
                    m = m_new
                    # O row = alpha * O row + P row V_j (read-modify-write in global memory)
                    for x in range(d):
                        pv = F0
                        for y in range(B):
                            pv += sm[ss + tx * B + y] * sm[vs + y * d + x]
                        o[h, row, x] = alpha * o[h, row, x] + pv
        if row < tq:
            if l != F0:             # (a NaN sum stays NaN: never looks masked)
                inv = F1 / l
                for x in range(d):
                    o[h, row, x] *= inv
                lse[h, row] = m + math.log(l)
            else:                   # no visible key: o = 0, lse = -inf
                lse[h, row] = NEG_INF

    textbook_forward.__name__ = f"textbook_b{B}"
    return cuda.jit(textbook_forward)


def signature():
    from numba import float32, int32, types
    a3 = types.Array(float32, 3, "C")
    a2 = types.Array(float32, 2, "C")
    return (a3, a3, a3, a3, a2, int32, int32, int32, float32, int32, int32)


#: Tile rows (= threads per block) tried, best first: one warp, then half and a quarter.
BLOCKS = (32, 16, 8)
#: The tile under Numba's simulator.
SIMULATOR_BLOCK = 8


@lru_cache(maxsize=None)
def choose_block(d: int, limits) -> int:
    """Tile rows (= threads per block) for head dim d on `limits` (pure): the first of
    BLOCKS whose K, V and S tiles (`shared_bytes`) fit one block's shared memory with
    the opt-in (`limits.pick_config`, without its resident-warps preference: smaller
    blocks would only fill warps partly). At d = 256 a T4 (64 KiB) gets 16: 32 rows would
    need 69,632 B. LaunchError naming shared memory when none fits."""
    from ...limits import pick_config
    return pick_config([(b, b, shared_bytes(b, d)) for b in BLOCKS], limits,
                       f"textbook kernel d={d}", min_warps=0)   # a block is one warp at most


def default_block(d: int = 64, limits=None) -> int:
    """Tile rows when the caller gives none: SIMULATOR_BLOCK on the simulator (when no
    `limits` are given), else `choose_block` for this device's (or the given) limits."""
    from ...limits import current_limits
    if limits is None:
        if using_simulator():
            return SIMULATOR_BLOCK
        limits = current_limits()
    return choose_block(d, limits)


def launches(d: int, tq: int, tk: int, bh: int, limits):
    """The launch `run` makes with the default tile for `limits` (a `Launch`)."""
    from ...limits import Launch
    block = default_block(d, limits)
    return (Launch(f"textbook kernel d={d}", (ceil_div(tq, block), bh), block,
                   shared_bytes(block, d), config=f"Br=Bc={block} threads={block}"),)


def run(qf, kf, vf, o, lse, tq, tk, d, scale, causal, block=None):
    """Launch on flattened float32 device arrays (B*H, T, d); grid (ceil(Tq/B), B*H)."""
    from ..._checks import check_block
    block = default_block(d) if block is None else check_block(block, "block_q")
    nbytes = shared_bytes(block, d)
    check_launch(block, nbytes, what="textbook kernel")
    kern = make_textbook_kernel(block)
    bh = qf.shape[0]
    args = (qf, kf, vf, o, lse, np.int32(tq), np.int32(tk), np.int32(d),
            np.float32(scale), np.int32(1 if causal else 0), np.int32(tk - tq))
    launch(kern, signature(), (ceil_div(tq, block), bh), block, nbytes, args)
