"""The common machinery of every lab checker (GPU-Puzzles style: yours vs expected + a hint).

A checker is a list of `Case`s. Each case calls the learner's function, compares
with the expected value, and on a mismatch runs a list of *diagnoses*: small
functions that recognise a typical mistake (no rescale, wrong max, off-by-one on
a ragged tile, ...) from the learner's output and name it. The first diagnosis
that fires gives the hint; otherwise a result of the wrong precision (float32 where
float64 is compared) or shape gets its own hint, and anything else the case's
generic hint. Results are named as the contract names them (o, lse; dq, dk, dv).

Hints come in two levels. Level 1 (the default) diagnoses: it names the
mistake and points to the notebook's derivation. Level 2 (`check(fn,
hint_level=2)`) adds a more explicit nudge, still without the solution's code; a failure
whose hint is the harness's own (a wrong shape, None, a time limit) gets the case's second
level.
A diagnosis is `(predicate, hint)` or `(predicate, hint, hint2)`.

Besides the numbers, checkers check the algorithm (`flashcourse.labs._algorithm`: the
rows loaded by slices, the tiles skipped, the arrays held at once).

The harness survives what a learner's code can do to it. Every case, and the reading of
its result (an object's own `__array__` runs learner code too), runs under a time limit
(`Case.time_limit_s`, said in the first line) that `except Exception` cannot swallow (the
timeout is not an `Exception`, and it is raised again every half second until the case
ends): SIGALRM in the main thread; elsewhere the case runs in a worker thread that is
waited for at most the limit (`call_limited`). `sys.exit()`, any other exception and a
result that cannot be read as real numbers (complex, booleans, Python objects:
`real_array`) end in a FAILED line (Ctrl+C still interrupts), and what the learner's
function prints is capped at `PRINT_CAP` characters.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import io
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from flashcourse.labs._calls import HINT_NOT_CALLABLE, not_a_function, signature_hint
from flashcourse.printing import say as _say_wrapped

PASS_LINE = "All checks passed"
MORE = "\n  More explicitly: "    # what joins a hint's two levels
TODO_LINE = "Not implemented yet"
TIMEOUT_LINE = "Time limit"
DEFAULT_TIME_LIMIT_S = 20.0
REPEAT_S = 0.5          # the timeout is raised again this often until the case ends
PRINT_CAP = 2000        # characters of the learner's printed output shown per case
HINT_NONE = ("Your function returned None: the last step must `return` its result "
             "(a missing return is the usual cause).")
HINT_SCALAR = ("Your function returned a single number where an array is expected: keep one "
               "value per row (or per entry); a sum or max over the whole array loses the shape.")
HINT_STRING = ("Your function returned text (a string) where numbers are expected: return the "
               "number or array itself, not str(...), hex(...) or an f-string (print those "
               "separately to look at them).")
HINT_COMPLEX = ("Your result holds complex numbers: attention is real-valued. Look for a square "
                "root or a power of a negative number, or a complex dtype.")
HINT_OVERFLOW = ("Your result holds a number too large for a float (e.g. a Python integer like "
                 "10**400): compute in floating point and keep values in range (subtract the "
                 "running max before exp).")
HINT_TIMEOUT = ("Your function did not finish within the time limit: look for a loop whose "
                "end condition never becomes true (a `while` whose variable never changes, or "
                "a range that does not advance).")
HINT_EXIT = ("Your function called sys.exit() (or exit()/quit()), which would stop the whole "
             "kernel: return a result instead, or raise an exception to signal a problem.")
HINT_UNREADABLE = ("Your result could not be read as numbers (converting it to a numpy array "
                   "raised the error above): return numpy arrays (or tuples of them).")
HINT_SLOW_RESULT = ("Converting your result to numbers did not finish within the time limit: "
                    "return numpy arrays (or tuples of them), not objects of your own.")
HINT_DTYPE = ("Your result is not made of real numbers (named above): return float64 arrays. "
              "A comparison such as x > 0 gives booleans; None, text or rows of different "
              "lengths inside a list give an array of Python objects.")
HINT_COMPILE = (
    "Numba could not compile the kernel with your code, so nothing ran (the line above is "
    "the start of its message). Inside a kernel or device function only part of Python "
    "works: the size of a cuda.local.array or cuda.shared.array must be a number fixed "
    "before the kernel is compiled (a name defined outside the kernel, never arithmetic or "
    "a variable inside it); no numpy functions that make arrays, no lists or dicts; every "
    "variable keeps one type.")
HINT_NOT_KERNEL = (
    "A puzzle's kernel runs as kernel[grid, block](...), which needs the @cuda.jit "
    "decorator on the line above `def`; without it the function is plain Python.")
HINT_PRECISION = (
    "Your result agrees with the expected values to about 7 significant digits, the "
    "precision of float32, but this checker compares in float64 (tolerance above): keep "
    "every array float64 (np.zeros and np.full give float64; avoid astype(np.float32) and "
    "float32 inputs to your own temporaries).")
HINT_PRECISION_2 = (
    "Print the dtype of each array your function makes (x.dtype): the first float32 one is "
    "the cause. The usual places are astype(np.float32), np.float32(...) constants, "
    "dtype=np.float32 in np.zeros or np.empty, and a float32 input copied into a new array.")
HINT_SHAPE = (
    "A result has the wrong shape (named above): compare it with the shapes in the "
    "function's contract. The usual causes are a transposed tile, a block size used where "
    "a length is meant, or a dropped or extra axis.")
HINT_ORDER = (
    "Your results come back in another order than the contract's (the shapes above): return "
    "them in the order the function's docstring lists them.")


@dataclass
class Case:
    """One check: `run(fn)` returns (yours, expected); compared by `compare` if given (it
    returns (ok, why)), else numerically within rtol and atol, part by part."""

    name: str
    run: Callable
    hint: str
    diagnoses: list = field(default_factory=list)   # [(predicate(yours, expected), hint)]
    rtol: float = 1e-5
    atol: float = 1e-6
    hint2: str = ""                                 # the second, more explicit level
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    names: tuple = ()                               # the results' names, e.g. ("o", "lse")
    compare: Callable | None = None                 # (yours, expected) -> (ok, why)
    #: [(predicate(exception), hint[, hint2])]: a crash of the learner's code that a typical
    #: mistake explains (e.g. a broadcast of a (Br,) row statistic with a (Bc,) one)
    error_diagnoses: list = field(default_factory=list)


@dataclass
class Result:
    """What a checker found: passed, todo (a stub), the failing case, and the hint."""

    passed: bool
    todo: bool = False
    case: str = ""
    hint: str = ""
    detail: str = ""

    def __bool__(self):
        return self.passed

    def _repr_html_(self):  # shown if the result is the last expression of a cell
        return None


class ResultKindError(Exception):
    """A learner's result that is not made of real numbers: `what` (one line) and `hint`
    (a text, or the pair (level 1, level 2)). Raised by `real_array` inside a case;
    `run_checks` turns it into a FAILED line."""

    def __init__(self, what: str, hint):
        super().__init__(what)
        self.what = what
        self.hint, self.hint2 = hint if isinstance(hint, tuple) else (hint, "")


def _kind_problem(x) -> tuple[str, str] | None:
    """(what, hint) when `x` cannot stand for real numbers: complex, booleans, Python
    objects, text, a number too large for a float; None when it can (floats, integers)."""
    try:
        arr = np.asarray(x)
    except OverflowError:
        return "your result holds a number too large for a float", HINT_OVERFLOW
    kind = arr.dtype.kind
    if kind in "fiu":
        return None
    if kind == "c":
        return "your result holds complex numbers", HINT_COMPLEX
    if kind == "b":
        return "your result holds booleans (True/False), not numbers", HINT_DTYPE
    if kind == "O":
        try:
            np.asarray(x, dtype=np.float64)
        except OverflowError:
            return "your result holds a number too large for a float", HINT_OVERFLOW
        except (TypeError, ValueError):
            pass
        if arr.ndim == 0:     # not array-like at all (a checker's own record, a dict)
            return None
    return (f"your result has dtype {arr.dtype.name} where real floating-point numbers "
            "are required"), HINT_DTYPE


def real_array(x) -> np.ndarray:
    """The learner's result `x` as a float64 array, or ResultKindError (complex, booleans,
    Python objects, text: never an imaginary part silently dropped or True read as 1)."""
    if x is None:               # not NaN: _structure names a missing return (HINT_NONE)
        return None
    found = _kind_problem(x)
    if found is not None:
        raise ResultKindError(*found)
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ResultKindError(f"expected an array of numbers, got {type(x).__name__}",
                              HINT_DTYPE) from None


class CaseTimeout(BaseException):
    """Raised inside a case that ran past its time limit. A BaseException, like
    KeyboardInterrupt, so that a learner's `except Exception:` does not swallow it."""


