"""Multiple-choice "check your understanding" questions as ipywidgets.

The questions of each notebook live in the package as data, one TOML file per notebook
(`flashcourse/quizzes/nb03.toml`; the format is in `flashcourse/quizzes/__init__.py`),
so a notebook's quiz cell is only `quizzes.show("03")` and the answer is not on screen
before the learner answers. `load_questions(path)` reads one file, checks it against
`flashcourse/schemas/quiz.json` and builds `Question`s; a broken file raises
`QuizFileError` naming the file, the question and what is wrong. Each question:

- shows its options in a shuffled order that is stable (seeded by the question's
  text, so a re-run shows the same order);
- answers a wrong pick with the misconception that option reflects, and lets the
  learner try again;
- reveals the answer and its reasoning only after a correct pick or an explicit
  "Show answer";
- counts first-try answers into a score line ("2 of 3 on the first try").

The logic (`Question.grade`, `QuizSession`) is plain Python, tested without a
browser; the widget only shows it.

    from flashcourse import quizzes
    quizzes.show("03")                    # the questions of notebook 03
    show_quiz(load_questions("my.toml"))  # the questions of any quiz file
    show_quiz([Question(...), ...])       # any list of questions
"""

from __future__ import annotations

import errno
import hashlib
import html
import numbers
import os
import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .results import read_regular, refuse_irregular, schema_errors

try:
    import tomllib
except ImportError:              # Python 3.10: the same parser as a package (requirements.txt)
    import tomli as tomllib

RIGHT = "Correct."
WRONG = "Not quite."


def _brief(value) -> str:
    """`value` for an error message: its repr, cut to 60 characters, and its type."""
    try:
        text = repr(value)
    except ValueError:                  # an int past Python's 4,300-digit limit
        text = "a number too large to show"
    text = text if len(text) <= 60 else text[:45] + "..." + text[-12:]
    kind = type(value).__name__
    return f"{text} ({'an' if kind[0] in 'aeiou' else 'a'} {kind})"


