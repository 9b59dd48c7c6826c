"""M_score = Tq x Tk x s, causal pair counts, byte formatting."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashcourse import memory
from flashcourse.geometry import visible_mask


def test_lesson_example_is_32_mib():
    assert memory.score_matrix_bytes(4096, 4096, 2) == 33_554_432
    assert memory.format_bytes(33_554_432) == "33,554,432 B = 32 MiB"


@given(st.integers(1, 300), st.integers(1, 300), st.sampled_from([1, 2, 4, 8]))
def test_causal_pairs_match_brute_force(tq, tk, s):
    visible = int(visible_mask(tq, tk, True).sum())
    assert memory.visible_pairs(tq, tk, causal=True) == visible
    assert memory.score_matrix_bytes(tq, tk, s, causal=True) == visible * s
    assert memory.score_matrix_bytes(tq, tk, s) == tq * tk * s


def test_causal_square_is_triangle():
    assert memory.visible_pairs(4096, 4096, causal=True) == 4096 * 4097 // 2


@pytest.mark.parametrize("n,text", [(0, "0 B"), (1023, "1,023 B"), (1536, "1,536 B = 1.5 KiB"),
                                    (2**30, "1,073,741,824 B = 1 GiB"),
                                    # past EiB the count keeps its separators (nb01's
                                    # explorer at Tq = Tk = 2**40, fp32)
                                    (2**82, "4,835,703,278,458,516,698,824,704 B = "
                                     "4,194,304 EiB")])
def test_format_bytes(n, text):
    assert memory.format_bytes(n) == text


@pytest.mark.parametrize("args,exc,word", [((0, 4, 2), ValueError, "t_query"),
                                          ((4, -1, 2), ValueError, "t_key"),
                                          ((4, 4, 2.5), TypeError, "bytes_per_score"),
                                          ((4.0, 4, 2), TypeError, "t_query")])
def test_bad_arguments_are_named(args, exc, word):
    with pytest.raises(exc, match=word):
        memory.score_matrix_bytes(*args)


def test_numpy_integers_are_accepted():
    assert memory.score_matrix_bytes(np.int64(8), np.int32(8), np.int8(2)) == 128


def test_readout_lines_break_inside_long_numbers():
    """A 40-digit byte count has no space to wrap at: the readout's HTML lets it break
    anywhere instead of running past the explorer's edge (nb01 at 2**40)."""
    from flashcourse.widgets._base import lines_html, message_html
    assert "overflow-wrap:anywhere" in lines_html(["1" * 60])
    assert "overflow-wrap:anywhere" in message_html("1" * 60)