def call_limited(seconds: float, fn: Callable):
    """fn() under a time limit: CaseTimeout after `seconds` (no limit for `seconds` <= 0).

    In the main thread (where Jupyter runs cells) by SIGALRM, raised again every REPEAT_S
    until fn ends; it also interrupts a sleep. In any other thread (where no signal can be
    delivered) fn runs in a worker thread that this one waits for at most `seconds`: past
    that the worker is asked to stop (an asynchronous CaseTimeout, which lands at its next
    Python bytecode) and CaseTimeout is raised here even if the worker is still stuck in a
    long C call such as a sleep (it is left to finish in the background), so the check
    ends at most REPEAT_S after the limit either way.
    """
    if not seconds or seconds <= 0:
        return fn()
    message = f"did not finish within {seconds:g} s"
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        with _alarm_limit(seconds, message):
            return fn()
    return _call_in_worker(seconds, message, fn)


@contextmanager
def _alarm_limit(seconds, message):
    done = []

    def on_alarm(_signum, _frame):
        if not done:
            raise CaseTimeout(message)

    previous = signal.signal(signal.SIGALRM, on_alarm)
    started = time.monotonic()
    pending, interval = signal.setitimer(signal.ITIMER_REAL, seconds, REPEAT_S)
    try:
        yield
    finally:
        done.append(True)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if pending > 0:     # someone else's alarm (e.g. pytest-timeout): give it back
            left = max(pending - (time.monotonic() - started), 1e-3)
            signal.setitimer(signal.ITIMER_REAL, left, interval)


