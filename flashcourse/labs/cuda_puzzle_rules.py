"""The machinery of lab 05's puzzles (`cuda_puzzles.py` holds the puzzles themselves).

`Puzzle` (spec, cases, checker, `describe`/`check`/`show`), `PuzzleCase`, `launch` (a
kernel on one case, traced on the simulator), the per-thread tables of `show()`, and the
algorithm rules every puzzle can use: no shared-memory races (a missing syncthreads;
stores of several threads to one element that no thread reads are overlapping work, a
generic rule of their own), written once, global-read budgets, coalesced accesses, no bank
conflicts.

Every puzzle also checks, before its own rules (`GENERIC_RULES`), that every thread of a
block reached the same barriers (a `syncthreads`, or a shuffle that goes through one on the
simulator, inside an `if` that only some threads take), and that the kernel read each input
at least once per element (a result computed some other way leaves no trace to check); it
refuses an object that `@cuda.jit` did not make, and ends with a check that the kernel has no
float64 constants. A rule whose hint starts "Right values, but" names a failure only when
the values are right: it is about how the kernel got them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..cuda.common._launch import simulator_lock
from ..gpu import using_simulator
from ._harness import Case, Result, is_compile_error, run_checks
from .kernel_source import (NotNumbaKernelError, float64_literals, is_numba_kernel,
                            kernel_guard, require_cuda_kernel)
from .cuda_trace import Trace, short, tracing, traced

RTOL, ATOL = 1e-4, 1e-5          # float32 kernels against the float64 numpy spec
NEG = -np.inf

# -- hints shared by several puzzles ----------------------------------------------------------

HINT_EDGE = (
    "A thread read or wrote past the ragged edge of an array (the error above names the "
    "index): the grid has more threads than elements, so the extra threads must do nothing. "
    "If every access is already guarded, check the index itself: the order of its axes "
    "(a[r, c], the row first) and which bound each part is compared with.",
    "Compute the thread's index first, then wrap every load and store in `if index < n:` "
    "(one bound per dimension).")
HINT_INDEX = (
    "A thread used an index outside an array (the error above names the array, the index and "
    "the thread), and not at the ragged edge of the data: the index is negative, or the array "
    "is a shared or local one, sized for the block or the thread. Check how that index is "
    "computed: a bound (t <= s where t < s is meant), a neighbour (t - 1 at thread 0, t + s "
    "past the end), a reversed position off by one, or a value used as an index (a bin).",
    "Work out the index for the thread the error names (tid; ctaid is its block) and follow "
    "it back to the line that computed it.")
HINT_OVERLAP = (
    "Several threads wrote the same shared element between two barriers (the line above "
    "names one), and no thread read it there: the threads' shares of the work overlap, so "
    "some elements are stored two or more times. That is not a missing barrier: the stores "
    "race even when they hold the same value, and the extra ones are wasted work. Give each "
    "element one writer.",
    "A loop that splits a copy among the threads steps by the number of threads of the "
    "block (range(tid, size, threads)); n elements set to zero are set by threads t < n, "
    "one each.")
HINT_SYNC = (
    "A race on shared memory: one thread wrote an element that another thread touched "
    "between the same two barriers, so the result depends on which thread runs first. A "
    "barrier (syncthreads) is missing: after the loads, before reading them; and before "
    "overwriting a tile that others may still be reading.",
    "Every thread must reach every syncthreads (never put one inside an `if` that only "
    "some threads take). In a loop over tiles you need two: after the load, and at the end "
    "of the iteration.")
HINT_TWICE = (
    "Some output element was written by more than one thread: two threads computed the same "
    "index.",
    "The block's offset (block index times block size) plus the thread index gives every "
    "thread of the grid its own element.")
HINT_DIVERGENT_BARRIER = (
    "A barrier (syncthreads) that not every thread of the block reached: it stands inside an "
    "`if` (or a loop, or after a `return`) that only some threads take. On a GPU that is "
    "undefined behaviour, often a hang: the threads that arrived wait for ones that never "
    "come. Every thread of the block must reach every barrier, the same number of times.",
    "Keep the `if` around the work only and put the barrier after it, where all threads "
    "pass; a loop that holds a barrier must run the same number of times in every thread.")
HINT_SHFL_DIVERGENT = (
    "Not every lane called shfl_xor: a shuffle exchanges values between lanes, so all lanes "
    "must call it together, every step (on a GPU a lane that skips it leaves its partner "
    "waiting, which is undefined behaviour; the simulator's shuffle goes through a barrier). "
    "Never put shfl_xor inside an `if` that only some lanes take.",
    "Call shfl_xor in every lane on every step of the loop; if some lanes must not use the "
    "partner's value, decide that after the call.")
HINT_NOT_NUMBA = (
    "What you passed to check() is not a CUDA kernel made by @cuda.jit: the checker launches "
    "your kernel and checks what each of its threads reads and writes, which an object that "
    "computes the answer another way (numpy, a class with []) does not do.",
    "Write the puzzle's def with @cuda.jit on the line above it, fill in its body, run the "
    "cell, and pass that function to check().")
HINT_EMPTY_TRACE = (
    "Right values, but the kernel read an input fewer times than it has elements (the line "
    "above says which): the checker follows every element a thread reads, and a result that "
    "does not come from the threads reading their inputs cannot be checked. Each thread "
    "reads the elements it needs by index, inside the kernel.",
    "Read inputs element by element (a[i], a[r, c]) in the kernel; no numpy on whole arrays, "
    "no arrays from outside the kernel's arguments.")
HINT_LOCAL_UNSET = (
    "A thread wrote NaN into the output: it used an element of a cuda.local.array before "
    "setting it. A local array starts with whatever its memory held (leftover values on a "
    "GPU; NaN here, where the checker fills it so that this shows), so an accumulator must "
    "be set to zero before the first +=.",
    "Before the loop over k: for x in range(len): acc[x] = F0 (every element, in every "
    "thread).")
HINT_FLOAT64 = (
    "A float constant in the kernel (named above: 1.0, 0.5, math.inf, ...) is a float64: on a "
    "GPU Numba then computes that expression in float64, slower, and not what the float32 "
    "arrays hold. Wrap every float constant in float32(...).",
    "Write float32(1.0) for 1.0, or use the lab's F0 and NEG_INF (float32 zero and -inf).")


# -- the machinery ----------------------------------------------------------------------------

@dataclass
class PuzzleCase:
    """One launch: inputs (float32 arrays), outputs (shapes, written by the kernel; they
    start as NaN, or as `initial[name]`: a histogram the host zeroes), int32 scalars, the
    kernel's argument order, grid and block."""

    name: str
    arrays: dict
    outputs: dict
    scalars: dict
    order: tuple
    grid: tuple
    block: tuple
    initial: dict = field(default_factory=dict)


