"""Checkers for lab 05 (before lab 06): a ladder of small Numba CUDA puzzles, GPU-Puzzles style.

Each puzzle is a `Puzzle`: a spec in numpy (`spec`, shown by `describe()`), the kernel's
contract (its arguments and launch), cases on ragged sizes, and a checker that launches the
learner's `@cuda.jit` kernel on every case and checks

    the values          against the numpy spec (float32, rtol 1e-4, atol 1e-5);
    the algorithm       from a trace of every memory access of every simulated thread
                        (`flashcourse.labs.cuda_trace`): races on shared memory (a missing
                        `cuda.syncthreads()`), global reads beyond the puzzle's budget (no
                        reuse through shared memory or registers), 32-byte sectors per warp
                        access (coalesced or strided), shared-memory bank conflicts, barriers
                        every thread reaches, per-thread work (a tree, not one thread's loop),
                        the size of local arrays (the online softmax keeps no score row);
    the kernel itself   made by @cuda.jit, with float32 constants only.

A failure is named by the first diagnosis that fires: a typical mistake replayed in numpy
whose output yours matches, a rule of the algorithm that your trace breaks, or an error
(a read past the ragged edge). `show()` tables each thread's global and shared reads and
writes next to the counts the puzzle expects. The algorithm rules need the simulator's
trace; on a GPU only the values are checked (the trace is a simulator feature).

    P = puzzle("map_guard"); P.describe(); P.check(my_kernel); P.show(my_kernel)

The machinery (Puzzle, launch, the tables, the rules) is in `cuda_puzzle_rules.py`; the
pieces of the two matrix products (puzzles 6 and 7) in `cuda_puzzles_matmul.py`, puzzles 10
and 11 (the online softmax, the one-block forward) in `cuda_puzzles_flash.py`.

The puzzles climb to lab 06: indexing and guards, 2-D blocks, shared memory and barriers,
block reductions, the warp-shuffle butterfly, a tiled matmul, register micro-tiles,
coalescing, bank conflicts, the online softmax on a row, a one-block FlashAttention forward;
then two tools of the fast kernels (`cuda_puzzles_memory.py`): atomics (a histogram) and
asynchronous copies into shared memory (`cp.async`).
"""

from __future__ import annotations

import itertools

import numpy as np

from .cuda_puzzle_rules import (HINT_DIVERGENT_BARRIER, HINT_EDGE,  # noqa: F401
                                HINT_EMPTY_TRACE, HINT_FLOAT64, HINT_INDEX,
                                HINT_NOT_NUMBA, HINT_OVERLAP,
                                HINT_SHFL_DIVERGENT, HINT_SYNC, HINT_TWICE, Outcome, Puzzle,
                                PuzzleCase, Rule, _cdiv, _outputs_close, _rng,
                                arrays_hold_at_most, coalesced, launch, no_bank_conflicts,
                                no_races, one_thread_reads_at_most, reads_at_most,
                                shared_reads_at_most, written_once, x_walks_rows)
from .cuda_puzzles_memory import (HINT_ATOMIC_GLOBAL, HINT_ATOMIC_SHARED,  # noqa: F401
                                  HINT_CP_BARRIER, HINT_CP_COMMIT, HINT_CP_EDGE, HINT_CP_OUT_EDGE,
                                  HINT_CP_REGISTERS, HINT_CP_UNITS, HINT_CP_WAIT,
                                  HINT_FLUSH_ONCE, HINT_HIST_ZERO, HINT_PRIVATE,
                                  puzzle_histogram, puzzle_stage_reverse)
