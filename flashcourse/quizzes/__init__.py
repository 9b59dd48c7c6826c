"""The course's quiz questions, one data file per notebook: `nbNN.toml` (a lab's: `labNN.toml`;
a case-study notebook's, such as 10b: `nb10b.toml`).

A notebook shows its quiz with `quizzes.show("NN")` (the widget is `flashcourse.quiz`),
so the answers are not in the notebook's source. The questions are data, not code: an
instructor edits a TOML file, and every option carries its own text, its feedback and
whether it is the right one. The lesson's own question (`flashcourse.quiz.AVOIDED_OBJECT`)
lives in `lesson.toml` with an `id`, and notebook 03's file asks it with `include`.

The format (checked against `flashcourse/schemas/quiz.json` by
`flashcourse.quiz.load_questions`, which names the file, the question and what is wrong):

    # Quiz of notebook 09 (the backward pass by recomputation). Format: this docstring.

    [[question]]
    text = \"\"\"
    Doubling N (Tq = Tk = N, fixed d and tiles): what happens to the memory the backward \\
    saves by not storing P, ...?\"\"\"
    why = "Storing P costs N^2 s bytes per head, against 4 N bytes for lse: ..."

    [[question.option]]
    text = "The saving grows about 4x (P is N x N; lse is N numbers); ..."
    right = true

    [[question.option]]
    text = "Both grow about 4x"
    feedback = "The saving is quadratic, but forward and backward traffic scale alike, ..."

- `[[question]]`: `text` and `why` (the reasoning shown once the learner has it right or
  asks for the answer), then its options; or only `include = "<id>"`, a question of
  `lesson.toml` (whose questions each carry an `id`). The widget shows the options
  shuffled, seeded by the question's text: editing the text or reordering the options
  changes the order a learner sees.
- `[[question.option]]`: `text`; `right = true` on exactly one option; `feedback`, what
  picking it reveals (the misconception a wrong option reflects; optional on the right
  one). No other keys.
- A quiz file is UTF-8 text (a leading byte-order mark is allowed), a regular file of at
  most 1 MiB (`flashcourse.quiz.MAX_QUIZ_BYTES`); anything else (another encoding, a
  binary file, a directory, a FIFO, a loop of symbolic links, arrays or tables nested
  hundreds deep) is a QuizFileError naming the file. Loads are cached by the file's
  content, so an edit is seen at once.
- Long prose: a multi-line string `\"\"\"` whose lines end in a backslash (TOML joins them,
  dropping the line break and the next line's indentation; keep the space before the `\\`).

Adding the quiz of a new notebook (e.g. 12_something):
1. create `flashcourse/quizzes/nb12.toml` in this format; give every wrong option a
   feedback line, and prefer questions that need a calculation or a prediction over recall;
2. end the notebook with a cell `from flashcourse import quizzes` / `quizzes.show("12")`;
3. `tests/test_quiz.py` checks every file it finds here: each follows the format, each
   wrong option has feedback, and the right options are not always shown first.
A lab's quiz lives in `labNN.toml` and is shown with `quizzes.show("labNN")`.
Renumbering a notebook means renaming its file (`git mv nb07.toml nb08.toml`).
"""

from __future__ import annotations

import re
from pathlib import Path

from ..quiz import QUIZ_DIR, load_questions

_NAME = re.compile(r"^(\d{2}[a-z]?|lab\d{2})$")   # '03', '10b' (a case study), 'lab04'


def names() -> list[str]:
    """The notebooks and labs that have a quiz, e.g. ['00', '01', ..., '10b', ..., 'lab04']."""
    found = []
    for file in QUIZ_DIR.glob("*.toml"):
        if re.match(r"^nb\d{2}[a-z]?$", file.stem):
            found.append(file.stem[2:])
        elif re.match(r"^lab\d{2}$", file.stem):
            found.append(file.stem)
    return sorted(found)


def path(name) -> Path:
    """The file of notebook `name`'s quiz ('03' or 3: flashcourse/quizzes/nb03.toml; '10b':
    nb10b.toml)."""
    if isinstance(name, int) and not isinstance(name, bool):
        name = f"{name:02d}"
    if not (isinstance(name, str) and _NAME.match(name)):
        raise ValueError(f"quiz name must be a two-digit notebook number such as '03' "
                         f"('10b' for a case study, or a lab such as 'lab04'), got {name!r}")
    if name not in names():
        raise ValueError(f"no quiz for notebook {name!r}; known: {', '.join(names())} "
                         f"(add flashcourse/quizzes/nb{name}.toml, see its package docstring)")
    return QUIZ_DIR / f"{name if name.startswith('lab') else 'nb' + name}.toml"


def get(name) -> list:
    """The questions of notebook `name` ('03' or 3), a new list each call."""
    return load_questions(path(name))


def show(name) -> None:
    """Display the quiz of notebook `name` ('03') or lab ('lab04') with its score line."""
    from ..quiz import show_quiz
    show_quiz(get(name))
