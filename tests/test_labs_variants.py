"""Lab 14 (attention variants): the solutions pass, the stubs say "not implemented", each typical
mistake (an edit of the solution) gets its own hint, unusual correct solutions pass, and the
checkers judge behaviour on hidden shapes: a learner who returns the library's own functions
passes (the lab asks them not to; no source is compared)."""

import numpy as np
import pytest

from flashcourse.labs import variants as V
from flashcourse.labs import variants_forward as VF
from flashcourse.variants import library
from flashcourse.variants.block_mask import create_block_mask
from labtools import (assert_hint, edits_mistakes_test, functions_of, hint_leaks_test, lab_path,
                      lab_tests, mistakes_test, mutate, variants_test)

LAB = lab_path("lab14_variants")
CHECKS = [(V.check_sliding_window, "sliding_window"), (V.check_document, "document"),
          (V.check_softcap, "softcap"), (V.check_build_block_mask, "build_block_mask"),
          (VF.check_flex_forward, "flex_forward")]
CHECK_OF = {name: check for check, name in CHECKS}

lab, test_solutions_pass, test_stubs_report_not_implemented = lab_tests(LAB, CHECKS)

_WINDOW = "        return (distance >= 0) & (distance <= window)"
_CAP = "        return cap * np.tanh(score / cap)"
_GRAD = "        return 1.0 - t * t"
_TILE = "            tile = mask_tile(mask_mod, 0, 0, np.arange(q0, q1), np.arange(k0, k1))"
_PARTIAL = "            if partial:\n"
_SCORE = ("            s = score_tile(score_mod, scale * (q[q0:q1] @ k[k0:k1].T), 0, 0, rows, "
          "cols)")
_RAW = "            s = scale * (q[q0:q1] @ k[k0:k1].T)"
_EXP = "            p = np.exp(s - m_safe[:, None])                         # (Br, Bc)"
_ALPHA = "            alpha = np.exp(m - m_safe)\n"

