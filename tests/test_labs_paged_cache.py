"""Lab 11b (a paged KV cache): the solutions pass, the stubs say "not implemented", each
typical mistake (an edit of the solution) gets its own hint, unusual correct solutions pass
(another free page taken, a vectorised gather, the length updated per token), and the
checker's model of the append is the course's `PagedKVCache.append`."""

import numpy as np
import pytest

from flashcourse import paged_cache as pc
from flashcourse.labs import paged_cache as L
from labtools import (functions_of, hint_leaks_test, lab_path, lab_tests, mistakes_test,
                      variants_test)

LAB = lab_path("lab11b_paged_cache")
CHECKS = [(L.check_token_address, "my_token_address"), (L.check_gather, "my_gather"),
          (L.check_append, "my_append"), (L.check_paged_attention, "my_paged_attention")]

lab, test_solutions_pass, test_stubs_report_not_implemented = lab_tests(LAB, CHECKS)

_ADDR = "    page = int(block_table[b, t // page_size])\n    return page, t % page_size"
_COL = "        col, slot = t // ps, t % ps"
_WRITE = ("        cache.k_pages[page, :, slot] = k_new[:, i]\n"
          "        cache.v_pages[page, :, slot] = v_new[:, i]")
_TAKE = ("        if slot == 0:                                       # the token starts a page\n"
         "            page = cache.free.pop()\n"
         "            cache.refs[page] = 1\n"
         "            cache.block_table[b, col] = page\n"
         "        else:\n")
_LOOP = "    for i in range(n):\n        t = start + i\n" + _COL + "\n"
_BODY = "        t = start + i\n" + _COL + "\n        if True:\n"
#: pages taken by a count before the loop (a learner's other plan), rounded one way or the
#: other: `need` is the count the mistake computes
_COUNTED = ("    for col in range((start + ps - 1) // ps, NEED):\n"
            "        page = cache.free.pop()\n"
            "        cache.refs[page] = 1\n"
            "        cache.block_table[b, col] = page\n"
            "    for i in range(n):\n")


#: solution lines that several of the mistakes below replace
_RETURN_ADDR = "    return page, t % page_size"
_FOR_T = "    for t in range(seq_len):"
_RETURN_ROWS = "    return np.stack(rows, axis=1)"
_GATHER_ADDR = "        page, slot = my_token_address(block_table, b, t, ps)"
_SEQ_LEN = "    cache.seq_lens[b] = start + n"
_POP = "            page = cache.free.pop()"
_DECREF = "                cache.refs[page] -= 1\n"
_COUNT = "min(ps, n - i * ps)"
_SCORES = '            s = scale * np.einsum("hd,hkd->hk", q[b], k)'
_PAGES = "range((n + ps - 1) // ps)"
_PAGE_CNT = "page, cnt = block_table[b, i], min(ps, n - i * ps)"