def _call_in_worker(seconds, message, fn):
    box: dict = {}
    context = contextvars.copy_context()       # the caller's np.errstate, decimal context...

    def work():
        try:
            try:
                box["value"] = context.run(fn)
            except BaseException as exc:        # noqa: BLE001 - handed to the caller
                box["error"] = exc
        except BaseException:                   # noqa: BLE001 - a late CaseTimeout
            pass

    worker = threading.Thread(target=work, name="lab-check-case", daemon=True)
    worker.start()
    worker.join(seconds)
    for _ in range(2):                          # ask it to stop; it may be stuck in C
        if not worker.is_alive():
            break
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(worker.ident),
                                                   ctypes.py_object(CaseTimeout))
        worker.join(REPEAT_S / 2)
    if worker.is_alive() or isinstance(box.get("error"), CaseTimeout) or not box:
        raise CaseTimeout(message)
    if "error" in box:
        raise box["error"]
    return box["value"]


class _CappedText(io.TextIOBase):
    """A text stream that keeps the first `cap` characters written to it and counts the rest."""

    def __init__(self, cap: int):
        self.cap, self.kept, self.dropped = cap, [], 0
        self._size = 0

    def writable(self):
        return True

    def write(self, text):
        text = str(text)
        room = self.cap - self._size
        if room > 0:
            self.kept.append(text[:room])
            self._size += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def report(self) -> str:
        out = "".join(self.kept)
        if self.dropped:
            out += (f"\n  ... (output capped: {self.dropped:,} more characters printed by your "
                    "function are not shown)")
        return out


@contextmanager
def _captured_output():
    """The learner's prints (stdout and stderr) during a case, capped at PRINT_CAP."""
    buffer = _CappedText(PRINT_CAP)
    with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
        yield buffer


def _structure(yours, expected) -> tuple[str, str] | None:
    """(what, hint) when `yours` is not even the right kind of object, else None."""
    if yours is None:
        return "your function returned None", HINT_NONE
    exp_shape = np.shape(expected)
    if np.isscalar(yours) or (isinstance(yours, np.ndarray) and yours.ndim == 0):
        if isinstance(yours, (str, bytes)):
            return f"expected numbers, got the string {yours!r}", HINT_STRING
        if isinstance(yours, complex) or np.iscomplexobj(yours):
            return f"expected real numbers, got {yours!r}", HINT_COMPLEX
        if isinstance(yours, int) and not isinstance(yours, bool):
            if abs(yours) > 10**308:
                return "your result is an integer too large for a float", HINT_OVERFLOW
        if exp_shape != ():
            return (f"expected an array of shape {exp_shape}, got the single number {yours!r}",
                    HINT_SCALAR)
    return None


#: kinds of mismatch `_close` reports, each with its own hint when no diagnosis fires
SHAPE, PRECISION, VALUE = "shape", "precision", "value"


def _low_precision(yours) -> str:
    dtype = getattr(yours, "dtype", None)
    return str(dtype) if dtype is not None and dtype in (np.float32, np.float16) else ""


