"""Lab 03 (tiled forward): solutions pass, stubs report "not implemented", typical mistakes get
their own hint, and no hint contains a line of the solution."""

import numpy as np

import pytest

from flashcourse import reference
from flashcourse.labs import _harness as H
from flashcourse.labs import tiled_forward as L
from labtools import (edits_mistakes_test, functions_of, hint_leaks_test, lab_path, lab_tests,
                      mistakes_test, mutate)

LAB = lab_path("lab03_tiled_forward")


CHECKS = ((L.check_flash_forward, "flash_forward"), (L.check_fa1_forward, "fa1_forward"),
          (L.check_merge_partials, "merge_partials"))
lab, test_solutions_pass, test_stubs_report_not_implemented = lab_tests(LAB, CHECKS)


def test_solution_agrees_with_the_library_on_irregular_causal_inputs(lab):
    """float64 against the reference at rtol 1e-10, Tq != Tk, odd d, several tile shapes."""
    from flashcourse import reference
    rng = np.random.default_rng(5)
    for tq, tk, d, br, bc in ((31, 45, 7, 8, 6), (45, 31, 5, 16, 3), (1, 9, 3, 4, 4)):
        q, k, v = (rng.standard_normal((t, d)) for t in (tq, tk, tk))
        for causal in (False, True):
            want = reference.attention(q, k, v, causal=causal, scale=0.3)
            for fn in (lab["flash_forward"],):
                o, lse = fn(q, k, v, causal, 0.3, br, bc)
                np.testing.assert_allclose(o, want[0], rtol=1e-10, atol=1e-12)
                np.testing.assert_allclose(lse, want[1], rtol=1e-10, atol=1e-12)


#: solution lines that several of the mistakes below replace
_ALPHA = "alpha = np.exp(m - m_use)"
_MASK = "s = np.where(cols <= rows + offset, s, -np.inf)"
_L_UPDATE = "l = alpha * l + p.sum(axis=1)"
_ACC_UPDATE = "acc = alpha[:, None] * acc + p @ v_j"
_M_NEW = "m_new = np.maximum(m, s.max(axis=1))"
_OFFSET = "offset = t_k - t_q "
_LSE = "m[seen] + np.log(l[seen])"
_SCORES = "s = scale * (q_i @ k_j.T)"
_K_END = "k_end = max(0, min(t_k, q1 + offset))"
_K1 = "k1 = min(k0 + block_k, t_k)"
_P = "p = np.exp(s - m_use[:, None])"
_RETURN = "    return o, lse"
_FA1_SKIP = "if causal and k0 > q1 - 1 + offset:"
_MERGE_O = "o = w_a[:, None] * o_a + w_b[:, None] * o_b"
_MERGE_STANDIN = "lse_use = np.where(np.isneginf(lse), 0.0, lse)"