MISTAKES = {
    "my_token_address": [
        (_ADDR, "    page = int(block_table[b, (t - 1) // page_size])\n"
                "    return page, t % page_size", L.HINT_PAGE_OFF_BY_ONE),
        (_ADDR, "    page = int(block_table[b, -(-t // page_size)])\n"
                "    return page, t % page_size", L.HINT_PAGE_ROUNDED_UP),
        (_ADDR, "    page = int(block_table[b, t // page_size + 1])\n"
                "    return page, t % page_size", L.HINT_ONE_BASED),
        (_RETURN_ADDR, "    return t % page_size, page", L.HINT_SWAPPED),
        (_ADDR, "    return int(block_table[b, t % page_size]), t // page_size", L.HINT_SWAPPED),
        (_ADDR, "    return t // page_size, t % page_size", L.HINT_NO_TABLE),
        (_RETURN_ADDR, "    return page, t - page * page_size", L.HINT_SLOT_FROM_PAGE),
        (_RETURN_ADDR, "    return page, float(t % page_size)", L.HINT_INTS),
    ],
    "my_gather": [
        (_FOR_T, "    for t in range(-(-seq_len // ps) * ps):", L.HINT_PAST_LENGTH),
        (_FOR_T, "    for t in range(seq_len + 1):", L.HINT_LENGTH_ONE_OFF),
        (_RETURN_ROWS, "    return np.stack(rows)", L.HINT_HEADS_FIRST),
        (_GATHER_ADDR, "        page, slot = my_token_address(\n"
         "            np.sort(block_table[:, :-(-seq_len // ps)], axis=1), b, t, ps)",
         L.HINT_POOL_ORDER),
        # review round 14 (m): the next row read for seq_len tokens, past its own length;
        # tokens on the last axis (both generic before)
        (_GATHER_ADDR,
         "        page, slot = my_token_address(block_table, (b + 1) % len(block_table), t, ps)",
         L.HINT_OTHER_ROW),
        (_RETURN_ROWS, "    return np.stack(rows, axis=-1)", L.HINT_TOKENS_LAST),
    ],
    "my_append": [
        (_SEQ_LEN, "    pass", L.HINT_STALE_LENGTH),
        (_SEQ_LEN, "    cache.seq_lens[b] = start + 1", L.HINT_LENGTH_UPDATE),
        ("        if slot == 0:", "        if slot == 1:", L.HINT_PAGE_LATE),
        (_COL, "        col, slot = (t - 1) // ps, t % ps", L.HINT_APPEND_BOUNDARY),
        (_POP, "            page = cache.free[-1]", L.HINT_FREE_LIST),
        (_POP, "            page = len(cache.free) - 1", L.HINT_FREE_LIST),
        ("            cache.refs[page] = 1\n", "", L.HINT_REFS),
        ("            if cache.refs[page] > 1:", "            if False:", L.HINT_COW),
        ("                cache.k_pages[new] = cache.k_pages[page]\n"
         "                cache.v_pages[new] = cache.v_pages[page]\n", "", L.HINT_COW_COPY),
        # only one of the two copied: the generic hint before (review round 14 b)
        ("                cache.k_pages[new] = cache.k_pages[page]\n", "", L.HINT_COW_COPY),
        ("                cache.v_pages[new] = cache.v_pages[page]\n", "", L.HINT_COW_COPY),
        (_DECREF, "", L.HINT_COW_DECREF),
        # refs of the shared page set to 1, right for two sharers only: it passed all five
        # cases (review round 16 b, M)
        (_DECREF, "                cache.refs[page] = 1\n", L.HINT_COW_REFS_ONE),
        # the copy made and entered, the token written into the old page (generic hint before)
        ("                cache.block_table[b, col] = new\n                page = new\n",
         "                cache.block_table[b, col] = new\n", L.HINT_COW_WRITE_OLD),
        # the copy made but the table not pointed at it: HINT_COW said "you wrote into a
        # page another sequence shares" (review round 10 b, m2)
        ("                cache.block_table[b, col] = new\n", "", L.HINT_COW_TABLE),
        (_WRITE, _WRITE.replace("[page, :, slot]", "[slot, :, page]"), L.HINT_SWAPPED_WRITE),
        # a new page one token too early or too late, when pages are taken by a count
        (_LOOP + _TAKE, _COUNTED.replace("NEED", "(start + n) // ps + 1") + _BODY,
         L.HINT_PAGE_EARLY),
        (_LOOP + _TAKE, _COUNTED.replace("NEED", "(start + n) // ps") + _BODY,
         L.HINT_PAGE_LATE),
        # positions from 0 in every call: HINT_PAGE_LATE said a token found -1 in the table,
        # though it rewrote column 0 (review round 14, M5); one short; another row's page
        ("        t = start + i", "        t = i", L.HINT_APPEND_START),
        ("    start = int(cache.seq_lens[b])", "    start = max(0, int(cache.seq_lens[b]) - 1)",
         L.HINT_APPEND_START),
        ("            page = cache.block_table[b, col]",
         "            page = cache.block_table[1 - b, col]", L.HINT_APPEND_OTHER_ROW),
    ],
    "my_paged_attention": [
        (_COUNT, "ps", L.HINT_ATT_PAST_LENGTH),
        ("            alpha = np.exp(m - m_new)", "            alpha = np.ones(h)",
         L.HINT_ATT_RESCALE),
        # alpha after m = m_new: exp(0) = 1, the output of no rescale (review round 10 b, M2)
        ("            alpha = np.exp(m - m_new)\n",
         "            m = m_new\n            alpha = np.exp(m - m_new)\n", L.HINT_ATT_RESCALE),
        (_SCORES, '            s = np.einsum("hd,hkd->hk", q[b], k)', L.HINT_ATT_SCALE),
        # review round 18 b: o kept in float32 got the generic rule, silent on precision
        ("    o = np.zeros((n_seq, h, d))", "    o = np.zeros((n_seq, h, d), np.float32)",
         (L.HINT_PRECISION, L.HINT_PRECISION_2)),
        # review round 18 b: 1 / sqrt(d) in place of the argument passed, as every case
        # passed 1 / sqrt(d)
        (_SCORES,
         '            s = np.einsum("hd,hkd->hk", q[b], k) / np.sqrt(d)', L.HINT_ATT_SCALE),
        # no running max (m stays 0): exact for moderate scores, overflows for large ones
        ("            m_new = np.maximum(m, s.max(axis=1))",
         "            m_new = np.maximum(m, 0.0)", L.HINT_ATT_OVERFLOW),
        # the rescale factor upside down, and P against the old max: e^(+inf) at the first
        # page (m = -inf); the same hint, which names both exponents (review round 8 b, M1)
        ("alpha = np.exp(m - m_new)", "alpha = np.exp(m_new - m)", L.HINT_ATT_OVERFLOW),
        ("p = np.exp(s - m_new[:, None])", "p = np.exp(s - m[:, None])", L.HINT_ATT_OVERFLOW),
        ("acc = alpha[:, None] * acc + np.einsum", "acc = acc + np.einsum",
         L.HINT_ATT_RESCALE_ACC),
        ("l = alpha * l + p.sum(axis=1)", "l = l + p.sum(axis=1)", L.HINT_ATT_RESCALE_L),
        # a sequence shorter than a page gets no page: 0 / 0, which is not an overflow
        (_PAGES, "range(n // ps)", L.HINT_ATT_FLOOR),
        (_PAGE_CNT, "page, cnt = i, min(ps, n - i * ps)", L.HINT_ATT_POOL_ORDER),
        # review round 14 (m): another row of the table; a page with no key (the generic
        # HINT_ATTENTION before)
        (_PAGE_CNT, "page, cnt = block_table[0, i], min(ps, n - i * ps)", L.HINT_ATT_OTHER_ROW),
        (_COUNT, "min(ps, n - i * ps - 1)", L.HINT_ATT_EMPTY_PAGE),
        (_PAGES, "range(n // ps + 1)", L.HINT_ATT_EMPTY_PAGE),
        # the running max started at 0, not -inf: it passed every case, whose rows all had a
        # score near 0; NaN (0 / 0) once every score of a row underflows (review round 16 b)
        ("m, l, acc = np.full(h, -np.inf)", "m, l, acc = np.zeros(h)", L.HINT_ATT_M_ZERO),
    ],
}

