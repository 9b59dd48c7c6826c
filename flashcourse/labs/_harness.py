"""The common machinery of every lab checker (GPU-Puzzles style: yours vs expected + a hint).

A checker is a list of `Case`s. Each case calls the learner's function, compares
with the expected value, and on a mismatch runs a list of *diagnoses*: small
functions that recognise a typical mistake (no rescale, wrong max, off-by-one on
a ragged tile, ...) from the learner's output and name it. The first diagnosis
that fires gives the hint; otherwise the case's generic hint is shown.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

PASS_LINE = "All checks passed"
TODO_LINE = "Not implemented yet"


@dataclass
class Case:
    """One check: `run(fn)` returns (yours, expected); compared by `close`."""

    name: str
    run: Callable
    hint: str
    diagnoses: list = field(default_factory=list)   # [(predicate(yours, expected), hint)]
    rtol: float = 1e-5
    atol: float = 1e-6


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


def _close(yours, expected, rtol, atol) -> tuple[bool, str]:
    try:
        yours_arr = np.asarray(yours, dtype=np.float64)
    except (TypeError, ValueError):
        return False, f"expected an array-like of numbers, got {type(yours).__name__}"
    exp_arr = np.asarray(expected, dtype=np.float64)
    if yours_arr.shape != exp_arr.shape:
        return False, f"shape {yours_arr.shape}, expected {exp_arr.shape}"
    if np.isnan(yours_arr).any() and not np.isnan(exp_arr).any():
        return False, "your result contains NaN"
    ok = np.allclose(yours_arr, exp_arr, rtol=rtol, atol=atol, equal_nan=True)
    if ok:
        return True, ""
    err = np.abs(yours_arr - exp_arr)
    err = np.where(np.isnan(err), np.inf, err)
    idx = np.unravel_index(int(np.argmax(err)), err.shape) if err.ndim else ()
    return False, (f"largest difference at index {tuple(int(i) for i in idx)}: "
                   f"yours {float(yours_arr[idx])!r}, expected {float(exp_arr[idx])!r}")


def _compare(yours, expected, rtol, atol) -> tuple[bool, str]:
    if isinstance(expected, tuple):
        if not isinstance(yours, tuple) or len(yours) != len(expected):
            return False, f"expected a tuple of {len(expected)} results, got {type(yours).__name__}"
        for n, (y, e) in enumerate(zip(yours, expected)):
            ok, why = _close(y, e, rtol, atol)
            if not ok:
                return False, f"result [{n}]: {why}"
        return True, ""
    return _close(yours, expected, rtol, atol)


def run_checks(title: str, fn: Callable, cases: list[Case], *, verbose: bool = True) -> Result:
    """Run every case against `fn`; print one line per case and the verdict."""
    say = print if verbose else (lambda *a, **k: None)
    say(f"Checking {title}")
    for case in cases:
        try:
            yours, expected = case.run(fn)
        except NotImplementedError as exc:
            msg = str(exc) or "the function still raises NotImplementedError"
            say(f"{TODO_LINE}: {msg}. "
                "Fill in the steps marked FILL ME IN, then run this cell again.")
            return Result(False, todo=True, case=case.name, hint=msg)
        except Exception as exc:  # the learner's code crashed: show where, kindly
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            say(f"  FAILED {case.name}: your function raised {tb}")
            say(f"  Hint: {case.hint}")
            return Result(False, case=case.name, hint=case.hint, detail=tb)
        ok, why = _compare(yours, expected, case.rtol, case.atol)
        if ok:
            say(f"  ok     {case.name}")
            continue
        hint = case.hint
        for predicate, diagnosis in case.diagnoses:
            try:
                if predicate(yours, expected):
                    hint = diagnosis
                    break
            except Exception:  # a diagnosis must never hide the failure itself
                continue
        say(f"  FAILED {case.name}: {why}")
        say(f"  Hint: {hint}")
        return Result(False, case=case.name, hint=hint, detail=why)
    say(f"{PASS_LINE} ({len(cases)} cases).")
    return Result(True)
