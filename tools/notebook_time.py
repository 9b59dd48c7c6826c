"""Estimate how long a learner needs for a notebook, and stamp it where the learner reads it.

    python tools/notebook_time.py notebooks/03_tiled_forward.ipynb ...          # print
    python tools/notebook_time.py --write notebooks/0[0-4]*.ipynb               # stamp
    python tools/notebook_time.py --check                                        # verify

The estimate, in minutes (rounded up to 5):

    reading     words of markdown / 150 words a minute (technical prose, maths included)
    running     1 minute per code cell (read the code, run it, read its output)
    exercises   5 minutes per exercise ("Try it", "Exercise" or "Predict" sections)
    quiz        1 minute per quiz question
    exploring   5 minutes per interactive widget

`--write` replaces the "**Estimated time:** ..." sentence at the top of each notebook
and adds "(about N min)" to the notebook's row of the README's course map. `--check`
(run by tests/test_notebook_time.py) fails when a stamped notebook or README row no longer
matches its estimate: after editing a notebook, run `--write` on it.
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
WORDS_PER_MINUTE = 150
MINUTES_PER_CODE_CELL = 1
MINUTES_PER_EXERCISE = 5
MINUTES_PER_QUESTION = 1
MINUTES_PER_WIDGET = 5
STAMP = "`tools/notebook_time.py`"
TIME_RE = re.compile(r"\*\*Estimated time:\*\*[^\n]*?(?=\s*\*\*Lab|\n\n|\n\*\*|\Z)")
EXERCISE_RE = re.compile(r"^#+\s*(Try it|Exercise|Predict)", re.IGNORECASE | re.MULTILINE)
WIDGET_RE = re.compile(r"\b(\w+_explorer|tile_schedule)\(")
README_ROW_RE = (r"^(\| {num} \| \[notebooks/{name}\]\(notebooks/{name}\) \|[^\n]*?)"
                 r"(?: \(about \d+ min\))?( \|)$")


@dataclass(frozen=True)
class Estimate:
    words: int
    code_cells: int
    exercises: int
    questions: int
    widgets: int

    @property
    def minutes(self) -> int:
        raw = (self.words / WORDS_PER_MINUTE + self.code_cells * MINUTES_PER_CODE_CELL
               + self.exercises * MINUTES_PER_EXERCISE + self.questions * MINUTES_PER_QUESTION
               + self.widgets * MINUTES_PER_WIDGET)
        return 5 * math.ceil(raw / 5)

    def sentence(self) -> str:
        """The stamp written at the top of the notebook."""
        words = max(100, round(self.words, -2))            # rounded: small edits keep the stamp
        parts = [f"about {words:,} words to read at {WORDS_PER_MINUTE} a minute",
                 f"{self.code_cells} cells to run"]
        if self.exercises:
            parts.append(f"{self.exercises} exercise{'s' * (self.exercises > 1)}")
        if self.questions:
            parts.append(f"{self.questions} quiz question{'s' * (self.questions > 1)}")
        if self.widgets:
            parts.append(f"{self.widgets} widget{'s' * (self.widgets > 1)} to explore")
        return (f"**Estimated time:** about {self.minutes} minutes ({', '.join(parts)}; "
                f"{STAMP}).")


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


def estimate(path) -> Estimate:
    """Count a notebook's words, code cells, exercises, quiz questions and widgets."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    words = code = exercises = questions = widgets = 0
    for cell in nb["cells"]:
        src = _source(cell)
        if cell["cell_type"] == "markdown":
            words += len(re.findall(r"\S+", _prose(src)))
            exercises += len(EXERCISE_RE.findall(src))
        elif cell["cell_type"] == "code" and src.strip():
            code += 1
            questions += src.count("Question(") + len(re.findall(   # not on import lines
                r"^(?!\s*(?:from|import)\b).*\bAVOIDED_OBJECT\b", src, re.M))
            questions += sum(bank_questions(name) for name in QUIZ_RE.findall(src))
            widgets += len(WIDGET_RE.findall(src))
    return Estimate(words, code, exercises, questions, widgets)


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
    return re.compile(README_ROW_RE.format(num=re.escape(path.name[:2]),
                                           name=re.escape(path.name)), re.MULTILINE)


def _stamp_readme(readme: str, path: Path, est: Estimate) -> str:
    new, n = _readme_row(path).subn(rf"\g<1> (about {est.minutes} min)\g<2>", readme)
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
        if m is None or f"(about {est.minutes} min)" not in m.group(0):
            problems.append(f"README.md: the row of {path.name} should say "
                            f"'(about {est.minutes} min)'")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="*", type=Path)
    ap.add_argument("--write", action="store_true", help="stamp notebooks and README rows")
    ap.add_argument("--check", action="store_true", help="verify the stamped notebooks")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
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