from .cuda_puzzles_memory import HINTS as _MEMORY_HINTS
from .cuda_puzzles_flash import (BC11, BR11, D11, HINT_FLASH, HINT_FLASH_DIVIDE,  # noqa: F401
                                 HINT_FLASH_GLOBAL, HINT_FLASH_INIT, HINT_FLASH_MASK,
                                 HINT_FLASH_OVERFLOW, HINT_FLASH_RAGGED,
                                 HINT_FLASH_STALE_MAX, HINT_FLASH_UNLOADED, HINT_SM_INIT,
                                 HINT_SM_UNWRITTEN,
                                 HINT_FLASH_RESCALE, HINT_FLASH_RESCALE_ACC,
                                 HINT_FLASH_RESCALE_L, HINT_FLASH_ROW, HINT_FLASH_SCALE,
                                 HINT_SM_LANES, HINT_SM_MERGE, HINT_SM_NAN, HINT_SM_RESCALE,
                                 HINT_SM_SHIFT, HINT_SOFTMAX, puzzle_flash_block,
                                 puzzle_softmax_rows)
from .cuda_puzzles_flash import HINTS as _FLASH_HINTS
from .cuda_puzzles_matmul import (ACC7, B7, COLS7, HINT_K_TILES,  # noqa: F401
                                  HINT_MATMUL, HINT_MATMUL_GLOBAL, HINT_MICRO, HINT_MICRO_EDGE,
                                  HINT_MICRO_REUSE, HINT_TILE_EDGE, HINT_TILE_STORE,
                                  HINT_TILE_TRANSPOSED, K7,
                                  ROWS7, T6, TM7, TN7, _mm_budget, _mm_case, _mm_floor,
                                  _mm_reads, _mm_tiles_read_transposed, _mt_case, spec_matmul)

# -- puzzle 1: map with a guard ---------------------------------------------------------------

HINT_MAP = ("Each thread handles one element: out[i] = 2 a[i] + 1 for its global index i.",
            "The global index is blockIdx.x times blockDim.x plus threadIdx.x; guard with i < n.")
HINT_BLOCK_INDEX = (
    "Only the first block's elements are right: the index uses threadIdx.x alone, so every "
    "block writes the same first blockDim.x elements. Add the block's offset.",
    "The global index is blockIdx.x * blockDim.x + threadIdx.x.")
HINT_GUARD_SHORT = (
    "The last element was never written (NaN): your guard stops one element early.",
    "The valid indices are 0 .. n - 1: the guard is i < n.")


def spec_map_guard(arrays, scalars):
    return {"out": 2 * arrays["a"] + 1}


def _map_case(name, n, seed):
    return PuzzleCase(name, {"a": _rng(seed).standard_normal(n)}, {"out": (n,)}, {"n": n},
                      ("a", "out", "n"), (_cdiv(n, 32),), (32,))


def _map_thread_only(arrays, scalars):
    a = arrays["a"]
    out = np.full(a.shape, np.nan)
    out[:32] = 2 * a[:32] + 1
    return {"out": out}


def _map_short(arrays, scalars):
    out = 2 * arrays["a"] + 1
    out[-1] = np.nan
    return {"out": out}


# -- puzzle 2: 2-D blocks, broadcast ----------------------------------------------------------

HINT_2D = ("Each output is a[r, c] times b[c]: the row comes from the y coordinates, the column "
           "from the x coordinates.",
           "The row is blockIdx.y times blockDim.y plus threadIdx.y, the column the same in x; "
           "guard both (r < rows, c < cols).")
HINT_BROADCAST = ("b is broadcast along the wrong axis: b has one value per column, so it is "
                  "indexed by the column c.",
                  "Multiply by b[c], not b[r].")
HINT_SWAPPED_XY = (
    "Right values, but the row comes from x and the column from y: neighbouring threads "
    "(consecutive threadIdx.x) then touch addresses a whole row apart, so each warp access "
    "needs many memory sectors (strided). Let x walk along a row.",
    "c from the x coordinates, r from the y coordinates: out[r, c] with c = ... threadIdx.x.")


def spec_broadcast_2d(arrays, scalars):
    return {"out": arrays["a"] * arrays["b"][None, :]}