test_mistake_gets_its_hint = mistakes_test(LAB, CHECKS, MISTAKES, id_width=40)

#: unusual correct solutions
VARIANTS = {
    "address by divmod": ("my_token_address", [(
        _ADDR, "    col, slot = divmod(t, page_size)\n"
               "    return int(block_table[b][col]), int(slot)")]),
    # review round 20 b: an array of the two ints got "Return two whole numbers"
    "address as an array of two ints": ("my_token_address", [(
        _ADDR, "    return np.array([block_table[b, t // page_size], t % page_size])")]),
    "gather vectorised": ("my_gather", [(
        "    rows = []\n    for t in range(seq_len):\n"
        "        page, slot = my_token_address(block_table, b, t, ps)\n"
        "        rows.append(pages[page, :, slot])                   # (Hkv, d)\n"
        "    return np.stack(rows, axis=1)",
        "    t = np.arange(seq_len)\n"
        "    return pages[block_table[b, t // ps], :, t % ps].transpose(1, 0, 2)")]),
    "append: pages from the front of the free list, length per token": ("my_append", [
        ("page = cache.free.pop()", "page = cache.free.pop(0)"),
        ("new = cache.free.pop()", "new = cache.free.pop(0)"),
        ("        cache.v_pages[page, :, slot] = v_new[:, i]\n    cache.seq_lens[b] = start + n",
         "        cache.v_pages[page, :, slot] = v_new[:, i]\n        cache.seq_lens[b] += 1")]),
}