def _close(yours, expected, rtol, atol) -> tuple[bool, str, str]:
    """(ok, why, kind) of one result against its expected value (kind: SHAPE, PRECISION,
    VALUE; "" when ok)."""
    try:
        if np.iscomplexobj(yours):
            return False, "your result holds complex numbers", VALUE
        yours_arr = np.asarray(yours, dtype=np.float64)
    except OverflowError:
        return False, "your result holds a number too large for a float", VALUE
    except (TypeError, ValueError):
        return False, f"expected an array-like of numbers, got {type(yours).__name__}", VALUE
    exp_arr = np.asarray(expected, dtype=np.float64)
    if yours_arr.shape != exp_arr.shape:
        return False, f"shape {yours_arr.shape}, expected {exp_arr.shape}", SHAPE
    if np.isnan(yours_arr).any() and not np.isnan(exp_arr).any():
        return False, "your result contains NaN", VALUE
    ok = np.allclose(yours_arr, exp_arr, rtol=rtol, atol=atol, equal_nan=True)
    if ok:
        return True, "", ""
    with np.errstate(invalid="ignore"):                      # inf - inf: not the learner's
        err = np.abs(yours_arr - exp_arr)
    same = (np.isnan(yours_arr) & np.isnan(exp_arr)) | (yours_arr == exp_arr)   # as allclose
    err = np.where(same, 0.0, np.where(np.isnan(err), np.inf, err))
    idx = np.unravel_index(int(np.argmax(err)), err.shape) if err.ndim else ()
    why = (f"largest difference at index {tuple(int(i) for i in idx)}: "
           f"yours {float(yours_arr[idx])!r}, expected {float(exp_arr[idx])!r}")
    low = _low_precision(yours)
    near = rtol < 1e-6 and np.allclose(yours_arr, exp_arr, rtol=2e-3 if low == "float16"
                                       else 1e-5, atol=max(atol, 1e-6), equal_nan=True)
    if near:
        what = f"your result is {low}" if low else "your result looks rounded to float32"
        return False, (f"{why} ({what}; the checker compares in float64 at rtol {rtol:g}, "
                       f"atol {atol:g})"), PRECISION
    if low:
        why += f" (your result is {low})"
    return False, why, VALUE


def _label(n: int, names) -> str:
    return names[n] if n < len(names) else f"result [{n}]"


def _structural(yours, expected, names=(), kinds: bool = True) -> tuple[str, str] | None:
    """A structural problem anywhere in `yours` (tuple parts included): (what, hint); with
    `kinds`, also parts that are not real numbers (`_kind_problem`)."""
    if isinstance(expected, tuple):
        if yours is None:
            return _structure(yours, expected)
        if isinstance(yours, list):
            yours = tuple(yours)
        if not isinstance(yours, tuple):
            return None                     # _compare reports the missing tuple
        parts = zip(yours, expected)
    else:
        parts = [(yours, expected)]
    for n, (y, e) in enumerate(parts):
        found = _structure(y, e)
        if found is None and kinds:
            try:
                found = _kind_problem(y)
            except (TypeError, ValueError):    # e.g. ragged rows: _close names the shape
                found = None
        if found is not None:
            what, hint = found
            return (f"{_label(n, names)}: {what}" if isinstance(expected, tuple) else what), hint
    return None


def _compare(yours, expected, rtol, atol, names=()) -> tuple[bool, str, str]:
    if isinstance(expected, tuple):
        if isinstance(yours, list):
            yours = tuple(yours)
        if not isinstance(yours, tuple) or len(yours) != len(expected):
            what = f" ({', '.join(names)})" if names else ""
            return (False, f"expected a tuple of {len(expected)} results{what}, got "
                    f"{type(yours).__name__}", VALUE)
        found = []
        for n, (y, e) in enumerate(zip(yours, expected)):
            ok, why, kind = _close(y, e, rtol, atol)
            if not ok:
                found.append((f"{_label(n, names)}: {why}", kind))
        if not found:
            return True, "", ""
        # a shape or value mistake in one part outranks float32 rounding in another
        for want in (SHAPE, VALUE, PRECISION):
            for why, kind in found:
                if kind == want:
                    return False, why, kind
    return _close(yours, expected, rtol, atol)


