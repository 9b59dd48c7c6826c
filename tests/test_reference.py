"""The float64 reference against an independent per-row implementation, and the softmax steps."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashcourse import reference as ref
from helpers import make_qkv, rel_err


def per_row_attention(q, k, v, causal, scale):
    """Independent check: one query row at a time with math.exp, pure Python floats."""
    tq, d = q.shape
    tk = k.shape[0]
    o = np.zeros((tq, d))
    lse = np.full(tq, -np.inf)
    for i in range(tq):
        keys = [j for j in range(tk) if not causal or j <= i + tk - tq]
        if not keys:
            continue
        s = [scale * float(np.dot(q[i], k[j])) for j in keys]
        mx = max(s)
        w = [math.exp(x - mx) for x in s]
        tot = sum(w)
        lse[i] = mx + math.log(tot)
        o[i] = sum(wj * v[j] for wj, j in zip(w, keys)) / tot
    return o, lse


@pytest.mark.parametrize("tq,tk,d,causal", [(1, 1, 1, False), (5, 7, 3, True), (7, 5, 3, True),
                                             (9, 9, 4, True), (6, 11, 5, False)])
def test_reference_matches_per_row(rng, tq, tk, d, causal):
    q, k, v = make_qkv(rng, (), tq, tk, d)
    o, lse = ref.attention(q, k, v, causal=causal)
    o2, lse2 = per_row_attention(q, k, v, causal, 1 / math.sqrt(d))
    assert rel_err(o, o2) < 1e-13
    assert np.array_equal(np.isneginf(lse), np.isneginf(lse2))
    fin = np.isfinite(lse2)
    assert np.allclose(lse[fin], lse2[fin], rtol=1e-13, atol=1e-13)


def test_reference_batch_dims_and_dtype(rng):
    q, k, v = make_qkv(rng, (2, 3), 4, 6, 5, dtype=np.float32)
    o, lse = ref.attention(q, k, v)
    assert o.shape == (2, 3, 4, 5) and lse.shape == (2, 3, 4)
    assert o.dtype == np.float64 and lse.dtype == np.float64
    o1, lse1 = ref.attention(q[1, 2], k[1, 2], v[1, 2])
    assert np.array_equal(o[1, 2], o1) and np.array_equal(lse[1, 2], lse1)


def test_fully_masked_rows_give_zero_and_minus_inf(rng):
    q, k, v = make_qkv(rng, (), 6, 3, 4)          # Tq > Tk: first 3 rows see nothing
    o, lse = ref.attention(q, k, v, causal=True)
    assert np.all(o[:3] == 0) and np.all(np.isneginf(lse[:3]))
    assert np.all(np.isfinite(lse[3:])) and not np.isnan(o).any()


def test_extreme_logits_stay_finite():
    q = np.array([[100.0, 0.0], [-100.0, 0.0]])
    k = np.array([[100.0, 0.0], [-100.0, 0.0], [0.0, 1.0]])   # scores +-1e4 with scale 1
    v = np.eye(3, 2)
    o, lse = ref.attention(q, k, v, scale=1.0)
    assert np.all(np.isfinite(o)) and np.all(np.isfinite(lse))
    assert np.allclose(o[0], v[0]) and math.isclose(lse[0], 1e4)


def test_known_value():
    # one query, two keys with scores 0 and log 3 -> weights 1/4, 3/4
    q = np.array([[1.0]])
    k = np.array([[0.0], [math.log(3)]])
    v = np.array([[4.0], [8.0]])
    o, lse = ref.attention(q, k, v, scale=1.0)
    assert math.isclose(o[0, 0], 7.0) and math.isclose(lse[0], math.log(4))


# --- softmax steps ---------------------------------------------------------------

floats = st.floats(-50, 50, allow_nan=False)


@given(st.lists(floats, min_size=1, max_size=40))
def test_safe_and_online_agree_with_definition(xs):
    x = np.array(xs)
    expected = np.exp(x - x.max()) / np.exp(x - x.max()).sum()
    assert np.allclose(ref.softmax_safe(x), expected, rtol=1e-12, atol=0)
    assert np.allclose(ref.online_softmax(x), expected, rtol=1e-12, atol=0)
    m, l = ref.online_softmax_stats(x)
    assert m == x.max()
    assert math.isclose(m + math.log(l), ref.logsumexp(x), rel_tol=1e-12, abs_tol=1e-12)


@given(st.lists(floats, min_size=1, max_size=30), st.lists(floats, min_size=1, max_size=30))
def test_merge_of_two_parts_equals_whole(a, b):
    whole = ref.online_softmax_stats(np.array(a + b))
    merged = ref.merge_states(ref.online_softmax_stats(np.array(a)),
                              ref.online_softmax_stats(np.array(b)))
    assert merged.m == whole.m
    assert math.isclose(merged.l, whole.l, rel_tol=1e-12)
    swapped = ref.merge_states(ref.online_softmax_stats(np.array(b)),
                               ref.online_softmax_stats(np.array(a)))
    assert math.isclose(swapped.l, whole.l, rel_tol=1e-12)


def test_merge_with_empty_state_is_identity():
    s = ref.online_softmax_stats(np.array([1.0, 2.0]))
    assert ref.merge_states(ref.EMPTY_STATE, s) == s
    assert ref.merge_states(ref.EMPTY_STATE, ref.EMPTY_STATE) == ref.EMPTY_STATE


@pytest.mark.parametrize("dtype,big", [(np.float16, 12.0), (np.float32, 89.0)])
def test_naive_overflows_where_safe_does_not(dtype, big):
    x = np.array([big, 0.0, -1.0], dtype=dtype)
    with np.errstate(all="ignore"):
        naive = ref.softmax_naive(x)
    assert np.isnan(naive).any()
    safe = ref.softmax_safe(x)
    assert np.all(np.isfinite(safe)) and math.isclose(float(safe.sum()), 1.0, rel_tol=1e-2)


def test_all_masked_row_softmax_is_zero():
    x = np.full(4, -np.inf)
    assert np.all(ref.softmax_safe(x) == 0)
    assert np.all(ref.online_softmax(x) == 0)
    assert ref.online_softmax_stats(x) == ref.EMPTY_STATE


@pytest.mark.parametrize("bad,exc", [([1.0, 2.0], TypeError), (np.array([1, 2]), TypeError),
                                     (np.array([]), ValueError),
                                     (np.array([np.nan]), ValueError)])
def test_softmax_bad_input(bad, exc):
    with pytest.raises(exc, match="x"):
        ref.softmax_safe(bad)