#: function: [(solution text, the mistake that replaces it, the hint it must get), ...]
MISTAKES = {
    "sliding_window": [
        (_WINDOW, "        return (distance >= 0) & (distance < window)", V.HINT_WINDOW_NARROW),
        (_WINDOW, "        return (distance >= 0) & (distance <= window + 1)",
         V.HINT_WINDOW_WIDE),
        (_WINDOW, "        return (distance > 0) & (distance <= window)", V.HINT_WINDOW_NARROW),
        ("    offset = t_key - t_query", "    offset = 0", V.HINT_WINDOW_ALIGN),
        ("    offset = t_key - t_query", "    offset = t_query - t_key", V.HINT_WINDOW_REVERSED),
        (_WINDOW, "        return distance <= window", V.HINT_WINDOW_FUTURE),
        (_WINDOW, "        return abs(distance) <= window", V.HINT_WINDOW_FUTURE),
        ("    return window_mask", "    return window_mask(0, 0, 1, 1)", V.HINT_NOT_FUNCTION),
        (_WINDOW, "        return (distance >= 0) & (distance <= 2 * window)", V.HINT_WINDOW),
        # review round 18 b: an int mask got "your mask differs ... (the line above names a
        # pair)", though the line names the dtype and the pairs are right
        (_WINDOW, "        return ((distance >= 0) & (distance <= window)).astype(int)",
         V.HINT_MASK_BOOL),
        (_WINDOW, "        return (distance >= 0) * (distance <= window) * 1.0", V.HINT_MASK_BOOL),
    ],
    "document": [
        ('side="right") - 1', 'side="left") - 1', V.HINT_DOCUMENT_EDGE),
        ('np.arange(cu[-1]), side="right") - 1', 'np.arange(1, cu[-1] + 1), side="right") - 1',
         V.HINT_DOCUMENT_EDGE),
        ("        return doc[q_idx] == doc[kv_idx]",
         "        return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)",
         V.HINT_DOCUMENT_CAUSAL),
        ("        return doc[q_idx] == doc[kv_idx]", "        return doc[q_idx] <= doc[kv_idx]",
         V.HINT_DOCUMENT),
        ("        return doc[q_idx] == doc[kv_idx]",
         "        return (doc[q_idx] == doc[kv_idx]).astype(np.int32)", V.HINT_MASK_BOOL),
    ],
    "softcap": [
        (_CAP, "        return np.tanh(score / cap)", V.HINT_SOFTCAP_OUTER),
        (_CAP, "        return cap * np.tanh(score)", V.HINT_SOFTCAP_INNER),
        (_CAP, "        return np.clip(score, -cap, cap)", V.HINT_SOFTCAP_CLIP),
        # softcap after the max: the row's max subtracted inside the score function
        (_CAP, "        return cap * np.tanh((score - score.max(axis=-1, keepdims=True)) / cap)",
         V.HINT_SOFTCAP_MAX),
        (_CAP, "        return cap * np.tanh((score - np.max(score)) / cap)", V.HINT_SOFTCAP_MAX),
        (_CAP, "        return np.exp(cap * np.tanh(score / cap))", V.HINT_SOFTCAP_PROBS),
        (_CAP, "        return score / (1 + np.abs(score) / cap)", V.HINT_SOFTCAP),
        (_GRAD, "        return 1.0 / (1 + np.abs(score) / cap) ** 2", V.HINT_GRAD),
        (_GRAD, "        return 1.0 - t", V.HINT_GRAD_SQUARE),
        (_GRAD, "        return cap * (1.0 - t * t)", V.HINT_GRAD_CAP),
        (_GRAD, "        return (1.0 - t * t) / cap", V.HINT_GRAD_CAP),
        (_GRAD, "        return cap * t", V.HINT_GRAD_OF_WHAT),
        ("        t = np.tanh(score / cap)", "        t = np.tanh(score)", V.HINT_GRAD_INNER),
        ("    return softcap_score, softcap_grad", "    return softcap_score", V.HINT_PAIR),
        # the pair returned in the other order: "your score_mod differs" (round 15, m3)
        ("    return softcap_score, softcap_grad", "    return softcap_grad, softcap_score",
         V.HINT_PAIR_ORDER),
    ],
    "build_block_mask": [
        # full and partial swapped
        ("                full_kv_indices[i, full_kv_num_blocks[i]] = j\n"
         "                full_kv_num_blocks[i] += 1\n"
         "            elif tile.any():\n"
         "                kv_indices[i, kv_num_blocks[i]] = j\n"
         "                kv_num_blocks[i] += 1",
         "                kv_indices[i, kv_num_blocks[i]] = j\n"
         "                kv_num_blocks[i] += 1\n"
         "            elif tile.any():\n"
         "                full_kv_indices[i, full_kv_num_blocks[i]] = j\n"
         "                full_kv_num_blocks[i] += 1", V.HINT_SWAPPED),
        # a ragged tile judged against the full block's area: called partial
        ("            if tile.all():", "            if tile.sum() == block_q * block_k:",
         V.HINT_RAGGED_PARTIAL),
        # an empty tile listed as partial
        ("            elif tile.any():", "            else:", V.HINT_EMPTY_LISTED),
        # a tile called full from its diagonal corners: a document boundary inside it
        ("            if tile.all():", "            if tile[0, 0] and tile[-1, -1]:",
         V.HINT_PARTIAL_AS_FULL),
        ("            if tile.all():", "            if tile.any():", V.HINT_PARTIAL_AS_FULL),
        # only the four corners evaluated
        (_TILE, "            tile = mask_tile(mask_mod, 0, 0, np.array([q0, q1 - 1]), "
                "np.array([k0, k1 - 1]))", V.HINT_SAMPLED),
        # the mask evaluated twice on each tile
        ("            if tile.all():", "            if mask_tile(mask_mod, 0, 0, "
         "np.arange(q0, q1), np.arange(k0, k1)).all():", V.HINT_TWICE),
        # ragged tiles padded to the full block: pairs past the end
        ("        q0, q1 = i * block_q, min((i + 1) * block_q, t_query)",
         "        q0, q1 = i * block_q, (i + 1) * block_q", V.HINT_PAST_END),
        ("            k0, k1 = j * block_k, min((j + 1) * block_k, t_key)",
         "            k0, k1 = j * block_k, (j + 1) * block_k", V.HINT_PAST_END),
        # the ragged last key block dropped
        ("        for j in range(n_k):", "        for j in range(t_key // block_k):",
         V.HINT_RAGGED_DROP),
        # one tile in both lists
        ("            elif tile.any():", "            if tile.any():", V.HINT_BOTH_LISTS),
        # the index written at column j, or after the count was raised: an unwritten slot
        # holds block 0 (round 7 ac, M3; HINT_BOTH_LISTS said "decide each tile once")
        ("                kv_indices[i, kv_num_blocks[i]] = j\n",
         "                kv_indices[i, j] = j\n", V.HINT_INDEX_SLOT),
        ("                kv_indices[i, kv_num_blocks[i]] = j\n"
         "                kv_num_blocks[i] += 1\n",
         "                kv_num_blocks[i] += 1\n"
         "                kv_indices[i, kv_num_blocks[i]] = j\n", V.HINT_INDEX_SLOT),
        ("                full_kv_indices[i, full_kv_num_blocks[i]] = j\n",
         "                full_kv_indices[i, j] = j\n", V.HINT_BOTH_LISTS),
        # a tile evaluated one key short: called full, its last column never evaluated
        (_TILE, "            tile = mask_tile(mask_mod, 0, 0, np.arange(q0, q1), "
                "np.arange(k0, k1 - 1))", V.HINT_SAMPLED),
        ("    return kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices",
         "    return kv_num_blocks, kv_indices", V.HINT_LAYOUT),
        # mask_tile's positions exchanged: queries past Tk read as kv_idx, and the hint was
        # "past the end ... clip each block's end" for bounds that were right (round 15, M1)
        (_TILE, "            tile = mask_tile(mask_mod, 0, 0, np.arange(k0, k1), "
                "np.arange(q0, q1))", V.HINT_TILE_ARGS),
        # the key block's keys counted with the query block size
        ("            k0, k1 = j * block_k, min((j + 1) * block_k, t_key)",
         "            k0, k1 = j * block_q, min((j + 1) * block_q, t_key)", V.HINT_BUILD),
    ],
    "flex_forward": [
        (_PARTIAL, "            if True:\n", VF.HINT_FWD_MASK_ON_FULL),
        (_PARTIAL, "            if False:\n", VF.HINT_FWD_PARTIAL_UNMASKED),
        # every key block visited, the unlisted ones as partial
        ("        visits += [(j, True) for j in kv_indices[i, :kv_num_blocks[i]]]",
         "        visits += [(j, True) for j in range(-(-t_k // block_k))\n"
         "                   if j not in full_kv_indices[i, :full_kv_num_blocks[i]]]",
         VF.HINT_FWD_EMPTY_VISITED),
        ("        visits = [(j, False) for j in full_kv_indices[i, :full_kv_num_blocks[i]]]",
         "        visits = []", VF.HINT_FWD_FULL_ONLY),
        # the partial list left out (only the full one): the generic hint before (review
        # round 16 b); the first case has no full tile, so nothing is visited there, as with
        # a NaN l (review round 18 b: an inverted alpha got "visits only one of the lists")
        ("        visits += [(j, True) for j in kv_indices[i, :kv_num_blocks[i]]]\n", "",
         VF.HINT_FWD_NOTHING),
        (_ALPHA, "            alpha = np.exp(m_safe - m)\n", VF.HINT_FWD_NOTHING),
        # review round 20 b: positions inside the tile handed to score_mod (the softcap does
        # not read them, so o was right) got "forms scores on empty tiles", and to mask_mod
        # "every row sees no key ... no block visited or l NaN"
        ("            s = score_tile(score_mod, scale * (q[q0:q1] @ k[k0:k1].T), 0, 0, rows, cols)",
         "            s = score_tile(score_mod, scale * (q[q0:q1] @ k[k0:k1].T), 0, 0, rows - q0,"
         " cols - k0)", VF.HINT_FWD_LOCAL),
        ("                s = np.where(mask_tile(mask_mod, 0, 0, rows, cols), s, -np.inf)",
         "                s = np.where(mask_tile(mask_mod, 0, 0, rows - q0, cols - k0), s,"
         " -np.inf)",
         VF.HINT_FWD_LOCAL),
        ("            s = score_tile(score_mod, scale * (q[q0:q1] @ k[k0:k1].T), 0, 0, rows, cols)",
         "            s = score_tile(score_mod, scale * (q[q0:q1] @ k[k0:k1].T), 0, 0, rows,"
         " cols - k0)", VF.HINT_FWD_LOCAL),
        # review round 20 b: -1e30 for the hidden pairs got the generic hint
        ("                s = np.where(mask_tile(mask_mod, 0, 0, rows, cols), s, -np.inf)",
         "                s = np.where(mask_tile(mask_mod, 0, 0, rows, cols), s, -1e30)",
         VF.HINT_FWD_FINITE),
        # review round 18 b: the key positions not clipped at Tk (a broadcast error on the
        # ragged last tile) got the generic "your (o, lse) differ"
        ("            k0, k1 = j * block_k, min((j + 1) * block_k, t_k)\n            cols = "
         "np.arange(k0, k1)", "            k0, k1 = j * block_k, min((j + 1) * block_k, t_k)\n"
         "            cols = np.arange(k0, k0 + block_k)", VF.HINT_FWD_RAGGED),
        # the running sums not rescaled when the max grows
        ("            alpha = np.exp(m - m_safe)", "            alpha = np.ones_like(m)",
         VF.HINT_FWD_RESCALE),
        # a crash (a float indexed as an array) is not read as a mistake: the generic hint
        ("            alpha = np.exp(m - m_safe)", "            alpha = 1.0", VF.HINT_FORWARD),
        ("acc = alpha[:, None] * acc + p @ v[k0:k1]", "acc = acc + p @ v[k0:k1]",
         VF.HINT_FWD_RESCALE_ACC),
        ("l = alpha * l + p.sum(axis=1)", "l = l + p.sum(axis=1)", VF.HINT_FWD_RESCALE_L),
        # alpha taken after the max moved: exp(0) = 1, the replayed no_rescale (round 7 ac, M1)
        (_ALPHA, "            m = m_new\n" + _ALPHA, VF.HINT_FWD_RESCALE),
        # round 15 (m4 to m8): each got the generic HINT_FORWARD, silent on lse and on NaN
        (_SCORE, "            s = scale * score_tile(score_mod, q[q0:q1] @ k[k0:k1].T, 0, 0, "
                 "rows, cols)", VF.HINT_FWD_SCALE_AFTER),
        (_SCORE, _RAW, VF.HINT_FWD_NO_SCORE),
        ("m + np.log(np.where(seen, l, 1.0))", "np.log(np.where(seen, l, 1.0))",
         VF.HINT_FWD_LSE),
        ("m + np.log(np.where(seen, l, 1.0))", "m + np.log2(np.where(seen, l, 1.0))",
         VF.HINT_FWD_LSE),
        ("        o[q0:q1] = np.where(seen[:, None], acc / np.where(seen, l, 1.0)[:, None], 0.0)",
         "        o[q0:q1] = acc / l[:, None]", VF.HINT_FWD_EMPTY_ROW),
        ("            m_safe = np.where(np.isneginf(m_new), 0.0, m_new)       # rows with "
         "nothing yet", "            m_safe = m_new", VF.HINT_FWD_STANDIN),
    ],
}
#: mistakes of two edits: score_mod moved from the scores to after the max, or to the
#: probabilities
TWO_EDITS = {
    "softcap after the max": ([(_SCORE, _RAW), (_EXP, "            p = np.exp(score_tile("
                               "score_mod, s - m_safe[:, None], 0, 0, rows, cols))")],
                              VF.HINT_FWD_AFTER_MAX),
    "softcap on probabilities": ([(_SCORE, _RAW), (_EXP, "            p = score_tile(score_mod, "
                                  "np.exp(s - m_safe[:, None]), 0, 0, rows, cols)")],
                                 VF.HINT_FWD_ON_PROBS),
    # the rescale is named whatever the order of the visits
    "acc not rescaled, tiles visited by key": (
        [("acc = alpha[:, None] * acc + p @ v[k0:k1]", "acc = acc + p @ v[k0:k1]"),
         ("        for j, partial in visits:", "        for j, partial in sorted(visits):")],
        VF.HINT_FWD_RESCALE_ACC),
    # no max subtracted at all, consistently (exp(S), alpha 1, lse = log l): exact for small
    # scores, inf / inf in the case with scores near 800 (round 7 ac, M2)
    "exp(S) unshifted, lse = log l": (
        [(_EXP, "            p = np.exp(s)"), (_ALPHA, "            alpha = np.ones_like(m)\n"),
         ("np.where(seen, m + np.log(", "np.where(seen, np.log(")], VF.HINT_FWD_OVERFLOW),
}

