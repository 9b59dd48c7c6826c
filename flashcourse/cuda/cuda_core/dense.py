"""dense: the unfused baseline on the GPU (scores to global memory, softmax, then P V).

The idea
    Three kernels, as a framework without fusion runs attention:
      1. scores:  S = scale * Q K^T (masked to -inf where causal hides a pair),
                  a shared-memory tiled matrix product (T x T tiles, T x T threads),
                  written to global memory: (B*H, Tq, Tk) float32;
      2. softmax: one block per row reads S, finds m and l with block reductions in
                  shared memory, writes P = exp(S - m) / l over S and lse = m + log l;
      3. pv:      O = P V, the same tiled matrix product.

The bytes it moves (fp32, one head)
    S written once and read three times (write, max+sum pass, P write, P V read):
    about 4 x Tq Tk 4 B, e.g. 256 MiB per head at Tq = Tk = 4096, against 3 MiB of
    Q, K, V, O. Extra device memory: the score matrix, Tq x Tk x 4 B per head
    (64 MiB per head at N = 4096; 32 heads: 2 GiB; at N = 16384: 32 GiB).

Expected cost and what limits it
    The two products do 4 Tq Tk d FLOPs with 16 x 16 tiles (one output per thread:
    two shared loads per FMA), so they run far under the FMA peak; the softmax pass
    is memory-bound (about 3 x 4 B per score at ~4 TB/s). Causal masking saves no
    work here: the masked scores are still computed, stored and read.

How to run it
    from flashcourse.cuda import forward
    o, lse = forward(q, k, v, kernel="dense")
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from ...geometry import ceil_div
from ...gpu import using_simulator
from ...limits import check_launch, current_limits
from ...constants import F0, F1, NEG_INF
from ..common._device import inlined


@lru_cache(maxsize=None)
def make_dense_kernels(tile: int = 16, softmax_threads: int = 128):
    """(scores, softmax, pv) kernels for T x T tiles and a softmax block of `softmax_threads`."""

    T = tile
    TP = tile + 1                       # padded row: column reads hit distinct banks
    NS = softmax_threads

    def tile_step(b_rows):
        # acc += row ty of the A tile . column tx of the B tile (b_rows: B's T values along
        # the sum are bt[x, tx]; else bt[tx, x], the tile of K whose rows are keys), after
        # this thread's elements av, bv are staged at [ty, tx]; barriers before the products
        # and after (the tiles are overwritten next step)
        @inlined
        def step(at, bt, av, bv, tx, ty, acc):
            at[ty, tx] = av
            bt[ty, tx] = bv
            cuda.syncthreads()
            for x in range(T):
                acc += at[ty, x] * (bt[x, tx] if b_rows else bt[tx, x])
            cuda.syncthreads()
            return acc
        return step

    qk_step, pv_step = tile_step(False), tile_step(True)

    @inlined
    def cell():
        # (tx, ty, h): this thread of a T x T block, and the block's head
        return cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockIdx.z

    def dense_scores(q, k, s, tq, tk, d, scale, causal, off):
        # S[h, i, j] = scale * sum_x q[h, i, x] k[h, j, x]; grid (Tk/T, Tq/T, BH)
        qt = cuda.shared.array((T, TP), float32)
        kt = cuda.shared.array((T, TP), float32)
        tx, ty, h = cell()
        i = cuda.blockIdx.y * T + ty
        j = cuda.blockIdx.x * T + tx
        jl = cuda.blockIdx.x * T + ty          # the K row this thread loads
        acc = F0
        for x0 in range(0, d, T):
            qv = F0
            kv = F0
            if i < tq and x0 + tx < d:
                qv = q[h, i, x0 + tx]
            if jl < tk and x0 + tx < d:
                kv = k[h, jl, x0 + tx]
            acc = qk_step(qt, kt, qv, kv, tx, ty, acc)
        if i < tq and j < tk:
            val = acc * scale
            if causal != 0 and j > i + off:
                val = NEG_INF
            s[h, i, j] = val

    def dense_softmax(s, lse, tk):
        # one block per row (grid (Tq, BH)): P = exp(S - m) / l in place; lse = m + log l
        red = cuda.shared.array(NS, float32)
        tx = cuda.threadIdx.x
        i = cuda.blockIdx.x
        h = cuda.blockIdx.y
        mx = NEG_INF
        for j in range(tx, tk, NS):
            mx = max(mx, s[h, i, j])
        red[tx] = mx
        cuda.syncthreads()
        width = NS // 2
        while width > 0:
            if tx < width:
                red[tx] = max(red[tx], red[tx + width])
            cuda.syncthreads()
            width //= 2
        m = red[0]
        cuda.syncthreads()
        m_use = m if m != NEG_INF else F0
        acc = F0
        for j in range(tx, tk, NS):
            acc += math.exp(s[h, i, j] - m_use)
        red[tx] = acc
        cuda.syncthreads()
        width = NS // 2
        while width > 0:
            if tx < width:
                red[tx] += red[tx + width]
            cuda.syncthreads()
            width //= 2
        total = red[0]
        inv = F1 / total if total != F0 else F0          # a NaN sum stays NaN
        for j in range(tx, tk, NS):
            s[h, i, j] = math.exp(s[h, i, j] - m_use) * inv
        if tx == 0:
            lse[h, i] = m + math.log(total) if total != F0 else NEG_INF

    def dense_pv(p, v, o, tq, tk, d):
        # O[h, i, x] = sum_j P[h, i, j] V[h, j, x]; grid (d/T, Tq/T, BH)
        pt = cuda.shared.array((T, TP), float32)
        vt = cuda.shared.array((T, TP), float32)
        tx, ty, h = cell()
        i = cuda.blockIdx.y * T + ty
        x = cuda.blockIdx.x * T + tx
        acc = F0
        for j0 in range(0, tk, T):
            pv = F0
            vv = F0
            if i < tq and j0 + tx < tk:
                pv = p[h, i, j0 + tx]
            if j0 + ty < tk and x < d:
                vv = v[h, j0 + ty, x]
            acc = pv_step(pt, vt, pv, vv, tx, ty, acc)
        if i < tq and x < d:
            o[h, i, x] = acc

    return cuda.jit(dense_scores), cuda.jit(dense_softmax), cuda.jit(dense_pv)


#: (tile, softmax_threads) on a GPU: 16 x 16 threads per product tile, 128 per softmax row.
GPU_TILES = (16, 128)
#: Under Numba's simulator: 8 x 8 tiles (fewer barriers per d than 4 x 4; each costs ~50 ms).
SIMULATOR_TILES = (8, 8)


def default_tile() -> tuple[int, int]:
    return SIMULATOR_TILES if using_simulator() else GPU_TILES


def tile_shared_bytes(tile: int) -> int:
    """Static shared memory of the two product kernels: two T x (T + 1) float32 tiles."""
    return 2 * tile * (tile + 1) * 4


def launches(d: int, tq: int, tk: int, bh: int, limits, tiles=GPU_TILES):
    """The three launches of `run` with `tiles` (GPU_TILES), as `flashcourse.limits.Launch`es
    (static shared memory: no opt-in). Nothing here depends on d but the P V grid; the
    limits that bind are the grid's (Tq / 16 blocks in y) and device memory for S
    (`extra_bytes`), which DeviceLimits does not hold."""
    from ...limits import Launch
    t, ns = tiles
    label = f"tile={t}x{t} softmax_threads={ns}"
    return (Launch("dense scores", (ceil_div(tk, t), ceil_div(tq, t), bh), t * t,
                   tile_shared_bytes(t), optin=False, config=label),
            Launch("dense softmax", (tq, bh), ns, ns * 4, optin=False, config=label),
            Launch("dense pv", (ceil_div(d, t), ceil_div(tq, t), bh), t * t,
                   tile_shared_bytes(t), optin=False, config=label))


def extra_bytes(bh: int, tq: int, tk: int) -> int:
    """The score matrix: Tq x Tk x 4 B per head."""
    return bh * tq * tk * 4


def run(qf, kf, vf, o, lse, tq, tk, d, scale, causal, tile=None, softmax_threads=None):
    """Launch the three kernels; returns the extra device bytes (the score matrix)."""
    from numba import cuda
    t0, n0 = default_tile()
    tile = t0 if tile is None else tile
    softmax_threads = n0 if softmax_threads is None else softmax_threads
    for one in launches(d, tq, tk, qf.shape[0], current_limits(), (tile, softmax_threads)):
        check_launch(one.threads, one.shared_bytes, optin=False, what=one.what, grid=one.grid)
    scores, softmax, pv = make_dense_kernels(tile, softmax_threads)
    bh = qf.shape[0]
    s = cuda.device_array((bh, tq, tk), np.float32)          # the materialised S, then P
    scores[(ceil_div(tk, tile), ceil_div(tq, tile), bh), (tile, tile)](
        qf, kf, s, np.int32(tq), np.int32(tk), np.int32(d), np.float32(scale),
        np.int32(1 if causal else 0), np.int32(tk - tq))
    softmax[(tq, bh), softmax_threads](s, lse, np.int32(tk))
    pv[(ceil_div(d, tile), ceil_div(tq, tile), bh), (tile, tile)](
        s, vf, o, np.int32(tq), np.int32(tk), np.int32(d))
    del s
    return extra_bytes(bh, tq, tk)