#: function: [(solution text, the mistake that replaces it, the hint it must get), ...]
MISTAKES = {"flash_forward": [
    (_ALPHA, "alpha = np.ones_like(m)", L.HINT_RESCALE),
    # review round 16 a (m): hidden scores 0, the stand-in from the old max, alpha applied
    # after the tile was added: each got HINT_FORWARD
    (_MASK, "s = np.where(cols <= rows + offset, s, 0.0)", L.HINT_MASK_ZERO),
    ("m_use = np.where(np.isneginf(m_new), 0.0, m_new)",
     "m_use = np.where(np.isneginf(m), 0.0, m_new)", L.HINT_STANDIN_OLD),
    (_L_UPDATE, "l = alpha * (l + p.sum(axis=1))", L.HINT_RESCALE_AFTER),
    (_ACC_UPDATE, "acc = alpha[:, None] * (acc + p @ v_j)", L.HINT_RESCALE_AFTER),
    (_M_NEW, "m_new = s.max(axis=1)", L.HINT_MAX),
    # review round 17 a (M): one max for the whole block passed every case; acc / l taken
    # for the rows with l = 0 got the stand-in's hint (-inf - (-inf)), not the finalisation
    (_M_NEW, "m_new = np.maximum(m, s.max())", L.HINT_BLOCK_MAX),
    ("seen = l > 0 ", "seen = l >= 0 ", L.HINT_FINALISE_EMPTY),
    ("o[q0:q1][seen] = acc[seen] / l[seen, None]", "o[q0:q1] = acc / l[:, None]",
     L.HINT_FINALISE_EMPTY),
    (_OFFSET, "offset = 0 ", L.HINT_TOP_LEFT),
    (_MASK, "pass", L.HINT_NO_MASK),
    ("acc[seen] / l[seen, None]", "acc[seen]", L.HINT_DIVIDE),
    (_LSE, "np.log(l[seen])", L.HINT_LSE),
    (_SCORES, "s = (q_i @ k_j.T) / np.sqrt(d)", L.HINT_SCALE),
    (_K_END, "k_end = t_k", L.HINT_NO_SKIP),
    (_K_END, "k_end = max(0, min(t_k, q0 + offset))", L.HINT_SKIP_TOO_MUCH),
    (_L_UPDATE, "l = l + p.sum(axis=1)", L.HINT_RESCALE_L),
    (_ACC_UPDATE, "acc = acc + p @ v_j", L.HINT_RESCALE_ACC),
    ("        k_end = t_k\n", "        k_end = t_k // block_k * block_k\n", L.HINT_RAGGED_DROP),
    (_K1, "k1 = min(k0 + block_k, t_k - 1)", L.HINT_RAGGED_OFF_BY_ONE),
    (_LSE, "(m[seen] + np.log(l[seen])) / np.log(2)", L.HINT_LSE_BASE2),
    (_LSE, "m[seen] + np.log2(l[seen])", L.HINT_LSE_LOG2),
    (_K_END, "k_end = max(0, min(t_k, q1 + offset - 1))", L.HINT_K_END_SHORT),
    (_MASK, "s = np.where(cols < rows + offset, s, -np.inf)", L.HINT_DIAGONAL),
    (_SCORES, "s = q_i @ k_j.T", L.HINT_NO_SCALE),
    (_P, "p = np.exp2(s - m_use[:, None])", L.HINT_P_BASE2),
    (_M_NEW, "m_new = np.maximum(m, s.max(axis=0))", L.HINT_AXIS),
    (_L_UPDATE, "l = alpha * l + p.sum(axis=0)", L.HINT_AXIS),
    (_K1, "k1 = k0 + block_k", L.HINT_RAGGED_UNCLIPPED),
    # review round 5 ac, M2: m, l, acc sized Br beside the last 5 rows, (8,) with (5,)
    ("q1 = min(q0 + block_q, t_q)", "q1 = q0 + block_q", L.HINT_RAGGED_Q_UNCLIPPED),
    # review round 5 ac, M4: overflow in the large-score case looked like a dropped block
    (_P, "p = np.exp(s) / np.exp(m_use[:, None])", L.HINT_OVERFLOW),
    (_ALPHA, "alpha = np.exp(m) / np.exp(m_use)", L.HINT_OVERFLOW),
    # review round 14: the offset's sign, in both places or in the mask only; k_end = q1
    (_OFFSET, "offset = t_q - t_k ", L.HINT_OFFSET_SIGN),
    (_MASK, "s = np.where(cols <= rows - offset, s, -np.inf)", L.HINT_OFFSET_SIGN),
    (_K_END, "k_end = max(0, min(t_k, q1))", L.HINT_K_END_NO_OFFSET),
    ("o, lse = np.zeros((t_q, d)),", "o, lse = np.zeros((t_q, d), np.float32),",
     (H.HINT_PRECISION,)),
    (_RETURN, "    return o, lse[:, None]", (H.HINT_SHAPE,)),
    # review round 20 a (m): (lse, o) for (o, lse) got HINT_SHAPE's usual causes
    (_RETURN, "    return lse, o", (H.HINT_ORDER,)),
    # round 18 (mutants): a running max started at 0 passed (no row had every score far
    # below 0); -1e9 for hidden scores got HINT_FORWARD
    ("m = np.full(q1 - q0, -np.inf)", "m = np.zeros(q1 - q0)", L.HINT_INIT_MAX),
    (_MASK, "s = np.where(cols <= rows + offset, s, -1e9)", L.HINT_MASK_FINITE),
    (_MASK, "s = np.where(cols <= rows + offset, s, np.finfo(float).min)", L.HINT_MASK_FINITE),
    (_ALPHA, "alpha = np.exp(m_use - m)", L.HINT_ALPHA_INVERTED),
], "fa1_forward": [
    ('            counter.write("O", (q1 - q0) * d)\n', "", L.HINT_FA1_TRAFFIC),
    ('    counter.write("O", t_q * d)\n    counter.write("l", t_q, kind="stat")\n'
     '    counter.write("m", t_q, kind="stat")\n', "", L.HINT_FA1_INIT),
    ('counter.read("l", q1 - q0, kind="stat")', 'counter.read("l", q1 - q0)',
     L.HINT_FA1_STAT_KIND),
    ('counter.write("m", q1 - q0, kind="stat")', 'counter.write("m", q1 - q0)',
     L.HINT_FA1_STAT_KIND),
    (_FA1_SKIP, "if causal and k0 > q1 + offset:", L.HINT_FA1_SKIP_EDGE),
    ("a_old * l_i)[:, None] * o[q0:q1]", "a_old)[:, None] * o[q0:q1]", L.HINT_FA1_MATH),
    (_FA1_SKIP, "if False:", L.HINT_FA1_NO_SKIP),
    # review round 17 a (M): the division by l_new = 0 passed (no block mixed rows with and
    # without keys); skipping tiles a row sees got HINT_FA1_MATH (the normalisation)
    ("l_div = np.where(l_new > 0, l_new, 1.0)[:, None]", "l_div = l_new[:, None]",
     L.HINT_FA1_DIVIDE_EMPTY),
    (_FA1_SKIP, "if causal and k0 > q0 + offset:", L.HINT_FA1_SKIP_VISIBLE),
    (_FA1_SKIP, "if causal and k0 >= q1 - 1 + offset:", L.HINT_FA1_SKIP_VISIBLE),
    # review round 14: the mask and lse slips of the FA2 order, named in FA1 too (they got
    # HINT_FA1_MATH, on O_i kept normalised)
    ("lse = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)",
     "lse = np.where(seen, m + np.log2(np.where(seen, l, 1.0)), -np.inf)", L.HINT_LSE_LOG2),
    ("    offset = t_k - t_q\n    o, l, m", "    offset = t_q - t_k\n    o, l, m",
     L.HINT_OFFSET_SIGN),
    # round 18 (mutants): m = 0 in outer memory passed; -1e9 for hidden scores got
    # HINT_FA1_MATH
    ("np.zeros(t_q), np.full(t_q, -np.inf)   # outer memory",
     "np.zeros(t_q), np.zeros(t_q)   # outer memory", L.HINT_INIT_MAX),
    ("s = np.where(cols <= rows + offset, s, -np.inf)\n            m_t",
     "s = np.where(cols <= rows + offset, s, -1e9)\n            m_t", L.HINT_MASK_FINITE),
], "merge_partials": [
    (_MERGE_O, "o = (o_a + o_b) / 2", L.HINT_MERGE_AVERAGE),
    ("lse = np.logaddexp(lse_a, lse_b)", "lse = lse_a + lse_b", L.HINT_MERGE_LSE),
    (_MERGE_STANDIN, "lse_use = lse", L.HINT_MERGE_EMPTY),
    # review round 14, M6: a stand-in tested on lse_a passed (no row had part a empty and
    # part b not); one tested on lse_b got the generic HINT_MERGE
    (_MERGE_STANDIN, "lse_use = np.where(np.isneginf(lse_a), 0.0, lse)", L.HINT_MERGE_STANDIN),
    (_MERGE_STANDIN, "lse_use = np.where(np.isneginf(lse_b), 0.0, lse)", L.HINT_MERGE_STANDIN),
    # round 18 (mutants): o_a overwritten in place passed (every case passes copies)
    (_MERGE_O,
     "o_a *= w_a[:, None]\n    o_a += w_b[:, None] * o_b\n    o = o_a", L.HINT_INPUTS_CHANGED),
]}
test_mistakes_get_their_hint = mistakes_test(LAB, CHECKS, MISTAKES)