test_mistake_gets_its_hint = mistakes_test(LAB, CHECKS, MISTAKES, id_width=40)


test_score_mod_in_the_wrong_place_is_named = edits_mistakes_test(
    LAB, CHECKS, {key: ("flex_forward", *mistake) for key, mistake in TWO_EDITS.items()})


def test_the_rescale_hint_names_an_alpha_taken_after_the_max_moved():
    """m = m_new before alpha = exp(m - m_safe): alpha = exp(0) = 1, exactly the replayed
    missing rescale, though the code multiplies by alpha; the hint says why (round 7 ac)."""
    fn = mutate(LAB, "flex_forward", _ALPHA, "            m = m_new\n" + _ALPHA)
    result = assert_hint(VF.check_flex_forward, fn, VF.HINT_FWD_RESCALE[0])
    assert "exp(0)" in result.hint and "after m = m_new" in result.hint


def test_both_lists_hint_names_the_slot_an_index_is_written_to():
    """full_kv_indices[i, j] = j: block 0 stands in both lists though each tile is decided
    once; the hint names the write position, not only if / elif (round 7 ac, M3)."""
    fn = mutate(LAB, "build_block_mask", "                full_kv_indices[i, "
                "full_kv_num_blocks[i]] = j\n", "                full_kv_indices[i, j] = j\n")
    result = assert_hint(V.check_build_block_mask, fn, V.HINT_BOTH_LISTS[0])
    assert "never written" in result.hint