def _pick_hint(case: Case, yours, expected, hint_level: int, kind: str = VALUE) -> str:
    hint, hint2 = case.hint, case.hint2
    if kind == PRECISION:
        hint, hint2 = HINT_PRECISION, HINT_PRECISION_2
    elif kind == SHAPE:       # the part's own second level states its shapes
        hint = HINT_SHAPE
    for diagnosis in case.diagnoses:
        predicate, text = diagnosis[0], diagnosis[1]
        try:
            fired = predicate(yours, expected)
        except Exception:  # a diagnosis must never hide the failure itself
            continue
        if fired:
            hint, hint2 = text, (diagnosis[2] if len(diagnosis) > 2 else "")
            break
    if hint_level >= 2 and hint2:
        return f"{hint}{MORE}{hint2}"
    return hint


def _reordered(yours, expected) -> str | None:
    """The shapes of `yours` when they are those of `expected` in another order (review round
    20 a: (lse, o) for (o, lse) got HINT_SHAPE's transposed tiles and extra axes), else None."""
    if not (isinstance(expected, tuple) and isinstance(yours, (tuple, list))
            and len(yours) == len(expected) > 1):
        return None
    try:
        mine, want = [np.shape(y) for y in yours], [np.shape(e) for e in expected]
    except (TypeError, ValueError):
        return None
    if mine == want or sorted(mine) != sorted(want):
        return None
    return f"result shapes {', '.join(map(str, mine))}; expected {', '.join(map(str, want))}"


def _judge(case: Case, yours, expected, hint_level: int) -> tuple[bool, str, str]:
    """(ok, why, hint) for one case's result."""
    order = _reordered(yours, expected) if case.compare is None else None
    if order is not None:
        return False, order, HINT_ORDER
    # a case with its own compare reads its own records (text, counts): it judges their kind
    broken = _structural(yours, expected, case.names, kinds=case.compare is None)
    if broken is not None:
        return False, broken[0], broken[1]
    if case.compare is not None:
        ok, why = case.compare(yours, expected)
        kind = VALUE
    else:
        ok, why, kind = _compare(yours, expected, case.rtol, case.atol, case.names)
    if ok:
        return True, "", ""
    return False, why, _pick_hint(case, yours, expected, hint_level, kind)


def _with_level(case: Case, hint_level: int) -> str:
    if hint_level < 2 or not case.hint2:
        return case.hint
    return f"{case.hint}{MORE}{case.hint2}"


def run_checks(title: str, fn: Callable, cases: list[Case], *, verbose: bool = True,
               hint_level: int = 1) -> Result:
    """Run every case against `fn`; print one line per case and the verdict.

    hint_level: 1 names the mistake; 2 adds a more explicit second hint.
    """
    if isinstance(hint_level, bool) or hint_level not in (1, 2):
        raise ValueError(f"hint_level must be 1 or 2, got {hint_level!r}")
    say = _say_wrapped if verbose else (lambda *a, **k: None)
    limit = max((c.time_limit_s for c in cases), default=0)
    say(f"Checking {title} (time limit {limit:g} s per case)")
    if what := not_a_function(fn):                 # check(f(4)) written for check(f)
        say(f"  FAILED {title}: {what}")
        say(f"  Hint: {HINT_NOT_CALLABLE}")
        return Result(False, case=title, hint=HINT_NOT_CALLABLE, detail=what)
    for case in cases:
        with _captured_output() as printed:
            failed, found = _attempt(functools.partial(case.run, fn), case.time_limit_s,
                                     "your function", _with_level(case, hint_level),
                                     HINT_TIMEOUT,
                                     crash_hint=_crash_hint(case, hint_level),
                                     hint_level=hint_level)
            if failed is None:                 # reading the result is limited too
                failed, found = _attempt(
                    functools.partial(_judge, case, *found, hint_level), case.time_limit_s,
                    "reading your result", HINT_UNREADABLE, HINT_SLOW_RESULT, todo=False,
                    hint_level=hint_level)
        text = printed.report()
        if text.strip():
            say("  Your function printed:\n" + text.rstrip())
        if isinstance(failed, NotImplementedError):
            msg = str(failed) or "the function still raises NotImplementedError"
            say(f"{TODO_LINE}: {msg}. "
                "Fill in the steps marked FILL ME IN, then run this cell again.")
            return Result(False, todo=True, case=case.name, hint=msg)
        if failed is None:
            ok, why, hint = found
            if ok:
                say(f"  ok     {case.name}")
                continue
            failed = (why, hint)
        what, hint = failed
        if hint_level >= 2 and case.hint2 and MORE not in hint:
            hint = f"{hint}{MORE}{case.hint2}"  # a result of the wrong kind, a time limit...
        say(f"  FAILED {case.name}: {what}")
        say(f"  Hint: {hint}")
        return Result(False, case=case.name, hint=hint, detail=what)
    say(f"{PASS_LINE} ({len(cases)} case{'' if len(cases) == 1 else 's'}).")
    return Result(True)


