"""flashcourse.tiled.forward against the float64 reference.

Tolerances (relative, ||o - o_ref|| / ||o_ref||): float64 1e-12, float32 1e-5,
float16 inputs 1e-2 (see helpers.TOL).
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flashcourse import reference, tiled
from flashcourse.counter import TrafficCounter
from flashcourse.formats import round_to
from helpers import TOL, assert_close_to_reference, make_qkv, rel_err

dtypes = st.sampled_from([np.float64, np.float32, np.float16])


@settings(max_examples=300)
@given(tq=st.integers(1, 40), tk=st.integers(1, 40), d=st.integers(1, 9),
       bq=st.integers(1, 17), bk=st.integers(1, 17), causal=st.booleans(),
       dtype=dtypes, order=st.sampled_from(["fa1", "fa2"]),
       scale=st.one_of(st.none(), st.floats(0.05, 3.0)), seed=st.integers(0, 2**32 - 1))
def test_tiled_matches_reference(tq, tk, d, bq, bk, causal, dtype, order, scale, seed):
    rng = np.random.default_rng(seed)
    q, k, v = make_qkv(rng, (), tq, tk, d, dtype)
    o, lse = tiled.forward(q, k, v, block_q=bq, block_k=bk, causal=causal, scale=scale,
                           loop_order=order)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal, scale=scale)
    assert o.dtype == dtype
    assert lse.dtype == (np.float64 if dtype == np.float64 else np.float32)
    assert_close_to_reference(o, lse, o_ref, lse_ref, dtype, inputs=(q, k, v, causal, scale))


@pytest.mark.parametrize("order", ["fa1", "fa2"])
@pytest.mark.parametrize("causal", [False, True])
def test_batched_irregular(rng, order, causal):
    q, k, v = make_qkv(rng, (2, 3), 37, 53, 7, np.float32)
    o, lse = tiled.forward(q, k, v, block_q=16, block_k=10, causal=causal, loop_order=order)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
    assert o.shape == (2, 3, 37, 7) and lse.shape == (2, 3, 37)
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


def test_loop_orders_agree(rng):
    q, k, v = make_qkv(rng, (), 45, 31, 6)
    for causal in (False, True):
        a = tiled.forward(q, k, v, block_q=8, block_k=6, causal=causal, loop_order="fa1")
        b = tiled.forward(q, k, v, block_q=8, block_k=6, causal=causal, loop_order="fa2")
        assert rel_err(a[0], b[0]) < 1e-13
        assert np.allclose(a[1], b[1], rtol=1e-13, atol=0)


@pytest.mark.parametrize("order", ["fa1", "fa2"])
def test_fully_masked_rows(rng, order):
    q, k, v = make_qkv(rng, (), 20, 6, 3, np.float32)   # rows 0..13 see no key
    o, lse = tiled.forward(q, k, v, block_q=4, block_k=4, causal=True, loop_order=order)
    assert np.all(o[:14] == 0) and np.all(np.isneginf(lse[:14]))
    assert not np.isnan(o).any() and not np.isnan(lse).any()
    o_ref, lse_ref = reference.attention(q, k, v, causal=True)
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


def test_only_one_score_tile_and_hidden_tiles_skipped(rng):
    q, k, v = make_qkv(rng, (), 32, 32, 4)
    c = TrafficCounter()
    tiled.forward(q, k, v, block_q=8, block_k=8, causal=True, counter=c)
    computed = [e.tile for e in c.events if e.op == "compute"]
    skipped = [e.tile for e in c.events if e.op == "skip"]
    assert len(computed) == 10 and len(skipped) == 6       # 4x4 tiles, lower triangle
    assert all(j <= i for i, j in computed) and all(j > i for i, j in skipped)
    assert "S" not in c.by_tensor and "P" not in c.by_tensor  # no score ever stored


def test_counter_does_not_change_result(rng):
    q, k, v = make_qkv(rng, (2,), 29, 17, 5, np.float32)
    for order in ("fa1", "fa2"):
        plain = tiled.forward(q, k, v, block_q=6, block_k=7, causal=True, loop_order=order)
        counted = tiled.forward(q, k, v, block_q=6, block_k=7, causal=True, loop_order=order,
                                counter=TrafficCounter())
        assert np.array_equal(plain[0], counted[0]) and np.array_equal(plain[1], counted[1])


def test_scale_default_is_inverse_sqrt_d(rng):
    q, k, v = make_qkv(rng, (), 5, 5, 16)
    a = tiled.forward(q, k, v)
    b = tiled.forward(q, k, v, scale=0.25)
    assert np.array_equal(a[0], b[0])
    assert TOL  # tolerances are defined in helpers


# --- bad input --------------------------------------------------------------------

def good():
    return make_qkv(np.random.default_rng(0), (), 6, 5, 4, np.float32)


def test_bad_loop_order_and_counter():
    """The shared bad-input table is in test_contract.py; these are tiled's own options."""
    with pytest.raises(ValueError, match="loop_order"):
        tiled.forward(*good(), loop_order="fa3")
    with pytest.raises(TypeError, match="counter must be a flashcourse.counter.TrafficCounter"):
        tiled.forward(*good(), counter="x")
    with pytest.raises(TypeError, match="counter must be"):
        q, k, v = good()
        tiled.backward(q, k, v, q, np.zeros(6, np.float32), q, counter=1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nonfinite_inputs_rejected_unless_allowed(bad):
    q, k, v = good()
    k[1, 2] = bad
    with pytest.raises(ValueError, match="k contains NaN or inf"):
        tiled.forward(q, k, v)
    with pytest.raises(ValueError, match="k contains NaN or inf"):
        reference.attention(q, k, v)
    o, _ = tiled.forward(q, k, v, allow_nonfinite=True)   # allowed: computes, no error
    assert o.shape == q.shape


# --- the lazy rescale (rescale_threshold): the Hopper kernel's FlashAttention-4 trick ---

@settings(max_examples=150)
@given(tq=st.integers(1, 40), tk=st.integers(1, 60), d=st.integers(1, 9),
       bq=st.integers(1, 17), bk=st.integers(1, 17), causal=st.booleans(),
       t=st.sampled_from([0.5, 1.0, 8.0, 20.0]), rising=st.booleans(),
       scale=st.one_of(st.none(), st.floats(0.05, 3.0)), seed=st.integers(0, 2**32 - 1))
def test_the_lazy_rescale_is_exact(tq, tk, d, bq, bk, causal, t, rising, scale, seed):
    rng = np.random.default_rng(seed)
    q, k, v = make_qkv(rng, (), tq, tk, d, np.float64)
    if rising:                        # scores that climb along the keys: the max moves often
        k = k * (1 + 4 * np.arange(tk) / tk)[:, None]
    o, lse = tiled.forward(q, k, v, block_q=bq, block_k=bk, causal=causal, scale=scale,
                           rescale_threshold=t)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal, scale=scale)
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float64,
                              inputs=(q, k, v, causal, scale))


