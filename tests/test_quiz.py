"""The quiz logic (no browser) and its widget."""

import pytest

from flashcourse.quiz import AVOIDED_OBJECT, Question, quiz_box, quiz_widget


def test_grade_right_and_wrong_reveal_answer_and_reasoning():
    ok, msg = AVOIDED_OBJECT.grade(0)
    assert ok and msg.startswith("Correct.") and "outer memory" in msg
    ok, msg = AVOIDED_OBJECT.grade("All model weights")
    assert not ok and msg.startswith("Not quite.") and AVOIDED_OBJECT.why in msg
    assert AVOIDED_OBJECT.grade(None) == (False, "Pick one of the options first.")


@pytest.mark.parametrize("choices,answer", [(["only one"], 0), (["a", "b"], 2), (["a", "b"], "a")])
def test_bad_questions_are_rejected(choices, answer):
    with pytest.raises(ValueError):
        Question("q", choices, answer, "why")


def test_widget_reveals_feedback_after_a_choice():
    box = quiz_widget(AVOIDED_OBJECT, 1)
    _, options, button, feedback = box.children
    assert feedback.value == ""
    options.value = AVOIDED_OBJECT.choices[2]
    button.click()
    assert "Not quite" in feedback.value and "outer memory" in feedback.value
    assert len(quiz_box([AVOIDED_OBJECT, AVOIDED_OBJECT]).children) == 2
