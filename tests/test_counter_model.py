"""The byte counter proves the IO model: instrumented forwards move exactly the bytes that
flashcourse.traffic predicts (integer equality, no tolerance), and counting never changes
the numbers they compute (bitwise equality).

Accuracy of the dense path against the float64 reference: relative error within
helpers.TOL (float64 1e-12, float32 1e-5, float16 1e-2)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashcourse import dense, reference, tiled
from flashcourse.counter import TrafficCounter
from flashcourse.geometry import visible_tile_count
from flashcourse.traffic import dense_traffic, tiled_traffic
from helpers import assert_close_to_reference, make_qkv

dtypes = st.sampled_from([np.float16, np.float32, np.float64])


@given(tq=st.integers(1, 48), tk=st.integers(1, 48), d=st.integers(1, 9),
       bq=st.integers(1, 17), bk=st.integers(1, 17), causal=st.booleans(),
       order=st.sampled_from(["fa1", "fa2"]), dtype=dtypes, heads=st.integers(1, 3),
       seed=st.integers(0, 2**32 - 1))
def test_tiled_counter_equals_model(tq, tk, d, bq, bk, causal, order, dtype, heads, seed):
    q, k, v = make_qkv(np.random.default_rng(seed), (heads,), tq, tk, d, dtype)
    c = TrafficCounter()
    o, lse = tiled.forward(q, k, v, block_q=bq, block_k=bk, causal=causal,
                           loop_order=order, counter=c)
    model = tiled_traffic(tq, tk, d, bq, bk, causal=causal, loop_order=order,
                          bytes_per_element=np.dtype(dtype).itemsize)
    assert c.read_bytes == heads * model.read_bytes
    assert c.write_bytes == heads * model.write_bytes
    assert c.total_bytes == heads * model.total_bytes
    computed = sum(ev.op == "compute" for ev in c.events)
    assert computed == heads * visible_tile_count(tq, tk, bq, bk, causal=causal)
    o2, lse2 = tiled.forward(q, k, v, block_q=bq, block_k=bk, causal=causal, loop_order=order)
    assert np.array_equal(o, o2) and np.array_equal(lse, lse2)


@given(tq=st.integers(1, 48), tk=st.integers(1, 48), d=st.integers(1, 9),
       causal=st.booleans(), dtype=dtypes, heads=st.integers(1, 3),
       s=st.one_of(st.none(), st.sampled_from([1, 2, 4])), seed=st.integers(0, 2**32 - 1))
def test_dense_counter_equals_model(tq, tk, d, causal, dtype, heads, s, seed):
    q, k, v = make_qkv(np.random.default_rng(seed), (heads,), tq, tk, d, dtype)
    c = TrafficCounter(bytes_per_score=s)
    o, lse = dense.forward(q, k, v, causal=causal, counter=c)
    e = np.dtype(dtype).itemsize
    model = dense_traffic(tq, tk, d, bytes_per_element=e,
                          bytes_per_score=e if s is None else s)
    assert (c.read_bytes, c.write_bytes) == (heads * model.read_bytes,
                                             heads * model.write_bytes)
    o2, lse2 = dense.forward(q, k, v, causal=causal)
    assert np.array_equal(o, o2) and np.array_equal(lse, lse2)
    o_ref, lse_ref = reference.attention(q, k, v, causal=causal)
    assert_close_to_reference(o, lse, o_ref, lse_ref, dtype, inputs=(q, k, v, causal, None))


def test_counter_element_size_override_matches_model():
    # count float32 arrays as if they were fp8 (e = 1): the model follows the counter's e
    q, k, v = make_qkv(np.random.default_rng(1), (), 29, 41, 5, np.float32)
    for order in ("fa1", "fa2"):
        c = TrafficCounter(bytes_per_element=1)
        tiled.forward(q, k, v, block_q=8, block_k=6, causal=True, loop_order=order, counter=c)
        m = tiled_traffic(29, 41, 5, 8, 6, causal=True, loop_order=order, bytes_per_element=1)
        assert (c.read_bytes, c.write_bytes) == (m.read_bytes, m.write_bytes)


@pytest.mark.parametrize("order", ["fa1", "fa2"])
def test_per_tensor_breakdown(order):
    # Tq=10, Tk=7, d=3, Br=4, Bc=3 (both ragged), float16 (e=2), non-causal
    q, k, v = make_qkv(np.random.default_rng(2), (), 10, 7, 3, np.float16)
    c = TrafficCounter()
    tiled.forward(q, k, v, block_q=4, block_k=3, loop_order=order, counter=c)
    tr_blocks, tc_blocks = 3, 3
    if order == "fa2":
        assert c.by_tensor["Q"] == (10 * 3 * 2, 0)
        assert c.by_tensor["K"] == c.by_tensor["V"] == (tr_blocks * 7 * 3 * 2, 0)
        assert c.by_tensor["O"] == (0, 10 * 3 * 2)
        assert c.by_tensor["lse"] == (0, 10 * 4)
    else:
        assert c.by_tensor["K"] == c.by_tensor["V"] == (7 * 3 * 2, 0)
        assert c.by_tensor["Q"] == (tc_blocks * 10 * 3 * 2, 0)
        assert c.by_tensor["O"] == (tc_blocks * 10 * 3 * 2, (1 + tc_blocks) * 10 * 3 * 2)
        assert c.by_tensor["m"] == c.by_tensor["l"] == (tc_blocks * 40, (1 + tc_blocks) * 40)


def test_dense_breakdown_has_score_matrix_four_times():
    q, k, v = make_qkv(np.random.default_rng(3), (), 12, 9, 4, np.float16)
    c = TrafficCounter()
    dense.forward(q, k, v, counter=c)
    assert c.by_tensor["S"] == c.by_tensor["P"] == (12 * 9 * 2, 12 * 9 * 2)
    assert [ev.tensor for ev in c.events] == ["Q", "K", "S", "S", "P", "P", "V", "O"]


def test_dense_fully_masked_rows_and_extremes():
    q, k, v = make_qkv(np.random.default_rng(4), (), 20, 6, 3, np.float32)
    o, lse = dense.forward(q, k, v, causal=True)          # rows 0..13 see no key
    assert np.all(o[:14] == 0) and np.all(np.isneginf(lse[:14]))
    assert not np.isnan(o).any()
    o_ref, lse_ref = reference.attention(q, k, v, causal=True)
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)
    # scores of ~1e4: stable because pass 2 subtracts the row max
    q = q / np.linalg.norm(q, axis=-1, keepdims=True) * 100
    k = k / np.linalg.norm(k, axis=-1, keepdims=True) * 100
    o, lse = dense.forward(q, k, v, scale=1.0)
    o_ref, lse_ref = reference.attention(q, k, v, scale=1.0)
    assert np.abs(lse_ref).max() > 5e3
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


def test_dense_float16_score_overflow_is_an_error():
    q = np.full((2, 4), 100.0, dtype=np.float16)     # score 4 * 100 * 100 = 40000 * scale 2
    with pytest.raises(FloatingPointError, match="overflows"):
        dense.forward(q, q, q, scale=2.0)


def test_dense_validates_like_tiled():
    q = np.zeros((3, 4))
    with pytest.raises(TypeError, match="causal"):
        dense.forward(q, q, q, causal="yes")
    with pytest.raises(ValueError, match="head dim"):
        dense.forward(q, np.zeros((3, 5)), q)
