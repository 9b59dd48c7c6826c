"""Multiple-choice "check your understanding" questions as ipywidgets.

The questions of each notebook live in the package (`flashcourse.quizzes`), so a
notebook's quiz cell is only `quizzes.show("03")` and the answer is not on screen
before the learner answers. Each question:

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
    show_quiz([Question(...), ...])       # any list of questions
"""

from __future__ import annotations

import hashlib
import html
import numbers
import random
from dataclasses import dataclass

RIGHT = "Correct."
WRONG = "Not quite."


def _is_index(value) -> bool:
    """An integer index (Python or numpy integer), but not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class Question:
    """One multiple-choice question.

    text: the question; choices: a list or tuple of option strings (a plain
    string is an error: it is not split into letters); answer: index of the
    right option (int or numpy integer; not a bool); why: the reasoning shown
    once the learner has it right or asks for the answer; feedback: one line per
    option, what picking it reveals (the misconception behind a wrong option);
    empty strings fall back to a generic line.
    """

    text: str
    choices: tuple
    answer: int
    why: str
    feedback: tuple = ()

    def __post_init__(self):
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError(f"text must be a non-empty string, got {self.text!r}")
        if isinstance(self.choices, (str, bytes)):
            raise ValueError("choices must be a list or tuple of option strings, got a single "
                             f"string {self.choices!r}")
        try:
            choices = tuple(self.choices)
        except TypeError:
            raise ValueError("choices must be a list or tuple of option strings, got "
                             f"{type(self.choices).__name__}") from None
        if len(choices) < 2:
            raise ValueError(f"choices must hold at least 2 options, got {len(choices)}")
        if not all(isinstance(c, str) and c.strip() for c in choices):
            raise ValueError(f"every choice must be a non-empty string, got {choices!r}")
        if len(set(choices)) != len(choices):
            raise ValueError(f"choices must be distinct, got {choices!r}")
        object.__setattr__(self, "choices", choices)
        if not (_is_index(self.answer) and 0 <= self.answer < len(choices)):
            raise ValueError(
                f"answer must be an integer index into choices (0..{len(choices) - 1}), "
                f"got {self.answer!r}")
        object.__setattr__(self, "answer", int(self.answer))
        if isinstance(self.feedback, str):
            raise ValueError("feedback must be a list with one line per choice, got a string")
        feedback = tuple(self.feedback) or ("",) * len(choices)
        if len(feedback) != len(choices) or not all(isinstance(f, str) for f in feedback):
            raise ValueError(f"feedback must hold one string per choice ({len(choices)}), "
                             f"got {len(feedback)}")
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


def _question_box(session: QuizSession, number: int, score):
    import ipywidgets as w

    question = session.questions[number]
    order = question.order()
    label = w.HTML(f"<b>{html.escape(f'Q{number + 1}. ' + question.text)}</b>")
    options = w.RadioButtons(options=[(question.choices[i], i) for i in order], value=None,
                             layout=w.Layout(width="auto"))
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


#: The lesson's own "check your understanding" question (from the course seed). Asked once,
#: in notebook 03 (flashcourse/quizzes/nb03.py), where the learner has seen the tiled forward.
AVOIDED_OBJECT = Question(
    "What is the main avoided object in tiled IO-aware attention?",
    ["The full attention score/probability matrix in outer memory",
     "All model weights",
     "The causal relationship between tokens"],
    answer=0,
    why=("Tiles and running normalization allow the result to be accumulated without "
         "retaining every pairwise score in HBM. The weights are still needed, and a "
         "causal mask is still applied: only the Tq x Tk intermediate disappears."),
    feedback=("",
              "Weights are not what attention's memory problem is about: Q, K, V come from "
              "them, and they are still read in full.",
              "The causal mask is still applied, tile by tile; FlashAttention computes the same "
              "function, so no relationship between tokens is dropped."),
)