def _bc_case(name, rows, cols, seed):
    rng = _rng(seed)
    return PuzzleCase(name, {"a": rng.standard_normal((rows, cols)),
                             "b": rng.standard_normal(cols)}, {"out": (rows, cols)},
                      {"rows": rows, "cols": cols}, ("a", "b", "out", "rows", "cols"),
                      (_cdiv(cols, 8), _cdiv(rows, 8)), (8, 8))


def _bc_wrong_axis(arrays, scalars):
    a, b = arrays["a"], arrays["b"]
    return {"out": a * b[: a.shape[0], None]} if a.shape[0] <= b.size else {"out": a * np.nan}


# -- puzzle 3: shared memory with a halo ------------------------------------------------------

TPB3 = 32
#: the halo tile's length, TPB3 + 1 floats: a shared array's size must be a number fixed
#: before the GPU compiles the kernel (a name defined outside it), not arithmetic inside it
SH3 = TPB3 + 1
HINT_HALO_SUM = ("out[i] = a[i] + a[i + 1] (a[n] counts as 0): each block loads its 32 "
                 "elements and one more (the halo) into shared memory, waits, then adds.",
                 "sh = cuda.shared.array(SH3, float32) with SH3 = TPB3 + 1; thread t loads a[i] "
                 "into sh[t]; "
                 "the last thread also loads a[i + 1] (or 0) into sh[TPB3]; a barrier; then "
                 "add sh[t] and its right neighbour.")
HINT_HALO = ("The block's last element is wrong (NaN: a shared element nobody loaded): "
             "out[i] of the last thread of a block needs a[i + 1], which belongs to the next "
             "block. Load that halo element too.",
             "One thread (e.g. t == TPB - 1) also loads a[i + 1] (0 past the end) into "
             "sh[TPB].")
HINT_HALO_GLOBAL = ("Right values, but the kernel reads a from global memory twice per "
                    "element: read each element once into shared memory and take the "
                    "neighbour from there (that reuse is why shared memory exists).",
                    "Global reads per block: TPB + 1 (the halo).")


def spec_halo_sum(arrays, scalars):
    a = arrays["a"]
    return {"out": a + np.append(a[1:], 0.0)}


def _halo_case(name, n, seed):
    return PuzzleCase(name, {"a": _rng(seed).standard_normal(n)}, {"out": (n,)}, {"n": n},
                      ("a", "out", "n"), (_cdiv(n, TPB3),), (TPB3,))


def _halo_unloaded(y, e):
    """Wrong values, and a thread read a shared element no thread of its block loaded."""
    return (not y.error and y.trace is not None and bool(y.trace.unloaded_reads())
            and not _outputs_close(y.outputs, e))


def _halo_missing(arrays, scalars):
    out = spec_halo_sum(arrays, scalars)["out"]
    i = np.arange(out.size)
    out[(i % TPB3 == TPB3 - 1) & (i < out.size - 1)] = np.nan
    return {"out": out}


# -- puzzle 4: block reduction (sum and max) --------------------------------------------------

TPB4 = 64
HINT_REDUCE = ("Each block reduces its 64 elements: out_sum[block] and out_max[block]. A tree "
               "in shared memory: at stride s = 32, 16, ..., 1 thread t < s combines sh[t] and "
               "sh[t + s], with a barrier after each step.",
               "Pad the ragged block: 0 for the sum, -inf for the max. Thread 0 writes the "
               "block's results.")
HINT_PAD_MAX = ("The max of the ragged last block is wrong: threads past the end padded the "
                "max with 0, which wins over all-negative data. The neutral value of a max "
                "is -inf (math.inf negated), as 0 is the sum's.",
                "Load -inf (e.g. float32(-math.inf)) where i >= n for the max array.")
HINT_TREE = ("The tree stops short or starts too low: your result is the reduction of only "
             "the first half of each block. The first stride is blockDim.x // 2 = 32.",
             "Start at half the block and halve the stride after each step, down to 1.")