def _is_index(value) -> bool:
    """An integer index (Python or numpy integer), but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class Question:
    """One multiple-choice question.

    text: the question; choices: a list or tuple of option strings (a plain
    string is an error: it is not split into letters); answer: index of the
    right option (int or numpy integer; not a bool); why: the reasoning shown
    once the learner has it right or asks for the answer (a non-empty string:
    None would be shown as "Correct. None"); feedback: one line per option, what
    picking it reveals (the misconception behind a wrong option); empty strings
    fall back to a generic line. Anything else is a ValueError naming the field.
    """

    text: str
    choices: tuple
    answer: int
    why: str
    feedback: tuple = ()

    def __post_init__(self):
        for field in ("text", "why"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{field} must be a non-empty string, got {_brief(value)}")
        if isinstance(self.choices, (str, bytes)):
            raise ValueError("choices must be a list or tuple of option strings, got a single "
                             f"string {_brief(self.choices)}")
        try:
            choices = tuple(self.choices)
        except TypeError:
            raise ValueError("choices must be a list or tuple of option strings, got "
                             f"{type(self.choices).__name__}") from None
        if len(choices) < 2:
            raise ValueError(f"choices must hold at least 2 options, got {len(choices)}")
        for n, choice in enumerate(choices, 1):
            if not isinstance(choice, str) or not choice.strip():
                raise ValueError(f"every choice must be a non-empty string; choice {n} is "
                                 f"{_brief(choice)}")
        if len(set(choices)) != len(choices):
            raise ValueError(f"choices must be distinct, got {_brief(choices)}")
        object.__setattr__(self, "choices", choices)
        if not (_is_index(self.answer) and 0 <= self.answer < len(choices)):
            raise ValueError(
                f"answer must be an integer index into choices (0..{len(choices) - 1}), "
                f"got {_brief(self.answer)}")
        object.__setattr__(self, "answer", int(self.answer))
        if isinstance(self.feedback, (str, bytes)):
            raise ValueError("feedback must be a list with one line per choice, got a string")
        try:
            feedback = tuple(self.feedback) or ("",) * len(choices)
        except TypeError:                     # None, a number: nothing to iterate
            raise ValueError(f"feedback must be a list with one line per choice "
                             f"({len(choices)}), got {_brief(self.feedback)}") from None
        if len(feedback) != len(choices):
            raise ValueError(f"feedback must hold one string per choice ({len(choices)}), "
                             f"got {len(feedback)}")
        for n, line in enumerate(feedback, 1):
            if not isinstance(line, str):
                raise ValueError(f"feedback must hold one string per choice (\"\" for none); "
                                 f"line {n} is {_brief(line)}")
        object.__setattr__(self, "feedback", feedback)

    def order(self) -> list[int]:
        """The display order of the options: a permutation seeded by the question text."""
        seed = int.from_bytes(hashlib.sha256(self.text.encode()).digest()[:8], "big")
        idx = list(range(len(self.choices)))
        random.Random(seed).shuffle(idx)
        return idx

    def _index(self, choice) -> int | None:
        if isinstance(choice, str):
            return self.choices.index(choice) if choice in self.choices else None
        if _is_index(choice) and 0 <= choice < len(self.choices):
            return int(choice)
        return None

    def grade(self, choice) -> tuple[bool, str]:
        """(correct?, feedback) for the index or text of the chosen option.

        A wrong pick gets that option's feedback and an invitation to try again;
        it does not reveal the answer. A right pick gets the reasoning.
        """
        if choice is None:
            return False, "Pick one of the options first."
        n = self._index(choice)
        if n is None:
            return False, f"{choice!r} is not one of the options."
        if n == self.answer:
            extra = f" {self.feedback[n]}" if self.feedback[n] else ""
            return True, f"{RIGHT}{extra} {self.why}"
        why_not = self.feedback[n] or "That option does not follow from the notebook's reasoning."
        return False, f"{WRONG} {why_not} Try again, or press 'Show answer'."

    def reveal(self) -> str:
        """The answer and its reasoning (for the explicit "Show answer")."""
        return f"The answer is: {self.choices[self.answer]}. {self.why}"


class QuizSession:
    """Tracks a learner's picks over a list of questions, for the score line."""

    def __init__(self, questions):
        self.questions = list(questions)
        self.first_try: dict[int, bool] = {}       # question number -> right on first try
        self.solved: set[int] = set()
        self.revealed: set[int] = set()

    def pick(self, number: int, choice) -> tuple[bool, str]:
        """Grade a pick for question `number`; the first real pick sets the score."""
        question = self.questions[number]
        correct, message = question.grade(choice)
        if question._index(choice) is not None and number not in self.first_try:
            self.first_try[number] = correct and number not in self.revealed
        if correct:
            self.solved.add(number)
        return correct, message

    def show_answer(self, number: int) -> str:
        self.revealed.add(number)
        self.first_try.setdefault(number, False)
        return self.questions[number].reveal()

    def score_line(self) -> str:
        n = len(self.questions)
        right = sum(self.first_try.values())
        answered = len(self.first_try)
        line = f"{right} of {n} on the first try"
        if answered < n:
            line += f" ({n - answered} not answered yet)"
        return line


#: The CSS class of a question's options (a RadioButtons widget), for QUIZ_CSS and the
#: browser test (tests/test_browser_quiz.py).
OPTIONS_CLASS = "fc-quiz-options"
#: ipywidgets gives each radio label a fixed height of one line (and the widget a fixed
#: 300 px width), so a long option wraps onto the option below it. These rules, scoped to
#: OPTIONS_CLASS, let a label grow with its text (the radio button stays on its first line)
#: and let the widget take, and never exceed, the width of the output area. They are
#: written into each question's title (an HTML widget: a <style> element there applies to
#: the page), so the quiz lays out the same wherever the widget is shown.
QUIZ_CSS = f"""
.{OPTIONS_CLASS} {{ width: auto; max-width: 100%; min-width: 0; line-height: normal; }}
.{OPTIONS_CLASS} .widget-radio-box, .{OPTIONS_CLASS} .jupyter-widget-radio-box {{
  min-width: 0; margin-bottom: 0 !important; }}
.{OPTIONS_CLASS} .widget-radio-box label, .{OPTIONS_CLASS} .jupyter-widget-radio-box label {{
  display: flex; align-items: flex-start; height: auto; min-height: 0;
  line-height: 1.4; padding: 2px 0; white-space: normal; overflow-wrap: anywhere;
  box-sizing: border-box; max-width: 100%; }}
.{OPTIONS_CLASS} .widget-radio-box input, .{OPTIONS_CLASS} .jupyter-widget-radio-box input {{
  order: -1; flex: none; float: none; height: 1.4em; margin-top: 0; }}
""".strip()


