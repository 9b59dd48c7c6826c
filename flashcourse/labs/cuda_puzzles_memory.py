"""Lab 05's puzzles 12 and 13 (the machinery is `cuda_puzzle_rules.py`, the ladder
`cuda_puzzles.py`): two tools of the fast kernels, each on its own.

    12 histogram   atomics: many threads add into a few counters. A plain `h[b] += 1` is a
                   read, an add and a write, and another thread's update between the read
                   and the write is lost; `cuda.atomic.add` does the three as one. Each
                   block counts into its own shared histogram first (cheap atomics on
                   shared memory), then adds it to the global one: NB atomics per block on
                   global memory instead of one per element.
    13 stage_reverse  `cp.async`: a block stages its tile in shared memory with
                   asynchronous 16-byte copies (zeros past the end), commits them, waits,
                   passes a barrier, and only then reads what other threads copied.

The checks read the simulator's trace: plain read-modify-writes that lose updates
(`Trace.lost_updates`), plain stores into the histogram, races between atomics and plain
accesses, global atomics per block; and for the copies, the twin's notes (`cuda_async_copy`):
copies issued, committed, landed.
"""

from __future__ import annotations

import numpy as np

from .cuda_async_copy import FLOATS_PER_COPY, MISALIGNED
from .cuda_puzzle_rules import (HINT_SYNC, Puzzle, PuzzleCase, Rule, _cdiv, _rng, no_races)

# -- puzzle 12: a histogram with atomics ------------------------------------------------------

TPB12 = 32
NB12 = 8          # bins: x holds whole numbers 0 .. NB12 - 1 (as float32)

HINT_HIST = ("hist[b] = how many x[i] (i < n) equal b. Each block counts its 32 elements into "
             "a histogram of NB12 floats in shared memory (zeroed, a barrier, one atomic add "
             "per element, a barrier), then adds each of its NB12 counts to hist with one "
             "atomic add.",
             "sh = cuda.shared.array(NB12, float32); thread t < NB12 zeroes sh[t]; barrier; "
             "cuda.atomic.add(sh, bin, ONE) for i < n; barrier; thread t < NB12 adds sh[t] "
             "into hist[t] with cuda.atomic.add.")
HINT_ATOMIC_GLOBAL = (
    "hist is updated with plain stores (the line above names an element): `hist[b] += 1` or "
    "`hist[t] = ...` is a read, an add and a write, and when two threads (of any blocks) do it "
    "to one element, the update that lands between the other's read and write is lost. Every "
    "update of hist must be an atomic add, which does the read, the add and the write as one.",
    "cuda.atomic.add(hist, bin, value): never a plain store into hist.")
HINT_ATOMIC_SHARED = (
    "Two threads updated one element of the shared histogram with plain accesses between the "
    "same two barriers (`sh[b] += ONE`): a read-modify-write race. Threads of one block "
    "collide too, and counts get lost (here often by luck not, on a GPU almost always).",
    "cuda.atomic.add(sh, bin, ONE) for the per-element counts.")
HINT_HIST_ZERO = (
    "The shared histogram was never zeroed (NaN: a shared array starts with whatever was "
    "there; on the simulator NaN). Zero it before the first add, and put a barrier between "
    "the zeroing and the adds.",
    "if t < NB12: sh[t] = F0, then a barrier.")
HINT_FLUSH_ONCE = (
    "Every count is 32 times too large: each of the block's 32 threads added the whole "
    "shared histogram to hist. Each bin of a block must be added once.",
    "Let thread t < NB12 add bin t (or one thread add all NB12 bins).")
HINT_PRIVATE = (
    "Right values, but one global atomic per element: atomics on one address are served one "
    "after another (each is a read-modify-write at the L2 cache), so a skewed histogram "
    "becomes a queue. Count the block's elements in shared memory first (atomics there are "
    "cheap and local to the block), then add NB12 counts per block to global memory.",
    "A shared histogram of NB12 floats: atomics on it per element, then one global atomic "
    "per bin per block.")


def spec_histogram(arrays, scalars):
    bins = arrays["x"].astype(np.int64)
    return {"hist": np.bincount(bins, minlength=NB12).astype(np.float64)}


def _hist_case(name, x, seed=None):
    n = len(x)
    return PuzzleCase(name, {"x": np.asarray(x, np.float64)}, {"hist": (NB12,)}, {"n": n},
                      ("x", "hist", "n"), (_cdiv(n, TPB12),), (TPB12,),
                      initial={"hist": 0.0})


