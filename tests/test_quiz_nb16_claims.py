"""Quiz 16's claims about the merge checked against the formulas themselves."""

import numpy as np

from flashcourse import quizzes
from flashcourse.labs.context_parallel import logsigmoid, sigmoid


def _bare_merge(o_a, lse_a, o_b, lse_b):
    with np.errstate(invalid="ignore"):
        return (o_a - sigmoid(lse_b - lse_a) * (o_a - o_b), lse_a - logsigmoid(lse_a - lse_b))


def test_nan_feedback_says_where_the_bare_sigmoid_form_gives_nan():
    """The bare sigmoid form gives NaN where both sides are empty (so it is not 'safe' there)
    and leaves a state that has seen keys unchanged when the block is empty: the feedback of
    'the merge gives NaN' must say the first, not that the sigmoid form avoids it."""
    inf = np.inf
    assert np.isnan(_bare_merge(0.0, -inf, 0.0, -inf)[1])                   # both empty: NaN
    assert _bare_merge(0.7, 1.5, 0.0, -inf) == (0.7, 1.5)                   # empty block
    question = next(q for q in quizzes.get("16") if "keys all come" in q.text)
    i = next(i for i, c in enumerate(question.choices) if "NaN" in c)
    feedback = question.feedback[i]
    assert "running state" in feedback and "both sides are empty), but the safe" not in feedback