def _question_box(session: QuizSession, number: int, score):
    import ipywidgets as w

    question = session.questions[number]
    order = question.order()
    label = w.HTML(f"<style>{QUIZ_CSS}</style>"
                   f"<b>{html.escape(f'Q{number + 1}. ' + question.text)}</b>")
    options = w.RadioButtons(options=[(question.choices[i], i) for i in order], value=None,
                             layout=w.Layout(width="auto", max_width="100%"))
    options.add_class(OPTIONS_CLASS)
    check = w.Button(description="Check", button_style="primary")
    reveal = w.Button(description="Show answer")
    feedback = w.HTML("")

    def show(message, colour):
        feedback.value = f'<span style="color:{colour}">{html.escape(message)}</span>'
        score.value = f"<i>{html.escape(session.score_line())}</i>"

    def on_check(_):
        correct, message = session.pick(number, options.value)
        show(message, "#1a7f37" if correct else "#b35900")

    def on_reveal(_):
        show(session.show_answer(number), "#1f4e8c")

    check.on_click(on_check)
    reveal.on_click(on_reveal)
    return w.VBox([label, options, w.HBox([check, reveal]), feedback],
                  layout=w.Layout(margin="0 0 1em 0"))


def _questions(questions):
    if isinstance(questions, (str, bytes)):
        raise ValueError("show_quiz takes a list of Questions; for a notebook's quiz use "
                         "flashcourse.quizzes.show('03')")
    questions = list(questions)
    if not questions or not all(isinstance(q, Question) for q in questions):
        raise ValueError("show_quiz takes a non-empty list of Questions")
    return questions


def quiz_box(questions):
    """All questions as one ipywidgets VBox with a score line (not displayed)."""
    import ipywidgets as w

    session = QuizSession(_questions(questions))
    score = w.HTML(f"<i>{html.escape(session.score_line())}</i>")
    boxes = [_question_box(session, i, score) for i in range(len(session.questions))]
    box = w.VBox([*boxes, score])
    box.session = session
    return box


def static_html(questions) -> str:
    """The quiz as plain HTML for the static website: each question with its options (in the
    same shuffled order) and the answer with its reasoning behind a "Show answer" toggle."""
    parts = []
    for n, q in enumerate(_questions(questions), 1):
        items = "".join(f"<li>{html.escape(q.choices[i])}</li>" for i in q.order())
        parts.append(f"<p><b>Q{n}. {html.escape(q.text)}</b></p><ul>{items}</ul>"
                     f"<details><summary>Show answer</summary><p>{html.escape(q.reveal())}"
                     "</p></details>")
    return "\n".join(parts)


def show_quiz(questions) -> None:
    """Display a list of Questions as one quiz with a score line.

    Returns None, so a bare `show_quiz([...])` as the last line of a cell shows
    the quiz once (use `quiz_box` to get the widget itself). When the static
    website is built (FLASHCOURSE_STATIC_SITE=1, no kernel behind the page) the
    quiz is shown as HTML with each answer behind a toggle.
    """
    import os

    from IPython.display import HTML, display

    if os.environ.get("FLASHCOURSE_STATIC_SITE") == "1":
        display(HTML(static_html(questions)))
        return
    display(quiz_box(questions))


#: The quiz files (one per notebook or lab, and lesson.toml); their format is described in
#: flashcourse/quizzes/__init__.py and checked against flashcourse/schemas/quiz.json.
QUIZ_DIR = Path(__file__).resolve().parent / "quizzes"
#: The lesson's own questions (not one notebook's), each with an `id`; a notebook's file
#: asks one with `include = "<id>"`.
LESSON_FILE = QUIZ_DIR / "lesson.toml"


class QuizFileError(ValueError):
    """A quiz file that does not parse or does not follow the format; the message names the
    file, the question (and option) and what is wrong."""


#: The largest quiz file read (bytes); the course's are under 5 KB.
MAX_QUIZ_BYTES = 1 << 20


def _shown(path: Path) -> str:
    """A quiz file as errors name it: flashcourse/quizzes/nb09.toml, or the path given
    (a very long one cut to about 200 characters)."""
    try:
        text = str(path.relative_to(QUIZ_DIR.parents[1]))
    except ValueError:                  # not inside the package: the path as given
        text = str(path)
    return text if len(text) <= 200 else text[:120] + "..." + text[-60:]


