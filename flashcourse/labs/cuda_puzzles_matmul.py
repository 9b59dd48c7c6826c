"""Lab 05's puzzles 6 and 7, the matrix products (the machinery is `cuda_puzzle_rules.py`,
the ladder `cuda_puzzles.py`): their specs, cases, hints and the mistakes replayed in numpy.

    6 matmul_tiled  c = a @ b in 4 x 4 tiles staged in shared memory, one k tile at a time
    7 matmul_micro  a block of 4 x 4 threads computes an 8 x 8 tile of c, 2 x 2 outputs per
                    thread from registers (lab 06's micro-tile)
"""

from __future__ import annotations

import numpy as np

from .cuda_puzzle_rules import PuzzleCase, _cdiv, _rng

# -- puzzle 6: tiled matmul in shared memory --------------------------------------------------

T6 = 4
HINT_MATMUL = ("c = a @ b, block (4, 4) per 4 x 4 tile of c: loop over the k tiles; load one "
               "4 x 4 tile of a and of b into shared memory (0 outside the matrices), barrier, "
               "add the 4 products, barrier.",
               "Thread (tx, ty) loads a[row, kt*T + tx] and b[kt*T + ty, col]; the number of k "
               "tiles is ceil(k / T).")
HINT_K_TILES = ("The last, partial k tile is missing: the number of k tiles is a ceiling, "
                "ceil(k / T), when k is not a multiple of the tile.",
                "(k + T - 1) // T tiles; the load writes 0 where the index is past k.")
HINT_TILE_TRANSPOSED = (
    "Your values are those of a product that reads a shared tile transposed: c[row, col] "
    "needs row ty of the A tile and column tx of the B tile, As[ty, kk] * Bs[kk, tx]; "
    "yours indexes As or Bs the other way round (As[kk, ty] or Bs[tx, kk]).",
    "With As[ty, tx] = a[row, kt*T + tx] and Bs[ty, tx] = b[kt*T + ty, col], the inner "
    "product is the sum over kk of As[ty, kk] * Bs[kk, tx].")
HINT_MATMUL_GLOBAL = ("Right values, but the inner product reads a or b from global memory: "
                      "each element of a tile should be read from global memory once per "
                      "block and then reused T times from shared memory.",
                      "Global reads per thread: 2 per k tile (one of a, one of b).")
HINT_TILE_EDGE = ("A tile load read past the edge of a or b: the last tiles are ragged; load 0 "
                  "where the row (of a), the column (of b) or the k index is outside the "
                  "matrix.",
                  "if row < m and kk < k: value = a[row, kk] else 0; the same for b.")

HINT_TILE_STORE = ("A thread wrote c past its edge: the last tiles of c are ragged too, so the "
                   "threads of a block that fall outside c (row >= m or col >= n) must not "
                   "store. The loads' guards do not cover the store.",
                   "Store acc only where row < m and col < n.")


def spec_matmul(arrays, scalars):
    return {"c": arrays["a"] @ arrays["b"]}


def _mm_case(name, m, n, k, seed, block=(T6, T6), tile=T6):
    rng = _rng(seed)
    return PuzzleCase(name, {"a": rng.standard_normal((m, k)), "b": rng.standard_normal((k, n))},
                      {"c": (m, n)}, {"m": m, "n": n, "k": k}, ("a", "b", "c", "m", "n", "k"),
                      (_cdiv(n, tile), _cdiv(m, tile)), block)


def _mm_floor(arrays, scalars):
    k = scalars["k"] // T6 * T6
    return {"c": arrays["a"][:, :k] @ arrays["b"][:k]}


def _mm_tiles_read_transposed(a_t: bool, b_t: bool):
    """c from a tiled kernel whose inner product reads As[kk, ty] (a_t) and/or Bs[tx, kk]
    (b_t): per tile of c, the sum over k tiles of As^T or As times Bs^T or Bs (zero-padded)."""
    def replay(arrays, scalars):
        m, n, k = (scalars[x] for x in "mnk")
        ap, bp = (np.zeros([_cdiv(x, T6) * T6 for x in s]) for s in ((m, k), (k, n)))
        ap[:m, :k], bp[:k, :n] = arrays["a"], arrays["b"]
        c = np.zeros((ap.shape[0], bp.shape[1]))
        for r, col, kt in np.ndindex(*(x // T6 for x in (*c.shape, ap.shape[1]))):
            at = ap[r * T6:(r + 1) * T6, kt * T6:(kt + 1) * T6]
            bt = bp[kt * T6:(kt + 1) * T6, col * T6:(col + 1) * T6]
            c[r * T6:(r + 1) * T6, col * T6:(col + 1) * T6] += \
                (at.T if a_t else at) @ (bt.T if b_t else bt)
        return {"c": c[:m, :n]}
    return replay


def _mm_reads(case):
    """Global reads of a and b by a tiled kernel whose loads skip what lies outside the
    matrices: each element of a once per block column, each of b once per block row."""
    m, n, k = (case.scalars[x] for x in "mnk")
    return case.grid[0] * m * k + case.grid[1] * k * n


def _mm_budget(case):
    blocks = int(np.prod(case.grid))
    return blocks * T6 * T6 * _cdiv(case.scalars["k"], T6)


# -- puzzle 7: register micro-tiles -----------------------------------------------------------

TM7 = TN7 = 2            # micro-tile per thread
B7 = 4                   # threads per block side: a block computes an 8 x 8 tile of c
K7 = 16                  # the whole k (<= 16) is staged in shared memory at once
ROWS7 = B7 * TM7         # rows of a (and columns of b) a block stages: array sizes are names
COLS7 = B7 * TN7         # fixed before the kernel is compiled, never arithmetic inside it
ACC7 = TM7 * TN7         # a thread's accumulators
HINT_MICRO = ("Each thread of the (4, 4) block computes a 2 x 2 micro-tile of the block's 8 x 8 "
              "tile of c (e.g. rows ty + 4 i, columns tx + 4 j), from A and B staged in shared "
              "memory.",
              "Load the block's 8 rows of a (8 x k) and 8 columns of b (k x 8) into shared (0 "
              "outside), barrier; per kk: 2 values of A and 2 of B into registers, 4 "
              "multiply-adds.")
HINT_MICRO_REUSE = ("Right values, but no register reuse: per kk the thread reads shared "
                    "memory once per multiply-add (8 reads for 4 products). Load the 2 values "
                    "of A and the 2 of B for one kk into registers (cuda.local.array) and reuse "
                    "each twice: 4 reads for 4 products (lab 06's micro-tile).",
                    "Shared reads per thread: (TM + TN) per kk.")
HINT_MICRO_EDGE = ("A thread wrote or read outside c (or a, b) at the ragged edge: guard the "
                   "micro-tile's stores with row < m and col < n, and load 0 past the edges.",
                   "Store each of the 4 outputs only where its row < m and its column < n.")


def _mt_case(name, m, n, k, seed):
    return _mm_case(name, m, n, k, seed, block=(B7, B7), tile=B7 * TM7)