HINT_SERIAL = ("Right values, but one thread reduced the block alone (the line above says "
               "which array it read how many times): a loop over all 64 elements is serial, "
               "64 steps while the others wait. A tree takes log2(64) = 6 steps: at each, "
               "half of the remaining threads combine two values each.",
               "Every thread loads one element; then a loop over the stride (32, 16, ..., 1) "
               "where thread t < stride combines its slot with the slot stride further on, "
               "with a barrier after each step.")
HINT_ONE_WRITER = ("Some block result was written by several threads: after the tree only "
                   "sh[0] holds the block's result; let thread 0 write it.",
                   "if cuda.threadIdx.x == 0: out_sum[cuda.blockIdx.x] = ...")


def spec_block_reduce(arrays, scalars):
    a = arrays["a"]
    blocks = _cdiv(a.size, TPB4)
    pad = np.full(blocks * TPB4, np.nan)
    pad[:a.size] = a
    tiles = pad.reshape(blocks, TPB4)
    return {"out_sum": np.nansum(tiles, axis=1), "out_max": np.nanmax(tiles, axis=1)}


def _red_case(name, n, seed, shift=0.0):
    return PuzzleCase(name, {"a": _rng(seed).standard_normal(n) + shift},
                      {"out_sum": (_cdiv(n, TPB4),), "out_max": (_cdiv(n, TPB4),)}, {"n": n},
                      ("a", "out_sum", "out_max", "n"), (_cdiv(n, TPB4),), (TPB4,))


def _red_pad_zero(arrays, scalars):
    out = spec_block_reduce(arrays, scalars)
    n = arrays["a"].size
    if n % TPB4:
        out["out_max"][-1] = max(out["out_max"][-1], 0.0)
    return out


