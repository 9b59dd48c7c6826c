"""Checks of the learner's algorithm, beyond its numbers: the rows it loads, the tiles it
skips, the arrays it holds at once.

`rows_loaded_case` counts the rows loaded by slices of one input (`WatchedRows`),
`hidden_tiles_case` fills tiles that must never be touched with NaN (a check through the
values, so converting or copying the inputs changes nothing), and `held_memory_case`
measures the largest total of arrays the learner's function holds at once (tracemalloc,
which sees numpy's buffers). Each returns a `_harness.Case`.
"""

from __future__ import annotations

import builtins
import sys
import tracemalloc

import numpy as np

from ._harness import Case, plain


class WatchedRows(np.ndarray):
    """An input array that logs which row ranges the learner's code slices from it.

    `k = WatchedRows.wrap(k)`; after the run, `k.rows_read()` is the number of rows
    loaded through `k[a:b]` (or `k[a:b, ...]`) slices. Only the input itself and its whole
    copies (`k.astype(float)`, `k.copy()`, `k[:]`) are watched and log into the same
    record; everything else derived from it is a plain ndarray that logs nothing: slices,
    arithmetic and ufunc results (`out=` included), and what numpy functions make from it
    (`np.zeros_like(k)`, `np.empty_like`, `np.add.at`, ...), so no watched object leaks
    into the learner's own arrays. A whole copy that the learner writes into (a gradient
    allocated as `q.copy()`) is theirs: its loads stop counting. `np.asarray(k)` gives a
    plain array that logs nothing: `counted()` then says False, and the checker relies on
    `hidden_tiles_case`, which checks through the values. Printing it reads nothing.
    """

    def __array_finalize__(self, obj):
        # a whole copy (astype, copy, view) keeps counting; a slice taken in __getitem__
        # is made plain there
        self._log = getattr(obj, "_log", None) if getattr(obj, "shape", None) == self.shape \
            else None

    @classmethod
    def wrap(cls, array):
        watched = np.asarray(array).view(cls)
        watched._log = _Loads()
        return watched

    def __getitem__(self, index):
        out = super().__getitem__(index)
        log = getattr(self, "_log", None)
        if isinstance(out, WatchedRows) and out.shape == self.shape and log is not None:
            return out                                 # a view of the whole array (k[:])
        if isinstance(out, np.ndarray):
            out = out.view(np.ndarray)
        if log is None:
            return out
        first = index[0] if isinstance(index, tuple) and index else index
        if isinstance(first, slice):
            start, stop, step = first.indices(self.shape[0])
            log.add(self, len(range(start, stop, step)))
        elif isinstance(first, (int, np.integer)):
            log.add(self, 1)
        else:
            log.add(self, self.shape[0])               # a fancy index: count the whole array
        return out

    def __setitem__(self, index, value):
        if getattr(self, "_log", None) is not None:
            self._log.written(self)                    # the learner's own array now
        super().__setitem__(index, value)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out")
        written = list(out or ()) + ([inputs[0]] if method == "at" else [])
        for a in written:                              # np.add.at(x, ...) writes into x
            if isinstance(a, WatchedRows) and a._log is not None:
                a._log.written(a)
        if out:
            kwargs["out"] = tuple(_plain(a) for a in out)
        return getattr(ufunc, method)(*(_plain(a) for a in inputs), **kwargs)

    def __array_function__(self, func, types, args, kwargs):
        return func(*_plain(args), **{key: _plain(v) for key, v in kwargs.items()})

    def __array_wrap__(self, array, context=None, return_scalar=False):
        # what C methods such as k.dot(x) return: a plain array (or scalar)
        array = np.asarray(array).view(np.ndarray)
        return array[()] if return_scalar and array.ndim == 0 else array

    @property
    def T(self):                                       # noqa: N802 - numpy's name
        return self.view(np.ndarray).T

    def transpose(self, *axes):
        return self.view(np.ndarray).transpose(*axes)

    def dot(self, b, out=None):
        return self.view(np.ndarray).dot(_plain(b), out)

    # printing reads the array through numpy's own code (k[:3], k[-3:], ...): not a load
    def __repr__(self):
        return repr(self.view(np.ndarray))

    def __str__(self):
        return str(self.view(np.ndarray))

    def __format__(self, spec):
        return format(self.view(np.ndarray), spec)

    def rows_read(self) -> int:
        return self._log.total() if self._log is not None else 0

    def counted(self) -> bool:
        """Whether any load was logged (False when the learner read a plain conversion)."""
        return self._log is not None and self._log.total() > 0