def _hist_cases():
    rng = _rng(24)
    skewed = rng.integers(0, NB12, 70)
    skewed[::3] = 3
    return [_hist_case("n = 70: three blocks, the last ragged; bin 3 popular", skewed),
            _hist_case("n = 40, every element in bin 5: one address, 40 updates",
                       np.full(40, 5)),
            _hist_case("n = 9: one block, mostly idle", rng.integers(0, NB12, 9))]


def _hist_nan(y, e):
    return not y.error and bool(np.isnan(y.outputs["hist"]).any())


def _hist_flush_all(arrays, scalars):
    """Every thread of a block adds the block's whole histogram."""
    x = arrays["x"].astype(np.int64)
    out = np.zeros(NB12)
    for b0 in range(0, x.size, TPB12):
        out += TPB12 * np.bincount(x[b0:b0 + TPB12], minlength=NB12)
    return {"hist": out}


def no_plain_stores(array):
    def test(trace, case):
        stores = trace.written_by(array)
        if not stores:
            return ""
        off, who = next(iter(sorted(stores.items())))
        return (f"{array}[{off}] was written with a plain store by {len(who)} "
                f"thread{'s' if len(who) > 1 else ''}")
    return test


def no_lost_shared_updates(trace, case):
    lost = [u for u in trace.lost_updates() if u[0] == "shared"]
    if not lost:
        return ""
    _, array, off, n = lost[0]
    return (f"{n} threads read and then wrote element {off} of the shared array of "
            f"{array[len('shared '):]} between the same two barriers")


def global_atomics_at_most(array, per_block):
    def test(trace, case):
        n = trace.total("global atomic", array)
        most = per_block * case.grid[0]
        return "" if n <= most else (f"{n} atomic adds to {array} in global memory; "
                                     f"{per_block} per block need at most {most}")
    return test


def puzzle_histogram() -> Puzzle:
    return Puzzle(
        12, "histogram", "atomics: a histogram, counted per block in shared memory",
        "histogram(x, hist, n): hist[b] += the number of x[i] == b (i < n), x holding whole "
        "numbers 0 .. NB12 - 1 = 7; hist starts at zero; blocks of TPB12 = 32, ceil(n / 32) "
        "blocks; a shared histogram per block, then at most NB12 global atomics per block.",
        spec_histogram, _hist_cases(), HINT_HIST,
        [(_hist_flush_all, HINT_FLUSH_ONCE)],
        [Rule(no_plain_stores("hist"), HINT_ATOMIC_GLOBAL),
         Rule(no_lost_shared_updates, HINT_ATOMIC_SHARED),
         Rule(no_races, HINT_SYNC),
         Rule(global_atomics_at_most("hist", NB12), HINT_PRIVATE)],
        expected=lambda c: {"global read": c.scalars["n"], "global write": 0,
                            "shared read": min(NB12, TPB12) * c.grid[0],
                            "global atomic": NB12 * c.grid[0],
                            "shared atomic": c.scalars["n"]},
        first=[(_hist_nan, HINT_HIST_ZERO)])


# -- puzzle 13: stage a tile with cp.async ----------------------------------------------------

COLS13 = 32                      # floats per row
ROWS13 = 4                       # rows per block's tile
TILE13 = ROWS13 * COLS13         # 128 floats: one 16-byte copy per thread of 32

HINT_STAGE = ("out[r, c] = x[r, 31 - c] for rows of 32 floats (x and out are 1-D: row r at "
              "32 r). Each block of 32 threads stages rows 4 b .. 4 b + 3 in shared memory "
              "with one 16-byte cp_async16 per thread (zeros past the last row), commits, "
              "waits, passes a barrier, then writes the reversed rows.",
              "Thread t copies floats 4 t .. 4 t + 3 of the tile: cp_async16(sm, 4 t, x, "
              "TILE13 b + 4 t, 16 or 0 past the end); commit_group, wait_all, "
              "a barrier; then for each row i: out[...] = sm[COLS13 i + 31 - t].")
HINT_CP_WAIT = (
    "The tile was read before the copies landed (NaN: shared floats no copy had written "
    "yet). cp_async16 only starts a copy and returns at once; the data is in shared memory "
    "after the thread has committed the copies (commit_group) and waited for them "
    "(wait_all).",
    "cp_async16 ...; commit_group, wait_all, a barrier (syncthreads); and only then read sm.")
HINT_CP_COMMIT = (
    "wait_all() found copies that were never committed: cp.async.wait_group waits for "
    "committed groups only, so those copies were not waited for (on the simulator they never "
    "land). Call commit_group after issuing the copies, before the wait.",
    "cp_async16(...); commit_group, then wait_all.")