@dataclass
class Outcome:
    """What one launch gave: outputs, the error text (or ""), the trace (simulator)."""

    outputs: dict
    error: str = ""
    trace: Trace | None = None
    broken: int = -1          # index of the first algorithm rule the trace breaks
    why: str = ""
    broken_all: dict = field(default_factory=dict)     # every rule broken: index -> why
    refused: str = ""         # why the kernel was not launched (not a Numba kernel)
    relaunch: Callable | None = None    # local_fill -> the outputs of the same launch


def launch(kernel, case: PuzzleCase, *, trace: bool = True, local_fill=np.nan) -> Outcome:
    """Run `kernel[grid, block](...)` on the case; traced on the simulator (float local
    arrays start as `local_fill` there)."""
    from numba import cuda
    outs = {k: np.full(shape, case.initial.get(k, np.nan), np.float32)
            for k, shape in case.outputs.items()}
    sim = using_simulator() and trace
    args = []
    for name in case.order:
        if name in case.scalars:
            args.append(np.int32(case.scalars[name]) if isinstance(case.scalars[name], int)
                        else np.float32(case.scalars[name]))
        elif name in case.arrays:
            a = np.asarray(case.arrays[name], np.float32)
            args.append(traced(a, name) if sim else cuda.to_device(a))
        else:
            args.append(traced(outs[name], name) if sim else cuda.to_device(outs[name]))
    error = ""
    recorded = None
    try:
        if sim:
            with tracing(local_fill) as recorded:
                recorded.block_dim = tuple(case.block) + (1,) * (3 - len(case.block))
                kernel[case.grid, case.block](*args)
            for name, a in zip(case.order, args):
                if name in outs:
                    outs[name] = np.asarray(a).view(np.ndarray).copy()
        else:
            with simulator_lock():
                kernel[case.grid, case.block](*args)
            for name, a in zip(case.order, args):
                if name in outs:
                    outs[name] = a.copy_to_host()
    except (IndexError, FloatingPointError, ZeroDivisionError, ValueError, TypeError) as exc:
        if is_compile_error(exc):       # Numba's own TypeError kinds: it did not compile
            raise
        error = f"{type(exc).__name__}: {exc}"
    return Outcome(outs, error, recorded,
                   relaunch=lambda fill: launch(kernel, case, trace=trace, local_fill=fill).outputs)