def _red_half(arrays, scalars):
    a = arrays["a"]
    blocks = _cdiv(a.size, TPB4)
    s, m = np.zeros(blocks), np.zeros(blocks)
    for b in range(blocks):
        part = a[b * TPB4: min(b * TPB4 + TPB4 // 2, a.size)]
        s[b], m[b] = part.sum(), part.max()
    return {"out_sum": s, "out_max": m}


# -- puzzle 5: the warp-shuffle butterfly -----------------------------------------------------

GROUP5 = 8
HINT_BUTTERFLY = ("Every lane must end with the sum and the max over its group of 8 lanes "
                  "(lanes 0-7, 8-15, ...): a butterfly of shfl_xor exchanges with offsets 4, 2, "
                  "1, combining each time.",
                  "Start with half the group size, combine with the partner's value from "
                  "shfl_xor, halve the offset, until it is 0 (the same for the max).")
HINT_FLY_STEPS = ("The butterfly misses a step: each lane's result covers only part of its "
                  "group. log2(8) = 3 exchanges are needed, with offsets 4, 2 and 1 (each "
                  "once, in any order).",
                  "Start the offset at half the group, halve it after each exchange, and loop "
                  "while it is > 0.")
HINT_FLY_CROSS = ("The butterfly mixes groups: an offset of 8 or more (8, 16) exchanges with a "
                  "lane of ANOTHER group of 8 (lane ^ 8 is in the next group). Start at "
                  "GROUP // 2 = 4.",
                  "Offsets 4, 2, 1 keep lane ^ offset inside the group of 8.")
HINT_FLY_PARTNER = ("Each step adds the partner's original x, not its running value: after "
                    "the first exchange a lane's value already covers 2 lanes, after the "
                    "second 4, and the next exchange must pass on that partial result.",
                    "Exchange the running sum and max themselves: s = s + (the partner's s), "
                    "m = the larger of m and (the partner's m).")
HINT_FLY_HALVE = ("The offsets are not powers of two: an offset of 3 (from offset -= 1) "
                  "pairs lanes so that some values are counted twice. Halve the offset "
                  "after each exchange: 4, 2, 1.",
                  "Divide the offset by two at the end of each step instead of subtracting "
                  "one.")
HINT_FLY_OP = ("The combine is swapped: the sum must add the two values, the max take the "
               "larger.",
               "s = s + shfl_xor(s, ...); m = max(m, shfl_xor(m, ...)).")
HINT_FLY_GLOBAL = ("Right values, but lanes read other lanes' x from global memory: read your "
                   "own x once and exchange registers with shfl_xor.",
                   "One global read of x per lane.")


def spec_butterfly(arrays, scalars):
    x = arrays["x"]
    g = x.reshape(-1, GROUP5)
    return {"out_sum": np.repeat(g.sum(1), GROUP5), "out_max": np.repeat(g.max(1), GROUP5)}


def _fly(x, offsets, from_x=False):
    """The butterfly with these offsets; `from_x`: each step combines the partner's x."""
    s, m = x.copy(), x.copy()
    lanes = np.arange(x.size)
    for off in offsets:
        partner = (lanes & ~31) | ((lanes % 32) ^ off)
        s, m = (s + x[partner], np.maximum(m, x[partner])) if from_x else \
            (s + s[partner], np.maximum(m, m[partner]))
    return {"out_sum": s, "out_max": m}


def _fly_mistakes():
    """Wrong butterflies: every other set of offsets among 16, 8, 4, 2, 1 (the order of
    distinct powers of two does not change the result), offsets that step by one, the
    partner's x combined instead of its running value, and the two combines swapped; each
    with its hint."""
    out = []
    for r in range(1, 6):
        for offsets in itertools.combinations((16, 8, 4, 2, 1), r):
            if set(offsets) != {4, 2, 1}:
                hint = HINT_FLY_CROSS if max(offsets) >= GROUP5 else HINT_FLY_STEPS
                out.append((lambda a, s, o=list(offsets): _fly(a["x"], o), hint))
    out.append((lambda a, s: _fly(a["x"], [4, 3, 2, 1]), HINT_FLY_HALVE))
    out.append((lambda a, s: _fly(a["x"], [4, 2, 1], from_x=True), HINT_FLY_PARTNER))
    out.append((lambda a, s: {"out_sum": _fly(a["x"], [4, 2, 1])["out_max"],
                              "out_max": _fly(a["x"], [4, 2, 1])["out_sum"]}, HINT_FLY_OP))
    return out


def _fly_case(name, blocks, seed):
    return PuzzleCase(name, {"x": _rng(seed).standard_normal(32 * blocks)},
                      {"out_sum": (32 * blocks,), "out_max": (32 * blocks,)}, {},
                      ("x", "out_sum", "out_max"), (blocks,), (32,))


# -- puzzle 8: coalesced loads ----------------------------------------------------------------

HINT_ROWSUM = ("out[r] = sum over c of a[r, c], one warp of 32 threads, thread r for row r. "
               "Stage a through shared memory with coalesced loads (consecutive threads read "
               "consecutive addresses), barrier, then each thread sums its row from shared.",
               "Thread t copies elements e = t, t + 32, t + 64, ... of the flattened array "
               "(row e // cols, column e % cols); a barrier; then thread r < rows sums row r "
               "of the shared copy.")
HINT_STRIDED = ("Right values, but strided loads: thread r reading a[r, c] means the 32 "
                "threads of the warp read 32 addresses a row apart, one 32-byte sector each. "
                "Let consecutive threads read consecutive elements (through shared memory).",
                "The warp's k-th load should cover a[e0 .. e0 + 31] of the flattened array.")


def spec_row_sums(arrays, scalars):
    return {"out": arrays["a"].sum(axis=1)}


def _rows_case(name, rows, cols, seed):
    return PuzzleCase(name, {"a": _rng(seed).standard_normal((rows, cols))}, {"out": (rows,)},
                      {"rows": rows, "cols": cols}, ("a", "out", "rows", "cols"), (1,), (32,))


# -- puzzle 9: bank conflicts (transpose) -----------------------------------------------------

HINT_TRANSPOSE = ("out = a.T through a shared tile, one warp: lane l copies element l of each "
                  "row of a into the tile (coalesced reads), barrier, then for each row c of "
                  "out, lane l writes out[c, l] = tile[l, c] (coalesced writes).",
                  "Phase 1: for each row r, lane copies a's element (r, lane) into the tile. "
                  "Phase 2: for each column c, lanes below rows write the tile's (lane, c) to "
                  "out's (c, lane).")
HINT_BANKS = ("Right values, but bank conflicts: reading a column of a tile with 32 floats per "
              "row puts all lanes in the same bank (word lane*32 + c, bank c), so the warp's "
              "read is served one lane at a time. Pad each row by one word (33 columns) or "
              "swizzle the column index (c ^ lane).",
              "tile = cuda.shared.array((ROWS, 33), float32): word lane*33 + c lands in bank "
              "(lane + c) % 32, a different one per lane.")
HINT_NOT_TRANSPOSED = ("Your out is a itself, not its transpose: phase 2 must write the tile's "
                       "column c as out's row c, element lane of it (out has shape (32, rows)).",
                       "Swap the indices of the write to out, not of the read from the tile.")
HINT_TRANSPOSE_STRIDED = ("Right values, but strided global writes (or reads): writing "
                          "out[c, lane] straight from a[lane, c] makes neighbouring lanes "
                          "touch addresses a row apart. Go through a shared tile so both "
                          "the global reads and writes are along rows.",
                          "Read a[r, lane], write out[c, lane]: lane is always the last index.")


def spec_transpose(arrays, scalars):
    return {"out": arrays["a"].T.copy()}


def _tr_case(name, rows, seed):
    return PuzzleCase(name, {"a": _rng(seed).standard_normal((rows, 32))}, {"out": (32, rows)},
                      {"rows": rows}, ("a", "out", "rows"), (1,), (32,))


# -- the ladder -------------------------------------------------------------------------------

def _ladder() -> list[Puzzle]:
    return [
        Puzzle(1, "map_guard", "map, with a guard for the ragged edge",
               "map_guard(a, out, n): out[i] = 2 a[i] + 1 for i < n; blocks of 32 threads, "
               "ceil(n / 32) blocks.", spec_map_guard,
               [_map_case("n = 50: two blocks, the second ragged", 50, 1),
                _map_case("n = 7: one block, mostly idle threads", 7, 2)],
               HINT_MAP, [(_map_thread_only, HINT_BLOCK_INDEX), (_map_short, HINT_GUARD_SHORT)],
               [Rule(written_once("out"), HINT_TWICE)],
               expected=lambda c: {"global read": c.scalars["n"], "global write": c.scalars["n"],
                                   "shared read": 0, "shared write": 0}),
        Puzzle(2, "broadcast_2d", "2-D blocks: a row of b broadcast over a matrix",
               "broadcast_2d(a, b, out, rows, cols): out[r, c] = a[r, c] * b[c]; blocks of "
               "(8, 8) threads (x, y), grid (ceil(cols / 8), ceil(rows / 8)).",
               spec_broadcast_2d,
               [_bc_case("rows = 10, cols = 13: ragged both ways", 10, 13, 3),
                _bc_case("rows = 5, cols = 20", 5, 20, 4)],
               HINT_2D, [(_bc_wrong_axis, HINT_BROADCAST)],
               [Rule(written_once("out"), HINT_TWICE), Rule(x_walks_rows("out"), HINT_SWAPPED_XY)],
               expected=lambda c: {"global read": 2 * c.arrays["a"].size,
                                   "global write": c.arrays["a"].size}),
        Puzzle(3, "halo_sum", "shared memory and syncthreads: a neighbour sum with a halo",
               "halo_sum(a, out, n): out[i] = a[i] + a[i + 1], a[n] = 0; blocks of TPB = 32, "
               "through a shared array of TPB + 1 floats.", spec_halo_sum,
               [_halo_case("n = 70: three blocks, the last ragged", 70, 5),
                _halo_case("n = 32: one full block", 32, 6)],
               HINT_HALO_SUM, [(_halo_missing, HINT_HALO)],
               [Rule(no_races, HINT_SYNC),
                Rule(reads_at_most("a", lambda c: c.scalars["n"] + c.grid[0],
                                   "one read per element plus one halo element per block"),
                     HINT_HALO_GLOBAL)],
               expected=lambda c: {"global read": c.scalars["n"] + c.grid[0] - 1,
                                   "global write": c.scalars["n"]},
               first=[(_halo_unloaded, HINT_HALO)]),
        Puzzle(4, "block_reduce", "block reduction: sum and max by a tree in shared memory",
               "block_reduce(a, out_sum, out_max, n): out_sum[b], out_max[b] = sum and max of "
               "block b's 64 elements; TPB = 64 threads per block.", spec_block_reduce,
               [_red_case("n = 150: three blocks, the last ragged", 150, 7),
                _red_case("n = 40, all values negative: one ragged block", 40, 8, shift=-5.0)],
               HINT_REDUCE, [(_red_pad_zero, HINT_PAD_MAX), (_red_half, HINT_TREE)],
               [Rule(no_races, HINT_SYNC), Rule(written_once("out_sum"), HINT_ONE_WRITER),
                Rule(written_once("out_max"), HINT_ONE_WRITER),
                Rule(one_thread_reads_at_most(lambda c: 3 * TPB4 // 4,
                                              "a tree (two reads of each array per step)"),
                     HINT_SERIAL)],
               expected=lambda c: {"global read": c.scalars["n"],
                                   "global write": 2 * c.grid[0]}),
        Puzzle(5, "butterfly", "the warp-shuffle butterfly: sum and max over groups of 8 lanes",
               "butterfly(x, out_sum, out_max): every lane gets the sum and the max of x over "
               "its group of GROUP = 8 lanes, by shfl_xor(value, offset, scratch, lane); "
               "blocks of 32.", spec_butterfly,
               [_fly_case("one warp", 1, 9), _fly_case("two blocks of one warp", 2, 10)],
               HINT_BUTTERFLY, _fly_mistakes(),
               [Rule(reads_at_most("x", lambda c: c.arrays["x"].size, "one read per lane"),
                     HINT_FLY_GLOBAL)],
               expected=lambda c: {"global read": c.arrays["x"].size,
                                   "global write": 2 * c.arrays["x"].size}),
        Puzzle(6, "matmul_tiled", "tiled matmul with shared memory",
               "matmul_tiled(a, b, c, m, n, k): c = a @ b (m x k times k x n); blocks of "
               "(T, T) = (4, 4) threads, one 4 x 4 tile of c each; grid (ceil(n / 4), "
               "ceil(m / 4)).", spec_matmul,
               [_mm_case("m = 10, n = 9, k = 13: ragged everywhere", 10, 9, 13, 11),
                _mm_case("m = 4, n = 4, k = 8: one block", 4, 4, 8, 12)],
               HINT_MATMUL, [(_mm_floor, HINT_K_TILES)]
               + [(_mm_tiles_read_transposed(a_t, b_t), HINT_TILE_TRANSPOSED)
                  for a_t, b_t in ((True, True), (True, False), (False, True))],
               [Rule(no_races, HINT_SYNC),
                Rule(reads_at_most("a", _mm_budget, "one read per element of each tile"),
                     HINT_MATMUL_GLOBAL),
                Rule(reads_at_most("b", _mm_budget, "one read per element of each tile"),
                     HINT_MATMUL_GLOBAL)],
               edge_hint=HINT_TILE_EDGE,
               # round 18 (mutants): an unguarded store got the tile-load hint
               error_hints=[(" is outside c of shape", HINT_TILE_STORE)],
               expected=lambda c: {"global read": _mm_reads(c),
                                   "global write": c.scalars["m"] * c.scalars["n"]}),
        Puzzle(7, "matmul_micro", "register micro-tiles: 2 x 2 outputs per thread",
               "matmul_micro(a, b, c, m, n, k): c = a @ b with k <= 16; blocks of (4, 4) threads "
               "compute an 8 x 8 tile of c, 2 x 2 outputs per thread, from shared A (8 x 16) "
               "and B (16 x 8); grid (ceil(n / 8), ceil(m / 8)).", spec_matmul,
               [_mt_case("m = 13, n = 14, k = 11: ragged", 13, 14, 11, 13),
                _mt_case("m = 8, n = 8, k = 16: one block", 8, 8, 16, 14)],
               HINT_MICRO, [],
               [Rule(no_races, HINT_SYNC),
                Rule(shared_reads_at_most(lambda c: (TM7 + TN7) * K7,
                                          "(TM + TN) reads per kk"), HINT_MICRO_REUSE)],
               edge_hint=HINT_MICRO_EDGE,
               expected=lambda c: {"global write": c.scalars["m"] * c.scalars["n"]}),
        Puzzle(8, "row_sums", "coalesced vs strided loads: row sums",
               "row_sums(a, out, rows, cols): out[r] = sum of row r of a (rows <= 32, "
               "cols <= 32); one block of 32 threads; thread r writes out[r].", spec_row_sums,
               [_rows_case("rows = 27, cols = 20", 27, 20, 15),
                _rows_case("rows = 32, cols = 24", 32, 24, 16)],
               HINT_ROWSUM, [],
               [Rule(no_races, HINT_SYNC), Rule(coalesced(), HINT_STRIDED)],
               expected=lambda c: {"global read": c.arrays["a"].size,
                                   "global write": c.scalars["rows"],
                                   "shared read": c.arrays["a"].size,
                                   "shared write": c.arrays["a"].size}),
        Puzzle(9, "transpose", "shared-memory bank conflicts: a transpose through a tile",
               "transpose(a, out, rows): out = a.T for a (rows, 32), rows <= 32; one block of "
               "32 threads; reads and writes coalesced, and no bank conflicts.", spec_transpose,
               # the square case first: there a copy that is not transposed runs (out = a)
               # and is named; with rows = 20 it writes past out's 20 columns
               [_tr_case("rows = 32", 32, 18), _tr_case("rows = 20", 20, 17)],
               HINT_TRANSPOSE,
               [(lambda a, s: {"out": a["a"].copy()} if a["a"].shape == (32, 32) else
                 {"out": a["a"].T.copy()}, HINT_NOT_TRANSPOSED)],
               [Rule(no_races, HINT_SYNC), Rule(coalesced(), HINT_TRANSPOSE_STRIDED),
                Rule(no_bank_conflicts, HINT_BANKS)],
               expected=lambda c: {"global read": c.arrays["a"].size,
                                   "global write": c.arrays["a"].size, "bank conflicts": 0}),
        puzzle_softmax_rows(),
        puzzle_flash_block(),
        puzzle_histogram(),
        puzzle_stage_reverse(),
    ]


PUZZLES = {p.name: p for p in _ladder()}


def puzzle(name: str) -> Puzzle:
    """The puzzle called `name` (see `PUZZLES`, in ladder order)."""
    if name not in PUZZLES:
        raise ValueError(f"no puzzle {name!r}; the puzzles are {list(PUZZLES)}")
    return PUZZLES[name]


ALL_HINTS = list({id(v): v for v in [v for k, v in dict(globals()).items()
                                      if k.startswith("HINT_")] + _MEMORY_HINTS
                                      + _FLASH_HINTS}.values())
