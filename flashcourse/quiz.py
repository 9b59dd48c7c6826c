"""Multiple-choice "check your understanding" questions as ipywidgets.

The logic (`Question.grade`) is plain Python, tested without a browser; the
widget only shows it. A learner picks an option and presses "Check"; the widget
says whether it is right and then reveals the answer with its reasoning.

    from flashcourse.quiz import Question, show_quiz
    show_quiz([Question("What is avoided?", ["A", "B"], answer=0, why="...")])
"""

from __future__ import annotations

import html
from dataclasses import dataclass


@dataclass(frozen=True)
class Question:
    """One multiple-choice question.

    text: the question; choices: the options; answer: index of the right one;
    why: the reasoning shown once the learner has chosen.
    """

    text: str
    choices: tuple
    answer: int
    why: str

    def __post_init__(self):
        object.__setattr__(self, "choices", tuple(self.choices))
        if len(self.choices) < 2:
            raise ValueError(f"choices must hold at least 2 options, got {len(self.choices)}")
        if not (isinstance(self.answer, int) and 0 <= self.answer < len(self.choices)):
            raise ValueError(
                f"answer must be an index into choices (0..{len(self.choices) - 1}), "
                f"got {self.answer!r}")

    def grade(self, choice) -> tuple[bool, str]:
        """(correct?, feedback) for the index or text of the chosen option."""
        if choice is None:
            return False, "Pick one of the options first."
        if isinstance(choice, str):
            if choice not in self.choices:
                return False, f"{choice!r} is not one of the options."
            choice = self.choices.index(choice)
        correct = choice == self.answer
        verdict = "Correct." if correct else "Not quite."
        return correct, (f"{verdict} The answer is: {self.choices[self.answer]}. "
                         f"{self.why}")


def quiz_widget(question: Question, number: int | None = None):
    """An ipywidgets box: the question, radio buttons, a Check button, feedback."""
    import ipywidgets as w

    title = f"Q{number}. " if number is not None else ""
    label = w.HTML(f"<b>{html.escape(title + question.text)}</b>")
    options = w.RadioButtons(options=list(question.choices), value=None,
                             layout=w.Layout(width="auto"))
    button = w.Button(description="Check", button_style="primary")
    feedback = w.HTML("")

    def on_check(_):
        correct, message = question.grade(options.value)
        colour = "#1a7f37" if correct else "#b35900"
        feedback.value = f'<span style="color:{colour}">{html.escape(message)}</span>'

    button.on_click(on_check)
    return w.VBox([label, options, button, feedback],
                  layout=w.Layout(margin="0 0 1em 0"))


def quiz_box(questions):
    """All questions as one ipywidgets VBox (not displayed)."""
    import ipywidgets as w

    return w.VBox([quiz_widget(q, i + 1) for i, q in enumerate(questions)])


def show_quiz(questions) -> None:
    """Display a list of Questions as one widget in the notebook.

    Returns None, so a bare `show_quiz([...])` as the last line of a cell shows
    the quiz once (use `quiz_box` to get the widget itself).
    """
    from IPython.display import display

    display(quiz_box(questions))


#: The lesson's own "check your understanding" question (from the course seed).
AVOIDED_OBJECT = Question(
    "What is the main avoided object in tiled IO-aware attention?",
    ["The full attention score/probability matrix in outer memory",
     "All model weights",
     "The causal relationship between tokens"],
    answer=0,
    why=("Tiles and running normalization allow the result to be accumulated without "
         "retaining every pairwise score in HBM. The weights are still needed, and a "
         "causal mask is still applied: only the Tq x Tk intermediate disappears."),
)