#: round 18 (mutants): the mask applied to P after the exponential (the max still over every
#: score) passed in both orders: no hidden score lay far above the visible ones
MASK_ON_P = {
    "flash_forward": ("flash_forward", [
        ("                s = np.where(cols <= rows + offset, s, -np.inf)\n            ### END",
         "                hide = cols > rows + offset\n            ### END"),
        ("p = np.exp(s - m_use[:, None])                      # (Br, Bc)",
         "p = np.exp(s - m_use[:, None])\n"
         "            p = np.where(hide, 0.0, p) if causal else p")],
        L.HINT_MASK_P),
    "fa1_forward": ("fa1_forward", [
        ("                s = np.where(cols <= rows + offset, s, -np.inf)\n            m_t",
         "                hide = cols > rows + offset\n            m_t"),
        ("            l_t = p.sum(axis=1) ",
         "            p = np.where(hide, 0.0, p) if causal else p\n"
         "            l_t = p.sum(axis=1) ")],
        L.HINT_MASK_P),
    # round 18 (mutants): q scaled in place (the scale then left out of S) passed
    "q_in_place": ("flash_forward", [
        ("    offset = t_k - t_q                                          # bottom-right alignment",
         "    q *= scale\n    offset = t_k - t_q"),
        (_SCORES, "s = q_i @ k_j.T")], L.HINT_INPUTS_CHANGED)}