_NEGATIVE_INDEX = re.compile(r"index \([^)]*-\d")


def _inner_index_error(error: str) -> bool:
    """An index error that is not the ragged edge of the data: into a shared array (sized for
    the block), into a local one (numpy's "out of bounds": local arrays are not traced), or
    a negative index."""
    return ("outside shared" in error or "out of bounds for axis" in error
            or bool(_NEGATIVE_INDEX.search(error)))


@dataclass
class Rule:
    """An algorithm check on the trace: `test(trace, case)` -> "" or what is wrong. A rule
    whose hint starts "Right values" names a failure only when the values are right."""

    test: Callable
    hint: tuple

    @property
    def needs_right_values(self) -> bool:
        return self.hint[0].startswith("Right values")


@dataclass
class Puzzle:
    number: int
    name: str
    title: str
    contract: str                      # the kernel's signature and what it must do
    spec: Callable                     # numpy: (arrays, scalars) -> {output: array}
    cases: list
    hint: tuple                        # (level 1, level 2) when nothing more specific fires
    mistakes: list = field(default_factory=list)    # [(replay(arrays, scalars), hint)]
    rules: list = field(default_factory=list)       # [Rule]
    edge_hint: tuple = HINT_EDGE
    expected: Callable | None = None   # case -> {"global read": n, ...} totals for show()
    first: list = field(default_factory=list)       # [(predicate(yours, expected), hint)]
    time_limit_s: float = 60.0
    #: [(text in the error, hint)]: errors named before the edge hint (a misaligned copy)
    error_hints: list = field(default_factory=list)
    #: [(replay(arrays, scalars), hint)]: mistakes replayed BEFORE `first` (a state started
    #: at 0 whose 0 / 0 the overflow test of `first` would otherwise name)
    first_mistakes: list = field(default_factory=list)

    def describe(self) -> None:
        """Print the puzzle: its contract, the numpy spec and the first case's launch."""
        import inspect
        import textwrap
        c = self.cases[0]
        print(f"Puzzle {self.number}: {self.title}")
        print(textwrap.fill(self.contract, 98, subsequent_indent="    "))
        print("spec (numpy):")
        print(inspect.getsource(self.spec).rstrip())
        print(f"first case: {c.name}")
        print(f"    grid {c.grid}, block {c.block}")

    def _expected_outputs(self, case):
        arrays = {k: np.asarray(v, np.float64) for k, v in case.arrays.items()}
        with np.errstate(all="ignore"):
            return {k: np.asarray(v, np.float64) for k, v in self.spec(arrays,
                                                                        case.scalars).items()}

    def _case(self, case: PuzzleCase) -> Case:
        want = self._expected_outputs(case)
        arrays64 = {k: np.asarray(v, np.float64) for k, v in case.arrays.items()}
        rules = GENERIC_RULES + list(self.rules)

        def rule_fired(i):
            def fired(y, e):
                if i not in y.broken_all:
                    return False
                return not rules[i].needs_right_values or _outputs_close(y.outputs, e)
            return fired

        diagnoses = [((lambda y, e: bool(y.refused)), *HINT_NOT_NUMBA)]
        diagnoses += [((lambda y, e, text=text: text in y.error), *hint)
                      for text, hint in self.error_hints]
        diagnoses += [((lambda y, e: bool(y.error) and _inner_index_error(y.error)),
                       *HINT_INDEX)]
        diagnoses += [((lambda y, e: bool(y.error) and "outside" in y.error), *self.edge_hint),
                     ((lambda y, e: bool(y.error)), *self.edge_hint)]
        diagnoses += [(rule_fired(i), *rules[i].hint) for i in range(len(GENERIC_RULES))]
        def replayed(mistakes):
            found = []
            for replay, hint in mistakes:
                with np.errstate(all="ignore"):
                    wrong = replay(arrays64, case.scalars)
                if not _outputs_close(wrong, want):
                    found.append(((lambda y, e, w=wrong: not y.error
                                   and _outputs_close(y.outputs, w)), *hint))
            return found

        diagnoses += replayed(self.first_mistakes)
        diagnoses += [(pred, *hint) for pred, hint in self.first]
        diagnoses += replayed(self.mistakes)
        diagnoses += [(rule_fired(i), *rules[i].hint)
                      for i in range(len(GENERIC_RULES), len(rules))]
        diagnoses += [(local_unset, *HINT_LOCAL_UNSET)]      # when no rule named a cause

        def run(kernel, case=case, want=want):
            kernel_guard(kernel, self.name)
            try:
                require_cuda_kernel(kernel, self.name)
            except NotNumbaKernelError as exc:     # named by its own diagnosis, not a crash
                return Outcome({}, refused=str(exc)), want
            out = launch(kernel, case)
            if not out.error and out.trace is not None:     # the rules name wrong values too
                for i, rule in enumerate(rules):
                    why = rule.test(out.trace, case)
                    if why:
                        out.broken_all[i] = why
                if out.broken_all:
                    out.broken = min(out.broken_all)
                    out.why = out.broken_all[out.broken]
            return out, want

        def compare(yours, expected):
            return _compare(yours, expected, rules)

        return Case(case.name, run, self.hint[0], diagnoses, hint2=self.hint[1],
                    compare=compare, time_limit_s=self.time_limit_s)

    def _float32_case(self) -> Case:
        def run(kernel):
            kernel_guard(kernel, self.name)
            return {"float64 constants": float64_literals(kernel)}, {}

        def compare(yours, _expected):
            found = yours["float64 constants"]
            return (not found, "float64 constants in the kernel: " + ", ".join(found[:6]))

        return Case("float32 constants only", run, HINT_FLOAT64[0], hint2=HINT_FLOAT64[1],
                    compare=compare)

    def check(self, kernel, *, verbose: bool = True, hint_level: int = 1) -> Result:
        """Launch `kernel` on every case; values, then the algorithm rules (simulator)."""
        if not using_simulator() and verbose:
            print("(on a GPU: values only; the access rules are checked on the simulator)")
        return run_checks(f"puzzle {self.number}, {self.name}", kernel,
                          [self._case(c) for c in self.cases] + [self._float32_case()],
                          verbose=verbose, hint_level=hint_level)

    def show(self, kernel, case: int = 0) -> None:
        """Each thread's global and shared reads and writes (threads with the same counts
        are grouped), bank conflicts and sectors, next to what the puzzle expects."""
        try:
            kernel_guard(kernel, self.name)
        except NotImplementedError:
            print(f"Not implemented yet: fill in {self.name} first.")
            return
        if not is_numba_kernel(kernel):
            print(f"show() traces a kernel made by @cuda.jit; {self.name} is a "
                  f"{type(kernel).__name__}.")
            return
        if not using_simulator():
            print("show() counts accesses on the simulator only (this machine has a GPU).")
            return
        c = self.cases[case]
        out = launch(kernel, c)
        print(f"puzzle {self.number} ({self.name}), case: {c.name}")
        print(f"  grid {c.grid}, block {c.block}")
        if out.error:
            print(f"  the kernel stopped: {out.error[:160]}")
        print(_table(out.trace))
        print(_summary(out.trace, self.expected(c) if self.expected else None))


