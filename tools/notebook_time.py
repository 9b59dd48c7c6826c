"""Estimate how long a learner needs for a notebook or a lab, and stamp it where it is read.

    python tools/notebook_time.py notebooks/03_tiled_forward.ipynb ...          # print
    python tools/notebook_time.py --write                                        # stamp all
    python tools/notebook_time.py --check                                        # verify

How the estimate is derived, in minutes (rounded up to 5). The first version counted all
prose at 150 words a minute and 5 minutes per exercise; a review against the notebooks found
its times 1.5-2x short for the maths-heavy notebooks (03, 04, 09, 10) and lab 09, because a
derivation is not read at the speed of prose and a pencil exercise is not a five-minute
task. So the rates now depend on what is read:

    maths-dense prose   words / 100 a minute: a markdown cell with display maths ($$),
                        or with at least one inline formula ($...$) per 25 words
    other prose         words / 150 a minute
    running             1 minute per code cell (run it, read its output), plus 1 minute per
                        15 non-blank lines of code (reading the code: a long benchmark cell
                        is not read in the minute a two-liner is)
    exercises           10 minutes per pencil exercise: each `exercises.check(...)` cell, and
                        each "Try it" / "Exercise" / "Predict" heading or bold lead whose next
                        code cell is not already an `exercises.check` (one exercise, once)
    quiz                1 minute per quiz question
    exploring           5 minutes per interactive widget

A lab (labs/solutions/labNN_*.ipynb) is mostly writing code, so its estimate is

    reading             as above (a lab's specs are maths-dense: mostly 100 words a minute)
    running             as above (the solution's own lines are counted as writing instead)
    writing             1.5 minutes per line of the solution (non-blank, non-comment lines
                        inside ### BEGIN/END SOLUTION): write it, run the checker, read the
                        hint, fix. The rate is an estimate for a learner who has just done the
                        notebook, not a measurement; it gives lab 09 (the backward, 45 lines)
                        about 85 minutes against the 60 it used to state by hand.
                        Solution lines after a "Going further" heading are optional: the
                        stamp gives their minutes separately, and the README row the core.

The 100 and 150 words a minute are the usual ranges for technical and for plain reading;
10 minutes per exercise is the issue's and the reviewers' figure for a pencil calculation
with a check. `--write` replaces the "**Estimated time:** ..." sentence in the first cell
of each notebook and of each solution lab (run tools/make_labs.py afterwards: the student
labs copy it), and adds "(about N min)" to the item's row of the README's course map.
`--check` (run by tests/test_notebook_time.py) fails when a stamped notebook or lab, or its
README row, no longer matches its estimate: after editing one, run `--write`.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS_PER_MINUTE = 150              # plain prose
MATHS_WORDS_PER_MINUTE = 100        # derivations: display maths, or dense inline formulas
WORDS_PER_FORMULA = 25              # at least one inline formula per this many words: maths-dense
MINUTES_PER_CODE_CELL = 1
CODE_LINES_PER_MINUTE = 15
MINUTES_PER_EXERCISE = 10
MINUTES_PER_SOLUTION_LINE = 1.5     # labs: write, check, fix
MINUTES_PER_QUESTION = 1
MINUTES_PER_WIDGET = 5
STAMP = "`tools/notebook_time.py`"
TIME_RE = re.compile(r"\*\*Estimated time:\*\*[^\n]*?(?=\s*\*\*Lab|\n\n|\n\*\*|\Z)")
EXERCISE_RE = re.compile(r"^(?:#+\s*|\*\*)(?:\d+\.\s*)?(?:Try it|Exercise\b|Predict)",
                         re.IGNORECASE | re.MULTILINE)
CHECK_RE = re.compile(r"\bexercises\.check\(")
WIDGET_RE = re.compile(r"\b(\w+_explorer|tile_schedule)\(")
README_ROW_RE = (r"^(\| {num} \| \[{folder}/{name}\]\({folder}/{name}\) \|[^\n]*?)"
                 r"(?: \(about \d+ min(?: \+ \d+ going further)?\))?( \|)$")


@dataclass(frozen=True)
class Estimate:
    words: int
    code_cells: int
    exercises: int
    questions: int
    widgets: int
    maths_words: int = 0           # of `words`, those in maths-dense cells
    solution_lines: int = 0        # labs only
    code_lines: int = 0            # non-blank code lines outside solution regions
    optional_lines: int = 0        # labs: solution lines of the "Going further" parts

    @property
    def raw_minutes(self) -> float:
        plain = self.words - self.maths_words
        return (plain / WORDS_PER_MINUTE + self.maths_words / MATHS_WORDS_PER_MINUTE
                + self.code_cells * MINUTES_PER_CODE_CELL
                + self.code_lines / CODE_LINES_PER_MINUTE
                + self.exercises * MINUTES_PER_EXERCISE + self.questions * MINUTES_PER_QUESTION
                + self.widgets * MINUTES_PER_WIDGET
                + self.solution_lines * MINUTES_PER_SOLUTION_LINE)

    @property
    def minutes(self) -> int:
        return 5 * math.ceil(self.raw_minutes / 5)

    def readme_note(self) -> str:
        """What the README's course map says, e.g. "(about 55 min + 30 going further)"."""
        extra = f" + {self.optional_minutes} going further" if self.optional_lines else ""
        return f"(about {self.minutes} min{extra})"

    @property
    def optional_minutes(self) -> int:
        return 5 * math.ceil(self.optional_lines * MINUTES_PER_SOLUTION_LINE / 5)

    def sentence(self) -> str:
        """The stamp written at the top of the notebook: the time in plain words (how it is
        counted is said once, in notebook 00 and the README, not in every header)."""
        extra = (f", plus about {self.optional_minutes} for the going-further parts"
                 if self.optional_lines else "")
        what = ("its length and the lines of solution to write" if self.solution_lines
                else "its length, exercises and questions")
        return (f"**Estimated time:** about {self.minutes} minutes{extra} (estimated from "
                f"{what} by {STAMP}).")