test_mask_on_p_is_named = edits_mistakes_test(LAB, CHECKS, MASK_ON_P)
test_no_hint_contains_a_solution_line = hint_leaks_test(L.ALL_HINTS, LAB)


def test_hint_level_two_is_more_explicit():
    fn = mutate(LAB, "flash_forward", "alpha = np.exp(m - m_use)", "alpha = np.ones_like(m)")
    result = L.check_flash_forward(fn, verbose=False, hint_level=2)
    assert L.HINT_RESCALE[0] in result.hint and L.HINT_RESCALE[1] in result.hint


def test_rescale_hint_names_an_alpha_taken_after_the_max_moved():
    """Review round 14, M2: `m = m_new` before alpha makes alpha exp(0) = 1, the replayed
    missing rescale exactly, though the code multiplies l and acc by alpha."""
    fn = mutate(LAB, "flash_forward", "p = np.exp(s - m_use[:, None])",
                "p = np.exp(s - m_use[:, None]); m = m_new")
    result = L.check_flash_forward(fn, verbose=False)
    assert result.hint == L.HINT_RESCALE[0]
    assert "alpha is 1" in result.hint and "after m = m_new" in result.hint


def test_a_last_key_tile_cut_at_the_visible_keys_passes():
    """Review round 14, M3: k1 clipped to k_end loads fewer key rows than whole tiles, skips
    nothing the block sees, and gives the right values: it passes (it was told it skips
    visible tiles). A loop that does skip visible tiles still fails on the values."""
    fn = mutate(LAB, "flash_forward", "k1 = min(k0 + block_k, t_k)",
                "k1 = min(k0 + block_k, k_end)")
    assert L.check_flash_forward(fn, verbose=False).passed


def test_fa1_kv_loaded_per_tile_is_named():
    def per_tile(q, k, v, causal, scale, block_q, block_k, counter):
        inner = functions_of(LAB)["fa1_forward"]
        o, lse = inner(q, k, v, causal, scale, block_q, block_k, counter)
        t_q, d = q.shape
        t_k = k.shape[0]
        for k0 in range(0, t_k, block_k):                      # K, V once per visible tile
            k1 = min(k0 + block_k, t_k)
            visible = sum(1 for q0 in range(0, t_q, block_q)
                          if not (causal and k0 > min(q0 + block_q, t_q) - 1 + t_k - t_q))
            counter.read("K", (visible - 1) * (k1 - k0) * d)
            counter.read("V", (visible - 1) * (k1 - k0) * d)
        return o, lse
    result = L.check_fa1_forward(per_tile, verbose=False)
    assert result.hint == L.HINT_FA1_KV_PER_TILE[0]