def _crash_hint(case: Case, hint_level: int) -> Callable:
    """exception -> the hint of the case's first error diagnosis that names it, or None."""
    def pick(exc):
        for diagnosis in case.error_diagnoses:
            try:
                fired = diagnosis[0](exc)
            except Exception:  # a diagnosis must never hide the failure itself
                continue
            if fired:
                hint, hint2 = diagnosis[1], (diagnosis[2] if len(diagnosis) > 2 else "")
                return f"{hint}{MORE}{hint2}" if hint_level >= 2 and hint2 \
                    else hint
        return None
    return pick


def _attempt(call: Callable, seconds: float, who: str, hint: str, timeout_hint: str, *,
             todo: bool = True, crash_hint: Callable | None = None, hint_level: int = 1):
    """(None, call()) under the time limit, or (what failed, None): (line, hint), or the
    NotImplementedError itself when `todo` (a stub). `who` starts the line ("your function
    raised ..."); `hint` goes with an exception (or `crash_hint(exception)` when that names
    it), `timeout_hint` with the time limit. Only KeyboardInterrupt (Ctrl+C) escapes."""
    try:
        return None, call_limited(seconds, call)
    except KeyboardInterrupt:
        raise
    except NotImplementedError as exc:
        if todo:
            return exc, None
        failed = exc
    except CaseTimeout as exc:
        return (f"{TIMEOUT_LINE}: {who} {exc}", timeout_hint), None
    except SystemExit as exc:
        code = "" if exc.code is None else repr(exc.code)
        return (f"{who} called sys.exit({code})", HINT_EXIT), None
    except ResultKindError as exc:
        return (exc.what, f"{exc.hint}{MORE}{exc.hint2}" if hint_level >= 2 and exc.hint2
                else exc.hint), None
    except BaseException as exc:  # the learner's code crashed: show where, kindly
        if is_compile_error(exc):
            return (f"the kernel does not compile: {_first_lines(exc)}", HINT_COMPILE), None
        if type(exc).__name__ == "NotAKernelError":
            return (str(exc), HINT_NOT_KERNEL), None
        failed = exc
    tb = traceback.format_exception_only(type(failed), failed)[-1].strip()
    named = (crash_hint(failed) if crash_hint is not None else None) or signature_hint(failed)
    return (f"{who} raised {tb}", named or hint), None


def is_compile_error(exc) -> bool:
    """A Numba compile error (typing, lowering, unsupported Python), or what the GPU
    compiler would refuse found in the source (`kernel_source.ArraySizeError`), rather than
    a crash of the compiled code: by class name, so that the harness need not import Numba."""
    return any(c.__name__ in ("NumbaError", "ArraySizeError") for c in type(exc).__mro__)