def _source(cell) -> str:
    src = cell["source"]
    return src if isinstance(src, str) else "".join(src)


def _prose(text: str) -> str:
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)          # comments
    text = re.sub(r"\]\([^)]*\)", "]", text)                      # link targets
    text = TIME_RE.sub(" ", text)                                # the stated time itself
    return text


QUIZ_RE = re.compile(r"quizzes\.show\(\s*[\"']([^\"']+)[\"']\s*\)")


def bank_questions(name: str) -> int:
    """Questions of a quiz kept in the package (`quizzes.show("03")`), as the package loads
    them: flashcourse/quizzes/nbNN.toml (or labNN.toml), through `flashcourse.quizzes.get`."""
    if str(ROOT) not in sys.path:            # run as a script: this checkout's package
        sys.path.insert(0, str(ROOT))
    from flashcourse import quizzes
    try:
        return len(quizzes.get(name))
    except ValueError as exc:                # no such quiz, or a broken file (named)
        raise ValueError(f"quizzes.show({name!r}): {exc}") from None


def _maths_dense(text: str, words: int) -> bool:
    formulas = len(re.findall(r"(?<![\\$])\$(?!\$)[^$\n]+?\$", text))
    return "$$" in text or (words > 0 and formulas * WORDS_PER_FORMULA >= words)


def _solution_lines(src: str) -> int:
    n, inside = 0, False
    for line in src.splitlines():
        if "### BEGIN SOLUTION" in line:
            inside = True
        elif "### END SOLUTION" in line:
            inside = False
        elif inside and line.strip() and not line.strip().startswith("#"):
            n += 1
    return n


