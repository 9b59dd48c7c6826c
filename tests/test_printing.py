"""flashcourse.printing: long printed lines are wrapped at spaces, nothing is lost."""

from flashcourse.printing import LINE_WIDTH, say, wrap_lines


def test_short_lines_are_kept_exactly():
    text = "a  table   row\n    indented line\n\nafter a blank line"
    assert wrap_lines(text) == text


def test_long_lines_wrap_with_indent_and_keep_every_word():
    line = "  Hint: " + " ".join(f"word{n}" for n in range(60))
    out = wrap_lines(line)
    rows = out.splitlines()
    assert len(rows) > 1 and all(len(r) <= LINE_WIDTH for r in rows)
    assert all(r.startswith("      ") for r in rows[1:])       # indent 2 + 4 on follow-ons
    assert out.split() == line.split()


def test_a_word_longer_than_the_width_is_not_cut():
    word = "x" * (LINE_WIDTH + 20)
    assert wrap_lines(f"see {word} here").split() == ["see", word, "here"]


def test_say_prints_wrapped(capsys):
    say("value:", "y " * 80)
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 2 and all(len(r) <= LINE_WIDTH for r in rows)


def test_checker_lines_fit(capsys):
    """A lab checker's FAILED and Hint lines stay under the width (they went through `say`)."""
    import numpy as np

    from flashcourse.labs.online_softmax import check_online_update

    def wrong(m, l, x):
        m_new = np.maximum(m, x)
        return m_new, l + np.exp(x - np.where(m_new == -np.inf, 0.0, m_new))   # no rescale

    result = check_online_update(wrong)
    out = capsys.readouterr().out
    assert not result.passed and "Hint:" in out
    assert max(len(r) for r in out.splitlines()) <= LINE_WIDTH
    assert " ".join(result.hint.split()) in " ".join(out.split())