def no_online_softmax(q, k, v, causal, scale, block_q, block_k):
    """Per query block: the key tiles' scores concatenated, ONE softmax over the whole row,
    one P V. Right numbers, and it loads K by tiles, but it holds a Br x Tk block."""
    t_q, d = q.shape
    t_k = k.shape[0]
    offset = t_k - t_q
    o, lse = np.zeros((t_q, d)), np.full(t_q, -np.inf)
    for q0 in range(0, t_q, block_q):
        q1 = min(q0 + block_q, t_q)
        k_end = max(0, min(t_k, q1 + offset)) if causal else t_k
        tiles = []
        for k0 in range(0, k_end, block_k):
            k1 = min(k0 + block_k, t_k)
            s = scale * (q[q0:q1] @ k[k0:k1].T)
            if causal:
                s = np.where(np.arange(k0, k1)[None] <= np.arange(q0, q1)[:, None] + offset,
                             s, -np.inf)
            tiles.append(s)
        if not tiles:
            continue
        s = np.concatenate(tiles, axis=1)                       # (Br, k_end): the whole row
        m = s.max(axis=1)
        m_use = np.where(np.isneginf(m), 0.0, m)
        p = np.exp(s - m_use[:, None])
        l = p.sum(axis=1)
        seen = l > 0
        o[q0:q1][seen] = (p @ v[:s.shape[1]])[seen] / l[seen, None]
        lse[q0:q1][seen] = m_use[seen] + np.log(l[seen])
    return o, lse


def test_a_forward_without_online_softmax_fails_on_what_it_holds():
    with np.errstate(all="ignore"):
        result = L.check_flash_forward(no_online_softmax, verbose=False)
    assert not result.passed and result.hint == L.HINT_HELD[0]
    assert "largest temporary" in result.case and "2,097,152 B" in result.detail


#: debug prints a learner adds to a correct forward (they build lists and text, not arrays)
DEBUG_PRINTS = {
    "tolist": "    print(k.tolist())\n",
    "arrays": "    print(q)\n    print(k, v.shape)\n",
    "f-string": "    note = f'{q} {k!r} {v:}'\n    print(note[:40], str(k)[:10], repr(v)[:10])\n",
    "inner-loop": "            print(k0, k_j.tolist(), f'{m}')\n",
}


@pytest.mark.parametrize("debug", list(DEBUG_PRINTS.values()), ids=list(DEBUG_PRINTS))
def test_a_correct_forward_that_prints_passes(debug):
    """The held-memory check leaves out what printing builds (issue 50): a correct forward
    with debug prints passes."""
    inner = debug.startswith("            ")
    anchor = "            m = m_new\n" if inner else "    offset = t_k - t_q "
    fn = mutate(LAB, "flash_forward", anchor, anchor + debug if inner else debug + anchor)
    result = L.check_flash_forward(fn, verbose=False)
    assert result.passed, (result.case, result.detail)


def test_a_printing_forward_that_holds_the_scores_still_fails():
    def chatty(q, k, v, *rest):
        print(k.tolist())
        return no_online_softmax(q, k, v, *rest)
    with np.errstate(all="ignore"):
        result = L.check_flash_forward(chatty, verbose=False)
    assert result.hint == L.HINT_HELD[0] and "2,097,152 B" in result.detail


def test_calling_the_dense_reference_is_named_as_holding_the_score_matrix():
    def dense(q, k, v, causal, scale, block_q, block_k):
        return reference.attention(q, k, v, causal=causal, scale=scale)
    result = L.check_flash_forward(dense, verbose=False)
    assert not result.passed and result.hint == L.HINT_HELD[0]


@pytest.mark.parametrize("convert", [
    lambda x: np.asarray(x), lambda x: np.asarray(x, dtype=np.float64),
    lambda x: x.astype(np.float64), lambda x: np.array(x), lambda x: x.copy(),
    lambda x: x[:], lambda x: np.ascontiguousarray(x)],
    ids=["asarray", "asarray-f64", "astype", "array", "copy", "view", "contiguous"])
def test_a_correct_forward_that_converts_its_inputs_passes(lab, convert):
    fn = lab["flash_forward"]
    result = L.check_flash_forward(
        lambda q, k, v, *rest: fn(convert(q), convert(k), convert(v), *rest), verbose=False)
    assert result.passed, (result.case, result.detail)


def test_no_skipping_is_caught_after_converting_the_inputs():
    fn = mutate(LAB, "flash_forward", "k_end = max(0, min(t_k, q1 + offset))", "k_end = t_k")
    result = L.check_flash_forward(
        lambda q, k, v, *rest: fn(np.asarray(q), np.asarray(k), np.asarray(v), *rest),
        verbose=False)
    assert result.hint == L.HINT_NO_SKIP[0] and "NaN" in result.case