HINT_CP_BARRIER = (
    "A race on the tile: a thread read floats that ANOTHER thread's copy wrote, with no "
    "barrier in between. wait_all() waits for this thread's own copies only; the other "
    "threads' copies are known to have landed only after a barrier that every thread passes "
    "after its wait.",
    "wait_all(), then a barrier (syncthreads), then read the tile.")
HINT_CP_UNITS = (
    "A copy's address is not 16-byte aligned (the error above): cp.async of 16 bytes needs "
    "both addresses to be multiples of 16 bytes. The indices count float32 (4 bytes), so one "
    "copy moves 4 floats and thread t's copy starts at float 4 t, not t.",
    "sidx = FLOATS_PER_COPY * t and the global index TILE13 * block + FLOATS_PER_COPY * t.")
HINT_CP_EDGE = (
    "A copy read past the end of x (the error above names the index): the last block's tile "
    "has rows past the last one. cp.async can fill them with zeros without reading: pass "
    "nbytes = 0 for a row past the end (and guard the writes of out).",
    "nbytes = 16 if the copy's row is < rows, else 0; write out only for rows < rows.")
HINT_CP_OUT_EDGE = (
    "A write past the end of out (the error above names the index): the last block's tile "
    "has rows past the last one; they were staged as zeros, but they have no place in out. "
    "Write out only for the rows that exist.",
    "In the loop over the tile's rows: if r < rows, then write the reversed row.")
HINT_CP_REGISTERS = (
    "Right values, but the tile went through registers (plain loads and stores, the line "
    "above says how many floats the copies moved): the puzzle is about cp.async, which "
    "copies global to shared memory without registers and lets the thread go on while the "
    "data is in flight (notebook 10's kernels load the next tile that way while they work "
    "on the current one).",
    "One cp_async16 per thread per tile, then commit_group, wait_all, a barrier.")


def spec_stage_reverse(arrays, scalars):
    x = arrays["x"].reshape(-1, COLS13)
    return {"out": x[:, ::-1].reshape(-1)}


def _stage_case(name, rows, seed):
    return PuzzleCase(name, {"x": _rng(seed).standard_normal(rows * COLS13)},
                      {"out": (rows * COLS13,)}, {"rows": rows}, ("x", "out", "rows"),
                      (_cdiv(rows, ROWS13),), (COLS13,))


def _copies_unlanded(y, e):
    notes = y.trace.notes if y.trace is not None else {}
    return not y.error and notes.get("cp.async issued", 0) > notes.get("cp.async landed", 0)


def _uncommitted(y, e):
    return (not y.error and y.trace is not None
            and y.trace.notes.get("cp.async uncommitted at a wait", 0) > 0)


def _raced(y, e):
    return not y.error and y.trace is not None and bool(y.trace.races())


def _read_unlanded(y, e):
    return not y.error and bool(np.isnan(y.outputs["out"]).any())


def copied_everything(trace, case):
    moved = FLOATS_PER_COPY * trace.notes.get("cp.async landed", 0)
    need = case.arrays["x"].size
    return "" if moved >= need else (f"the copies moved {moved} floats of x's {need}")


def puzzle_stage_reverse() -> Puzzle:
    return Puzzle(
        13, "stage_reverse", "cp.async: stage a tile in shared memory, then reverse its rows",
        "stage_reverse(x, out, rows): out[32 r + c] = x[32 r + 31 - c] for rows of COLS13 = "
        "32 floats; blocks of 32 threads, each stages ROWS13 = 4 rows (TILE13 = 128 floats) "
        "with cp_async16 (16 bytes per thread, zeros past the end), commit_group, wait_all "
        "and a barrier; grid ceil(rows / 4).",
        spec_stage_reverse,
        [_stage_case("rows = 7: two blocks, the second with one row past the end", 7, 25),
         _stage_case("rows = 4: one full tile", 4, 26)],
        HINT_STAGE, [],
        [Rule(copied_everything, HINT_CP_REGISTERS)],
        edge_hint=HINT_CP_EDGE,
        expected=lambda c: {"global read": c.arrays["x"].size,
                            "global write": c.arrays["x"].size,
                            "shared write": c.grid[0] * TILE13},
        first=[(_uncommitted, HINT_CP_COMMIT), (_raced, HINT_CP_BARRIER),
               (_copies_unlanded, HINT_CP_WAIT), (_read_unlanded, HINT_CP_WAIT)],
        error_hints=[(MISALIGNED, HINT_CP_UNITS), ("is outside out of", HINT_CP_OUT_EDGE)])


HINTS = [v for k, v in dict(globals()).items() if k.startswith("HINT_") and v is not HINT_SYNC]
