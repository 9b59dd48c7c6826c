"""Lab 03 (tiled forward): solutions pass, stubs report "not implemented", typical mistakes get
their own hint, and no hint contains a line of the solution."""

import numpy as np

from flashcourse.labs import tiled_forward as L
from labtools import functions_of, hint_leaks_test, lab_path, lab_tests, mistakes_test, mutate

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


#: function: [(solution text, the mistake that replaces it, the hint it must get), ...]
MISTAKES = {"flash_forward": [
    ("alpha = np.exp(m - m_use)", "alpha = np.ones_like(m)", L.HINT_RESCALE),
    ("m_new = np.maximum(m, s.max(axis=1))", "m_new = s.max(axis=1)", L.HINT_MAX),
    ("offset = t_k - t_q ", "offset = 0 ", L.HINT_TOP_LEFT),
    ("s = np.where(cols <= rows + offset, s, -np.inf)", "pass", L.HINT_NO_MASK),
    ("acc[seen] / l[seen, None]", "acc[seen]", L.HINT_DIVIDE),
    ("m[seen] + np.log(l[seen])", "np.log(l[seen])", L.HINT_LSE),
    ("s = scale * (q_i @ k_j.T)", "s = (q_i @ k_j.T) / np.sqrt(d)", L.HINT_SCALE),
    ("k_end = max(0, min(t_k, q1 + offset))", "k_end = t_k", L.HINT_NO_SKIP),
    ("k_end = max(0, min(t_k, q1 + offset))", "k_end = max(0, min(t_k, q0 + offset))",
     L.HINT_SKIP_TOO_MUCH),
], "fa1_forward": [
    ('            counter.write("O", (q1 - q0) * d)\n', "", L.HINT_FA1_TRAFFIC),
    ('    counter.write("O", t_q * d)\n    counter.write("l", t_q, kind="stat")\n'
     '    counter.write("m", t_q, kind="stat")\n', "", L.HINT_FA1_INIT),
    ('counter.read("l", q1 - q0, kind="stat")', 'counter.read("l", q1 - q0)',
     L.HINT_FA1_TRAFFIC),
    ("a_old * l_i)[:, None] * o[q0:q1]", "a_old)[:, None] * o[q0:q1]", L.HINT_FA1_MATH),
    ("if causal and k0 > q1 - 1 + offset:", "if False:", L.HINT_FA1_NO_SKIP),
], "merge_partials": [
    ("o = w_a[:, None] * o_a + w_b[:, None] * o_b", "o = (o_a + o_b) / 2", L.HINT_MERGE_AVERAGE),
    ("lse = np.logaddexp(lse_a, lse_b)", "lse = lse_a + lse_b", L.HINT_MERGE_LSE),
    ("lse_use = np.where(np.isneginf(lse), 0.0, lse)", "lse_use = lse", L.HINT_MERGE_EMPTY),
]}
test_mistakes_get_their_hint = mistakes_test(LAB, CHECKS, MISTAKES)
test_no_hint_contains_a_solution_line = hint_leaks_test(L.ALL_HINTS, LAB)


def test_hint_level_two_is_more_explicit():
    fn = mutate(LAB, "flash_forward", "alpha = np.exp(m - m_use)", "alpha = np.ones_like(m)")
    result = L.check_flash_forward(fn, verbose=False, hint_level=2)
    assert L.HINT_RESCALE[0] in result.hint and L.HINT_RESCALE[1] in result.hint


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
