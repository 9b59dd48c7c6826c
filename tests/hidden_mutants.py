"""Hidden mutants: typical wrong solutions and unusual correct ones, run through the lab checkers.

Written from the learner's side (the lab notebooks, the solutions and the checkers' public
functions), independently of each lab's own mutant tests. A case is the solution notebook of a
lab with some of its text replaced (`edits`), and optionally extra code run after the lab's
definitions (`extra`, e.g. a whole function written another way). A wrong case names the hint
it must get (a substring of the checker's hint, case-insensitive); a right case must pass.

`python tests/hidden_mutants.py [lab ...]` prints the table: per lab, the wrong cases caught,
caught with the hint meant for them, passed (must be 0), and the right cases rejected.
The case lists live in hidden_mutants_numpy.py, hidden_mutants_round18.py,
hidden_mutants_round21.py, hidden_mutants_round21a.py, hidden_mutants_round21b.py and
hidden_mutants_cuda.py.
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # run as a script: find labtools and helpers
    sys.path.insert(0, str(HERE))

import flashcourse  # noqa: E402,F401  (selects the GPU or the simulator before numba loads)
from labtools import _is_definition, cells_of, exec_cell, lab_path  # noqa: E402


@dataclass(frozen=True)
class Mutant:
    """One submission: `lab` (solution notebook stem), `check` (a key of the lab's CHECKS),
    `name`, `edits` [(old, new)] applied inside the cell defining `where` (default: any cell
    holding `old`, which must then be unique), `extra` code run after the definitions, and for a
    wrong one the `hint` substring it must get (None = a right solution, which must pass)."""

    lab: str
    check: str
    name: str
    edits: tuple = ()
    hint: str | None = None
    extra: str = ""
    where: str = ""

    @property
    def wrong(self) -> bool:
        return self.hint is not None

    @property
    def id(self) -> str:
        return f"{self.lab}:{self.check}:{self.name}"


def wrong(lab, check, name, edits=(), hint="", *, extra="", where="") -> Mutant:
    assert hint, f"{name}: a wrong case names the hint it must get"
    return Mutant(lab, check, name, tuple(edits), hint, extra, where)


def right(lab, check, name, edits=(), *, extra="", where="") -> Mutant:
    return Mutant(lab, check, name, tuple(edits), None, extra, where)


def call(check: str, *args: str):
    """A runner for CHECKS: ns[check](ns[arg], ..., verbose=False)."""
    return lambda ns: ns[check](*(ns[a] for a in args), verbose=False)


def load(m: Mutant) -> dict:
    """The lab's import and definition cells with `m`'s edits, then `m.extra`: a namespace."""
    cells = [s for s in cells_of(lab_path(m.lab)) if _is_definition(s)]
    for old, new in m.edits:
        holders = [n for n, s in enumerate(cells)
                   if old in s and (not m.where or f"def {m.where}(" in s)]
        assert len(holders) == 1, f"{m.id}: {old!r} is in {len(holders)} cells"
        src = cells[holders[0]]
        if m.where:  # only inside the function `where`: from its def to the next top-level def
            start = src.index(f"def {m.where}(")
            stop = src.find("\ndef ", start + 1)
            stop = len(src) if stop < 0 else stop
            decorated = src.rfind("\n@", start, stop)
            stop = decorated if decorated > 0 else stop
            body = src[start:stop]
            assert body.count(old) >= 1, f"{m.id}: {old!r} not in {m.where}"
            src = src[:start] + body.replace(old, new) + src[stop:]
        else:
            src = src.replace(old, new)
        cells[holders[0]] = src
    ns: dict = {}
    with contextlib.redirect_stdout(io.StringIO()):   # the import cells print the set-up
        for n, src in enumerate(cells + ([m.extra] if m.extra else [])):
            exec_cell(src, f"<hidden-{m.lab}-{n}-{hash(src)}>", ns)
    return ns


@dataclass
class Outcome:
    mutant: Mutant
    passed: bool
    hint: str = ""
    crashed: str = ""          # the checker itself raised (always a defect)

    @property
    def caught(self) -> bool:
        return not self.passed and not self.crashed

    @property
    def as_meant(self) -> bool:
        """A wrong case failed with its hint; a right case passed."""
        if not self.mutant.wrong:
            return self.passed
        return self.caught and self.mutant.hint.lower() in self.hint.lower()


def run(m: Mutant, checks: dict) -> Outcome:
    try:
        ns = load(m)
        with np.errstate(all="ignore"):
            result = checks[m.check](ns)
    except Exception as exc:  # noqa: BLE001  (reported, never hidden)
        return Outcome(m, False, crashed=f"{type(exc).__name__}: {exc}")
    return Outcome(m, bool(result.passed), result.hint)


@dataclass
class Tally:
    wrong: int = 0
    caught: int = 0
    meant: int = 0
    slipped: int = 0
    right: int = 0
    rejected: int = 0
    crashed: int = 0
    misses: list = field(default_factory=list)

    def add(self, o: Outcome):
        if o.crashed:
            self.crashed += 1
        if o.mutant.wrong:
            self.wrong += 1
            self.caught += o.caught
            self.meant += o.as_meant
            self.slipped += o.passed
        else:
            self.right += 1
            self.rejected += not o.passed
        if not o.as_meant:
            self.misses.append(o)

    def row(self, label: str) -> str:
        pct = 100.0 * self.meant / self.wrong if self.wrong else 100.0
        return (f"| {label:8s} | {self.wrong:5d} | {self.caught:6d} | {self.meant:4d} ({pct:5.1f}%)"
                f" | {self.slipped:6d} | {self.right:5d} | {self.rejected:8d} |")


HEADER = ("| lab      | wrong | caught | with its hint   | passed | right | rejected |\n"
          "|----------|-------|--------|-----------------|--------|-------|----------|")


def all_cases():
    """(cases, checks by lab) from both case modules."""
    import hidden_mutants_cuda
    import hidden_mutants_numpy
    import hidden_mutants_round18
    import hidden_mutants_round21
    import hidden_mutants_round21a
    import hidden_mutants_round21b
    cases = (hidden_mutants_numpy.CASES + hidden_mutants_round18.CASES
             + hidden_mutants_round21.CASES + hidden_mutants_round21a.CASES
             + hidden_mutants_round21b.CASES + hidden_mutants_cuda.CASES)
    checks = {**hidden_mutants_numpy.CHECKS, **hidden_mutants_cuda.CHECKS}
    return cases, checks


def main(labs: list[str]) -> int:
    cases, checks = all_cases()
    total, by_lab = Tally(), {}
    for m in cases:
        short = m.lab.split("_")[0]
        if labs and short not in labs and m.lab not in labs:
            continue
        o = run(m, checks[m.lab])
        by_lab.setdefault(short, Tally()).add(o)
        total.add(o)
    print(HEADER)
    for lab, t in by_lab.items():
        print(t.row(lab))
    print(total.row("all"))
    for o in total.misses:
        kind = "WRONG" if o.mutant.wrong else "RIGHT"
        got = o.crashed or ("passed" if o.passed else o.hint.splitlines()[0][:160])
        want = o.mutant.hint if o.mutant.wrong else "pass"
        print(f"- {kind} {o.mutant.id}: want {want!r}\n    got {got!r}")
    return 0 if not total.misses else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