def estimate(path) -> Estimate:
    """Count a notebook's words (and maths-dense words), code cells, exercises, quiz
    questions, widgets and, in a solution lab, lines of solution."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    words = maths = code = exercises = questions = widgets = lines = code_lines = optional = 0
    further = False
    cells = nb["cells"]
    for n, cell in enumerate(cells):
        src = _source(cell)
        if cell["cell_type"] == "markdown":
            prose = _prose(src)
            w = len(re.findall(r"\S+", prose))
            words += w
            maths += w if _maths_dense(prose, w) else 0
            further = further or bool(re.search(r"^#+.*going further", src, re.I | re.M))
            nxt = next((_source(c) for c in cells[n + 1:] if c["cell_type"] == "code"), "")
            if not CHECK_RE.search(nxt):          # else the check cell counts it, once
                exercises += len(EXERCISE_RE.findall(src))
        elif cell["cell_type"] == "code" and src.strip():
            code += 1
            exercises += len(CHECK_RE.findall(src))
            sol = _solution_lines(src)
            if further:
                optional += sol
            else:
                lines += sol
            code_lines += sum(1 for ln in src.splitlines() if ln.strip()) - sol
            questions += src.count("Question(") + len(re.findall(   # not on import lines
                r"^(?!\s*(?:from|import)\b).*\bAVOIDED_OBJECT\b", src, re.M))
            questions += sum(bank_questions(name) for name in QUIZ_RE.findall(src))
            widgets += len(WIDGET_RE.findall(src))
    return Estimate(words, code, exercises, questions, widgets, maths, lines, code_lines,
                    optional)


def _stamp_notebook(path: Path, est: Estimate) -> bool:
    nb = json.loads(path.read_text(encoding="utf-8"))
    first = nb["cells"][0]
    src = _source(first)
    new, n = TIME_RE.subn(est.sentence(), src, count=1)
    if n != 1:
        raise ValueError(f"{path}: no '**Estimated time:**' sentence in the first cell")
    if new == src:
        return False
    import nbformat
    nbf = nbformat.read(path, as_version=4)
    nbf.cells[0].source = new
    path.write_text(nbformat.writes(nbf) + "\n", encoding="utf-8")
    return True


def _readme_row(path: Path) -> re.Pattern:
    lab = path.name.startswith("lab")
    num = f"Lab {path.stem[3:].split('_')[0]}" if lab else path.name.split("_")[0]  # 10, 10b
    folder = "labs" if lab else "notebooks"
    return re.compile(README_ROW_RE.format(num=re.escape(num), folder=folder,
                                           name=re.escape(path.name)), re.MULTILINE)


def _stamp_readme(readme: str, path: Path, est: Estimate) -> str:
    new, n = _readme_row(path).subn(rf"\g<1> {est.readme_note()}\g<2>", readme)
    if n != 1:
        raise ValueError(f"README.md: no course-map row for {path.name}")
    return new


def stamped(path: Path) -> bool:
    """Whether the notebook carries this tool's stamp."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    return STAMP in _source(nb["cells"][0])


def check(paths) -> list[str]:
    """Problems with the stamped notebooks among `paths` (and their README rows)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    problems = []
    for path in paths:
        path = Path(path)
        if not stamped(path):
            continue
        est = estimate(path)
        src = _source(json.loads(path.read_text(encoding="utf-8"))["cells"][0])
        if est.sentence() not in src:
            problems.append(f"{path.name}: the stated time is not '{est.sentence()}'")
        m = _readme_row(path).search(readme)
        if m is None or est.readme_note() not in m.group(0):
            problems.append(f"README.md: the row of {path.name} should say "
                            f"'{est.readme_note()}'")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--write", action="store_true", help="stamp notebooks and README rows")
    ap.add_argument("--check", action="store_true", help="verify the stamped notebooks")
    args = ap.parse_args(argv)
    paths = args.notebooks or (sorted((ROOT / "notebooks").glob("*.ipynb"))
                               + sorted((ROOT / "labs" / "solutions").glob("lab*.ipynb")))
    if args.check:
        problems = check(paths)
        print("\n".join(problems) or "stated times match the estimates")
        return 1 if problems else 0
    readme_path = ROOT / "README.md"
    readme = readme_path.read_text(encoding="utf-8")
    for path in paths:
        est = estimate(path)
        print(f"{path.name}: {est.minutes} min  ({est})")
        if args.write:
            _stamp_notebook(path, est)
            readme = _stamp_readme(readme, path, est)
    if args.write:
        readme_path.write_text(readme, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