@pytest.mark.parametrize("fmt", ["fp16", "bf16"])
@pytest.mark.parametrize("scale", [0.125, 0.4, 3.0])
def test_the_lazy_rescale_costs_little_accuracy_in_16_bits(rng, fmt, scale):
    # what it gives up: the row's largest weight is no longer P = 1 exactly (a stale max
    # makes it 2^x, rounded); with P and o rounded to 16 bits, as the kernel does, the
    # numpy model measured at most 1.28x every block's error (rising maxima, d = 64)
    q, k, v = make_qkv(rng, (2,), 200, 700, 64, np.float64)
    k = k * (1 + 4 * np.arange(700) / 700)[:, None]
    o_ref, _ = reference.attention(q, k, v, scale=scale)
    errs = [rel_err(round_to(tiled.forward(q, k, v, block_k=80, scale=scale, p_format=fmt,
                                           rescale_threshold=t)[0], fmt), o_ref)
            for t in (0.0, 8.0)]
    assert errs[1] <= 1.5 * errs[0]


def test_rescale_counts_on_a_row_by_hand():
    # scale = ln 2 makes the scores the keys themselves in log2 units: 0, 5, 6, 20, 28
    q = np.ones((1, 1))
    k = np.array([[0.0], [5.0], [6.0], [20.0], [28.0]])
    every = tiled.rescale_counts(q, k, block_k=1, scale=np.log(2.0))
    lazy = tiled.rescale_counts(q, k, block_k=1, scale=np.log(2.0), rescale_threshold=8)
    assert every == {"blocks": 4, "rescales": 4, "max_p_log2": 0.0}
    # kept max 0 through 5 and 6 (P = 2^5, 2^6); 20 > 0 + 8 moves it; 28 = 20 + 8 does not
    assert lazy == {"blocks": 4, "rescales": 1, "max_p_log2": 8.0}