def _first_lines(exc, limit: int = 240) -> str:
    """The first two non-blank lines of a (long, multi-line) Numba error message, cut at
    `limit` characters: the part that names what failed to compile."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()][:2]
    text = " ".join(lines) or type(exc).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def result_tuple(out, n: int):
    """The learner's result as a plain tuple if it is a tuple (or list) of `n` parts (see
    `plain`); anything else is left as is for the checks to name."""
    if isinstance(out, list):
        out = tuple(out)
    return plain(out) if isinstance(out, tuple) and len(out) == n else out


def random_qkv(rng, tq: int, tk: int, d: int, spread: float = 1.0):
    """Standard-normal q (Tq, d), k (Tk, d), v (Tk, d) drawn in that order from `rng`;
    q and k scaled by `spread` (larger scores)."""
    q = rng.standard_normal((tq, d)) * spread                   # (Tq, d)
    k = rng.standard_normal((tk, d)) * spread                   # (Tk, d)
    v = rng.standard_normal((tk, d))                            # (Tk, d)
    return q, k, v


#: The irregular shapes the tiled labs (forward, backward) check on, in float64:
#: (name, Tq, Tk, d, Br, Bc, causal, spread). Ragged tiles, Tq != Tk both ways, rows with
#: no visible key (causal, Tq > Tk), 1 x 1 tiles, blocks larger than T, and large scores
#: (q and k scaled by `spread`, |S| ~ 1e3 at the checkers' scale 0.37). The ragged case comes
#: first: there a dropped last query block and a dropped last key block differ (with one
#: tile larger than T, both leave every row empty).
TILED_CASES = [
    ("ragged tiles, Tq = 37, Tk = 29, d = 5, Br = 8, Bc = 6", 37, 29, 5, 8, 6, False, 1.0),
    ("one tile, Tq = 3, Tk = 4, d = 3", 3, 4, 3, 8, 8, False, 1.0),
    ("causal, Tq = 23 < Tk = 40, d = 4, Br = 7, Bc = 9", 23, 40, 4, 7, 9, True, 1.0),
    ("causal, Tq = 40 > Tk = 23 (rows with no key), Br = 6, Bc = 5", 40, 23, 4, 6, 5, True, 1.0),
    ("causal 1 x 1 tiles, Tq = Tk = 9, d = 2", 9, 9, 2, 1, 1, True, 1.0),
    ("blocks larger than T, causal, Tq = 13, Tk = 11, d = 3", 13, 11, 3, 64, 64, True, 1.0),
    ("large scores (|S| ~ 1e3), causal, Tq = 17, Tk = 21, d = 3", 17, 21, 3, 4, 8, True, 20.0),
]

#: The causal shapes on which the tiled labs count the rows their loops load:
#: (name, Tq, Tk, Br, Bc); Tq = Tk, and Tq != Tk both ways.
SKIPPING_SHAPES = [
    ("Tq = Tk = 24, Br = Bc = 4", 24, 24, 4, 4),
    ("Tq = 10 < Tk = 30, Br = 4, Bc = 5", 10, 30, 4, 5),
    ("Tq = 24 > Tk = 10, Br = 5, Bc = 3", 24, 10, 5, 3),
]


def as_pair(out):
    """The learner's result as a tuple of two float64 arrays (or left as is if malformed);
    ResultKindError for parts that are not real numbers (`real_array`)."""
    if isinstance(out, list):
        out = tuple(out)
    if isinstance(out, tuple) and len(out) == 2:
        return tuple(real_array(o) for o in out)
    return out


def not_pair(yours, _expected):
    """Diagnosis: the learner's function did not return a pair."""
    return not (isinstance(yours, tuple) and len(yours) == 2)


def plain(x):
    """Strip WatchedRows (or any ndarray subclass) from a result, recursively for tuples."""
    if isinstance(x, (tuple, list)):
        return tuple(plain(y) for y in x)
    if isinstance(x, np.ndarray):
        return np.asarray(x).view(np.ndarray)
    return x


def parts_close(a, b, *, rtol: float, atol: float) -> bool:
    """Whether `a` and `b` are tuples of the same length whose parts (WatchedRows stripped)
    have equal shapes and agree in float64 within rtol and atol (NaN matches NaN)."""
    a, b = plain(a), plain(b)
    if not (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)):
        return False
    for x, y in zip(a, b):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.shape != y.shape or not np.allclose(x, y, rtol=rtol, atol=atol, equal_nan=True):
            return False
    return True


def with_level2(diagnoses, text: str) -> list:
    """The diagnoses with `text` as their second, more explicit level where they have none."""
    return [d if len(d) > 2 else (*d, text) for d in diagnoses]


def mistake_diagnoses(replay: Callable, mistakes, close: Callable, *, right=None,
                      seen: Callable | None = None) -> list:
    """The diagnoses of one case from typical mistakes replayed on its inputs.

    `replay(mistake)` is the spec's output with that mistake; `replay(None)` is the right
    output unless `right` is given. Each (mistake, hint) of `mistakes` that this case can
    see (its output is not `close` to the right one; `seen(wrong, right)` when given)
    gives the diagnosis "the learner's output is `close` to that wrong output", with
    `hint` = (level 1, level 2). Mistakes the case cannot see are left out, so they never
    name a failure that has another cause.
    """
    right = replay(None) if right is None else right
    seen = seen or (lambda wrong, ok: not close(wrong, ok))
    diagnoses = []
    for mistake, hint in mistakes:
        wrong = replay(mistake)
        if seen(wrong, right):
            diagnoses.append(((lambda yours, _expected, w=wrong: close(yours, w)), *hint))
    return diagnoses