def _quiz_path(path) -> Path:
    """`path` (a str or os.PathLike naming a quiz file) as an absolute Path; QuizFileError
    saying what is wrong for None, bytes, an empty name, a NUL byte (no file name holds
    one) or a loop of symbolic links."""
    what = ("path must name a quiz file, as a str or a pathlib.Path "
            "(e.g. 'flashcourse/quizzes/nb03.toml')")
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise QuizFileError(f"{what}, got {_brief(path)}")
    name = os.fspath(path)              # an os.PathLike may give bytes too
    if isinstance(name, bytes):
        raise QuizFileError(f"{what}, got {_brief(name)}; decode it to a str first "
                            "(os.fsdecode)")
    if not name.strip():
        raise QuizFileError(f"{what}, got an empty name {name!r}")
    if "\0" in name:
        raise QuizFileError(f"{_shown(Path(name.replace(chr(0), '?')))}: the name contains "
                            "a NUL byte (\\0), which no file name can hold")
    try:
        return Path(name).resolve()
    except RuntimeError:     # a symlink loop, before Python 3.13 (3.13 resolves it as it
        # is, and the stat in _read then fails with ELOOP, with the same message)
        raise QuizFileError(f"{_shown(Path(name))}: a loop of symbolic links (a link that "
                            "leads back to itself), not a quiz file") from None


def _place(file: str, where: list) -> str:
    """'nb09.toml, question 3, option 2' for the document path ['question', 2, 'option', 1]."""
    out = file
    for key in ("question", "option"):
        if len(where) >= 2 and where[0] == key and isinstance(where[1], int):
            out, where = f"{out}, {key} {where[1] + 1}", where[2:]
    return f"{out}, {'.'.join(map(str, where))}" if where else out


_COUNTING = ("contains", "minContains", "maxContains")      # the one right option


def _schema_problem(error) -> tuple[list, str]:
    """(document path, plain words) for one jsonschema error in a quiz file."""
    where, found = list(error.absolute_path), error.instance
    if error.validator in _COUNTING:
        right = sum(isinstance(o, dict) and o.get("right") is True for o in found)
        return where[:-1], f"needs exactly one option with right = true, found {right}"
    if error.validator == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        unknown = ", ".join(repr(k) for k in found if k not in allowed)
        return where, f"unknown key {unknown} (allowed: {', '.join(allowed)})"
    if error.validator == "minItems" and where[-1:] == ["option"]:
        return where[:-1], f"needs at least 2 options, found {len(found)}"
    if error.validator == "maxProperties":
        return where, "a question with include = ... has no other keys"
    return where, error.message if len(error.message) <= 200 else error.message[:200] + "..."


def _read(path: Path) -> bytes:
    """The bytes of one quiz file. QuizFileError naming it when it is missing, is not a
    regular file (a directory, a FIFO, a device: checked with os.stat before opening, and
    again on the open descriptor, so a FIFO never blocks) or is larger than
    MAX_QUIZ_BYTES."""
    file = _shown(path)
    try:
        data, mode = read_regular(path, MAX_QUIZ_BYTES)
    except FileNotFoundError:
        raise QuizFileError(f"{file}: no such quiz file") from None
    except OSError as exc:                    # permission denied, a link loop, ...
        if exc.errno == errno.ELOOP:
            raise QuizFileError(f"{file}: a loop of symbolic links (a link that leads back "
                                "to itself), not a quiz file") from None
        raise QuizFileError(f"{file}: cannot read it ({exc.strerror or exc})") from None
    refuse_irregular(mode, QuizFileError,
                     f"{file}: is a directory, not a quiz file (a .toml file)",
                     f"{file}: not a regular file (a FIFO, socket or device); a quiz "
                     "file is a plain UTF-8 TOML file")
    if len(data) > MAX_QUIZ_BYTES:
        raise QuizFileError(f"{file}: larger than {MAX_QUIZ_BYTES:,} bytes; a quiz file is "
                            "a few KB of TOML")
    return data