def test_at_least_ten_typical_mistakes_are_replayed():
    assert sum(len(rows) for rows in MISTAKES.values()) + len(TWO_EDITS) >= 10


#: unusual correct solutions: per-element Python, other arithmetic, another order
VARIANTS = {
    "window per element with if and chained comparisons": ("sliding_window", [(
        _WINDOW, "        if 0 <= distance <= window:\n            return True\n"
                 "        return False")]),
    "window as a distance from the middle": ("sliding_window", [(
        _WINDOW, "        return np.abs(2 * distance - window) <= window")]),
    "window with np.where": ("sliding_window", [(
        _WINDOW, "        return np.where(distance < 0, False, distance <= window)")]),
    "documents by np.repeat": ("document", [(
        '    doc = np.searchsorted(cu, np.arange(cu[-1]), side="right") - 1',
        "    doc = np.repeat(np.arange(len(cu) - 1), np.diff(cu))")]),
    "documents by counting the starts below t + 1": ("document", [(
        'np.arange(cu[-1]), side="right") - 1', 'np.arange(1, cu[-1] + 1), side="left") - 1')]),
    "documents looked up inside the mask": ("document", [(
        "        return doc[q_idx] == doc[kv_idx]",
        "        return np.searchsorted(cu, q_idx, side='right') == "
        "np.searchsorted(cu, kv_idx, side='right')")]),
    "softcap per element with math.tanh, derivative as 1 / cosh^2": ("softcap", [
        (_CAP, "        import math\n        return cap * math.tanh(score / cap)"),
        ("        t = np.tanh(score / cap)\n" + _GRAD,
         "        return 1.0 / np.cosh(score / cap) ** 2")]),
    "block mask from one row of tiles, listed in descending order": ("build_block_mask", [(
        """        for j in range(n_k):
            k0, k1 = j * block_k, min((j + 1) * block_k, t_key)
""" + _TILE, """        row = mask_tile(mask_mod, 0, 0, np.arange(q0, q1), np.arange(t_key))
        for j in reversed(range(n_k)):
            tile = row[:, j * block_k:(j + 1) * block_k]""")]),
    "block mask pair by pair, by counting": ("build_block_mask", [
        (_TILE + "\n            if tile.all():",
         "            seen = sum(bool(mask_mod(0, 0, a, c)) for a in range(q0, q1)\n"
         "                       for c in range(k0, k1))\n"
         "            if seen == (q1 - q0) * (k1 - k0):"),
        ("            elif tile.any():", "            elif seen > 0:")]),
    "block mask from broadcast calls, lists as Python lists": ("build_block_mask", [(
        _TILE, "            tile = np.broadcast_to(mask_mod(0, 0, np.arange(q0, q1)[:, None], "
               "np.arange(k0, k1)[None, :]), (q1 - q0, k1 - k0))"),
        ("    return kv_num_blocks, kv_indices, full_kv_num_blocks, full_kv_indices",
         "    return (kv_num_blocks.tolist(), kv_indices.tolist(), full_kv_num_blocks, "
         "full_kv_indices.astype(float))")]),
    "forward visiting partial blocks before full ones": ("flex_forward", [(
        "        visits = [(j, False) for j in full_kv_indices[i, :full_kv_num_blocks[i]]]\n"
        "        visits += [(j, True) for j in kv_indices[i, :kv_num_blocks[i]]]",
        "        visits = [(j, True) for j in kv_indices[i, :kv_num_blocks[i]]]\n"
        "        visits += [(j, False) for j in full_kv_indices[i, :full_kv_num_blocks[i]]]")]),
}

