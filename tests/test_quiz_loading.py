"""Quiz files and questions that cannot be used: one clear error (issue 50, item 7).

Loading: a path that is None, bytes, empty, holds a NUL byte, is a loop of symbolic links
or a link to a FIFO, and a file nested too deeply for the TOML parser, each give one
QuizFileError line naming the file (or the argument) and what is wrong; nothing hangs.
Questions: a `why`, `text`, choice or feedback line that is not a non-empty string is
refused when the Question is made, naming the field (`why=None` showed "Correct. None").
"""

import os
import sys
from pathlib import Path

import pytest

from flashcourse.quiz import Question, QuizFileError, load_questions
from helpers import quiz_error_without_blocking

GOOD = """
[[question]]
text = "First?"
why = "Because."
option = [{text = "right one", right = true}, {text = "wrong one", feedback = "No."}]
"""


def _one_line(text: str) -> bool:
    return "\n" not in text and len(text) < 400 and "Traceback" not in text


# ---------------------------------------------------------------------------
# Questions
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("why", [None, "", "   ", 3, b"bytes", ["a reason"]])
def test_a_question_without_a_reason_is_refused(why):
    """Question(..., why=None) was accepted and a right pick read "Correct. None"."""
    with pytest.raises(ValueError, match="^why must be a non-empty string, got "):
        Question("Which?", ["a", "b"], 0, why)


@pytest.mark.parametrize("kwargs,message", [
    (dict(text=None), "text must be a non-empty string, got None (a NoneType)"),
    (dict(text="  "), "text must be a non-empty string, got '  ' (a str)"),
    (dict(choices=["a", None]), "every choice must be a non-empty string; choice 2 is None"),
    (dict(choices=["a", 9999 ** 4096]),
     "every choice must be a non-empty string; choice 2 is a number too large to show"),
    (dict(answer=9999 ** 4096), "answer must be an integer index into choices (0..1), got "
                                "a number too large to show (an int)"),
    (dict(feedback=None), "feedback must be a list with one line per choice (2), got None"),
    (dict(feedback=[None, "x"]), 'feedback must hold one string per choice ("" for none); '
                                 "line 1 is None (a NoneType)"),
    (dict(feedback=b"xy"), "feedback must be a list with one line per choice, got a string"),
])
def test_every_field_of_a_question_is_checked_by_name(kwargs, message):
    args = dict(text="Which?", choices=["a", "b"], answer=0, why="Because.")
    args.update(kwargs)
    with pytest.raises(ValueError) as info:
        Question(**args)
    assert str(info.value).startswith(message) and _one_line(str(info.value))


def test_a_right_pick_shows_the_reason():
    ok, text = Question("Which?", ["a", "b"], 1, "Because b.").grade(1)
    assert ok and text == "Correct. Because b."


def test_a_file_whose_reason_is_blank_names_the_question(tmp_path):
    path = tmp_path / "nb98.toml"
    path.write_text(GOOD + GOOD.replace('"First?"', '"Second?"').replace('"Because."', '"  "'))
    with pytest.raises(QuizFileError, match=r"nb98.toml, question 2: why must be a non-empty "
                                            r"string, got '  ' \(a str\)$"):
        load_questions(path)


# ---------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------

class _BytesPath:
    def __fspath__(self):
        return b"/tmp/nb03.toml"


@pytest.mark.parametrize("path,message", [
    (None, "path must name a quiz file, as a str or a pathlib.Path (e.g. "
           "'flashcourse/quizzes/nb03.toml'), got None (a NoneType)"),
    (3, "path must name a quiz file, as a str or a pathlib.Path (e.g. "
        "'flashcourse/quizzes/nb03.toml'), got 3 (an int)"),
    (b"flashcourse/quizzes/nb03.toml", "got b'flashcourse/quizzes/nb03.toml' (a bytes); "
                                       "decode it to a str first (os.fsdecode)"),
    (_BytesPath(), "got b'/tmp/nb03.toml' (a bytes); decode it to a str first"),
    ("", "got an empty name ''"), ("  ", "got an empty name '  '"),
    ("nb\0.toml", "nb?.toml: the name contains a NUL byte (\\0), which no file name can hold"),
])
def test_a_path_that_names_no_file_is_one_clear_error(path, message):
    """None, 3 and bytes raised TypeError from pathlib, a NUL byte 'embedded null byte',
    and '' read the current folder ('.: is a directory')."""
    with pytest.raises(QuizFileError) as info:
        load_questions(path)
    assert message in str(info.value) and _one_line(str(info.value))


def test_a_symlink_loop_is_named(tmp_path):
    """A loop raised RuntimeError('Symlink loop from ...') out of Path.resolve."""
    (tmp_path / "nb97.toml").symlink_to(tmp_path / "nb96.toml")
    (tmp_path / "nb96.toml").symlink_to(tmp_path / "nb97.toml")
    (tmp_path / "nb95.toml").symlink_to("nb95.toml")              # a link to itself
    for name in ("nb97.toml", "nb95.toml"):
        with pytest.raises(QuizFileError) as info:
            load_questions(tmp_path / name)
        assert str(info.value).endswith(": a loop of symbolic links (a link that leads back "
                                        "to itself), not a quiz file")
        assert str(tmp_path) in str(info.value)


@pytest.mark.timeout(60)
def test_a_link_to_a_fifo_does_not_block(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    (tmp_path / "nb94.toml").symlink_to(fifo)
    error = quiz_error_without_blocking(tmp_path / "nb94.toml", fifo)
    assert "not a regular file (a FIFO, socket or device)" in error


# ---------------------------------------------------------------------------
# Deeply nested TOML
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("nested", [
    "a = " + "[" * 5000 + "]" * 5000,                          # arrays
    "a = " + "{b = " * 3000 + "1" + "}" * 3000,                # inline tables
    '[[question]]\ntext = "Q?"\nwhy = "W."\noption = ' + "[" * 5000 + "]" * 5000,
])
def test_deeply_nested_toml_is_named_not_a_recursion_error(tmp_path, nested):
    """tomllib parses nesting recursively: 5,000 brackets raised RecursionError."""
    path = tmp_path / "nb93.toml"
    path.write_text(nested + "\n")
    with pytest.raises(QuizFileError) as info:
        load_questions(path)
    text = str(info.value)
    assert text.startswith(f"{path}: nested too deeply to read") and _one_line(text)
    assert sys.getrecursionlimit() > 0                         # the interpreter is fine
    assert load_questions(Path(__file__).parents[1] / "flashcourse/quizzes/nb03.toml")


def test_nesting_the_parser_can_read_is_a_schema_error_on_one_line(tmp_path):
    path = tmp_path / "nb92.toml"
    path.write_text('[[question]]\ntext = "Q?"\nwhy = "W."\noption = '
                    + "[" * 60 + "]" * 60 + "\n")
    with pytest.raises(QuizFileError) as info:
        load_questions(path)
    assert str(info.value).startswith(f"{path}, question 1: needs at least 2 options")
    assert _one_line(str(info.value))