def broadcast_shapes(exc) -> list[tuple[int, ...]]:
    """The shapes named by numpy's "operands could not be broadcast together with shapes
    (7,9) (7,4)" (a ValueError), [] for any other exception."""
    import re
    text = str(exc)
    if not isinstance(exc, ValueError) or "broadcast" not in text:
        return []
    return [tuple(int(n) for n in re.findall(r"\d+", group))
            for group in re.findall(r"\(([\d,\s]*)\)", text.split("shapes", 1)[-1])]


def shapes_mix(exc, a: int, b: int, *, ndim: int | None = None) -> bool:
    """Whether a broadcast error (`broadcast_shapes`) pairs two shapes whose last entries are
    `a` and `b` (a != b), e.g. a (Br,) row statistic with a (Bc,) one; `ndim`: only shapes
    of that many axes."""
    shapes = [s for s in broadcast_shapes(exc) if s and (ndim is None or len(s) == ndim)]
    lasts = {s[-1] for s in shapes}
    return a != b and a in lasts and b in lasts


def tiled_cases(inputs: Callable, expected: Callable, replay: Callable, mistakes,
                close: Callable, hint, *, scale: float, rtol: float, atol: float,
                parts: int | None = None, first=(), names=(),
                errors: Callable | None = None) -> list[Case]:
    """One Case per shape of TILED_CASES for a tiled lab function called as
    `fn(*arrays, causal, scale, block_q, block_k)`.

    inputs(n, Tq, Tk, d, causal, spread) -> the case's arrays (n: its index, for seeds);
    expected(arrays, causal) -> what fn must return; `fn` returns a tuple of `parts`
    arrays (None: one array). A failure is named by the diagnoses `first`, then by the
    typical mistakes replayed as `replay(*arrays, causal, scale, Br, Bc, mistake)`
    (`mistake_diagnoses` with `close`; `first` may be a function of (Tq, Tk, causal, spread)
    giving each case its own list); else by `hint` = (level 1, level 2). `names`
    names the results in messages (e.g. ("o", "lse")); `errors(Tq, Tk, Br, Bc)` gives the
    case's error diagnoses (a crash that a typical mistake explains).
    """
    cases = []
    for n, (name, tq, tk, d, br, bc, causal, spread) in enumerate(TILED_CASES):
        arrays = inputs(n, tq, tk, d, causal, spread)
        rest = (causal, scale, br, bc)
        own = first(tq, tk, causal, spread) if callable(first) else first
        diagnoses = list(own) + mistake_diagnoses(
            lambda mistake, arrays=arrays, rest=rest: replay(*arrays, *rest, mistake),
            mistakes, close)
        want = expected(arrays, causal)

        def run(fn, arrays=arrays, rest=rest, want=want):
            out = fn(*(a.copy() for a in arrays), *rest)
            return (plain(out) if parts is None else result_tuple(out, parts)), want

        cases.append(Case(name, run, hint[0], diagnoses, rtol=rtol, atol=atol, hint2=hint[1],
                          names=names,
                          error_diagnoses=errors(tq, tk, br, bc) if errors else []))
    return cases


HINT_INPUTS_CHANGED = (
    "Your function changed one of its input arrays in place (named above). The caller still "
    "holds that array, and its later uses (a reference to compare with, the backward pass) "
    "then see other numbers. Compute into new arrays: q * scale makes a new one, q *= scale "
    "overwrites the caller's.",
    "Leave every argument as it came in; copy it first (x = x.copy()) to work in place.")


def inputs_kept_case(name: str, arrays, rest, names, make_rest=None) -> Case:
    """A case: fn(*arrays, *rest) must leave every array of `arrays` (named by `names`) as
    it came in (round 18: a forward that scaled q in place passed, as every other case
    passes copies). `make_rest()`, when given, builds `rest` anew for each call."""
    changed: list = []

    def run(fn):
        given = [a.copy() for a in arrays]
        fn(*given, *(make_rest() if make_rest else rest))
        changed[:] = [n for n, a, b in zip(names, given, arrays)
                      if not np.array_equal(a, b, equal_nan=True)]
        return np.float64(len(changed)), np.float64(0)

    def compare(yours, _expected):
        return not changed, "changed in place: " + ", ".join(changed)

    return Case(name, run, HINT_INPUTS_CHANGED[0], compare=compare,
                hint2=HINT_INPUTS_CHANGED[1])


def stub_guard(fn, what: str):
    """Raise NotImplementedError for a learner's stub before running anything heavy."""
    inner = getattr(fn, "py_func", fn)
    code = getattr(inner, "__code__", None)
    if code is not None and "NotImplementedError" in code.co_names:
        raise NotImplementedError(f"{what} still raises NotImplementedError")
