"""Review round 21 (REVIEW_2026-12-08_round21.md): the text of notebooks 15 and 16 and their
quizzes against the recorded runs and the course's own rules, and lab 16's checkers against
the submissions that fooled them or got a hint naming a mistake the learner did not make."""

import json
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _markdown(stem: str) -> str:
    nb = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


def _flat(text: str) -> str:
    return " ".join(text.split())


# -- notebook 15: the course's FP8 kernel, its speed ------------------------------------------

def test_fp8_kernel_speed_is_quoted_for_the_kernel_and_for_the_whole_call():
    """M1: the section said the course's FP8 kernel 'ran at 0.93 to 1.30 times the 16-bit
    kernel's speed', the best kernel variant alone; the call a learner makes (transpose and
    host work included) ran at 0.49 to 1.13 in the same recorded run, and the kernel was
    called 'FlashAttention-3's FP8 forward' though it has none of the pieces (TMA, producer
    warpgroup, ping-pong) that the notes name for FlashAttention-3's 1.6x."""
    run = json.loads((ROOT / "benchmarks/results/h100_fp8_forward_run1_bench.json").read_text())
    best, whole = [], []
    for b in run["bench"]:
        hop = b["hopper_fp16_tflops"]
        best.append(max(v for k, v in b.items()
                        if k.startswith("fp8_kernel_") and k.endswith("_tflops")) / hop)
        whole.append(b["fp8_public_tflops"] / hop)
    text = _flat(_markdown("15_fp8_attention"))
    assert f"{min(best):.2f} to {max(best):.2f}" in text
    assert f"{min(whole):.2f} to {max(whole):.2f}" in text
    assert "FlashAttention-3's FP8 forward written" not in text
    assert "without FlashAttention-3's TMA copies" in text


# -- every lab checker: the function, not its result ------------------------------------------

def test_a_result_passed_for_the_function_is_named():
    """m: check_zigzag_ranges(zigzag_ranges(16, 4)) or check_hadamard(hadamard_matrix(4))
    reported "'list' object is not callable" under the rule's hint (the cut into chunks,
    Sylvester's construction), which the learner had not got wrong."""
    from flashcourse.exercises_fp8 import check_round_e4m3
    from flashcourse.labs._calls import HINT_NOT_CALLABLE
    from flashcourse.labs.context_parallel import check_zigzag_ranges
    from flashcourse.labs.fp8 import check_hadamard
    for check, result in ((check_zigzag_ranges, [[(0, 2), (14, 16)]]),
                          (check_hadamard, np.eye(4) / 2), (check_round_e4m3, np.ones(3)),
                          (check_hadamard, None)):
        r = check(result, verbose=False)
        assert not r.passed and r.hint == HINT_NOT_CALLABLE


# -- notebook 15's numpy model of the FP8 kernel: errors that name the argument ---------------

def test_fp8_layouts_name_a_wrong_shape():
    """m: transpose_v of a 1-D array raised IndexError 'tuple index out of range', and
    pv_through_fragments with p of 8 rows an IndexError from inside its loop."""
    import pytest

    from flashcourse.cuda.hopper import fp8_layouts as L
    with pytest.raises(ValueError, match="v must have shape"):
        L.transpose_v(np.ones(8))
    with pytest.raises(ValueError, match="p must have shape"):
        L.pv_through_fragments(np.ones((8, 32)), np.ones((4, 32)))
    with pytest.raises(ValueError, match="vt must have shape"):
        L.pv_through_fragments(np.ones((16, 32)), np.ones((4, 16)))


# -- plain words in the quizzes of notebooks 13 to 16 -----------------------------------------

def test_quizzes_13_to_16_keep_development_words_out():
    """m: quiz nb16's feedback said 'the issue is its 8 bits of precision' (round 19 b took
    'issue' out of two other quizzes: the course keeps that word for its own tracker)."""
    import re
    for n in (13, 14, 15, 16):
        text = (ROOT / "flashcourse" / "quizzes" / f"nb{n}.toml").read_text(encoding="utf-8")
        assert not re.search(r"\bissues?\b", text, re.IGNORECASE), n


# -- a missing return -------------------------------------------------------------------------