def local_unset(yours: Outcome, want: dict) -> bool:
    """The kernel wrote NaN where a finite value belongs, with a float local array and no
    shared element read before it was loaded: an element of the local array used before
    it was set (the trace fills float local arrays with NaN)."""
    trace = yours.trace
    if yours.error or trace is None or not any(sp == "local" for sp, _ in trace.allocations):
        return False
    if trace.unloaded_reads():
        return False
    for name, w in want.items():
        got = np.asarray(yours.outputs.get(name), np.float64)
        if got.shape != np.shape(w):
            continue
        bad = np.flatnonzero(np.isnan(got) & np.isfinite(w))
        written = trace.written_by(name)
        if any(int(off) in written for off in bad):
            if yours.relaunch is None:
                return True
            # the same launch with local arrays zeroed: a NaN the arithmetic made (inf / inf,
            # 0 * inf after an overflowing exp) stays NaN, one from an unset element goes
            again = np.asarray(yours.relaunch(0.0).get(name), np.float64).reshape(-1)
            return bool(np.isfinite(again[bad]).any())
    return False


def _outputs_close(a: dict, b: dict) -> bool:
    for k in b:
        x, y = np.asarray(a.get(k), np.float64), np.asarray(b[k], np.float64)
        if x.shape != y.shape or not np.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True):
            return False
    return True