test_unusual_correct_solution_passes = variants_test(LAB, CHECKS, VARIANTS)


def test_the_library_masks_pass_by_design():
    """Behaviour, not provenance: returning the library's functions cannot be told apart. A
    builder that calls create_block_mask is caught, but only by the count: the library
    evaluates the two corner pairs once more (mods.check_fits' probe)."""
    assert V.check_sliding_window(library.sliding_window, verbose=False).passed
    assert V.check_document(library.document, verbose=False).passed

    def via_library(mask_mod, t_query, t_key, block_q, block_k):
        bm = create_block_mask(mask_mod, None, None, t_query, t_key, block_q, block_k)
        return (bm.kv_num_blocks[0, 0], bm.kv_indices[0, 0], bm.full_kv_num_blocks[0, 0],
                bm.full_kv_indices[0, 0])
    assert_hint(V.check_build_block_mask, via_library, V.HINT_TWICE[0])


def test_watched_mask_counts_every_pair_and_hides_pairs_past_the_end():
    mask, record = V.watched(library.causal(4, 4), 4, 4)
    out = mask(0, 0, np.arange(3, 6)[:, None], np.arange(4)[None, :])     # rows 4, 5 past
    assert out.shape == (3, 4) and not out[1:].any() and out[0].all()
    assert record["outside"] == 8 and record["grid"].sum() == 4
    assert mask(0, 0, 2, 1) is True and record["grid"][2, 1] == 1