def test_rescale_counts_bound_p_and_cut_the_rescales(rng):
    q, k, _ = make_qkv(rng, (2,), 128, 1000, 32, np.float64)
    k = k * (1 + 4 * np.arange(1000) / 1000)[:, None]
    every = tiled.rescale_counts(q, k, block_k=64, causal=True)
    lazy = tiled.rescale_counts(q, k, block_k=64, causal=True, rescale_threshold=8)
    assert every["max_p_log2"] == 0.0 and 0 < lazy["max_p_log2"] <= 8.0
    assert every["blocks"] == lazy["blocks"]
    assert lazy["rescales"] < every["rescales"] / 2


def _big_v_problem(dtype, v_size):
    """issue 50 item 6: scores 0 (key block 0) and 43 (key block 1 of tiled.forward's
    default block_k = 64) with scale = 1, and |v| = v_size."""
    q = np.array([[1.0, 0.0]], dtype)                  # (Tq = 1, d = 2)
    k = np.zeros((128, 2), dtype)                      # (Tk = 128, d): keys 0..63 score 0
    k[64:, 0] = 43.0                                   # keys 64..127 score 43
    v = np.full((128, 2), v_size, dtype)
    v[64:, 1] = -v_size
    return q, k, v


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_lazy_rescale_keeps_a_huge_v_finite(dtype):
    """v = 1e20 and scores 0 then 43 with rescale_threshold = 64: a kept max of 0 makes
    P = e^43 = 4.7e18, and P V (64 keys of 1e20) passed float32's 3.4e38, refused as
    "the attention scores overflow". The threshold is lowered where 2^t Tk max|v| would
    not fit (`tiled.lazy_room`): the result is the reference's (float32 1e-5)."""
    q, k, v = _big_v_problem(dtype, 1e20)
    assert tiled.forward(q, k, v, scale=1.0)[0].shape == (1, 2)     # no lazy: fine
    o, lse = tiled.forward(q, k, v, scale=1.0, rescale_threshold=64)
    o_ref, lse_ref = reference.attention(q, k, v, scale=1.0)
    assert rel_err(o, o_ref) < TOL[dtype] and rel_err(lse, lse_ref) < TOL[dtype]
    # ordinary values keep the full threshold: the same rescales as rescale_counts says
    assert tiled.lazy_room(v / 1e20, 64 * np.log(2.0), np.float32) == 64 * np.log(2.0)


def test_the_lazy_rescale_still_refuses_a_genuine_overflow():
    """Scores beyond float32 (|q.k| ~ 1e40) and a weighted sum that overflows even with
    every block rescaling (two keys of 3e38, P = 1 each) raise as without the lazy
    rescale."""
    q = np.full((2, 3), 1e20, np.float32)
    with pytest.raises(ValueError, match="the attention scores overflow float32"):
        tiled.forward(q, q, q, scale=1.0, rescale_threshold=64)
    q, k, v = _big_v_problem(np.float32, 3e38)
    k[64:, 0] = 0.0                                    # every score 0: P = 1
    for t in (0.0, 64.0):
        with pytest.raises(ValueError, match="overflow float32"):
            tiled.forward(q, k, v, scale=1.0, rescale_threshold=t)


@pytest.mark.parametrize("bad", [-1.0, 65.0, True, "8", float("nan")])
def test_a_bad_rescale_threshold_is_refused_by_name(bad):
    q = np.ones((4, 2))
    with pytest.raises(ValueError, match="rescale_threshold"):
        tiled.forward(q, q, q, rescale_threshold=bad)
    with pytest.raises(ValueError, match="rescale_threshold"):
        tiled.rescale_counts(q, q, rescale_threshold=bad)


def test_the_lazy_rescale_needs_the_fa2_order():
    q = np.ones((4, 2))
    with pytest.raises(ValueError, match="loop_order='fa1'"):
        tiled.forward(q, q, q, loop_order="fa1", rescale_threshold=8)
