"""Checks of the learner's algorithm, beyond its numbers: the rows it loads, the tiles it
skips, the arrays it holds at once.

`rows_loaded_case` counts the rows loaded by slices of one input (`WatchedRows`),
`hidden_tiles_case` fills tiles that must never be touched with NaN (a check through the
values, so converting or copying the inputs changes nothing), and `held_memory_case`
measures the largest total of arrays the learner's function holds at once (tracemalloc,
which sees numpy's buffers). Each returns a `_harness.Case`.
"""

from __future__ import annotations

import tracemalloc

import numpy as np

from ._harness import Case, plain


class WatchedRows(np.ndarray):
    """An input array that logs which row ranges the learner's code slices from it.

    `k = WatchedRows.wrap(k)`; after the run, `k.rows_read()` is the number of rows
    loaded through `k[a:b]` (or `k[a:b, ...]`) slices. Views and products derived from it
    log nothing, so only loads from "outer memory" count; a whole copy of it
    (`k.astype(float)`, `k.copy()`) logs into the same record. `np.asarray(k)` gives a
    plain array that logs nothing: `counted()` then says False, and the checker relies on
    `hidden_tiles_case`, which checks through the values.
    """

    def __array_finalize__(self, obj):
        log = getattr(obj, "_log", None)
        # a whole copy (astype, copy) keeps counting; a slice taken in __getitem__ does not
        same = (log is not None and getattr(obj, "shape", None) == self.shape
                and not getattr(obj, "_slicing", False))
        self._log = log if same else None

    @classmethod
    def wrap(cls, array):
        watched = np.asarray(array).view(cls)
        watched._log = []
        return watched

    def __getitem__(self, index):
        self._slicing = True
        try:
            out = super().__getitem__(index)
        finally:
            self._slicing = False
        log = getattr(self, "_log", None)
        if log is None:
            return out
        if isinstance(out, WatchedRows) and out.shape == self.shape:
            out._log = log                         # a view of the whole array (k[:]): counts on
            return out
        first = index[0] if isinstance(index, tuple) and index else index
        if isinstance(first, slice):
            start, stop, step = first.indices(self.shape[0])
            log.append(len(range(start, stop, step)))
        elif isinstance(first, (int, np.integer)):
            log.append(1)
        else:
            log.append(self.shape[0])              # a fancy index: count the whole array
        return out

    def rows_read(self) -> int:
        return int(sum(self._log or ()))

    def counted(self) -> bool:
        """Whether any load was logged (False when the learner read a plain conversion)."""
        return bool(self._log)



def rows_loaded_case(name: str, arrays, rest, watch: int, want: int, no_skip,
                     skip_too_much) -> Case:
    """A Case on causal tile skipping: the rows the learner's loop loads from one input.

    Runs `fn(*arrays, *rest)` on copies of `arrays`, the one at position `watch` wrapped
    in `WatchedRows`, and compares the rows it loads through slices `x[a:b]` with `want`
    (the rows of the tiles the mask leaves visible, e.g. from
    `flashcourse.geometry.causal_block_sums`). More rows: hint `no_skip`; fewer:
    `skip_too_much` (each a (level 1, level 2) pair); exact integers. When the learner's
    code logged no load at all (it read a plain conversion such as `np.asarray(k)`), the
    count is not known and the case passes: `hidden_tiles_case` decides on the values.
    """
    def run(fn):
        args = [a.copy() for a in arrays]
        args[watch] = WatchedRows.wrap(args[watch])
        fn(*args, *rest)
        if not args[watch].counted():
            return want, want
        return args[watch].rows_read(), want

    diagnoses = [((lambda yours, expected: yours > expected), *no_skip),
                 ((lambda yours, expected: yours < expected), *skip_too_much)]
    return Case(name, run, no_skip[0], diagnoses, rtol=0, atol=0, hint2=no_skip[1])


def hidden_blocks(tq: int, tk: int, br: int, bc: int, poison: str):
    """For each block of the `poison` side ("key": key blocks of Bc rows, "query": query
    blocks of Br rows) that some block of the other side cannot see under the causal mask:
    (its row slice, a bool mask over the other side's rows whose block cannot see it)."""
    from ..geometry import tile_visibility
    keys = poison == "key"
    n_own, b_own, n_other, b_other = (tk, bc, tq, br) if keys else (tq, br, tk, bc)
    for a0 in range(0, n_own, b_own):
        a1 = min(a0 + b_own, n_own)
        rows = np.zeros(n_other, bool)
        for c0 in range(0, n_other, b_other):
            c1 = min(c0 + b_other, n_other)
            q0, q1, k0, k1 = (c0, c1, a0, a1) if keys else (a0, a1, c0, c1)
            rows[c0:c1] = tile_visibility(q0, q1, k0, k1, tq, tk, True) == "hidden"
        if rows.any():
            yield slice(a0, a1), rows


def hidden_tiles_case(name: str, arrays, rest, poisons, hint) -> Case:
    """A Case on tile skipping checked through the values: tiles that must never be
    touched hold NaN, and the results they must not reach stay finite.

    `poisons` is a list of (rows, check): `rows` = [(input index, row slice), ...] to fill
    with NaN, and `check(out)` -> the number of result entries that the NaN reached but
    must not (a learner who processes a hidden tile multiplies its NaN by a probability
    of 0, and 0 * NaN = NaN). One run per poison; the case passes with 0 entries reached.
    Converting, copying or viewing the inputs cannot change the verdict.
    """
    def run(fn):
        reached = 0
        for rows, check in poisons:
            args = [np.array(a, copy=True) for a in arrays]
            for index, sl in rows:
                args[index][sl] = np.nan
            with np.errstate(all="ignore"):
                out = fn(*args, *rest)
            reached += int(check(plain(out)))
        return reached, 0

    return Case(name, run, hint[0], rtol=0, atol=0, hint2=hint[1])


def held_memory(fn, *args) -> tuple[object, int]:
    """(fn(*args), the largest number of bytes it held at once beyond what existed before),
    measured with tracemalloc (which sees numpy's array buffers)."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = fn(*args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return out, max(0, peak - base)


def held_budget(inputs: int, outputs: int, tile: int, e: int = 8) -> int:
    """Bytes a tiled function may hold at once, from element counts: two copies of its
    inputs (a learner may convert them), its outputs, sixteen tile-sized temporaries
    (`tile` elements: S, P, masks, the per-block state) and 64 KiB for Python's objects."""
    return (2 * inputs + outputs + 16 * tile) * e + 64 * 1024


def held_memory_case(name: str, arrays, rest, budget: int, hint, describe) -> Case:
    """A Case on what the learner's function holds at once: at most `budget` bytes.

    Runs `fn(*arrays, *rest)` on copies (made before measuring) under `held_memory`.
    `describe(peak)` says in words what a peak of that many bytes would be (e.g. "a
    64 x 4096 block of float64 scores"); the hint `hint` = (level 1, level 2) says why the
    algorithm must not hold it.
    """
    def run(fn):
        args = [np.array(a, copy=True) for a in arrays]
        _, peak = held_memory(fn, *args, *rest)
        return peak, budget

    def compare(peak, limit):
        if peak <= limit:
            return True, ""
        return False, (f"your function held {peak:,} B at once ({describe(peak)}); the tiled "
                       f"algorithm needs at most about {limit:,} B here")

    return Case(name, run, hint[0], rtol=0, atol=0, hint2=hint[1], compare=compare)