def _compare(yours: Outcome, want: dict, rules=()):
    if yours.refused:
        return False, yours.refused
    if yours.error:
        return False, f"the kernel stopped: {yours.error[:200]}"
    for k, y in want.items():
        x = np.asarray(yours.outputs[k], np.float64)
        if not np.allclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True):
            bad = ~np.isclose(x, y, rtol=RTOL, atol=ATOL, equal_nan=True)
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            why = (f"{k}: {int(bad.sum())} of {bad.size} elements differ, first at "
                   f"{idx}: yours {float(x[idx])!r}, expected {float(y[idx])!r} "
                   "(NaN means never written)")
            also = [w for i, w in sorted(yours.broken_all.items())
                    if i < len(rules) and not rules[i].needs_right_values]
            return False, why + (f"; and {also[0]}" if also else "")
    if yours.broken >= 0:
        return False, f"right values, but {yours.why}"
    return True, ""


_KINDS = ("global read", "global write", "shared read", "shared write")
_ATOMIC_KINDS = ("global atomic", "shared atomic")


def _kinds(trace: Trace) -> tuple:
    """The four kinds of access, and the atomics when the kernel made any."""
    return _KINDS + (_ATOMIC_KINDS if any(trace.total(k) for k in _ATOMIC_KINDS) else ())


def _table(trace: Trace) -> str:
    """One line per run of consecutive threads of a block with the same four counts."""
    def name(key):
        block, thread = key
        b = block[0] if block[1:] == (0, 0) else block[:2]
        t = thread[0] if thread[1:] == (0, 0) else thread[:2]
        return b, t

    groups = []                                  # [block, first thread, last thread, counts]
    for key in trace.threads():
        b, t = name(key)
        counts = trace.counts(key)
        if groups and groups[-1][0] == b and groups[-1][3] == counts:
            groups[-1][2] = t
        else:
            groups.append([b, t, t, counts])
    kinds = _kinds(trace)
    head = f"  {'':<40}" + "".join(f"{k.split()[0][0] + '.' + k.split()[1]:>9}" for k in kinds)
    rows = [head]
    for b, first, last, counts in groups:
        who = f"block {b}, threads {first}..{last}" if first != last else \
            f"block {b}, thread {first}"
        rows.append(f"  {who:<40}" + "".join(f"{counts[k]:>9}" for k in kinds))
    return "\n".join(rows)


def _summary(trace: Trace, expected: dict | None) -> str:
    conflicts, worst = trace.bank_conflicts()
    touched, ideal = trace.sectors()
    have = {k: trace.total(k) for k in _kinds(trace)}
    have["bank conflicts"] = conflicts
    have["global sectors"] = touched
    lines = ["  totals:    " + ", ".join(f"{k} {v}" for k, v in have.items())]
    if expected:
        exp = dict(expected)
        lines.append("  expected:  " + ", ".join(f"{k} {v}" for k, v in exp.items()))
        diff = [k for k, v in exp.items() if have.get(k) != v]
        lines.append("  " + ("all as expected" if not diff else "differs: " + ", ".join(diff)))
    lines.append(f"  (worst shared access: {worst}-way; fewest possible sectors: {ideal})")
    return "\n".join("\n".join(_wrap(line)) for line in lines)


def _wrap(line, width=98):
    out = []
    while len(line) > width:
        cut = line.rfind(", ", 0, width) + 1 or width
        out.append(line[:cut])
        line = "             " + line[cut:].lstrip()
    out.append(line)
    return out


def _rng(seed):
    return np.random.default_rng(seed)


def _f32(x):
    return np.asarray(x, np.float32)


