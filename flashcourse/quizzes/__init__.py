"""The course's quiz questions, one module per notebook: `nbNN.py` holds `QUESTIONS`.

A notebook shows its quiz with `quizzes.show("NN")` (the widget is
`flashcourse.quiz`), so the answers are not in the notebook's source. The lesson's
own question, `AVOIDED_OBJECT`, lives in `flashcourse.quiz` beside `Question`.

Adding the quiz of a new notebook (e.g. 10_tensor_cores):
1. create `flashcourse/quizzes/nb10.py` with `QUESTIONS = [Question(...), ...]`
   (`from ..quiz import Question`);
   give every option a `feedback` line (the misconception a wrong option
   reflects; for the right one, optional), and prefer questions that need a
   calculation or a prediction over recall;
2. end the notebook with a cell `from flashcourse import quizzes` /
   `quizzes.show("10")`;
3. `tests/test_quiz.py` checks every module it finds here: each loads, each
   question has feedback for each wrong option, and the options shuffle.
A lab's quiz lives in `labNN.py` and is shown with `quizzes.show("labNN")`.
Renumbering a notebook means renaming its module (`git mv nb07.py nb08.py`).
"""

from __future__ import annotations

import importlib
import pkgutil
import re

_NAME = re.compile(r"^(\d{2}|lab\d{2})$")


def names() -> list[str]:
    """The notebooks and labs that have a quiz, e.g. ['00', '01', ..., 'lab04']."""
    found = []
    for m in pkgutil.iter_modules(__path__):
        if re.match(r"^nb\d{2}$", m.name):
            found.append(m.name[2:])
        elif re.match(r"^lab\d{2}$", m.name):
            found.append(m.name)
    return sorted(found)


def get(name) -> list:
    """The questions of notebook `name` ('03' or 3)."""
    if isinstance(name, int) and not isinstance(name, bool):
        name = f"{name:02d}"
    if not (isinstance(name, str) and _NAME.match(name)):
        raise ValueError(f"quiz name must be a two-digit notebook number such as '03' "
                         f"(or a lab such as 'lab04'), got {name!r}")
    if name not in names():
        raise ValueError(f"no quiz for notebook {name!r}; known: {', '.join(names())} "
                         "(add flashcourse/quizzes/nb" + name + ".py, see its package docstring)")
    module = name if name.startswith("lab") else f"nb{name}"
    return list(importlib.import_module(f"{__name__}.{module}").QUESTIONS)


def show(name) -> None:
    """Display the quiz of notebook `name` ('03') or lab ('lab04') with its score line."""
    from ..quiz import show_quiz
    show_quiz(get(name))