class _Loads:
    """The shared record of a watched input and its whole copies: rows loaded per array;
    the loads of an array written into (the learner's own) do not count."""

    def __init__(self):
        self.rows, self.mine = [], []

    def add(self, array, n: int) -> None:
        if not any(a is array for a in self.mine):
            self.rows.append((array, n))

    def written(self, array) -> None:
        if not any(a is array for a in self.mine):
            self.mine.append(array)

    def total(self) -> int:
        return int(sum(n for a, n in self.rows if not any(a is b for b in self.mine)))


def _plain(x):
    """`x` with every WatchedRows (also inside lists and tuples) viewed as a plain ndarray."""
    if isinstance(x, WatchedRows):
        return x.view(np.ndarray)
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(y) for y in x)
    return x


def rows_loaded_case(name: str, arrays, rest, watch: int, want: int, no_skip,
                     skip_too_much, fewest: int | None = None) -> Case:
    """A Case on causal tile skipping: the rows the learner's loop loads from one input.

    Runs `fn(*arrays, *rest)` on copies of `arrays`, the one at position `watch` wrapped
    in `WatchedRows`, and compares the rows it loads through slices `x[a:b]` with `want`
    (the rows of the tiles the mask leaves visible, e.g. from
    `flashcourse.geometry.causal_block_sums`). More rows: hint `no_skip`; fewer:
    `skip_too_much` (each a (level 1, level 2) pair); exact integers. When the learner's
    code logged no load at all (it read a plain conversion such as `np.asarray(k)`), the
    count is not known and the case passes: `hidden_tiles_case` decides on the values.
    `fewest` (at most `want`): the rows a loop loads that clips each tile to the rows that
    see (or that are seen by) the other side's block, e.g. the last key tile cut at the
    block's last visible key; any count from `fewest` to `want` passes, since the values
    cases have shown that nothing visible was skipped.
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
    if fewest is None:
        return Case(name, run, no_skip[0], diagnoses, rtol=0, atol=0, hint2=no_skip[1])

    def compare(yours, expected):
        if fewest <= yours <= expected:
            return True, ""
        return False, (f"your loop loaded {yours:.0f} rows, expected {expected:.0f} (or as "
                       f"few as {fewest}, the rows of the tiles cut to what the mask shows)")
    return Case(name, run, no_skip[0], diagnoses, hint2=no_skip[1], compare=compare)


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
    measured with tracemalloc (which sees numpy's array buffers), without what the learner's
    `print` calls build (`_PrintsLeftOut`): a debug `print(k.tolist())` is not the
    algorithm's."""
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        with _PrintsLeftOut() as prints:
            out = fn(*args)
        peak = prints.peak()
    finally:
        if not was_tracing:
            tracemalloc.stop()
    return out, max(0, peak - base)


class _PrintsLeftOut:
    """While active, `builtins.print` is wrapped: at each call it notes tracemalloc's peak
    so far less the size of the Python objects printed (`print(k.tolist())` builds the list
    before print is called), and resets the peak after the call, so the text and lists that
    printing builds are not counted. The peak of the stretch after a print is also reduced
    by what that print was given (still alive when the peak is reset), but never below what
    is held at its end. Arrays given to print are not subtracted: they are the algorithm's.
    `peak()` is the largest of the stretches."""

    def __init__(self):
        self.peaks, self.given, self.inside = [], 0, False

    def __enter__(self):
        self.real = builtins.print

        def print_left_out(*values, **kwargs):
            if self.inside:
                return self.real(*values, **kwargs)
            now = tracemalloc.get_traced_memory()         # before counting allocates
            self._close_stretch(now, _object_bytes(values))
            self.inside = True
            try:
                return self.real(*values, **kwargs)
            finally:
                self.inside = False
                tracemalloc.reset_peak()
        builtins.print = print_left_out
        return self

    def __exit__(self, *exc):
        builtins.print = self.real

    def _close_stretch(self, now, printing: int) -> None:
        current, peak = now
        self.peaks.append(max(peak - max(self.given, printing), current - printing))
        self.given = printing

    def peak(self) -> int:
        self._close_stretch(tracemalloc.get_traced_memory(), 0)
        return max(self.peaks)


def _object_bytes(values, limit: int = 1_000_000) -> int:
    """Bytes of the Python objects in `values` (lists, tuples, dicts, text, numbers, at most
    `limit` objects), numpy arrays left out."""
    seen, todo, total = set(), list(values), 0
    while todo and len(seen) < limit:
        x = todo.pop()
        if id(x) in seen or isinstance(x, np.ndarray):
            continue
        seen.add(id(x))
        total += sys.getsizeof(x, 0)
        if isinstance(x, (list, tuple, set, frozenset)):
            todo.extend(x)
        elif isinstance(x, dict):
            todo.extend(x.keys())
            todo.extend(x.values())
    return total


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