def _cdiv(a, b):
    return -(-a // b)


# -- rules on the trace -----------------------------------------------------------------------

def divergent_shuffle(trace, case):
    """A barrier not reached by every thread, inside a shuffle (shfl_xor on the simulator)."""
    why, where = trace.divergent_barriers()
    return why if why and "shfl" in where else ""


def divergent_barrier(trace, case):
    """A barrier not reached by every thread of its block (anywhere)."""
    return trace.divergent_barriers()[0]


def reads_every_input(trace, case):
    """Each input array read at least as many times as it has elements."""
    for name, a in case.arrays.items():
        n = trace.reads_of(name)
        if n < np.size(a):
            return (f"the kernel read {name} {n} times from global memory, fewer than its "
                    f"{np.size(a)} elements")
    return ""


def no_overlapping_writes(trace, case):
    found = trace.overlapping_writes()
    if not found:
        return ""
    block, array, off, epoch = found[0]
    return (f"{len(found)} shared elements were written by several threads and read by none "
            f"between the same two barriers (first: {array}[{off}] in block {block}, between "
            f"barriers {epoch} and {epoch + 1})")


GENERIC_RULES = [Rule(divergent_shuffle, HINT_SHFL_DIVERGENT),
                 Rule(divergent_barrier, HINT_DIVERGENT_BARRIER),
                 Rule(reads_every_input, HINT_EMPTY_TRACE),
                 Rule(no_overlapping_writes, HINT_OVERLAP)]


def no_races(trace, case):
    """Races with a read (a missing barrier); stores that only overlap are another rule's."""
    overlaps = set(trace.overlapping_writes())
    found = [cell for cell in trace.races() if cell not in overlaps]
    if not found:
        return ""
    block, array, off, epoch = found[0]
    return (f"{len(found)} shared elements raced (first: {array}[{off}] in block {block}, "
            f"between barriers {epoch} and {epoch + 1})")


def _array_words(array: str) -> str:
    """"the shared array of line 5" for a shared array, the name for a global one."""
    return f"the shared array of {array[len('shared '):]}" if array.startswith("shared ") \
        else array


def one_thread_reads_at_most(budget: Callable, what: str):
    """No thread reads one array (global or shared) more than budget(case) times."""
    def test(trace, case):
        n, key, array = trace.max_reads_of_one_array()
        most = budget(case)
        return "" if n <= most else (f"thread {short(key[1])} of block {short(key[0])} read "
                                     f"{_array_words(array)} {n} times; {what} needs at most "
                                     f"{most}")
    return test


def arrays_hold_at_most(local: int, shared: int, what: str):
    """No local array of more than `local` elements, no shared one of more than `shared`."""
    def test(trace, case):
        for space, most in (("local", local), ("shared", shared)):
            n, line = trace.largest(space)
            if n > most:
                return (f"the {space} array of line {line} holds {n} floats; {what} needs at "
                        f"most {most}")
        return ""
    return test


def written_once(array):
    def test(trace, case):
        many = {off: who for off, who in trace.written_by(array).items() if len(who) > 1}
        if many:
            off, who = next(iter(many.items()))
            return (f"{len(many)} elements of {array} were written by several threads "
                    f"(element {off}: {len(who)} threads)")
        return ""
    return test


def reads_at_most(array, budget: Callable, what: str):
    """Total global reads of `array` <= budget(case)."""
    def test(trace, case):
        n, most = trace.total("global read", array), budget(case)
        return "" if n <= most else (f"the kernel read {array} {n} times from global memory; "
                                     f"{what} needs at most {most}")
    return test


def shared_reads_at_most(budget: Callable, what: str):
    def test(trace, case):
        n, most = trace.max_per_thread("shared read"), budget(case)
        return "" if n <= most else (f"a thread read shared memory {n} times; {what} needs "
                                     f"at most {most} per thread")
    return test


def coalesced(slack: float = 1.25):
    def test(trace, case):
        touched, ideal = trace.sectors()
        return "" if touched <= slack * ideal else (
            f"the warps' global accesses touched {touched} 32-byte sectors where {ideal} "
            f"would do (strided: neighbouring threads read addresses far apart)")
    return test


def x_walks_rows(array):
    """Threads (x, y) and (x + 1, y) of a block write neighbouring elements of `array`."""
    def test(trace, case):
        where = {key: off for off, keys in trace.written_by(array).items() for key in keys}
        for (block, (x, y, z)), off in where.items():
            right = where.get((block, (x + 1, y, z)))
            if right is not None and right != off + 1:
                return (f"threads ({x}, {y}) and ({x + 1}, {y}) of block {block} wrote "
                        f"elements {off} and {right} of {array}, not neighbours")
        return ""
    return test


def no_bank_conflicts(trace, case):
    extra, worst = trace.bank_conflicts()
    return "" if extra == 0 else (f"{extra} extra shared-memory wavefronts from bank conflicts "
                                  f"(worst access {worst}-way)")