def test_states_reader_rejects_a_block_listed_twice():
    with pytest.raises(V.ResultKindError):
        V.block_states((np.array([1]), np.array([[0, 0]]), np.array([1]), np.array([[0, 1]])),
                       4, 8, 4, 4)


def test_show_block_mask_marks_a_difference(lab, capsys):
    def empty(mask_mod, t_query, t_key, block_q, block_k):
        n_q, n_k = -(-t_query // block_q), -(-t_key // block_k)
        z = np.zeros(n_q, int)
        return z, np.zeros((n_q, n_k), int), z, np.zeros((n_q, n_k), int)
    V.show_block_mask(empty, library.causal(8, 8), 8, 8, 4, 4)
    assert "<- differs" in capsys.readouterr().out
    V.show_block_mask(lab["build_block_mask"], library.causal(8, 8), 8, 8, 4, 4)
    out = capsys.readouterr().out
    assert "+.   +." in out and "<- differs" not in out


test_no_hint_contains_a_solution_line = hint_leaks_test(V.HINTS + VF.HINTS, LAB)


def test_hint_level_two_adds_the_explicit_hint():
    fn = functions_of(LAB, replace=[(_GRAD, "        return 1.0 - t")])["softcap"]
    result = V.check_softcap(fn, verbose=False, hint_level=2)
    assert result.hint == f"{V.HINT_GRAD_SQUARE[0]}\n  More explicitly: {V.HINT_GRAD_SQUARE[1]}"


def test_every_hint_has_two_levels_and_is_used():
    """Each hint is (level 1, level 2), and each is named by some replayed mistake or test."""
    import inspect
    import re
    import sys
    source = inspect.getsource(sys.modules[__name__])
    for name, value in vars(V).items():
        if name.startswith("HINT_"):
            assert isinstance(value, tuple) and len(value) == 2 and all(value), name
            assert re.search(rf"\bV\.{name}\b", source), name


def test_a_result_of_the_wrong_kind_gets_its_second_level():
    """softcap returning one function (not the pair) is named by HINT_PAIR; at hint_level=2
    its second level was dropped (review round 18 b)."""
    fn = functions_of(LAB, replace=[("    return softcap_score, softcap_grad",
                                     "    return softcap_score")])["softcap"]
    two = V.check_softcap(fn, verbose=False, hint_level=2)
    assert not two.passed and two.hint == f"{V.HINT_PAIR[0]}\n  More explicitly: {V.HINT_PAIR[1]}"