test_valid_variant_passes = variants_test(LAB, CHECKS, VARIANTS)


def test_the_checker_model_is_the_course_append():
    """The replay without a mistake leaves exactly the state `PagedKVCache.append` does,
    in every case (pages handed out in the same order, the same copies)."""
    for _, ps, num_pages, hkv, d, ops in L.APPEND_CASES:
        seqs = max([2] + [max(a, x) + 1 if what == "fork" else a + 1 for what, a, x in ops])
        course = pc.PagedKVCache(num_pages, hkv, ps, d, seqs, 8)
        for n_op, (what, a, x) in enumerate(ops):
            if what == "fork":
                course.fork(a, x)
            else:
                course.append(a, *L._tokens(n_op, hkv, x, d))
        mine = L._play(ops, ps, num_pages, hkv, d, L._append)
        assert mine["error"] is None and mine["free"] == course.free
        assert mine["seq_lens"] == course.seq_lens.tolist()
        for key, arr in (("table", course.block_table), ("refs", course.refs),
                         ("k", course.k_pages), ("v", course.v_pages)):
            assert np.array_equal(mine[key], arr), key


def test_every_case_can_see_its_mistakes():
    """Each append mistake changes what at least one case's cache holds (so it is named),
    and the course's own append cannot be called from my_append."""
    for mistake, _ in L.APPEND_MISTAKES:
        seen = []
        for _, ps, num_pages, hkv, d, ops in L.APPEND_CASES:
            want = L._play(ops, ps, num_pages, hkv, d, L._append)
            wrong = L._play(ops, ps, num_pages, hkv, d,
                            lambda c, b, k, v, m=mistake: L._append(c, b, k, v, m))
            seen.append(L._problem(wrong, want)[0] is not None)
        assert any(seen), mistake
    cache = L.LabCache(4, 1, 16, 1, 1, 2)
    with pytest.raises(RuntimeError, match="must write the tokens itself"):
        cache.append(0, np.zeros((1, 1, 1)), np.zeros((1, 1, 1)))


test_no_hint_contains_a_solution_line = hint_leaks_test(L.HINTS, LAB)


def test_the_overflow_hint_names_every_exponent_that_can_be_positive():
    """A non-finite result gets HINT_ATT_OVERFLOW from three mistakes: no running max, P
    against the old max, the rescale factor upside down; the hint must be true of each, so
    it names both exponents and their sign (review round 8 b, M1)."""
    text = L.HINT_ATT_OVERFLOW[0]
    assert "exp(s - m_new)" in text and "exp(m_old - m_new)" in text
    assert "old minus new" in text and "-inf" in text


def test_the_rescale_hint_names_an_alpha_taken_after_the_max_moved():
    """Review round 10 b, M2: alpha = exp(m - m_new) taken after m = m_new is exp(0) = 1,
    the output of no rescale at all; HINT_ATT_RESCALE ("No rescale") must say why a code
    that multiplies by alpha gets it."""
    assert "exp(0)" in L.HINT_ATT_RESCALE[0] and "before m = m_new" in L.HINT_ATT_RESCALE[1]


def test_a_result_of_the_wrong_kind_gets_its_second_level():
    """A slot returned as a float is named by HINT_INTS; at hint_level=2 its second level
    was dropped (review round 18 b)."""
    fn = functions_of(LAB, replace=[(_RETURN_ADDR,
                                     "    return page, float(t % page_size)")])["my_token_address"]
    two = L.check_token_address(fn, verbose=False, hint_level=2)
    assert not two.passed and two.hint == f"{L.HINT_INTS[0]}\n  More explicitly: {L.HINT_INTS[1]}"