def _text(file: str, data: bytes) -> str:
    """A quiz file's bytes as text: UTF-8 (a leading byte-order mark is dropped), else
    QuizFileError naming the file and the first bad byte."""
    nul = data.find(b"\0")
    if nul >= 0:
        raise QuizFileError(f"{file}: contains a NUL byte at offset {nul}: a binary file, "
                            "not a UTF-8 TOML quiz file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise QuizFileError(
            f"{file}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start}, "
            f"line {line}); save the file as UTF-8") from None
    return text.removeprefix("\ufeff")


def _parse(path: Path) -> tuple:
    """(id or None, Question or the id it includes) for each question of one quiz file,
    read now; the parse is cached by the file's content, so any edit is seen (whatever
    its modification time)."""
    return _parse_bytes(path, _read(path))


@lru_cache(maxsize=64)
def _parse_bytes(path: Path, data: bytes) -> tuple:
    """`_parse` of the content `data` of `path` (the key is the content itself)."""
    file = _shown(path)
    deep = (f"{file}: nested too deeply to read (arrays or tables inside one another, "
            "hundreds of levels); a quiz file is a list of [[question]] tables, each with "
            "its [[question.option]] tables")
    try:
        doc = tomllib.loads(_text(file, data))
    except tomllib.TOMLDecodeError as exc:            # its message gives line and column
        raise QuizFileError(f"{file}: not valid TOML: {exc}") from None
    except RecursionError:                            # tomllib parses nesting recursively
        raise QuizFileError(deep) from None
    # "exactly one right option" last: a wrongly typed `right` would also break the count
    try:
        errors = sorted(schema_errors(doc, "quiz"), key=lambda e: e.validator in _COUNTING)
        problem = _schema_problem(errors[0]) if errors else None
    except RecursionError:              # jsonschema, or an error's repr, on a deep document
        raise QuizFileError(deep) from None
    if errors:
        where, problem = problem
        more = len(errors) - 1
        more = f" (and {more} more problem{'s' * (more > 1)})" if more else ""
        raise QuizFileError(f"{_place(file, where)}: {problem}{more} "
                            "(the format: flashcourse/quizzes/__init__.py)")
    lesson = path == LESSON_FILE
    out = []
    for n, q in enumerate(doc["question"], 1):
        here = f"{file}, question {n}"
        if ("id" in q) != lesson:
            raise QuizFileError(f"{here}: every question of {LESSON_FILE.name} has an id, "
                                "and only those (another file includes one by its id)")
        if "include" in q:                            # looked up when loaded
            out.append((None, q["include"]))
            continue
        options = q["option"]
        try:
            question = Question(q["text"], [o["text"] for o in options],
                                answer=[o.get("right", False) for o in options].index(True),
                                why=q["why"], feedback=[o.get("feedback", "") for o in options])
        except ValueError as exc:                     # e.g. two options with the same text
            raise QuizFileError(f"{here}: {exc}") from None
        out.append((q.get("id"), question))
    ids = [i for i, _ in out if i is not None]
    if len(set(ids)) != len(ids):
        raise QuizFileError(f"{file}: ids must be distinct, got {ids}")
    return tuple(out)


def load_questions(path) -> list[Question]:
    """The questions of one quiz file (TOML, the format of flashcourse/quizzes/__init__.py),
    checked against flashcourse/schemas/quiz.json; QuizFileError naming the file, the
    question and what is wrong when it does not parse or follow the format, or when
    `path` names no regular file (see `_quiz_path` and `_read`)."""
    path = _quiz_path(path)
    entries = [q for _, q in _parse(path)]
    if all(isinstance(q, Question) for q in entries):
        return entries
    lesson = _lesson_questions()
    for n, q in enumerate(entries, 1):
        if isinstance(q, str) and q not in lesson:
            raise QuizFileError(f"{_shown(path)}, question {n}: include = {q!r} is no id in "
                                f"{LESSON_FILE.name} (ids: {', '.join(lesson)})")
    return [lesson[q] if isinstance(q, str) else q for q in entries]


def _lesson_questions() -> dict:
    """lesson.toml's questions by id."""
    return dict(_parse(LESSON_FILE))


#: The lesson's own "check your understanding" question (from the course seed), kept in
#: flashcourse/quizzes/lesson.toml. Asked once, in notebook 03 (nb03.toml includes it),
#: where the learner has seen the tiled forward.
AVOIDED_OBJECT = _lesson_questions()["avoided_object"]
