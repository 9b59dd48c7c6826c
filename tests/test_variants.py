"""flashcourse.variants: every built-in through the float64 reference, the tiled numpy path
and the Numba CPU kernel, forward and backward, on ragged shapes (Tq != Tk, tiles that do
not divide them, odd d), with GQA and sinks.

Tolerances (tests/helpers.TOL and CONTRIBUTING): forward float64 1e-12, float32 1e-5
relative (helpers.assert_close_to_reference); gradients float64 1e-10, float32 1e-4
relative to the gradient's norm; finite differences 1e-6 (central differences, step 1e-6).
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flashcourse import reference as dense_reference
from flashcourse.geometry import causal_mask
from flashcourse.variants import cpu, library as lib, mods, reference as ref, tiled
from flashcourse.variants.block_mask import create_block_mask
from helpers import TOL, assert_close_to_reference, rel_err

B, HQ, HKV, TQ, TK = 2, 4, 2, 37, 45
BR, BC = 8, 16
GRAD_TOL = {np.float64: 1e-10, np.float32: 1e-4}


def make(rng, d, dtype=np.float64, tq=TQ, tk=TK, hkv=HKV, spread=1.0):
    q = (rng.standard_normal((B, HQ, tq, d)) * spread).astype(dtype)
    k = (rng.standard_normal((B, hkv, tk, d)) * spread).astype(dtype)
    v = rng.standard_normal((B, hkv, tk, d)).astype(dtype)
    return q, k, v


def variants(tq=TQ, tk=TK):
    """name -> (mask_mod, score_mod): every built-in, for (Tq, Tk)."""
    cu = [0, 5, 6, 20, tq]
    return {
        "none": (None, None),
        "causal-bottom-right": (lib.causal(tq, tk), None),
        "causal-top-left": (lib.causal(align="top-left"), None),
        "window-left": (lib.sliding_window(7, tq, tk), None),
        "window-symmetric": (lib.sliding_window(4, tq, tk, symmetric=True), None),
        "document-causal": (mods.and_masks(lib.document(cu, [0, 9, 10, 30, tk]),
                                           lib.causal(tq, tk)), None),
        "prefix-lm": (lib.prefix_lm(6, tq, tk), None),
        "block-sparse": (lib.random_block_sparse(tq, tk, BR, BC, density=0.4, seed=3), None),
        "alibi-causal": (lib.causal(tq, tk), lib.alibi(lib.alibi_slopes(HQ))),
        "softcap": (None, lib.softcap(1.5)),
        "softcap-window": (lib.sliding_window(9, tq, tk), lib.softcap(2.0)),
    }


def block(mask_mod, tq=TQ, tk=TK, br=BR, bc=BC):
    return None if mask_mod is None else create_block_mask(mask_mod, None, None, tq, tk,
                                                           br, bc)


# ---------------------------------------------------------------------------
# the reference against independent formulas
# ---------------------------------------------------------------------------

def test_reference_masks_match_the_course_reference(rng):
    q, k, v = make(rng, 6, hkv=HQ)
    for mask_mod, score_mod in variants().values():
        if score_mod is not None:
            continue
        o, lse = ref.reference(q, k, v, mask_mod=mask_mod)
        dense = np.ones((TQ, TK), bool) if mask_mod is None else mods.mask_tile(
            mask_mod, 0, 0, np.arange(TQ), np.arange(TK))
        o_ref, lse_ref = dense_reference.attention_with_mask(q, k, v, dense)
        assert_close_to_reference(o, lse, o_ref, lse_ref, np.float64)
    o, lse = ref.reference(q, k, v, mask_mod=lib.causal(TQ, TK))
    assert_close_to_reference(o, lse, *dense_reference.attention(q, k, v, causal=True),
                              np.float64)
    top_left = dense_reference.attention_with_mask(q, k, v, causal_mask(TQ, TK,
                                                                        align="top-left"))
    assert_close_to_reference(*ref.reference(q, k, v, mask_mod=lib.causal(align="top-left")),
                              *top_left, np.float64)


def test_reference_score_mods_and_gqa_by_hand(rng):
    """ALiBi and softcap written out densely; GQA equals K/V copied per query head."""
    q, k, v = make(rng, 5)
    slopes = lib.alibi_slopes(HQ)
    kr, vr = np.repeat(k, HQ // HKV, axis=1), np.repeat(v, HQ // HKV, axis=1)   # copies
    s = (q @ np.swapaxes(kr, -1, -2)) / np.sqrt(5)                      # (B, HQ, TQ, TK)
    rel = np.arange(TK)[None, :] - np.arange(TQ)[:, None]
    for score_mod, s_mod in ((lib.alibi(slopes), s + slopes[None, :, None, None] * rel),
                             (lib.softcap(1.5), 1.5 * np.tanh(s / 1.5))):
        lse_ref = np.log(np.exp(s_mod).sum(-1))
        o_ref = np.exp(s_mod - lse_ref[..., None]) @ vr
        assert_close_to_reference(*ref.reference(q, k, v, score_mod=score_mod), o_ref,
                                  lse_ref, np.float64)


def test_sinks_rescale_the_output_and_join_the_logsumexp(rng):
    """A sink adds exp(sink) to each row's sum and nothing to its numerator:
    lse' = logaddexp(lse, sink), o' = o exp(lse - lse')."""
    q, k, v = make(rng, 4)
    sinks = rng.standard_normal(HQ) * 2
    mask = lib.sliding_window(3, TQ, TK, align="top-left")     # rows 0.. see few keys
    o, lse = ref.reference(q, k, v, mask_mod=mask)
    o_s, lse_s = ref.reference(q, k, v, mask_mod=mask, sinks=sinks)
    want = np.logaddexp(lse, sinks[None, :, None])
    np.testing.assert_allclose(lse_s, want, rtol=1e-13)
    np.testing.assert_allclose(o_s, o * np.exp(lse - want)[..., None], rtol=1e-12, atol=1e-15)


def test_rows_with_nothing_visible_are_zero_everywhere(rng):
    """Tq > Tk, bottom-right causal: the first Tq - Tk rows see no key: o = 0, lse = -inf,
    or lse = sink with a sink, on every path."""
    q, k, v = make(rng, 3, tq=20, tk=9)
    mask = lib.causal(20, 9)
    sinks = np.array([0.5, -1.0, 2.0, 0.0])
    for s in (None, sinks):
        o, lse = ref.reference(q, k, v, mask_mod=mask, sinks=s)
        for fwd in (tiled.forward, cpu.forward):
            o2, lse2 = fwd(q, k, v, block_mask=block(mask, 20, 9), sinks=s)
            assert np.all(o2[:, :, :11] == 0)
            want = -np.inf if s is None else np.broadcast_to(s[None, :, None], (B, HQ, 11))
            assert np.array_equal(lse2[:, :, :11], np.broadcast_to(want, (B, HQ, 11)))
            assert_close_to_reference(o2, lse2, o, lse, np.float64)
        assert np.all(o[:, :, :11] == 0)


# ---------------------------------------------------------------------------
# tiled and CPU paths against the reference
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(variants()))
def test_forward_paths_match_the_reference(rng, name, dtype):
    mask_mod, score_mod = variants()[name]
    q, k, v = make(rng, 7, dtype)
    sinks = rng.standard_normal(HQ)
    bm = block(mask_mod)
    for s in (None, sinks):
        o_ref, lse_ref = ref.reference(q, k, v, mask_mod=mask_mod, score_mod=score_mod,
                                       sinks=s)
        for fwd in (tiled.forward, cpu.forward):
            o, lse = fwd(q, k, v, block_mask=bm, score_mod=score_mod, sinks=s)
            assert o.dtype == dtype
            assert_close_to_reference(o, lse, o_ref, lse_ref, dtype)