def test_a_missing_return_is_named_not_read_as_nan():
    """M: in notebook 16's exercises a function without `return` got "your result contains
    NaN" and the rule's hint: real_array read None as NaN (np.asarray(None, float) is nan)
    before the harness could say "returned None"; lab 16's zigzag check gave the list hint."""
    from flashcourse.exercises_distributed import check_comm_bytes, check_ring_break_even
    from flashcourse.labs._harness import HINT_NONE
    from flashcourse.labs.context_parallel import check_zigzag_ranges

    def even(flops_per_s, link_bytes_per_s, element_bytes, heads, kv_heads):
        flops_per_s * element_bytes * kv_heads / (2.0 * link_bytes_per_s * heads)

    def comm(design, n, world, heads, kv_heads, d, element_bytes):
        if design == "ring":
            return 2.0 * (world - 1) * n / world * kv_heads * d * element_bytes

    for check, fn in ((check_ring_break_even, even), (check_comm_bytes, comm),
                      (check_zigzag_ranges, lambda n, world: None)):
        r = check(fn, verbose=False)
        assert not r.passed and r.hint == HINT_NONE, r.hint


# -- notebook 13's exercise: a factor left out ------------------------------------------------

def test_saved_activations_name_the_factor_left_out():
    """M: P counted without the heads (L B T^2 2) got "that is one layer", a mistake the
    learner had not made (12 layers and 12 heads give the same factor); without the batch it
    got the generic line."""
    from flashcourse import exercises as E
    layers, batch, heads, t = 12, 8, 12, 1024
    right = dict(p_bytes=layers * batch * heads * t * t * 2,
                 lse_bytes=layers * batch * heads * t * 4, ratio=512)
    for part, wrong, reason in (
            ("p_bytes", layers * batch * t * t * 2, "or one head"),
            ("lse_bytes", layers * batch * t * 4, "or one head"),
            ("p_bytes", layers * heads * t * t * 2, "batch (B = 8)"),
            ("lse_bytes", layers * heads * t * 4, "batch (B = 8)")):
        ok, lines = E.grade("13-saved-activations", **{**right, part: wrong})
        line = next(s for s in lines if s.startswith(part))
        assert not ok and reason in line, (part, line)


# -- notebook 14's exercises: the form of what is returned ------------------------------------

def test_variants_exercises_name_a_function_of_the_wrong_form():
    """m: a tile returned instead of the mask_mod, a mask_mod of two arguments, a missing
    return, one function instead of the pair: each raised the contract's TypeError and got
    the rule's hint (the pairs, the formulas)."""
    from flashcourse.exercises_variants import (HINT_MASK_FORM, HINT_PAIR_FORM,
                                                check_head_scale, check_prefix_lm)

    def tile(prefix, t_query, t_key):
        q, kv = np.arange(t_query)[:, None], np.arange(t_key)[None, :]
        return (kv < prefix) | (kv <= q + t_key - t_query)

    def two_args(prefix, t_query, t_key):
        return lambda q_idx, kv_idx: (kv_idx < prefix) | (kv_idx <= q_idx + t_key - t_query)

    def no_return(prefix, t_query, t_key):
        def mask_mod(b, h, q_idx, kv_idx):
            return (kv_idx < prefix) | (kv_idx <= q_idx + t_key - t_query)

    for fn in (tile, two_args, no_return):
        r = check_prefix_lm(fn, verbose=False)
        assert not r.passed and r.hint == HINT_MASK_FORM, fn.__name__
    for fn in (lambda tau: (lambda s, b, h, i, j: tau[h] * s),
               lambda tau: (lambda s, b, h, i, j: tau[h] * s, lambda s, h: tau[h] + 0 * s)):
        r = check_head_scale(fn, verbose=False)
        assert not r.passed and r.hint == HINT_PAIR_FORM


def test_lab14_missing_return_is_named():
    """m: lab 14's checkers read a None result as the wrong kind ("Return the mask function
    itself ... not its value or a tuple", "four arrays", "a pair of functions"), not as the
    missing return it is."""
    from flashcourse.labs._harness import HINT_NONE
    from flashcourse.labs.variants import (check_build_block_mask, check_document,
                                           check_sliding_window, check_softcap)
    for check, fn in ((check_sliding_window, lambda window, t_query, t_key: None),
                      (check_document, lambda cu_seqlens: None),
                      (check_softcap, lambda cap: None),
                      (check_build_block_mask, lambda mask_mod, tq, tk, bq, bk: None)):
        r = check(fn, verbose=False)
        assert not r.passed and r.hint == HINT_NONE