def test_the_ragged_last_query_block_dropped_is_named():
    def drop(q, k, v, causal, scale, block_q, block_k):
        return L.replay(q, k, v, causal, scale, block_q, block_k, "q_ragged_drop")
    assert L.check_flash_forward(drop, verbose=False).hint == L.HINT_RAGGED_Q[0]


def test_outputs_are_named_o_and_lse():
    fn = mutate(LAB, "flash_forward", "m[seen] + np.log(l[seen])", "np.log(l[seen])")
    result = L.check_flash_forward(fn, verbose=False)
    assert result.detail.startswith("lse: ")
    fn = mutate(LAB, "flash_forward", "    return o, lse", "    return o, lse[:, None]")
    detail = L.check_flash_forward(fn, verbose=False).detail
    assert detail.startswith("lse: shape (37, 1), expected (37,)")


def test_float32_output_names_the_dtype_and_the_tolerance():
    fn = mutate(LAB, "flash_forward", "o, lse = np.zeros((t_q, d)),",
                "o, lse = np.zeros((t_q, d), np.float32),")
    result = L.check_flash_forward(fn, verbose=False)
    assert "float32" in result.detail and "rtol 1e-09" in result.detail


def test_fa1_count_tile_by_tile_is_the_model():
    """The tile-by-tile count that replays a wrong skip test equals the FA1 model."""
    for shape in [(19, 14, 3, 5, 4, False), (12, 20, 2, 4, 6, True), (21, 9, 3, 4, 3, True),
                  (9, 9, 2, 1, 1, True), (5, 50, 3, 7, 3, True)]:
        assert L.fa1_count(*shape) == L.fa1_model(*shape)


def test_a_crash_is_named_only_by_the_shapes_of_its_mistake():
    """A broadcast error pairing (Br,) with (Bc,) names the axis; one pairing a full key tile
    with the ragged one names the clipping; any other crash keeps the generic hint."""
    def crashing(message):
        def fn(*args):
            raise ValueError(message)
        return fn
    tiles = "operands could not be broadcast together with shapes "
    # the first case: Tq = 37, Tk = 29, Br = 8, Bc = 6 (last key tile 5 wide)
    for message, hint in [(tiles + "(8,) (6,) ", L.HINT_AXIS),
                          (tiles + "(8,6) (8,5) () ", L.HINT_RAGGED_UNCLIPPED),
                          (tiles + "(8,) (5,) ", L.HINT_RAGGED_Q_UNCLIPPED),
                          (tiles + "(5,) (6,) ", L.HINT_AXIS),
                          (tiles + "(8,) (8,3) ", L.HINT_FORWARD),
                          (tiles + "(8,) (7,) ", L.HINT_FORWARD),
                          ("shapes (8,) (6,) not aligned", L.HINT_FORWARD)]:
        result = L.check_flash_forward(crashing(message), verbose=False)
        assert not result.passed and result.hint == hint[0], message


def test_what_you_built_says_which_order_moves_fewer_by_budget():
    """Review round 16 a, M: the closing text said "with the paper's block sizes FA1 moves
    fewer", while notebook 04's table has FA1 moving more at 16 and 32 KiB (3.13 against 2 GiB
    at 16 KiB). The numbers it quotes are the model's."""
    import nbformat

    from flashcourse.memory import binary_size
    from flashcourse.traffic import paper_block_sizes, tiled_traffic
    text = " ".join(c.source for c in nbformat.read(LAB, as_version=4).cells
                    if c.cell_type == "markdown" and "## What you built" in c.source)
    text = " ".join(text.split())
    totals = {}
    for kib in (16, 64):
        br, bc = paper_block_sizes(kib * 1024, 64, 2)
        totals[kib] = [binary_size(tiled_traffic(16384, 16384, 64, br, bc, loop_order=o,
                                                 bytes_per_element=2).total_bytes)
                       for o in ("fa1", "fa2")]
    assert totals == {16: ["3.13 GiB", "2 GiB"], 64: ["806.12 MiB", "1 GiB"]}
    assert "*more* at the small ones" in text
    assert "806 MiB against 1 GiB at 64 KiB" in text and "3.13 GiB against 2 GiB at 16 KiB" in text