@pytest.mark.parametrize("d", [1, 64, 80, 128, 33])
def test_head_dims_float32(rng, d):
    mask_mod, score_mod = lib.sliding_window(11, TQ, TK), lib.softcap(3.0)
    q, k, v = make(rng, d, np.float32)
    o_ref, lse_ref = ref.reference(q, k, v, mask_mod=mask_mod, score_mod=score_mod)
    for fwd in (tiled.forward, cpu.forward):
        o, lse = fwd(q, k, v, block_mask=block(mask_mod), score_mod=score_mod)
        assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


@pytest.mark.parametrize("hkv", [1, 2, 4])
def test_gqa_and_mqa_forward_and_backward(rng, hkv):
    q, k, v = make(rng, 5, hkv=hkv)
    do = rng.standard_normal(q.shape)
    mask_mod = lib.causal(TQ, TK)
    kr, vr = np.repeat(k, HQ // hkv, axis=1), np.repeat(v, HQ // hkv, axis=1)
    o, lse = cpu.forward(q, k, v, block_mask=block(mask_mod))
    assert_close_to_reference(o, lse, *ref.reference(q, kr, vr, mask_mod=mask_mod),
                              np.float64)
    dq_r, dk_r, dv_r, _ = ref.reference_backward(q, kr, vr, do, mask_mod=mask_mod)
    group = HQ // hkv
    for bwd in (tiled.backward, cpu.backward):
        dq, dk, dv, _ = bwd(q, k, v, o, lse, do, block_mask=block(mask_mod))
        assert dk.shape == k.shape and dv.shape == v.shape
        assert rel_err(dq, dq_r) < 1e-12
        for g, g_r in ((dk, dk_r), (dv, dv_r)):        # summed over the group's heads
            assert rel_err(g, g_r.reshape(B, hkv, group, TK, 5).sum(axis=2)) < 1e-12


# ---------------------------------------------------------------------------
# backward
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("bwd", [tiled.backward, cpu.backward], ids=["tiled", "cpu"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", sorted(variants()))
def test_backward_paths_match_the_reference(rng, name, dtype, bwd):
    mask_mod, score_mod = variants()[name]
    q, k, v = make(rng, 6, dtype)
    do = rng.standard_normal(q.shape).astype(dtype)
    sinks = rng.standard_normal(HQ)
    bm = block(mask_mod)
    o, lse = tiled.forward(q, k, v, block_mask=bm, score_mod=score_mod, sinks=sinks)
    got = bwd(q, k, v, o, lse, do, block_mask=bm, score_mod=score_mod, sinks=sinks)
    want = ref.reference_backward(q, k, v, do, mask_mod=mask_mod, score_mod=score_mod,
                                  sinks=sinks)
    for g, w, gname in zip(got, want, ("dq", "dk", "dv", "dsinks")):
        assert g.shape == w.shape, gname
        err = rel_err(g, w)
        assert err < GRAD_TOL[dtype], f"{gname}: {err:.3g}"


def test_reference_backward_matches_finite_differences():
    """Central differences of L = sum(o * do) against every gradient, sinks included,
    through a mask and a score_mod."""
    rng = np.random.default_rng(7)
    b, hq, hkv, tq, tk, d = 1, 2, 1, 5, 6, 3
    q = rng.standard_normal((b, hq, tq, d))
    k = rng.standard_normal((b, hkv, tk, d))
    v = rng.standard_normal((b, hkv, tk, d))
    do = rng.standard_normal(q.shape)
    sinks = rng.standard_normal(hq)
    mask_mod, score_mod = lib.sliding_window(2, tq, tk), lib.softcap(1.2)

    def loss(q_, k_, v_, s_):
        o, _ = ref.reference(q_, k_, v_, mask_mod=mask_mod, score_mod=score_mod, sinks=s_)
        return float((o * do).sum())
    grads = ref.reference_backward(q, k, v, do, mask_mod=mask_mod, score_mod=score_mod,
                                   sinks=sinks)
    args = [q, k, v, sinks]
    for n, g in enumerate(grads):
        fd = np.zeros_like(args[n])
        for idx in np.ndindex(args[n].shape):
            up, down = [a.copy() for a in args], [a.copy() for a in args]
            up[n][idx] += 1e-6
            down[n][idx] -= 1e-6
            fd[idx] = (loss(*up) - loss(*down)) / 2e-6
        assert np.max(np.abs(g - fd)) < 1e-6 * (1 + np.abs(fd).max()), n


def test_score_mod_grads_of_the_built_ins_match_finite_differences():
    for score_mod in (lib.softcap(0.7), lib.softcap(30.0), lib.alibi(lib.alibi_slopes(3))):
        assert mods.check_grad(score_mod, score_mod.score_mod_grad, h=2) < 1e-7


def test_softcap_stays_in_float32_when_compiled_and_float64_on_float64_scores():
    """The cap is a np.float32: Numba types score / cap and tanh in the scores' float32 (a
    Python float cap made the compiled kernels compute tanh in float64: 601 .f64 PTX
    instructions in the variants forward, 0 with the float32 cap); numpy keeps a float64
    score in float64, so the reference is unchanged."""
    import numba
    sm = lib.softcap(0.3)
    for f in (sm, sm.score_mod_grad):
        compiled = numba.njit(f)
        compiled(np.float32(0.25), 0, 0, 3, 2)
        assert compiled.nopython_signatures[0].return_type == numba.float32
        ref = f(np.float64(0.25), 0, 0, 3, 2)
        assert np.asarray(ref).dtype == np.float64
    c = np.float64(np.float32(0.3))
    assert sm(np.float64(0.25), 0, 0, 3, 2) == c * np.tanh(0.25 / c)


def test_a_wrong_score_mod_grad_is_caught():
    cap = lib.softcap(1.0)
    wrong = lambda score, b, h, q_idx, kv_idx: 1.0 + 0.0 * score     # noqa: E731
    assert mods.check_grad(cap, wrong) > 0.1


def test_user_score_mod_with_its_grad_and_without(rng):
    q, k, v = make(rng, 4)
    do = rng.standard_normal(q.shape)

    def square_bias(score, b, h, q_idx, kv_idx):
        return score - 0.01 * (q_idx - kv_idx) ** 2 + 0.1 * score * score

    def square_bias_grad(score, b, h, q_idx, kv_idx):
        return 1.0 + 0.2 * score
    assert mods.check_grad(square_bias, square_bias_grad) < 1e-7
    o, lse = cpu.forward(q, k, v, score_mod=square_bias)
    assert_close_to_reference(o, lse, *ref.reference(q, k, v, score_mod=square_bias),
                              np.float64)
    got = tiled.backward(q, k, v, o, lse, do, score_mod=square_bias,
                         score_mod_grad=square_bias_grad)
    want = ref.reference_backward(q, k, v, do, score_mod=square_bias,
                                  score_mod_grad=square_bias_grad)
    for g, w in zip(got[:3], want[:3]):
        assert rel_err(g, w) < 1e-10
    with pytest.raises(ValueError, match="score_mod_grad is needed"):
        tiled.backward(q, k, v, o, lse, do, score_mod=square_bias)


def test_a_mask_written_with_if_runs_element_by_element(rng):
    """A mask_mod that numpy cannot broadcast (an `if`) gives the same result, slower."""
    def plain(b, h, q_idx, kv_idx):
        if kv_idx > q_idx + 8:
            return False
        return True
    q, k, v = make(rng, 3)
    o, lse = cpu.forward(q, k, v, block_mask=block(plain))
    assert_close_to_reference(o, lse, *ref.reference(q, k, v, mask_mod=lib.causal(TQ, TK)),
                              np.float64)


def test_tolerances_are_the_course_ones():
    assert TOL[np.float32] == 1e-5 and TOL[np.float64] == 1e-12


def test_compiled_masks_agree_with_numpy_on_every_pair():
    """The Numba function of each built-in answers as its numpy evaluation, pair by pair
    (the kernels call the first on partial tiles, the block mask comes from the second)."""
    for name, (mask_mod, _) in variants().items():
        if mask_mod is None:
            continue
        fn = mods.compiled_mask(mask_mod)
        dense = mods.mask_tile(mask_mod, 1, 2, np.arange(TQ), np.arange(TK))
        got = np.array([[fn(1, 2, i, j) for j in range(TK)] for i in range(TQ)])
        assert np.array_equal(got, dense), name


def test_float16_inputs(rng):
    mask_mod, score_mod = lib.causal(TQ, TK), lib.softcap(5.0)
    q, k, v = make(rng, 8, np.float16)
    o_ref, lse_ref = ref.reference(q, k, v, mask_mod=mask_mod, score_mod=score_mod)
    for fwd in (tiled.forward, cpu.forward):
        o, lse = fwd(q, k, v, block_mask=block(mask_mod), score_mod=score_mod)
        assert o.dtype == np.float16
        assert_close_to_reference(o, lse, o_ref, lse_ref, np.float16)


@settings(max_examples=25)
@given(tq=st.integers(1, 24), tk=st.integers(1, 24), br=st.integers(1, 9),
       bc=st.integers(1, 9), d=st.integers(1, 6), hkv=st.sampled_from([1, 2, 4]),
       density=st.floats(0, 1), seed=st.integers(0, 2**16), softcap=st.booleans(),
       sinks=st.booleans())
def test_random_masks_all_paths_forward_and_backward(tq, tk, br, bc, d, hkv, density, seed,
                                                     softcap, sinks):
    r = np.random.default_rng(seed)
    pattern = r.random((tq, tk)) < density                            # (Tq, Tk)

    def random_mask(b, h, q_idx, kv_idx):
        return pattern[q_idx, kv_idx]
    q = r.standard_normal((1, HQ, tq, d))
    k = r.standard_normal((1, hkv, tk, d))
    v = r.standard_normal((1, hkv, tk, d))
    do = r.standard_normal(q.shape)
    kw = dict(score_mod=lib.softcap(1.3) if softcap else None,
              sinks=r.standard_normal(HQ) if sinks else None)
    bm = create_block_mask(random_mask, None, None, tq, tk, br, bc)
    o_ref, lse_ref = ref.reference(q, k, v, mask_mod=random_mask, **kw)
    grads_ref = ref.reference_backward(q, k, v, do, mask_mod=random_mask, **kw)
    for fwd, bwd in ((tiled.forward, tiled.backward), (cpu.forward, cpu.backward)):
        o, lse = fwd(q, k, v, block_mask=bm, **kw)
        assert_close_to_reference(o, lse, o_ref, lse_ref, np.float64)
        for g, w in zip(bwd(q, k, v, o, lse, do, block_mask=bm, **kw), grads_ref):
            if w is not None:
                assert np.max(np.abs(g - w)) <= 1e-10 * (1 + np.max(np.abs(w)))
